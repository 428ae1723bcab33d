"""The package's own error types.

Everything drillbook raises because of *the user's input or environment* (a bad config
value, a missing or corrupt file, a run folder in use, a training run that diverged)
derives from :class:`DrillbookError`. The command line reports exactly these in one line
that names the problem and the fix (``DRILLBOOK_DEBUG=1`` shows the traceback); any other
exception is a bug in the package and keeps its traceback.

Each class also derives from the built-in exception a Python caller would expect
(``ValueError``, ``FileNotFoundError``, ...), so ``except ValueError`` keeps working.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DataError",
    "DeviceError",
    "DrillbookError",
    "MissingFileError",
    "MissingPackageError",
    "ResourceError",
    "ResultFileError",
    "RunFolderError",
    "RunFolderExistsError",
    "TrainingDiverged",
    "TrainingInterrupted",
]


class DrillbookError(Exception):
    """Bad input or environment: reported by the CLI in one line, exit status 2."""


class MissingFileError(DrillbookError, FileNotFoundError):
    """A file or folder the input names, or that a command needs, does not exist: a run
    folder, a checkpoint, a corpus file, a results folder."""


class MissingPackageError(DrillbookError, ImportError):
    """An optional package a feature needs is not installed; the message gives the
    ``pip install`` command."""


class ConfigError(DrillbookError, ValueError):
    """A config key or value that does not exist, does not fit, or would train garbage."""


class DataError(DrillbookError, ValueError):
    """A corpus or data file that is missing, corrupt or does not match its checksum."""


class CheckpointError(DrillbookError, ValueError):
    """A checkpoint that cannot be read, or is not the kind of checkpoint expected."""


class RunFolderError(DrillbookError, ValueError):
    """A run folder that cannot be used as asked: in use, already holding a run, or
    holding a run trained with another config."""


class RunFolderExistsError(RunFolderError, FileExistsError):
    """A new run aimed at a folder that already holds one (resume it, or choose another)."""


class ResultFileError(DrillbookError, ValueError):
    """A result file (``results/<table>/<row>.json``) that is missing or invalid."""


class DeviceError(DrillbookError, ValueError):
    """A device that does not exist on this machine (``--device cuda`` without CUDA)."""


class ResourceError(DrillbookError, MemoryError):
    """A model or a step that does not fit the device's memory."""


class TrainingInterrupted(DrillbookError, RuntimeError):
    """Training was asked to stop (Ctrl-C, SIGTERM) and saved the step it had reached."""


class TrainingDiverged(DrillbookError, RuntimeError):
    """The training loss became nan, inf or too large to exponentiate; the last good
    checkpoint is left untouched."""
