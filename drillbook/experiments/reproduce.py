"""Reproduce the papers' tables row by row, at a stated budget, resumably.

``drillbook reproduce TABLE`` trains every row of a table (:data:`~.tables.TABLES`) into
``runs/<table>/<row>/`` and writes ``results/<table>/<row>.json``
(:mod:`~drillbook.experiments.results`) when the row finishes or its budget runs out; run
again, every interrupted row resumes from its last checkpoint. A row whose paper number is
after AWD-LSTM's fine-tuning stage is fine-tuned within the same budget once its main run is
done, and its result file records both stages (compare like with like).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..configs import finetune_lr
from ..errors import ConfigError
from ..precision import precision_label
from ..provenance import device_name, git_state
from ..train.distributed import rank_and_world_size
from ..train.lm import finetune_trainer, split_stream
from ..train.loop import RunStatus, TrainingLoop
from ..train.runs import BEST, LOG, has_checkpoint, read_log
from ..train.tasks import Task, task_of
from ..validation import check_choice
from .results import RESULT_FORMAT, write_result
from .seeds import SEED_FOLDER
from .tables import RANK_TABLES, TABLES, Row

__all__ = ["reproduce"]


def reproduce(table: str, *, rows: list[str] | None = None,
              budget_minutes: float | None = None, out: str | Path = "results",
              runs: str | Path = "runs", device: str | None = None,
              overrides: list[str] | None = None, max_eval_tokens: int | None = None,
              corpus=None, progress: bool | None = None,
              seed: int | None = None) -> list[Path]:
    """Train (or resume) the rows of ``table`` and write one result file per row.

    A row with a fine-tuned paper number (:attr:`~.tables.Row.finetunes`) is fine-tuned
    once its main run is done (``status: done``), in ``<runs>/<table>/<row>/finetune``, at
    the authors' fine-tuning learning rate (:func:`drillbook.configs.finetune_lr`). The
    budget covers both stages: fine-tuning gets what the main run left of this call's
    minutes, and resumes at the next call when none was left.

    Args:
        table: a key of :data:`~.tables.TABLES`.
        rows: row names to run (default: all).
        budget_minutes: wall-clock minutes per row *per call* (None: train to the end).
        out: the results folder (``<out>/<table>/<row>.json``).
        runs: where run folders (checkpoints, logs; never committed) live.
        overrides: ``key=value`` applied to every row after its own.
        max_eval_tokens: cap the test evaluation (CPU tests): tokens of a language
            model's test text, sentences of a translation test set; None evaluates it all.
        corpus: the corpus every row trains on (tests pass a tiny one); default: each
            row's task loads its own (:attr:`~drillbook.train.tasks.Task.load_data`), once
            for the rows that read the same data.
        seed: train every row with this seed instead of its config's. A seed other than
            the config's writes ``<out>/<table>/seed-<seed>/<row>.json`` (run folders
            ``<runs>/<table>/seed-<seed>/<row>``), beside the row's own file, so repeated
            runs of one table give the spread across seeds
            (:func:`~drillbook.experiments.seeds.seed_spread`).
    """
    check_choice(table, sorted(TABLES), "table")
    source = git_state()  # the code this call runs, read before training starts
    chosen = TABLES[table]
    if rows:
        names = {r.name for r in chosen}
        unknown = sorted(set(rows) - names)
        if unknown:
            raise ConfigError(f"unknown row(s) {unknown} in {table!r}; rows: {sorted(names)}")
        chosen = [r for r in chosen if r.name in rows]
    rank_cap = (RANK_TABLES.get(table) or max_eval_tokens) if table in RANK_TABLES else _NO_RANK
    loaded: dict[str, Any] = {}  # each data section's corpus, loaded by the first row
    written = []
    for index, row in enumerate(chosen, 1):
        label = f"row {index}/{len(chosen)} {row.name}"  # the trainers' console lines
        config = row.resolve(overrides or [])
        folder = table
        if seed is not None and seed != config.train.seed:
            config = row.resolve([*(overrides or []), f"train.seed={seed}"])
            folder = f"{table}/{SEED_FOLDER}{seed}"
        run_dir = Path(runs) / folder / row.name
        # the row's first line (then its epochs, one line each), from rank 0 alone
        if progress is not False and rank_and_world_size()[0] == 0:
            again = " (resuming)" if has_checkpoint(run_dir) else ""
            print(f"{label}: {config.name} in {run_dir}{again}", file=sys.stderr, flush=True)
        task = task_of(config)
        data_key = json.dumps(config.to_dict()["data"], sort_keys=True)
        started = time.monotonic()
        trainer = task.trainer(config, run_dir, device=device,
                               corpus=corpus if corpus is not None else loaded.get(data_key),
                               resume=has_checkpoint(run_dir), progress=progress)
        trainer.label = label
        data = loaded.setdefault(data_key, trainer.corpus)
        status = trainer.fit(max_minutes=budget_minutes)
        metrics, curve, extra = _stage_metrics(task, trainer, status, data, max_eval_tokens,
                                               rank_cap)
        doc = _result_doc(table, row, config, trainer, source, status=_status(status.reason),
                          epochs_done=status.epoch, budget_minutes=budget_minutes,
                          metrics=metrics, curve=curve)
        doc.update(extra)
        path = Path(out) / folder / f"{row.name}.json"
        if row.finetunes and status.reason == "done":
            left = (None if budget_minutes is None
                    else budget_minutes - (time.monotonic() - started) / 60)
            block = (_finetune_stage(task, row, run_dir, data, device, progress, left,
                                     max_eval_tokens, f"{label} finetune")
                     if left is None or left > 0
                     else _earlier_finetuned(path))  # no time left: keep what was recorded
            if block is not None:
                doc["finetuned"] = block
                if row.paper_dynamic and block["status"] != "budget":
                    doc["dynamic"] = _dynamic_stage(run_dir / "finetune", data, device,
                                                    max_eval_tokens)
        written.append(_write(path, doc))
    return written


def _status(reason: str) -> str:
    """A result file's status for a :class:`~drillbook.train.RunStatus` reason."""
    return "budget" if reason in ("budget", "steps") else reason


