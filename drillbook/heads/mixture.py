"""Mixtures of softmaxes: MoS (Yang et al., 2018) and DOC (Takase et al., 2018). A mixture
head scores ``J`` context vectors against the tied embedding and averages the ``J``
distributions, exactly, in log space; :class:`MixtureHead` gives the equation, the
low-rank "mixture of contexts" it is compared with, and what it costs. The functions that
mix are in :mod:`drillbook.heads.mixing` (importable from here too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..errors import ConfigError
from ..validation import (
    BOOLEAN,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    POSITIVE_NUMBER,
    PROBABILITY,
    check_choice,
    list_of,
    number,
    one_of,
)
from .families import DistributionHead
from .features import Features
from .flops import FlopSize, HeadFlops
from .fused import ScoreFactors, fused_cross_entropy, fused_mixture_nll
from .mixing import (
    _MIXERS,
    CV_FORMS,
    MIX_MODES,
    SCORE_COPIES,
    _at_least_float32,
    _mean_context,
    chunk_for_budget,
    coefficient_of_variation,
    context_mixture_log_prob,
    mixture_log_prob,
    mixture_log_prob_reference,
)
from .softmax import EmbeddingHead

__all__ = [
    "CV_FORMS",
    "MIX_MODES",
    "SCORE_COPIES",
    "DOCHead",
    "MixtureHead",
    "MoSHead",
    "chunk_for_budget",
    "coefficient_of_variation",
    "context_mixture_log_prob",
    "mixture_log_prob",
    "mixture_log_prob_reference",
]


#: the rules of the options both mixture heads take, for their :attr:`options`
_CHUNK_OPTIONS = {
    "chunk_size": POSITIVE_INT.saying("a positive number of positions").or_none(
        "all at once"),
    "chunk_mb": POSITIVE_NUMBER.saying("a positive number of megabytes").or_none(
        "no budget"),
    "latent_dropout": PROBABILITY, "bias": BOOLEAN}


class MixtureHead(EmbeddingHead, DistributionHead):
    """Base of the mixture heads: ``J`` vectors and a prior per position, one softmax each
    over the tied embedding, mixed in log space, processed in chunks of positions (or,
    with ``mix="logits"``, the logits mixed before one softmax).

    A mixture head computes ``J`` context vectors ``k_1 .. k_J`` (each of the embedding size
    ``d``) and mixture weights ``pi`` for every position, scores each vector against the tied
    embedding, and averages the ``J`` distributions:

    .. math::

        p(w \\mid c) = \\sum_{j=1}^{J} \\pi_{c,j}\\,
        \\operatorname{softmax}(E k_{c,j} + b)_w .

    The average is taken **in log space**,
    ``log p = logsumexp_j(log pi_j + log_softmax(E k_j + b))``, which is exact: no
    probability is ever rounded to zero and nothing is clamped. (The reference MoS code
    averages probabilities and takes ``log(p + 1e-8)``, which puts a floor of ``1e-8`` under
    every word's probability; :func:`mixture_log_prob_reference` keeps that
    probability-space form for the tests only.)

    Averaging the *logits* instead, ``softmax(sum_j pi_j (E k_j + b))``, is the "mixture of
    contexts" that Yang et al. (2018) use as a low-rank baseline: since ``sum_j pi_j = 1`` it is
    one softmax over the context ``sum_j pi_j k_j``, and its log-probability matrix keeps the
    softmax's rank bound ``d + 2``. :class:`MoSHead` offers it as ``mix="logits"``
    (:func:`context_mixture_log_prob`).

    Cost: the scores of one position are a ``J x V`` block instead of a ``V``-vector, so a
    batch of ``n`` positions needs ``J n V`` values, 15 times a tied head's for MoS (a mixture
    of contexts needs ``n V``, as a tied head does). Both heads
    therefore work through the positions in chunks of ``chunk_size`` (``None``: all at once):
    at most ``J x chunk_size x V`` scores exist at a time, in training too (each chunk's
    scores are recomputed in the backward pass instead of being stored), at the price of
    that recomputation (about one extra forward pass of the output layer). ``chunk_mb``
    chooses the chunk from a memory budget instead (:func:`chunk_for_budget`): the scores
    of one chunk, in all the copies training keeps of them at once, stay within it.

    What every mixture head has (what :attr:`~drillbook.heads.OutputHead.is_mixture`
    promises): ``n_vectors`` (``J``, components per position), :attr:`n_softmaxes`,
    ``chunk_size`` (positions scored at once, ``None``: all), :meth:`components` and
    :meth:`mixture_weights`; and ``vectors_per_layer`` (components per layer) when it also
    reads the middle layers. Subclasses implement :meth:`components`.
    """

    is_mixture = True

    def __init__(self, vocab_size: int, d_hidden: int, embedding, *, bias: bool,
                 n_vectors: int, latent_dropout: float, shared_mask: bool,
                 chunk_size: int | None, cv_weight: float, cv_form: str = "paper",
                 mix: str = "probs", chunk_mb: float | None = None) -> None:
        super().__init__(vocab_size, d_hidden, embedding, bias=bias)
        if mix not in MIX_MODES:
            raise ConfigError(f"unknown mix {mix!r} for the {self.kind} head; choose 'probs' "
                              f"(average the softmaxes) or 'logits' (average the logits: a "
                              f"mixture of contexts)")
        n_vectors = POSITIVE_INT.check(n_vectors, f"the {self.kind} head's components")
        latent_dropout = self.check_option("latent_dropout", latent_dropout, PROBABILITY)
        chunk_size = self.check_option("chunk_size", chunk_size,
                                       _CHUNK_OPTIONS["chunk_size"])
        if chunk_mb is not None:
            if chunk_size is not None:
                raise ConfigError(f"the {self.kind} head got both chunk_size and chunk_mb; "
                                  f"give one (chunk_mb chooses chunk_size from a budget)")
            chunk_size = chunk_for_budget(chunk_mb, n_vectors if mix == "probs" else 1,
                                          vocab_size)
        cv_weight = self.check_option("cv_weight", cv_weight, number(minimum=0))
        check_choice(cv_form, CV_FORMS, "cv_form",
                     where=" (drillbook.heads.mixture.coefficient_of_variation lists them)")
        self.n_vectors = int(n_vectors)
        self.latent_dropout = float(latent_dropout)
        self.shared_mask = BOOLEAN.check(shared_mask, "shared_mask")
        self.chunk_size = chunk_size
        self.cv_weight = float(cv_weight)
        self.cv_form = cv_form
        self.mix = mix

    @property
    def n_softmaxes(self) -> int:
        """``V``-sized softmaxes computed per position: ``J`` when mixing probabilities,
        1 when mixing logits."""
        return self.n_vectors if self.mix == "probs" else 1

    # ----------------------------------------------------------- components
    def components(self, features: Tensor | Features) -> tuple[Tensor, Tensor]:
        """Context vectors ``(..., J, d)`` and log mixture weights ``(..., J)``."""
        raise NotImplementedError

    def mixture_weights(self, features: Tensor | Features) -> Tensor:
        """The prior ``pi``, shape ``(..., J)`` (for diagnostics)."""
        return self.components(features)[1].exp()

    def _drop_vectors(self, vectors: Tensor) -> Tensor:
        """Locked dropout on the context vectors ``(T, B, J, d)``: one mask per sequence,
        shared over time; over the ``J`` vectors too when ``shared_mask`` (DOC), else one
        per vector dimension (MoS). Inputs without a time axis get ordinary dropout."""
        p = self.latent_dropout
        if not self.training or p == 0.0:
            return vectors
        if vectors.dim() != 4:
            return F.dropout(vectors, p, True)
        _, b, j, d = vectors.shape
        shape = (1, b, 1, d) if self.shared_mask else (1, b, j, d)
        return vectors * vectors.new_empty(shape).bernoulli_(1 - p).div_(1 - p)

    # ----------------------------------------------------------- outputs
    def _chunks(self, n: int) -> list[slice]:
        """The chunks of ``n`` positions (one empty chunk for none: an empty batch keeps
        its ``(0, V)`` shape)."""
        size = n if self.chunk_size is None else self.chunk_size
        return [slice(i, min(i + size, n)) for i in range(0, n, max(size, 1))] or [
            slice(0, 0)]

    def score_values(self, positions: int) -> int:
        """``n_softmaxes`` score matrices of one chunk of positions at a time."""
        chunk = min(self.chunk_size or positions, positions)
        return self.n_softmaxes * chunk * self.vocab_size

    def _log_prob(self, features: Tensor | Features) -> Tensor:
        hidden = self._hidden(features)
        vectors, log_prior = self.components(features)
        lead = hidden.shape[:-1]
        vectors = vectors.reshape(-1, self.n_vectors, self.d_embedding)
        log_prior = log_prior.reshape(-1, self.n_vectors)
        mixed = _MIXERS[self.mix][0]
        parts = [mixed(vectors[s], log_prior[s], self.embedding_weight, self.bias)
                 for s in self._chunks(vectors.shape[0])]
        return torch.cat(parts).reshape(*lead, self.vocab_size)

    def _mean_nll(self, features: Tensor | Features, flat_target: Tensor,
                  ignore_index: int) -> Tensor:
        vectors, log_prior = self.components(features)
        vectors = vectors.reshape(-1, self.n_vectors, self.d_embedding)
        log_prior = log_prior.reshape(-1, self.n_vectors)
        if self._fuses(vectors, log_prior, self.embedding_weight):
            if self.mix == "probs":  # J softmaxes per position, mixed in log space
                return fused_mixture_nll(vectors, log_prior, self.embedding_weight, self.bias,
                                         flat_target, ignore_index,
                                         chunk_bytes=self.fused_chunk_bytes,
                                         workspace=self._workspace)
            context = ScoreFactors(_mean_context(vectors, log_prior), self.embedding_weight,
                                   self.bias)
            return fused_cross_entropy(context, flat_target, ignore_index,
                                       chunk_bytes=self.fused_chunk_bytes,
                                       workspace=self._workspace)
        keep = flat_target != ignore_index
        safe = flat_target.masked_fill(~keep, 0)
        recompute = torch.is_grad_enabled() and self.chunk_size is not None
        nll_of = _MIXERS[self.mix][1]
        total = vectors.new_zeros(())
        for s in self._chunks(vectors.shape[0]):
            args = (vectors[s], log_prior[s], self.embedding_weight, self.bias, safe[s])
            nll = (checkpoint(nll_of, *args, use_reentrant=False) if recompute
                   else nll_of(*args))
            total = total + nll.masked_fill(~keep[s], 0.0).sum()
        return total / keep.sum()  # nan when nothing is kept, like F.nll_loss

    def regularizer(self, features: Tensor | Features) -> Tensor | None:
        """``cv_weight * beta`` on this batch's mixture weights (DOC's Eq. 13, in the form
        ``cv_form``: see :func:`coefficient_of_variation`), or None."""
        if self.cv_weight == 0.0:
            return None
        cv = coefficient_of_variation(self.mixture_weights(features), self.cv_form)
        return self.cv_weight * cv ** 2


class MoSHead(MixtureHead):
    """Mixture of softmaxes over the tied embedding (Yang et al., 2018; Eq. 9 of the DOC
    paper), or with ``mix="logits"`` the mixture of contexts, its low-rank baseline.

    .. math::

        [k_1; \\dots; k_K] = \\tanh(W_l h + b_l), \\quad
        \\pi = \\operatorname{softmax}(W_p h),

    and then, with ``mix="probs"`` (the default, MoS), the probabilities are averaged

    .. math::  p = \\sum_k \\pi_k \\operatorname{softmax}(E k_k + b),

    a log-sum-exp of ``K`` low-rank matrices in log space, with no rank ceiling; with
    ``mix="logits"`` (mixture of contexts) the logits are averaged before one softmax

    .. math::  p = \\operatorname{softmax}\\Big(\\sum_k \\pi_k (E k_k + b)\\Big)
                 = \\operatorname{softmax}(E \\bar k + b), \\quad
                 \\bar k = \\sum_k \\pi_k k_k ,

    a single softmax over the context ``k_bar``, so its log-probability matrix keeps the
    rank bound ``d + 2`` whatever ``K`` (:func:`context_mixture_log_prob`). Both modes have
    the same parameters, so a state dict moves between them.

    Args:
        vocab_size: ``V``.
        d_hidden: ``d_h``, the last layer's size (620 in the PTB setup; need not equal
            the embedding size ``d``).
        embedding: the encoder's input embedding ``(V, d)``.
        n_experts: ``K`` (15 in the paper).
        latent_dropout: locked dropout on the ``K d`` latent (``dropoutl``, 0.29 on PTB);
            one mask per sequence and latent dimension, shared over time.
        chunk_size: positions processed at once (see the module docstring).
        chunk_mb: or the chunk from a memory budget for its scores, in MB
            (:func:`chunk_for_budget`; not with ``chunk_size``).
        bias: the shared per-word bias ``b``.
        mix: ``"probs"`` (MoS) or ``"logits"`` (mixture of contexts).

    Shapes:
        hidden ``(..., d_h)``; a 3-d input is read as ``(T, B, d_h)`` for the locked mask.

    Parameters:
        dedicated ``d_h K d + K d`` (latent) ``+ d_h K`` (prior, no bias) ``+ V``, in
        either mode.

    Raises:
        ConfigError: ``mix`` is neither ``"probs"`` nor ``"logits"``.
    """

    kind = "mos"
    options: ClassVar[dict] = {"n_experts": POSITIVE_INT, **_CHUNK_OPTIONS,
                               "mix": one_of(*MIX_MODES).saying(
                                   "'probs' (average the softmaxes) or 'logits' (average "
                                   "the logits: a mixture of contexts)")}
    color = "#d55e00"  # vermilion

    tiny: ClassVar[dict] = {"n_experts": 2}
    tutorial: ClassVar[dict] = {"n_experts": 5, "latent_dropout": 0.2}
    # MoS-15 with the paper's latent dropout, whole and in chunks of 256 positions
    bench: ClassVar[dict] = {
        "-15": {"n_experts": 15, "latent_dropout": 0.29},
        "-15-chunk256": {"n_experts": 15, "latent_dropout": 0.29, "chunk_size": 256}}

    @classmethod
    def _flops(cls, size: FlopSize, options: dict) -> HeadFlops:
        """``J`` score matrices mixing probabilities; one, over the ``pi``-weighted mean
        context (a weighted sum, no product), mixing logits."""
        mix = check_choice(options["mix"], MIX_MODES, "mix")
        j, n, dh = int(options["n_experts"]), size.tokens, size.d_hidden
        return size.scores(size.d, j if mix == "probs" else 1,
                           context=2 * n * dh * j * size.d + 2 * n * dh * j)  # latent, prior

    def __init__(self, vocab_size: int, d_hidden: int, embedding=None, *, n_experts: int = 15,
                 latent_dropout: float = 0.0, chunk_size: int | None = None,
                 bias: bool = True, mix: str = "probs", chunk_mb: float | None = None
                 ) -> None:
        n_experts = self.check_option("n_experts", n_experts)
        super().__init__(vocab_size, d_hidden, embedding, bias=bias, n_vectors=n_experts,
                         latent_dropout=latent_dropout, shared_mask=False,
                         chunk_size=chunk_size, cv_weight=0.0, mix=mix, chunk_mb=chunk_mb)
        factory = {"device": self.embedding_weight.device, "dtype": self.embedding_weight.dtype}
        self.latent = nn.Linear(d_hidden, n_experts * self.d_embedding, **factory)
        self.prior = nn.Linear(d_hidden, n_experts, bias=False, **factory)

    def components(self, features: Tensor | Features) -> tuple[Tensor, Tensor]:
        h = self._hidden(features)
        vectors = torch.tanh(self.latent(h)).unflatten(-1, (self.n_vectors, self.d_embedding))
        return self._drop_vectors(vectors), _at_least_float32(self.prior(h)).log_softmax(-1)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, n_experts={self.n_vectors}, "
                f"latent_dropout={self.latent_dropout}, chunk_size={self.chunk_size}, "
                f"mix={self.mix!r}")


class DOCHead(MixtureHead):
    """Direct Output Connection: mixture components from several layers (Takase et al.,
    2018, Eqs. 7-13).

    .. math::

        k_{j} = \\tanh(W_j h^{(n_j)} + b_j), \\quad
        \\pi = \\operatorname{softmax}(W_\\pi h^{(N)}), \\quad
        p = \\sum_{j=1}^{J} \\pi_j \\operatorname{softmax}(E k_j + b),

    where ``vectors_per_layer[n] = i_n`` vectors come from layer ``n`` (layer 0: the
    embedding, layer ``N``: the last), ``J = sum_n i_n``, and the prior is read from the
    last layer. The paper writes ``k = W h`` (Eq. 11); drillbook follows the authors' code
    and adds a bias and a tanh, which makes DOC with every vector from the last layer
    exactly MoS. Training adds ``cv_weight * beta`` (Eq. 13), the squared coefficient of
    variation of the summed mixture weights, through :meth:`regularizer`. ``beta`` comes
    in two forms (:func:`coefficient_of_variation`): ``cv_form="authors"`` (default),
    ``(J - 1) var(S) / mean(S)^2`` over the ``(B, J)`` per-sequence sums ``S`` as the
    authors' code computes it, which produced the published numbers and with which
    ``lambda_beta = 0.001`` was tuned; and ``cv_form="paper"``, ``std(B)^2 / avg(B)^2``
    over the ``J`` batch totals of Eqs. 12-13, which is at least about ``J - 1`` times
    smaller at the PTB shape, so the same ``cv_weight`` regularises far less.

    Init (as the authors' code): the ``W_j`` ``nn.Linear``'s default weights, zero biases
    ``b_j``; the prior has no bias; the per-word bias ``b`` is zero.

    Args:
        vocab_size: ``V``.
        d_hidden: the last layer's size.
        embedding: the encoder's input embedding ``(V, d)``.
        vectors_per_layer: ``[i_0, i_1, ..., i_N]`` (PTB: ``[0, 0, 5, 15]``).
        layer_sizes: sizes of ``features.layers`` (``[d, d_1, ..., d_N]``, ``d_N =
            d_hidden``); filled in from the encoder by :func:`drillbook.models.build_model`.
            Not needed when every vector comes from the last layer; the head then also
            accepts a plain ``(..., d_hidden)`` tensor.
        latent_dropout: locked dropout on the ``J`` vectors, ONE mask per sequence shared
            over time and over all ``J`` vectors (0.6 on PTB).
        cv_weight: ``lambda_beta`` (0.001 on PTB).
        cv_form: ``"authors"`` (default) or ``"paper"``, the form of ``beta`` (above).
        chunk_size, chunk_mb, bias: as for :class:`MoSHead`.

    Parameters:
        dedicated ``sum_n i_n (d_n d + d)`` (the ``W_j``) ``+ d_N J`` (prior) ``+ V``.
    """

    kind = "doc"
    options: ClassVar[dict] = {
        "vectors_per_layer": list_of(NON_NEGATIVE_INT, "integers >= 0 (vectors per layer, "
                                     "embedding first)", non_empty=True),
        "layer_sizes": list_of(POSITIVE_INT, "positive integers").or_none(
            "filled in from the encoder"),
        "cv_weight": number(minimum=0), "cv_form": one_of(*CV_FORMS), **_CHUNK_OPTIONS}
    reads_layers = True
    color = "#882255"  # wine: MoS's sibling, far from its colour

    tiny: ClassVar[dict] = {"vectors_per_layer": [1, 1, 2]}
    tutorial: ClassVar[dict] = {"vectors_per_layer": [0, 2, 3], "latent_dropout": 0.2,
                                "cv_weight": 0.001}
    # 15 vectors from the last layer and 5 from the one below, with the paper's dropout;
    # whole, and in chunks of 256 positions with the balance term
    bench: ClassVar[dict] = {
        "-15+5": {"vectors_per_layer": [0, 5, 15], "latent_dropout": 0.6},
        "-15+5-chunk256": {"vectors_per_layer": [0, 5, 15], "latent_dropout": 0.6,
                           "cv_weight": 0.001, "chunk_size": 256}}

    @classmethod
    def _flops(cls, size: FlopSize, options: dict) -> HeadFlops:
        """The projections of every layer read (``layer_sizes``: default, every layer of
        size ``d_hidden``), the prior, and ``J`` score matrices."""
        counts = [int(i) for i in options["vectors_per_layer"]]
        sizes = ([int(s) for s in options["layer_sizes"]] if options["layer_sizes"] is not None
                 else [size.d_hidden] * len(counts))
        if len(sizes) != len(counts):
            raise ValueError(f"vectors_per_layer has {len(counts)} entries but layer_sizes "
                             f"has {len(sizes)}")
        j, n = sum(counts), size.tokens
        projections = sum(2 * n * s * i * size.d for s, i in zip(sizes, counts, strict=True))
        return size.scores(size.d, j, context=projections + 2 * n * size.d_hidden * j)

    def __init__(self, vocab_size: int, d_hidden: int, embedding=None, *,
                 vectors_per_layer: Sequence[int] = (0, 0, 5, 15),
                 layer_sizes: Sequence[int] | None = None, latent_dropout: float = 0.0,
                 cv_weight: float = 0.001, cv_form: str = "authors",
                 chunk_size: int | None = None, bias: bool = True,
                 chunk_mb: float | None = None) -> None:
        counts = self.check_option("vectors_per_layer", vectors_per_layer)
        if not any(counts):
            raise ConfigError(f"the 'doc' head's option vectors_per_layer needs at least one "
                              f"vector, got {counts}")
        super().__init__(vocab_size, d_hidden, embedding, bias=bias, n_vectors=sum(counts),
                         latent_dropout=latent_dropout, shared_mask=True,
                         chunk_size=chunk_size, cv_weight=cv_weight, cv_form=cv_form,
                         chunk_mb=chunk_mb)
        sizes = self.check_option("layer_sizes", layer_sizes)
        if sizes is None:
            if any(counts[:-1]):
                raise ValueError("the doc head reads several layers: pass layer_sizes=[d_0, "
                                 "..., d_N] (build_model fills it in from the encoder)")
            sizes = [0] * (len(counts) - 1) + [d_hidden]  # only the last is read
        if len(sizes) != len(counts):
            raise ValueError(f"vectors_per_layer has {len(counts)} entries but the encoder "
                             f"has {len(sizes)} layers (embedding included): {sizes}")
        if sizes[-1] != d_hidden:
            raise ValueError(f"the last layer size {sizes[-1]} must equal d_hidden={d_hidden}")
        self.vectors_per_layer, self.layer_sizes = counts, sizes
        factory = {"device": self.embedding_weight.device, "dtype": self.embedding_weight.dtype}
        self.projections = nn.ModuleDict({
            str(n): nn.Linear(size, i * self.d_embedding, **factory)
            for n, (i, size) in enumerate(zip(counts, sizes, strict=True)) if i > 0})
        self.prior = nn.Linear(d_hidden, self.n_vectors, bias=False, **factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The authors' init: ``W_j`` and the prior keep ``nn.Linear``'s default weights,
        the biases ``b_j`` of every projection (middle layers and the last) are zero, and
        so is the per-word bias ``b``; the shared embedding is left alone."""
        super().reset_parameters()
        for proj in self.projections.values():
            proj.reset_parameters()
            nn.init.zeros_(proj.bias)
        self.prior.reset_parameters()

    def _layers(self, features: Tensor | Features) -> tuple[Tensor, ...]:
        if not any(self.vectors_per_layer[:-1]):  # MoS-like: the last layer suffices
            return (*[None] * (len(self.layer_sizes) - 1), self._hidden(features))
        if not isinstance(features, Features) or len(features.layers) != len(self.layer_sizes):
            raise ValueError(
                f"the doc head needs Features with all {len(self.layer_sizes)} layer outputs "
                f"(embedding first); got {type(features).__name__}"
                + (f" with {len(features.layers)} layers"
                   if isinstance(features, Features) else ""))
        for n, (layer, size) in enumerate(zip(features.layers, self.layer_sizes, strict=True)):
            if layer.shape[-1] != size:
                raise ValueError(f"layer {n} has {layer.shape[-1]} features, expected {size}")
            if layer.shape[:-1] != features.last.shape[:-1]:
                raise ValueError(f"layer {n} has shape {tuple(layer.shape)}, the last layer "
                                 f"{tuple(features.last.shape)}: every layer covers the same "
                                 f"positions")
            self._check_dtype(layer, f"layer {n}")
        return features.layers

    def components(self, features: Tensor | Features) -> tuple[Tensor, Tensor]:
        hidden = self._hidden(features)
        layers = self._layers(features)
        # last layer first, so that vectors_per_layer = [0, ..., 0, K] orders like MoS
        vectors = [torch.tanh(self.projections[str(n)](layers[n])).unflatten(
                       -1, (self.vectors_per_layer[n], self.d_embedding))
                   for n in reversed(range(len(layers))) if self.vectors_per_layer[n] > 0]
        vectors = self._drop_vectors(torch.cat(vectors, dim=-2))
        return vectors, _at_least_float32(self.prior(hidden)).log_softmax(-1)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, vectors_per_layer={self.vectors_per_layer}, "
                f"latent_dropout={self.latent_dropout}, cv_weight={self.cv_weight}, "
                f"cv_form={self.cv_form!r}, chunk_size={self.chunk_size}")

