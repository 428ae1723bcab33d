"""The lock that keeps one trainer at a time in a run folder (:class:`RunLock`), and a
look at who holds it that takes nothing (:meth:`RunLock.holder`)."""

from __future__ import annotations

import os
import warnings
import weakref
from pathlib import Path

from ..errors import RunFolderError

__all__ = ["LOCK", "RunLock"]

#: the lock file of a run folder; it holds the holder's pid
LOCK = ".lock"


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open ``fd`` is still the file at ``path`` (a lock's holder removes the
    file when it lets go, and a later trainer creates a new one)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _lock_fd(fd: int) -> bool:
    """Take an exclusive, non-blocking lock on ``fd``; False when another holds it."""
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class RunLock:
    """An exclusive lock on ``<folder>/.lock``, released by :meth:`release`, when this
    object is collected, or by the operating system when the process ends.

    ``flock`` locks belong to an open file, so a second :class:`RunLock` on the same
    folder conflicts even within one process.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK
        self._fd: int | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (no-op if held).

        Raises:
            RunFolderError: another trainer holds it (the message names its pid).
        """
        if self._fd is not None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise RunFolderError(f"cannot make the run folder {self.folder} "
                                 f"({err.strerror or err}); train into a folder that can "
                                 f"be written (--out)") from None
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise RunFolderError(f"cannot write in the run folder {self.folder} "
                                     f"({self.path}: {err.strerror or err}); make it "
                                     f"writable, or train into another --out folder"
                                     ) from None
            try:
                locked = _lock_fd(fd)
            except OSError as err:  # a filesystem without locks (some network mounts)
                warnings.warn(f"cannot lock {self.path} ({err.strerror}): nothing stops a "
                              f"second trainer from writing into {self.folder}",
                              stacklevel=3)
                locked = True
            if not locked or _same_file(fd, self.path):
                break
            os.close(fd)  # the holder removed the file as we took it: take the new one
        if not locked:
            try:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            except OSError:  # Windows: the locked byte cannot be read either
                holder = "unknown"
            os.close(fd)
            who = ("another trainer in this process (finish its fit() or call its "
                   "close())" if holder == str(os.getpid())
                   else f"another training process (pid {holder})")
            raise RunFolderError(f"{self.folder} is in use by {who}; wait for it to "
                                 f"finish or stop it, or train into another --out folder")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())  # who holds it, for the message above
        self._fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)

    def holder(self) -> str | None:
        """Who holds the lock now, in words (``"pid 1234"``), or None when no one does;
        looked at without taking it or writing anything (a process that only reads a run,
        or a read-only folder). None also where the lock cannot be looked at (Windows)."""
        try:
            import fcntl
        except ImportError:  # Windows: msvcrt's locks cannot be tested without taking one
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:  # no .lock: no trainer
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = os.read(fd, 32).decode(errors="replace").strip()
                return f"pid {pid}" if pid else "a process"
            except OSError:  # a filesystem without locks: nothing can be told
                return None
            return None
        finally:
            os.close(fd)  # also drops the shared lock taken to look

    def release(self) -> None:
        """Give the lock up and remove the ``.lock`` file (no-op if not held): a folder
        keeps no trace of a trainer that has finished, failed or been refused."""
        if self._finalizer is not None:
            self.path.unlink(missing_ok=True)  # while held: no one else can have taken it
            self._finalizer()  # closing the file drops the lock
        self._fd, self._finalizer = None, None


