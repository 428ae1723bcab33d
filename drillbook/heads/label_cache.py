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
from torch import Tensor, nn

from .base import autocast_dtype

__all__ = ["LabelCache"]


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
        return (*key, autocast_dtype(sources[0].device.type))  # autocast changes the value

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
