"""Many runs at once in one process: one step of each in turn, from one thread.

One GPU trains one run's stream of small kernels with long idle gaps between launches;
several runs as several processes time-slice the GPU rather than share it. Here the runs
(the rows of a table) are trainers in one process, stepped round-robin
(:meth:`~drillbook.train.loop.TrainingLoop.training` yields after every step): on CUDA
each row on a CUDA stream of its own, its steps replayed from CUDA graphs when its trainer
takes the graphed step (``LanguageModelTrainer(..., graphs=True)``, :mod:`drillbook.train.graphs`),
so that the rows' kernels overlap; elsewhere (a CPU) step by step, eagerly.

Each row keeps its own random state: before a row's turn the generators are set to where
that row left them (where its trainer stood when it was built, at first), so a row's
dropout masks are the ones it draws alone, and on the CPU every row ends **bit-identical**
to the same trainer's ``fit()`` alone (tested, with resume). Epoch-boundary work (a
row's validation, the NT-ASGD switch, checkpoints) happens in that row's turn, outside any
graph.

:func:`train_together` is the entry point (``reproduce --together in-process`` calls it,
:mod:`drillbook.experiments.run.executors`); :func:`open_rows` builds the trainers from
configs and run folders.
On a CPU, rows should rather run as processes: the cores are the resource there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..configs import SectionedConfig
from .checkpoint import rng_state, set_rng_state
from .graphs import GraphedStep, takes_graphs
from .loop import RunStatus, TrainingLoop, stop_on_signals
from .run_files import has_checkpoint
from .tasks import task_of
from .ways import Way

__all__ = ["EXECUTIONS", "RowOutcome", "execution_of", "open_rows", "train_together"]

#: how a row was run, as a result file records it (:class:`~drillbook.train.ways.Way`):
#: :func:`train_together`'s rows are ``graphs-on-streams`` (CUDA graphs replayed on the
#: row's own stream, in one process with the others) or ``interleaved-eager`` (eager steps
#: interleaved with the other rows' in one process)
EXECUTIONS = Way.records()


@dataclass
class RowOutcome:
    """How one row of :func:`train_together` ended.

    Attributes:
        trainer: the row's trainer (its ``run_dir``, ``step``, ``elapsed``, ``device``).
        status: its :class:`~drillbook.train.loop.RunStatus` (None if it raised).
        error: what it raised (None if it ended normally): a
            :class:`~drillbook.errors.TrainingDiverged`, a
            :class:`~drillbook.errors.ResourceError` (out of memory),
            :class:`~drillbook.errors.TrainingInterrupted` (a signal; the row saved the
            step it stopped at), ...; the other rows went on.
        execution: how it ran (:data:`EXECUTIONS`).
        steps: optimiser steps it took in this call.
    """

    trainer: TrainingLoop
    status: RunStatus | None = None
    error: BaseException | None = None
    execution: Way = Way.INTERLEAVED_EAGER
    steps: int = 0


def execution_of(trainer: TrainingLoop) -> Way:
    """How :func:`train_together` runs ``trainer`` (:data:`EXECUTIONS`)."""
    step = trainer.stepper
    if isinstance(step, GraphedStep) and step.capture:
        return Way.GRAPHS_ON_STREAMS
    return Way.INTERLEAVED_EAGER


class _Row:
    """A trainer in the round: its steps, its random state and its stream."""

    def __init__(self, trainer: TrainingLoop, steps: Any) -> None:
        self.trainer, self.steps = trainer, steps
        self.random = trainer.random_state
        self.stream = (torch.cuda.Stream(trainer.device) if trainer.device.type == "cuda"
                       else None)
        self.outcome = RowOutcome(trainer, execution=execution_of(trainer))
        self.start_step = trainer.step

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """This row's random state (and stream) while it takes a step."""
        set_rng_state(*self.random)
        try:
            with (torch.cuda.stream(self.stream) if self.stream is not None
                  else contextlib.nullcontext()):
                yield
        finally:
            self.random = rng_state()


def train_together(trainers: Sequence[TrainingLoop], *, max_minutes: float | None = None,
                   max_epochs: int | None = None,
                   max_steps: int | None = None) -> list[RowOutcome]:
    """Train ``trainers`` in this process, one step of each in turn, until each has
    finished or reached a limit; returns each row's :class:`RowOutcome`, in order.

    Args:
        trainers: the rows (:func:`open_rows`, or trainers built as usual, each on its
            own run folder; build them with ``progress=False`` or ``None``: several bars on
            one terminal overwrite each other). Every trainer's lock is held until it
            ends.
        max_minutes: the deadline, minutes from this call, for every row (each then
            checkpoints and stops with reason ``"budget"``, as ``fit(max_minutes=...)``).
        max_epochs, max_steps: as for ``fit()``, for every row.

    A row that raises (diverges, runs out of memory) ends with its ``error``, as its own
    ``fit()`` would have raised it, and the others go on; Ctrl-C asks every row to stop
    after its current step and save it (each ends with
    :class:`~drillbook.errors.TrainingInterrupted`); a second Ctrl-C stops at once.
    Each result file should record the row's ``execution`` (:data:`EXECUTIONS`).
    """
    rows = [_Row(t, t.training(max_epochs, max_minutes, max_steps)) for t in trainers]
    if any(row.stream is not None for row in rows):
        torch.cuda.synchronize()  # what built the trainers, on the default stream
    active = list(rows)
    with stop_on_signals(trainers):
        try:
            while active:
                for row in list(active):
                    with row.turn():
                        try:
                            next(row.steps)
                            continue
                        except StopIteration as end:
                            row.outcome.status = end.value
                        except Exception as err:  # this row's end; the others go on
                            row.outcome.error = err
                    active.remove(row)
                    row.outcome.steps = row.trainer.step - row.start_step
        finally:
            for row in active:  # a second Ctrl-C, or a bug: each row as its fit() would
                row.steps.close()
    return [row.outcome for row in rows]


def open_rows(jobs: Sequence[tuple[SectionedConfig, str | Path]], *,
              device: str | torch.device | None = None, graphs: bool | None = False,
              corpus: Any = None, progress: bool | None = False) -> list[TrainingLoop]:
    """The trainers of ``jobs`` (``(config, run folder)`` pairs) for
    :func:`train_together`, each resuming its folder if it holds a checkpoint.

    Args:
        device: where every row trains.
        graphs: take the graphed step (``LanguageModelTrainer(graphs=True)``): True for every row
            (a row it does not apply to is refused: a translation config, an fp16 one...),
            None where it applies (a language model whose config allows it, on a CUDA
            device), False for none (the default until measured on a GPU).
        corpus: a corpus every row shares (rows of one table read the same data); None:
            each loads its own.
        progress: the trainers' ``progress``.
    """
    trainers = []
    try:
        for config, run_dir in jobs:
            task = task_of(config)
            kwargs = ({"graphs": True} if takes_graphs(task.trainer, config, device, graphs)
                      else {})
            trainers.append(task.trainer(config, run_dir, device=device, corpus=corpus,
                                         resume=has_checkpoint(run_dir), progress=progress,
                                         **kwargs))
    except BaseException:
        for trainer in trainers:
            trainer.close()
        raise
    return trainers
