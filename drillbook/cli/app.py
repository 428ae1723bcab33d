"""The ``drillbook`` command's parser and dispatch: :func:`build_parser` and :func:`main`
(the exit statuses are :mod:`drillbook.cli`'s)."""

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
)

__all__ = ["GROUPS", "build_parser", "main"]

#: the command groups, in the order ``drillbook --help`` lists their commands
GROUPS = (configs, training, tables, bench, data, synthetic)


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``drillbook`` command, with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="drillbook",
        description="Output layers for neural language generation (`drillbook heads` lists "
                    "them) and the tools of the drillbook textbook.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"drillbook {__version__}")
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
