"""Output heads: interchangeable output layers behind one interface.

>>> import torch
>>> from drillbook.heads import build_head
>>> emb = torch.nn.Embedding(100, 16)
>>> head = build_head("tied", vocab_size=100, d_hidden=16, embedding=emb)
>>> head.log_prob(torch.randn(4, 7, 16)).shape
torch.Size([4, 7, 100])

Every head is an :class:`OutputHead`: ``log_prob``, ``loss`` and ``param_counts``
mean the same thing for all of them.

=============  =====================  =====================================================
kind           class                  logits (DRILL paper's numbering)
=============  =====================  =====================================================
``softmax``    :class:`SoftmaxHead`   ``W^T h + b`` (Eq. 1)
``tied``       :class:`TiedHead`      ``E h + b`` (Eq. 2)
``bilinear``   :class:`BilinearHead`  ``E W h + b`` (Eq. 3)
``dual``       :class:`DualHead`      ``σ(E U + b_u) σ(V h + b_v) + b`` (Eq. 5)
``drill``      :class:`DrillHead`     ``E^(K) h + b``, deep residual ``E^(K)`` (Eqs. 8-12)
=============  =====================  =====================================================
"""

from __future__ import annotations

import inspect

from torch import nn

from .base import Features, OutputHead, ParamCounts, SoftmaxFamilyHead
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


def _options_of(cls: type[OutputHead]) -> list[str]:
    params = inspect.signature(cls.__init__).parameters
    return [n for n in params if n not in ("self", "vocab_size", "d_hidden", "embedding")]


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
        vocab_size: ``V``.
        d_hidden: size of the encoder feature the head reads.
        embedding: the encoder's input embedding, for heads that share it.
        **options: head-specific keyword options (see each class).

    Raises:
        ValueError: unknown kind, unknown option, or inconsistent sizes; the message
            lists what is valid.
    """
    try:
        cls = HEADS[kind]
    except KeyError:
        raise ValueError(
            f"unknown head kind {kind!r}; choose one of {sorted(HEADS)}"
        ) from None
    valid = _options_of(cls)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for head {kind!r}; valid options: {valid}"
        )
    takes_embedding = "embedding" in inspect.signature(cls.__init__).parameters
    if takes_embedding:
        return cls(vocab_size, d_hidden, embedding=embedding, **options)
    return cls(vocab_size, d_hidden, **options)
