"""The update rule of dynamic evaluation (Krause et al., 2018, Sec. 5) and the statistics it
is scaled by.

:func:`gradient_statistics` measures ``sqrt(MS_g)`` of every parameter on the training text;
:class:`DynamicUpdate` moves the weights after each scored segment and decays them towards
the trained ones. The defaults and the search grid are those of the authors' code.
:mod:`drillbook.train.dynamic` reads a stream with them (its docstring gives the rule).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..data import get_batch
from ..errors import ConfigError, DataError
from ..models import LanguageModel

__all__ = ["DEFAULT_BPTT", "DEFAULT_EPS", "DEFAULT_GRAD_BATCH_SIZE", "DEFAULT_LAMBDA",
           "DEFAULT_LR", "DynamicUpdate", "GradientStats", "gradient_statistics",
           "old_hyperparameters", "search_grid"]

#: η of the authors' ``dynamiceval.py`` (tuned for AWD-LSTM on PTB)
DEFAULT_LR = 5e-5
#: λ of the authors' ``dynamiceval.py``
DEFAULT_LAMBDA = 2e-3
#: ε of the authors' ``dynamiceval.py``
DEFAULT_EPS = 2e-5
#: segment length (and the training statistics' window length) of the authors' code
DEFAULT_BPTT = 5
#: batch size of the training-gradient statistics in the authors' code
DEFAULT_GRAD_BATCH_SIZE = 100
#: the authors' search grid at ``bptt = 5`` (``--grid``): learning rates and λ
_LR_GRID = (3e-5, 4e-5, 5e-5, 6e-5, 7e-5, 1e-4)
_LAMBDA_GRID = (1e-3, 2e-3, 3e-3, 5e-3)


def search_grid(bptt: int = DEFAULT_BPTT) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The authors' grid of learning rates and decay rates for segments of ``bptt``
    tokens: their values at 5 tokens scaled by ``bptt / 5`` (as their code scales them)."""
    scale = bptt / DEFAULT_BPTT
    return (tuple(x * scale for x in _LR_GRID), tuple(x * scale for x in _LAMBDA_GRID))


def old_hyperparameters(lr: float, lamb: float, eps: float, *, tensors: int,
                        batches: int) -> tuple[float, float, float]:
    """``(η, λ, ε)`` of this rule that reproduce the first version of the authors' script
    (the one the MoS repository ships) run with ``lr``, ``lamb``, ``eps``.

    That version took ``sqrt`` of the *sum* of the ``N_b`` squared gradients, not of their
    mean, and divided by the *sum* over the ``n`` parameter tensors of their mean RMS, not by
    the average. So its denominator is ``sqrt(N_b) sqrt(MS_g) + ε_old`` and its decay rate
    ``λ_old RMS_norm / n``, which is this rule with::

        η = η_old / sqrt(N_b),   ε = ε_old / sqrt(N_b),   λ = λ_old / n

    (the authors' ``--oldhyper``; the caps agree: ``λ_old · RMS_norm / n <= 1``).

    Args:
        tensors: ``n``, the number of parameter tensors (``len(list(model.parameters()))``;
            the authors' models may count theirs differently).
        batches: ``N_b``, the training batches of the statistics
            (:attr:`GradientStats.batches`).
    """
    root = math.sqrt(batches)
    return lr / root, lamb / tensors, eps / root


def trainable_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The trainable parameters, each tensor once (a tied embedding is one parameter)."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


@contextmanager
def native_cpu_rnn(device: torch.device) -> Iterator[None]:
    """On CPU, run the LSTM with PyTorch's native kernel rather than oneDNN's.

    With autograd on, oneDNN's LSTM prepares its weights anew at every call: measured on a
    PTB AWD-LSTM (3 layers, 1150 units) reading one stream in segments of 5 tokens, its
    forward pass took 8 times as long as the native one. The setting is put back on exit.
    """
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        yield
        return
    with warnings.catch_warnings():  # torch announces oneDNN's TF32 on every switch
        warnings.filterwarnings("ignore", message=".*TF32 acceleration on top of oneDNN.*")
        with torch.backends.mkldnn.flags(enabled=False):
            yield


# ------------------------------------------------------------------ gradient statistics
@dataclass
class GradientStats:
    """``sqrt(MS_g)`` of every parameter (Sec. 5), measured on the training text.

    Attributes:
        rms: parameter name -> ``sqrt(MS_g)``, the parameter's shape.
        batches: ``N_b``, the number of training batches averaged.
    """

    rms: dict[str, Tensor]
    batches: int

    def average(self) -> float:
        """``avg(sqrt(MS_g))``: the mean over parameter tensors of each tensor's mean RMS
        (every tensor weighs the same, as in the authors' code)."""
        means = [float(r.double().mean()) for r in self.rms.values() if r.numel()]
        return sum(means) / len(means)

    def rms_norm(self) -> dict[str, Tensor]:
        """``RMS_norm = sqrt(MS_g) / avg(sqrt(MS_g))`` (Sec. 5), per parameter."""
        avg = self.average()
        if not avg > 0:
            raise DataError("every training gradient is zero, so the gradient statistics "
                            "cannot scale the update; measure them on more training text")
        return {n: r / avg for n, r in self.rms.items()}

    def state_dict(self) -> dict[str, Any]:
        """Tensors and numbers only (a state file loads with ``weights_only=True``)."""
        return {"rms": dict(self.rms), "batches": self.batches}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> GradientStats:
        """The statistics :meth:`state_dict` saved."""
        return cls(dict(state["rms"]), int(state["batches"]))


