"""What an output head costs alone, on random features: time per training step, time per
evaluation token, memory, each compared with a tied head measured in the same process on
the same inputs (so the ratios hold on a noisy machine even when the absolute numbers do
not).

Memory, three ways: ``saved_bytes`` (every device;
:func:`~drillbook.experiments.bench.measure.saved_bytes`), ``peak_bytes`` (CUDA only,
parameters included), and ``score_bytes``, the size of the
largest score tensor the head materialises (``J x n x V`` values for a ``J``-component
mixture), an estimate. :mod:`drillbook.experiments.bench.model` puts the AWD-LSTM encoder
in front of a head, :mod:`drillbook.experiments.bench.sweep` grows the vocabulary for vMF
against softmax, :mod:`drillbook.experiments.bench.report` checks the cost targets and
prints the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...heads import HEADS, Features, OutputHead, RegistryView, build_head
from ...precision import autocast
from ...provenance import environment
from .measure import BENCH_FORMAT, add_ratios, amp_of, log, step_costs, with_random_table

__all__ = ["BENCH_HEADS", "SIZES", "HeadCost", "bench_head", "check_names", "compare_heads",
           "fit_layers", "head_bytes", "head_cost", "run_bench", "score_bytes"]


def head_bytes(head: OutputHead) -> tuple[int, int]:
    """``(param_bytes, buffer_bytes)``: the head's own parameters (shared ones, the tied
    input embedding, excluded) and its buffers (vMF's frozen table)."""
    shared = {id(p) for p in head.shared_parameters()}
    params = sum(p.numel() * p.element_size() for p in head.parameters() if id(p) not in shared)
    buffers = sum(b.numel() * b.element_size() for b in head.buffers())
    return params, buffers


@dataclass(frozen=True)
class HeadCost:
    """One head's measured cost.

    Attributes:
        kind, options: what was measured.
        vocab_size, d, tokens: the problem size (``tokens`` positions per step).
        train_step_s: seconds of forward + backward of the loss
            (:func:`~drillbook.experiments.bench.measure.time_call`).
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
    in training (its :meth:`~drillbook.heads.OutputHead.score_values`: 0 for a head that
    scores no words then, vMF)."""
    return head.score_values(positions) * element_size


def head_cost(kind: str, *, vocab_size: int, d: int, tokens: int, d_hidden: int | None = None,
              device: str | torch.device = "cpu", repeats: int = 5, warmup: int = 2,
              seed: int = 0, precision: str = "fp32", fused: bool = False,
              **options) -> HeadCost:
    """Measure one head at one size (inputs are random; only the cost matters).

    Args:
        kind: a head kind (``drillbook.heads.HEADS``).
        vocab_size, d: ``V`` and the embedding size.
        tokens: positions per step (batch x BPTT length).
        d_hidden: the feature size the head reads (default ``d``).
        precision: ``"fp32"``, or ``"bf16"`` for autocast around forward and loss.
        fused: time the fused output loss (:mod:`drillbook.heads.fused`, the CPU's
            default in training) on any device, a GPU included (where the head and the
            precision have one: not under autocast); False (default): the plain path, the
            reference whose ``(n, V)`` scores these measurements show, and what a GPU runs
            by default.
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
                      **with_random_table(kind, vocab_size, options)).to(device)
    head.fused_loss = fused  # True: fused on every device, a GPU included
    feats = _features(head, tokens, d, device, gen)
    n = feats.last.shape[0] * feats.last.shape[1]
    target = torch.randint(0, vocab_size, feats.last.shape[:-1], generator=gen).to(device)

    def loss_fn() -> Tensor:
        with autocast(amp_of(precision), device):
            loss = head.loss(feats, target)
            extra = head.regularizer(feats)
        return loss if extra is None else loss + extra

    def eval_fn() -> None:
        with autocast(amp_of(precision), device):
            head.loss(feats, target)

    cost = step_costs(head, loss_fn, eval_fn, device, repeats=repeats, warmup=warmup)
    params, buffers = head_bytes(head)
    element = next(head.parameters()).element_size()
    return HeadCost(kind=kind, options=dict(options), vocab_size=vocab_size, d=d, tokens=n,
                    train_step_s=cost["train_step_s"], eval_token_s=cost["eval_s"] / n,
                    peak_bytes=cost["peak_bytes"], score_bytes=score_bytes(head, n, element),
                    device=str(device), saved_bytes=cost["saved_bytes"], param_bytes=params,
                    buffer_bytes=buffers, precision=precision)


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


#: vocabulary sizes the benchmark knows by name
SIZES = {"ptb": 10_000, "wt2": 33_278, "50k": 50_000}

#: the heads of the cost chapter: name -> (kind, options), every entry each registered head
#: declares (:attr:`~drillbook.heads.OutputHead.bench`: the papers' settings,
#: dropouts included, as they are part of the training step being timed)
BENCH_HEADS = RegistryView(lambda: {name: (kind, options) for kind, cls in HEADS.items()
                                    for name, options in cls.bench_variants().items()},
                           "benchmark head")


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


def bench_head(name: str, d: int) -> tuple[str, dict]:
    """The kind and options the head-alone benchmark builds :data:`BENCH_HEADS` ``name``
    with: a head that reads layers reads three of size ``d`` (the embedding and two
    layers)."""
    kind, options = BENCH_HEADS[name]
    options = fit_layers(options, 3)
    if HEADS[kind].reads_layers:
        options = {**options, "layer_sizes": [d, d, d]}
    return kind, options


def run_bench(names: Sequence[str], sizes: Sequence[str], *, d: int = 400, tokens: int = 1400,
              device: str = "cpu", repeats: int = 5, warmup: int = 2,
              precision: str = "fp32") -> dict:
    """The head-alone benchmark: every named head at every size, ratios to ``tied``.

    Returns a JSON-ready dict: ``format``, ``mode`` (``"heads"``), ``environment``,
    ``settings`` and ``rows`` (:class:`HeadCost` fields, ``name``, ``size`` and the
    ratios).
    """
    check_names(names, sizes)
    amp_of(precision)  # checks the precision before any work
    rows = []
    for size in sizes:
        kinds = [(name, *bench_head(name, d)) for name in names]
        measured = compare_heads([(k, o) for _, k, o in kinds], vocab_size=SIZES[size], d=d,
                                 tokens=tokens, device=device, repeats=repeats,
                                 warmup=warmup, precision=precision)
        for (name, _, _), row in zip(kinds, measured, strict=True):
            rows.append({"name": name, "size": size, **row})
    return {"format": BENCH_FORMAT, "mode": "heads", "environment": environment(device),
            "settings": {"d": d, "tokens": tokens, "device": str(device), "repeats": repeats,
                         "warmup": warmup, "baseline": "tied", "precision": precision},
            "rows": rows}


