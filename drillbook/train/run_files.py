"""The files of a run folder and how to read them: ``config.json`` (:func:`read_run_config`),
``log.jsonl`` (:func:`read_log`, one record per completed epoch), ``last.pt`` (the resumable
checkpoint) and ``best.pt`` (the best weights, :func:`checkpoint_path`); whether a run has
a checkpoint to resume from, who trains in it now, and the command that resumes it. The
rules a trainer follows when it writes them are :mod:`drillbook.train.run_folder`'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ..configs import SectionedConfig, config_from_dict
from ..errors import ConfigError, MissingFileError, RunFolderError
from .lock import RunLock

__all__ = ["BEST", "CONFIG", "FINETUNE", "LAST", "LOG", "LoadedRun", "checkpoint_path",
           "has_checkpoint", "in_use", "log_lines", "read_log", "read_run_config",
           "read_run_dict", "resume_command"]

LAST, BEST, CONFIG, LOG = "last.pt", "best.pt", "config.json", "log.jsonl"
#: the folder inside a run that its fine-tuning stage writes by default
FINETUNE = "finetune"


# ------------------------------------------------------------- config and log
_CONFIG_FIX = ("restore the file the run was trained with (a language model's best.pt keeps "
               "a copy under 'config'), or train into a new --out folder")


def read_run_dict(run_dir: str | Path) -> dict[str, Any]:
    """The raw ``run_dir/config.json`` (a JSON object), for a caller that must look at it
    before it knows which config class it holds (a language model or a translation run).

    Raises:
        MissingFileError: no such file.
        RunFolderError: a file that is not a JSON object (the message names the file).
    """
    run_dir = Path(run_dir)
    path = run_dir / CONFIG
    if not path.is_file():
        raise MissingFileError(f"{run_dir} is not a drillbook run folder (no {CONFIG}); "
                               f"train one with `drillbook train CONFIG --out {run_dir}`")
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunFolderError(f"{path} is not a readable run config ({err}); "
                             f"{_CONFIG_FIX}") from err
    if not isinstance(data, dict):
        raise RunFolderError(f"{path} holds a JSON {type(data).__name__}, not a run config; "
                             f"{_CONFIG_FIX}")
    return data


def read_run_config(run_dir: str | Path, cls: type[SectionedConfig] | None = None):
    """The validated config in ``run_dir/config.json`` (see :func:`read_run_dict`), read
    by ``cls``, or (``None``) by the class of the task it names
    (:func:`drillbook.configs.config_from_dict`): ask the result its ``task``.

    Raises:
        MissingFileError: no such file.
        RunFolderError: a file that is not a valid ``cls`` config (the message names the
            file and what is wrong with it).
    """
    data = read_run_dict(run_dir)
    held = data.get("task")
    if cls is not None and held not in (None, cls.task):  # the other task's run
        raise RunFolderError(f"{run_dir} holds a {held} run, and a {cls.task} config cannot "
                             f"continue it; resume it with its own config (its config.json)"
                             f", or train the {cls.task} config into another --out folder")
    _check_head_registered(run_dir, data)
    try:
        return config_from_dict(data) if cls is None else cls.from_dict(data)
    except ConfigError as err:
        raise RunFolderError(f"{Path(run_dir) / CONFIG} does not hold a valid config "
                             f"({err}); {_CONFIG_FIX}") from err


def _check_head_registered(run_dir: str | Path, data: dict[str, Any]) -> None:
    """Refuse a run whose head is not registered in this process (a head registered in
    Python where it was trained) as such, not as a broken config file.

    Raises:
        RunFolderError: naming the head and how to register it.
    """
    from ..heads import HEADS  # torch is loaded here anyway

    head = data.get("head")
    kind = head.get("kind") if isinstance(head, dict) else None
    if not isinstance(kind, str) or kind in HEADS:
        return
    raise RunFolderError(f"{run_dir} was trained with the head {kind!r}, which is not "
                         f"registered in this process (the package's heads: "
                         f"{', '.join(HEADS)}); register it before reading the run: import "
                         f"the module that defines it and call "
                         f"drillbook.heads.register_head on its class, then read the run "
                         f"from that Python process (drillbook.train.load_run)")


def log_lines(path: Path) -> list[tuple[int, str, Any]]:
    """``(line number, line, parsed record or None)`` for each non-blank line."""
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append((i, line, json.loads(line)))
            except json.JSONDecodeError:
                out.append((i, line, None))
    return out


def read_log(run_dir: str | Path) -> list[dict[str, Any]]:
    """The per-epoch records of a run (``log.jsonl``), oldest first.

    Raises:
        MissingFileError: no log.
        RunFolderError: a line that is not a JSON record (named by number).
    """
    path = Path(run_dir) / LOG
    if not path.is_file():
        raise MissingFileError(f"no training log at {path}: the run has not finished an "
                             f"epoch yet (or {Path(run_dir)} is not a run folder)")
    records = []
    for i, _, record in log_lines(path):
        if not isinstance(record, dict):
            raise RunFolderError(f"{path} line {i} is not a JSON record; delete that line "
                                 f"(resuming the run rewrites the log from its checkpoint)")
        records.append(record)
    return records


class LoadedRun(NamedTuple):
    """A trained run read back from its folder (:func:`drillbook.train.load_run`).

    Attributes:
        config: the config it was trained with.
        model: the model, its weights loaded, in eval mode.
        data: what the model reads text with: the language model's
            :class:`~drillbook.data.Corpus`, or a translation run's two vocabularies
            (:class:`~drillbook.train.translation.TranslationVocabs`).
    """

    config: SectionedConfig
    model: torch.nn.Module
    data: Any


# ------------------------------------------------------------------ helpers
def checkpoint_path(run_dir: Path, which: str) -> Path:
    """``run_dir/best.pt`` or ``run_dir/last.pt``, which must exist.

    Raises:
        ValueError: ``which`` is neither ``"best"`` nor ``"last"``.
        MissingFileError: the file does not exist.
    """
    if which not in ("best", "last"):
        raise ValueError(f"which must be 'best' or 'last', got {which!r}")
    path = Path(run_dir) / (BEST if which == "best" else LAST)
    if not path.exists():
        other = "last" if which == "best" else "best"
        raise MissingFileError(f"{run_dir} has no {path.name} yet (no epoch finished); "
                               f"train it further ({resume_command(run_dir)}), or read its "
                               f"{other}.pt instead (--which {other}, if it has one)")
    return path


def in_use(run_dir: str | Path) -> str | None:
    """Who is training in ``run_dir`` now (``"pid 1234"``, from its lock), or None: what a
    command that starts from a run's checkpoints checks first (:meth:`RunLock.holder`)."""
    return RunLock(Path(run_dir)).holder()


def resume_command(run_dir: str | Path) -> str:
    """The command that continues the run in ``run_dir`` from its ``last.pt``, in words."""
    return f"`drillbook train --config {Path(run_dir) / CONFIG} --out {run_dir} --resume`"


def has_checkpoint(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a ``last.pt`` to resume from: the ``resume=`` argument
    that lets the same call start a run or continue it (``LanguageModelTrainer(config, folder,
    resume=has_checkpoint(folder))``)."""
    return (Path(run_dir) / LAST).exists()
