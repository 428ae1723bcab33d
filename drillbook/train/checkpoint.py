"""Checkpoints that are never half-written and load with ``weights_only=True``.

Everything saved is tensors, numbers, strings, lists and dicts (no pickled modules, which
is what breaks the papers' own checkpoints on today's PyTorch), written atomically
(:mod:`drillbook.atomic`). Every checkpoint names its kind under ``"format"``
(:data:`FORMATS`), so a weights-only ``best.pt`` copied over a ``last.pt`` is refused by
name rather than failing on a missing key.
"""

from __future__ import annotations

import errno
import io
import re
import shutil
import zipfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch

from ..atomic import write_atomic
from ..errors import CheckpointError, DeviceError, MissingFileError

__all__ = ["FORMATS", "LM_CHECKPOINT", "LM_DYNAMIC_EVAL", "LM_WEIGHTS", "NMT_CHECKPOINT",
           "NMT_WEIGHTS", "load_checkpoint", "load_weights", "rng_state", "save_atomic",
           "serialize", "set_rng_state", "weights_mismatch", "write_serialized"]

LM_CHECKPOINT = "drillbook-lm-checkpoint/1"
LM_WEIGHTS = "drillbook-lm-weights/1"
LM_DYNAMIC_EVAL = "drillbook-lm-dynamic-eval/1"
NMT_CHECKPOINT = "drillbook-nmt-checkpoint/1"
NMT_WEIGHTS = "drillbook-nmt-weights/1"

#: ``"format"`` value -> what such a file is, in words (for error messages)
FORMATS = {
    LM_CHECKPOINT: "a resumable language-model checkpoint (last.pt)",
    LM_WEIGHTS: "a weights-only language-model file (best.pt)",
    LM_DYNAMIC_EVAL: "the state of a dynamic evaluation (drillbook eval --dynamic)",
    NMT_CHECKPOINT: "a resumable translation checkpoint (last.pt)",
    NMT_WEIGHTS: "a weights-only translation file (best.pt)",
}

_NO_SPACE = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))  # disk full, quota


