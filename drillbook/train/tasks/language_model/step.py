"""The language-model trainer's step without its run around it (:func:`trainer_step`,
what the step benchmark times and the planner probes), the optimiser it starts with
(:func:`start_optimizer`), and the task's tiny run for a result file's fingerprint
(:func:`tiny_run`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ....configs import TrainConfig, apply_overrides
from ....metrics import MAX_LOSS
from ....models import LanguageModel, build_model
from ....precision import PRECISIONS
from ...lm import LanguageModelTrainer
from ...optimizers import first_kind, make_optimizer
from ...step import LocalReducer, OptimizerStep
from ..registry import TinyRun

__all__ = ["start_optimizer", "tiny_run", "trainer_step"]


class _Window(NamedTuple):
    """A batch as the language-model trainer's sampler gives it, at the full length."""

    x: Tensor
    y: Tensor
    lr_scale: float = 1.0


class _Trained:
    """A language-model trainer without its run around it: the model, its optimiser and
    the trainer's own hooks for the step (its ``loss``, ``tokens``, ``lr_scale``), each
    window from a fresh recurrent state."""

    loss = LanguageModelTrainer.loss
    tokens = LanguageModelTrainer.tokens
    lr_scale = LanguageModelTrainer.lr_scale

    def __init__(self, model: LanguageModel, optimizer: torch.optim.Optimizer,
                 train: TrainConfig) -> None:
        self.model = self.forward_model = model
        self.optimizer, self.hidden = optimizer, None
        self.config = _Section(train)


class _Section(NamedTuple):
    train: TrainConfig


def _unchecked(what: str, step: int, own_loss: bool) -> BaseException:  # pragma: no cover
    return RuntimeError(what)  # the benchmark never reads its steps back


def trainer_step(model: LanguageModel, optimizer: torch.optim.Optimizer, x: Tensor,
                 y: Tensor, train: TrainConfig,
                 amp: Callable[[], contextlib.AbstractContextManager]) -> Tensor:
    """The language-model trainer's step, by the training loop's own
    :class:`~drillbook.train.step.OptimizerStep` and the trainer's ``loss`` hook: forward
    from a fresh recurrent state, the head's loss, its regulariser, AR and TAR
    (:func:`drillbook.train.training_loss`), backward, ``clip_grad_norm_`` to
    ``train.clip``, the optimiser's step, and the step's deferred checks queued (they are
    read back at the trainer's logging points, which the benchmark never reaches).

    What the trainer adds around it is left out: reading the checks back, carrying the
    detached state (it costs what a fresh state costs), the learning-rate scaling by the
    window length (``lr_scale`` 1). Returns the head's loss (detached)."""
    task = _Trained(model, optimizer, train)
    step = OptimizerStep(task, model, clip=train.clip, parts=1, precision=PRECISIONS["fp32"],
                         device=x.device, scaler=None,
                         reducer=LocalReducer(model, MAX_LOSS, _unchecked),
                         autocast_context=amp)
    return step(_Window(x, y), 0)


def start_optimizer(model: LanguageModel, train: TrainConfig) -> torch.optim.Optimizer:
    """The optimiser the trainer starts with (SGD, or Adam), at the config's rate: the
    trainer's own :func:`~drillbook.train.optimizers.make_optimizer`."""
    return make_optimizer(first_kind(train.optimizer), model.parameters(), train.lr,
                          train.wdecay)


def tiny_run(config, size: TinyRun) -> tuple[list[float], Any]:
    """The fingerprint's tiny run (:mod:`drillbook.experiments.results.fingerprint`): the
    config at a few units (every other setting, the head's options included, as the row
    has them), ``size.steps`` steps of :func:`trainer_step` on fixed random word ids;
    ``(losses, model)``."""
    sets = ["model.emsize=8", "model.nhid=12", "model.d_ff=16", "model.nhead=2"]
    if config.model.d_out is not None:
        sets.append("model.d_out=8")
    options = config.head.options
    if options.get("residual_label") or options.get("residual_context"):
        sets.append("head.options.d_joint=8")  # a residual needs d_j = d (= d_h here)
    config = apply_overrides(config, sets)
    model = build_model(config, size.vocab).train()
    optimizer = start_optimizer(model, config.train)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, size.vocab, (size.length + 1, size.batch), generator=gen)
    losses = [float(trainer_step(model, optimizer, ids[:-1], ids[1:], config.train,
                                 contextlib.nullcontext)) for _ in range(size.steps)]
    return losses, model
