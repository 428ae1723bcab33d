"""What the label-encoder heads share: the base class of heads that encode the whole
vocabulary before scoring it (:class:`LabelEncoderHead`: the dual head and DRILL), the
nonlinearities their layers may use (:data:`ACTIVATIONS`) and the dropout on the label side
(:func:`label_dropout`), which the bilinear head uses too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ..validation import PROBABILITY, check_choice, one_of
from .families import SoftmaxFamilyHead
from .features import Features
from .fused import ScoreFactors
from .label_cache import LabelCache
from .softmax import EmbeddingHead

__all__ = ["ACTIVATIONS", "DROPOUT", "DROPOUT_KIND", "DROPOUT_KINDS", "LabelEncoderHead",
           "check_activation", "check_dropout", "label_dropout", "variational_dropout"]


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
    """Return ``name`` if it is one of ``choices``, else a ConfigError listing them."""
    return check_choice(name, choices, "activation", where=f" for the {kind!r} head")


#: the kinds of dropout on a label matrix (see :func:`label_dropout`)
DROPOUT_KINDS = ("variational", "standard")

#: the rules of the label-side dropout options, for the heads'
#: :attr:`~drillbook.heads.base.OutputHead.options`
DROPOUT = PROBABILITY.saying("a probability in [0, 1) (0 disables it)")
DROPOUT_KIND = one_of(*DROPOUT_KINDS)


def check_dropout(p: object, kind: str, head: str) -> tuple[float, str]:
    """``(p, kind)`` if ``p`` is a probability in ``[0, 1)`` and ``kind`` one of
    :data:`DROPOUT_KINDS`, else a ConfigError naming the valid values."""
    p = DROPOUT.check(p, "dropout")
    check_choice(kind, DROPOUT_KINDS, "dropout_kind", where=f" for the {head!r} head")
    return float(p), kind


def variational_dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Drop whole columns of a ``(V, d)`` label matrix with one shared mask.

    One Bernoulli mask of shape ``(1, d)`` is drawn per call and broadcast over all
    rows, so every label loses the same embedding dimensions; kept entries are scaled
    by ``1 / (1 - p)``. The identity when ``training`` is false or ``p == 0``.
    """
    if not training or p == 0.0:
        return x
    mask = x.new_empty(1, x.shape[-1]).bernoulli_(1.0 - p).div_(1.0 - p)
    return x * mask


def label_dropout(x: Tensor, p: float, kind: str, training: bool) -> Tensor:
    """Dropout ``δ`` on a label-side input ``(V, d)`` (where the DRILL authors' code drops;
    DRILL's Eq. 12 writes it on a layer's output): ``"variational"``,
    one ``(1, d)`` mask shared by all labels (:func:`variational_dropout`), or
    ``"standard"``, independent entries. The identity in eval mode or with ``p = 0``."""
    if not training or p == 0.0:
        return x
    if kind == "variational":
        return variational_dropout(x, p)
    return F.dropout(x, p, training=True)



class LabelEncoderHead(EmbeddingHead, SoftmaxFamilyHead):
    """Base of heads that encode the whole vocabulary, ``g_out(E)``, before scoring.

    ``logits = g_in(h) g_out(E)^T + b``. Subclasses implement ``_encode_labels``
    (``g_out(E)``, ``(V, d')``) and ``_label_sources`` (the tensors it reads), and
    may override ``_context`` (``g_in``, identity by default). ``g_out(E)`` does not
    depend on the context, so in eval mode under ``torch.no_grad()`` it is computed once
    and kept in a :class:`LabelCache` until one of its sources changes.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._label_cache = LabelCache()

    def _encode_labels(self, rows: Tensor | None = None) -> Tensor:
        """``g_out`` of the given embedding rows ``(n, d)`` (default: all of ``E``)."""
        raise NotImplementedError

    def _label_sources(self) -> Sequence[Tensor]:
        raise NotImplementedError

    def _context(self, hidden: Tensor) -> Tensor:
        """``g_in(h)``: the context side of the score (identity unless overridden)."""
        return hidden

    def label_embeddings(self) -> Tensor:
        """``g_out(E)``: the labels as the head scores them, shape ``(V, d')``.

        Cached in eval mode under ``torch.no_grad()``; the result is then shared with the
        cache, so treat it as read-only (clone before editing in place). In training mode
        it samples dropout like a training step.
        """
        return self._label_cache.get(self, self._label_sources(), self._encode_labels)

    def output_embeddings(self) -> Tensor:
        return self.label_embeddings()

    def clear_cache(self) -> None:
        """Drop the cached ``g_out(E)`` (needed only after writes through ``p.data``)."""
        self._label_cache.clear()

    def _apply(self, *args, **kwargs):
        # .to() / .cuda() / .double(): the cached value would sit on the old device
        self._label_cache.clear()
        return super()._apply(*args, **kwargs)

    def _logits(self, features: Tensor | Features) -> Tensor:
        context = self._context(self._hidden(features))
        return F.linear(context, self.label_embeddings(), self.bias)

    def score_factors(self, features: Tensor | Features) -> ScoreFactors:
        """``g_in(h)``, ``g_out(E)``, ``b``."""
        return ScoreFactors(self._context(self._hidden(features)), self.label_embeddings(),
                            self.bias)

    def logits_subset(self, features: Tensor | Features, ids: Tensor) -> Tensor:
        # labels are encoded row by row, so only the chosen rows need encoding
        context = self._context(self._hidden(features))
        labels = self._encode_labels(self.embedding_weight[ids])
        return F.linear(context, labels, None if self.bias is None else self.bias[ids])
