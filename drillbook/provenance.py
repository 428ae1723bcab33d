"""Where a number came from: the code's commit, the versions and the device, recorded
beside every result file and benchmark report (:mod:`drillbook.experiments`)."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import torch

__all__ = ["device_name", "environment", "git_state"]

#: the package's own folder: what ``git_state`` asks git about
_PACKAGE = Path(__file__).parent


def git_state() -> dict:
    """``commit`` (HEAD of the package's checkout, None outside git) and ``dirty`` (the
    package's files differ from that commit, None outside git). A long run should read
    this when it starts: the checkout may move on while it trains."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                              cwd=_PACKAGE).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--", str(_PACKAGE)))}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


def device_name(device: torch.device | str) -> str:
    """A result file's ``device``: the GPU's name on CUDA, else the CPU with its machine
    type and torch's thread count (``"cpu (x86_64, 2 threads)"``)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"


def environment(device: str | torch.device | None = None) -> dict:
    """Versions and device, recorded next to every measurement.

    ``device_name`` names ``device`` (the GPU's name for CUDA, else the CPU); without
    ``device``, the GPU when there is one.
    """
    commit = git_state()["commit"]
    cuda = torch.device(device).type == "cuda" if device is not None else \
        torch.cuda.is_available()
    name = (torch.cuda.get_device_name(torch.device(device) if device is not None else None)
            if cuda else platform.processor() or platform.machine())
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "device_name": name,
            "threads": torch.get_num_threads(), "python": platform.python_version(),
            "commit": commit}
