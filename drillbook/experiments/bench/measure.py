"""The measuring toolkit of every benchmark: timing with
:class:`torch.utils.benchmark.Timer` (:func:`time_call`), the bytes autograd keeps for the
backward pass (:func:`saved_bytes`), a training step's cost (:func:`step_costs`), ratios to a
baseline measured before and after (:func:`add_ratios`), and out-of-memory handling.

``torch.utils.benchmark`` is imported by the functions that time, not with the module:
importing it looks for a CUDA toolkit and, on a machine that has one and no GPU, prints
torch's "No CUDA runtime is found" line, which nothing but a benchmark should cause."""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch import Tensor, nn

from ...atomic import write_json
from ...errors import ConfigError
from ...precision import PRECISIONS as ALL_PRECISIONS
from ...precision import precision_named
from ...runtime import is_out_of_memory
from ...validation import check_choice

__all__ = [
    "BENCH_FORMAT",
    "CLOCKS",
    "PRECISIONS",
    "PeakMemory",
    "add_ratios",
    "amp_of",
    "check_clock",
    "free_memory",
    "is_out_of_memory",
    "log",
    "out_of_memory_note",
    "saved_bytes",
    "step_costs",
    "time_call",
    "time_once",
    "with_random_table",
    "write_report",
]

#: the ``format`` of every report this package writes
BENCH_FORMAT = "drillbook-bench/2"

#: ``precision`` values, names of :data:`drillbook.precision.PRECISIONS`: those whose step is
#: autocast alone around forward and loss (plain float32, bf16), not those that need a
#: gradient scaler or a matmul mode, which the benchmarks' steps do not set up
PRECISIONS = tuple(p.name for p in ALL_PRECISIONS.values() if not (p.scaler or p.tf32))

#: ``clock`` values of :func:`time_call`: elapsed time, or the process's CPU time
CLOCKS = ("wall", "cpu")


def amp_of(precision: str) -> str:
    """A benchmark's ``precision`` checked (one of :data:`PRECISIONS`), by its name: what
    :func:`drillbook.precision.autocast` takes.

    Raises:
        ConfigError: ``unknown precision 'fp16'; choose one of ['fp32', 'bf16']``.
    """
    return precision_named(precision, PRECISIONS).name


#: what the benchmarks are measuring, one line each (``"bench heads: drill-4 at ptb ..."``).
#: Silent unless a handler is configured: ``drillbook bench`` sends it to stderr.
log = logging.getLogger("drillbook.bench")


def _on(device: torch.device) -> contextlib.AbstractContextManager:
    """Make ``device`` the current CUDA device (the one the timer synchronises)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def check_clock(clock: str, device: torch.device) -> None:
    """Raise a ConfigError for a clock not in :data:`CLOCKS`, or the CPU clock with work
    on an accelerator (whose time it cannot see)."""
    check_choice(clock, CLOCKS, "clock")
    if clock == "cpu" and device.type != "cpu":
        raise ConfigError(f"the cpu clock cannot time work on {device}: use clock='wall'")


def time_call(fn: Callable[[], object], device: torch.device, *, repeats: int = 5,
              warmup: int = 2, clock: str = "wall") -> list[float]:
    """Seconds per call of ``fn()``, measured by :class:`torch.utils.benchmark.Timer`.

    ``warmup`` untimed calls, then ``repeats`` calls timed as one block
    (``Timer.timeit(repeats)``); the timer synchronises the accelerator before and after
    the block (``device`` is made the current CUDA device for it), runs with the calling
    thread's ``torch.get_num_threads()`` (the Timer's own default would be one thread) and
    pauses Python's garbage collector during the block. ``Timer.timeit`` always makes two
    untimed calls of its own first (more for ``repeats`` of 200 and up); they count
    towards ``warmup``, so the warm-up is ``max(warmup, 2)`` calls.

    ``clock="cpu"`` reads the process's CPU time (:func:`time.process_time`, summed over
    its threads) instead of the wall clock: on a CPU shared with other work it counts
    what ``fn`` computes and not the time it waits for a core. CPU only.

    Returns:
        ``[seconds per call]``: the block's mean, in a list (``statistics.median`` of it,
        as callers of the former per-call timings take, is that mean).
    """
    if repeats < 1 or warmup < 0:
        raise ConfigError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, "
                          f"warmup={warmup}")
    check_clock(clock, device)
    from torch.utils import benchmark  # here, not at import: see the module notes

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn},
                            num_threads=torch.get_num_threads(),
                            **({"timer": time.process_time} if clock == "cpu" else {}))
    own_warmup = max(repeats // 100, 2)  # what Timer.timeit runs before its block
    with _on(device):
        for _ in range(warmup - own_warmup):
            fn()
        return timer.timeit(repeats).times


def time_once(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds of one call of ``fn()``, no warm-up, on the clock of
    :class:`torch.utils.benchmark.Timer` (which synchronises the accelerator when it is
    read). For a first, probing call: a ``Timer`` would call ``fn`` three times."""
    from torch.utils import benchmark

    with _on(device):
        start = benchmark.timer()
        fn()
        return benchmark.timer() - start


def _storage_key(t: Tensor) -> tuple[object, int, int]:
    """``(device, data pointer, bytes)`` of a tensor's whole storage."""
    try:
        s = t.untyped_storage()
        return (t.device, s.data_ptr(), s.nbytes())
    except (RuntimeError, NotImplementedError):  # no plain storage (e.g. a wrapper subclass)
        return (t.device, id(t), t.numel() * t.element_size())