#: ``_stage_metrics(rank_cap=_NO_RANK)``: measure no rank
_NO_RANK = -1
#: what a result file's curve keeps of each log record (those a record has)
_CURVE_KEYS = ("epoch", "train_ppl", "val_ppl", "val_loss", "val_bleu", "elapsed_seconds")


def _stage_metrics(task: Task, trainer: TrainingLoop, status: RunStatus, data,
                   max_eval_tokens: int | None, rank_cap: int | None = _NO_RANK
                   ) -> tuple[dict[str, float], list[dict], dict[str, Any]]:
    """What one training stage (a run folder) measured: seconds per epoch (and per step)
    and the learning curve from its log; the best validation metric and the test metric of
    its ``best.pt`` with the size of its output layer; and the rank of a language model's
    test log-probabilities on ``rank_cap`` positions (None: all the test evaluation reads;
    :data:`_NO_RANK`: no rank). Returns ``(metrics, curve, extra)``, ``extra`` the
    result's top-level fields (a translation's ``bleu_signature``)."""
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
        if rank_cap != _NO_RANK:  # the rank tables are language-model tables
            test = split_stream(config, data, "test").to(trainer.device)
            metrics.update(_rank(run.model, test, config.train.bptt, rank_cap))
    curve = [{k: r[k] for k in _CURVE_KEYS if k in r} for r in log]
    return metrics, curve, extra


def _finetune_stage(task: Task, row: Row, run_dir: Path, corpus, device, progress,
                    minutes: float | None, max_eval_tokens: int | None,
                    label: str = "") -> dict:
    """Fine-tune a finished row (or resume its fine-tuning) for at most ``minutes`` and
    return the result file's ``finetuned`` block."""
    out = run_dir / "finetune"
    trainer = finetune_trainer(run_dir, out=out, device=device, corpus=corpus,
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
    from ..train.dynamic import evaluate_run

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
    """The result document of one row (:mod:`.results`): what was run, where, with which
    code, how far it got and what it measured. The papers' numbers are not copied in: the
    report reads them from the record when it shows the row."""
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
    }


def _write(path: Path, doc: dict) -> Path:
    """:func:`write_result`, by rank 0 alone when ``torchrun`` started several
    processes (the others trained beside it)."""
    if rank_and_world_size()[0] != 0:
        return Path(path)
    return write_result(path, doc)


def _rank(model, data, bptt: int, max_tokens: int | None) -> dict[str, int]:
    """Rank of the test log-probability matrix: DRILL's ``tol = 1`` and, where the matrix is
    small enough for a plain SVD (a capped table), numpy's relative tolerance too."""
    from ..analysis import DRILL_TOL, log_prob_chunks, singular_values

    device = next(model.parameters()).device
    if max_tokens is not None and max_tokens * model.head.vocab_size <= 40_000_000:
        # small enough to compute in float64, where numpy's tolerance means something
        # (float32 rounding noise alone has full rank under it)
        import copy

        chunks = log_prob_chunks(copy.deepcopy(model).double(), data, bptt, max_tokens)
        spectrum = singular_values(torch.cat(list(chunks)).double(), method="svd",
                                   device=device)
        return {"rank_tol_1": spectrum.rank(DRILL_TOL), "rank_numpy_tol": spectrum.rank(),
                "rank_positions": spectrum.n_rows}
    spectrum = singular_values(log_prob_chunks(model, data, bptt, max_tokens), method="gram",
                               device=device)
    return {"rank_tol_1": spectrum.rank(DRILL_TOL), "rank_positions": spectrum.n_rows}
