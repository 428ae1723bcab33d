"""The two classic output layers: a full softmax and a tied softmax.

Both are a single linear map followed by a softmax; they differ only in where the
``V x d`` output matrix comes from.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..validation import BOOLEAN
from .base import OutputHead
from .families import SoftmaxFamilyHead
from .features import Features
from .flops import FlopSize, HeadFlops
from .fused import ScoreFactors

__all__ = ["EmbeddingHead", "SoftmaxHead", "TiedHead", "embedding_weight"]


class SoftmaxHead(SoftmaxFamilyHead):
    """Untied softmax output layer (DRILL paper, Eq. 1).

    .. math::  p(y_t \\mid y_{1}^{t-1}) \\propto \\exp(W^\\top h_t + b)

    with ``W`` (stored as ``weight``, shape ``(V, d_h)``) and ``b``
    (``bias``, shape ``(V,)``) owned by the head, so the dedicated parameter count
    is ``C_base = V (d_h + 1)``.

    With ``context_map``, one more trained ``d_h x d_h`` matrix ``M`` (``context_map``,
    ``M ~ U(-0.1, 0.1)`` as the bilinear head's ``W``) maps the context first:

    .. math::  p(y_t \\mid y_{1}^{t-1}) \\propto \\exp(W^\\top M h_t + b)

    The same functions as without it (``W^T M`` is one ``V x d_h`` matrix), written as a
    product of two trained matrices: the untied counterpart of the bilinear head's
    ``E W h``, which shows what the second matrix alone does to training (the translation
    chapter's early updates). ``C = V (d_h + 1) + d_h^2``.

    Args:
        vocab_size: ``V``.
        d_hidden: ``d_h``.
        bias: learn the per-word bias ``b`` (default ``True``).
        context_map: map the context with a trained ``M`` first (default ``False``).

    Shapes:
        hidden ``(..., d_h)`` -> logits ``(..., V)``.
    """

    kind = "softmax"
    options: ClassVar[dict] = {"bias": BOOLEAN, "context_map": BOOLEAN}
    color = "#666666"  # grey: the untied baseline

    @classmethod
    def _flops(cls, size: FlopSize, options: dict) -> HeadFlops:
        if options.get("context_map"):  # M h, then W is (V, d_h)
            return size.scores(size.d_hidden, context=2 * size.tokens * size.d_hidden ** 2)
        return size.scores(size.d_hidden)

    def __init__(self, vocab_size: int, d_hidden: int, *, bias: bool = True,
                 context_map: bool = False) -> None:
        super().__init__(vocab_size, d_hidden)
        bias = self.check_option("bias", bias)
        self.weight = nn.Parameter(torch.empty(vocab_size, d_hidden))
        self.bias = nn.Parameter(torch.empty(vocab_size)) if bias else None
        self.context_map = (nn.Parameter(torch.empty(d_hidden, d_hidden))
                            if self.check_option("context_map", context_map) else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """AWD-LSTM's decoder init: ``W ~ U(-0.1, 0.1)``, ``b = 0``; then
        ``M ~ U(-0.1, 0.1)`` where there is one."""
        nn.init.uniform_(self.weight, -0.1, 0.1)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        if self.context_map is not None:
            nn.init.uniform_(self.context_map, -0.1, 0.1)

    def _context(self, features: Tensor | Features) -> Tensor:
        """``h``, or ``M h`` with the context map: ``(..., d_h)``."""
        hidden = self._hidden(features)
        return hidden if self.context_map is None else F.linear(hidden, self.context_map)

    def _logits(self, features: Tensor | Features) -> Tensor:
        return F.linear(self._context(features), self.weight, self.bias)

    def score_factors(self, features: Tensor | Features) -> ScoreFactors:
        """``h`` (or ``M h``), ``W``, ``b``."""
        return ScoreFactors(self._context(features), self.weight, self.bias)

    def logits_subset(self, features: Tensor | Features, ids: Tensor) -> Tensor:
        bias = None if self.bias is None else self.bias[ids]
        return F.linear(self._context(features), self.weight[ids], bias)

    def output_embeddings(self) -> Tensor:
        return self.weight


def embedding_weight(embedding: nn.Embedding | nn.Parameter | None, kind: str) -> nn.Parameter:
    """The ``(V, d)`` weight of an input embedding, with a clear error when missing."""
    if embedding is None:
        raise ValueError(
            f"the {kind!r} head shares the input embedding: pass embedding=<nn.Embedding(V, d)> "
            f"(the encoder's word embedding) to build_head"
        )
    weight = embedding.weight if isinstance(embedding, nn.Module) else embedding
    if not isinstance(weight, nn.Parameter) or weight.dim() != 2:
        raise TypeError(
            f"embedding must be an nn.Embedding or a 2-d nn.Parameter of shape (V, d), "
            f"got {type(embedding).__name__}"
        )
    return weight


class EmbeddingHead(OutputHead):
    """Base of the heads that score words against the encoder's input embedding ``E``.

    Not itself a softmax: single-softmax heads combine it with
    :class:`~drillbook.heads.SoftmaxFamilyHead` (``class TiedHead(EmbeddingHead,
    SoftmaxFamilyHead)``); the mixture heads use it alone.

    Holds the shared ``E`` (``(V, d)``, registered here too so it moves with ``.to()``,
    and reported by :meth:`shared_parameters` so that counts attribute it to the
    embedding) and the head's own per-word bias ``b`` (zero-initialised).

    Args:
        vocab_size, d_hidden: as for every head.
        embedding: the encoder's ``nn.Embedding(V, d)`` or its weight.
        bias: learn ``b``.
        need: ``"d_hidden"`` when the head needs ``d = d_hidden``; the ValueError then
            also says why (``why``).
    """

    shares_embedding = True

    def __init__(self, vocab_size: int, d_hidden: int,
                 embedding: nn.Embedding | nn.Parameter | None, *, bias: bool,
                 need: str | None = None, why: str = "") -> None:
        super().__init__(vocab_size, d_hidden)
        bias = self.check_option("bias", bias, BOOLEAN)
        weight = embedding_weight(embedding, self.kind)
        why = why or "pass the encoder's input embedding over the same vocabulary"
        expected = (vocab_size, d_hidden if need == "d_hidden" else int(weight.shape[1]))
        if tuple(weight.shape) != expected:
            shown = f"({vocab_size}, {d_hidden})" if need == "d_hidden" else f"({vocab_size}, d)"
            raise ValueError(
                f"{self.kind} head needs an embedding of shape {shown}, got "
                f"{tuple(weight.shape)}; {why}"
            )
        self.embedding_weight = weight
        self.d_embedding = int(weight.shape[1])
        self.bias = nn.Parameter(weight.new_zeros(vocab_size)) if bias else None

    def reset_parameters(self) -> None:
        """Zero the bias; the shared embedding belongs to the encoder and is left alone."""
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def shared_parameters(self) -> list[nn.Parameter]:
        return [self.embedding_weight]


class TiedHead(EmbeddingHead, SoftmaxFamilyHead):
    """Softmax whose output matrix is the input embedding (DRILL paper, Eq. 2).

    .. math::  p(y_t \\mid y_{1}^{t-1}) \\propto \\exp(E h_t + b)

    (Inan et al., 2016; Press & Wolf, 2017). ``E in R^{V x d}`` is the encoder's word
    embedding and is *shared*, so it must have ``d = d_h`` (AWD-LSTM sizes its last
    layer to the embedding for this reason). The only dedicated parameters are the bias,
    ``C_tied = V``; the papers round this to zero.

    Args:
        vocab_size: ``V``.
        d_hidden: ``d_h``; must equal the embedding dimension.
        embedding: the input ``nn.Embedding(V, d_h)`` (or its weight parameter).
        bias: learn ``b`` (default ``True``).

    Shapes:
        hidden ``(..., d_h)`` -> logits ``(..., V)``.
    """

    kind = "tied"
    options: ClassVar[dict] = {"bias": BOOLEAN}
    color = "#0072b2"  # blue

    @classmethod
    def _flops(cls, size: FlopSize, options: dict) -> HeadFlops:
        return size.scores(size.d)  # E is (V, d)

    def __init__(
        self,
        vocab_size: int,
        d_hidden: int,
        embedding: nn.Embedding | nn.Parameter | None = None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__(vocab_size, d_hidden, embedding, bias=bias, need="d_hidden",
                         why="size the encoder's last layer to the embedding dimension or "
                             "use kind='bilinear'")

    @property
    def weight(self) -> Tensor:
        """The output word matrix, ``(V, d_h)``: the input embedding itself."""
        return self.embedding_weight

    def _logits(self, features: Tensor | Features) -> Tensor:
        return F.linear(self._hidden(features), self.embedding_weight, self.bias)

    def score_factors(self, features: Tensor | Features) -> ScoreFactors:
        """``h``, ``E``, ``b``."""
        return ScoreFactors(self._hidden(features), self.embedding_weight, self.bias)

    def logits_subset(self, features: Tensor | Features, ids: Tensor) -> Tensor:
        bias = None if self.bias is None else self.bias[ids]
        return F.linear(self._hidden(features), self.embedding_weight[ids], bias)

    def output_embeddings(self) -> Tensor:
        return self.embedding_weight


