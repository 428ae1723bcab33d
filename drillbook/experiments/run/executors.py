"""What runs the jobs the scheduler (:func:`~drillbook.experiments.run.scheduler.run_table`)
starts: an executor, with one small interface.

An executor's :meth:`~Executor.start` takes a job (a
:class:`~drillbook.experiments.run.worker.JobSpec`: the row, its seed, its device and its
training budget) and returns a :class:`Handle`: the job's last console lines, whether it
has ended (:meth:`Handle.poll`), and how to stop it (:meth:`Handle.stop`,
:meth:`Handle.kill`). The scheduler keeps the queue, the budgets and the deadline, writes the
result file of a job that ended without one and prints the summary; an executor only
starts, watches and stops. The executors:

* :class:`ThisProcess`: the job in this process, one at a time (the worker's own path,
  :func:`~drillbook.experiments.run.worker.run_job`);
* :class:`~drillbook.experiments.run.interleaved.Interleaved`: the jobs started together
  trained in this process, one step of each in turn (streams and CUDA graphs on a GPU,
  eager steps in turn on a CPU);
* :class:`~drillbook.experiments.run.launchers.ProcessLauncher`: a worker process per job on
  this machine;
* :class:`~drillbook.experiments.run.launchers.SubmititLauncher`: a job of a cluster's queue,
  through submitit.

Which way the rows run by default on a GPU is the way the newest committed concurrency
measurement found best (:func:`default_way`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from ...errors import TrainingInterrupted
from ...train.ways import Way
from ..results import book_results
from .worker import JobSpec, run_job

__all__ = ["KEPT_LINES", "Executor", "Handle", "ThisProcess", "default_way", "measured_way"]

#: how many of a job's last console lines a handle keeps (for the message of one that dies)
KEPT_LINES = 20


class Handle:
    """A started job as the scheduler sees it: its last console lines, whether it has
    ended (:meth:`poll`), and how to stop it."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def keep(self, line: str) -> None:
        """Remember one of the job's console lines (the last ``KEPT_LINES``)."""
        self.lines = [*self.lines[-(KEPT_LINES - 1):], line]

    def poll(self) -> int | None:
        """None while the job runs; then its exit status (0: it ended normally)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Ask the job to stop: it saves the step it reached and ends."""
        raise NotImplementedError

    def kill(self) -> None:
        """End the job now (after :meth:`stop` was not heeded in time)."""
        raise NotImplementedError


class Executor(Protocol):
    """Starts jobs (:meth:`start`).

    Attributes:
        needs_time_limit: a job must be given a time limit when it is started (a cluster's
            queue asks for one).
        way: how its jobs run (:class:`~drillbook.train.ways.Way`), for their result files'
            ``execution``; an executor without one runs processes.
        names_device: its jobs' console lines name their device (the jobs are spread over
            several); an executor without the attribute does.
    """

    needs_time_limit: bool

    def start(self, spec: JobSpec, relay: Callable[[str], None], *,
              seconds: float) -> Handle:
        """Start the job of ``spec``, passing each of its console lines to ``relay``;
        ``seconds``: the time it is given in all (training, evaluation, result file;
        ``inf``: none is set)."""
        ...


class _Deferred(Handle):
    """A job of this process, run when it is first polled (the scheduler has started
    every job it can by then); it ends with status 0, or 1 when it raised."""

    def __init__(self, run: Callable[[], object]) -> None:
        super().__init__()
        self.run, self.status = run, None

    def poll(self) -> int | None:
        if self.status is None:
            try:
                self.run()
                self.status = 0
            except TrainingInterrupted:
                raise  # Ctrl-C: the job saved its step; the call stops
            except Exception as err:  # its result file says so where it could be written
                self.keep(" ".join(str(err).split())[-300:])
                self.status = 1
        return self.status

    def stop(self) -> None:
        if self.status is None:  # not run yet: it never starts
            self.status = -15

    def kill(self) -> None:
        self.stop()


class ThisProcess:
    """Each job in this process, in turn: what a worker runs, without the worker's process
    (its budget counts from the moment the scheduler starts it)."""

    needs_time_limit = False
    way = Way.PROCESS

    def start(self, spec: JobSpec, relay: Callable[[str], None], *,
              seconds: float = float("inf")) -> Handle:
        since = time.monotonic()
        here = replace(spec, threads=None)  # this process keeps its threads
        return _Deferred(lambda: run_job(here, budget_since=since))


def default_way(results: str | Path | None = None) -> str:
    """``in-process`` or ``processes`` (a ``--together`` word): the best way of the newest
    committed concurrency measurement under ``results`` (default: the book's),
    ``processes`` without one."""
    root = (Path(results) if results is not None else book_results()) / "gpu"
    for report in sorted(root.glob("*/bench/concurrency.json"), reverse=True):
        way = measured_way(report)
        if way is not None:
            return way
    return str(Way.PROCESS.option)


def measured_way(report: Path) -> str | None:
    """The ``--together`` word of the best way in a concurrency report
    (``tools/concurrency.py``'s ``best_way``; processes under MPS need a daemon the caller
    starts, so they count as processes); None where the report is missing, unreadable or
    names no way."""
    try:
        best = json.loads(Path(report).read_text(encoding="utf-8")).get("best_way")
    except (OSError, ValueError):
        return None
    way = Way.of_measured(best) if isinstance(best, str) else None
    if way is Way.PROCESS_MPS:
        way = Way.PROCESS
    return None if way is None else way.option
