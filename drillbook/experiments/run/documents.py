"""A job's result document (:mod:`~drillbook.experiments.results.files`): the document
of a row that trained (:func:`result_doc`), of one that could not end normally
(:func:`failure_doc`, :func:`raised_doc`), and its parts: how the row was run
(:func:`execution`), its stopping rule (:func:`plateau_block`), its learning curve
(its task's, :meth:`~drillbook.train.tasks.registry.Task.curve`)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ...atomic import write_json
from ...heads import HEADS
from ...precision import precision_label, resolve_precision
from ...provenance import device_name
from ...runtime import resolve_device
from ...train.distributed import rank_and_world_size
from ...train.loop import TrainingLoop
from ...train.plateau import rule_of
from ...train.run_files import LOG, read_log
from ...train.tasks import task_of
from ...train.ways import Way
from ..bench.measure import is_out_of_memory
from ..results import RESULT_FORMAT, write_result
from ..results.fingerprint import training_fingerprint
from ..results.schema import SITTING
from ..tables import Row
from .jobs import Job

__all__ = ["ALONE", "WAYS", "earlier_finetuned", "execution", "failure_doc",
           "plateau_block", "raised_doc", "record_sittings", "result_doc", "result_status",
           "sittings", "write_doc"]


def failure_doc(job: Job, source: dict, *, status: str, error: str, device: str | None,
                seconds: float, run_dir: Path, budget_minutes: float | None,
                execution: dict | None = None) -> dict:
    """The result document of a job that could not end normally (``status`` ``failed``,
    ``out-of-memory`` or ``deadline``, why in ``error``): what it was, and the epochs its
    run folder's log recorded before it stopped."""
    config = job.config
    dev = resolve_device(device)
    log = read_log(run_dir) if (run_dir / LOG).exists() else []
    return {
        "format": RESULT_FORMAT, "table": job.table, "row": job.row.name,
        "config_name": config.name, "config": config.to_dict(), "config_hash": config.hash(),
        "seed": config.train.seed, "git_commit": source["commit"],
        "git_dirty": source["dirty"], "device": device_name(dev), "torch": torch.__version__,
        "cuda": torch.version.cuda, "status": status, "error": error,
        "epochs_done": len(log), "steps_done": log[-1]["step"] if log else 0,
        "wall_seconds": round(seconds, 1), "budget_minutes": budget_minutes,
        "precision": precision_label(resolve_precision(
            config.train.amp, dev, mixture=HEADS[config.head.kind].is_mixture)),
        "metrics": {}, "curve": task_of(config).curve(log), **plateau_block(config, reached=False),
        "fingerprint": training_fingerprint(config),
        **({"execution": execution} if execution else {}),
    }


def raised_doc(job: Job, err: BaseException, source: dict, *, device: str | None,
               seconds: float, run_dir: Path, budget_minutes: float | None,
               execution: dict | None = None) -> dict:
    """:func:`failure_doc` of a job that raised ``err``: status ``out-of-memory`` or
    ``failed``, the error on one line."""
    status = "out-of-memory" if is_out_of_memory(err) else "failed"
    return failure_doc(job, source, status=status, error=_one_line(err), device=device,
                       seconds=seconds, run_dir=run_dir, budget_minutes=budget_minutes,
                       execution=execution)


def _one_line(err: BaseException) -> str:
    """An error's message on one line, with its class (at most 300 characters)."""
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text}"[:300]


def result_status(reason: str) -> str:
    """A result file's status for a :class:`~drillbook.train.RunStatus` reason."""
    return "budget" if reason in ("budget", "steps") else reason


#: the file in a run folder that lists the sittings its checkpoint was trained in: it
#: travels with ``last.pt``, so a row continued into another results folder keeps them
SITTINGS = "sittings.json"


def sittings(path: Path, job: Job, sitting: dict, run_dir: Path | None = None
             ) -> list[dict]:
    """A result file's ``sittings``: where and with which code each stretch of a row's
    training ran, oldest first, ``sitting`` (this one) last. A row resumed from its
    checkpoint (``sitting["epochs"][0] > 1``) keeps the earlier sittings (those that end
    before this one begins) that its run folder ``run_dir`` recorded
    (:func:`record_sittings`), or else those of its earlier result file at ``path``; an
    earlier file that predates the list gives one sitting made of its own provenance,
    which covers every epoch before this one and is marked ``partial``: such a file kept
    its last sitting's commit, device and budget only. A row trained from its first epoch
    has this sitting alone."""
    first = sitting["epochs"][0]
    if first == 1:
        return [sitting]
    ours = (job.row.name, job.seed)
    for source in ([run_dir / SITTINGS] if run_dir is not None else []) + [path]:
        earlier = _json_object(source)
        if earlier is None or (earlier.get("row"), earlier.get("seed")) != ours:
            continue
        if "sittings" in earlier:
            return [s for s in earlier["sittings"] if s["epochs"][1] < first] + [sitting]
        if source == path:
            before = {**{key: earlier.get(key) for key in SITTING}, "epochs": [1, first - 1],
                      **({"execution": earlier["execution"]} if "execution" in earlier
                         else {}),
                      "partial": True}  # the file's top-level provenance, same names
            return [before, sitting]
    return [sitting]


