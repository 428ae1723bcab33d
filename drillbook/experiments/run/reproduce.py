"""Reproduce the papers' tables row by row, at a stated budget, resumably.

``drillbook reproduce TABLE`` trains every row of a table
(:data:`~drillbook.experiments.tables.TABLES`) into ``runs/<table>/<row>/`` and writes
``results/<table>/<row>.json`` (:mod:`~drillbook.experiments.results`) when the row
finishes or its budget runs out; run again, every interrupted row resumes from its last
checkpoint. A row whose paper number is after AWD-LSTM's fine-tuning stage is fine-tuned
within the same budget once its main run is done, and its result file records both stages
(compare like with like).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...analysis import rank_of
from ...configs import finetune_lr
from ...errors import ConfigError, RunFolderError, TrainingInterrupted
from ...heads import HEADS
from ...precision import precision_label, resolve_precision
from ...provenance import device_name, git_state
from ...runtime import resolve_device
from ...train.distributed import rank_and_world_size
from ...train.loop import RunStatus, TrainingLoop
from ...train.plateau import rule_of
from ...train.runs import BEST, LOG, has_checkpoint, in_use, read_log
from ...train.tasks import Task, task_of
from ...validation import SEED, as_list, check_choice, is_integer
from ..bench.measure import free_memory, is_out_of_memory
from ..results import RESULT_FORMAT, write_result
from ..results.analyses import result_analyses
from ..results.files import FINAL_STATUSES
from ..results.fingerprint import training_fingerprint
from ..results.seeds import SEED_FOLDER
from ..tables import TABLES, Row

__all__ = ["ALONE", "WAYS", "Job", "execution", "failure_doc", "finish_job", "plateau_block",
           "raised_doc", "reproduce", "table_jobs", "table_rank_cap"]


@dataclass(frozen=True)
class Job:
    """One run of a table: a row, trained with its config's seed or another one.

    Attributes:
        table, row: what is run.
        seed: the seed it trains with.
        folder: ``<table>``, or ``<table>/seed-<seed>`` for a seed other than the
            config's (its result file then sits beside the row's own).
        config: the resolved config (the row's overrides, the caller's, the seed).
    """

    table: str
    row: Row
    seed: int
    folder: str
    config: Any

    @property
    def name(self) -> str:
        """``drill-4``, or ``drill-4 seed 142`` for another seed."""
        return self.row.name + ("" if self.folder == self.table else f" seed {self.seed}")

    def run_dir(self, runs: str | Path) -> Path:
        return Path(runs) / self.folder / self.row.name

    def result_path(self, out: str | Path) -> Path:
        return Path(out) / self.folder / f"{self.row.name}.json"


def table_jobs(table: str, rows: Sequence[str] | None = None,
               seeds: int | Sequence[int] | None = None,
               overrides: Sequence[str] = ()) -> list[Job]:
    """The runs of ``table``: its rows (or those named), each with every seed of ``seeds``
    (None: the config's own), in table order, row by row.

    Raises:
        ConfigError: an unknown table or row (the message lists the valid ones), or a row
            that asks its task for a stage it has not: fine-tuning, dynamic evaluation or a
            rank (:attr:`~drillbook.train.tasks.Task.finetunes`,
            :attr:`~drillbook.train.tasks.Task.streams`).
    """
    check_choice(table, sorted(TABLES), "table")
    overrides = as_list(overrides, "overrides", " of key=value strings")
    spec = TABLES[table]
    chosen = list(spec)
    if rows is not None:
        rows = as_list(rows, "rows", " of row names")
    if rows:
        names = {r.name for r in chosen}
        unknown = sorted(set(rows) - names)
        if unknown:
            raise ConfigError(f"unknown row(s) {unknown} in {table!r}; rows: {sorted(names)}")
        chosen = [r for r in chosen if r.name in rows]
    wanted = [seeds] if is_integer(seeds) or seeds is None else as_list(seeds, "seeds")
    wanted = [seed if seed is None else SEED.check(seed, "seed") for seed in wanted]
    jobs = []
    for row in chosen:
        config = row.resolve(overrides)
        _check_stages(table, row, task_of(config), rank=spec.rank)
        # each seed once: "--seed 7 7" (or the config's own seed named again) trains once
        for seed in dict.fromkeys(config.train.seed if s is None else s for s in wanted):
            if seed == config.train.seed:
                jobs.append(Job(table, row, config.train.seed, table, config))
            else:
                jobs.append(Job(table, row, seed, f"{table}/{SEED_FOLDER}{seed}",
                                row.resolve([*overrides, f"train.seed={seed}"])))
    return jobs


def _check_stages(table: str, row: Row, task: Task, *, rank: bool) -> None:
    """Refuse a row whose stages its task has not (before anything trains)."""
    asks = [(what, has) for what, wanted, has in (
        ("fine-tuning", row.finetunes, task.finetunes),
        ("dynamic evaluation", row.paper_dynamic is not None, task.streams),
        ("a rank", rank, task.streams)) if wanted]
    missing = [what for what, has in asks if not has]
    if missing:
        raise ConfigError(f"row {row.name!r} of {table!r} asks for {' and '.join(missing)}, "
                          f"which {task.name} runs ({row.config}) do not have; drop the "
                          f"row's paper_finetuned/paper_dynamic record or the table's rank")


def reproduce(table: str, *, rows: list[str] | None = None,
              budget_minutes: float | None = None, out: str | Path = "results",
              runs: str | Path = "runs", device: str | None = None,
              overrides: list[str] | None = None, max_eval_tokens: int | None = None,
              corpus=None, progress: bool | None = None,
              seed: int | Sequence[int] | None = None, keep_going: bool = False,
              label: str | None = None, execution: dict | None = None,
              budget_since: float | None = None) -> list[Path]:
    """Train (or resume) the rows of ``table`` and write one result file per row.

    A row with a fine-tuned paper number
    (:attr:`~drillbook.experiments.tables.Row.finetunes`) is fine-tuned once its main
    run is done (``status: done``), in ``<runs>/<table>/<row>/finetune``, at the authors'
    fine-tuning learning rate (:func:`drillbook.configs.finetune_lr`). The budget covers
    both stages: fine-tuning gets what the main run left of this call's
    minutes, and resumes at the next call when none was left.

    Args:
        table: a key of :data:`~drillbook.experiments.tables.TABLES`.
        rows: row names to run (default: all).
        budget_minutes: wall-clock minutes of training per row *per call* (None: train to
            the end); the evaluation follows.
        out: the results folder (``<out>/<table>/<row>.json``).
        runs: where run folders (checkpoints, logs; never committed) live.
        overrides: ``key=value`` applied to every row after its own.
        max_eval_tokens: cap the test evaluation (CPU tests): tokens of a language
            model's test text, sentences of a translation test set; None evaluates it all.
        corpus: the corpus every row trains on (tests pass a tiny one); default: each
            row's task loads its own (:attr:`~drillbook.train.tasks.Task.load_data`), once
            for the rows that read the same data.
        seed: train every row with this seed (or with each of these seeds) instead of its
            config's. A seed other than the config's writes
            ``<out>/<table>/seed-<seed>/<row>.json`` (run folders
            ``<runs>/<table>/seed-<seed>/<row>``), beside the row's own file, so repeated
            runs of one table give the spread across seeds
            (:func:`~drillbook.experiments.results.seeds.seed_spread`).
        keep_going: a row that fails (or runs out of memory) gets a result file saying so
            (``status`` ``failed`` or ``out-of-memory``, ``error``) and the next row runs;
            without it the error is raised. A row stopped by a signal
            (:class:`~drillbook.errors.TrainingInterrupted`: its step is saved) is no
            failure: that is raised either way (a scheduler's worker stopped at the
            deadline then gets its ``deadline`` file from the scheduler).
        label: what the console lines start with (default ``row i/n NAME``).
        execution: how the row was run, recorded in its result file (:func:`execution`;
            default: a process of its own, alone on its device).
        budget_since: the :func:`time.monotonic` instant the first row's
            ``budget_minutes`` count from (default: when its training opens). A worker
            passes its process's start, so that its start-up and corpus loading come out
            of its training time, not out of the reserve its evaluation needs.
    """
    jobs = table_jobs(table, rows, seed, overrides or [])
    source = git_state()  # the code this call runs, read before training starts
    rank_cap = table_rank_cap(table, max_eval_tokens)
    loaded: dict[str, Any] = {}  # each data section's corpus, loaded by the first row
    written = []
    for index, job in enumerate(jobs, 1):
        name = label or f"row {index}/{len(jobs)} {job.name}"  # the console lines
        run_dir, path = job.run_dir(runs), job.result_path(out)
        # the row's first line (then its epochs, one line each), from rank 0 alone
        if progress is not False and rank_and_world_size()[0] == 0:
            again = " (resuming)" if has_checkpoint(run_dir) else ""
            print(f"{name}: {job.config.name} in {run_dir}{again}", file=sys.stderr,
                  flush=True)
        started = time.monotonic()
        try:
            doc = _run_job(job, run_dir, path, source, name=name, device=device,
                           corpus=corpus, loaded=loaded, progress=progress,
                           budget_minutes=budget_minutes, max_eval_tokens=max_eval_tokens,
                           rank_cap=rank_cap, execution=execution or ALONE,
                           budget_since=budget_since if index == 1 else None)
        except Exception as err:  # a bug or bad input: raised unless the call keeps going
            if not keep_going or isinstance(err, TrainingInterrupted):
                raise  # a row stopped by a signal saved its step: not a failure
            doc = raised_doc(job, err, source, device=device,
                             seconds=time.monotonic() - started, run_dir=run_dir,
                             budget_minutes=budget_minutes, execution=execution or ALONE)
            free_memory(torch.device(device or "cpu"))
            if progress is not False:
                print(f"{name}: {doc['status']}: {doc['error']}", file=sys.stderr,
                      flush=True)
        written.append(_write(path, doc))
    return written


def _run_job(job: Job, run_dir: Path, path: Path, source: dict, *, name: str, device,
             corpus, loaded: dict, progress, budget_minutes, max_eval_tokens,
             rank_cap, execution: dict, budget_since: float | None = None) -> dict:
    """Train, evaluate and analyse one job; its result document. Its training stops
    ``budget_minutes`` after ``budget_since`` (default: when its trainer is open)."""
    config = job.config
    task = task_of(config)
    data_key = json.dumps(config.to_dict()["data"], sort_keys=True)
    started = time.monotonic()
    holder = in_use(run_dir)
    if holder is not None:  # the run folders follow runs (--runs), not out: say so
        raise RunFolderError(f"{run_dir} is in use by another training process ({holder}); "
                             f"wait for it to finish or stop it, or give this reproduce "
                             f"another runs folder (--runs)")
    trainer = task.trainer(config, run_dir, device=device,
                           corpus=corpus if corpus is not None else loaded.get(data_key),
                           resume=has_checkpoint(run_dir), progress=progress)
    trainer.label = name
    if trainer.device.type == "cuda":  # this row's peak, not an earlier row's
        torch.cuda.reset_peak_memory_stats(trainer.device)
    data = loaded.setdefault(data_key, trainer.corpus)
    training_minutes = budget_minutes
    if budget_minutes is not None and budget_since is not None:  # start-up counted
        training_minutes = budget_minutes - (time.monotonic() - budget_since) / 60
    status = trainer.fit(max_minutes=training_minutes)
    return finish_job(job, trainer, status, path, source, name=name, device=device,
                      data=data, progress=progress, budget_minutes=budget_minutes,
                      max_eval_tokens=max_eval_tokens, rank_cap=rank_cap,
                      execution=execution, started=started)


def finish_job(job: Job, trainer: TrainingLoop, status: RunStatus, path: Path, source: dict,
               *, name: str, device, data, progress, budget_minutes, max_eval_tokens,
               rank_cap, execution: dict, started: float) -> dict:
    """What follows a job's training (its ``trainer`` ended with ``status``): its test
    evaluation, rank and analyses, its fine-tuning and dynamic evaluation where its row
    has them (within what is left of ``budget_minutes`` since ``started``); its result
    document. A file with the test metric is written as soon as it is known."""
    config, row, task = job.config, job.row, task_of(job.config)
    run_dir = trainer.run_dir

    def document(metrics: dict, curve: list, extra: dict) -> dict:
        doc = _result_doc(job.table, row, config, trainer, source,
                          status=_status(status.reason), epochs_done=status.epoch,
                          budget_minutes=budget_minutes, metrics=metrics, curve=curve)
        doc.update(extra)
        doc["execution"] = execution
        return doc

    def early(metrics: dict, curve: list, extra: dict, pending: list[str]) -> None:
        finetuned = _earlier_finetuned(path) if row.finetunes else None
        _write(path, {**document(metrics, curve, extra), "pending": pending,
                      **({"finetuned": finetuned} if finetuned is not None else {})})

    metrics, curve, extra = _stage_metrics(task, trainer, status, data, max_eval_tokens,
                                           rank_cap, analyses=True, early=early)
    doc = document(metrics, curve, extra)
    if row.finetunes and status.reason in FINAL_STATUSES:
        left = (None if budget_minutes is None
                else budget_minutes - (time.monotonic() - started) / 60)
        block = (_finetune_stage(task, row, run_dir, data, device, progress, left,
                                 max_eval_tokens, f"{name} finetune")
                 if left is None or left > 0
                 else _earlier_finetuned(path))  # no time left: keep what was recorded
        if block is not None:
            doc["finetuned"] = block
            if row.paper_dynamic and block["status"] != "budget":
                doc["dynamic"] = _dynamic_stage(run_dir / "finetune", data, device,
                                                max_eval_tokens)
    return doc


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
        "metrics": {}, "curve": _curve(log), **plateau_block(config, reached=False),
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


def _status(reason: str) -> str:
    """A result file's status for a :class:`~drillbook.train.RunStatus` reason."""
    return "budget" if reason in ("budget", "steps") else reason


#: ``_stage_metrics(rank_cap=_NO_RANK)``: measure no rank
_NO_RANK = -1


def table_rank_cap(table: str, max_eval_tokens: int | None) -> int | None:
    """The positions a row of ``table`` ranks its output over (its table's
    ``rank_positions``, else ``max_eval_tokens``; ``_NO_RANK`` for a table without a
    rank), what :func:`finish_job` takes as ``rank_cap``."""
    spec = TABLES[table]
    return (spec.rank_positions or max_eval_tokens) if spec.rank else _NO_RANK
#: what a result file's curve keeps of each log record (those a record has)
_CURVE_KEYS = ("epoch", "step", "train_loss", "train_ppl", "val_loss", "val_ppl", "val_bleu",
               "epoch_seconds", "elapsed_seconds", "tokens_per_second", "lr")


def _curve(log: list[dict]) -> list[dict]:
    """A result file's learning curve: :data:`_CURVE_KEYS` of each log record."""
    return [{k: r[k] for k in _CURVE_KEYS if k in r and r[k] is not None} for r in log]


def _stage_metrics(task: Task, trainer: TrainingLoop, status: RunStatus, data,
                   max_eval_tokens: int | None, rank_cap: int | None = _NO_RANK,
                   analyses: bool = False,
                   early: Callable[[dict, list, dict, list[str]], None] | None = None
                   ) -> tuple[dict[str, float], list[dict], dict[str, Any]]:
    """What one training stage (a run folder) measured: seconds per epoch (and per step)
    and the learning curve from its log; the best validation metric and the test metric of
    its ``best.pt`` with the size of its output layer; and the rank of a language model's
    test log-probabilities on ``rank_cap`` positions (None: all the test evaluation reads;
    :data:`_NO_RANK`: no rank), with the device's peak memory on CUDA. Returns ``(metrics,
    curve, extra)``, ``extra`` the result's top-level fields (a translation's
    ``bleu_signature``, and with ``analyses`` the task's ``analyses`` block of the test
    split, :func:`~drillbook.experiments.results.analyses.result_analyses`).

    ``early(metrics, curve, extra, pending)`` is called once the test metric is known and
    before the rank and the analyses (``pending`` names them), which can take long (a
    float64 SVD): a row stopped at a deadline meanwhile keeps its test metric."""
    run_dir, config, key = trainer.run_dir, trainer.config, task.metric_key
    log = read_log(run_dir) if (run_dir / LOG).exists() else []
    metrics: dict[str, float] = {}
    extra: dict[str, Any] = {}
    if log:
        metrics["seconds_per_epoch"] = sum(r["epoch_seconds"] for r in log) / len(log)
    steps = [r["seconds_per_step"] for r in log if r.get("seconds_per_step")]
    if steps:
        metrics["seconds_per_step"] = sum(steps) / len(steps)
    if (run_dir / BEST).exists():
        metrics[f"val_{key}"] = task.best_value(status)
        run = task.load_run(run_dir, config, device=str(trainer.device), corpus=data)
        result = task.evaluate(run, "test", data=data, max_items=max_eval_tokens)
        metrics[f"test_{key}"] = result[key]
        metrics.update({f"test_{n}": result[n] for n in ("tokens", "sentences") if n in result})
        metrics["output_layer_params"] = run.model.head.param_counts().dedicated
        if "bleu_signature" in result:
            extra["bleu_signature"] = result["bleu_signature"]
        pending = [name for name, due in (("rank", rank_cap != _NO_RANK),
                                          ("analyses", analyses)) if due]
        if early is not None and pending:
            early(dict(metrics), _curve(log), dict(extra), pending)
        if rank_cap != _NO_RANK:  # a table that ranks streams (checked by table_jobs)
            test = task.split_stream(config, data, "test").to(trainer.device)
            metrics.update(rank_of(run.model, test, config.train.bptt, rank_cap))
        if analyses:
            extra["analyses"] = result_analyses(run, "test", data=data,
                                                max_items=max_eval_tokens)
    if trainer.device.type == "cuda":
        metrics["peak_gpu_memory_bytes"] = torch.cuda.max_memory_allocated(trainer.device)
    return metrics, _curve(log), extra


def _finetune_stage(task: Task, row: Row, run_dir: Path, corpus, device, progress,
                    minutes: float | None, max_eval_tokens: int | None,
                    label: str = "") -> dict:
    """Fine-tune a finished row (or resume its fine-tuning) for at most ``minutes`` and
    return the result file's ``finetuned`` block."""
    out = run_dir / "finetune"
    trainer = task.finetune_trainer(run_dir, out=out, device=device, corpus=corpus,
                                    progress=progress, resume=has_checkpoint(out),
                                    lr=finetune_lr(row.config))
    trainer.label = label
    status = trainer.fit(max_minutes=minutes)
    metrics, curve, _ = _stage_metrics(task, trainer, status, corpus, max_eval_tokens)
    return {"status": _status(status.reason), "epochs_done": status.epoch,
            "steps_done": trainer.step, "wall_seconds": round(trainer.elapsed, 1),
            "lr": trainer.config.train.lr, "metrics": metrics, "curve": curve}


def _dynamic_stage(run_dir: Path, corpus, device, max_eval_tokens: int | None) -> dict:
    """Dynamic evaluation of a stage's ``best.pt`` (the result file's ``dynamic`` block):
    the authors' grid on the validation split, the test split with the best pair, both
    capped at ``max_eval_tokens``. Resumable: the state file stays in the stage's folder,
    and a finished one is read back, not evaluated again."""
    from ...train.dynamic import evaluate_run

    state = run_dir / "dynamic-eval-best-test.pt"
    r = evaluate_run(run_dir, split="test", do_search=True, search_tokens=max_eval_tokens,
                     max_tokens=max_eval_tokens, state_path=state, resume=state.exists(),
                     device=device, corpus=corpus)
    return {"lr": r["lr"], "lamb": r["lamb"], "eps": r["eps"], "bptt": r["bptt"],
            "grad_batches": r["grad_batches"], "finished": r["finished"],
            "metrics": {"val_ppl": r["search"]["valid_ppl"], "test_ppl": r["ppl"],
                        "test_tokens": r["tokens"], "static_test_ppl": r["static_ppl"]}}


def _earlier_finetuned(path: Path) -> dict | None:
    """The ``finetuned`` block an earlier call wrote to ``path``, if any."""
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("finetuned")


def _result_doc(table: str, row: Row, config, trainer: TrainingLoop, source: dict, *,
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
#: ``interleaved-eager``: with other rows in one process, :mod:`drillbook.train.rows`),
#: ``rows`` (the rows sharing its device, itself included) and ``graphed`` (its steps
#: replayed from CUDA graphs)
WAYS = ("process", "process-mps", "graphs-on-streams", "interleaved-eager")


def execution(way: str = "process", rows: int = 1, graphed: bool = False) -> dict:
    """A result file's ``execution`` block (:data:`WAYS`)."""
    if way not in WAYS:
        raise ValueError(f"way must be one of {WAYS}, got {way!r}")
    return {"way": way, "rows": int(rows), "graphed": bool(graphed)}


#: a row alone in a process of its own (what ``reproduce`` without ``--parallel`` does)
ALONE = {"way": "process", "rows": 1, "graphed": False}


def plateau_block(config, *, reached: bool) -> dict:
    """``{"plateau": {...}}`` for a result document of a row trained to its plateau
    (``train.plateau_epochs``): the rule, in numbers and words, and whether it ended the
    row (False: the row's epochs, its budget or the deadline came first); ``{}`` for a
    row without a stopping rule."""
    rule = rule_of(config.train, task_of(config).trainer.higher_is_better)
    if rule is None:
        return {}
    return {"plateau": {**rule.as_dict(), "rule": rule.describe(), "reached": reached}}


def _write(path: Path, doc: dict) -> Path:
    """:func:`write_result`, by rank 0 alone when ``torchrun`` started several
    processes (the others trained beside it)."""
    if rank_and_world_size()[0] != 0:
        return Path(path)
    return write_result(path, doc)
