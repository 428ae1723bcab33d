"""How the planner and the command line's estimates size a language model's training
step: its sizes on its corpus, its matrix-product FLOPs (AWD-LSTM's encoder and the
head's, :mod:`drillbook.analysis`), the step on random words whose saved tensors are
measured, its model on the meta device and a step of the real model timed."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import torch

from ....analysis import awd_lstm_flops, head_flops
from ....data import corpus_spec
from ....errors import ConfigError
from ....heads import HEADS
from ....models import build_model
from ...lm import training_loss
from ..registry import Sizing, StepProbe
from .step import start_optimizer, trainer_step

__all__ = ["SIZING", "mean_bptt"]


def mean_bptt(bptt: int) -> float:
    """The mean window length of AWD-LSTM's variable BPTT (``bptt`` w.p. 0.95, else half)."""
    return 0.95 * bptt + 0.05 * bptt / 2


def _sizes(config) -> dict[str, Any]:
    t = config.train
    spec = corpus_spec(config.data.corpus)
    positions = t.batch_size * mean_bptt(t.bptt)
    steps = spec.tokens["train"] / positions
    windows = spec.tokens["valid"] / (t.eval_batch_size * t.bptt)
    cap = t.max_batches_per_epoch
    return {"vocab": spec.vocab_size, "positions": positions, "extra": {},
            "steps": min(math.ceil(steps), cap or math.inf), "windows": windows,
            "eval_positions": t.eval_batch_size * t.bptt}


def _flops(config, vocab_size: int, positions: float) -> float:
    """Forward matrix-product FLOPs of a language model over ``positions`` positions."""
    m = config.model
    if m.encoder != "awd-lstm":
        raise ConfigError(f"no FLOP model for a {m.encoder!r} encoder; the plans train the "
                          f"AWD-LSTM")
    d_out = m.d_out or m.emsize
    n = max(1, round(positions))
    encoder = awd_lstm_flops(emsize=m.emsize, nhid=m.nhid, nlayers=m.nlayers, tokens=n,
                             d_out=d_out)
    options = dict(config.head.options)
    if HEADS[config.head.kind].reads_layers:
        options["layer_sizes"] = [m.emsize, *[m.nhid] * (m.nlayers - 1), d_out]
    head = head_flops(config.head.kind, vocab_size=vocab_size, d=m.emsize, d_hidden=d_out,
                      tokens=n, **options)
    return float(encoder + head.train_forward)


def _probe(config, vocab_size: int, gen: torch.Generator) -> StepProbe:
    """The training loss of ``n`` random positions (8 words in ``n / 8`` columns)."""
    model = build_model(config, vocab_size).train()
    model.head.fused_loss = False  # what a GPU keeps: the plain path, its default there
    chunk = config.head.options.get("chunk_size") or 8

    def loss(n: int) -> torch.Tensor:
        x = torch.randint(0, vocab_size, (9, max(1, n // 8)), generator=gen)
        x, y = x[:-1], x[1:]
        hidden = model.init_hidden(x.shape[1])
        return training_loss(model, x, y, hidden, alpha=config.train.alpha,
                             beta=config.train.beta)[0]

    return StepProbe((2 * chunk, 4 * chunk), model, loss)


def _model(config, sizes: dict[str, Any]) -> torch.nn.Module:
    """On the meta device: nothing allocated."""
    with torch.device("meta"):
        return build_model(config, sizes["vocab"])


def _window_seconds(config, vocab_size: int, device: torch.device,
                    timed: Callable[[Callable[[], Any]], float]) -> Callable[[float], float]:
    """Seconds of a training step of ``config``'s language model as a function of its
    window length: forward and backward of the real model on random words, its batch's
    columns, timed at windows of 4 and 8 and extended linearly (every part of the step
    grows with the window: its sequential steps as much as its products)."""
    t = config.train
    model = build_model(config, vocab_size).to(device).train()

    def seconds(window: int) -> float:
        x = torch.randint(0, vocab_size, (window + 1, t.batch_size), device=device)

        def step() -> None:
            model.zero_grad(set_to_none=True)
            loss = training_loss(model, x[:-1], x[1:], model.init_hidden(t.batch_size),
                                 alpha=t.alpha, beta=t.beta)[0]
            loss.backward()

        return min(timed(step) for _ in range(2))

    seconds(2)  # warm-up
    short, long = seconds(4), seconds(8)
    per_position = max(long - short, 0.0) / 4
    return lambda window: max(short + (window - 4) * per_position, short)


def _step_seconds(config, work, device: torch.device,
                  timed: Callable[[Callable[[], Any]], float]) -> tuple[float, str]:
    """A step is a window of the stream: the real one timed at the epoch's mean window."""
    step = _window_seconds(config, corpus_spec(config.data.corpus).vocab_size, device, timed)
    seconds = step(round(work.positions / config.train.batch_size))
    return seconds, (f"{work.steps:,} steps of {seconds:,.2f} s, timed on windows of 4 and "
                     f"8 words here")


def _cpu_step(config, sizes: dict[str, Any], gen: torch.Generator) -> Callable[[], Any]:
    """The trainer's own step (forward, backward, clipping, the optimiser's update) on a
    window of random word ids as long as the step's mean window, its batch's columns."""
    torch.manual_seed(0)
    model = build_model(config, sizes["vocab"]).train()
    optimizer = start_optimizer(model, config.train)
    length = max(1, round(sizes["positions"] / config.train.batch_size))
    ids = torch.randint(0, sizes["vocab"], (length + 1, config.train.batch_size), generator=gen)
    return lambda: trainer_step(model, optimizer, ids[:-1], ids[1:], config.train,
                                contextlib.nullcontext)


#: Optimiser state: Adam keeps two tensors per parameter, averaged SGD one (its average),
#: SGD none (a language model averages once NT-ASGD switches, so one is assumed)
SIZING = Sizing(sizes=_sizes, forward_flops=_flops, probe=_probe, model=_model,
                optimizer_states=lambda c: 2 if c.train.optimizer == "adam" else 1,
                step_seconds=_step_seconds, cpu_step=_cpu_step)
