"""Dual nonlinear mapping: labels and contexts projected into one joint space."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from ..validation import BOOLEAN, POSITIVE_INT, one_of
from .base import Features
from .flops import FlopSize, HeadFlops
from .label_encoder import (
    ACTIVATIONS,
    DROPOUT,
    DROPOUT_KIND,
    LabelEncoderHead,
    check_activation,
    check_dropout,
    label_dropout,
)

__all__ = ["DualHead"]


class DualHead(LabelEncoderHead):
    """Dual nonlinear (joint input-output embedding) output layer (DRILL paper, Eq. 5).

    .. math::

        p(y_t \\mid y_{1}^{t-1}) \\propto
            \\exp\\big(\\sigma(E U + b_u)\\, \\sigma(V h_t + b_v) + b\\big)

    (Pappas et al., 2018, Eq. 14). Both the labels (rows of the shared input embedding
    ``E in R^{V x d}``) and the context ``h_t in R^{d_h}`` are projected into a joint
    space of size ``d_j`` and scored by a dot product there:

    * label side ``g_out(E) = σ(E U + b_u)``, shape ``(V, d_j)``: ``label_proj``, an
      ``nn.Linear(d, d_j)`` whose ``weight`` ``(d_j, d)`` is ``U^T``;
    * context side ``g_in(h) = σ(V h + b_v)``, shape ``(..., d_j)``: ``context_proj``,
      an ``nn.Linear(d_h, d_j)`` whose ``weight`` ``(d_j, d_h)`` is ``V``;
    * logits ``g_in(h) g_out(E)^T + b`` with a per-word bias ``b`` (``bias``).

    With ``activation="identity"`` and ``b_u = b_v = 0`` this is the bilinear head with
    ``W = U V`` (``= label_proj.weight.T @ context_proj.weight``), of rank at most
    ``d_j``. ``g_out(E)`` does not depend on the input: in eval mode under
    ``torch.no_grad()`` it is computed once and cached (:meth:`label_embeddings`).

    Options for DRILL's Table 4 baseline (its footnote 6: the baselines also used "dropout
    and residual connections to E and h_t when they lead to better validation
    performance"), all off by default, which is the plain Eq. 5:

    .. math::

        g_{out}(E) = \\sigma(\\delta(E)\\, U + b_u) \\;[+\\, E], \\qquad
        g_{in}(h_t) = \\sigma(V h_t + b_v) \\;[+\\, h_t]

    * ``dropout``/``dropout_kind``: ``δ`` on the label-side input ``E``, as in DRILL
      (:func:`~drillbook.heads.label_encoder.label_dropout`); training mode only. The
      context side gets none (in the authors' code a context layer is dropped only from
      the second layer on);
    * ``residual_label``: ``+ E``, the undropped embedding (needs ``d_j = d``);
    * ``residual_context``: ``+ h_t`` (needs ``d_j = d_h``).

    With both residuals, zero ``U, V, b_u, b_v`` and ``σ(0) = 0`` (tanh, relu, identity) the
    head is the tied head.

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
        dropout: ``p`` in ``[0, 1)`` of ``δ`` on the label-side input (default 0).
        dropout_kind: ``"variational"`` (default) or ``"standard"``.
        residual_label: add ``E`` to ``g_out(E)`` (default ``False``).
        residual_context: add ``h_t`` to ``g_in(h_t)`` (default ``False``).
        bias: learn the per-word bias ``b`` (default ``True``).

    Shapes:
        hidden ``(..., d_h)`` -> logits ``(..., V)``.

    Parameters:
        dedicated ``C_dual = d d_j + d_j + d_j d_h + d_j + V`` (``U, b_u, V, b_v, b``);
        shared ``V d`` (``E``).
    """

    kind = "dual"
    activations = ("tanh", "sigmoid", "relu", "identity")
    options: ClassVar[dict] = {
        "d_joint": POSITIVE_INT.or_none("the embedding size"),
        "activation": one_of(*activations), "dropout": DROPOUT, "dropout_kind": DROPOUT_KIND,
        "residual_label": BOOLEAN, "residual_context": BOOLEAN, "bias": BOOLEAN}
    color = "#332288"  # indigo

    tiny: ClassVar[dict] = {"d_joint": 4}
    tutorial: ClassVar[dict] = {"d_joint": 128}
    # the tutorial config's SGD at learning rate 20 does not train this head stably at its
    # size; "dual-lr5" is the same head at 5, the rate that trained best of 2, 5, 10 and 20
    # in three epochs
    cpu_scale: ClassVar[dict] = {"": (), "-lr5": ("train.lr=5",)}

    @classmethod
    def _flops(cls, size: FlopSize, options: dict) -> HeadFlops:
        dj = size.d if options["d_joint"] is None else int(options["d_joint"])
        return size.scores(dj, label=2 * size.vocab_size * size.d * dj,  # σ(E U)
                           context=2 * size.tokens * size.d_hidden * dj)  # σ(V h)

    def __init__(
        self,
        vocab_size: int,
        d_hidden: int,
        embedding: nn.Embedding | nn.Parameter | None = None,
        *,
        d_joint: int | None = None,
        activation: str = "tanh",
        dropout: float = 0.0,
        dropout_kind: str = "variational",
        residual_label: bool = False,
        residual_context: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__(vocab_size, d_hidden, embedding, bias=bias)
        self.activation = check_activation(activation, self.activations, self.kind)
        self.d_joint = (self.d_embedding if d_joint is None
                        else POSITIVE_INT.check(d_joint, "d_joint"))
        self.dropout, self.dropout_kind = check_dropout(dropout, dropout_kind, self.kind)
        self.residual_label = self.check_option("residual_label", residual_label)
        self.residual_context = self.check_option("residual_context", residual_context)
        if self.residual_label and self.d_joint != self.d_embedding:
            raise ValueError(f"residual_label adds E to g_out(E): d_joint must equal the "
                             f"embedding size {self.d_embedding}, got d_joint={self.d_joint}")
        if self.residual_context and self.d_joint != d_hidden:
            raise ValueError(f"residual_context adds h_t to g_in(h_t): d_joint must equal "
                             f"d_hidden={d_hidden}, got d_joint={self.d_joint}")
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
        """``g_out(E) = σ(δ(E) U + b_u) [+ E]`` (of the given embedding rows, default all);
        dropout is sampled in training mode only."""
        emb = self.embedding_weight if rows is None else rows
        dropped = label_dropout(emb, self.dropout, self.dropout_kind, self.training)
        out = ACTIVATIONS[self.activation](self.label_proj(dropped))
        return out + emb if self.residual_label else out

    def _label_sources(self) -> tuple[Tensor, ...]:
        return (self.embedding_weight, self.label_proj.weight, self.label_proj.bias)

    # ---------------------------------------------------------- context side
    def context_embeddings(self, features: Tensor | Features) -> Tensor:
        """``g_in(h) = σ(V h + b_v) [+ h]``, shape ``(..., d_j)``."""
        return self._context(self._hidden(features))

    def _context(self, hidden: Tensor) -> Tensor:
        out = ACTIVATIONS[self.activation](self.context_proj(hidden))
        return out + hidden if self.residual_context else out

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, d_embedding={self.d_embedding}, "
                f"d_joint={self.d_joint}, activation={self.activation!r}, "
                f"dropout={self.dropout}, dropout_kind={self.dropout_kind!r}, "
                f"residual_label={self.residual_label}, "
                f"residual_context={self.residual_context}, bias={self.bias is not None}")
