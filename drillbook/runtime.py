"""Seeds, devices and the CPU/GPU profile switch: explicit, no hidden global state.

The *profile* decides how big an experiment a notebook or ``tutorial/`` config runs:

* ``small``: sized so a whole chapter runs on a laptop CPU (and in CI) in about a minute;
* ``full``: the sizes meant for a GPU (Colab, a workstation).

It is read from the environment variable :data:`PROFILE_ENV` (``DRILLBOOK_PROFILE``):
``small``, ``full`` or ``auto`` (the default: ``full`` when CUDA is available, else
``small``).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .errors import ConfigError, DeviceError

__all__ = [
    "PROFILES",
    "PROFILE_ENV",
    "Profile",
    "default_device",
    "resolve_device",
    "resolve_profile",
    "seed_everything",
]

PROFILE_ENV = "DRILLBOOK_PROFILE"
PROFILES = ("small", "full")


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
    ``mps``, each only if this machine has it.

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
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeding the legacy global is the point
    torch.manual_seed(seed)  # also seeds every CUDA device
    return torch.Generator().manual_seed(seed)


@dataclass(frozen=True)
class Profile:
    """The chosen experiment size.

    Attributes:
        name: ``"small"`` or ``"full"``.
        source: how it was chosen (environment variable or automatic).
    """

    name: str
    source: str

    @property
    def small(self) -> bool:
        return self.name == "small"

    def pick(self, *, small: Any, full: Any) -> Any:
        """Return ``small`` or ``full`` according to the profile."""
        return small if self.small else full


def resolve_profile(device: torch.device | None = None, env: dict | None = None) -> Profile:
    """Read :data:`PROFILE_ENV`; ``auto`` (or unset) means ``full`` on CUDA, else ``small``.

    Raises:
        ConfigError: the variable holds anything else; the message lists the choices.
    """
    env = os.environ if env is None else env
    raw = env.get(PROFILE_ENV, "auto").strip().lower() or "auto"
    if raw in PROFILES:
        return Profile(raw, f"{PROFILE_ENV}={raw}")
    if raw != "auto":
        raise ConfigError(f"{PROFILE_ENV}={raw!r} is not a profile; use one of "
                         f"{[*PROFILES, 'auto']}")
    device = default_device() if device is None else torch.device(device)
    name = "full" if device.type == "cuda" else "small"
    return Profile(name, f"auto ({device.type})")
