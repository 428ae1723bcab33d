"""The registry of output heads, :data:`HEADS` (kind -> class); :func:`register_head` and
:func:`unregister_head`, which add a head to it and take it away again; :func:`build_head`,
which builds any of them by name from the declarations each class makes; and
:class:`RegistryView`, a mapping the package's other tables of heads are derived through."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from torch import nn

from ..errors import ConfigError
from ..validation import POSITIVE_INT, Rule, check_choice
from .base import OutputHead
from .families import DistributionHead, SoftmaxFamilyHead, VectorHead
from .mixture import MixtureHead

__all__ = ["HEADS", "PACKAGE_HEADS", "RegistryView", "build_head", "language_model_refusal",
           "register_head", "unregister_head"]

#: kind -> class, in the order the book presents them; filled from :data:`PACKAGE_HEADS`
HEADS: dict[str, type[OutputHead]] = {}

#: the package's heads, ``"module:Class"`` in :mod:`drillbook.heads`. A new head is its
#: module and one line here.
PACKAGE_HEADS = (
    "softmax:SoftmaxHead",
    "softmax:TiedHead",
    "bilinear:BilinearHead",
    "dual:DualHead",
    "drill:DrillHead",
    "mixture:MoSHead",
    "mixture:DOCHead",
    "sigsoftmax:SigSoftmaxHead",
    "vmf:VMFHead",
)

#: what a class's type promises and must therefore provide: (type, flag, methods)
_PROMISES = (
    (DistributionHead, "is_distribution", ("_log_prob",)),
    (VectorHead, None, ("predict_vectors", "scores", "decode")),
    (SoftmaxFamilyHead, "has_logits", ("_logits",)),
    (MixtureHead, "is_mixture", ("components",)),
)


def _declaration_problem(cls: type) -> str | None:
    """What ``cls`` lacks to be registered, in words, or None."""
    if not (inspect.isclass(cls) and issubclass(cls, OutputHead)):
        return f"{cls!r} is not a subclass of drillbook.heads.OutputHead"
    name = cls.__name__
    if not isinstance(cls.kind, str) or not cls.kind or cls.kind == OutputHead.kind:
        return f"{name} declares no kind: give it a class attribute kind = 'name'"
    if issubclass(cls, DistributionHead) == issubclass(cls, VectorHead):
        return (f"{name} must derive from exactly one of DistributionHead (a distribution "
                f"over the words) and VectorHead (it predicts word vectors)")
    params = inspect.signature(cls.__init__).parameters.values()
    keywords = {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    if set(cls.options) != keywords or len(cls.options) != len(keywords):
        return (f"{name}.options {list(cls.options)} must list exactly the constructor's "
                f"keyword-only parameters {sorted(keywords)}")
    if isinstance(cls.options, Mapping):
        loose = [k for k, rule in cls.options.items() if not isinstance(rule, Rule)]
        if loose:
            return (f"{name}.options gives {loose} no drillbook.validation.Rule: map each "
                    f"option to the rule its values must pass (e.g. BOOLEAN, POSITIVE_INT)")
    for kind, flag, methods in _PROMISES:
        if flag is not None and getattr(cls, flag) != issubclass(cls, kind):
            return f"{name}.{flag} is {getattr(cls, flag)}: a flag of the type {kind.__name__}"
        missing = [m for m in methods if issubclass(cls, kind)
                   and getattr(cls, m) is getattr(kind if m != "_log_prob" else OutputHead, m)]
        if missing:
            return f"{name} is a {kind.__name__} but does not implement {', '.join(missing)}"
    if cls._flops.__func__ is OutputHead._flops.__func__:
        return (f"{name} declares no FLOP model: give it the classmethod _flops(size, "
                f"options) (drillbook.heads.flops)")
    return None


def register_head(cls: type[OutputHead], *, replace: bool = False) -> type[OutputHead]:
    """Add the head class ``cls`` to :data:`HEADS` under its ``kind``, after checking what
    it declares (a type of output, its options, the calls its type promises, a FLOP model),
    and return it, so that it can decorate the class. Every consumer of heads then takes it:
    :func:`build_head` and the configs, the FLOP model, the figures' colours, the
    benchmark, the tutorial configs, and the rows of the tables that list every head
    (``cpu-scale``, ``gpu-small``, ``laptop-lm``: built from the registry when read).

    Args:
        cls: a subclass of :class:`~drillbook.heads.OutputHead`.
        replace: allow a kind that is registered already (by another class).

    Raises:
        ConfigError: ``cls`` lacks a declaration (the message says which), or its kind is
            taken and ``replace`` is false.
    """
    problem = _declaration_problem(cls)
    if problem is not None:
        raise ConfigError(f"cannot register the head: {problem}")
    taken = HEADS.get(cls.kind)
    if taken is not None and taken is not cls and not replace:
        raise ConfigError(f"head kind {cls.kind!r} is taken by {taken.__qualname__}; give "
                          f"{cls.__qualname__} another kind, or pass replace=True")
    HEADS[cls.kind] = cls
    return cls


def unregister_head(kind: str) -> type[OutputHead]:
    """Remove the head ``kind`` from :data:`HEADS` and return its class (for tests that
    register a head of their own).

    Raises:
        ConfigError: no head of that kind is registered.
    """
    check_choice(kind, list(HEADS), "head kind")
    return HEADS.pop(kind)


for _entry in PACKAGE_HEADS:
    _module, _name = _entry.split(":")
    register_head(getattr(importlib.import_module(f"{__package__}.{_module}"), _name))


class RegistryView(Mapping):
    """A read-only mapping computed from the registry at every use, so that it always
    holds what :data:`HEADS` holds now (a head registered later included):
    ``RegistryView(lambda: {kind: cls.color for kind, cls in HEADS.items()})``."""

    def __init__(self, compute: Callable[[], Mapping[str, Any]], what: str) -> None:
        self._compute = compute
        self._what = what

    def __getitem__(self, key: str) -> Any:
        table = self._compute()
        if key not in table:
            raise KeyError(f"no {self._what} {key!r}; choose one of {list(table)}")
        return table[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._compute())

    def __len__(self) -> int:
        return len(self._compute())

    def __repr__(self) -> str:
        return repr(dict(self._compute()))


def build_head(
    kind: str,
    *,
    vocab_size: int,
    d_hidden: int,
    embedding: nn.Embedding | nn.Parameter | None = None,
    **options,
) -> OutputHead:
    """Build an output head by name.

    :func:`build_head` reads the class's declarations (:class:`OutputHead`) and nothing
    else: it checks that ``vocab_size`` and ``d_hidden`` are positive integers, refuses
    options that are not in the class's ``options``, and passes ``embedding=`` only to a head
    that ``shares_embedding`` (other heads do not receive it, so passing an embedding to
    every head is harmless).

    Args:
        kind: one of :data:`HEADS` (``"softmax"``, ``"tied"``, ...).
        vocab_size: ``V``, a positive integer (a NumPy integer will do).
        d_hidden: size of the encoder feature the head reads, a positive integer.
        embedding: the encoder's input embedding; passed to the head when its class
            declares ``shares_embedding`` (such a head needs it), ignored otherwise.
        **options: head-specific keyword options, those in the class's ``options``
            (see each class).

    Raises:
        ConfigError: unknown kind, unknown option, or a ``vocab_size``/``d_hidden`` that
            is not a positive integer; the message names what is wrong and what is valid.
        ValueError: sizes that do not fit together (raised by the head itself).
    """
    cls = HEADS[check_choice(kind, sorted(HEADS), "head kind")]
    vocab_size = POSITIVE_INT.check(vocab_size, "build_head: vocab_size")
    d_hidden = POSITIVE_INT.check(d_hidden, "build_head: d_hidden")
    cls.check_options(options, others=HEADS)
    if cls.shares_embedding:
        return cls(vocab_size, d_hidden, embedding=embedding, **options)
    return cls(vocab_size, d_hidden, **options)


def language_model_refusal(head: OutputHead | type[OutputHead]) -> str | None:
    """Why ``head`` (a head or a head class) cannot end a language model, in one line
    naming the fix; None when it can. A language model needs a distribution over the words
    (perplexity is ``exp`` of its mean NLL), which a :class:`~drillbook.heads.VectorHead`
    (vMF: it predicts word vectors) does not give."""
    cls = head if inspect.isclass(head) else type(head)
    if issubclass(cls, DistributionHead):
        return None
    usable = sorted(kind for kind, c in HEADS.items() if issubclass(c, DistributionHead))
    return (f"the {head.kind!r} head predicts word vectors, not a distribution over words, so "
            f"it cannot end a language model (no perplexity; it is a translation head, for "
            f"multi30k/... configs); set head.kind to a distribution head, use one of "
            f"{', '.join(usable)}")
