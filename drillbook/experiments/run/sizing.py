"""What the planner (:mod:`~drillbook.experiments.run.plans`) reads of one training step
of a config, from its task's :class:`~drillbook.train.tasks.Sizing` (:func:`sizing_of`,
declared in the task's package): an epoch's matrix-product FLOPs, what autograd keeps for
the backward pass (the task's step on random data, its saved tensors measured here) and
the weights, gradients and optimiser state."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ...train.tasks import Sizing, task_of
from ..bench.measure import saved_bytes

__all__ = ["EpochWork", "activation_bytes", "epoch_flops", "sizing_of", "state_bytes",
           "step_flops"]


def sizing_of(config) -> Sizing:
    """The :class:`~drillbook.train.tasks.Sizing` of a config's task."""
    return task_of(config).sizing


def step_flops(config, vocab_size: int, positions: float, **extra) -> float:
    """Matrix-product FLOPs of one training step, forward and backward (three times the
    forward pass, :attr:`~drillbook.train.tasks.registry.Sizing.forward_flops` of the
    config's task): of a language model over ``positions`` positions, or (``extra``:
    ``src_vocab``, ``src_len``, ``tgt_len``) of a translation batch of ``positions``
    sentences."""
    return 3 * sizing_of(config).forward_flops(config, vocab_size, positions, **extra)


class EpochWork(NamedTuple):
    """One epoch of a config in matrix-product FLOPs (:func:`epoch_flops`).

    Attributes:
        steps: optimiser steps.
        positions: positions (tokens, or a translation's sentences) per step.
        step: FLOPs of a training step, forward and backward (:func:`step_flops`).
        windows: evaluation windows of its validation.
        window: :func:`step_flops` of a window's positions; a window runs forward only,
            a third of that.
        vocab: the (target) vocabulary's size.
        extra: what a task's step needs beyond them (a translation's ``src_vocab``,
            ``src_len`` and ``tgt_len``; :class:`~drillbook.train.tasks.Sizing`).
    """

    steps: int
    positions: float
    step: float
    windows: float
    window: float
    vocab: int
    extra: dict[str, Any]


def epoch_flops(config, sizes: dict[str, Any] | None = None) -> EpochWork:
    """One epoch of ``config`` (:class:`EpochWork`), from its task's
    :attr:`~drillbook.train.tasks.registry.Sizing.sizes` (given, or read: a
    translation config's data for its vocabularies and sentence lengths).

    Raises:
        ConfigError: a config the FLOP model has no formula for (a Transformer encoder).
    """
    sizes = sizing_of(config).sizes(config) if sizes is None else sizes
    return EpochWork(
        int(sizes["steps"]), float(sizes["positions"]),
        step_flops(config, sizes["vocab"], sizes["positions"], **sizes["extra"]),
        float(sizes["windows"]),
        step_flops(config, sizes["vocab"], sizes["eval_positions"], **sizes["extra"]),
        int(sizes["vocab"]), dict(sizes["extra"]))


def state_bytes(config, sizes: dict[str, Any]) -> float:
    """Weights, gradients and optimiser state of ``config``'s model, 4 bytes each."""
    sizing = sizing_of(config)
    params = sum(p.numel() for p in sizing.model(config, sizes).parameters())
    return 4.0 * params * (2 + sizing.optimizer_states(config))


def activation_bytes(config, vocab_size: int, positions: float, **extra) -> float:
    """What autograd keeps for the backward pass of one training step of ``positions``
    positions (a language model) or sentences (translation, with ``extra``: ``src_vocab``,
    ``src_len``, ``tgt_len``): measured on the CPU at two small sizes of the task's step on
    random data (:attr:`~drillbook.train.tasks.registry.Sizing.probe`) with
    :func:`~drillbook.experiments.bench.measure.saved_bytes`, extrapolated linearly."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    probe = sizing_of(config).probe(config, vocab_size, gen, **extra)
    kept = [*probe.model.parameters(), *probe.model.buffers()]
    (n1, n2) = probe.sizes

    def bytes_at(n: int) -> float:
        return saved_bytes(lambda: probe.loss(n), exclude=kept)

    y1, y2 = bytes_at(n1), bytes_at(n2)
    slope = max(y2 - y1, 0.0) / (n2 - n1)
    return max(y1 + slope * (positions - n1), 0.0)
