"""The ``drillbook`` command.

``drillbook --help`` lists the commands and ``drillbook COMMAND --help`` describes each
(the book's command-line reference shows every one of these texts, generated from
:func:`build_parser`). ``--set KEY=VALUE`` may be given several times; the values add up
and a later value of the same key wins. Each group of commands is a module of this package
with an ``add_commands(subparsers)`` function; lists in help texts (tables, benchmark heads,
corpora) are read from the package's registries when the help is printed.

Exit status: 0 done; 1 ``data verify`` found a missing or altered file; 2 bad input or
environment, reported in one line ``drillbook: error: ...`` (set ``DRILLBOOK_DEBUG=1`` for
the traceback instead), or a usage error; 130 interrupted (Ctrl-C or SIGTERM: training
stops after its current step and saves it, a second Ctrl-C stops at once); 141 the reader of the
output went away (``drillbook configs --json | head -1``): output stops quietly with the
status a shell gives a program that a closed pipe stopped (128 + SIGPIPE). Only the
package's own errors (:mod:`drillbook.errors`) are reported in one line: any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys

from ..errors import DrillbookError, TrainingInterrupted
from . import bench, configs, data, synthetic, tables, training
from .common import (
    DEBUG_ENV,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USER_ERROR,
    CommandError,
)

__all__ = ["DEBUG_ENV", "EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED", "EXIT_USER_ERROR",
           "CommandError", "build_parser", "main"]

#: the command groups, in the order ``drillbook --help`` lists their commands
GROUPS = (configs, training, tables, bench, data, synthetic)


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``drillbook`` command, with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="drillbook",
        description="Output layers for neural language generation (`drillbook heads` lists "
                    "them) and the tools of the drillbook textbook.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in GROUPS:
        group.add_commands(sub)
    return parser


def _one_line(err: BaseException) -> str:
    """The error's message on one line (the class name if it has none)."""
    return " ".join(str(err).split()) or type(err).__name__


def _run(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse, dispatch, and turn the package's own errors into one line on stderr."""
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    if hasattr(signal, "SIGXFSZ"):  # over a file-size limit: an OSError, not a kill
        with contextlib.suppress(ValueError):  # (only the main thread may set handlers)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        if getattr(args, "device", None) is not None:
            from ..runtime import resolve_device

            args.device = str(resolve_device(args.device))  # checked before any work
        return args.func(args)
    except TrainingInterrupted as err:  # asked to stop; the step it reached is saved
        if debug:
            raise
        parser.exit(EXIT_INTERRUPTED, f"drillbook: interrupted: {_one_line(err)}\n")
    except DrillbookError as err:  # bad input or environment; anything else is a bug
        if debug:
            raise
        parser.exit(EXIT_USER_ERROR, f"drillbook: error: {_one_line(err)}\n")
    except KeyboardInterrupt:
        if debug:
            raise
        # what Ctrl-C leaves: the checkpoints written so far, never a half one
        hint = getattr(args, "interrupted", "")
        parser.exit(EXIT_INTERRUPTED,
                    f"drillbook: interrupted{hint() if callable(hint) else hint}\n")


def main(argv: list[str] | None = None) -> int:
    """Run ``drillbook ARGS``; returns the exit status (a user error exits with status 2
    through ``SystemExit``). See the module notes for every status."""
    parser = build_parser()
    try:
        try:
            return _run(parser, argv)
        finally:
            sys.stdout.flush()  # a reader that closed the pipe shows up here, not at exit
    except BrokenPipeError:
        # the Python documentation's recipe: point stdout at devnull so that the flush at
        # interpreter exit has nowhere to fail, and stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def __getattr__(name: str):
    if name == "param_report":  # moved to drillbook.models; the old import keeps working
        from ..models import param_report

        return param_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
