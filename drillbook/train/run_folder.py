"""The run-folder rules both tasks' trainers follow: one trainer at a time, nothing
overwritten by accident, nothing written before every check has passed, a log that
matches the checkpoint, finite checkpoints only (:class:`RunFolder` states each rule).
A run folder holds ``config.json``, ``log.jsonl`` (one record per completed epoch),
``last.pt`` (the resumable checkpoint), ``best.pt`` (the best weights) and ``.lock``;
its files are read by :mod:`drillbook.train.run_files`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from ..atomic import write_atomic
from ..configs import SectionedConfig
from ..errors import MissingFileError, RunFolderError, RunFolderExistsError
from .checkpoint import (
    load_checkpoint,
    save_atomic,
    serialize,
    weights_mismatch,
    write_serialized,
)
from .lock import LOCK, RunLock
from .run_files import BEST, CONFIG, FINETUNE, LAST, LOG, log_lines, read_run_config

__all__ = ["LOCK", "FollowerFolder", "PendingCheckpoint", "RunFolder", "RunLock",
           "open_run_folder"]


def _write_text_atomic(path: Path, text: str) -> None:
    """:func:`drillbook.atomic.write_atomic`, its failure a one-line RunFolderError."""
    try:
        write_atomic(path, text)
    except OSError as err:
        raise RunFolderError(f"could not write {path} ({err.strerror or err}); free space "
                             f"or make {path.parent} writable, then resume the run") from err


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and k != "paper":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ------------------------------------------------------------------ the folder
class PendingCheckpoint(NamedTuple):
    """A ``last.pt`` serialised but not yet written (:meth:`RunFolder.prepare_last`)."""

    step: int | None  #: the steps its state has taken (its own loss is the next one's)
    data: Any  #: the serialised state (None where this process writes nothing)


class RunFolder:
    """A run folder opened by a trainer: validated, locked and checked.

    A run folder holds ``config.json``, ``log.jsonl`` (one record per completed epoch),
    ``last.pt`` (the resumable checkpoint), ``best.pt`` (the best weights) and ``.lock``.

    * **One trainer at a time.** A trainer holds an exclusive lock on ``.lock`` (``flock``;
      the file holds the holder's pid) from its construction until its ``fit()`` returns
      (a later ``fit()`` takes it again). A second trainer on the folder, in this process
      or another, fails at once with :class:`~drillbook.errors.RunFolderError` naming the
      holder. The operating system drops the lock when a process dies, so a killed run
      never blocks the next one.
    * **Nothing is overwritten by accident.** A new run refuses a folder that holds a
      ``last.pt``; a resumed run must use the same config up to
      :attr:`SectionedConfig.RESUMABLE_CHANGES` (``train.epochs``, the checkpoint and log
      cadence, ``train.lr`` and ``train.clip``): lowering the step size is how a diverged run
      goes on from its last checkpoint.
    * **Nothing is written before every check has passed** (config valid, folder free,
      checkpoint readable and of the right kind, model built). A resumed run rewrites
      ``config.json`` only when a resumable value really changed.
    * **The log matches the checkpoint.** On resume, ``log.jsonl`` keeps the records of the
      epochs completed before the checkpoint (a run killed between writing an epoch's record
      and its checkpoint would otherwise log that epoch twice). Temporary files left by a
      killed writer (``.last.pt.<pid>.tmp``) are removed when the folder is opened.
    * **Checkpoints hold finite weights only**: the trainers check the loss and the
      parameters after every step and stop with :class:`~drillbook.errors.TrainingDiverged`
      (:func:`~drillbook.train.step.diverged`) before anything non-finite is saved; a
      checkpoint taken within an epoch is written only once its state's own loss (the next
      step's) was sane.

    Use :func:`open_run_folder`; the trainer then calls :meth:`start` (checkpoint,
    build, restore, then the first write). All later writes go through
    :meth:`save_last`, :meth:`save_best` and :meth:`append_log`.

    Attributes:
        path: the folder.
        resume: whether the run continues from ``last.pt``.
        changes: ``{"train.lr": [old, new], ...}``: the resumable values this resume
            changes (empty for a new run).
        saved_step: the step ``last.pt`` holds, or None while there is none.
    """

    def __init__(self, path: str | Path, config: SectionedConfig, resume: bool) -> None:
        self.path, self.config, self.resume = Path(path), config.validate(), resume
        self.last = self.path / LAST
        self.changes: dict[str, list[Any]] = {}
        self.saved_step: int | None = None
        self._stamp: tuple[int, int] | None = None
        self._saved: SectionedConfig | None = None  # config.json of a resumed run
        if resume and not self.last.exists():  # before the lock creates the folder
            raise MissingFileError(f"cannot resume: {self.path} has no checkpoint ({LAST}); "
                                 f"start the run without --resume")
        self._created = _first_missing(self.path)  # removed again if nothing is written
        self._started, self._started_in = False, None
        self._lock = RunLock(self.path)
        self._lock.acquire()
        try:
            self._check()
        except BaseException:
            self.release(failed=True)
            raise
        for tmp in self.path.glob(".*.tmp"):  # left by a killed writer: we hold the lock
            tmp.unlink(missing_ok=True)

    def _check(self) -> None:
        if not self.resume:
            if self.last.exists():
                raise RunFolderExistsError(f"{self.path} already holds a run ({LAST}); pass "
                                     f"--resume to continue it or choose another --out "
                                     f"folder")
            held = [name for name in (BEST, LOG, CONFIG, FINETUNE)
                    if (self.path / name).exists()]
            if held:  # a run without last.pt: nothing to resume, and not to be mixed with
                raise RunFolderExistsError(
                    f"{self.path} already holds a run ({', '.join(held)}) that cannot be "
                    f"resumed (it has no {LAST}); train into another --out folder, and "
                    f"remove this one yourself only if its run is no longer needed")
            return
        saved = read_run_config(self.path, type(self.config))
        old, new = _flat(saved.to_dict()), _flat(self.config.to_dict())
        if saved.resume_key() != self.config.resume_key():
            resumable = {f"train.{k}" for k in self.config.RESUMABLE_CHANGES}
            diff = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
                    if old.get(k) != new.get(k) and k not in resumable
                    and k not in ("name", "description", "paper")]
            raise RunFolderError(
                f"{self.path} was trained with a different config ({'; '.join(diff)}); "
                f"resume with the same config and overrides (only "
                f"{', '.join(sorted(resumable))} may change), or use a new --out folder")
        self.changes = {k: [old.get(k), new[k]] for k in new
                        if k.startswith("train.") and old.get(k) != new[k]}
        self._saved = saved

    def start(self, fmt: str, map_location: Any, build: Callable[[dict | None], None],
              restore: Callable[[dict], int]) -> None:
        """Bring a trainer up in the one safe order, giving the lock up if a step fails:
        read the resume checkpoint (kind ``fmt``), ``build(state)`` the model and data,
        ``restore(state)`` it (returns the epoch in progress), and only then
        :meth:`commit`, the first write."""
        try:
            state = self.load_last(fmt, map_location) if self.resume else None
            build(state)
            try:
                epoch = restore(state) if state is not None else None
            except RuntimeError as err:  # weights of another shape than the config's
                mismatch = weights_mismatch(err, self.last, self.path / CONFIG)
                if mismatch is None:
                    raise
                raise mismatch from None
            self.commit(epoch)
        except BaseException:
            self.release(failed=True)
            raise
        self._started, self._started_in = True, self._created
        self._created = None  # written: the folder is the run's now

    # ------------------------------------------------------------ reading
    def load_last(self, fmt: str, map_location: Any = "cpu") -> dict[str, Any]:
        """The resume checkpoint, checked to be of kind ``fmt``."""
        state = load_checkpoint(
            self.last, map_location, formats=(fmt,),
            fix=f"put the run's own {LAST} back, or train the run again into a new --out "
                f"folder")
        self.saved_step = state.get("step")
        self._stamp = self._stat()
        return state

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.last.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    # ------------------------------------------------------------ writing
    def commit(self, epoch_in_progress: int | None) -> None:
        """The first write, once every check has passed: ``config.json`` (on resume only
        if a resumable value changed) and the log (a new run's old log is removed; a
        resumed run's keeps the epochs before ``epoch_in_progress``)."""
        if not self.resume:
            _write_text_atomic(self.path / CONFIG,
                               json.dumps(self.config.to_dict(), indent=2) + "\n")
            (self.path / LOG).unlink(missing_ok=True)
            return
        if self.config.to_dict() != self._saved.to_dict():
            _write_text_atomic(self.path / CONFIG,
                               json.dumps(self.config.to_dict(), indent=2) + "\n")
        log = self.path / LOG
        if epoch_in_progress is not None and log.exists():
            records = log_lines(log)
            kept = [line for _, line, r in records  # a half-written line is dropped too
                    if isinstance(r, dict) and isinstance(r.get("epoch"), int)
                    and r["epoch"] < epoch_in_progress]
            if len(kept) != len(records):
                _write_text_atomic(log, "".join(line + "\n" for line in kept))

    def change_history(self, previous: list, epoch: int, step: int) -> list:
        """``previous`` plus this resume's :attr:`changes` (if any), for the checkpoint."""
        if not self.changes:
            return list(previous)
        return [*previous, {"epoch": epoch, "step": step, "changes": self.changes}]

    def save_last(self, state: dict[str, Any]) -> Path:
        """Write ``last.pt`` (the resumable checkpoint) atomically and note it as this
        trainer's latest write; returns its path."""
        return self.commit_last(self.prepare_last(state))

    def prepare_last(self, state: dict[str, Any]) -> PendingCheckpoint:
        """``last.pt``'s next content, serialised now and written only by
        :meth:`commit_last` (a trainer commits it once the state's own loss has been
        seen to be sane)."""
        return PendingCheckpoint(state.get("step"), serialize(state, self.last))

    def commit_last(self, pending: PendingCheckpoint) -> Path:
        """Write a :meth:`prepare_last` state to ``last.pt`` atomically; returns its
        path."""
        path = write_serialized(pending.data, self.last)
        self.saved_step, self._stamp = pending.step, self._stat()
        return path

    def save_best(self, state: dict[str, Any]) -> Path:
        """Write ``best.pt`` atomically; returns its path."""
        return save_atomic(state, self.path / BEST)

    def append_log(self, record: dict[str, Any]) -> None:
        """Append one epoch's record to ``log.jsonl``."""
        path = self.path / LOG
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as err:
            raise RunFolderError(f"could not append to {path} ({err.strerror or err}); "
                                 f"free space or make {self.path} writable, then resume "
                                 f"the run (--resume)") from err

    # ------------------------------------------------------------ the lock
    def acquire(self) -> None:
        """Take the lock again for another ``fit()`` (no-op while held).

        Raises:
            RunFolderError: another trainer holds the folder, or wrote its ``last.pt``
                since this one last saved or loaded it.
        """
        if self._lock.held:
            return
        self._lock.acquire()
        if self._stat() != self._stamp:
            self._lock.release()
            raise RunFolderError(f"{self.last} changed since this trainer last saved it "
                                 f"(another trainer resumed the run); build a new trainer "
                                 f"with resume=True")

    def release(self, failed: bool = False, abandon: bool = False) -> None:
        """Give the lock up. After a ``failed`` start, also remove the folders this
        trainer created, which then hold nothing. With ``abandon`` (training stopped by
        an error), a new run that has saved no checkpoint removes what it wrote
        (``config.json``, ``log.jsonl``, ``best.pt``) and the folders it created: the same
        command can start it again, and a folder it found keeps only what it held."""
        if abandon and not self.resume and self.saved_step is None and self._started:
            for name in (CONFIG, LOG, BEST):
                (self.path / name).unlink(missing_ok=True)
            failed, self._created = True, self._started_in
        self._lock.release()
        created, self._created = self._created, None
        if failed and created is not None and _only_folders(created):
            shutil.rmtree(created)


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (None if it exists)."""
    path = path.absolute()
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return path


def _only_folders(path: Path) -> bool:
    """Whether ``path`` holds folders only, no file (so removing it loses nothing)."""
    return path.is_dir() and all(p.is_dir() for p in path.rglob("*"))


class FollowerFolder:
    """The run folder as a process of rank > 0 of a distributed run sees it: it reads
    ``last.pt`` to resume and writes nothing (rank 0 holds the lock and writes), through
    the calls of :class:`RunFolder`."""

    def __init__(self, path: Path, resume: bool) -> None:
        self.path, self.resume, self.last = path, resume, path / LAST
        self.saved_step: int | None = None

    def start(self, fmt: str, map_location: Any, build, restore) -> None:
        state = load_checkpoint(self.last, map_location, formats=(fmt,)) if self.resume \
            else None
        build(state)
        if state is not None:
            restore(state)

    def change_history(self, previous: list, epoch: int, step: int) -> list:
        return list(previous)

    def save_last(self, state: dict) -> Path:
        return self.last

    def prepare_last(self, state: dict) -> PendingCheckpoint:
        return PendingCheckpoint(state.get("step"), None)

    def commit_last(self, pending: PendingCheckpoint) -> Path:
        return self.last

    def save_best(self, state: dict) -> Path:
        return self.path / BEST

    def append_log(self, record: dict) -> None:
        pass

    def acquire(self) -> None:
        pass

    def release(self, failed: bool = False, abandon: bool = False) -> None:
        pass


def open_run_folder(run_dir: str | Path, config: SectionedConfig,
                    resume: bool) -> RunFolder:
    """Validate ``config``, lock ``run_dir`` and check it for a new or resumed run.

    Writes nothing but the lock file (see :meth:`RunFolder.commit`).

    Raises:
        ConfigError: an invalid config.
        MissingFileError: ``resume`` without a checkpoint (or without ``config.json``).
        RunFolderExistsError: a new run in a folder that already holds one.
        RunFolderError: the folder is in use; resuming with a config that changes the
            training itself (the message lists the differing keys); an unreadable
            ``config.json``.
    """
    return RunFolder(run_dir, config, resume)
