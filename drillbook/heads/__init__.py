"""Output heads: interchangeable output layers behind one interface.

>>> import torch
>>> from drillbook.heads import build_head
>>> emb = torch.nn.Embedding(100, 16)
>>> head = build_head("tied", vocab_size=100, d_hidden=16, embedding=emb)
>>> head.log_prob(torch.randn(4, 7, 16)).shape
torch.Size([4, 7, 100])

Every head is an :class:`OutputHead`: ``log_prob``, ``loss`` and ``param_counts``
mean the same thing for all of them.

Each kind names one class in the registry :data:`HEADS` (``"softmax"``, ``"tied"``,
``"drill"``, ...), and each class's docstring gives its equation with the paper's equation
number; the book's reference page tabulates them from :data:`HEADS`.

What a head is and needs
------------------------
Each class declares it in class attributes (documented on :class:`OutputHead`), so code
that uses a head asks the head instead of testing its type:

``is_distribution``
    ``log_prob`` is a distribution over the words (not so for a head that predicts a
    vector, ``vmf``). Language models and beam search need it.
``has_logits``
    one softmax over per-word scores, with ``logits``/``logits_subset`` (sampled softmax).
``is_mixture``
    several softmaxes mixed.
``reads_layers``
    may read the encoder's middle layers and takes ``layer_sizes``.
``shares_embedding``
    needs the encoder's input embedding.
``options``
    the keyword options the constructor takes.

The book's reference page tabulates which head declares what, from the classes.

>>> HEADS["vmf"].is_distribution, HEADS["doc"].reads_layers, HEADS["softmax"].shares_embedding
(False, True, False)

:func:`build_head` reads these declarations and nothing else: it checks that
``vocab_size`` and ``d_hidden`` are positive integers, refuses options that are not in the
class's ``options``, and passes ``embedding=`` only to a head that ``shares_embedding``
(other heads do not receive it, so passing an embedding to every head is harmless).
"""

from __future__ import annotations

from torch import nn

from ..errors import ConfigError
from .base import Features, OutputHead, ParamCounts, SoftmaxFamilyHead, check_positive_int
from .bilinear import BilinearHead
from .drill import DrillHead
from .dual import DualHead
from .mixture import DOCHead, MixtureHead, MoSHead
from .sigsoftmax import SigSoftmaxHead
from .softmax import EmbeddingHead, SoftmaxHead, TiedHead
from .vmf import VMFHead

__all__ = [
    "HEADS",
    "BilinearHead",
    "DOCHead",
    "DrillHead",
    "DualHead",
    "EmbeddingHead",
    "Features",
    "MixtureHead",
    "MoSHead",
    "OutputHead",
    "ParamCounts",
    "SigSoftmaxHead",
    "SoftmaxFamilyHead",
    "SoftmaxHead",
    "TiedHead",
    "VMFHead",
    "build_head",
]

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
    try:
        cls = HEADS[kind]
    except (KeyError, TypeError):
        raise ConfigError(
            f"unknown head kind {kind!r}; choose one of {sorted(HEADS)}"
        ) from None
    vocab_size = check_positive_int(vocab_size, "build_head: vocab_size")
    d_hidden = check_positive_int(d_hidden, "build_head: d_hidden")
    unknown = sorted(set(options) - set(cls.options))
    if unknown:
        raise ConfigError(
            f"unknown option(s) {unknown} for head {kind!r}; valid options: {list(cls.options)}"
        )
    if cls.shares_embedding:
        return cls(vocab_size, d_hidden, embedding=embedding, **options)
    return cls(vocab_size, d_hidden, **options)
