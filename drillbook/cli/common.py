"""What the command modules share: exit statuses, the error a command raises, the argument
types and groups several commands take, and how a command finds its config or run."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import DrillbookError
from ..validation import POSITIVE_INT, POSITIVE_NUMBER, SEED, argument_type

if TYPE_CHECKING:
    from ..train.tasks import Task

__all__ = ["DEBUG_ENV", "EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED", "EXIT_USER_ERROR",
           "CommandError", "OutputError", "RegistryNames", "add_config_source", "add_overrides",
           "add_run_limits", "add_run_reader", "check_output", "emit", "list_in_help",
           "positive_float", "positive_int", "print_json", "refuse_unless", "resolve_config",
           "run_config", "run_task", "seed", "writing"]

#: Set to anything but ``""`` or ``"0"`` to see a user error's traceback.
DEBUG_ENV = "DRILLBOOK_DEBUG"
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE


class CommandError(DrillbookError):
    """A command-line combination that cannot work: ``drillbook: error: ...``, exit 2."""


#: argparse types with the checks of :mod:`drillbook.validation` (``inf`` and ``nan`` are
#: not positive numbers, ``1.5`` is not an integer)
positive_int = argument_type(POSITIVE_INT, int)
positive_float = argument_type(POSITIVE_NUMBER, float)
#: a seed torch, NumPy and Python all take
seed = argument_type(SEED, int)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2))


def emit(args: argparse.Namespace, result: dict, text: str) -> int:
    """Print ``result`` as JSON with ``--json``, else the human-readable ``text``."""
    if args.json:
        print_json(result)
    else:
        print(text)
    return 0


# ------------------------------------------------------------------ registries in help
class RegistryNames:
    """The keys of a registry (``drillbook.experiments.TABLES``, ...), read only when a
    help text is printed, so that building the parser imports nothing heavy.

    An argument's help names it as ``%(names)s`` (see :func:`list_in_help`); argparse
    fills it in with ``str()`` of this object.
    """

    def __init__(self, module: str, attribute: str) -> None:
        self.module, self.attribute = module, attribute

    def __str__(self) -> str:
        return ", ".join(getattr(importlib.import_module(self.module), self.attribute))


def list_in_help(action: argparse.Action, module: str, attribute: str) -> argparse.Action:
    """Let ``action``'s help say ``%(names)s`` for the keys of ``module.attribute``."""
    action.names = RegistryNames(module, attribute)  # argparse reads help params from vars
    return action


# ------------------------------------------------------------------ argument groups
def add_overrides(p: argparse.ArgumentParser, what: str) -> None:
    """``--set KEY=VALUE ...``, repeatable: the values add up, a later key wins."""
    list_in_help(p.add_argument("--set", nargs="+", action="extend", metavar="KEY=VALUE",
                                help=f"{what}; may be repeated (a later value of a key "
                                     f"wins); head.kind is one of %(names)s"),
                 "drillbook.heads", "HEADS")


def add_config_source(p: argparse.ArgumentParser) -> None:
    """A named config (``CONFIG``) or a config file (``--config FILE``), one of the two."""
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("name", nargs="?", metavar="CONFIG",
                        help="a named config (`drillbook configs` lists them)")
    source.add_argument("--config", dest="config_file", metavar="FILE",
                        help="a config file instead: JSON, YAML or TOML, e.g. what "
                             "`drillbook configs --show NAME` prints")


def add_run_limits(p: argparse.ArgumentParser) -> None:
    p.add_argument("--resume", action="store_true", help="continue from the run's last.pt")
    p.add_argument("--max-epochs", type=positive_int, help="stop after N completed epochs")
    p.add_argument("--max-minutes", type=positive_float,
                   help="wall-clock budget; the run checkpoints and stops (resume later)")
    p.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: CUDA if available)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar and no line per epoch (default: a bar on a "
                        "terminal, one line per epoch on stderr)")


