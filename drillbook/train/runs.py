"""The run-folder rules both trainers (language models, translation) follow.

A run folder holds ``config.json``, ``log.jsonl``, ``last.pt`` and ``best.pt``. A new run
never overwrites an existing one, and a resumed run must use the same config, up to what
may change without altering the steps already taken (the number of epochs and the
checkpoint and log cadence; see :meth:`SectionedConfig.resume_key`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..configs.schema import SectionedConfig
from ..errors import MissingFileError, RunFolderError, RunFolderExistsError

__all__ = ["BEST", "CONFIG", "LAST", "LOG", "open_run_folder"]

LAST, BEST, CONFIG, LOG = "last.pt", "best.pt", "config.json", "log.jsonl"


def open_run_folder(run_dir: Path, config: SectionedConfig, resume: bool) -> Path | None:
    """Check the folder for a new or resumed run and write its ``config.json``.

    Returns:
        the checkpoint to resume from (``run_dir/last.pt``), or None for a new run (whose
        old ``log.jsonl``, if any, is removed).

    Raises:
        FileNotFoundError: ``resume`` without a checkpoint.
        FileExistsError: a new run in a folder that already holds one.
        ValueError: resuming with a config that changes the training itself.
    """
    last = run_dir / LAST
    if resume:
        if not last.exists():
            raise MissingFileError(f"cannot resume: no checkpoint {last}; start the run "
                                    f"without --resume")
        saved = type(config).from_dict(json.loads((run_dir / CONFIG).read_text()))
        if saved.resume_key() != config.resume_key():
            raise RunFolderError(f"{run_dir} was trained with a different config (hash "
                             f"{saved.resume_key()} vs {config.resume_key()}); resume with "
                             f"the same config and overrides (only train.epochs and the "
                             f"checkpoint cadence may change), or use a new --out folder")
    elif last.exists():
        raise RunFolderExistsError(f"{run_dir} already holds a run ({LAST}); pass --resume to "
                              f"continue it or choose another --out folder")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG).write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    if not resume:
        (run_dir / LOG).unlink(missing_ok=True)
    return last if resume else None
