"""What long work will cost, said in one line on standard error before it starts.

Three commands can run for hours on a CPU without a word: ``train`` of a paper-size
config, ``rank`` over a whole split and ``eval --dynamic`` (above all with
``--dyn-search``). Each asks this module first; it prints nothing for work it expects to
take less than :data:`LONG_SECONDS`.

* ``train`` on a CPU: an epoch's steps and validation windows from the package's cost
  model (:func:`drillbook.experiments.run.plans.epoch_flops`), a step timed on the real
  model as its task says (:attr:`drillbook.train.tasks.registry.Sizing.step_seconds`: a language
  model's at two short windows, extended to the config's).
* ``rank``: an evaluation window of the real model timed, the Gram matrix's
  multiply-adds and its eigenvalues (``4/3 n^3``) at the rate of float64 products
  measured here.
* ``eval --dynamic``: a few batches of the gradient statistics and a few dynamic segments
  of the real model timed, times how many of each the evaluation takes.

Estimates from short probes on a shared machine are rough (within a factor of two or
so); they say what order of time to plan for.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["LONG_SECONDS", "TRAINING_SECONDS", "duration", "dynamic_cost", "rank_cost", "say",
           "train_cost"]

#: work expected to take less than this many seconds is not announced
LONG_SECONDS = 60.0
#: training is timed (and announced) only where its FLOPs at the fastest rate of a
#: product here take longer than this: a CPU-sized tutorial config is meant to take
#: minutes
TRAINING_SECONDS = 3600.0


def duration(seconds: float) -> str:
    """``seconds`` in words: ``"45 s"``, ``"12 min"``, ``"3.4 h"``, ``"21 days"``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def say(what: str, seconds: float, detail: str) -> None:
    """Print ``drillbook: WHAT will take about ... (DETAIL)`` on standard error, if
    ``seconds`` is at least :data:`LONG_SECONDS`."""
    if math.isfinite(seconds) and seconds >= LONG_SECONDS:
        print(f"drillbook: {what} will take about {duration(seconds)} ({detail})",
              file=sys.stderr, flush=True)


def _timed(fn: Callable[[], Any], device: torch.device) -> float:
    """Seconds of one call of ``fn()``, the device waited for."""
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def _product_rate(m: int, k: int, n: int, dtype: torch.dtype, device: torch.device,
                  repeats: int = 1) -> float:
    """FLOP/s of an ``(m, k) @ (k, n)`` product here: the best of three blocks of
    ``repeats`` products, after a warm-up."""
    a = torch.randn(m, k, dtype=dtype, device=device)
    b = torch.randn(k, n, dtype=dtype, device=device)
    a @ b

    def block() -> None:
        for _ in range(repeats):
            a @ b

    best = min(_timed(block, device) for _ in range(3)) / repeats
    return 2 * m * k * n / max(best, 1e-9)


# ------------------------------------------------------------------ train
def train_cost(config, device: torch.device, max_epochs: int | None
               ) -> tuple[float, float, str] | None:
    """``(seconds per epoch, seconds in all, how)`` of training ``config`` on ``device``;
    None where it is short or there is no model of it (a Transformer encoder).

    Its matrix-product FLOPs (:func:`~drillbook.experiments.run.plans.epoch_flops`) at the
    rate of a large product here bound its time from below; where that bound is under
    :data:`TRAINING_SECONDS`, nothing more is done. Else a step is timed on the real
    model as its task's :attr:`~drillbook.train.tasks.registry.Sizing.step_seconds`
    times it: where a step is a window of a token stream (a language model), at two short
    windows; a
    translation step on one batch.
    FLOPs alone say too little of a step's time on a CPU: measured on a shared 2-core CPU,
    the FLOP model at the rate of the step's products gave 0.07 s for a step of the
    tutorial translation config that took 2.45 s (its decoder is a loop of small
    operations), and 6.8 s for a paper-size AWD-LSTM step that took about 23 s.
    """
    from ..errors import ConfigError
    from ..experiments.run.plans import epoch_flops

    try:
        work = epoch_flops(config)
    except ConfigError:
        return None
    epochs = min(config.train.epochs, max_epochs or config.train.epochs)
    fastest = _product_rate(min(round(work.positions), 4096), 1024, 1024, torch.float32,
                            device)
    bound = epochs * (work.steps * work.step + work.windows * work.window / 3) / fastest
    if bound < TRAINING_SECONDS:  # short even at the machine's fastest: no probe
        return None
    from ..train.tasks import task_of

    # a step of the real model, timed as its task says (a window of a language model's
    # stream, a batch of a translation's sentence pairs)
    step_seconds, how = task_of(config).sizing.step_seconds(
        config, work, device, lambda fn: _timed(fn, device))
    # validation runs forward only: a third of a step of the same positions
    window = step_seconds * work.window / work.step / 3
    epoch = work.steps * step_seconds + work.windows * window
    return epoch, epochs * epoch, how