def add_run_reader(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, help="a folder written by `drillbook train`")
    p.add_argument("--split", choices=["valid", "test", "train"], default="test")
    add_which(p)
    p.add_argument("--max-tokens", type=positive_int,
                   help="stop after about N tokens (a translation run: N sentences)")
    p.add_argument("--device")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_which(p: argparse.ArgumentParser) -> None:
    """``--which best|last``: the checkpoint a command reads."""
    p.add_argument("--which", choices=["best", "last"], default="best",
                   help="best.pt (default) or last.pt")


# ------------------------------------------------------------------ configs and runs
def resolve_config(args: argparse.Namespace):
    """The config ``add_config_source`` asked for (a named one or a file), with ``--set``
    overrides applied."""
    from ..configs import apply_overrides, get_config, load_config

    base = load_config(args.config_file) if args.config_file else get_config(args.name)
    return apply_overrides(base, args.set or [])


def run_config(run_dir: Path):
    """The config a run folder was trained with (its ``task`` says which kind of run)."""
    from ..train.run_files import read_run_config

    return read_run_config(run_dir)


def run_task(run_dir: Path) -> Task:
    """The :class:`~drillbook.train.tasks.Task` of the run in ``run_dir`` (its
    ``config.json`` says which)."""
    from ..train.tasks import task_of

    return task_of(run_config(run_dir))


def refuse_unless(task: Task, capable: Callable[[Task], bool], what: str, whose: str,
                  instead: str = "") -> None:
    """A CommandError unless ``capable(task)``: ``what`` (an option or a command, e.g.
    ``"--beam"``) applies to the tasks that are capable, named in the message, and not to
    ``whose`` (``"RUN is a translation run"``); ``instead`` ends it with what to do."""
    from ..train.tasks import TASKS

    if capable(task):
        return
    takers = " and ".join(t.name for t in TASKS.values() if capable(t)) or "no"
    raise CommandError(f"{what} works on {takers} runs; {whose} is a {task.name} run"
                       f"{'; ' + instead if instead else ''}")


# ------------------------------------------------------------------ what a command writes
def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (the current folder at worst)."""
    path = path.absolute()
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def check_output(path: str | Path, option: str, *, folder: bool) -> Path:
    """``path`` if a command can write there, else a one-line CommandError naming
    ``option`` (``"--out"``), before any work is done: a folder (``folder=True``) that is
    a file, a file that is a folder, a path under a file, or one in a folder the process
    cannot write to (a temporary file is made there and removed). A write can still fail
    later (a full disk): each writer turns that into its own one-line error too."""
    path = Path(path)
    kind = "folder" if folder else "file"
    if path.is_dir() and not folder:
        raise CommandError(f"{option} {path} is a folder, not a file; name a file (e.g. "
                           f"{path / 'out.md' if option == '--out' else path / 'x'}) or "
                           f"another path")
    if path.exists() and folder and not path.is_dir():
        raise CommandError(f"{option} {path} is a file, not a folder; name a new folder for "
                           f"it")
    base = _nearest_existing(path if folder else path.parent)
    if not base.is_dir():
        raise CommandError(f"{option} {path}: {base} is a file, so no {kind} can be made "
                           f"under it; name a path in a folder")
    try:  # a real write: permissions say nothing of a read-only disk, for root or anyone
        with tempfile.TemporaryFile(dir=base):
            pass
    except OSError as err:
        raise CommandError(f"{option} {path}: {base} cannot be written "
                           f"({err.strerror or err}); make it writable or choose another "
                           f"{option}") from None
    return path


class OutputError(DrillbookError, OSError):
    """Standard output could not be written (a full disk behind ``> file``): reported in
    one line, exit status 2."""


@contextlib.contextmanager
def writing(path: str | Path, option: str) -> Iterator[None]:
    """Turn a failed write of ``path`` (what ``option`` names) inside the block into a
    one-line CommandError; the writers used inside it (:func:`drillbook.atomic.write_atomic`)
    keep the previous file and leave nothing else."""
    try:
        yield
    except OutputError:
        raise
    except OSError as err:
        raise CommandError(f"could not write {option} {path} ({err.strerror or err}); "
                           f"nothing was written there: choose another {option}") from None
