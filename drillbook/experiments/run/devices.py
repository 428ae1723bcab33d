"""The devices a plan is sized for, and how rows at once share one.

A :class:`DeviceClass` is a kind of GPU (or this machine's CPU): its memory, its step time
against the measured H200's, the CPU cores beside it. A :class:`Sharing` says how ``n``
rows at once on one GPU share it: as processes (measured, :data:`SHARING_COST`) or as
graphed steps on streams in one process (assumed, :data:`ASSUMED_RATIO` at
:data:`ASSUMED_ROWS` rows). :func:`~drillbook.experiments.run.plans.predict` reads both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...train.ways import Way

__all__ = ["ASSUMED_RATIO", "ASSUMED_ROWS", "CUDA_CONTEXT_BYTES", "DEVICE_CLASSES",
           "SHARINGS", "SHARING_COST", "DeviceClass", "Sharing"]

#: what each further row on the same GPU adds to a row's time, as a multiple of its time
#: alone, when the rows are processes: fitted to the gpu-ptb window of 2026-11-26 (NVIDIA
#: H200, four rows at once; ``drillbook/results/gpu/2026-11-26-h200-window2-fp32``): each
#: row's epoch against the refitted step model's time alone
#: (:func:`~drillbook.experiments.run.cost_model.bench_steps`), 4.20 to 4.63 times, mean
#: 4.37 = 1 + 3 x 1.12 (against the first step model, which overestimated a step alone:
#: 3.33 to 3.62, c = 0.82). Four processes gave less than one process's throughput
#: (4 / 4.37 = 0.92): the GPU time-slices between them.
SHARING_COST = 1.12


@dataclass(frozen=True)
class Sharing:
    """How rows at once on one GPU share it: ``n`` rows together train ``ratio(n)`` times
    the row-updates per second of one row alone (each row is ``n / ratio(n)`` times
    slower than alone).

    Attributes:
        way: the way the rows run (:class:`~drillbook.train.ways.Way`): processes
            (measured), graphed steps on streams (the goal, not measured yet).
        note: where the numbers come from, printed with every prediction.
        measured: the ratios were measured in a window (False: assumed).
    """

    way: Way
    note: str
    measured: bool

    @property
    def name(self) -> str:
        """``processes``, ``graphs-assumed``: the way's sharing name
        (:attr:`drillbook.train.ways.Way.sharing`, ``--sharing``)."""
        return str(self.way.sharing)

    def ratio(self, n: int) -> float:
        """Aggregate throughput of ``n`` rows at once, in rows alone."""
        if n <= 1:
            return 1.0
        if self.way is Way.PROCESS:
            return n / (1.0 + SHARING_COST * (n - 1))
        # assumed: linear from 1 row (1x) to ASSUMED_ROWS rows (ASSUMED_RATIO x), flat after
        return 1.0 + (min(n, ASSUMED_ROWS) - 1) * (ASSUMED_RATIO - 1) / (ASSUMED_ROWS - 1)

    def slowdown(self, n: int) -> float:
        """Each of ``n`` rows at once against its time alone."""
        return n / self.ratio(n)


#: the goal of graphed steps on streams in one process: this many small rows at once ...
ASSUMED_ROWS = 16
#: ... train this many times one small row's updates per second (assumed until a window
#: measures it with tools/concurrency.py)
ASSUMED_RATIO = 8.0

#: how rows share a GPU, by name
SHARINGS: dict[str, Sharing] = {sharing.name: sharing for sharing in (
    Sharing(Way.PROCESS, f"rows as processes, measured: each of n rows at once "
                         f"1 + {SHARING_COST} (n - 1) times slower than alone "
                         f"(the gpu-ptb window of 2026-11-26, four rows)", True),
    Sharing(Way.GRAPHS_ON_STREAMS, f"graphed steps on streams in one process, "
                                   f"ASSUMED (not measured yet): {ASSUMED_ROWS} rows at once "
                                   f"train {ASSUMED_RATIO:g}x one row's updates per "
                                   f"second, linear below", False),
)}


#: the CUDA context and allocator's own memory, assumed (bytes)
CUDA_CONTEXT_BYTES = int(0.5 * 2**30)


@dataclass(frozen=True)
class DeviceClass:
    """A kind of GPU a plan is sized for.

    Attributes:
        name: ``h200``, ``h100``.
        memory_gib: its memory.
        step_scale: its training step's time as a multiple of the measured H200's.
        note: where ``step_scale`` comes from.
        cpu_cores: the CPU cores beside it (each worker keeps one busy).
    """

    name: str
    memory_gib: float
    step_scale: float
    note: str
    cpu_cores: int = 16


#: the device classes :func:`~drillbook.experiments.run.plans.predict` knows
DEVICE_CLASSES: dict[str, DeviceClass] = {
    "h200": DeviceClass("h200", 141.0, 1.0, "measured (the speed rows)"),
    "h100": DeviceClass("h100", 80.0, 1.0, "assumed as fast as the H200: the same compute, "
                                           "and these steps are bound by latency, not by "
                                           "memory bandwidth"),
    # this machine's CPU: no GPU model applies, each config's step is timed here
    "cpu": DeviceClass("cpu", 0.0, 1.0, "measured on this CPU: three training steps of each "
                                        "config, one thread (cpu_step_seconds)",
                       cpu_cores=os.cpu_count() or 1),
}
