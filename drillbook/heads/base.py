"""The one interface every output layer implements.

An *output head* turns encoder features into a distribution over the vocabulary.
Whatever happens inside (a plain linear map, a tied embedding, a deep label encoder,
a mixture of softmaxes, a point on the sphere), every head answers the same calls:

===========================  =====================================================
``head.log_prob(h)``         normalised log-probabilities, shape ``(..., V)``
``head.loss(h, y)``          mean negative log-likelihood of the targets ``y``
``head.param_counts()``      parameters the head owns vs. shares with the input
===========================  =====================================================

``h`` is the encoder's last layer, a tensor ``(..., d_hidden)``. Both calls also take
``layers=``, the outputs of every layer (the embedding first, ``h`` last), which only
heads that read middle layers use (DOC) and every other head accepts and ignores; and
``loss`` takes ``regularize=True`` to add the head's training regulariser (DOC's balance
term), as the trainers do. A :class:`Features` object carries ``h`` and the layers and
may be passed as ``h`` instead. Heads never keep global state and never pick a device:
they run wherever their parameters live.

What a head *is* and *needs* is declared on its class (:attr:`OutputHead.is_distribution`,
:attr:`~OutputHead.has_logits`, :attr:`~OutputHead.is_mixture`,
:attr:`~OutputHead.reads_layers`, :attr:`~OutputHead.shares_embedding`,
:attr:`~OutputHead.options`). Models, trainers, decoders, benchmarks and analyses read
these declarations; none of them tests a head's type or inspects its signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..validation import POSITIVE_INT

__all__ = ["Features", "OutputHead", "ParamCounts", "SoftmaxFamilyHead"]


class Features(NamedTuple):
    """What an encoder hands to a head.

    Attributes:
        last: the last layer's output, ``(..., d_hidden)``. This is ``h_t`` in every
            paper's notation.
        layers: all layer outputs, ``layers[0]`` the (dropped) input embedding and
            ``layers[-1]`` the same tensor as ``last``; empty when the encoder does not
            expose them.
    """

    last: Tensor
    layers: tuple[Tensor, ...] = ()


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of an output head.

    Attributes:
        dedicated: parameters that exist only because of this output layer (the papers'
            ``C_base``, ``C_tied``, ``C_bilinear``, ``C_dual``, ``C_drill``; DRILL Eq. 6).
        shared: parameters the head uses but that belong to the input embedding
            (weight tying); they are counted once, with the embedding.
    """

    dedicated: int
    shared: int

    @property
    def total(self) -> int:
        return self.dedicated + self.shared


def reads_back(target: Tensor) -> bool:
    """Whether a head checks ``target``'s ids by reading them (a CPU tensor: no cost).
    On an accelerator, reading a value back makes the host wait for the device at every
    step; there the ids are checked by a device-side assertion instead, which fails the
    step asynchronously (``CUDA error: device-side assert triggered``)."""
    return target.device.type == "cpu"


def with_layers(features: Tensor | Features, layers=None) -> Tensor | Features:
    """``features``, with the per-layer outputs ``layers`` attached when given (a
    :class:`Features`); a ValueError for layers given twice."""
    if layers is None:
        return features
    if isinstance(features, Features):
        raise ValueError("the layer outputs were given twice: pass a tensor with layers=, "
                         "or a Features, not both")
    return Features(features, tuple(layers))


def last_layer(features: Tensor | Features) -> Tensor:
    """The ``(..., d_hidden)`` tensor a single-layer head reads."""
    return features.last if isinstance(features, Features) else features


