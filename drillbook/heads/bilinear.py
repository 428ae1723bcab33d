"""Bilinear output layer: the tied embedding seen through a learned map."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .base import Features, SoftmaxFamilyHead
from .softmax import EmbeddingHead

__all__ = ["BilinearHead"]


class BilinearHead(EmbeddingHead, SoftmaxFamilyHead):
    """Bilinear output layer over the tied input embedding (DRILL paper, Eq. 3).

    .. math::  p(y_t \\mid y_{1}^{t-1}) \\propto \\exp(E\\, W h_t + b)

    (Gulordava et al., 2018). ``E in R^{V x d}`` is the encoder's input embedding
    (shared), ``W in R^{d x d_h}`` (:attr:`weight`, no bias of its own) maps the context
    into the embedding space, and ``b in R^V`` (:attr:`bias`) is a per-word bias. Unlike
    the tied head, ``d_h`` need not equal ``d``: ``W`` decouples the size of the
    encoder's last layer from the embedding size. With ``W = I`` (and ``d_h = d``) it is
    the tied head.

    ``W`` is applied to the context, not to ``E``: ``(W h) E^T`` costs ``N d d_h + N V d``
    for ``N`` positions, never forming the ``V x d_h`` matrix ``E W``.

    Init: ``W ~ U(-0.1, 0.1)`` (the range AWD-LSTM uses for its decoder), ``b = 0``.

    Args:
        vocab_size: ``V``.
        d_hidden: ``d_h``, any size.
        embedding: the input ``nn.Embedding(V, d)`` (or its weight parameter); required.
        bias: learn ``b`` (default ``True``).

    Shapes:
        hidden ``(..., d_h)`` -> logits ``(..., V)``.

    Parameters:
        dedicated ``C_bilinear = d d_h + V`` (``W`` and ``b``); shared ``V d`` (``E``).
    """

    kind = "bilinear"
    options = ("bias",)

    def __init__(
        self,
        vocab_size: int,
        d_hidden: int,
        embedding: nn.Embedding | nn.Parameter | None = None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__(vocab_size, d_hidden, embedding, bias=bias)
        self.weight = nn.Parameter(self.embedding_weight.new_empty(self.d_embedding, d_hidden))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``W ~ U(-0.1, 0.1)``, ``b = 0``; the shared embedding is left alone."""
        super().reset_parameters()
        nn.init.uniform_(self.weight, -0.1, 0.1)

    def logits(self, features: Tensor | Features) -> Tensor:
        projected = F.linear(self._hidden(features), self.weight)  # (..., d) = W h
        return F.linear(projected, self.embedding_weight, self.bias)

    def logits_subset(self, features: Tensor | Features, ids: Tensor) -> Tensor:
        projected = F.linear(self._hidden(features), self.weight)
        bias = None if self.bias is None else self.bias[ids]
        return F.linear(projected, self.embedding_weight[ids], bias)

    def output_embeddings(self) -> Tensor:
        """The effective output word matrix ``E W``, shape ``(V, d_h)`` (for analysis)."""
        return self.embedding_weight @ self.weight

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, d_embedding={self.d_embedding}, "
                f"bias={self.bias is not None}")
