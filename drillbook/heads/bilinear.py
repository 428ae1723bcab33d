"""Bilinear output layer: the tied embedding seen through a learned map."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..validation import BOOLEAN
from .families import SoftmaxFamilyHead
from .features import Features
from .flops import FlopSize, HeadFlops
from .fused import ScoreFactors
from .label_encoder import (
    DROPOUT,
    DROPOUT_KIND,
    check_dropout,
    label_dropout,
    variational_dropout,
)
from .softmax import EmbeddingHead

__all__ = ["BilinearHead"]


class BilinearHead(EmbeddingHead, SoftmaxFamilyHead):
    """Bilinear output layer over the tied input embedding (DRILL paper, Eq. 3).

    .. math::  p(y_t \\mid y_{1}^{t-1}) \\propto \\exp(E\\, W h_t + b)

    (Gulordava et al., 2018). ``E in R^{V x d}`` is the encoder's input embedding
    (shared), ``W in R^{d x d_h}`` (``weight``, no bias of its own) maps the context
    into the embedding space, and ``b in R^V`` (``bias``) is a per-word bias. Unlike
    the tied head, ``d_h`` need not equal ``d``: ``W`` decouples the size of the
    encoder's last layer from the embedding size. With ``W = I`` (and ``d_h = d``) it is
    the tied head.

    ``W`` is applied to the context, not to ``E``: ``(W h) E^T`` costs ``N d d_h + N V d``
    for ``N`` positions, never forming the ``V x d_h`` matrix ``E W``.

    Options for DRILL's Table 4 baseline (its footnote 6: the baselines also used "dropout
    and residual connections to E and h_t when they lead to better validation
    performance"), off by default, which is the plain Eq. 3. Written with the label side
    ``g_out(E)`` (``V x d_h``), as DRILL's label encoder of depth 1 with a linear activation:

    .. math::

        g_{out}(E) = \\delta(E)\\, W \\;[+\\, E], \\qquad
        p(y_t \\mid y_{1}^{t-1}) \\propto \\exp(g_{out}(E)\\, h_t + b)

    * ``dropout``/``dropout_kind``: ``δ`` on the label-side input ``E``, as in DRILL
      (:func:`~drillbook.heads.label_encoder.label_dropout`); training mode only;
    * ``residual``: ``+ E``, the undropped embedding (needs ``d_h = d``). The context side
      of this head is the identity, so a residual to ``h_t``, ``E (W h_t + h_t)``, would be
      the same map; there is one option. With ``W = 0`` the residual head is the tied head.

    Cost: the residual head computes ``E (W h + h) + b``, one product with ``E`` as
    without it; variational dropout acts on ``W h`` instead of ``E``
    (``E diag(m) W h = E (m ⊙ W h)``), so it adds no product either. Standard dropout has to
    form ``δ(E)`` (``V x d``) in training, and with the residual a second product with
    ``E``.

    Init: ``W ~ U(-0.1, 0.1)`` (the range AWD-LSTM uses for its decoder), ``b = 0``.

    Args:
        vocab_size: ``V``.
        d_hidden: ``d_h``, any size (``d`` with ``residual``).
        embedding: the input ``nn.Embedding(V, d)`` (or its weight parameter); required.
        dropout: ``p`` in ``[0, 1)`` of ``δ`` on the label-side input (default 0).
        dropout_kind: ``"variational"`` (default) or ``"standard"``.
        residual: add ``E`` to the label side (default ``False``).
        bias: learn ``b`` (default ``True``).

    Shapes:
        hidden ``(..., d_h)`` -> logits ``(..., V)``.

    Parameters:
        dedicated ``C_bilinear = d d_h + V`` (``W`` and ``b``); shared ``V d`` (``E``).
    """

    kind = "bilinear"
    options: ClassVar[dict] = {"dropout": DROPOUT, "dropout_kind": DROPOUT_KIND,
                               "residual": BOOLEAN, "bias": BOOLEAN}
    color = "#2a9bb8"  # lighter blue: a tied head with one more matrix

    @classmethod
    def _flops(cls, size: FlopSize, options: dict) -> HeadFlops:
        return size.scores(size.d, context=2 * size.tokens * size.d_hidden * size.d)  # W h

    def __init__(
        self,
        vocab_size: int,
        d_hidden: int,
        embedding: nn.Embedding | nn.Parameter | None = None,
        *,
        dropout: float = 0.0,
        dropout_kind: str = "variational",
        residual: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__(vocab_size, d_hidden, embedding, bias=bias)
        self.dropout, self.dropout_kind = check_dropout(dropout, dropout_kind, self.kind)
        self.residual = self.check_option("residual", residual)
        if self.residual and d_hidden != self.d_embedding:
            raise ValueError(f"residual adds E to the label side E W: d_hidden must equal the "
                             f"embedding size {self.d_embedding}, got d_hidden={d_hidden}")
        self.weight = nn.Parameter(self.embedding_weight.new_empty(self.d_embedding, d_hidden))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``W ~ U(-0.1, 0.1)``, ``b = 0``; the shared embedding is left alone."""
        super().reset_parameters()
        nn.init.uniform_(self.weight, -0.1, 0.1)

    def _factors(self, hidden: Tensor, emb: Tensor, bias: Tensor | None) -> ScoreFactors:
        """``(δ(E) W [+ E]) h + b`` for the embedding rows ``emb`` ``(n, d)``, as a product
        ``context @ words^T + b``."""
        projected = F.linear(hidden, self.weight)  # (..., d) = W h
        if self.training and self.dropout > 0.0:
            if self.dropout_kind == "standard":  # δ(E) must be formed: a second product
                dropped = label_dropout(emb, self.dropout, "standard", training=True)
                if not self.residual:
                    return ScoreFactors(projected, dropped, bias)
                # δ(E) W h + E h = [W h, h] [δ(E), E]^T
                return ScoreFactors(torch.cat([projected, hidden], -1),
                                    torch.cat([dropped, emb], -1), bias)
            # variational: δ(E) = E diag(m) with one (1, d) mask, so δ(E) W h = E (m ⊙ W h)
            mask = variational_dropout(projected.new_ones(1, self.d_embedding), self.dropout)
            projected = projected * mask[0]
        return ScoreFactors(projected + hidden if self.residual else projected, emb, bias)

    def _scores(self, hidden: Tensor, emb: Tensor, bias: Tensor | None) -> Tensor:
        factors = self._factors(hidden, emb, bias)
        return F.linear(factors.context, factors.words, factors.bias)

    def _logits(self, features: Tensor | Features) -> Tensor:
        return self._scores(self._hidden(features), self.embedding_weight, self.bias)

    def score_factors(self, features: Tensor | Features) -> ScoreFactors:
        return self._factors(self._hidden(features), self.embedding_weight, self.bias)

    def logits_subset(self, features: Tensor | Features, ids: Tensor) -> Tensor:
        bias = None if self.bias is None else self.bias[ids]
        return self._scores(self._hidden(features), self.embedding_weight[ids], bias)

    def output_embeddings(self) -> Tensor:
        """The effective output word matrix ``E W [+ E]``, shape ``(V, d_h)`` (for analysis;
        no dropout)."""
        out = self.embedding_weight @ self.weight
        return out + self.embedding_weight if self.residual else out

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, d_embedding={self.d_embedding}, "
                f"dropout={self.dropout}, dropout_kind={self.dropout_kind!r}, "
                f"residual={self.residual}, bias={self.bias is not None}")
