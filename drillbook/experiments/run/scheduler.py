"""A table's queue: its rows run side by side, within one deadline.

One language model of the papers' size keeps only a small part of a large GPU busy (a batch
of 20 sequences is bound by kernel latency, not arithmetic), so several rows trained at once
each run at nearly their solo speed. :func:`run_table` owns the queue of a table's jobs
(:func:`~drillbook.experiments.run.jobs.table_jobs`) and starts up to ``parallel`` of them at
once, each on its device, through an executor
(:class:`~drillbook.experiments.run.executors.Executor`): in this process, rows interleaved in
this process, a worker process each, or a job of a cluster's queue through submitit. It keeps
the whole call within ``deadline_minutes``:

* every job gets a training budget that leaves time for its evaluation, analyses and result
  file: the time left, shared among the waves of jobs still to run, less a reserve;
* a worker whose job fails or runs out of memory writes a result file that says so, and the
  others go on; a worker that dies without one gets it from this process;
* at the deadline the workers still running are stopped (their checkpoints are whole: a
  later call resumes them) and their result files say ``deadline``;
* the workers' console lines reach this process's stderr as they come, prefixed with the
  row, and a summary table ends the call.

A plan that continues from one window (or sitting) to the next is the same queue given the
rows that are not final and each one's predicted time
(:func:`~drillbook.experiments.run.plan_runner.run_plan`): the largest that fits in the time
left starts first, and what fits nowhere waits for the next window.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ...provenance import git_state
from ...train.tasks import task_of
from ...train.ways import Way
from ...validation import POSITIVE_INT, POSITIVE_NUMBER
from ..results import write_result
from ..results.format import fmt
from .documents import failure_doc
from .executors import Executor, Handle
from .jobs import Job, table_jobs
from .launchers import ProcessLauncher
from .worker import JobSpec

__all__ = ["Running", "job_reserve", "run_parallel", "run_table", "say_summary",
           "summary_table", "training_budget"]

#: seconds the workers get, at the deadline, to stop on SIGTERM before they are killed
GRACE_SECONDS = 5.0
#: seconds kept at the end of the deadline for stopping the workers and writing files
END_MARGIN_SECONDS = 10.0


def training_budget(seconds_left: float, jobs_left: int, parallel: int,
                    reserve_seconds: float) -> float:
    """Seconds of training for the next job to start: the time left, shared equally among
    the waves of ``parallel`` jobs still to run (this one included), less the
    ``reserve_seconds`` its evaluation, analyses and result file need (0 or less: no time
    to start it)."""
    waves = math.ceil(jobs_left / parallel)
    return seconds_left / waves - reserve_seconds


@dataclass
class Running:
    """One job that an executor started.

    Attributes:
        job: what it runs.
        device: where (``cpu``, ``cuda``, ``cuda:1``; None: the worker's default device).
        handle: the executor's handle (its console lines, its end, how to stop it).
        started: when it started (``time.monotonic()``).
        index: its place in the table's jobs (from 1).
        before: the modification time (ns) of its result file when it started (None: none).
        stopped_by_deadline: the deadline stopped it.
    """

    job: Job
    device: str | None
    handle: Handle
    started: float
    index: int
    before: int | None = None
    stopped_by_deadline: bool = False


def job_reserve(seconds_left: float, jobs_left: int, parallel: int,
                reserve_minutes: float | None) -> float:
    """Seconds the next job keeps for its evaluation, analyses and result file:
    ``reserve_minutes``, or a fifth of its share of the time left (``seconds_left`` over
    the waves of ``parallel`` among ``jobs_left``, this one included), at least 10 seconds
    and at most 3 minutes."""
    if reserve_minutes is not None:
        return 60 * reserve_minutes
    share = seconds_left / math.ceil(jobs_left / parallel)
    return min(max(share / 5, 10.0), 180.0)


def run_table(table: str, executor: Executor, *, rows: Sequence[str] | None = None,
              seeds: Sequence[int] | None = None, parallel: int | None = 1,
              devices: Sequence[str | None] = ("cpu",),
              deadline_minutes: float | None = None, budget_minutes: float | None = None,
              reserve_minutes: float | None = None, out: str | Path = "results",
              runs: str | Path = "runs", overrides: Sequence[str] = (),
              max_eval_tokens: int | None = None, quiet: bool = False,
              threads: int | None = None, skip: Collection[tuple[str, int]] = (),
              predicted: Mapping[tuple[str, int], float] | None = None) -> list[Path]:
    """Run the jobs of ``table`` through ``executor``, up to ``parallel`` at once, each on
    one of ``devices`` in turn, and end within ``deadline_minutes`` (see the module notes).

    Args:
        table, rows, seeds, overrides, max_eval_tokens, out, runs: as for
            :func:`~drillbook.experiments.run.reproduce.reproduce`.
        executor: what runs each job (:mod:`~drillbook.experiments.run.executors`).
        parallel: jobs at once (None: all of them, a cluster's queue deciding when each
            starts).
        devices: the devices the jobs are spread over, in turn (``cuda:0 cuda:1``; None:
            the worker's default device, where it runs); one device takes several jobs
            when ``parallel`` exceeds their number.
        deadline_minutes: the whole call ends within this (None: no deadline; each job
            trains ``budget_minutes``, or to the end).
        budget_minutes: without a deadline, each job's training budget (None: to the end).
        reserve_minutes: what each job keeps for its evaluation, analyses and result file
            (default: a fifth of its share of the time, at least 10 seconds and at most 3
            minutes).
        quiet: no console lines from the jobs (the summary is still printed).
        threads: CPU threads of each job (default: the machine's cores shared among the
            jobs at once, at least 1).
        skip: ``(row, seed)`` of the jobs not to run (a continuing plan's final rows).
        predicted: a continuing plan's predicted seconds of each job, by ``(row, seed)``
            (:func:`~drillbook.experiments.run.plans.predict`). With them, each time a
            place is free the largest job that fits in the time left starts, with all
            that time as its budget (it stops at its plateau or in time for its
            evaluation); a job that fits nowhere is not started, gets no result file and
            waits for the next window.

    Returns:
        the result file of every job, in table order (written by its job, or here for a
        job that died, ran out of time or could not start; with ``predicted``, only the
        jobs that started).

    Raises:
        ConfigError: the executor needs a time limit per job and neither a deadline nor a
            budget gives one (nothing is started).
    """
    queue = _TableQueue(table, executor, rows=rows, seeds=seeds, overrides=overrides,
                        parallel=parallel, devices=devices, deadline_minutes=deadline_minutes,
                        threads=threads, skip=skip, predicted=predicted)
    if executor.needs_time_limit and math.isinf(queue.deadline) and budget_minutes is None:
        raise ConfigError("these workers need a time limit each: give --budget-minutes or "
                          "--deadline-minutes (or --executor timeout_min=MINUTES)")
    return queue.run(Path(out), Path(runs), budget_minutes=budget_minutes,
                     reserve_minutes=reserve_minutes, max_eval_tokens=max_eval_tokens,
                     quiet=quiet)


def run_parallel(table: str, *, launcher: Executor | None = None, way: str = Way.PROCESS,
                 **kwargs: Any) -> list[Path]:
    """:func:`run_table` with a worker process per job on this machine
    (:class:`~drillbook.experiments.run.launchers.ProcessLauncher`; ``way``: ``process``,
    or ``process-mps`` when an MPS daemon serves them), or with ``launcher``; ``kwargs``
    are :func:`run_table`'s."""
    launcher = launcher if launcher is not None else ProcessLauncher(way=Way(way))
    return run_table(table, launcher, **kwargs)


class _TableQueue:
    """One call's queue: the jobs waiting, running and waiting for the next window, the
    documents this process writes, and the clock."""

    def __init__(self, table: str, executor: Executor, *, rows, seeds, overrides, parallel,
                 devices, deadline_minutes, threads, skip, predicted) -> None:
        self.start = time.monotonic()
        self.deadline = (math.inf if deadline_minutes is None
                         else self.start + 60 * POSITIVE_NUMBER.check(
                             deadline_minutes, "--deadline-minutes") - END_MARGIN_SECONDS)
        self.jobs = table_jobs(table, rows, seeds, overrides)
        self.parallel = (max(len(self.jobs), 1) if parallel is None
                         else POSITIVE_INT.check(parallel, "--parallel"))
        self.threads = threads or max(1, (os.cpu_count() or 1) // self.parallel)
        self.executor, self.devices = executor, list(devices)
        self.overrides, self.skip, self.predicted = tuple(overrides), skip, predicted
        self.source = git_state()
        self.queue = [(i, job) for i, job in enumerate(self.jobs, 1)
                      if (job.row.name, job.seed) not in skip]
        if predicted is not None:  # largest first
            self.queue.sort(key=lambda item: -predicted[(item[1].row.name, item[1].seed)])
        self.waiting: list[Job] = []  # a continuing plan's jobs that fit in no time left
        self.running: list[Running] = []
        self.docs: dict[int, dict] = {}  # job index -> the result this process writes
        self.lock = threading.Lock()
        self.launched = 0

    def run(self, out: Path, runs: Path, **options: Any) -> list[Path]:
        """Start, watch and stop the jobs until none is left; the result files."""
        self.out, self.runs, self.options = out, runs, options
        with _interrupted_by_sigterm():
            try:
                self._watch(out, runs)
            finally:  # interrupted (Ctrl-C, SIGTERM) or failed: no worker outlives the call
                _stop([w for w in self.running if w.handle.poll() is None])
        for index, doc in self.docs.items():
            write_result(self.jobs[index - 1].result_path(out), doc)
        ran = [job for job in self.jobs
               if (job.row.name, job.seed) not in self.skip and job not in self.waiting]
        say_summary(ran, out, time.monotonic() - self.start, self.skip, self.waiting)
        return [job.result_path(out) for job in ran]

    def _watch(self, out: Path, runs: Path) -> None:
        """Start jobs as places free up, settle those that end, stop them at the deadline."""
        while self.queue or self.running:
            self._fill()
            if not self.queue and not self.running:
                break
            if time.monotonic() >= self.deadline:
                _stop(self.running)
            for worker in [w for w in self.running if w.handle.poll() is not None]:
                self.running.remove(worker)
                _settle(worker, self.source, out, runs, self.docs)
            if self.queue and time.monotonic() >= self.deadline:
                self._close()
            time.sleep(0.2)

    def _fill(self) -> None:
        """Start jobs while a place is free and the deadline is ahead."""
        now = time.monotonic()
        while self.queue and len(self.running) < self.parallel and now < self.deadline:
            left = self.deadline - now
            item = self._next(left)
            if item is None:
                break
            self._start(*item, left, now)

    def _next(self, left: float) -> tuple[int, Job] | None:
        """The next job: the first of the queue, or for a continuing plan the largest that
        fits in ``left`` seconds (None: none fits; they all wait for the next window)."""
        if self.predicted is None:
            return self.queue.pop(0)
        fits = [item for item in self.queue
                if self.predicted[(item[1].row.name, item[1].seed)] <= left]
        if not fits:
            self.waiting += [job for _, job in self.queue]
            self.queue.clear()
            return None
        self.queue.remove(fits[0])
        return fits[0]

    def _start(self, index: int, job: Job, left: float, now: float) -> None:
        """Start ``job`` with its budget, or write why it cannot start."""
        reserve = job_reserve(left, len(self.queue) + 1, self.parallel,
                              self.options["reserve_minutes"])
        budget = self._budget(left, reserve)
        device = self.devices[self.launched % len(self.devices)]
        if budget <= 0:  # not even its reserve is left: it would end past the deadline
            self.docs[index] = failure_doc(
                job, self.source, status="deadline", device=device,
                error=f"not started: {left:.0f} s were left, and it needs {reserve:.0f} s "
                      f"for its evaluation", seconds=0.0, run_dir=job.run_dir(self.runs),
                budget_minutes=0.0)
            return
        named = device and getattr(self.executor, "names_device", True)
        spec = JobSpec(job.table, job.row.name, job.seed, device, str(self.out),
                       str(self.runs),
                       budget_minutes=budget / 60 if math.isfinite(budget) else None,
                       overrides=self.overrides,
                       max_eval_tokens=self.options["max_eval_tokens"],
                       label=f"row {index}/{len(self.jobs)} {job.name}"
                             + (f" [{device}]" if named else ""),
                       threads=self.threads,
                       way=Way(getattr(self.executor, "way", Way.PROCESS)).value,
                       rows=min(math.ceil(self.parallel / len(self.devices)), len(self.jobs)))
        path = job.result_path(self.out)
        before = path.stat().st_mtime_ns if path.exists() else None
        handle = self.executor.start(spec, self._relay, seconds=budget + reserve)
        self.running.append(Running(job, device, handle, now, index, before))
        self.launched += 1

    def _budget(self, left: float, reserve: float) -> float:
        """The next job's training budget (seconds): without a deadline the budget asked
        for (or none); for a continuing plan all the time left but the reserve (it stops
        at its plateau, or when its evaluation is due); else its share of the time left."""
        if math.isinf(self.deadline):
            budget = self.options["budget_minutes"]
            return math.inf if budget is None else 60 * budget
        if self.predicted is not None:
            return left - reserve
        return training_budget(left, len(self.queue) + 1, self.parallel, reserve)

    def _close(self) -> None:
        """At the deadline, what never started: a continuing plan's jobs wait for the next
        window; others get a ``deadline`` result file."""
        if self.predicted is not None:
            self.waiting += [job for _, job in self.queue]
        else:
            for index, job in self.queue:
                self.docs[index] = failure_doc(
                    job, self.source, status="deadline", device=self.devices[0],
                    error="not started: the deadline came first", seconds=0.0,
                    run_dir=job.run_dir(self.runs), budget_minutes=0.0)
        self.queue.clear()

    def _relay(self, line: str) -> None:
        if not self.options["quiet"]:
            with self.lock:
                print(line, file=sys.stderr, flush=True)


def say_summary(ran: Sequence[Job], out: Path, seconds: float,
                skip: Collection[tuple[str, int]], waiting: Sequence[Job]) -> None:
    """The call's summary on stderr (:func:`summary_table`), and for a continuing plan the
    jobs it skipped as final and those left for the next window."""
    print(summary_table(ran, out, seconds), file=sys.stderr, flush=True)
    if skip or waiting:
        print(f"{len(skip)} job(s) already final, skipped; {len(waiting)} job(s) fit in no "
              f"time left and wait for the next window"
              + (f": {', '.join(job.name for job in waiting)}" if waiting else ""),
              file=sys.stderr, flush=True)


@contextmanager
def _interrupted_by_sigterm() -> Iterator[None]:
    """SIGTERM raises :class:`KeyboardInterrupt` here, as Ctrl-C does, so the queue stops
    its workers (each in a session of its own, which the signal does not reach) before
    the call ends; the previous handler is restored after. Only in the main thread,
    where signal handlers live."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame) -> None:
        raise KeyboardInterrupt(f"{signal.Signals(signum).name}: the workers are stopped")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(running: list[Running]) -> None:
    """Stop the workers still running at the deadline: ask them to stop (SIGTERM), then
    end them after :data:`GRACE_SECONDS`."""
    for worker in running:
        if worker.handle.poll() is None:
            worker.stopped_by_deadline = True
            worker.handle.stop()
    end = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < end and any(w.handle.poll() is None for w in running):
        time.sleep(0.1)
    for worker in running:
        if worker.handle.poll() is None:
            worker.handle.kill()


def _settle(worker: Running, source: dict, out: Path, runs: Path, docs: dict) -> None:
    """After a worker has ended: its result file if it wrote one this call, else one
    written here (``deadline`` when the deadline stopped it, ``failed`` otherwise)."""
    job, path = worker.job, worker.job.result_path(out)
    if path.exists() and path.stat().st_mtime_ns != worker.before:
        return  # the worker wrote its result (at the deadline too, if it was that quick)
    seconds = time.monotonic() - worker.started
    if worker.stopped_by_deadline:
        status, error = "deadline", "stopped at the deadline before its result was written"
    else:
        tail = " / ".join(line for line in worker.handle.lines[-3:] if line.strip())
        status = "failed"
        error = (f"the worker exited with status {worker.handle.poll()} and wrote no "
                 f"result" + (f"; its last lines: {tail}" if tail else ""))[:300]
    docs[worker.index] = failure_doc(job, source, status=status, error=error,
                                     device=worker.device, seconds=seconds,
                                     run_dir=job.run_dir(runs), budget_minutes=None)


def summary_table(jobs: Sequence[Job], out: str | Path, seconds: float) -> str:
    """The call's last lines: one per job, its status, epochs, metrics and time, read
    from the result files."""
    lines = [f"{len(jobs)} job(s) in {seconds / 60:.1f} min:",
             f"{'row':<28} {'status':<14} {'epochs':>6} {'valid':>9} {'test':>9} {'s':>7}"]
    for job in jobs:
        path = job.result_path(out)
        doc: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        m, key = doc.get("metrics", {}), task_of(job.config).metric_key
        lines.append(f"{job.name:<28} {doc.get('status', 'missing'):<14} "
                     f"{fmt(doc.get('epochs_done')):>6} {fmt(m.get(f'val_{key}')):>9} "
                     f"{fmt(m.get(f'test_{key}')):>9} {fmt(doc.get('wall_seconds'), 0):>7}")
    return "\n".join(lines)
