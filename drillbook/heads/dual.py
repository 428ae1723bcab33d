"""Dual nonlinear mapping: labels and contexts projected into one joint space."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from .base import Features, check_positive_int
from .label_cache import LabelEncoderHead

__all__ = ["ACTIVATIONS", "DualHead", "check_activation"]


def _identity(x: Tensor) -> Tensor:
    return x


#: the nonlinearities the label/context projections may use, by name
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "identity": _identity,
}


def check_activation(name: str, choices: tuple[str, ...], kind: str) -> str:
    """Return ``name`` if it is one of ``choices``, else raise a ValueError listing them."""
    if name not in choices:
        raise ValueError(
            f"unknown activation {name!r} for the {kind!r} head; choose one of {list(choices)}"
        )
    return name


class DualHead(LabelEncoderHead):
    """Dual nonlinear (joint input-output embedding) output layer (DRILL paper, Eq. 5).

    .. math::

        p(y_t \\mid y_{1}^{t-1}) \\propto
            \\exp\\big(\\sigma(E U + b_u)\\, \\sigma(V h_t + b_v) + b\\big)

    (Pappas et al., 2018, Eq. 14). Both the labels (rows of the shared input embedding
    ``E in R^{V x d}``) and the context ``h_t in R^{d_h}`` are projected into a joint
    space of size ``d_j`` and scored by a dot product there:

    * label side ``g_out(E) = σ(E U + b_u)``, shape ``(V, d_j)``: :attr:`label_proj`, an
      ``nn.Linear(d, d_j)`` whose ``weight`` ``(d_j, d)`` is ``U^T``;
    * context side ``g_in(h) = σ(V h + b_v)``, shape ``(..., d_j)``: :attr:`context_proj`,
      an ``nn.Linear(d_h, d_j)`` whose ``weight`` ``(d_j, d_h)`` is ``V``;
    * logits ``g_in(h) g_out(E)^T + b`` with a per-word bias ``b`` (:attr:`bias`).

    With ``activation="identity"`` and ``b_u = b_v = 0`` this is the bilinear head with
    ``W = U V`` (``= label_proj.weight.T @ context_proj.weight``), of rank at most
    ``d_j``. ``g_out(E)`` does not depend on the input: in eval mode under
    ``torch.no_grad()`` it is computed once and cached (:meth:`label_embeddings`).

    Init: ``U, V ~ U(-0.1, 0.1)`` (as the authors' code), ``b_u = b_v = 0`` (a choice:
    zero biases keep the identity-activation case exactly bilinear at init), ``b = 0``.

    Args:
        vocab_size: ``V``.
        d_hidden: ``d_h``, any size.
        embedding: the input ``nn.Embedding(V, d)`` (or its weight parameter); required.
        d_joint: ``d_j``, the joint-space size (default: ``d``, the embedding size). Its
            breadth is how this layer's capacity is raised.
        activation: ``σ``, one of ``"tanh"`` (default, as in Pappas et al.),
            ``"sigmoid"``, ``"relu"``, ``"identity"``.
        bias: learn the per-word bias ``b`` (default ``True``).

    Shapes:
        hidden ``(..., d_h)`` -> logits ``(..., V)``.

    Parameters:
        dedicated ``C_dual = d d_j + d_j + d_j d_h + d_j + V`` (``U, b_u, V, b_v, b``);
        shared ``V d`` (``E``).
    """

    kind = "dual"
    options = ("d_joint", "activation", "bias")
    activations = ("tanh", "sigmoid", "relu", "identity")

    def __init__(
        self,
        vocab_size: int,
        d_hidden: int,
        embedding: nn.Embedding | nn.Parameter | None = None,
        *,
        d_joint: int | None = None,
        activation: str = "tanh",
        bias: bool = True,
    ) -> None:
        super().__init__(vocab_size, d_hidden, embedding, bias=bias)
        self.activation = check_activation(activation, self.activations, self.kind)
        self.d_joint = (self.d_embedding if d_joint is None
                        else check_positive_int(d_joint, "d_joint"))
        weight = self.embedding_weight
        factory = {"device": weight.device, "dtype": weight.dtype}
        self.label_proj = nn.Linear(self.d_embedding, self.d_joint, **factory)
        self.context_proj = nn.Linear(d_hidden, self.d_joint, **factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``U, V ~ U(-0.1, 0.1)``; ``b_u = b_v = b = 0``; the embedding is left alone."""
        super().reset_parameters()
        for proj in (self.label_proj, self.context_proj):
            nn.init.uniform_(proj.weight, -0.1, 0.1)
            nn.init.zeros_(proj.bias)

    # ------------------------------------------------------------ label side
    def _encode_labels(self, rows: Tensor | None = None) -> Tensor:
        """``g_out(E) = σ(E U + b_u)`` (of the given embedding rows, default all)."""
        emb = self.embedding_weight if rows is None else rows
        return ACTIVATIONS[self.activation](self.label_proj(emb))

    def _label_sources(self) -> tuple[Tensor, ...]:
        return (self.embedding_weight, self.label_proj.weight, self.label_proj.bias)

    # ---------------------------------------------------------- context side
    def context_embeddings(self, features: Tensor | Features) -> Tensor:
        """``g_in(h) = σ(V h + b_v)``, shape ``(..., d_j)``."""
        return self._context(self._hidden(features))

    def _context(self, hidden: Tensor) -> Tensor:
        return ACTIVATIONS[self.activation](self.context_proj(hidden))

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, d_embedding={self.d_embedding}, "
                f"d_joint={self.d_joint}, activation={self.activation!r}, "
                f"bias={self.bias is not None}")
