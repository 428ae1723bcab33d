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

What a head is and needs, each class declares in class attributes (``is_distribution``,
``has_logits``, ``is_mixture``, ``reads_layers``, ``shares_embedding``, ``options``,
documented on :class:`OutputHead`), so code that uses a head asks the head instead of
testing its type:

>>> HEADS["vmf"].is_distribution, HEADS["doc"].reads_layers, HEADS["softmax"].shares_embedding
(False, True, False)

:func:`build_head` reads these declarations and nothing else
(:mod:`drillbook.heads.registry`).
"""

from .base import Features, OutputHead, ParamCounts, SoftmaxFamilyHead
from .bilinear import BilinearHead
from .drill import DrillHead
from .dual import DualHead
from .mixture import DOCHead, MixtureHead, MoSHead
from .registry import HEADS, build_head
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
