"""Sigsoftmax (Kanai et al., 2018): a softmax variant that is not rank-limited."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from .base import Features
from .fused import SIGSOFTMAX, ScoreFactors
from .softmax import TiedHead

__all__ = ["SigSoftmaxHead"]


class SigSoftmaxHead(TiedHead):
    """Sigsoftmax over the tied scores (Kanai et al., 2018; cited by the DRILL paper).

    .. math::

        p(w \\mid h) = \\frac{\\exp(z_w)\\,\\sigma(z_w)}{\\sum_{v} \\exp(z_v)\\,\\sigma(z_v)},
        \\qquad z = E h + b .

    Multiplying by the sigmoid makes ``log p = z + log sigma(z) - const`` a *nonlinear*
    function of ``z``, so the log-probability matrix escapes the ``d + 2`` rank ceiling of
    a softmax, with no parameter beyond the tied head's. :meth:`logits` returns the
    effective scores ``z + log sigma(z)`` that the softmax normalises.

    Args, shapes and FLOPs: as :class:`~drillbook.heads.TiedHead` (the sigmoid is
    elementwise).
    """

    kind = "sigsoftmax"
    color = "#8a7a00"  # olive

    def _logits(self, features: Tensor | Features) -> Tensor:
        z = super()._logits(features)
        return z + F.logsigmoid(z)

    def score_factors(self, features: Tensor | Features) -> ScoreFactors:
        """The tied head's ``h``, ``E``, ``b``, then ``z + log sigmoid(z)``."""
        tied = super().score_factors(features)
        return ScoreFactors(tied.context, tied.words, tied.bias, SIGSOFTMAX)

    def logits_subset(self, features: Tensor | Features, ids: Tensor) -> Tensor:
        z = super().logits_subset(features, ids)
        return z + F.logsigmoid(z)
