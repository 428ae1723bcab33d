"""The registry of output heads, :data:`HEADS` (kind -> class), and :func:`build_head`,
which builds any of them by name from the declarations each class makes."""

from __future__ import annotations

from torch import nn

from ..errors import ConfigError
from ..validation import POSITIVE_INT, check_choice
from .base import OutputHead
from .bilinear import BilinearHead
from .drill import DrillHead
from .dual import DualHead
from .mixture import DOCHead, MoSHead
from .sigsoftmax import SigSoftmaxHead
from .softmax import SoftmaxHead, TiedHead
from .vmf import VMFHead

__all__ = ["HEADS", "build_head", "language_model_refusal"]

#: kind -> class. A new head is one module plus one line here.
HEADS: dict[str, type[OutputHead]] = {
    SoftmaxHead.kind: SoftmaxHead,
    TiedHead.kind: TiedHead,
    BilinearHead.kind: BilinearHead,
    DualHead.kind: DualHead,
    DrillHead.kind: DrillHead,
    MoSHead.kind: MoSHead,
    DOCHead.kind: DOCHead,
    SigSoftmaxHead.kind: SigSoftmaxHead,
    VMFHead.kind: VMFHead,
}


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
    unknown = sorted(set(options) - set(cls.options))
    if unknown:
        raise ConfigError(
            f"unknown option(s) {unknown} for head {kind!r}; valid options: {list(cls.options)}"
        )
    if cls.shares_embedding:
        return cls(vocab_size, d_hidden, embedding=embedding, **options)
    return cls(vocab_size, d_hidden, **options)


def language_model_refusal(head: OutputHead | type[OutputHead]) -> str | None:
    """Why ``head`` (a head or a head class) cannot end a language model, in one line
    naming the fix; None when it can. A language model needs a distribution over the words
    (perplexity is ``exp`` of its mean NLL), which a head that predicts word vectors
    (``is_distribution`` false: vMF) does not give."""
    if head.is_distribution:
        return None
    usable = sorted(kind for kind, cls in HEADS.items() if cls.is_distribution)
    return (f"the {head.kind!r} head predicts word vectors, not a distribution over words, so "
            f"it cannot end a language model (no perplexity; it is a translation head, for "
            f"multi30k/... configs); set head.kind to a distribution head, use one of "
            f"{', '.join(usable)}")
