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

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ...errors import RunFolderError, TrainingInterrupted
from ...provenance import git_state
from ...train.distributed import rank_and_world_size
from ...train.run_files import has_checkpoint, in_use
from ...train.tasks import task_of
from ..bench.measure import free_memory
from .documents import ALONE, raised_doc, write_doc
from .jobs import Job, table_jobs, table_rank_cap
from .stages import finish_job, keep_sitting

__all__ = ["reproduce"]


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
            row's task loads its own (:attr:`~drillbook.train.tasks.registry.Task.load_data`), once
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
        execution: how the row was run, recorded in its result file
            (:func:`~drillbook.experiments.run.documents.execution`; default: a process of
            its own, alone on its device).
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
        if progress is not False:
            _say_start(name, job, run_dir)
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
        written.append(write_doc(path, doc))
    return written


def _run_job(job: Job, run_dir: Path, path: Path, source: dict, *, name: str, device,
             corpus, loaded: dict, progress, budget_minutes, max_eval_tokens,
             rank_cap, execution: dict, budget_since: float | None = None) -> dict:
    """Train, evaluate and analyse one job; its result document. Its training stops
    ``budget_minutes`` after ``budget_since`` (default: when its trainer is open)."""
    config = job.config
    task = task_of(config)
    data_key = job.data_key
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
    try:
        status = trainer.fit(max_minutes=training_minutes)
    except TrainingInterrupted:  # its step is saved; so is the sitting, for the next one
        keep_sitting(job, trainer, path, source, last_epoch=trainer.epoch - 1,
                     budget_minutes=budget_minutes, execution=execution)
        raise
    return finish_job(job, trainer, status, path, source, name=name, device=device,
                      data=data, progress=progress, budget_minutes=budget_minutes,
                      max_eval_tokens=max_eval_tokens, rank_cap=rank_cap,
                      execution=execution, started=started)


def _say_start(name: str, job: Job, run_dir: Path) -> None:
    """A row's first line (then its epochs, one line each), from rank 0 alone."""
    if rank_and_world_size()[0] == 0:
        again = " (resuming)" if has_checkpoint(run_dir) else ""
        print(f"{name}: {job.config.name} in {run_dir}{again}", file=sys.stderr, flush=True)
