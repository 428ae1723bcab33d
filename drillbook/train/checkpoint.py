"""Checkpoints that are never half-written and load with ``weights_only=True``.

Everything saved is tensors, numbers, strings, lists and dicts (no pickled modules, which
is what breaks the papers' own checkpoints on today's PyTorch). Writes go to a temporary
file in the same folder, are flushed to disk, and are renamed over the target in one
atomic step: a run killed mid-write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, MissingFileError

__all__ = ["load_checkpoint", "save_atomic"]


def save_atomic(obj: Any, path: str | Path) -> Path:
    """``torch.save`` to ``path`` via a temporary file and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """Load a drillbook checkpoint safely (``weights_only=True``).

    Raises:
        FileNotFoundError: no such file (the message names it).
        ValueError: the file is not a readable checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"no checkpoint at {path}")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # corrupted, truncated, or not ours
        raise CheckpointError(f"{path} is not a readable drillbook checkpoint: {err}") from err