def record_sittings(run_dir: Path, job: Job, stretches: list[dict]) -> Path:
    """Write ``stretches`` (:func:`sittings`) into the run folder, beside the checkpoint
    they trained, for the sitting that continues it (by rank 0 alone, as :func:`write_doc`)."""
    if rank_and_world_size()[0] != 0:
        return Path(run_dir) / SITTINGS
    return write_json(Path(run_dir) / SITTINGS,
                      {"row": job.row.name, "seed": job.seed, "sittings": stretches})


def _json_object(path: Path) -> dict | None:
    """The JSON object in ``path``; ``None`` where there is no such file (a file that is
    not JSON raises: both are written whole, so it means something else broke them)."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return doc if isinstance(doc, dict) else None


def earlier_finetuned(path: Path) -> dict | None:
    """The ``finetuned`` block an earlier call wrote to ``path``, if any."""
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("finetuned")


def result_doc(table: str, row: Row, config, trainer: TrainingLoop, source: dict, *,
                status: str, epochs_done: int, budget_minutes: float | None, metrics: dict,
                curve: list) -> dict:
    """The result document of one row (:mod:`~drillbook.experiments.results.files`): what
    was run, where, with which code, how far it got and what it measured. The papers'
    numbers are not copied in: the report reads them from the record when it shows the
    row."""
    return {
        "format": RESULT_FORMAT, "table": table, "row": row.name,
        "config_name": config.name, "config": config.to_dict(), "config_hash": config.hash(),
        "seed": config.train.seed, "git_commit": source["commit"],
        "git_dirty": source["dirty"], "device": device_name(trainer.device),
        "torch": torch.__version__, "cuda": torch.version.cuda, "status": status,
        "epochs_done": epochs_done, "steps_done": trainer.step,
        "wall_seconds": round(trainer.elapsed, 1), "budget_minutes": budget_minutes,
        "precision": precision_label(trainer.precision), "world_size": trainer.world_size,
        "metrics": metrics, "curve": curve,
        **plateau_block(config, reached=status == "plateau"),
        "fingerprint": training_fingerprint(config),
    }


#: how a row was run (a result file's ``execution``): ``way`` (``process``: a process of
#: its own, ``process-mps``: such a process under an MPS daemon, ``graphs-on-streams`` or
#: ``interleaved-eager``: with other rows in one process, :mod:`drillbook.train.interleaver`),
#: ``rows`` (the rows sharing its device, itself included) and ``graphed`` (its steps
#: replayed from CUDA graphs); the ways' words are :class:`~drillbook.train.ways.Way`'s
WAYS = tuple(way.value for way in Way.records())


def execution(way: str = Way.PROCESS, rows: int = 1, graphed: bool = False) -> dict:
    """A result file's ``execution`` block (:data:`WAYS`)."""
    if way not in WAYS:
        raise ValueError(f"way must be one of {WAYS}, got {way!r}")
    return {"way": Way(way).value, "rows": int(rows), "graphed": bool(graphed)}


#: a row alone in a process of its own (what ``reproduce`` without ``--parallel`` does)
ALONE = execution(Way.PROCESS)


def plateau_block(config, *, reached: bool) -> dict:
    """``{"plateau": {...}}`` for a result document of a row trained to its plateau
    (``train.plateau_epochs``): the rule, in numbers and words, and whether it ended the
    row (False: the row's epochs, its budget or the deadline came first); ``{}`` for a
    row without a stopping rule."""
    rule = rule_of(config.train, task_of(config).trainer.higher_is_better)
    if rule is None:
        return {}
    return {"plateau": {**rule.as_dict(), "rule": rule.describe(), "reached": reached}}


def write_doc(path: Path, doc: dict) -> Path:
    """:func:`write_result`, by rank 0 alone when ``torchrun`` started several
    processes (the others trained beside it)."""
    if rank_and_world_size()[0] != 0:
        return Path(path)
    return write_result(path, doc)
