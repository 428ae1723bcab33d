"""vMF vs softmax as the vocabulary grows: training step, memory and greedy decoding.

A softmax layer's work per position grows with ``V``; a continuous (vMF) layer's training
step does not, but its decoding does (a nearest-neighbour search over ``V`` vectors).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import Tensor

from ...errors import ConfigError
from ...heads import OutputHead, build_head
from ...precision import autocast
from ...provenance import environment
from ...validation import POSITIVE_INT, POSITIVE_NUMBER
from .heads import head_bytes
from .measure import (
    BENCH_FORMAT,
    amp_of,
    free_memory,
    is_out_of_memory,
    log,
    out_of_memory_note,
    step_costs,
    time_once,
    with_random_table,
)

__all__ = ["SWEEP_SIZES", "greedy_decode", "vocab_sweep"]

#: the default vocabulary sizes of the sweep
SWEEP_SIZES = (10_000, 25_000, 50_000, 100_000, 200_000, 400_000, 800_000)


def greedy_decode(head: OutputHead, hidden: Tensor) -> Tensor:
    """The most likely word per position, ``(...)`` ids from ``(..., d_hidden)`` features.

    A head with logits takes their argmax, any other distribution the argmax of its
    log-probabilities; a head that is no distribution (vMF) the nearest neighbour of its
    predicted vector among the unit output embeddings
    (:meth:`~drillbook.heads.VMFHead.decode`, cosine). No autograd.
    """
    with torch.no_grad():
        if not head.is_distribution:
            return head.decode(hidden)
        if head.has_logits:
            return head.logits(hidden).argmax(-1)
        return head.log_prob(hidden).argmax(-1)


def _train_once(loss: Callable[[Tensor, Tensor], Tensor], hidden: Tensor, target: Tensor,
                precision: str) -> None:
    with autocast(amp_of(precision), hidden.device):
        value = loss(hidden, target)
    value.backward()


def _measure(head: OutputHead, loss: Callable[[Tensor, Tensor], Tensor], hidden: Tensor,
             target: Tensor, queries: Tensor, device: torch.device, *, repeats: int,
             warmup: int, precision: str) -> dict:
    def loss_fn() -> Tensor:
        with autocast(amp_of(precision), device):
            return loss(hidden, target)

    def decode() -> None:
        with autocast(amp_of(precision), device):
            greedy_decode(head, queries)

    cost = step_costs(head, loss_fn, decode, device, repeats=repeats, warmup=warmup)
    params, buffers = head_bytes(head)
    return {"train_step_s": cost["train_step_s"],
            "decode_token_s": cost["eval_s"] / queries.shape[0],
            "saved_bytes": cost["saved_bytes"], "peak_bytes": cost["peak_bytes"],
            "param_bytes": params, "buffer_bytes": buffers}


def vocab_sweep(vocab_sizes: Sequence[int] = SWEEP_SIZES, *, d: int = 1024, dim: int = 300,
                tokens: int = 1400, decode_positions: int | None = None,
                device: str | torch.device = "cpu", repeats: int = 5, warmup: int = 2,
                precision: str = "fp32", max_seconds: float | None = None,
                seed: int = 0, compile: bool = False) -> dict:
    """An untied softmax and a vMF head (``dim``-d table) at every vocabulary size.

    Per size and head: a training step of the head alone (forward and backward of its
    loss on ``tokens`` random ``d``-d features), greedy decoding per position, with
    ``decode_positions`` positions per call (:func:`greedy_decode`), saved, parameter,
    buffer and (CUDA) peak bytes; and the speed-ups ``softmax time / head time``
    (``train_speedup``, ``decode_speedup``).

    A size that does not fit (out of memory) is recorded as ``skipped`` with the reason,
    and so are that head's larger sizes; the sweep goes on with the other head. With
    ``max_seconds``, a head whose first (untimed) training step at some size takes
    longer is skipped there and at every larger size.

    Args:
        vocab_sizes: ``V`` values (measured in increasing order).
        d: the feature size (1024: the decoder state of the vMF paper's IWSLT models).
        dim: ``m``, the vMF table's width (300 in the paper).
        tokens: positions per training step.
        decode_positions: positions decoded per call (default ``tokens``: a whole batch
            at once). A decoder step decodes only its batch (x beam) positions, so the
            per-call work that does not scale with positions matters there (the vMF
            head's table is stored unit-length, so it is not normalised per call).
        precision: ``"fp32"``, or ``"bf16"`` for autocast around forward and loss.
        compile: each head's loss through ``torch.compile`` (both heads, so the ratio
            still compares like with like); its compilation happens in the first,
            untimed step. The cost targets count only sweeps without it.

    Returns:
        a JSON-ready dict: ``format``, ``mode`` (``"sweep"``), ``environment``,
        ``settings`` and ``rows`` (one per size and head, ``name`` ``"softmax"`` or
        ``"vmf-<dim>"``).
    """
    sizes = sorted({int(v) for v in vocab_sizes})
    if not sizes or sizes[0] < 2:
        raise ConfigError(f"vocab_sizes must be integers >= 2, got {list(vocab_sizes)}")
    decode_positions = POSITIVE_INT.check(tokens if decode_positions is None
                                          else decode_positions, "decode_positions")
    max_seconds = POSITIVE_NUMBER.or_none("no limit").check(max_seconds, "max_seconds")
    device = torch.device(device)
    amp_of(precision)  # checks the precision before any work
    heads = {"softmax": ("softmax", {}), f"vmf-{dim}": ("vmf", {"dim": dim})}
    stopped: dict[str, str] = {}
    rows = []
    for vocab_size in sizes:
        inputs = _sweep_inputs(vocab_size, tokens, d, decode_positions, seed, device)
        measured = {}
        for name, (kind, options) in heads.items():
            row = {"name": name, "kind": kind, "options": options, "vocab_size": vocab_size,
                   "d": d, "tokens": tokens, "decode_positions": decode_positions,
                   "precision": precision, "device": str(device), "compiled": compile}
            if name in stopped:
                rows.append({**row, "skipped": stopped[name]})
                continue
            row = _measure_head(row, inputs, device, stopped, seed=seed, compile=compile,
                                max_seconds=max_seconds, repeats=repeats, warmup=warmup)
            if "skipped" not in row:
                measured[name] = row
            rows.append(row)
        _add_speedups(measured)
    return {"format": BENCH_FORMAT, "mode": "sweep", "environment": environment(device),
            "settings": {"vocab_sizes": sizes, "d": d, "dim": dim, "tokens": tokens,
                         "decode_positions": decode_positions,
                         "device": str(device), "repeats": repeats, "warmup": warmup,
                         "precision": precision, "max_seconds": max_seconds,
                         "baseline": "softmax", "compile": compile},
            "rows": rows}


def _sweep_inputs(vocab_size: int, tokens: int, d: int, decode_positions: int, seed: int,
                  device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """The features (with a gradient), targets and decoding queries of one vocabulary size,
    drawn from a generator seeded with ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, d, generator=gen).to(device).requires_grad_(True)
    target = torch.randint(0, vocab_size, (tokens,), generator=gen).to(device)
    queries = torch.randn(decode_positions, d, generator=gen).to(device)
    return hidden, target, queries


