"""The kinds of output head: a distribution over the words (:class:`DistributionHead`), one
softmax over per-word scores (:class:`SoftmaxFamilyHead`), or a vector in a fixed embedding
space (:class:`VectorHead`). Each is an :class:`~drillbook.heads.base.OutputHead` with the
calls its docstring lists.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import OutputHead
from .features import Features, last_layer, with_layers
from .fused import ScoreFactors, fused_cross_entropy

__all__ = ["DistributionHead", "SoftmaxFamilyHead", "VectorHead"]


class DistributionHead(OutputHead):
    """A head whose :meth:`log_prob` is a normalised distribution over the ``V`` words and
    whose :meth:`loss` is its mean negative log-likelihood: it can end a language model
    (perplexity is ``exp`` of the mean loss; the log-probability matrix has a rank) and be
    decoded by beam search. Every head but vMF."""

    is_distribution = True


class VectorHead(OutputHead):
    """A head that predicts a vector in a fixed embedding space instead of a distribution
    over words (vMF): :meth:`log_prob` raises, :meth:`loss` is a loss on vectors, and the
    head provides the calls below and the unit-row table ``target_embeddings`` ``(V, m)``.
    It cannot end a language model (no perplexity) and is decoded greedily, by nearest
    neighbour."""

    is_distribution = False

    #: the frozen table of the words' unit vectors, ``(V, m)``
    target_embeddings: Tensor

    def predict_vectors(self, features: Tensor | Features) -> Tensor:
        """The predicted vectors ``(..., m)``."""
        raise NotImplementedError

    def scores(self, features: Tensor | Features) -> Tensor:
        """Every word's score ``(..., V)``, higher is better; not normalised over words."""
        raise NotImplementedError

    def decode(self, features: Tensor | Features) -> Tensor:
        """The best word's id at every position ``(...)`` (nearest neighbour)."""
        raise NotImplementedError

    def _log_prob(self, features: Tensor | Features) -> Tensor:
        raise NotImplementedError(
            f"{type(self).__name__} predicts word vectors and has no log_prob: use "
            f"scores(features) (..., V), decode(features) or loss(features, target)")

    def score_values(self, positions: int) -> int:
        """0: training scores no word (the loss reads the target's vector only)."""
        return 0


class SoftmaxFamilyHead(DistributionHead):
    """A head whose distribution is one softmax over per-word scores (logits).

    ``p(w | h) = softmax(s(h))_w`` with ``s(h) in R^V``. Subclasses implement
    ``_logits``; :meth:`logits`, :meth:`log_prob` and :meth:`loss` follow (the loss
    uses the fused ``cross_entropy`` on the logits, never ``log`` of a probability).

    Whatever the score function, if ``s(h) = W g(h) + b`` for a feature map ``g`` of size
    ``d``, the ``N x V`` logit matrix of ``N`` contexts has rank at most ``d + 1``: this
    is the softmax bottleneck (DOC paper, Sec. 3).
    """

    has_logits = True

    def logits(self, features: Tensor | Features, layers=None) -> Tensor:
        """Unnormalised scores, shape ``(..., V)`` (``layers`` as for :meth:`log_prob`)."""
        return self._logits(with_layers(features, layers))

    def _logits(self, features: Tensor | Features) -> Tensor:
        """:meth:`logits` once the layers are attached; every such head implements it."""
        raise NotImplementedError

    def logits_subset(self, features: Tensor | Features, ids: Tensor) -> Tensor:
        """The scores of the words ``ids`` only, shape ``(..., len(ids))``: equal to
        ``logits(features)[..., ids]``. Heads override it to compute just those columns
        (sampled-softmax training, the joint-embedding paper's Sec. 3.2)."""
        return self.logits(features)[..., ids]

    def score_factors(self, features: Tensor | Features) -> ScoreFactors | None:
        """The scores as a matrix product, ``logits = map(context @ words^T + bias)``
        (:class:`~drillbook.heads.fused.ScoreFactors`), which the fused loss reads instead
        of the logits; dropout is sampled as :meth:`logits` samples it. None (default): the
        head's scores are no such product, and its loss takes the plain path. A subclass
        that overrides ``_logits`` without overriding this too takes the plain path (its
        parent's factors would not be its scores)."""
        return None

    @classmethod
    def factors_describe_logits(cls) -> bool:
        """Whether :meth:`score_factors` is declared where ``_logits`` is, or below it:
        only then do the factors describe this class's scores."""
        def owner(name: str) -> type:
            return next(k for k in cls.__mro__ if name in vars(k))

        factors = owner("score_factors")
        return factors is not SoftmaxFamilyHead and issubclass(factors, owner("_logits"))

    def _log_prob(self, features: Tensor | Features) -> Tensor:
        return torch.log_softmax(self._logits(features), dim=-1)

    def _mean_nll(self, features: Tensor | Features, flat_target: Tensor,
                  ignore_index: int) -> Tensor:
        if self.factors_describe_logits() and self._fuses(last_layer(features),
                                                          self._dtype_probe()):
            factors = self.score_factors(features)
            if factors is not None:
                return fused_cross_entropy(factors, flat_target, ignore_index,
                                           chunk_bytes=self.fused_chunk_bytes,
                                           workspace=self._workspace)
        # the plain path (the reference): log-softmax + NLL on the whole (n, V) logits
        scores = self._logits(features).reshape(-1, self.vocab_size)
        return F.cross_entropy(scores, flat_target, ignore_index=ignore_index)

    def _dtype_probe(self) -> Tensor:
        """A parameter of the head (its dtype and device decide, with the features',
        whether the fused loss applies)."""
        return next(self.parameters())