def gradient_statistics(model: LanguageModel, data: Tensor, bptt: int = DEFAULT_BPTT,
                        max_batches: int | None = None) -> GradientStats:
    """``MS_g`` (Sec. 5) of ``model`` on a batchified training stream, as its square root.

    The model is in eval mode (no dropout) and its weights do not change; the state is
    carried across the windows of ``bptt`` rows, and every window's gradient is that of
    its mean loss.

    Args:
        model: the trained language model.
        data: the training stream, batchified ``(T, B)`` (the authors use ``B = 100``).
        bptt: window length.
        max_batches: average over the first this many windows only (None: all).

    Raises:
        DataError: the stream is too short for one window.
    """
    params = trainable_parameters(model)
    sums = {n: torch.zeros_like(p) for n, p in params}
    was_training = model.training
    model.eval()
    hidden = model.init_hidden(data.shape[1])
    batches = 0
    try:
        with torch.enable_grad(), native_cpu_rnn(data.device):
            for i in range(0, data.shape[0] - 1, bptt):
                if max_batches is not None and batches >= max_batches:
                    break
                x, y = get_batch(data, i, bptt)
                model.zero_grad(set_to_none=True)
                out = model(x, hidden)
                model.head.loss(out.features, y).backward()
                with torch.no_grad():
                    for n, p in params:
                        if p.grad is not None:
                            sums[n].addcmul_(p.grad, p.grad)
                hidden = model.encoder.detach_hidden(out.hidden)
                batches += 1
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    if batches == 0:
        raise DataError(f"the training stream of shape {tuple(data.shape)} is too short for "
                        f"one window of gradient statistics; use a smaller batch size")
    return GradientStats({n: (s / batches).sqrt() for n, s in sums.items()}, batches)


# ------------------------------------------------------------------ the update
class DynamicUpdate:
    """The update of Sec. 5 for every parameter of ``model``, from the gradients in ``.grad``.

    ``θ ← θ − η g / (sqrt(MS_g) + ε) + min(λ RMS_norm, 1) ⊙ (θ_g − θ)``

    Args:
        model: the module whose parameters are updated in place.
        stats: ``sqrt(MS_g)`` of the same parameters (:func:`gradient_statistics`).
        lr: ``η`` (0: no learning; with ``lr = 0`` the weights stay at ``θ_g``).
        lamb: ``λ``, the decay rate towards ``θ_g`` (0: no decay).
        eps: ``ε``.
        theta_g: the weights to decay towards; default a copy of the current ones.

    Raises:
        ConfigError: a negative rate, a non-positive ``eps``, or statistics of other
            parameters.
    """

    def __init__(self, model: nn.Module, stats: GradientStats, *, lr: float, lamb: float,
                 eps: float = DEFAULT_EPS, theta_g: dict[str, Tensor] | None = None) -> None:
        for name, value in (("lr", lr), ("lamb", lamb)):
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"dynamic evaluation: {name} must be a finite number >= 0, "
                                  f"got {value}")
        if not (math.isfinite(eps) and eps > 0):
            raise ConfigError(f"dynamic evaluation: eps must be a positive number, got {eps}")
        self.params = trainable_parameters(model)
        names = [n for n, _ in self.params]
        if sorted(names) != sorted(stats.rms):
            raise ConfigError("the gradient statistics were measured on other parameters "
                              "than the model's; measure them on this model "
                              "(gradient_statistics)")
        self.lr, self.lamb, self.eps = float(lr), float(lamb), float(eps)
        device = self.params[0][1].device if self.params else None
        norm = stats.rms_norm()
        self.denominator = {n: (stats.rms[n] + self.eps).to(device) for n in names}
        # r = λ · min(RMS_norm, 1/λ): the authors' capped decay rate, at most 1
        self.rate = {n: (norm[n].clamp(max=1 / self.lamb) * self.lamb if self.lamb
                         else torch.zeros_like(norm[n])).to(device) for n in names}
        if theta_g is None:
            theta_g = {n: p.detach().clone() for n, p in self.params}
        self.theta_g = theta_g

    @torch.no_grad()
    def step(self) -> None:
        """Apply the update once, in place (a parameter without a gradient only decays).

        Two fused passes per tensor: ``θ + r ⊙ (θ_g − θ)`` as ``lerp``, then the gradient
        term, which does not depend on ``θ``: both terms read ``θ_{i-1}``.
        """
        for name, p in self.params:
            if self.lamb:
                p.lerp_(self.theta_g[name], self.rate[name])
            if p.grad is not None and self.lr:
                p.addcdiv_(p.grad, self.denominator[name], value=-self.lr)

    @torch.no_grad()
    def reset(self) -> None:
        """Put ``θ_g`` back into the parameters (in place: label caches see it)."""
        for name, p in self.params:
            p.copy_(self.theta_g[name])
