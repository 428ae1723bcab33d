"""The ``drillbook`` command's parser and dispatch: :func:`build_parser` and :func:`main`
(the exit statuses are :mod:`drillbook.cli`'s)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from typing import TextIO

from ..errors import DrillbookError, TrainingInterrupted
from . import bench, configs, data, synthetic, tables, training
from .common import (
    DEBUG_ENV,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USER_ERROR,
    OutputError,
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


class _Output:
    """Standard output or error as the commands see it: a write the stream refuses (a
    full disk behind ``> file``, a file-size limit) is the one-line error
    :class:`OutputError` on standard output, and is dropped on standard error (whose
    reader cannot be told anything, and the work goes on). A closed pipe stays a
    :class:`BrokenPipeError` (:func:`main` stops quietly on it)."""

    def __init__(self, stream: TextIO, name: str, raising: bool) -> None:
        self._stream, self._name, self._raising = stream, name, raising
        #: the first write that failed (argparse's help swallows the error it is given)
        self.failed: OutputError | None = None

    def _guarded(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as err:
            failed = OutputError(f"could not write to {self._name} ({err.strerror or err}); "
                                 f"free space where it goes, or send it elsewhere")
            self.failed = self.failed or failed
            if self._raising:
                raise failed from None
            return None

    def write(self, text: str):
        return self._guarded(self._stream.write, text)

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _guarded_streams():
    """:class:`_Output` around ``sys.stdout`` and ``sys.stderr`` while a command runs."""
    out, err = sys.stdout, sys.stderr
    sys.stdout = _Output(out, "standard output", raising=True)
    sys.stderr = _Output(err, "standard error", raising=False)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def _silence_stdout() -> None:
    """Point standard output at the null device, so that the flush at interpreter exit
    has nowhere to fail (the Python documentation's recipe for a closed pipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


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
        if debug or isinstance(err, OutputError):  # (main reports a failed output)
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
        with _guarded_streams():
            try:
                return _run(parser, argv)
            finally:
                with contextlib.suppress(OutputError):  # a closed pipe or a full disk
                    sys.stdout.flush()                  # shows up here, not at exit
                failed = sys.stdout.failed
                if failed is not None:
                    _silence_stdout()  # what it still holds cannot be written either
                    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
                        raise failed
                    parser.exit(EXIT_USER_ERROR, f"drillbook: error: {failed}\n")
    except BrokenPipeError:
        _silence_stdout()  # and stop quietly
        return EXIT_BROKEN_PIPE
