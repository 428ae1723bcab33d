"""What an output head costs: time per training step, time per evaluation token, memory.

Timings come from :class:`torch.utils.benchmark.Timer` (:func:`time_call`): after
warm-up calls, the mean time per call of ``repeats`` calls timed as one block, with the
accelerator synchronised before and after the block, with the thread count the caller
runs with, and with Python's garbage collector paused while the block runs (as
``timeit`` does). Every head is compared with a tied head measured **in the same
process on the same inputs**, so the ratios hold on a noisy machine even when the
absolute numbers do not.

Memory, three ways:

* ``saved_bytes`` (every device): the bytes autograd keeps for the backward pass of one
  training step (:func:`saved_bytes`), the model's parameters and buffers excluded;
* ``peak_bytes`` (CUDA only, else None): ``torch.cuda.max_memory_allocated`` over the
  training steps, parameters included;
* ``score_bytes``: the size of the largest score tensor the head materialises
  (``J x n x V`` values for a ``J``-component mixture), an estimate.

This module measures a head alone on random features; :mod:`.bench_model` puts the
AWD-LSTM encoder in front of it, :mod:`.bench_sweep` grows the vocabulary for vMF vs
softmax, :mod:`.bench_report` checks the issue's targets and prints the tables.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.utils import benchmark

from ..errors import ConfigError
from ..heads import HEADS, Features, OutputHead, build_head
from .results import write_json

__all__ = ["BENCH_FORMAT", "BENCH_HEADS", "CLOCKS", "PRECISIONS", "SIZES", "HeadCost",
           "autocast", "check_clock", "compare_heads", "environment", "head_bytes",
           "head_cost", "is_out_of_memory", "out_of_memory_note",
           "run_bench", "saved_bytes", "step_costs", "time_call", "time_once", "write_report"]

#: the ``format`` of every report this package writes
BENCH_FORMAT = "drillbook-bench/2"

#: ``precision`` values: plain float32, or bf16 autocast around forward and loss
PRECISIONS = ("fp32", "bf16")

#: ``clock`` values of :func:`time_call`: elapsed time, or the process's CPU time
CLOCKS = ("wall", "cpu")


def _on(device: torch.device) -> contextlib.AbstractContextManager:
    """Make ``device`` the current CUDA device (the one the timer synchronises)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def check_clock(clock: str, device: torch.device) -> None:
    """Raise a ConfigError for a clock not in :data:`CLOCKS`, or the CPU clock with work
    on an accelerator (whose time it cannot see)."""
    if clock not in CLOCKS:
        raise ConfigError(f"unknown clock {clock!r}; choose one of {list(CLOCKS)}")
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
    with _on(device):
        start = benchmark.timer()
        fn()
        return benchmark.timer() - start


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to bfloat16 for ``"bf16"``, a no-op for ``"fp32"``.

    Raises:
        ValueError: any other precision.
    """
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; choose one of {list(PRECISIONS)}")
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


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


def head_bytes(head: OutputHead) -> tuple[int, int]:
    """``(param_bytes, buffer_bytes)``: the head's own parameters (shared ones, the tied
    input embedding, excluded) and its buffers (vMF's frozen table)."""
    shared = {id(p) for p in head.shared_parameters()}
    params = sum(p.numel() * p.element_size() for p in head.parameters() if id(p) not in shared)
    buffers = sum(b.numel() * b.element_size() for b in head.buffers())
    return params, buffers


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation failure (CUDA or CPU) rather than a bug."""
    if isinstance(err, torch.cuda.OutOfMemoryError | MemoryError):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("out of memory" in text
                                               or "can't allocate memory" in text)


def out_of_memory_note(err: BaseException) -> str:
    """The ``skipped`` note of a measurement that ran out of memory (first line of the
    error, at most 200 characters)."""
    return f"out of memory: {str(err).splitlines()[0][:200] if str(err) else type(err).__name__}"


def free_memory(device: torch.device) -> None:
    """Release what a failed or finished measurement left behind."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


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
        ``peak_bytes`` (CUDA, else None).
    """
    def train_step() -> None:
        module.train()
        module.zero_grad(set_to_none=True)
        loss_fn().backward()

    def eval_step() -> None:
        module.eval()
        with torch.no_grad():
            eval_fn()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    [train] = time_call(train_step, device, repeats=repeats, warmup=warmup)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    module.train()
    saved = saved_bytes(loss_fn, exclude=[*module.parameters(), *module.buffers()])
    module.zero_grad(set_to_none=True)
    [evals] = time_call(eval_step, device, repeats=repeats, warmup=warmup)
    return {"train_step_s": train, "eval_s": evals, "saved_bytes": saved, "peak_bytes": peak}


@dataclass(frozen=True)
class HeadCost:
    """One head's measured cost.

    Attributes:
        kind, options: what was measured.
        vocab_size, d, tokens: the problem size (``tokens`` positions per step).
        train_step_s: seconds of forward + backward of the loss (:func:`time_call`).
        eval_token_s: seconds per position of the evaluation loss (no grad).
        peak_bytes: peak CUDA memory of a training step (None on CPU).
        score_bytes: size of the largest score tensor (an estimate of the memory the
            output layer needs beyond its parameters).
        device: where it ran.
        saved_bytes: what autograd keeps for backward (:func:`saved_bytes`).
        param_bytes, buffer_bytes: the head's own parameters and buffers
            (:func:`head_bytes`).
        precision: ``"fp32"`` or ``"bf16"`` (autocast).
    """

    kind: str
    options: dict
    vocab_size: int
    d: int
    tokens: int
    train_step_s: float
    eval_token_s: float
    peak_bytes: int | None
    score_bytes: int
    device: str
    saved_bytes: int
    param_bytes: int
    buffer_bytes: int
    precision: str = "fp32"

    def to_dict(self) -> dict:
        return asdict(self)


def _features(head: OutputHead, tokens: int, d: int, device: torch.device,
              gen: torch.Generator) -> Features:
    """Random ``(T, B, size)`` features with every layer a head may read (``d`` each, or
    the ``layer_sizes`` of a head that reads layers)."""
    t = max(1, tokens // 8)
    b = tokens // t
    sizes = list(head.layer_sizes) if head.reads_layers else [d, d]

    def rand(size: int) -> torch.Tensor:
        return torch.randn(t, b, size, generator=gen).to(device).requires_grad_(True)

    layers = [rand(s) for s in sizes[:-1]] + [rand(head.d_hidden)]
    return Features(layers[-1], tuple(layers))


def score_bytes(head: OutputHead, positions: int, element_size: int) -> int:
    """Bytes of the largest score tensor ``head`` materialises for ``positions`` contexts
    in training (a head that is no distribution, vMF, scores no words then: 0)."""
    if not head.is_distribution:
        return 0
    if not head.is_mixture:
        return positions * head.vocab_size * element_size
    chunk = min(head.chunk_size or positions, positions)
    return head.n_softmaxes * chunk * head.vocab_size * element_size


def head_cost(kind: str, *, vocab_size: int, d: int, tokens: int, d_hidden: int | None = None,
              device: str | torch.device = "cpu", repeats: int = 5, warmup: int = 2,
              seed: int = 0, precision: str = "fp32", **options) -> HeadCost:
    """Measure one head at one size (inputs are random; only the cost matters).

    Args:
        kind: a head kind (``drillbook.heads.HEADS``).
        vocab_size, d: ``V`` and the embedding size.
        tokens: positions per step (batch x BPTT length).
        d_hidden: the feature size the head reads (default ``d``).
        precision: ``"fp32"``, or ``"bf16"`` for autocast around forward and loss.
        options: the head's own options (``depth``, ``n_experts``, ...).
    """
    device = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    d_hidden = d if d_hidden is None else d_hidden
    cls = HEADS.get(kind)  # an unknown kind: build_head names the choices
    embedding = None
    if cls is not None and cls.shares_embedding:
        # initialised as the AWD-LSTM does: nn.Embedding's N(0, 1) would give logits of
        # size ~sqrt(d), whose softmax underflows into subnormal floats that slow a CPU
        # down many times over (a cost no trained model pays)
        embedding = nn.Embedding(vocab_size, d)
        nn.init.uniform_(embedding.weight, -0.1, 0.1)
        embedding = embedding.to(device)
    head = build_head(kind, vocab_size=vocab_size, d_hidden=d_hidden, embedding=embedding,
                      **options).to(device)
    feats = _features(head, tokens, d, device, gen)
    n = feats.last.shape[0] * feats.last.shape[1]
    target = torch.randint(0, vocab_size, feats.last.shape[:-1], generator=gen).to(device)

    def loss_fn() -> Tensor:
        with autocast(device, precision):
            loss = head.loss(feats, target)
            extra = head.regularizer(feats)
        return loss if extra is None else loss + extra

    def eval_fn() -> None:
        with autocast(device, precision):
            head.loss(feats, target)

    cost = step_costs(head, loss_fn, eval_fn, device, repeats=repeats, warmup=warmup)
    params, buffers = head_bytes(head)
    element = next(head.parameters()).element_size()
    return HeadCost(kind=kind, options=dict(options), vocab_size=vocab_size, d=d, tokens=n,
                    train_step_s=cost["train_step_s"], eval_token_s=cost["eval_s"] / n,
                    peak_bytes=cost["peak_bytes"], score_bytes=score_bytes(head, n, element),
                    device=str(device), saved_bytes=cost["saved_bytes"], param_bytes=params,
                    buffer_bytes=buffers, precision=precision)


#: what the benchmarks are measuring, one line each (``"bench heads: drill-4 at ptb ..."``).
#: Silent unless a handler is configured: ``drillbook bench`` sends it to stderr.
log = logging.getLogger("drillbook.bench")


def compare_heads(heads: Sequence[tuple[str, dict]], *, baseline: str = "tied",
                  **size) -> list[dict]:
    """Measure several heads and the baseline in one process; add ratios to it.

    Args:
        heads: ``(kind, options)`` pairs.
        baseline: the kind every ratio divides by (measured first).
        size: keyword arguments of :func:`head_cost` (``vocab_size``, ``d``, ``tokens``,
            ``device``, ``repeats``, ...).

    Returns:
        one dict per head: the :class:`HeadCost` fields plus ``train_ratio`` and
        ``eval_ratio`` (head / baseline, see ``add_ratios``: the baseline is measured
        first and last).
    """
    where = ", ".join(f"{k}={v}" for k, v in size.items() if k in ("vocab_size", "d", "tokens"))
    log.info("bench heads: %s (baseline) at %s", baseline, where)
    base = head_cost(baseline, **size).to_dict()
    rows = []
    for i, (kind, options) in enumerate(heads, 1):
        if (kind, options) == (baseline, {}):
            rows.append(base)
            continue
        log.info("bench heads: %s %s at %s [%d/%d]", kind, options or "", where, i, len(heads))
        rows.append(head_cost(kind, **size, **options).to_dict())
    if len(heads) > 1:
        log.info("bench heads: %s (baseline) again at %s", baseline, where)
    again = head_cost(baseline, **size).to_dict() if len(heads) > 1 else None
    return add_ratios(rows, base, again)


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


#: vocabulary sizes the benchmark knows by name
SIZES = {"ptb": 10_000, "wt2": 33_278, "50k": 50_000}

#: the heads of the cost chapter, with the papers' settings (dropouts included: they are
#: part of the training step being timed)
BENCH_HEADS: dict[str, tuple[str, dict]] = {
    "softmax": ("softmax", {}),
    "tied": ("tied", {}),
    "bilinear": ("bilinear", {}),
    "dual": ("dual", {}),
    **{f"drill-{k}": ("drill", {"depth": k, "dropout": 0.6}) for k in (1, 2, 3, 4)},
    "mos-15": ("mos", {"n_experts": 15, "latent_dropout": 0.29}),
    "mos-15-chunk256": ("mos", {"n_experts": 15, "latent_dropout": 0.29, "chunk_size": 256}),
    "doc-15+5": ("doc", {"vectors_per_layer": [0, 5, 15], "latent_dropout": 0.6}),
    "sigsoftmax": ("sigsoftmax", {}),
    "vmf-300": ("vmf", {"dim": 300}),
}


def check_names(names: Sequence[str], sizes: Sequence[str] = ()) -> None:
    """Raise a ValueError naming unknown head or size names and the valid ones."""
    unknown = sorted(set(names) - set(BENCH_HEADS))
    if unknown:
        raise ConfigError(f"unknown head(s) {unknown}; choose from {sorted(BENCH_HEADS)}")
    bad = sorted(set(sizes) - set(SIZES))
    if bad:
        raise ConfigError(f"unknown size(s) {bad}; choose from {sorted(SIZES)}")


def fit_layers(options: dict, n_layers: int) -> dict:
    """DOC's ``vectors_per_layer`` left-padded (or left-trimmed of zeros) to ``n_layers``
    entries, the embedding included; other heads' options unchanged.

    Raises:
        ValueError: the non-zero counts need more layers than the encoder has.
    """
    if "vectors_per_layer" not in options:
        return options
    counts = list(options["vectors_per_layer"])
    while len(counts) > n_layers and counts[0] == 0:
        counts.pop(0)
    if len(counts) > n_layers:
        raise ConfigError(f"vectors_per_layer={options['vectors_per_layer']} reads more layers "
                         f"than the encoder's {n_layers} (embedding included); use an "
                         f"encoder with more layers (model.nlayers)")
    return {**options, "vectors_per_layer": [0] * (n_layers - len(counts)) + counts}


def git_state() -> dict:
    """``commit`` (HEAD of the package's checkout, None outside git) and ``dirty`` (the
    package's files differ from that commit, None outside git). A long run should read
    this when it starts: the checkout may move on while it trains."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--", str(Path(__file__).parents[1])))}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