# ------------------------------------------------------------------ rank
def rank_cost(model, data: torch.Tensor, bptt: int, max_tokens: int | None) -> tuple[float, str]:
    """``(seconds, how)`` of the rank of ``model``'s log-probability matrix on the
    batchified stream ``data`` (:func:`drillbook.analysis.log_prob_chunks` into the Gram
    route of :func:`drillbook.analysis.singular_values`)."""
    from ..analysis import log_prob_chunks

    device = data.device
    vocab = model.head.vocab_size
    rows = min(data.numel() - data.shape[1], max_tokens or math.inf)
    per_window = bptt * data.shape[1]
    windows = math.ceil(rows / per_window)
    chunks = iter(log_prob_chunks(model, data[: 2 * bptt + 1], bptt))
    next(chunks)  # warm-up
    forward = _timed(lambda: next(chunks, None), device)
    short, long = sorted((rows, vocab))
    # M M^T or M^T M, whichever is smaller, then its eigenvalues: a reduction to
    # tridiagonal form, 4/3 n^3 (timing a small eigenvalue problem says nothing here:
    # measured on a shared 2-core CPU, n = 1,024 took 10 s and n = 10,000 took 148 s, 9
    # GFLOP/s by this count, as fast as its float64 products)
    flops = 2 * short * short * long + 4 / 3 * short**3
    rate64 = _product_rate(min(per_window, 4096), min(vocab, 1024), min(vocab, 1024),
                           torch.float64, device)
    seconds = windows * forward + flops / rate64
    return seconds, (f"{rows:,} x {vocab:,} log-probabilities, a {short:,} x {short:,} Gram "
                     f"matrix and its eigenvalues at the {rate64 / 1e9:,.0f} GFLOP/s of "
                     f"float64 products measured here; --max-tokens N reads fewer")


# ------------------------------------------------------------------ dynamic evaluation
def dynamic_cost(model, corpus, *, split: str, bptt: int, grad_batch_size: int,
                 grad_batches: int | None, search: bool, search_tokens: int | None,
                 max_tokens: int | None, lr: float, lamb: float, eps: float
                 ) -> tuple[float, str]:
    """``(seconds, how)`` of :func:`drillbook.train.dynamic.evaluate_run` on a loaded
    language model: its gradient statistics, the search (the grid's pairs over the
    validation split, if ``search``) and the evaluation of ``split``, each timed on a few
    batches of the real model. The model's weights change (it is a probe's copy)."""
    from ..data import batchify
    from ..train import dynamic as d

    device = next(model.parameters()).device
    train = batchify(corpus.train, min(grad_batch_size, len(corpus.train) // 2)).to(device)
    batches = math.ceil((train.shape[0] - 1) / bptt)
    batches = min(batches, grad_batches or batches)
    probe = min(3, batches)
    head = train[: probe * bptt + 1]
    stats = d.gradient_statistics(model, head, bptt, 1)  # warm-up
    per_batch = _timed(lambda: d.gradient_statistics(model, head, bptt, probe).average(),
                       device) / probe
    valid = batchify(corpus.valid, 1).to(device)
    segments = 10
    sample = valid[: segments * bptt + 1]
    d.dynamic_evaluate(model, sample[: bptt + 1], stats, lr=lr, lamb=lamb, eps=eps,
                       bptt=bptt)  # warm-up
    per_segment = _timed(lambda: d.dynamic_evaluate(model, sample, stats, lr=lr, lamb=lamb,
                                                    eps=eps, bptt=bptt), device) / segments

    def segments_of(tokens: int, cap: int | None) -> int:
        return math.ceil(min(tokens - 1, cap or math.inf) / bptt)

    pairs = math.prod(len(g) for g in d.search_grid(bptt)) if search else 0
    searched = pairs * segments_of(len(corpus.valid), search_tokens)
    evaluated = segments_of(len(corpus.split(split)), max_tokens)
    seconds = batches * per_batch + (searched + evaluated) * per_segment
    what = f"{batches:,} batches of gradient statistics, "
    if pairs:
        what += f"{pairs} pairs x {searched // pairs:,} validation segments of the search, "
    what += (f"{evaluated:,} {split} segments, each segment {per_segment * 1000:,.0f} ms "
             f"here")
    return seconds, what
