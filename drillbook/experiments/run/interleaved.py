"""The executor that trains the jobs started together in this process, one step of each in
turn (:func:`~drillbook.train.interleaver.train_together`): on one CUDA device each row's steps
on a stream of its own, replayed from CUDA graphs where its config allows; on a CPU eager
steps in turn (``--together in-process``).

The scheduler (:func:`~drillbook.experiments.run.scheduler.run_table`) starts up to
``parallel`` jobs; they form one wave, trained together when the scheduler first asks
whether one has ended, within the smallest training budget among them (the first job's:
the time left shared among the waves still to run). Each row is then finished (its test
evaluation, analyses, result file, :func:`~drillbook.experiments.run.stages.finish_job`)
and its file records how it ran (``graphs-on-streams`` or ``interleaved-eager``, and how
many rows shared the device). A row that could not open, diverged or ran out of memory
gets a file saying so, and the others go on.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ...errors import TrainingInterrupted
from ...provenance import git_state
from ...runtime import resolve_device
from ...train.interleaver import open_rows, train_together
from ...train.ways import Way
from ..bench.measure import free_memory
from ..results import write_result
from .documents import execution, raised_doc
from .executors import Handle
from .jobs import Job, table_jobs, table_rank_cap
from .scheduler import run_table
from .stages import finish_job, keep_sitting
from .timing import time_together
from .worker import JobSpec

__all__ = ["Interleaved", "run_in_process"]


class _InWave(Handle):
    """A job of the wave being gathered: it trains when any job of the wave is polled."""

    def __init__(self, executor: Interleaved) -> None:
        super().__init__()
        self.executor, self.status = executor, None

    def poll(self) -> int | None:
        if self.status is None:
            self.executor.train()
        return self.status

    def stop(self) -> None:
        if self.status is None:  # not trained yet: it never starts
            self.executor.drop(self)
            self.status = -15

    def kill(self) -> None:
        self.stop()


class Interleaved:
    """The jobs started together trained in this process, on ``device`` (see the module
    notes); ``corpus``: the data every row trains on (tests pass a tiny one; default: each
    data section's own, loaded once a wave); ``quiet``: no console lines; ``graphs``: the
    graphed step for every row (True), for none (False) or where it applies (None,
    :func:`~drillbook.train.interleaver.open_rows`). Timed jobs (a
    :class:`~drillbook.experiments.run.timing.Timing` in their spec) are timed together
    instead (:func:`~drillbook.experiments.run.timing.time_together`)."""

    needs_time_limit = False
    names_device = False
    way = Way.IN_PROCESS

    def __init__(self, device: str | None = None, *, corpus: Any = None,
                 quiet: bool = False, graphs: bool | None = None) -> None:
        self.device = str(resolve_device(device))
        self.corpus, self.quiet, self.graphs = corpus, quiet, graphs
        self.wave: list[tuple[Job, JobSpec, _InWave]] = []
        self.source: dict = {}

    def start(self, spec: JobSpec, relay: Callable[[str], None], *,
              seconds: float = math.inf) -> Handle:
        job = table_jobs(spec.table, rows=[spec.row], seeds=[spec.seed],
                         overrides=list(spec.overrides))[0]
        handle = _InWave(self)
        self.wave.append((job, spec, handle))
        return handle

    def drop(self, handle: Handle) -> None:
        """Leave a job out of the wave (stopped before it trained)."""
        self.wave = [item for item in self.wave if item[2] is not handle]

    def train(self) -> None:
        """Train the wave gathered so far, finish each row and write its result file."""
        wave, self.wave = self.wave, []
        if not wave:
            return
        budgets = [spec.budget_minutes for _, spec, _ in wave]
        budget = None if None in budgets else min(budgets)
        self.source = self.source or git_state()
        try:
            if any(spec.timing is not None for _, spec, _ in wave):
                time_together([spec for _, spec, _ in wave], device=self.device,
                              graphs=self.graphs, corpus=self.corpus)
            else:
                self._train(wave, budget)
        finally:
            for *_, handle in wave:
                handle.status = 0 if handle.status is None else handle.status

    def _train(self, wave: list[tuple[Job, JobSpec, _InWave]],
               budget_minutes: float | None) -> None:
        began = time.monotonic()
        opened = self._open(wave, began, budget_minutes)
        if not opened:
            return
        trainers = [trainer for *_, trainer in opened]
        if trainers[0].device.type == "cuda":  # this wave's peak, not an earlier one's
            torch.cuda.reset_peak_memory_stats(trainers[0].device)
        outcomes = train_together(trainers, max_minutes=budget_minutes)
        stopped = [o.error for o in outcomes if isinstance(o.error, TrainingInterrupted)]
        hows = [execution(o.execution, rows=len(trainers),
                          graphed=o.execution == Way.GRAPHS_ON_STREAMS) for o in outcomes]
        if stopped:  # Ctrl-C: every row saved the step it stopped at; nothing is finished
            for (job, spec, _), outcome, how in zip(opened, outcomes, hows, strict=True):
                if isinstance(outcome.error, TrainingInterrupted):  # and where it ran
                    keep_sitting(job, outcome.trainer, job.result_path(spec.out),
                                 self.source, last_epoch=outcome.trainer.epoch - 1,
                                 budget_minutes=budget_minutes, execution=how)
                outcome.trainer.close()
            raise stopped[0]
        for (job, spec, _), outcome, how in zip(opened, outcomes, hows, strict=True):
            try:
                if outcome.error is not None:
                    raise outcome.error
                doc = finish_job(job, outcome.trainer, outcome.status,
                                 job.result_path(spec.out), self.source, name=spec.label,
                                 device=self.device, data=outcome.trainer.corpus,
                                 progress=False if self.quiet else None,
                                 budget_minutes=budget_minutes,
                                 max_eval_tokens=spec.max_eval_tokens,
                                 rank_cap=table_rank_cap(job.table, spec.max_eval_tokens),
                                 execution=how, started=began)
            except Exception as err:
                self._failed(job, spec, err, began, budget_minutes, how)
            else:
                write_result(job.result_path(spec.out), doc)
            finally:
                outcome.trainer.close()
        free_memory(torch.device(self.device))

    def _open(self, wave: list[tuple[Job, JobSpec, _InWave]], began: float,
              budget_minutes: float | None) -> list[tuple[Job, JobSpec, Any]]:
        """The trainers of the wave's rows, each data section's corpus loaded by its first
        row (a row that cannot open gets its result file, and the others go on)."""
        loaded: dict[str, Any] = {}
        opened = []
        for job, spec, _ in wave:
            key = job.data_key
            corpus = self.corpus if self.corpus is not None else loaded.get(key)
            try:
                (trainer,) = open_rows([(job.config, job.run_dir(spec.runs))],
                                       device=self.device, graphs=self.graphs, corpus=corpus,
                                       progress=False if self.quiet else None)
            except Exception as err:  # this row fails; the others train
                self._failed(job, spec, err, began, budget_minutes)
                continue
            trainer.label = spec.label
            loaded.setdefault(key, trainer.corpus)
            opened.append((job, spec, trainer))
        return opened

    def _failed(self, job: Job, spec: JobSpec, err: Exception, began: float,
                budget_minutes: float | None, how: dict | None = None) -> None:
        """The result file of a row that failed (or ran out of memory), and its line."""
        doc = raised_doc(job, err, self.source, device=self.device,
                         seconds=time.monotonic() - began, run_dir=job.run_dir(spec.runs),
                         budget_minutes=budget_minutes, execution=how)
        write_result(job.result_path(spec.out), doc)
        if not self.quiet:
            print(f"{spec.label}: {doc['status']}: {doc['error']}", file=sys.stderr,
                  flush=True)


def run_in_process(table: str, *, devices: Sequence[str | None] = ("cpu",),
                   parallel: int | None = None, corpus: Any = None, quiet: bool = False,
                   **kwargs: Any) -> list[Path]:
    """:func:`~drillbook.experiments.run.scheduler.run_table` with the rows interleaved in
    this process (:class:`Interleaved`) on ``devices[0]``, up to ``parallel`` at once
    (default: all of them); ``kwargs`` are ``run_table``'s."""
    executor = Interleaved(devices[0] if devices else None, corpus=corpus, quiet=quiet)
    return run_table(table, executor, devices=[executor.device], parallel=parallel,
                     quiet=quiet, **kwargs)