def _megabytes(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _write_failure(path: Path, err: OSError) -> str:
    """One line: what failed, that the previous checkpoint is kept, and the fix."""
    kept = (f"the previous {path.name} is kept" if path.exists()
            else f"no {path.name} was written")
    if err.errno in _NO_SPACE:
        try:
            free = f"{_megabytes(shutil.disk_usage(path.parent).free)} free"
        except OSError:
            free = "free space unknown"
        need = (f"; a checkpoint takes about {_megabytes(path.stat().st_size)}"
                if path.exists() else "")
        return (f"could not write {path}: no space left on its disk ({free}{need}); {kept}. "
                f"Free some space (or train into a folder on another disk) and resume the "
                f"run (--resume).")
    return (f"could not write {path} ({err.strerror or err}); {kept}. Make "
            f"{path.parent} writable and resume the run (--resume).")


def rng_state() -> tuple[torch.Tensor, list[torch.Tensor]]:
    """torch's global random state, for a checkpoint: the CPU generator's and every CUDA
    device's (an empty list without CUDA)."""
    return (torch.get_rng_state(),
            torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [])


def set_rng_state(cpu: torch.Tensor, cuda: list[torch.Tensor] | None) -> None:
    """Restore what :func:`rng_state` returned (loaded onto any device); the CUDA states
    are skipped when there are none or this machine has no CUDA."""
    torch.set_rng_state(cpu.cpu())
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


def save_atomic(obj: Any, path: str | Path) -> Path:
    """``torch.save`` to ``path`` through :func:`drillbook.atomic.write_atomic`.

    Raises:
        CheckpointError: the file could not be written (disk full, no permission); the
            previous file at ``path`` is untouched and the temporary file removed.
    """
    return write_serialized(serialize(obj, path), path)


def serialize(obj: Any, path: str | Path) -> io.BytesIO:
    """``obj`` as ``torch.save`` writes it, in memory, to be written to ``path`` by
    :func:`write_serialized` (the tensors are copied off their device now).

    Raises:
        CheckpointError: as :func:`save_atomic`.
    """
    # serialised in memory first: torch turns a failed write (a full disk, a file-size
    # limit) into a RuntimeError without its cause; the plain write keeps the OSError
    buffer = io.BytesIO()
    try:
        torch.save(obj, buffer)
    except OSError as err:
        raise CheckpointError(_write_failure(Path(path), err)) from err
    return buffer


def write_serialized(buffer: io.BytesIO, path: str | Path) -> Path:
    """Write what :func:`serialize` made to ``path`` atomically.

    Raises:
        CheckpointError: as :func:`save_atomic`.
    """
    path = Path(path)
    try:
        return write_atomic(path, buffer.getbuffer())
    except OSError as err:
        raise CheckpointError(_write_failure(path, err)) from err


def _unreadable_reason(path: Path, err: Exception) -> str:
    """A short reason why ``torch.load`` failed, without its ``weights_only`` advice
    (which is wrong for a corrupt file, and unsafe for one of unknown origin)."""
    size = path.stat().st_size
    if size == 0:
        return "empty file"
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"PK\x03\x04":  # torch.save writes a zip archive
        return f"not a PyTorch zip archive, {size:,} bytes"
    if not zipfile.is_zipfile(path):
        return f"incomplete zip archive, {size:,} bytes"
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if "weights only" in first.lower() or "weights_only" in first:
        return "it holds pickled objects, not only tensors and numbers: not saved by drillbook"
    return first.split(". ")[0]


def load_checkpoint(path: str | Path, map_location: Any = "cpu", *,
                    formats: Collection[str] | None = None,
                    fix: str = "restore a good copy, or train the run again into a new --out folder"
                    ) -> dict[str, Any]:
    """Load a drillbook checkpoint safely (``weights_only=True``).

    Args:
        path: the file.
        map_location: as for :func:`torch.load`.
        formats: the kinds (:data:`FORMATS` keys) the caller can use; None accepts any
            drillbook checkpoint.
        fix: the advice that ends the message when the file is unreadable or of another
            kind.

    Raises:
        MissingFileError: no such file.
        CheckpointError: the file is corrupt or truncated; it is not a drillbook
            checkpoint or not one of ``formats``. The one-line message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"no checkpoint at {path}; {fix}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # corrupted, truncated, or not ours
        if "data location" in str(err) or "deserialize object on" in str(err):
            raise DeviceError(f"cannot load {path} onto device {str(map_location)!r} "
                              f"({' '.join(str(err).split())[:160]}); use cpu, cuda, cuda:N "
                              f"or mps") from err
        raise CheckpointError(f"{path} is not a readable drillbook checkpoint (corrupt or "
                              f"truncated: {_unreadable_reason(path, err)}); {fix}") from err
    kind = state.get("format") if isinstance(state, dict) else None
    if kind not in FORMATS:
        raise CheckpointError(f"{path} is not a drillbook checkpoint (format "
                              f"{kind!r}); {fix}")
    if formats is not None and kind not in formats:
        wanted = " or ".join(FORMATS[f] for f in formats)
        raise CheckpointError(f"{path} is {FORMATS[kind]}, not {wanted}; {fix}")
    return state


# ------------------------------------------------------------------ weights that do not fit
_SIZE = re.compile(r"size mismatch for ([\w.]+): copying a param with shape "
                   r"torch\.Size\(\[([\d, ]*)\]\) from checkpoint, the shape in current "
                   r"model is torch\.Size\(\[([\d, ]*)\]\)")
_KEYS = re.compile(r"(Missing|Unexpected) key\(s\) in state_dict: ((?:\"[^\"]*\"(?:, )?)+)")


def weights_mismatch(err: BaseException, checkpoint: Path, config: Path
                     ) -> CheckpointError | None:
    """The one-line error for ``model.load_state_dict``'s failure ``err`` when the
    weights in ``checkpoint`` do not fit the model ``config`` describes (an edited
    config, a checkpoint copied from another run): both files and the first sizes or
    names that differ. None when ``err`` is not such a failure."""
    text = str(err)
    if "Error(s) in loading state_dict" not in text:
        return None
    found = []
    sizes = _SIZE.findall(text)
    if sizes:
        name, saved, built = sizes[0]
        more = f" (and {len(sizes) - 1} more)" if len(sizes) > 1 else ""
        found.append(f"{name} is [{saved}] in the checkpoint and [{built}] in the config's "
                     f"model{more}")
    for kind, keys in _KEYS.findall(text):
        names = re.findall(r'"([^"]*)"', keys)
        where = "the config's model has" if kind == "Missing" else "the checkpoint has"
        other = "the checkpoint lacks" if kind == "Missing" else "the config's model lacks"
        found.append(f"{where} {len(names)} weight(s) {other} ({names[0]}"
                     f"{', ...' if len(names) > 1 else ''})")
    what = "; ".join(found) or text.strip().splitlines()[0]
    return CheckpointError(f"{checkpoint} does not fit the model {config} describes: {what}. "
                           f"The config was edited or the checkpoint comes from another run: "
                           f"put the run's own {config.name} and {checkpoint.name} back, or "
                           f"train the config into a new --out folder")


def load_weights(model: torch.nn.Module, weights: dict[str, Any], *, checkpoint: str | Path,
                 config: str | Path) -> None:
    """``model.load_state_dict(weights)``, where weights that do not fit the model (read
    from ``checkpoint``, the model built from ``config``) are a one-line
    :class:`~drillbook.errors.CheckpointError` naming both files
    (:func:`weights_mismatch`)."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        mismatch = weights_mismatch(err, Path(checkpoint), Path(config))
        if mismatch is None:
            raise
        raise mismatch from None
