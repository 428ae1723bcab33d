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

What a head is, is its type: a :class:`DistributionHead` (a distribution over the words)
or a :class:`VectorHead` (vMF), a :class:`SoftmaxFamilyHead` or a :class:`MixtureHead`,
each with the calls it promises. What it needs, and what the rest of the package needs to
know about it (its FLOP count, its colour in the figures, small options for tests, its
benchmark entries, its tutorial config and ``cpu-scale`` rows), each class declares in
class attributes and class methods documented on :class:`OutputHead`, so code that uses a
head asks the head and never names a kind:

>>> issubclass(HEADS["vmf"], DistributionHead), HEADS["doc"].reads_layers
(False, True)
>>> HEADS["drill"].flops(vocab_size=100, d=16, tokens=10, depth=2).label
102400

A new head is its module and one line in :data:`~drillbook.heads.registry.PACKAGE_HEADS`;
:func:`register_head` adds one from elsewhere (and :func:`unregister_head` removes it),
after checking its declarations (:mod:`drillbook.heads.registry`).
"""

from .base import Features, OutputHead, ParamCounts
from .bilinear import BilinearHead
from .drill import DrillHead
from .dual import DualHead
from .families import DistributionHead, SoftmaxFamilyHead, VectorHead
from .flops import HeadFlops
from .mixture import DOCHead, MixtureHead, MoSHead
from .registry import HEADS, RegistryView, build_head, register_head, unregister_head
from .sigsoftmax import SigSoftmaxHead
from .softmax import EmbeddingHead, SoftmaxHead, TiedHead
from .vmf import VMFHead

__all__ = [
    "HEADS",
    "BilinearHead",
    "DOCHead",
    "DistributionHead",
    "DrillHead",
    "DualHead",
    "EmbeddingHead",
    "Features",
    "HeadFlops",
    "MixtureHead",
    "MoSHead",
    "OutputHead",
    "ParamCounts",
    "RegistryView",
    "SigSoftmaxHead",
    "SoftmaxFamilyHead",
    "SoftmaxHead",
    "TiedHead",
    "VMFHead",
    "VectorHead",
    "build_head",
    "register_head",
    "unregister_head",
]
