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

What a head *is* is its type (:mod:`drillbook.heads.families`): a
:class:`~drillbook.heads.DistributionHead` (a distribution over the words: every head but
one) or a :class:`~drillbook.heads.VectorHead` (vMF), a
:class:`~drillbook.heads.SoftmaxFamilyHead` (one softmax over logits) or a
:class:`~drillbook.heads.MixtureHead` (several, mixed), each with the calls its docstring
lists. What it *needs*, and what the rest of the package needs
to know about it, is declared on its class (:attr:`~OutputHead.options`,
:attr:`~OutputHead.reads_layers`, :attr:`~OutputHead.shares_embedding`,
:attr:`~OutputHead.color`, :meth:`~OutputHead.flops`, :attr:`~OutputHead.tiny`,
:attr:`~OutputHead.tutorial`, :attr:`~OutputHead.cpu_scale`, :attr:`~OutputHead.bench`).
Models, trainers, decoders, benchmarks, the FLOP model, the figures and the tables read
these; none of them names a head's kind.

Heads check what they are given: features of another width or dtype (outside autocast),
targets of another shape, dtype or (on the CPU) range are refused in one line saying what
the head expected. Every head takes an empty batch: ``log_prob`` of ``(0, d_hidden)``
features is ``(0, V)`` and its loss is 0 (:meth:`OutputHead.loss`).
"""

from __future__ import annotations

import copy
import inspect
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError
from ..validation import POSITIVE_INT, Rule, check_choice
from .autocast import AUTOCAST_DTYPES, autocast_dtype
from .features import Features, last_layer, with_layers
from .flops import FlopSize, HeadFlops
from .fused import Workspace, fusable

__all__ = ["AUTOCAST_DTYPES", "Features", "OutputHead", "ParamCounts", "autocast_dtype"]


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


class OutputHead(nn.Module):
    """Base of all output layers.

    A head derives from one of the two kinds of output
    :class:`~drillbook.heads.DistributionHead` (a distribution over the ``V`` words: every
    head but vMF) and :class:`~drillbook.heads.VectorHead` (a vector in a fixed embedding
    space: vMF), and implements :meth:`log_prob` (or the vector head's calls); everything
    else has a sound default. Each head also declares,
    in the class attributes and class methods below, what it is, what it needs and what
    the package's other code needs to know about it (its FLOP count, its colour in the
    book's figures, small options for tests, its benchmark entries, its tutorial config):
    code that uses a head reads these, never the head's kind, and a new head is its
    module and one line in :data:`~drillbook.heads.registry.PACKAGE_HEADS`.

    Args:
        vocab_size: ``V``, the number of output labels.
        d_hidden: ``d_h``, the size of the encoder feature each prediction is made from.

    Raises:
        ConfigError: ``vocab_size`` or ``d_hidden`` is not a positive integer.
    """

    #: short name used by :func:`drillbook.heads.build_head`
    kind: ClassVar[str] = "abstract"

    #: the keyword options of the constructor beyond ``vocab_size``, ``d_hidden`` and
    #: ``embedding``, each with the :class:`~drillbook.validation.Rule` its values must
    #: pass (its type and range: ``{"depth": NON_NEGATIVE_INT, "bias": BOOLEAN}``);
    #: :func:`~drillbook.heads.build_head`, the configs and the constructor refuse any
    #: other option and any value the rule refuses, in one line naming both. A tuple of
    #: names declares options whose values the head checks itself.
    options: ClassVar[Mapping[str, Rule] | tuple[str, ...]] = {}

    #: True for a :class:`~drillbook.heads.DistributionHead`, False for a
    #: :class:`~drillbook.heads.VectorHead` (set by the type;
    #: :func:`~drillbook.heads.register_head` checks that it agrees): the head can end a
    #: language model (perplexity, rank of the log-probability matrix) and be decoded by
    #: beam search.
    is_distribution: ClassVar[bool] = False

    #: True for a :class:`~drillbook.heads.SoftmaxFamilyHead` (set by the type): one
    #: softmax over per-word scores, with ``logits`` and ``logits_subset`` (what
    #: sampled-softmax training scores).
    has_logits: ClassVar[bool] = False

    #: True for a :class:`~drillbook.heads.MixtureHead` (set by the type): several
    #: components over the vocabulary mixed per position (MoS, DOC), with the calls that
    #: class declares (``mixture_weights``, ``n_vectors``, ``n_softmaxes``, ``chunk_size``).
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

    #: options that shrink paper-sized defaults so that tests run in milliseconds, for the
    #: head at any width over an encoder that exposes three layers (the embedding and two
    #: more); empty: the defaults are small already (:meth:`tiny_options` copies it)
    tiny: ClassVar[Mapping[str, Any]] = {}

    #: the head's options in the CPU-sized tutorial language model ``tutorial/ptb-<kind>``
    #: (:mod:`drillbook.configs`: a 2 x 256 LSTM over 128-d embeddings, three layers with
    #: the embedding), for a head that can end a language model (:meth:`tutorial_options`)
    tutorial: ClassVar[Mapping[str, Any]] = {}

    #: the rows of the ``cpu-scale`` table that train the tutorial config
    #: (:mod:`drillbook.experiments.tables`): name suffix -> overrides of that config. A
    #: row's name is :attr:`kind` and its suffix (``"drill"`` + ``"-4"``), so a subclass's
    #: rows are its own (:meth:`cpu_scale_rows`)
    cpu_scale: ClassVar[Mapping[str, tuple[str, ...]]] = {"": ()}

    #: the head's entries in the cost benchmark (:data:`drillbook.experiments.BENCH_HEADS`):
    #: name suffix -> options, at the papers' settings (dropouts included: they are part
    #: of the step being timed); a name is :attr:`kind` and its suffix (``"mos"`` +
    #: ``"-15"``) (:meth:`bench_variants`)
    bench: ClassVar[Mapping[str, Mapping[str, Any]]] = {"": {}}

    #: the head's colour in every figure of the book, a hex string that stands out against
    #: white (contrast at least 3:1) and from the other heads' colours; None: a colour
    #: derived from :attr:`kind` (:func:`drillbook.plotting.head_color`). Declared by the
    #: class itself, never inherited: a subclass is another line in the figures.
    color: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "color" not in vars(cls):
            cls.color = None

    #: whether :meth:`loss` takes the fused output loss (:mod:`drillbook.heads.fused`), for
    #: a head that has one: None (default), on the CPU wherever it computes what the plain
    #: path would (float32 or float64, autocast off); True, on every device as well (on an
    #: H200 it cut a mixture's step to a fifth or less of its memory and ran 2 to 5% faster,
    #: and cost a single softmax time where its scores fit in one chunk: chapter 7, "The
    #: fused loss on a GPU"); False, never. An attribute of the module, not an option: it
    #: changes how the loss is computed, not what it is (the same to rounding).
    fused_loss: bool | None = None

    #: bytes of scores the fused loss forms at once (None: the device's default,
    #: :data:`drillbook.heads.fused.CHUNK_BYTES`)
    fused_chunk_bytes: int | None = None

    def __init__(self, vocab_size: int, d_hidden: int) -> None:
        super().__init__()
        name = type(self).__name__
        self.vocab_size = POSITIVE_INT.check(vocab_size, f"{name}: vocab_size")
        self.d_hidden = POSITIVE_INT.check(d_hidden, f"{name}: d_hidden")
        self._workspace = Workspace()

    def _fuses(self, *tensors: Tensor) -> bool:
        """Whether this call of the loss takes the fused path (:attr:`fused_loss`)."""
        if self.fused_loss is False or not tensors[0].numel():
            return False
        if self.fused_loss is None and tensors[0].device.type != "cpu":
            return False
        return fusable(*tensors)

    def _apply(self, *args, **kwargs):
        # .to() / .double(): buffers of the old device or dtype would only take memory
        self.__dict__.get("_workspace", Workspace()).clear()
        return super()._apply(*args, **kwargs)

    # ------------------------------------------------------------ declarations
    @classmethod
    def default_options(cls) -> dict[str, Any]:
        """The constructor's default of each of :attr:`options` (read from its signature)."""
        params = inspect.signature(cls.__init__).parameters
        return {name: params[name].default for name in cls.options
                if name in params and params[name].default is not inspect.Parameter.empty}

    @classmethod
    def check_option(cls, name: str, value: Any, default: Rule | None = None) -> Any:
        """``value`` of the option ``name`` if the rule declared for it in :attr:`options`
        passes it (a NumPy number as a Python one, a tuple as a list); the ``default`` rule
        when the head declares none, and ``value`` unchanged when there is neither.

        Raises:
            ConfigError: ``the 'mos' head's option n_experts must be a positive integer,
                got 1.5``; ``unknown activation 'gelu' for the 'dual' head; choose one of
                [...]``.
        """
        rule = cls.options.get(name) if isinstance(cls.options, Mapping) else None
        rule = rule or default
        if rule is None:
            return value
        if rule.choices is not None and not rule(value):
            check_choice(value, rule.choices, name, where=f" for the {cls.kind!r} head")
        return rule.check(value, f"the {cls.kind!r} head's option {name}")

    @classmethod
    def check_options(cls, options: Mapping[str, Any], *, noun: str = "option",
                      others: Mapping[str, type[OutputHead]] | None = None) -> None:
        """Refuse keys of ``options`` that are not among :attr:`options`, in one line that
        lists the valid ones and, given the other heads (``others``), which of them take
        a refused option; then refuse any value its declared rule refuses
        (:meth:`check_option`).

        Raises:
            ConfigError: ``unknown option(s) ['detph'] for head 'drill'; valid ...``.
        """
        unknown = sorted(set(options) - set(cls.options))
        if not unknown:
            for name, value in options.items():
                cls.check_option(name, value)
            return
        hints = []
        for key in unknown:
            takers = [k for k, c in (others or {}).items() if key in c.options]
            if takers:
                many = len(takers) > 1
                hints.append(f"; only the {', '.join(takers)} head{'s' if many else ''} "
                             f"take{'' if many else 's'} {key}")
        raise ConfigError(f"unknown {noun}(s) {unknown} for head {cls.kind!r}; valid options: "
                          f"{list(cls.options)}{''.join(hints)}")

    @classmethod
    def tiny_options(cls) -> dict[str, Any]:
        """A fresh copy of :attr:`tiny`."""
        return copy.deepcopy(dict(cls.tiny))

    @classmethod
    def tutorial_options(cls) -> dict[str, Any]:
        """A fresh copy of :attr:`tutorial`."""
        return copy.deepcopy(dict(cls.tutorial))

    @classmethod
    def cpu_scale_rows(cls) -> dict[str, tuple[str, ...]]:
        """The rows of :attr:`cpu_scale` by name (:attr:`kind` and the suffix) ->
        overrides."""
        return {cls.kind + suffix: tuple(overrides)
                for suffix, overrides in cls.cpu_scale.items()}

    @classmethod
    def bench_variants(cls) -> dict[str, dict[str, Any]]:
        """The entries of :attr:`bench` by name (:attr:`kind` and the suffix) -> a fresh
        copy of their options."""
        return {cls.kind + suffix: copy.deepcopy(dict(options))
                for suffix, options in cls.bench.items()}

    @classmethod
    def stand_in_options(cls, vocab_size: int, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` with what real data would give the head filled in at random, for a
        benchmark that times the head's arithmetic (which does not depend on the data):
        vMF's table of word vectors. ``options`` unchanged by default."""
        return options

    @classmethod
    def flops(cls, *, vocab_size: int, d: int, tokens: int, d_hidden: int | None = None,
              **options: Any) -> HeadFlops:
        """Matrix-product FLOPs of the head's forward pass over ``tokens`` positions
        (:mod:`drillbook.heads.flops` says what each part counts), checked against
        PyTorch's own ``FlopCounterMode`` for every head in the tests.

        Args:
            vocab_size, d: ``V`` and the embedding size.
            tokens: positions ``n`` in the step.
            d_hidden: the size of ``h`` (default ``d``).
            options: the head's options as its constructor takes them (defaults as
                there; options that change no product, such as dropouts, are accepted
                and change nothing).

        Raises:
            ConfigError: an option the head does not take.
        """
        cls.check_options(options, noun="head option")
        size = FlopSize(int(vocab_size), int(d), int(d if d_hidden is None else d_hidden),
                        int(tokens))
        return cls._flops(size, {**cls.default_options(), **options})

    @classmethod
    def _flops(cls, size: FlopSize, options: dict[str, Any]) -> HeadFlops:
        """:meth:`flops` with every option given (defaults filled in); every head declares
        it (usually one line: ``size.scores(width, context=..., label=...)``)."""
        raise NotImplementedError(
            f"{cls.__name__} declares no FLOP model: give it the classmethod "
            f"_flops(size, options) returning drillbook.heads.flops.HeadFlops "
            f"(FlopSize.scores builds one)")

    # ------------------------------------------------------------------ checks
    def _dtype(self) -> torch.dtype:
        """The dtype the head computes in: its first floating parameter's (or buffer's),
        its own before its submodules' (a look-up of a microsecond: it runs every call)."""
        own = itertools.chain(self._parameters.values(), self._buffers.values())
        for t in itertools.chain(own, self.parameters(), self.buffers()):
            if t is not None and t.is_floating_point():
                return t.dtype
        return torch.get_default_dtype()

    def _check_dtype(self, x: Tensor, what: str) -> Tensor:
        """``x`` after checking that it has the head's dtype, or another one autocast
        computes in while autocast is on (it casts both sides of each product); one line
        naming both dtypes otherwise."""
        expected = self._dtype()
        if x.dtype != expected and not (
                x.dtype in AUTOCAST_DTYPES and expected in AUTOCAST_DTYPES
                and autocast_dtype(x.device.type) is not None):
            fix = (f"cast them with .to({expected}), or the head with .to({x.dtype}), or "
                   f"run both under torch.autocast" if x.is_floating_point() else
                   "features are the encoder's floating-point outputs, not word ids")
            raise ValueError(f"{type(self).__name__} expects {what} of dtype {expected} (its "
                             f"parameters' dtype), got {x.dtype}: {fix}")
        return x

    def _hidden(self, features: Tensor | Features) -> Tensor:
        """Return the last-layer features after checking their trailing size and dtype."""
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
        return self._check_dtype(hidden, "hidden")

    def _check_target(self, hidden: Tensor, target: Tensor, ignore_index: int) -> None:
        if not isinstance(target, Tensor) or target.dtype not in (
                torch.int64, torch.int32, torch.int16, torch.uint8):
            got = target.dtype if isinstance(target, Tensor) else type(target).__name__
            raise TypeError(f"target must hold integer word ids, got dtype {got}")
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
            a scalar tensor. An empty batch (no position: its shape says so, nothing is
            read back) has loss 0, with a zero gradient and no regulariser term (there
            are no mixture weights to balance). A batch whose every target is
            ``ignore_index`` has the mean over no position, ``nan``, as in
            :func:`torch.nn.functional.nll_loss` (telling it apart would mean reading the
            targets back from the device at every step).

        Raises:
            ValueError: features of another width or dtype, targets of another shape or
                (on the CPU) out of range; TypeError: targets that are not integer ids.
        """
        features = with_layers(features, layers)
        hidden = self._hidden(features)
        self._check_target(hidden, target, ignore_index)
        flat = target.reshape(-1).long()
        nll = self._mean_nll(features, flat, ignore_index)
        if not flat.numel():  # the mean over nothing is 0 / 0: the loss of no word is 0
            return nll.nan_to_num(0.0)
        extra = self.regularizer(features) if regularize else None
        return nll if extra is None else nll + extra

    def _mean_nll(self, features: Tensor | Features, flat_target: Tensor,
                  ignore_index: int) -> Tensor:
        """The loss once inputs are checked; heads override it with a faster route."""
        logp = self.log_prob(features).reshape(-1, self.vocab_size)
        return F.nll_loss(logp, flat_target, ignore_index=ignore_index)

    def score_values(self, positions: int) -> int:
        """The most ``V``-wide score values the head holds at once in a training step over
        ``positions`` positions (the benchmark's estimate of the memory it needs beyond
        its parameters): one ``(n, V)`` matrix for a single softmax."""
        return positions * self.vocab_size

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
