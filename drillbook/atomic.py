"""Files that are never half-written: one writer for checkpoints, run folders, result
files and reports.

:func:`write_atomic` writes to a temporary file ``.<name>.<pid>.tmp`` beside the target,
flushes it to disk (``fsync``) and renames it over the target in one step, so a reader
sees the old file or the new one, never a part of either. A process killed mid-write
leaves the old file and a temporary one (a trainer opening its run folder removes
those); a write that fails (disk full) leaves the old file and no temporary one, and
raises the :class:`OSError` for the caller to turn into its own one-line message.

>>> import json, tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> write_atomic(folder / "a.json", json.dumps({"x": 1})).read_text()
'{"x": 1}'
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["temporary_name", "write_atomic", "write_json"]


def temporary_name(path: Path) -> Path:
    """Where :func:`write_atomic` writes ``path`` before the rename: a hidden file beside
    it, named after this process (``.last.pt.<pid>.tmp``)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_atomic(path: str | Path, content: str | bytes | Callable[[BinaryIO], object]
                 ) -> Path:
    """Write ``content`` to ``path`` atomically; returns ``path``.

    Args:
        path: the target; its folder is created if missing.
        content: text (written as UTF-8), bytes, or a function that writes into the open
            binary file (``lambda f: torch.save(state, f)``).

    Raises:
        OSError: the folder cannot be created or the file written (no space, no
            permission); the previous file at ``path`` is untouched and no temporary file
            is left.
    """
    path = Path(path)
    tmp = temporary_name(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content.encode("utf-8") if isinstance(content, str) else content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_json(path: str | Path, doc: Any, *, sort_keys: bool = False, indent: int = 1
               ) -> Path:
    """``doc`` as indented JSON (one trailing newline), written by :func:`write_atomic`."""
    return write_atomic(path, json.dumps(doc, indent=indent, sort_keys=sort_keys) + "\n")
