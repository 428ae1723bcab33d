"""Where a number came from: the code's commit, the versions and the device, recorded
beside every result file and benchmark report (:mod:`drillbook.experiments`)."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from pathlib import Path

import torch

__all__ = ["device_kind", "device_name", "environment", "git_state", "source_hash", "stamp_source"]

#: the package's own folder: what ``git_state`` asks git about
_PACKAGE = Path(__file__).parent


#: the stamp a copy without git reads its commit from (:func:`stamp_source`; ignored by git)
STAMP = _PACKAGE / "SOURCE.json"


def source_hash() -> str:
    """SHA-256 over the package's Python files (their paths and contents, in order): what
    a stamp compares to tell whether a copy still holds the stamped code."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def git_state() -> dict:
    """``commit`` (HEAD of the package's checkout) and ``dirty`` (the package's files
    differ from that commit, its result files aside: ``drillbook/results`` is where runs
    write theirs, so a run that finishes while others train does not make them dirty). A
    long run should read this when it starts: the checkout may move on while it trains.

    A copy of the working tree (a machine it was copied to, an unpacked archive) reads
    them from the stamp :func:`stamp_source` wrote beside the package before the copy:
    when its files still hash as stamped, the stamp's clean commit is exactly the code
    that runs, whatever git says there (a copy may carry an older ``.git`` whose HEAD is
    not the commit copied: a GPU window of 2026-11-26 recorded such a HEAD, dirty). A
    stamp that no longer matches counts as dirty; with neither git nor a stamp, both
    are None."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                              cwd=_PACKAGE).stdout.strip()

    try:
        state = {"commit": git("rev-parse", "HEAD"),
                 "dirty": bool(git("status", "--porcelain", "--", str(_PACKAGE),
                                   f":(exclude){_PACKAGE / 'results'}"))}
    except (OSError, subprocess.CalledProcessError):
        state = {"commit": None, "dirty": None}
    if state["dirty"] is False:
        return state  # a clean checkout names its code itself
    try:
        stamp = json.loads(STAMP.read_text(encoding="utf-8"))
        stamped = {"commit": stamp["commit"],
                   "dirty": bool(stamp["dirty"]) or stamp["source_hash"] != source_hash()}
    except (OSError, ValueError, KeyError, TypeError):
        return state
    if state["commit"] is None or stamped["dirty"] is False:
        return stamped
    return state


def stamp_source() -> Path:
    """Write the stamp ``drillbook/SOURCE.json`` from git (the commit, whether the
    package's files differ from it, their :func:`source_hash`), for a copy of this
    checkout that will have no git: ``python -m drillbook.provenance``. Returns the
    stamp's path.

    Raises:
        RuntimeError: this checkout is not in git (there is nothing to stamp).
    """
    state = git_state()
    if state["commit"] is None or not (_PACKAGE.parent / ".git").exists():
        raise RuntimeError("no git checkout here: a stamp records a commit; run this in "
                           "the clone the copy is made from")
    STAMP.write_text(json.dumps({**state, "source_hash": source_hash()}) + "\n",
                     encoding="utf-8")
    return STAMP


def device_name(device: torch.device | str) -> str:
    """A result file's ``device``: the GPU's name on CUDA, the CPU with its machine type and
    torch's thread count (``"cpu (x86_64, 2 threads)"``), any other device by its type
    (``"mps"``)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type != "cpu":
        return device.type
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"


def device_kind(name: str) -> str:
    """What kind of device a result file's ``device`` (:func:`device_name`) names: ``cpu``,
    else ``gpu`` (a CUDA GPU's name, or an accelerator's type such as ``mps``)."""
    return "cpu" if name.startswith("cpu") else "gpu"


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


if __name__ == "__main__":
    print(stamp_source())
