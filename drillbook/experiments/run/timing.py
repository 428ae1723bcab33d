"""A job trained as a measurement of its speed: what the concurrency measurement
(``tools/concurrency.py``) runs through the scheduler's own executors.

A job whose :class:`~drillbook.experiments.run.worker.JobSpec` carries a :class:`Timing`
writes no result file. Its row

1. takes ``warmup`` steps (CUDA graphs are captured then, caches and allocators warm up);
2. in a process of its own (``Timing.parent`` set), says it is ready
   (``<folder>/ready-<key>``) and waits for the measurement's start (``<folder>/go``), so
   that rows in separate processes begin their timed steps together;
3. takes ``steps`` timed steps and writes ``<folder>/timed-<key>.json``
   (:func:`read_timed` reads them): when the timed steps began and ended
   (:func:`time.time`), how many there were, the process's peak memory, its id, and how
   the row ran (its ``execution``), or the error that stopped it.

``<key>`` is ``<row>-<seed>`` (:func:`key_of`). A worker process that times a job ends by
itself (exit status :data:`ABANDONED`) once its measurement is gone (its parent is no
longer the process that started it) or has stopped waiting for it (``Timing.deadline``
passed without the start), whether it waits, warms up or trains: no measurement leaves
a process behind, however it ends.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...atomic import write_json
from ...errors import TrainingInterrupted
from ...train.interleaver import open_rows, train_together
from ...train.tasks import task_of
from .jobs import table_jobs

#: a :class:`~drillbook.experiments.run.worker.JobSpec` with a :class:`Timing` (the worker
#: imports this module, so its class is not named here)
JobSpec = Any

__all__ = ["ABANDONED", "Timing", "abandoned", "key_of", "peak_memory", "read_timed",
           "reset_peak", "run_timed", "time_together"]

#: a timing worker's exit status when it ends itself: its measurement is gone, or never
#: said "go"
ABANDONED = 3


@dataclass(frozen=True)
class Timing:
    """A job's measurement (see the module notes).

    Attributes:
        warmup: untimed steps first.
        steps: timed steps.
        folder: where the ready files, the start (``go``) and the timings are.
        deadline: the :func:`time.time` past which a job still waiting for the start gives
            up (and a worker process ends itself).
        parent: the measuring process's id, for a job in a process of its own (it waits
            for the start and watches its parent); None for a job in the measuring process
            itself, which starts its timed steps at once.
    """

    warmup: int
    steps: int
    folder: str
    deadline: float
    parent: int | None = None

    @property
    def go(self) -> Path:
        """The file whose existence starts every row's timed steps."""
        return Path(self.folder) / "go"

    def ready(self, key: str) -> Path:
        return Path(self.folder) / f"ready-{key}"

    def out(self, key: str) -> Path:
        return Path(self.folder) / f"timed-{key}.json"


def key_of(spec: JobSpec) -> str:
    """What a timed job's files are named by: ``<row>-<seed>``."""
    return f"{spec.row}-{spec.seed}"


def peak_memory(device: torch.device) -> int:
    """The device's peak allocated bytes (CUDA), or this process's largest resident set
    so far (a CPU: a rough figure)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def reset_peak(device: torch.device) -> None:
    """Start the device's peak afresh (CUDA; a process's resident set cannot be)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def abandoned(parent: int, deadline: float, go: Path) -> bool:
    """Whether a timing worker's measurement is gone (its parent is no longer ``parent``:
    killed, even by a signal no handler sees) or has stopped waiting for it
    (``deadline``, a :func:`time.time`, passed without ``go``)."""
    return os.getppid() != parent or (time.time() > deadline and not go.exists())


def watch_parent(timing: Timing) -> None:
    """End this process (status :data:`ABANDONED`) once it is :func:`abandoned`: checked
    now, then in a thread of its own."""
    parent = timing.parent
    if parent is None:
        return

    def watch() -> None:
        while True:
            if abandoned(parent, timing.deadline, timing.go):
                os._exit(ABANDONED)
            time.sleep(0.2)

    if abandoned(parent, timing.deadline, timing.go):
        sys.exit(ABANDONED)
    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_timed(spec: JobSpec) -> str:
    """Time the job of ``spec`` in this process (a worker's measuring mode, see the module
    notes); returns the path of its timing."""
    timing = spec.timing
    watch_parent(timing)
    if spec.threads:
        torch.set_num_threads(spec.threads)
    key = key_of(spec)
    job = table_jobs(spec.table, rows=[spec.row], seeds=[spec.seed],
                     overrides=list(spec.overrides))[0]
    trainer = task_of(job.config).trainer(job.config, job.run_dir(spec.runs),
                                          device=spec.device, progress=False)
    try:
        trainer.fit(max_steps=timing.warmup)
        reset_peak(trainer.device)
        if timing.parent is not None:
            timing.ready(key).touch()
            while not timing.go.exists():
                time.sleep(0.005)
        first = trainer.step
        began = time.time()
        trainer.fit(max_steps=first + timing.steps)
        _synchronize(trainer.device)
        record = {"began": began, "ended": time.time(), "steps": trainer.step - first,
                  "peak_memory_bytes": peak_memory(trainer.device), "process": os.getpid(),
                  "execution": spec.way}
    finally:
        trainer.close()
    write_json(timing.out(key), record)
    return str(timing.out(key))


