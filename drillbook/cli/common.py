"""What the command modules share: exit statuses, the error a command raises, the argument
types and groups several commands take, and how a command finds its config or run."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

from ..errors import DrillbookError
from ..validation import POSITIVE_INT, POSITIVE_NUMBER, argument_type

__all__ = ["DEBUG_ENV", "EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED", "EXIT_USER_ERROR",
           "CommandError", "RegistryNames", "add_config_source", "add_overrides",
           "add_run_limits", "add_run_reader", "emit", "language_model_run", "list_in_help",
           "positive_float", "positive_int", "print_json", "resolve_config", "run_config"]

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
    p.add_argument("--which", choices=["best", "last"], default="best",
                   help="best.pt (default) or last.pt")
    p.add_argument("--max-tokens", type=positive_int, help="stop after about N tokens")
    p.add_argument("--device")
    p.add_argument("--json", action="store_true", help="machine-readable output")


# ------------------------------------------------------------------ configs and runs
def resolve_config(args: argparse.Namespace):
    """The config ``add_config_source`` asked for (a named one or a file), with ``--set``
    overrides applied."""
    from ..configs import apply_overrides, get_config, load_config

    base = load_config(args.config_file) if args.config_file else get_config(args.name)
    return apply_overrides(base, args.set or [])


def run_config(run_dir: Path):
    """The config a run folder was trained with (its ``task`` says which kind of run)."""
    from ..train.runs import read_run_config

    return read_run_config(run_dir)


def language_model_run(run_dir: Path, command: str) -> None:
    """A CommandError if ``run_dir`` holds a run of another task (``command`` reads
    language-model runs)."""
    from ..configs import LANGUAGE_MODEL

    task = run_config(run_dir).task
    if task != LANGUAGE_MODEL:
        raise CommandError(f"{command} works on language-model runs; {run_dir} is a {task} "
                           f"run (use `drillbook eval` or `drillbook translate`)")