class OutputHead(nn.Module):
    """Base class of all output layers.

    Subclasses implement :meth:`log_prob`; everything else has a sound default. Each
    subclass also declares, in the class attributes below, what it is and what it needs;
    code that uses a head reads these rather than the head's type.

    Args:
        vocab_size: ``V``, the number of output labels.
        d_hidden: ``d_h``, the size of the encoder feature each prediction is made from.

    Raises:
        ConfigError: ``vocab_size`` or ``d_hidden`` is not a positive integer.
    """

    #: short name used by :func:`drillbook.heads.build_head`
    kind: ClassVar[str] = "abstract"

    #: the keyword options of the constructor beyond ``vocab_size``, ``d_hidden`` and
    #: ``embedding``; :func:`~drillbook.heads.build_head` refuses any other.
    options: ClassVar[tuple[str, ...]] = ()

    #: True: :meth:`log_prob` is a normalised distribution over the ``V`` words and
    #: :meth:`loss` its mean negative log-likelihood, so the head can end a language
    #: model (perplexity, rank of the log-probability matrix) and be decoded by beam
    #: search. False: the head predicts a vector in a fixed embedding space (vMF):
    #: :meth:`log_prob` raises, :meth:`loss` is a loss on vectors, and the head provides
    #: ``predict_vectors(features)`` ``(..., m)``, the unit-row table
    #: ``target_embeddings`` ``(V, m)``, ``scores(features)`` ``(..., V)`` (not
    #: normalised over words) and ``decode(features)`` (nearest word ids).
    is_distribution: ClassVar[bool] = True

    #: True: the distribution is one softmax over per-word scores, and the head provides
    #: ``logits(features)`` ``(..., V)`` and ``logits_subset(features, ids)`` (what
    #: sampled-softmax training scores); see :class:`SoftmaxFamilyHead`.
    has_logits: ClassVar[bool] = False

    #: True: :meth:`log_prob` mixes several components over the vocabulary (MoS, DOC). The
    #: head has ``n_vectors`` (components per position), ``n_softmaxes`` (``V``-sized
    #: softmaxes per position: ``n_vectors``, or 1 for MoS's mixture of contexts,
    #: ``mix="logits"``), ``chunk_size`` (positions scored at once, ``None``: all),
    #: ``mixture_weights(features)`` ``(..., n_vectors)``, and, when it also
    #: :attr:`reads_layers`, ``vectors_per_layer`` (components per layer).
    is_mixture: ClassVar[bool] = False

    #: True: the head may read the encoder's middle layers (``Features.layers``), as DOC
    #: does. It takes a ``layer_sizes`` option (the sizes of ``Features.layers``,
    #: embedding first; :func:`drillbook.models.build_model` fills it in from the
    #: encoder) and keeps it as ``layer_sizes``. Models whose encoder exposes no layers
    #: (the translation decoder) refuse such a head.
    reads_layers: ClassVar[bool] = False

    #: True: the head scores words against the encoder's input embedding ``E`` and cannot
    #: be built without it: :func:`~drillbook.heads.build_head` passes ``embedding=`` to it
    #: and to no other.
    shares_embedding: ClassVar[bool] = False

    def __init__(self, vocab_size: int, d_hidden: int) -> None:
        super().__init__()
        name = type(self).__name__
        self.vocab_size = POSITIVE_INT.check(vocab_size, f"{name}: vocab_size")
        self.d_hidden = POSITIVE_INT.check(d_hidden, f"{name}: d_hidden")

    # ------------------------------------------------------------------ checks
    def _hidden(self, features: Tensor | Features) -> Tensor:
        """Return the last-layer features after checking their trailing size."""
        hidden = last_layer(features)
        if not isinstance(hidden, Tensor):
            raise TypeError(
                f"{type(self).__name__} expects a tensor of shape (..., {self.d_hidden}) "
                f"or drillbook.heads.Features, got {type(hidden).__name__}"
            )
        if hidden.dim() == 0 or hidden.shape[-1] != self.d_hidden:
            raise ValueError(
                f"{type(self).__name__} expects hidden of shape (..., {self.d_hidden}), "
                f"got {tuple(hidden.shape)}; the encoder's last layer must have "
                f"d_hidden={self.d_hidden} features"
            )
        return hidden

    def _check_target(self, hidden: Tensor, target: Tensor, ignore_index: int) -> None:
        if target.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise TypeError(f"target must hold integer word ids, got dtype {target.dtype}")
        if tuple(target.shape) != tuple(hidden.shape[:-1]):
            raise ValueError(
                f"target shape {tuple(target.shape)} does not match hidden shape "
                f"{tuple(hidden.shape)}: expected target of shape {tuple(hidden.shape[:-1])}"
            )
        if not reads_back(target):  # checked on the device, without waiting for it
            ok = (target == ignore_index) | ((target >= 0) & (target < self.vocab_size))
            torch._assert_async(ok.all(), f"target ids must lie in [0, {self.vocab_size}) "
                                          f"(or equal ignore_index={ignore_index})")
            return
        kept = target[target != ignore_index]
        if kept.numel() and (int(kept.min()) < 0 or int(kept.max()) >= self.vocab_size):
            raise ValueError(
                f"target ids must lie in [0, {self.vocab_size}) (or equal ignore_index="
                f"{ignore_index}); got values in [{int(kept.min())}, {int(kept.max())}]"
            )

    # --------------------------------------------------------------- interface
    def log_prob(self, features: Tensor | Features, layers=None) -> Tensor:
        """Normalised log-probabilities ``log p(w | context)``, shape ``(..., V)``.

        Args:
            features: ``(..., d_hidden)``, or a :class:`Features`.
            layers: the per-layer outputs, for a head that reads them (DOC).
        """
        return self._log_prob(with_layers(features, layers))

    def _log_prob(self, features: Tensor | Features) -> Tensor:
        """:meth:`log_prob` once the layers are attached; every head implements it."""
        raise NotImplementedError

    def forward(self, features: Tensor | Features, layers=None) -> Tensor:
        return self.log_prob(features, layers)

    def loss(
        self,
        features: Tensor | Features,
        target: Tensor,
        ignore_index: int = -100,
        *,
        layers=None,
        regularize: bool = False,
    ) -> Tensor:
        """Mean negative log-likelihood over the positions whose target is not ignored.

        Args:
            features: ``(..., d_hidden)`` or :class:`Features`.
            target: word ids, shape ``(...)`` (the features' leading shape).
            ignore_index: target value excluded from the mean (padding).
            layers: the per-layer outputs, for a head that reads them (DOC).
            regularize: add the head's training regulariser (:meth:`regularizer`, DOC's
                ``lambda_beta * beta``), as its trainer does; off for evaluation.

        Returns:
            a scalar tensor. As in :func:`torch.nn.functional.nll_loss`, the mean over
            zero kept positions is ``nan``.
        """
        features = with_layers(features, layers)
        hidden = self._hidden(features)
        self._check_target(hidden, target, ignore_index)
        nll = self._mean_nll(features, target.reshape(-1).long(), ignore_index)
        extra = self.regularizer(features) if regularize else None
        return nll if extra is None else nll + extra

    def _mean_nll(self, features: Tensor | Features, flat_target: Tensor,
                  ignore_index: int) -> Tensor:
        """The loss once inputs are checked; heads override it with a faster route."""
        logp = self.log_prob(features).reshape(-1, self.vocab_size)
        return F.nll_loss(logp, flat_target, ignore_index=ignore_index)

    def shared_parameters(self) -> list[nn.Parameter]:
        """Parameters this head uses but does not own (the tied input embedding)."""
        return []

    def regularizer(self, features: Tensor | Features) -> Tensor | None:
        """An extra training loss term of the head (DOC's ``lambda beta``), or None."""
        return None

    def output_embeddings(self) -> Tensor:
        """The ``(V, d')`` matrix of output word vectors the head scores contexts against.

        For analysis (nearest neighbours of output representations): ``W`` for a softmax,
        ``E`` for a tied head, ``E W`` for a bilinear one, the label encoder's output for
        the dual and DRILL heads.
        """
        raise NotImplementedError(f"{type(self).__name__} has no output word matrix")

    def param_counts(self) -> ParamCounts:
        """Dedicated vs. shared parameter counts (see :class:`ParamCounts`)."""
        shared_ids = {id(p) for p in self.shared_parameters()}
        dedicated = sum(p.numel() for p in self.parameters() if id(p) not in shared_ids)
        shared = sum(p.numel() for p in self.shared_parameters())
        return ParamCounts(dedicated=dedicated, shared=shared)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, d_hidden={self.d_hidden}"


class SoftmaxFamilyHead(OutputHead):
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

    def _log_prob(self, features: Tensor | Features) -> Tensor:
        return torch.log_softmax(self._logits(features), dim=-1)

    def _mean_nll(self, features: Tensor | Features, flat_target: Tensor,
                  ignore_index: int) -> Tensor:
        # fused log-softmax + NLL on the logits: one pass, no stored log-probabilities
        scores = self._logits(features).reshape(-1, self.vocab_size)
        return F.cross_entropy(scores, flat_target, ignore_index=ignore_index)