def saved_bytes(fn: Callable[[], object], *, exclude: Iterable[Tensor] = ()) -> int:
    """Bytes of the tensors autograd saves for backward while ``fn()`` runs.

    Every tensor an operation saves passes through a
    :func:`torch.autograd.graph.saved_tensors_hooks` pack hook; each distinct storage is
    counted once, at its full size (a view counts its base), and the storages of
    ``exclude`` (pass the model's parameters and buffers: they exist with or without
    backward) are not counted. Inputs that an operation saves are counted.

    Inside a :func:`torch.utils.checkpoint.checkpoint` region (non-reentrant, as the
    chunked mixture heads use) the checkpoint's own hook takes over: what is counted is
    what the checkpoint keeps, its inputs; the region's intermediates are recomputed in
    the backward pass and never saved. The result of ``fn()`` is dropped, which frees the
    graph; call ``backward`` elsewhere.
    """
    excluded = {_storage_key(t)[:2] for t in exclude}
    seen: dict[tuple[object, int], int] = {}
    alive: list[Tensor] = []  # held until the end: a freed address is never reused and
    # mistaken for a storage already counted (saves of discarded subgraphs count too)

    def pack(t: Tensor) -> Tensor:
        device, ptr, nbytes = _storage_key(t)
        if (device, ptr) not in excluded:
            seen[(device, ptr)] = max(nbytes, seen.get((device, ptr), 0))
            alive.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    alive.clear()
    return sum(seen.values())


def out_of_memory_note(err: BaseException) -> str:
    """The ``skipped`` note of a measurement that ran out of memory (first line of the
    error, at most 200 characters)."""
    return f"out of memory: {str(err).splitlines()[0][:200] if str(err) else type(err).__name__}"


def free_memory(device: torch.device) -> None:
    """Release what a failed or finished measurement left behind."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class PeakMemory:
    """The peak CUDA memory of one measurement, on its own: what it allocated above what
    was already allocated when it began (``with PeakMemory(device) as peak: ...; peak.bytes``).

    ``torch.cuda.max_memory_allocated`` counts everything allocated on the device, so a
    measurement that starts while an earlier one's tensors are still alive would report
    them too (a vocabulary sweep after a WikiText-2 model once read 18 GB for a head
    whose step needs under 1 GB). Entering frees what was left behind
    (:func:`free_memory`) and resets the peak; ``bytes`` is ``None`` off CUDA."""

    def __init__(self, device: torch.device) -> None:
        self.device = torch.device(device)
        self.bytes: int | None = None
        self.resident: int | None = None

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            free_memory(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.resident = torch.cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            self.bytes = torch.cuda.max_memory_allocated(self.device) - self.resident


def step_costs(module: nn.Module, loss_fn: Callable[[], Tensor], eval_fn: Callable[[], object],
               device: torch.device, *, repeats: int, warmup: int) -> dict:
    """Time a training step and an evaluation call of ``module``; measure its memory.

    Args:
        module: what trains (a head, or a whole language model).
        loss_fn: forward pass and training loss (autocast inside, if any); the training
            step is ``module.train(); zero_grad; loss_fn().backward()``.
        eval_fn: the evaluation call, run in eval mode under ``torch.no_grad()``.

    Returns:
        ``train_step_s`` and ``eval_s`` (seconds per call, :func:`time_call`),
        ``saved_bytes`` (:func:`saved_bytes` of one training forward pass) and
        ``peak_bytes`` (CUDA, else None: the training steps' own peak, above what was
        allocated before them, such as the weights and inputs; :class:`PeakMemory`).
    """
    def train_step() -> None:
        module.train()
        module.zero_grad(set_to_none=True)
        loss_fn().backward()

    def eval_step() -> None:
        module.eval()
        with torch.no_grad():
            eval_fn()

    with PeakMemory(device) as peak:
        [train] = time_call(train_step, device, repeats=repeats, warmup=warmup)
    module.train()
    saved = saved_bytes(loss_fn, exclude=[*module.parameters(), *module.buffers()])
    module.zero_grad(set_to_none=True)
    [evals] = time_call(eval_step, device, repeats=repeats, warmup=warmup)
    return {"train_step_s": train, "eval_s": evals, "saved_bytes": saved,
            "peak_bytes": peak.bytes}


def add_ratios(rows: list[dict], base: dict, again: dict | None) -> list[dict]:
    """Add ``train_ratio`` and ``eval_ratio`` (row / baseline) to every timed row.

    The baseline is measured before the other heads (``base``) and again after them
    (``again``), and its times become the mean of the two: a machine that warms up or
    slows down steadily during the run then favours no head. (Taking the faster of the
    two would bias every ratio upwards on a noisy machine.) ``base`` keeps both
    measurements (``first_*``, ``last_*``) so the drift can be seen. Rows with
    ``skipped`` are left as they are.
    """
    for key in ("train_step_s", "eval_token_s"):
        first = base[key]
        last = again[key] if again is not None else first
        base[f"first_{key}"], base[f"last_{key}"] = first, last
        base[key] = (first + last) / 2
    for row in rows:
        if "skipped" not in row:
            row["train_ratio"] = row["train_step_s"] / base["train_step_s"]
            row["eval_ratio"] = row["eval_token_s"] / base["eval_token_s"]
    return rows


def write_report(report: dict, path: str | Path) -> Path:
    """Write ``report`` as JSON to ``path`` atomically, creating the folder."""
    return write_json(path, report)


def with_random_table(kind: str, vocab_size: int, options: dict) -> dict:
    """``options`` for a head, with what real data would give it filled in at random
    (:meth:`~drillbook.heads.OutputHead.stand_in_options`: vMF's target table): a benchmark
    times the arithmetic, which does not depend on the words' vectors, and says so by
    passing them itself."""
    from ...heads import HEADS

    cls = HEADS.get(kind)  # an unknown kind: build_head names the choices
    return options if cls is None else cls.stand_in_options(vocab_size, options)
