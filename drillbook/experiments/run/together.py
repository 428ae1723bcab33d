"""A table's rows trained together in this process (``reproduce --together in-process``).

Processes on one GPU time-slice it: four rows started as four processes each ran at about a
quarter of their speed alone. :func:`run_in_process` trains the rows of a table (or what is
left of a continuing plan) in waves of up to ``parallel`` rows, each wave in this process
with :func:`~drillbook.train.rows.train_together`: on CUDA every row's steps on a stream of
its own, replayed from CUDA graphs where its config allows
(:func:`~drillbook.train.rows.open_rows` with ``graphs=None``), so that the rows' kernels
overlap; on a CPU one eager step of each in turn (there, rows rather run as processes: the
cores are the resource; this path is what the tests run). Each row's result file records how
it ran (``execution``: ``graphs-on-streams`` or ``interleaved-eager``, the rows of its wave,
graphed or not).

It keeps :func:`~drillbook.experiments.run.scheduler.run_parallel`'s contract: the same
arguments, one result file per job (a row that diverged or ran out of memory says so and the
others go on), the deadline kept (each wave trains for its share of the time left, less the
reserve its evaluations need), a continuing plan's rows started largest predicted time first
while they fit, the others left for the next window, and the same summary at the end.

:func:`default_way` is what ``reproduce --parallel N`` takes on a CUDA device without
``--together``: the way the newest committed window's concurrency measurement found best
(``gpu/<window>/bench/concurrency.json``), processes until a window has measured one.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ...errors import TrainingInterrupted
from ...provenance import git_state
from ...runtime import resolve_device
from ...train.rows import open_rows, train_together
from ...validation import POSITIVE_INT, POSITIVE_NUMBER
from ..bench.measure import free_memory
from ..results import book_results, write_result
from .reproduce import (
    Job,
    execution,
    failure_doc,
    finish_job,
    raised_doc,
    table_jobs,
    table_rank_cap,
)
from .scheduler import END_MARGIN_SECONDS, job_reserve, say_summary, training_budget

__all__ = ["WAY_OF_MEASURED", "default_way", "measured_way", "run_in_process"]

#: a way of ``tools/concurrency.py``'s report, as ``--together`` names it (MPS needs a
#: daemon the caller starts, so a measured ``processes-mps`` is not a default)
WAY_OF_MEASURED = {"in-process": "in-process", "processes": "processes",
                   "processes-mps": "processes"}


def default_way(results: str | Path | None = None) -> str:
    """``in-process`` or ``processes``: the best way of the newest committed concurrency
    measurement under ``results`` (default: the book's), ``processes`` without one."""
    root = (Path(results) if results is not None else book_results()) / "gpu"
    for report in sorted(root.glob("*/bench/concurrency.json"), reverse=True):
        way = measured_way(report)
        if way is not None:
            return way
    return "processes"


def measured_way(report: Path) -> str | None:
    """The ``--together`` of the best way in a concurrency report
    (``tools/concurrency.py``'s ``best_way``, :data:`WAY_OF_MEASURED`); None where the
    report is missing, unreadable or names no way."""
    try:
        best = json.loads(Path(report).read_text(encoding="utf-8")).get("best_way")
    except (OSError, ValueError):
        return None
    return WAY_OF_MEASURED.get(best)


def run_in_process(table: str, *, rows: Sequence[str] | None = None,
                   seeds: Sequence[int] | None = None, parallel: int | None = None,
                   devices: Sequence[str | None] = ("cpu",),
                   deadline_minutes: float | None = None,
                   budget_minutes: float | None = None, reserve_minutes: float | None = None,
                   out: str | Path = "results", runs: str | Path = "runs",
                   overrides: Sequence[str] = (), max_eval_tokens: int | None = None,
                   quiet: bool = False, skip: Collection[tuple[str, int]] = (),
                   predicted: Mapping[tuple[str, int], float] | None = None,
                   corpus: Any = None, **ignored: Any) -> list[Path]:
    """Train the jobs of ``table`` in waves of up to ``parallel`` rows in this process, on
    ``devices[0]`` (see the module notes). The arguments are
    :func:`~drillbook.experiments.run.scheduler.run_parallel`'s (``launcher``, ``threads``
    and ``way`` are its own and ignored here), and ``corpus``, the data every row trains
    on (tests pass a tiny one; default: each data section's own, loaded once); returns the
    result file of every job that started, in table order."""
    start = time.monotonic()
    deadline = (math.inf if deadline_minutes is None else start + 60 * POSITIVE_NUMBER.check(
        deadline_minutes, "--deadline-minutes") - END_MARGIN_SECONDS)
    jobs = table_jobs(table, rows, seeds, overrides)
    parallel = (len(jobs) if parallel is None
                else POSITIVE_INT.check(parallel, "--parallel")) or 1
    device = str(resolve_device(devices[0] if devices else None))
    source = git_state()
    out, runs = Path(out), Path(runs)
    queue = [job for job in jobs if (job.row.name, job.seed) not in skip]
    if predicted is not None:  # largest first
        queue.sort(key=lambda job: -predicted[(job.row.name, job.seed)])
    started: list[Job] = []
    waiting: list[Job] = []
    while queue:
        left = deadline - time.monotonic()
        wave = _next_wave(queue, parallel, left, predicted)
        if not wave:  # nothing left fits in the time left
            waiting += queue
            break
        for job in wave:
            queue.remove(job)
        jobs_left = len(queue) + len(wave)
        reserve = job_reserve(left, jobs_left, parallel, reserve_minutes)
        if math.isinf(deadline):
            budget = budget_minutes
        elif predicted is not None:  # to its plateau, or until its evaluation is due
            budget = (left - reserve) / 60
        else:
            budget = training_budget(left, jobs_left, parallel, reserve) / 60
        if budget is not None and budget <= 0:
            for job in [*wave, *queue]:  # not even the reserve is left
                write_result(job.result_path(out), failure_doc(
                    job, source, status="deadline", device=device, seconds=0.0,
                    error="not started: the deadline came first", run_dir=job.run_dir(runs),
                    budget_minutes=0.0))
            started += [*wave, *queue]
            break
        _train_wave(wave, jobs, device=device, budget_minutes=budget, out=out, runs=runs,
                    source=source, max_eval_tokens=max_eval_tokens, quiet=quiet,
                    corpus=corpus)
        started += wave
    ran = [job for job in jobs if job in started]
    say_summary(ran, out, time.monotonic() - start, skip, waiting)
    return [job.result_path(out) for job in ran]


def _next_wave(queue: list[Job], parallel: int, left: float,
               predicted: Mapping[tuple[str, int], float] | None) -> list[Job]:
    """The next rows to train together: the first ``parallel`` of the queue, or for a
    continuing plan (``predicted``) the largest that fit in ``left`` seconds."""
    if predicted is None:
        return queue[:parallel] if left > 0 else []
    return [job for job in queue
            if predicted[(job.row.name, job.seed)] <= left][:parallel]


def _train_wave(wave: list[Job], jobs: list[Job], *, device: str,
                budget_minutes: float | None, out: Path, runs: Path, source: dict,
                max_eval_tokens: int | None, quiet: bool, corpus: Any) -> None:
    """Open the rows of ``wave``, train them together, finish each and write its result
    file (a row that could not open, diverged or ran out of memory: a file saying so)."""
    began = time.monotonic()
    loaded: dict[str, Any] = {}  # each data section's corpus, loaded by its first row
    if corpus is not None:
        loaded = {json.dumps(job.config.to_dict()["data"], sort_keys=True): corpus
                  for job in wave}
    trainers, opened = [], []
    for job in wave:
        name = f"row {jobs.index(job) + 1}/{len(jobs)} {job.name}"
        key = json.dumps(job.config.to_dict()["data"], sort_keys=True)
        try:
            (trainer,) = open_rows([(job.config, job.run_dir(runs))], device=device,
                                   graphs=None, corpus=loaded.get(key),
                                   progress=False if quiet else None)
        except Exception as err:  # this row fails; the others train
            _failed(job, err, source, device, began, runs, out, budget_minutes, quiet, name)
            continue
        trainer.label = name
        loaded.setdefault(key, trainer.corpus)
        trainers.append(trainer)
        opened.append((job, name))
    if not trainers:
        return
    if trainers[0].device.type == "cuda":  # this wave's peak, not an earlier one's
        torch.cuda.reset_peak_memory_stats(trainers[0].device)
    outcomes = train_together(trainers, max_minutes=budget_minutes)
    stopped = [o.error for o in outcomes if isinstance(o.error, TrainingInterrupted)]
    if stopped:  # Ctrl-C: every row saved the step it stopped at; nothing is finished
        for outcome in outcomes:
            outcome.trainer.close()
        raise stopped[0]
    for (job, name), outcome in zip(opened, outcomes, strict=True):
        how = execution(outcome.execution, rows=len(trainers),
                        graphed=outcome.execution == "graphs-on-streams")
        try:
            if outcome.error is not None:
                raise outcome.error
            doc = finish_job(job, outcome.trainer, outcome.status, job.result_path(out),
                             source, name=name, device=device,
                             data=outcome.trainer.corpus,
                             progress=False if quiet else None,
                             budget_minutes=budget_minutes, max_eval_tokens=max_eval_tokens,
                             rank_cap=table_rank_cap(job.table, max_eval_tokens),
                             execution=how, started=began)
        except Exception as err:
            _failed(job, err, source, device, began, runs, out, budget_minutes, quiet, name,
                    how)
        else:
            write_result(job.result_path(out), doc)
        finally:
            outcome.trainer.close()
    free_memory(torch.device(device))


def _failed(job: Job, err: Exception, source: dict, device: str, began: float, runs: Path,
            out: Path, budget_minutes: float | None, quiet: bool, name: str,
            how: dict | None = None) -> None:
    """The result file of a row that failed (or ran out of memory), and its line."""
    doc = raised_doc(job, err, source, device=device, seconds=time.monotonic() - began,
                     run_dir=job.run_dir(runs), budget_minutes=budget_minutes, execution=how)
    write_result(job.result_path(out), doc)
    if not quiet:
        print(f"{name}: {doc['status']}: {doc['error']}", file=sys.stderr, flush=True)
