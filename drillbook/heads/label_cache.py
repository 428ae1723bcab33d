"""A memo for label-side computations that are constant at evaluation time.

Heads such as DRILL and the dual mapping run a network over the *whole vocabulary*
(``g_out(E)``, shape ``(V, d)``) that does not depend on the input. While training it
must be recomputed every step (the weights move, dropout resamples), but at evaluation
it is a constant: computing it once makes evaluation cost what a tied head costs.

:class:`LabelCache` keeps one such tensor together with a fingerprint of the tensors it
was computed from, and recomputes only when the fingerprint changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import Features, SoftmaxFamilyHead
from .softmax import EmbeddingHead

__all__ = ["LabelCache", "LabelEncoderHead"]


def _autocast_state(device_type: str) -> tuple:
    """Whether (and to which dtype) autocast is on: a cached value depends on it."""
    try:  # torch >= 2.4
        return (torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type))
    except (TypeError, AttributeError):  # older torch: one switch per backend
        return (torch.is_autocast_enabled(), torch.is_autocast_cpu_enabled(),
                torch.get_autocast_gpu_dtype(), torch.get_autocast_cpu_dtype())


class LabelCache:
    """Holds one tensor computed from some parameters, valid while they are unchanged.

    The cache is used only when ``module.training`` is false *and* autograd is off
    (``torch.no_grad()`` or ``torch.inference_mode()``), so it never holds an autograd
    graph; otherwise :meth:`get` just calls ``compute``. The fingerprint of a stored value
    is, for every source tensor, ``(t._version, t.data_ptr(), t.dtype, t.device)`` plus
    the autocast state. This catches:

    * in-place updates (``optimizer.step()``, ``load_state_dict``, ``nn.init.*``,
      ``p.add_()`` under ``no_grad``): they bump ``_version``;
    * ``.to()`` / ``.double()`` / ``.cuda()``, and parameters swapped for other tensors
      (``torch.func.functional_call``): the data pointer, dtype or device changes. The
      cache keeps the source storages alive while it holds a value, so a freed address
      can never be reused by a different tensor and be mistaken for the old one;
    * in-place edits of the returned tensor itself (its ``_version`` is checked too).

    It does **not** see writes made through ``p.data`` (a ``.data`` alias has its own
    version counter): call :meth:`clear` after such writes.

    The cache is a plain attribute, not a buffer: it never enters ``state_dict()`` and
    is dropped when the owning module is pickled or deep-copied.
    """

    def __init__(self) -> None:
        #: how often :meth:`get` recomputed / reused a cacheable value (tests, profiling)
        self.misses = 0
        self.hits = 0
        self.clear()

    def clear(self) -> None:
        """Forget the stored value (and release the memory it holds)."""
        self._key: tuple | None = None
        self._value: Tensor | None = None
        self._value_version: int | None = None
        self._pins: tuple = ()

    @property
    def filled(self) -> bool:
        """Whether a value is currently stored."""
        return self._value is not None

    @staticmethod
    def active(module: nn.Module) -> bool:
        """Whether ``module`` may use a cached value now: eval mode and autograd off."""
        return not module.training and not torch.is_grad_enabled()

    @staticmethod
    def _fingerprint(sources: Sequence[Tensor]) -> tuple:
        key = tuple((t._version, t.data_ptr(), t.dtype, t.device) for t in sources)
        return (*key, _autocast_state(sources[0].device.type))

    @staticmethod
    def _version_of(value: Tensor) -> int | None:
        # an inference tensor (computed under inference_mode) has no version counter, and
        # cannot be edited in place outside inference mode anyway
        return None if value.is_inference() else value._version

    def get(self, module: nn.Module, sources: Sequence[Tensor],
            compute: Callable[[], Tensor]) -> Tensor:
        """``compute()``, or its stored result when ``module`` is in eval mode, autograd is
        off and none of ``sources`` changed since it was stored.

        The returned tensor is shared with the cache: treat it as read-only (an in-place
        edit is detected and causes a recomputation, but is wasted work).
        """
        if not self.active(module) or not sources or any(t.is_inference() for t in sources):
            # inference tensors carry no version counter: nothing safe to key on
            return compute()
        key = self._fingerprint(sources)
        value = self._value
        if (value is not None and key == self._key
                and self._version_of(value) == self._value_version):
            self.hits += 1
            return value
        self._value = self._key = None  # release the old value before computing anew
        self._pins = ()
        value = compute()
        self.misses += 1
        self._key = key
        self._value = value
        self._value_version = self._version_of(value)
        # keep the source storages alive so their addresses cannot be reused while the
        # fingerprint refers to them
        self._pins = tuple(t.untyped_storage() for t in sources)
        return value

    # A module holding a cache may be pickled (torch.save(model)) or deep-copied: the
    # copy starts empty rather than carrying tensors that belong to the original.
    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def __repr__(self) -> str:
        return f"LabelCache(filled={self.filled}, hits={self.hits}, misses={self.misses})"


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

    def logits_subset(self, features: Tensor | Features, ids: Tensor) -> Tensor:
        # labels are encoded row by row, so only the chosen rows need encoding
        context = self._context(self._hidden(features))
        labels = self._encode_labels(self.embedding_weight[ids])
        return F.linear(context, labels, None if self.bias is None else self.bias[ids])