def time_together(specs: Sequence[JobSpec], *, device: str, graphs: bool | None,
                  corpus: Any = None) -> None:
    """Time the jobs of ``specs`` as rows of this process, one step of each in turn
    (:func:`~drillbook.train.interleaver.train_together`), all from one start: what the
    in-process executor does with timed jobs. Each gets its timing file, the wave's
    start and end; a row that fails gets its error there instead, and a stop request
    (:class:`~drillbook.errors.TrainingInterrupted`) is raised."""
    timing = specs[0].timing
    try:
        jobs = [table_jobs(s.table, rows=[s.row], seeds=[s.seed],
                           overrides=list(s.overrides))[0] for s in specs]
        trainers = open_rows([(job.config, job.run_dir(s.runs))
                              for job, s in zip(jobs, specs, strict=True)],
                             device=device, graphs=graphs, corpus=corpus)
    except TrainingInterrupted:
        raise
    except Exception as err:  # a bad override, no memory: every row's timing says so
        for spec in specs:
            _write_error(spec, err)
        return
    try:
        warm = train_together(trainers, max_steps=timing.warmup)  # graphs captured here
        if not _errors(specs, warm):
            first = [trainer.step for trainer in trainers]
            began = time.time()
            timed = train_together(trainers, max_steps=timing.warmup + timing.steps)
            _synchronize(trainers[0].device)
            ended = time.time()
            if not _errors(specs, timed):
                for spec, outcome, start in zip(specs, timed, first, strict=True):
                    write_json(timing.out(key_of(spec)), {
                        "began": began, "ended": ended,
                        "steps": outcome.trainer.step - start,
                        "peak_memory_bytes": peak_memory(outcome.trainer.device),
                        "process": os.getpid(), "execution": outcome.execution})
    finally:
        for trainer in trainers:
            trainer.close()


def _errors(specs: Sequence[JobSpec], outcomes) -> bool:
    """Write the error of each row that raised into its timing file; whether any did. A
    stop request (Ctrl-C, SIGTERM: every row saved the step it stopped at) ends the
    measurement instead: raised."""
    stopped = [o.error for o in outcomes if isinstance(o.error, TrainingInterrupted)]
    if stopped:
        raise stopped[0]
    failed = False
    for spec, outcome in zip(specs, outcomes, strict=True):
        if outcome.error is not None:
            failed = True
            _write_error(spec, outcome.error)
    return failed


def _write_error(spec: JobSpec, err: BaseException) -> None:
    """Write ``err``, on one line, into the timing file of ``spec``'s row."""
    write_json(spec.timing.out(key_of(spec)), {"error": " ".join(str(err).split())[:300]})


def read_timed(specs: Sequence[JobSpec]) -> dict:
    """The throughput of the timed jobs of ``specs`` together: their steps over the wall
    time from the first start to the last end (``wall_seconds``, ``updates``,
    ``updates_per_second``), their peak memory (summed over their processes) and how they
    ran (``execution``); or ``error``, the first error a timing file holds (or that one
    is missing)."""
    records = []
    for spec in specs:
        path = spec.timing.out(key_of(spec))
        if not path.exists():
            return {"error": f"row {key_of(spec)} wrote no timing"}
        record = json.loads(path.read_text(encoding="utf-8"))
        if "error" in record:
            return {"error": record["error"]}
        records.append(record)
    wall = max(r["ended"] for r in records) - min(r["began"] for r in records)
    steps = sum(r["steps"] for r in records)
    peaks: dict[int, int] = {}  # each process's own peak, once
    for r in records:
        peaks[r["process"]] = max(peaks.get(r["process"], 0), r["peak_memory_bytes"])
    return {"execution": records[0]["execution"], "wall_seconds": wall, "updates": steps,
            "updates_per_second": steps / wall, "peak_memory_bytes": sum(peaks.values())}
