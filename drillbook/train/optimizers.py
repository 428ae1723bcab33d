"""SGD and averaged SGD whose update a CUDA graph can hold: multi-tensor (``torch._foreach_*``)
operations, the learning rate a device scalar, no value read back to the host.

``torch.optim.SGD`` and ``torch.optim.ASGD`` take the learning rate as a Python number
(an update captured in a graph would keep the first step's rate forever) or, given a
tensor, read it back (``.item()``, which a graph cannot capture); averaged SGD also reads
its ``mu`` back to choose between two branches. :class:`GraphSGD` and :class:`GraphASGD`
are the same optimisers (subclasses, with the same ``state_dict``) whose
:meth:`~GraphSGD.update` reads the rate from ``lr_now``, a 0-d tensor on the
parameters' device that ``set_lr`` writes before each step (outside any
graph). On the CPU their steps equal torch's bit for bit (tested): the update is the
same fused multiply-add (``addcmul`` with the rate tensor is the kernel of ``add`` with
``alpha``), the averaging's branch is a multiplication by 0 or 1.

Only what drillbook's recipes use is supported: plain SGD with weight decay (no
momentum), and averaged SGD as NT-ASGD runs it (``t0 = 0``, ``lambd = 0``): every
parameter in one group, each with a gradient at every step.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from ..errors import ConfigError

__all__ = ["GraphASGD", "GraphSGD", "apply_learning_rate", "first_kind", "graph_optimizer",
           "make_optimizer"]


class _DeviceRate:
    """The learning rate as a device scalar (mixed into both optimisers)."""

    param_groups: list[dict]

    def _init_rate(self) -> None:
        if len(self.param_groups) != 1:
            raise ValueError("the graph-ready optimisers take one parameter group")
        first = self.param_groups[0]["params"][0]
        #: the learning rate of the next update, on the parameters' device
        self.lr_now = torch.tensor(float(self.param_groups[0]["lr"]), dtype=first.dtype,
                                   device=first.device)

    def set_lr(self, lr: float) -> None:
        """Write the next update's learning rate (a device write, never a read back);
        outside a captured graph, before it is replayed."""
        self.lr_now.fill_(lr)

    def _with_grads(self) -> tuple[list[Tensor], list[Tensor]]:
        group = self.param_groups[0]
        params = [p for p in group["params"] if p.grad is not None]
        return params, [p.grad for p in params]

    @torch.no_grad()
    def step(self, closure=None):
        """torch's ``step``: an update at the group's ``lr`` (written to
        ``lr_now`` first)."""
        if closure is not None:
            raise ValueError("the graph-ready optimisers take no closure")
        self.set_lr(self.param_groups[0]["lr"])
        self.update()


class GraphSGD(_DeviceRate, torch.optim.SGD):
    """``torch.optim.SGD(params, lr, weight_decay=wd)`` (no momentum) with a device rate:
    ``p <- p - lr (g + wd p)``, as two multi-tensor operations.

    Args:
        params: the parameters (one group).
        lr: the base learning rate (``param_groups[0]["lr"]``, as torch's).
        weight_decay: ``wd``.
    """

    def __init__(self, params: Iterable[Tensor], lr: float, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr=lr, weight_decay=weight_decay)
        self._init_rate()

    @torch.no_grad()
    def update(self) -> None:
        """One update at ``lr_now`` (what a graph captures)."""
        params, grads = self._with_grads()
        if not params:
            return
        decay = self.param_groups[0]["weight_decay"]
        if decay:
            grads = torch._foreach_add(grads, params, alpha=decay)
        rate = [self.lr_now.expand_as(p) for p in params]
        torch._foreach_addcmul_(params, grads, rate, value=-1)


class GraphASGD(_DeviceRate, torch.optim.ASGD):
    """``torch.optim.ASGD(params, lr, t0=0, lambd=0, weight_decay=wd)`` with a device
    rate, as drillbook's NT-ASGD runs it. Per parameter, at step ``n``:

    ``p <- p - eta_n (g + wd p)``, then the average ``ax <- ax + mu_n (p - ax)``,

    where ``eta_n`` is the rate of step ``n - 1`` (the rate of the first step for ``n =
    1``: torch sets ``eta`` after each update, for the next) and ``mu_n = 1 /
    max(1, n - 1)`` (``ax`` is ``p`` itself for the first two steps; torch copies it there,
    here ``ax`` is multiplied by 0 first, so that ``ax + 1 (p - 0)`` is ``p`` exactly).
    The state (``step``, ``eta``, ``mu``, ``ax`` per parameter) is torch's, so checkpoints
    of either load into the other.

    Args:
        params: the parameters (one group).
        lr: the base learning rate.
        weight_decay: ``wd``.
    """

    def __init__(self, params: Iterable[Tensor], lr: float, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr=lr, t0=0, lambd=0.0, weight_decay=weight_decay)
        self._init_rate()

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's, then each ``step`` moved to its parameter's device: torch keeps a
        loaded step count on the CPU (unless capturable), where a graph would not see it
        advance."""
        super().load_state_dict(state_dict)
        for p in self.param_groups[0]["params"]:
            state = self.state.get(p)
            if state and "step" in state:
                state["step"] = state["step"].to(device=p.device, dtype=p.dtype)

    def _state_lists(self, params: list[Tensor]) -> tuple[list[Tensor], ...]:
        """Each parameter's ``step``, ``eta``, ``mu`` and ``ax``, made as torch makes them
        at a parameter's first step (``eta`` the rate of that step)."""
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = torch.zeros((), dtype=p.dtype, device=p.device)
                state["eta"] = self.lr_now.clone()
                state["mu"] = torch.ones((), dtype=p.dtype, device=p.device)
                state["ax"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return tuple([self.state[p][key] for p in params]
                     for key in ("step", "eta", "mu", "ax"))

    @torch.no_grad()
    def update(self) -> None:
        """One update at ``lr_now``, and the average (what a graph captures)."""
        params, grads = self._with_grads()
        if not params:
            return
        steps, etas, mus, axs = self._state_lists(params)
        torch._foreach_add_(steps, 1)
        decay = self.param_groups[0]["weight_decay"]
        if decay:
            grads = torch._foreach_add(grads, params, alpha=decay)
        rates = [e.expand_as(p) for e, p in zip(etas, params, strict=True)]
        torch._foreach_addcmul_(params, grads, rates, value=-1)
        torch._foreach_mul_(axs, [torch.ne(m, 1).to(m.dtype) for m in mus])  # mu = 1: ax = 0
        moved = torch._foreach_sub(params, axs)
        torch._foreach_mul_(moved, mus)
        torch._foreach_add_(axs, moved)
        torch._foreach_copy_(etas, [self.lr_now] * len(etas))
        torch._foreach_copy_(mus, torch._foreach_reciprocal(torch._foreach_maximum(steps, 1.0)))


def graph_optimizer(kind: str, params: Iterable[Tensor], lr: float,
                    weight_decay: float) -> torch.optim.Optimizer:
    """The graph-ready optimiser of a trainer's ``kind`` (``"sgd"`` or ``"asgd"``).

    Raises:
        ValueError: another kind (Adam's rate is not a device scalar here).
    """
    if kind == "sgd":
        return GraphSGD(params, lr, weight_decay)
    if kind == "asgd":
        return GraphASGD(params, lr, weight_decay)
    raise ValueError(f"the graph-ready step takes SGD or averaged SGD, not {kind!r}")



def first_kind(optimizer: str) -> str:
    """The kind a language-model run starts with for its ``train.optimizer``: ``"adam"``,
    or ``"sgd"`` (NT-ASGD switches it to ``"asgd"`` later)."""
    return "adam" if optimizer == "adam" else "sgd"


def make_optimizer(kind: str, params: Iterable[Tensor], lr: float, weight_decay: float, *,
                   graph_ready: bool = False, betas: tuple[float, float] = (0.9, 0.999)
                   ) -> torch.optim.Optimizer:
    """The optimiser of a ``kind``: ``"sgd"``, ``"asgd"`` (NT-ASGD's averaged SGD,
    ``t0 = 0``, ``lambd = 0``) or ``"adam"`` (with ``betas``: PyTorch's default, or a
    translation config's ``(0.9, train.adam_beta2)``), at ``lr`` with weight decay;
    ``graph_ready``: :func:`graph_optimizer`'s instead (SGD and averaged SGD). What both
    trainers and the step benchmark build.

    Raises:
        ConfigError: another kind.
    """
    if graph_ready:
        return graph_optimizer(kind, params, lr, weight_decay)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    if kind == "asgd":
        return torch.optim.ASGD(params, lr=lr, t0=0, lambd=0.0, weight_decay=weight_decay)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, betas=betas, weight_decay=weight_decay)
    raise ConfigError(f"train.optimizer must be 'sgd' or 'adam', got {kind!r}")


def apply_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set ``lr`` after ``optimizer.load_state_dict`` (which restores the saved one).

    Averaged SGD keeps its step size per parameter as well (``eta``, the previous step's
    ``lr``): it is scaled by the same factor, so a lower ``train.lr`` on resume applies
    from the first step.
    """
    for group in optimizer.param_groups:
        old, group["lr"] = group["lr"], lr
        if isinstance(optimizer, torch.optim.ASGD) and old != lr:
            for p in group["params"]:
                eta = optimizer.state.get(p, {}).get("eta")
                if eta is not None:
                    eta.mul_(lr / old)