def _measure_head(row: dict, inputs: tuple[Tensor, Tensor, Tensor], device: torch.device,
                  stopped: dict[str, str], *, seed: int, compile: bool,
                  max_seconds: float | None, repeats: int, warmup: int) -> dict:
    """``row`` (one head at one size) with its measurements, or a copy marked ``skipped``
    when its first training step is too slow or it runs out of memory; then the head's
    name goes into ``stopped`` (its larger sizes are skipped too)."""
    name, kind, vocab_size = row["name"], row["kind"], row["vocab_size"]
    precision = row["precision"]
    hidden, target, queries = inputs
    log.info("bench sweep: %s at V=%s, d=%d, %d positions", name, f"{vocab_size:,}",
             row["d"], row["tokens"])
    try:
        torch.manual_seed(seed)
        head = build_head(kind, vocab_size=vocab_size, d_hidden=row["d"],
                          **with_random_table(kind, vocab_size, row["options"])).to(device)
        loss = torch.compile(head.loss) if compile else head.loss
        first = time_once(partial(_train_once, loss, hidden, target, precision), device)
        if max_seconds is not None and first > max_seconds:
            reason = f"a training step took {first:.1f} s > max_seconds={max_seconds}"
            stopped[name] = f"V={vocab_size}: {reason}"
            return {**row, "skipped": reason}
        row.update(_measure(head, loss, hidden, target, queries, device, repeats=repeats,
                            warmup=max(warmup - 1, 0), precision=precision))
    except (RuntimeError, MemoryError) as err:
        if not is_out_of_memory(err):
            raise
        stopped[name] = f"V={vocab_size} ran out of memory"
        return {**row, "skipped": out_of_memory_note(err)}
    finally:
        head = loss = None
        hidden.grad = None
        free_memory(device)
    return row


def _add_speedups(measured: dict[str, dict]) -> None:
    """Each measured row's ``train_speedup`` and ``decode_speedup``: the softmax's time over
    its own (None without a measured softmax)."""
    base = measured.get("softmax")
    for row in measured.values():
        row["train_speedup"] = base["train_step_s"] / row["train_step_s"] if base else None
        row["decode_speedup"] = (base["decode_token_s"] / row["decode_token_s"]
                                 if base else None)