def environment(device: str | torch.device | None = None) -> dict:
    """Versions and device, recorded next to every measurement.

    ``device_name`` names ``device`` (the GPU's name for CUDA, else the CPU); without
    ``device``, the GPU when there is one.
    """
    import platform

    commit = git_state()["commit"]
    cuda = torch.device(device).type == "cuda" if device is not None else \
        torch.cuda.is_available()
    name = (torch.cuda.get_device_name(torch.device(device) if device is not None else None)
            if cuda else platform.processor() or platform.machine())
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "device_name": name,
            "threads": torch.get_num_threads(), "python": platform.python_version(),
            "commit": commit}


def run_bench(names: Sequence[str], sizes: Sequence[str], *, d: int = 400, tokens: int = 1400,
              device: str = "cpu", repeats: int = 5, warmup: int = 2,
              precision: str = "fp32") -> dict:
    """The head-alone benchmark: every named head at every size, ratios to ``tied``.

    Returns a JSON-ready dict: ``format``, ``mode`` (``"heads"``), ``environment``,
    ``settings`` and ``rows`` (:class:`HeadCost` fields, ``name``, ``size`` and the
    ratios).
    """
    check_names(names, sizes)
    autocast(torch.device(device), precision)  # checks the precision before any work
    rows = []
    for size in sizes:
        kinds = [(name, BENCH_HEADS[name][0], fit_layers(BENCH_HEADS[name][1], 3))
                 for name in names]
        # a head that reads layers reads three of size d (embedding and two layers)
        kinds = [(n, k, {**o, "layer_sizes": [d, d, d]} if HEADS[k].reads_layers else o)
                 for n, k, o in kinds]
        measured = compare_heads([(k, o) for _, k, o in kinds], vocab_size=SIZES[size], d=d,
                                 tokens=tokens, device=device, repeats=repeats,
                                 warmup=warmup, precision=precision)
        for (name, _, _), row in zip(kinds, measured, strict=True):
            rows.append({"name": name, "size": size, **row})
    return {"format": BENCH_FORMAT, "mode": "heads", "environment": environment(device),
            "settings": {"d": d, "tokens": tokens, "device": str(device), "repeats": repeats,
                         "warmup": warmup, "baseline": "tied", "precision": precision},
            "rows": rows}


def write_report(report: dict, path: str | Path) -> Path:
    """Write ``report`` as JSON to ``path`` atomically, creating the folder."""
    return write_json(path, report)
