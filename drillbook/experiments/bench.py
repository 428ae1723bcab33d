"""What an output head costs: time per training step, time per evaluation token, memory.

Timings are medians over repeated runs after warm-up, with CUDA synchronised around every
measurement, and every head is compared with a tied head measured **in the same process
on the same inputs**, so the ratios hold on a noisy machine even when the absolute numbers
do not. Peak memory is measured on CUDA; on a CPU we report the size of the largest
score tensor the head materialises (``J x n x V`` values for a ``J``-component mixture),
labelled as an estimate.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn

from ..heads import Features, MixtureHead, build_head

__all__ = ["BENCH_HEADS", "SIZES", "HeadCost", "compare_heads", "environment", "head_cost",
           "run_bench", "time_call"]


def time_call(fn: Callable[[], object], device: torch.device, *, repeats: int = 5,
              warmup: int = 2) -> list[float]:
    """Wall-clock seconds of ``fn()``, ``repeats`` times after ``warmup`` untimed calls."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return times


@dataclass(frozen=True)
class HeadCost:
    """One head's measured cost.

    Attributes:
        kind, options: what was measured.
        vocab_size, d, tokens: the problem size (``tokens`` positions per step).
        train_step_s: median seconds of forward + backward of the loss.
        eval_token_s: median seconds per position of the evaluation loss (no grad).
        peak_bytes: peak CUDA memory of a training step (None on CPU).
        score_bytes: size of the largest score tensor (an estimate of the memory the
            output layer needs beyond its parameters).
        device: where it ran.
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

    def to_dict(self) -> dict:
        return asdict(self)


def _features(head, tokens: int, d: int, layer_sizes: Sequence[int] | None,
              device: torch.device, gen: torch.Generator) -> Features:
    t = max(1, tokens // 8)
    b = tokens // t
    sizes = list(layer_sizes) if layer_sizes else [d, d]

    def rand(size: int) -> torch.Tensor:
        return torch.randn(t, b, size, generator=gen).to(device).requires_grad_(True)

    layers = [rand(s) for s in sizes[:-1]] + [rand(head.d_hidden)]
    return Features(layers[-1], tuple(layers))


def head_cost(kind: str, *, vocab_size: int, d: int, tokens: int, d_hidden: int | None = None,
              device: str | torch.device = "cpu", repeats: int = 5, warmup: int = 2,
              seed: int = 0, **options) -> HeadCost:
    """Measure one head at one size (inputs are random; only the cost matters).

    Args:
        kind: a head kind (``drillbook.heads.HEADS``).
        vocab_size, d: ``V`` and the embedding size.
        tokens: positions per step (batch x BPTT length).
        d_hidden: the feature size the head reads (default ``d``).
        options: the head's own options (``depth``, ``n_experts``, ...).
    """
    device = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    d_hidden = d if d_hidden is None else d_hidden
    embedding = nn.Embedding(vocab_size, d).to(device)
    head = build_head(kind, vocab_size=vocab_size, d_hidden=d_hidden, embedding=embedding,
                      **options).to(device)
    feats = _features(head, tokens, d, getattr(head, "layer_sizes", None), device, gen)
    n = feats.last.shape[0] * feats.last.shape[1]
    target = torch.randint(0, vocab_size, feats.last.shape[:-1], generator=gen).to(device)

    def train_step() -> None:
        head.train()
        head.zero_grad(set_to_none=True)
        loss = head.loss(feats, target)
        extra = head.regularizer(feats)
        (loss if extra is None else loss + extra).backward()

    def eval_step() -> None:
        head.eval()
        with torch.no_grad():
            head.loss(feats, target)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    train = time_call(train_step, device, repeats=repeats, warmup=warmup)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    evals = time_call(eval_step, device, repeats=repeats, warmup=warmup)
    components = head.n_vectors if isinstance(head, MixtureHead) else 1
    chunk = getattr(head, "chunk_size", None) or n
    score_bytes = components * min(chunk, n) * vocab_size * embedding.weight.element_size()
    return HeadCost(kind=kind, options=dict(options), vocab_size=vocab_size, d=d, tokens=n,
                    train_step_s=statistics.median(train),
                    eval_token_s=statistics.median(evals) / n, peak_bytes=peak,
                    score_bytes=score_bytes, device=str(device))


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
        ``eval_ratio`` (head / baseline).
    """
    base = head_cost(baseline, **size)
    rows = []
    for kind, options in heads:
        cost = base if (kind, options) == (baseline, {}) else head_cost(kind, **size, **options)
        row = cost.to_dict()
        row["train_ratio"] = cost.train_step_s / base.train_step_s
        row["eval_ratio"] = cost.eval_token_s / base.eval_token_s
        rows.append(row)
    return rows


#: vocabulary sizes the benchmark knows by name
SIZES = {"ptb": 10_000, "wt2": 33_278, "50k": 50_000}

#: the heads of the cost chapter, with the papers' settings
BENCH_HEADS: dict[str, tuple[str, dict]] = {
    "softmax": ("softmax", {}),
    "tied": ("tied", {}),
    "bilinear": ("bilinear", {}),
    "dual": ("dual", {}),
    **{f"drill-{k}": ("drill", {"depth": k}) for k in (1, 2, 3, 4)},
    "mos-15": ("mos", {"n_experts": 15}),
    "doc-15+5": ("doc", {"vectors_per_layer": [0, 5, 15]}),
    "sigsoftmax": ("sigsoftmax", {}),
    "vmf-300": ("vmf", {"dim": 300}),
}


def environment() -> dict:
    """Versions and device, recorded next to every measurement."""
    import platform
    import subprocess

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    device = (torch.cuda.get_device_name() if torch.cuda.is_available()
              else platform.processor() or platform.machine())
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "device_name": device,
            "threads": torch.get_num_threads(), "python": platform.python_version(),
            "commit": commit}


def run_bench(names: Sequence[str], sizes: Sequence[str], *, d: int = 400, tokens: int = 1400,
              device: str = "cpu", repeats: int = 5, warmup: int = 2) -> dict:
    """The head-alone benchmark: every named head at every size, ratios to ``tied``.

    Returns a JSON-ready dict: ``environment``, ``settings`` and ``rows``.
    """
    unknown = sorted(set(names) - set(BENCH_HEADS))
    if unknown:
        raise ValueError(f"unknown head(s) {unknown}; choose from {sorted(BENCH_HEADS)}")
    bad = sorted(set(sizes) - set(SIZES))
    if bad:
        raise ValueError(f"unknown size(s) {bad}; choose from {sorted(SIZES)}")
    rows = []
    for size in sizes:
        kinds = []
        for name in names:
            kind, options = BENCH_HEADS[name]
            if kind == "doc":
                options = {**options, "layer_sizes": [d, d, d]}
            kinds.append((name, kind, options))
        measured = compare_heads([(k, o) for _, k, o in kinds], vocab_size=SIZES[size], d=d,
                                 tokens=tokens, device=device, repeats=repeats,
                                 warmup=warmup)
        for (name, _, _), row in zip(kinds, measured, strict=True):
            rows.append({"name": name, "size": size, **row})
    return {"format": "drillbook-bench/1", "environment": environment(),
            "settings": {"d": d, "tokens": tokens, "device": str(device), "repeats": repeats,
                         "warmup": warmup, "baseline": "tied"},
            "rows": rows}
