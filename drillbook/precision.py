"""The arithmetic a run computes in: one vocabulary for configs, the training loop, result
files and benchmarks, and one :func:`~drillbook.precision.autocast`.

Every precision has one name, the same everywhere: what a config's ``train.amp`` says
(besides ``auto``, :func:`resolve_precision`), what ``drillbook bench --precision``, result
files, log records and the GPU windows' folders (``<window>-fp32``) say
(:data:`PRECISIONS`):

=========  ================================================================
name       what runs
=========  ================================================================
``fp32``   float32 throughout
``bf16``   bfloat16 autocast (CPU too)
``fp16``   float16 autocast with a gradient scaler (CUDA)
``tf32``   float32 tensors, TF32 matrix products in the training step (CUDA)
=========  ================================================================

``fp32`` keeps torch's defaults: cuBLAS matrix products in full float32, while cuDNN (the
LSTM layers) may already use TF32 tensor cores on an NVIDIA GPU of compute capability 8.0
or newer (``torch.backends.cudnn.allow_tf32``, on by default), as in the authors' code.
``tf32`` lets the cuBLAS products (the output heads, the translation model's linear
layers) use them too, for the training step only (:func:`matmul_precision`); evaluation
stays in float32, so its numbers compare with an ``fp32`` run's.

Earlier releases spelt them three more ways: configs said ``off`` for float32, and result
files and log records ``bf16-autocast``, ``fp16-autocast`` and ``tf32-matmul``. Those old
files still load: :func:`canonical_precision` reads every old spelling as its name
(:data:`OLD_SPELLINGS`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .errors import ConfigError
from .validation import check_choice

__all__ = ["AMP_CHOICES", "AUTO_CHOICES", "OLD_SPELLINGS", "PRECISIONS", "Precision",
           "amp_precisions", "autocast", "canonical_precision", "matmul_precision",
           "precision_label", "precision_named", "resolve_precision"]


@dataclass(frozen=True)
class Precision:
    """One precision (see the module's table), and what it needs of a training step:
    every module asks its record, none compares its name.

    Attributes:
        name: its one name (``fp32``, ``bf16``, ``fp16``, ``tf32``).
        dtype: the autocast dtype (None: no autocast).
        scaler: whether the step needs a gradient scaler (float16's narrow range), which
            torch has for CUDA and CPU only.
        tf32: whether the step's float32 matrix products use TF32 (:meth:`matmul`), which
            needs an NVIDIA GPU of compute capability 8.0 or newer.
        not_captured: why a step in this precision cannot be captured as a CUDA graph
            (None: it can).
    """

    name: str
    dtype: torch.dtype | None
    scaler: bool = False
    tf32: bool = False
    not_captured: str | None = None

    @property
    def capturable(self) -> bool:
        """Whether the graph-ready step takes this precision (:mod:`drillbook.train.graphs`)."""
        return self.not_captured is None

    def autocast(self, device: torch.device | str, *, cache: bool = True
                 ) -> contextlib.AbstractContextManager:
        """Its autocast context on ``device`` (a no-op without a dtype). ``cache=False``
        keeps no cache of cast weights: a cache filled while a CUDA graph is captured would
        hold tensors of the graph's pool beyond it."""
        if self.dtype is None:
            return contextlib.nullcontext()
        device_type = torch.device(device).type
        if cache:
            return torch.autocast(device_type, dtype=self.dtype)
        return torch.autocast(device_type, dtype=self.dtype, cache_enabled=False)

    @contextlib.contextmanager
    def matmul(self) -> Iterator[None]:
        """Inside, float32 matrix products use TF32 if this precision says so (:attr:`tf32`);
        otherwise nothing changes. Torch keeps this setting per process
        (``torch.backends.cuda.matmul.allow_tf32``): it is restored on the way out, so code
        outside (an evaluation, another run in the same process) is untouched. Wrap the
        whole training step in it, the backward pass included."""
        if not self.tf32:
            yield
            return
        matmul = torch.backends.cuda.matmul
        before = matmul.allow_tf32
        matmul.allow_tf32 = True
        try:
            yield
        finally:
            matmul.allow_tf32 = before


#: the four precisions, by name
PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", None),
    "bf16": Precision("bf16", torch.bfloat16),
    "fp16": Precision("fp16", torch.float16, scaler=True, not_captured=(
        "its gradient scaler reads its overflow flag back every step")),
    "tf32": Precision("tf32", None, tf32=True),
}
#: what ``train.amp=auto`` chooses between (:func:`resolve_precision`)
AUTO_CHOICES = ("fp32", "bf16")
#: what ``train.amp`` may say: a precision, or ``auto`` (:func:`resolve_precision`)
AMP_CHOICES = (*PRECISIONS, "auto")
#: the spellings of earlier releases, read as today's name: configs' ``train.amp``
#: booleans (``true``: bfloat16 autocast) and ``off``, result files' and log records' labels
OLD_SPELLINGS: dict[str | bool, str] = {
    False: "fp32", True: "bf16", "off": "fp32", "bf16-autocast": "bf16",
    "fp16-autocast": "fp16", "tf32-matmul": "tf32"}


def canonical_precision(name: str | bool) -> str:
    """``name`` as today's name: itself, or the name of an old spelling
    (:data:`OLD_SPELLINGS`; ``off`` -> ``fp32``); anything else as it is (the callers check
    it against their choices)."""
    if isinstance(name, (bool, str)):
        return OLD_SPELLINGS.get(name, name)
    return name


def precision_named(name: str | Precision, allowed: tuple[str, ...] | None = None
                    ) -> Precision:
    """The precision ``name`` names (an old spelling too), one of ``allowed`` if given (a
    :class:`Precision` is taken as its name).

    Raises:
        ConfigError: ``unknown precision 'x'; choose one of [...]``.
    """
    if isinstance(name, Precision):
        name = name.name
    names = list(allowed) if allowed is not None else list(PRECISIONS)
    return PRECISIONS[check_choice(canonical_precision(name), names, "precision")]


def amp_precisions(amp: str | bool) -> list[Precision]:
    """The precisions a ``train.amp`` value may resolve to on some device: itself, or
    ``auto``'s choices (:data:`AUTO_CHOICES`); none for a value that is not one."""
    amp = canonical_precision(amp)
    names = AUTO_CHOICES if amp == "auto" else (amp,)
    return [PRECISIONS[name] for name in names if name in PRECISIONS]


def resolve_precision(amp: str, device: torch.device | str, *, mixture: bool = False) -> str:
    """What ``train.amp`` means on ``device``: ``"fp32"``, ``"bf16"``, ``"fp16"`` or
    ``"tf32"`` (an old spelling, ``off``, is read as its name).

    ``auto`` follows what was measured, not what the device supports: ``bf16`` for a
    mixture head (``mixture``: MoS, DOC, whose step is dominated by ``K`` softmaxes over
    the vocabulary) on a CUDA device with bfloat16 (compute capability 8.0 or newer), and
    ``fp32`` everywhere else. The evidence, one NVIDIA H200, PTB, one epoch each
    (``drillbook/results/gpu/2026-11-26-h200-bf16`` against the fp32 rows measured with
    it): bf16 autocast made the AWD-LSTM epoch 20% slower (14.9 s against 12.5 s; its
    small matrix products are latency-bound and autocast adds casts) and MoS-15 6%
    faster (25.1 s against 26.8 s). Its limits: one GPU, one run each, PTB only; older
    GPUs (a T4, a V100) have no bfloat16 and fp16 was never measured there, so ``auto``
    keeps float32 on them; CPUs run bfloat16 autocast, most without bfloat16
    arithmetic, so slower than float32. Ask for ``bf16`` or ``fp16`` to get them anyway.
    Evaluation numbers stay comparable across precisions: the mixtures mix in float32
    log space whatever the autocast.

    ``tf32`` is never chosen by ``auto``: it is offered for measurement, and needs a CUDA
    device of compute capability 8.0 or newer (older ones have no TF32 and would run
    float32 under a ``tf32`` name).

    Raises:
        ConfigError: ``amp`` is not one of :data:`AMP_CHOICES`, ``fp16`` off CUDA and CPU
            (torch has no float16 gradient scaler for that device), or ``tf32`` on a
            device without TF32.
    """
    device = torch.device(device)
    amp = canonical_precision(amp)
    if amp not in AMP_CHOICES:
        raise ConfigError(f"invalid train.amp={amp!r}: it must be one of "
                          f"{', '.join(AMP_CHOICES)}")
    if amp == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        plain, mixed = AUTO_CHOICES
        return mixed if mixture and bf16 else plain
    precision = PRECISIONS[amp]
    if precision.scaler and device.type not in ("cuda", "cpu"):
        raise ConfigError(f"train.amp={amp} needs a gradient scaler, which torch has for "
                          f"cuda and cpu, not {device.type}; use train.amp=bf16 or fp32")
    if precision.tf32 and not (device.type == "cuda"
                               and torch.cuda.get_device_capability(device)[0] >= 8):
        raise ConfigError(f"train.amp={amp} needs an NVIDIA GPU of compute capability 8.0 "
                          f"or newer (TF32 tensor cores), not {_describe(device)}; use "
                          f"train.amp=fp32 there")
    return precision.name


def _describe(device: torch.device) -> str:
    if device.type != "cuda":
        return f"the {device.type}"
    major, minor = torch.cuda.get_device_capability(device)
    return f"{torch.cuda.get_device_name(device)} ({major}.{minor})"


def precision_label(precision: str | Precision) -> str:
    """How result files and log records name a resolved precision (a name or its record):
    its one name (an old spelling read as its name, :func:`canonical_precision`)."""
    if isinstance(precision, Precision):
        return precision.name
    return PRECISIONS[canonical_precision(precision)].name


def autocast(precision: str | Precision, device: torch.device | str
             ) -> contextlib.AbstractContextManager:
    """The autocast context of a resolved precision (a name or its record): a no-op context
    for ``fp32`` and ``tf32`` (whose products are set by :func:`matmul_precision`)."""
    return precision_named(precision).autocast(device)


def matmul_precision(precision: str | Precision) -> contextlib.AbstractContextManager:
    """The precision's (a name or its record) :meth:`Precision.matmul`: TF32 matrix
    products inside for ``tf32``, nothing changed for the others."""
    return precision_named(precision).matmul()
