"""The arithmetic a run computes in: one vocabulary for configs, the training loop, result
files and benchmarks, and one :func:`~drillbook.precision.autocast`.

A config asks for a precision with ``train.amp`` (:data:`AMP_CHOICES`); on a given device
that resolves (:func:`resolve_precision`) to one of three precisions, each known by three
names (:data:`PRECISIONS`):

=========  ==========  =================  =============================================
``amp``    ``name``    ``label``          what runs
=========  ==========  =================  =============================================
``off``    ``fp32``    ``fp32``           float32 throughout
``bf16``   ``bf16``    ``bf16-autocast``  bfloat16 autocast (CPU too)
``fp16``   ``fp16``    ``fp16-autocast``  float16 autocast with a gradient scaler (CUDA)
=========  ==========  =================  =============================================

``amp`` is what a config says, ``name`` what ``drillbook bench --precision`` and its
reports say, ``label`` what result files and log records say.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from .errors import ConfigError
from .validation import check_choice

__all__ = ["AMP_CHOICES", "PRECISIONS", "Precision", "autocast", "precision_label",
           "precision_named", "resolve_precision"]


@dataclass(frozen=True)
class Precision:
    """One precision and its names (see the module's table).

    Attributes:
        amp: the resolved ``train.amp`` value (``off``, ``bf16``, ``fp16``).
        name: the short name (``fp32``, ``bf16``, ``fp16``).
        label: how result files and log records name it.
        dtype: the autocast dtype (None: no autocast).
    """

    amp: str
    name: str
    label: str
    dtype: torch.dtype | None


#: the three precisions, by their resolved ``train.amp`` value
PRECISIONS: dict[str, Precision] = {
    "off": Precision("off", "fp32", "fp32", None),
    "bf16": Precision("bf16", "bf16", "bf16-autocast", torch.bfloat16),
    "fp16": Precision("fp16", "fp16", "fp16-autocast", torch.float16),
}
#: what ``train.amp`` may say: a precision, or ``auto`` (:func:`resolve_precision`)
AMP_CHOICES = (*PRECISIONS, "auto")


def precision_named(name: str, allowed: tuple[str, ...] | None = None) -> Precision:
    """The precision a short ``name`` (``fp32``, ``bf16``, ``fp16``) names, one of
    ``allowed`` names if given.

    Raises:
        ConfigError: ``unknown precision 'x'; choose one of [...]``.
    """
    names = list(allowed) if allowed is not None else [p.name for p in PRECISIONS.values()]
    check_choice(name, names, "precision")
    return next(p for p in PRECISIONS.values() if p.name == name)


def resolve_precision(amp: str, device: torch.device | str) -> str:
    """What ``train.amp`` means on ``device``: ``"off"``, ``"bf16"`` or ``"fp16"``.

    ``auto`` is ``bf16`` on a CUDA device with bfloat16 (compute capability 8.0 or
    newer), ``fp16`` on an older CUDA device (a T4, a V100), and ``off`` elsewhere
    (CPUs run bfloat16 autocast, but most without bfloat16 arithmetic, so slower than
    float32; ask for ``bf16`` to get it anyway).

    Raises:
        ConfigError: ``amp`` is not one of :data:`AMP_CHOICES`, or ``fp16`` off CUDA and
            CPU (torch has no float16 gradient scaler for that device).
    """
    device = torch.device(device)
    if amp not in AMP_CHOICES:
        raise ConfigError(f"invalid train.amp={amp!r}: it must be one of "
                          f"{', '.join(AMP_CHOICES)}")
    if amp == "auto":
        if device.type != "cuda":
            return "off"
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if amp == "fp16" and device.type not in ("cuda", "cpu"):
        raise ConfigError(f"train.amp=fp16 needs a gradient scaler, which torch has for "
                          f"cuda and cpu, not {device.type}; use train.amp=bf16 or off")
    return amp


def precision_label(precision: str) -> str:
    """How result files name a resolved precision: ``fp32``, ``bf16-autocast`` or
    ``fp16-autocast``."""
    return PRECISIONS[precision].label


def autocast(precision: str, device: torch.device | str) -> contextlib.AbstractContextManager:
    """The autocast context of a resolved precision (``off``, ``bf16``, ``fp16``): a no-op
    context for ``off``."""
    dtype = PRECISIONS[precision].dtype
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)
