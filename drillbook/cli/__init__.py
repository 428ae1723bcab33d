"""The ``drillbook`` command.

``drillbook --help`` lists the commands and ``drillbook COMMAND --help`` describes each
(the book's command-line reference shows every one of these texts, generated from
:func:`build_parser`). ``--set KEY=VALUE`` may be given several times; the values add up
and a later value of the same key wins. Each group of commands is a module of this package
with an ``add_commands(subparsers)`` function; lists in help texts (tables, benchmark heads,
corpora) are read from the package's registries when the help is printed.

Exit status: 0 done; 1 ``data verify`` found a missing or altered file; 2 bad input or
environment, reported in one line ``drillbook: error: ...`` (set ``DRILLBOOK_DEBUG=1`` for
the traceback instead), a standard output that cannot be written (a full disk behind
``> file``), or a usage error; 130 interrupted (Ctrl-C or SIGTERM: training
stops after its current step and saves it, a second Ctrl-C stops at once); 141 the reader of the
output went away (``drillbook configs --json | head -1``): output stops quietly with the
status a shell gives a program that a closed pipe stopped (128 + SIGPIPE). Only the
package's own errors (:mod:`drillbook.errors`) are reported in one line: any other
exception is a bug and keeps its traceback. What cannot be written to standard error
(progress lines) is dropped, and the work goes on.

Every path a command writes is checked before the work starts (:func:`.common.check_output`:
a folder where a file goes, a file where a folder goes, a path under a file, a disk that
cannot be written), every option a task or a mode would ignore is refused naming the task
or mode that takes it (:func:`.common.refuse_unless`), and long work says first what it
will cost (:mod:`.estimates`).
"""

from .app import build_parser, main
from .common import (
    DEBUG_ENV,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USER_ERROR,
    CommandError,
)

__all__ = ["DEBUG_ENV", "EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED", "EXIT_USER_ERROR",
           "CommandError", "build_parser", "main"]


def __getattr__(name: str):
    if name == "param_report":  # moved to drillbook.models; the old import keeps working
        from ..models import param_report

        return param_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
