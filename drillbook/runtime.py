"""Seeds, devices and the CPU/GPU profile switch: explicit, no hidden global state.

The *profile* decides how big an experiment a notebook or ``tutorial/`` config runs:

* ``small``: sized so a whole chapter runs on a laptop CPU (and in CI) in a few minutes;
* ``t4``: a free Colab T4 (15 GB of memory, no bfloat16, slow float64): GPU sizes that fit
  in that memory and finish a chapter in about a quarter of an hour;
* ``full``: the sizes meant for a GPU with bfloat16 and 20 GiB or more (an L4, A100, H100).

A notebook states its sizes with :meth:`Profile.pick`, ``pick(small=..., full=...,
t4=...)``; a cell that gives no ``t4`` value runs its ``full`` value on a T4.

The profile is chosen, in this order, by an explicit name (``setup(profile="t4")`` in a
notebook, which a Colab form field fills in), the environment variable
:data:`PROFILE_ENV` (``DRILLBOOK_PROFILE``), or automatically. Each of them may say
``auto``, which defers to the next; ``auto`` itself picks ``small`` off CUDA, ``t4`` on a
CUDA device with less than :data:`T4_MEMORY_GIB` GiB of memory or without bfloat16 (compute
capability below 8.0), and ``full`` on any other CUDA device.
"""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .errors import ConfigError, DeviceError, ResourceError
from .validation import SEED

__all__ = [
    "BYTES_TO_TRAIN_A_PARAMETER",
    "PROFILES",
    "PROFILE_ENV",
    "T4_MEMORY_GIB",
    "Profile",
    "available_memory",
    "check_model_fits",
    "default_device",
    "is_out_of_memory",
    "read_back",
    "resolve_device",
    "resolve_profile",
    "seed_everything",
]

#: the environment variable that chooses the profile: one of :data:`PROFILES`, or ``auto``
PROFILE_ENV = "DRILLBOOK_PROFILE"
#: the profiles, smallest first
PROFILES = ("small", "t4", "full")
#: ``auto`` chooses ``t4`` on a CUDA device with less memory than this (GiB)
T4_MEMORY_GIB = 20


#: bytes a parameter costs in training, at the least: float32 weights, their gradients and
#: up to two optimiser buffers (Adam's moments, averaged SGD's average); activations apart
BYTES_TO_TRAIN_A_PARAMETER = 16


def available_memory(device: str | torch.device) -> int | None:
    """Bytes free on ``device`` now: a GPU's free memory, the machine's available memory
    for the CPU (``MemAvailable``); None where it cannot be told."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation failure (CUDA or CPU) rather than a bug."""
    if isinstance(err, torch.cuda.OutOfMemoryError | MemoryError):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("out of memory" in text
                                               or "can't allocate memory" in text)


def read_back(values: Sequence[Tensor]) -> list[float]:
    """Scalar tensors, all on one device, as Python floats, with one wait for it.

    What ``[float(v) for v in values]`` gives, bit for bit, without stopping for each
    value: they are stacked in the widest of their dtypes (never a wider one, so float32
    values stay float32 on a device without float64, Apple's MPS) and copied back once.
    """
    dtype = functools.reduce(torch.promote_types, (v.dtype for v in values))
    return torch.stack([v.detach().reshape(()).to(dtype) for v in values]).tolist()


def check_model_fits(build: Callable[[], torch.nn.Module], device: str | torch.device,
                     what: str) -> None:
    """Refuse, before anything is allocated, a model whose training cannot fit on
    ``device``: ``build()`` is called on the meta device (no memory), its parameters
    counted, and each costs at least :data:`BYTES_TO_TRAIN_A_PARAMETER` bytes.

    Raises:
        ResourceError: one line with the count, the memory it needs and what there is.
    """
    with torch.device("meta"):
        n_parameters = sum(p.numel() for p in build().parameters())
    need, have = BYTES_TO_TRAIN_A_PARAMETER * n_parameters, available_memory(device)
    if have is not None and need > have:
        raise ResourceError(
            f"{what} has {n_parameters:,} parameters: training needs at least "
            f"{need / 2**30:,.1f} GiB (weights, gradients and optimiser state, before "
            f"activations) and {torch.device(device)} has {have / 2**30:,.1f} GiB free; make "
            f"the model smaller (model.nhid, model.emsize, model.nlayers)")


