"""``python tests/readonly.py ARGS``: ``drillbook ARGS`` with the paths listed in
``$DRILLBOOK_TEST_READONLY`` (separated by ``os.pathsep``) read-only, as a read-only disk
makes them for every user.

The tests run as root, whom permission bits do not stop, and a read-only mount needs
privileges a test cannot count on; so this process refuses, at the operating system's
boundary, every call that would create, change or remove something at or under those
paths, with the error a read-only file system gives (``EROFS``). Everything else, the
command included, is the real thing.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import sys

ROOTS = [os.path.abspath(p) for p in os.environ["DRILLBOOK_TEST_READONLY"].split(os.pathsep)]
WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _readonly(path) -> bool:
    if isinstance(path, int):  # a file descriptor: opened before, allowed then
        return False
    p = os.path.abspath(os.fsdecode(path))
    return any(p == r or p.startswith(r + os.sep) for r in ROOTS)


def _check(*paths) -> None:
    for path in paths:
        if _readonly(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))


def _guard(call, *, flags=None):
    """``call`` refusing its path arguments (all of them, or with ``flags`` only an
    ``os.open`` that writes)."""
    def guarded(*args, **kwargs):
        if flags is None:
            _check(*[a for a in args if isinstance(a, str | bytes | os.PathLike)])
        elif args[1] & flags:
            _check(args[0])
        return call(*args, **kwargs)

    return guarded


_real_open = io.open


def _open(file, mode="r", *args, **kwargs):
    if isinstance(file, str | bytes | os.PathLike) and set(mode) & set("wax+"):
        _check(file)
    return _real_open(file, mode, *args, **kwargs)


os.open = _guard(os.open, flags=WRITES)
for name in ("mkdir", "replace", "rename", "unlink", "remove", "rmdir", "chmod", "link",
             "symlink", "truncate", "utime"):
    setattr(os, name, _guard(getattr(os, name)))
builtins.open = io.open = _open

if __name__ == "__main__":
    from drillbook.cli import main

    sys.exit(main(sys.argv[1:]))