def default_device() -> torch.device:
    """CUDA if available, else Apple MPS if available, else CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return mps is not None and mps.is_available()


def resolve_device(name: str | torch.device | None) -> torch.device:
    """The device a ``--device`` value names, checked against this machine.

    ``None`` gives :func:`default_device`. Otherwise ``cpu``, ``cuda``, ``cuda:N`` or
    ``mps`` (or a :class:`torch.device` of these), each only if this machine has it; an
    index on the CPU (``cpu:0``, which torch accepts) names the CPU.

    Raises:
        DeviceError: a name that is not a device (``"nonsense"``), a kind drillbook does not
            run on (``"meta"``), or a device this machine lacks (``"cuda"`` without a GPU
            or with a CPU-only torch, ``"cuda:3"`` on a machine with one GPU, ``"mps"``
            off Apple silicon); the one-line message says which and what to use instead.
    """
    if name is None:
        return default_device()
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):  # torch's message for a bad device string
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise DeviceError(f"unknown device {str(name)!r}; use cpu, cuda, cuda:N or mps")
    if device.type == "cpu":  # "cpu:0" is the CPU too (and torch.load cannot map to it)
        return torch.device("cpu")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = (f"torch {torch.__version__} was built without CUDA"
                   if torch.version.cuda is None else "no GPU found")
            raise DeviceError(f"device {str(name)!r}: CUDA is not available on this machine "
                              f"({why}); use cpu")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise DeviceError(f"device {str(name)!r}: this machine has {count} CUDA "
                              f"device(s), cuda:0 to cuda:{count - 1}; use one of them")
    if device.type == "mps" and not _mps_available():
        raise DeviceError(f"device {str(name)!r}: Apple's MPS backend is not available on "
                          f"this machine; use cpu")
    return device


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's, numpy's and torch's (CPU and CUDA) generators.

    Notebooks call this once at the top; library code takes explicit generators
    instead. Returns a fresh ``torch.Generator`` seeded with ``seed`` for code that
    wants a private stream.

    Raises:
        ConfigError: ``seed`` is not an integer in ``[-2**63, 2**63)``
            (:data:`~drillbook.validation.SEED`; ``"0"``, ``0.5``, ``None`` and ``True``
            are refused, not hashed or truncated into some seed).
    """
    seed = SEED.check(seed, "seed")
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeding the legacy global is the point
    torch.manual_seed(seed)  # also seeds every CUDA device
    return torch.Generator().manual_seed(seed)


@dataclass(frozen=True)
class Profile:
    """The chosen experiment size.

    Attributes:
        name: ``"small"``, ``"t4"`` or ``"full"``.
        source: how it was chosen (an argument, the environment variable, or automatic).
    """

    name: str
    source: str

    @property
    def small(self) -> bool:
        return self.name == "small"

    def pick(self, *, small: Any, full: Any, t4: Any = None) -> Any:
        """Return the value given for this profile.

        ``t4`` is optional: a cell that gives none (or ``None``) runs its ``full`` value in
        the ``t4`` profile, so only the sizes that do not fit a T4 need a third value.
        """
        if self.name == "small":
            return small
        if self.name == "t4" and t4 is not None:
            return t4
        return full


def _auto_profile(device: torch.device) -> Profile:
    """``small`` off CUDA; on CUDA ``t4`` for a small or pre-Ampere GPU, else ``full``."""
    if device.type != "cuda":
        return Profile("small", f"auto ({device.type})")
    props = torch.cuda.get_device_properties(device)
    gib = props.total_memory / 2**30
    what = f"{gib:.0f} GiB, compute capability {props.major}.{props.minor}"
    small_gpu = gib < T4_MEMORY_GIB or props.major < 8  # bfloat16 needs 8.0 (Ampere)
    return Profile("t4" if small_gpu else "full", f"auto (cuda: {what})")


def resolve_profile(device: str | torch.device | None = None, env: dict | None = None,
                    name: str | None = None) -> Profile:
    """The profile ``name`` asks for; ``auto`` (or ``None``) defers to :data:`PROFILE_ENV`,
    whose ``auto`` (or absence) picks by ``device`` (see the module docstring).

    Args:
        device: the device the notebook runs on (default :func:`default_device`).
        env: the environment to read (default ``os.environ``).
        name: an explicit choice (``small``, ``t4``, ``full`` or ``auto``); it wins over the
            environment variable.

    Raises:
        ConfigError: ``name`` or the variable holds anything else; the message lists the
            choices.
    """
    choices = [*PROFILES, "auto"]
    if name is not None:
        raw = name.strip().lower() or "auto"
        if raw not in choices:
            raise ConfigError(f"profile {name!r} is not a profile; use one of {choices}")
        if raw != "auto":
            return Profile(raw, "requested")
    env = os.environ if env is None else env
    raw = env.get(PROFILE_ENV, "auto").strip().lower() or "auto"
    if raw in PROFILES:
        return Profile(raw, f"{PROFILE_ENV}={raw}")
    if raw != "auto":
        raise ConfigError(f"{PROFILE_ENV}={raw!r} is not a profile; use one of {choices}")
    return _auto_profile(default_device() if device is None else torch.device(device))
