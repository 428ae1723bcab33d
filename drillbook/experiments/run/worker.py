"""A worker: one job of a table (a row, with one seed) trained in this process from a job
spec (:class:`JobSpec`), its result file written whatever happens.

The same entry point serves every executor that runs a job elsewhere
(:mod:`~drillbook.experiments.run.launchers`): the scheduler's processes on this machine
start it as a module,

    python -m drillbook.experiments.run.worker '{"table": "tutorial", "row": "tied", ...}'

(the spec as JSON text, or the path of a ``.json`` file holding it), and ``--launcher
submitit`` submits :class:`Worker` itself to a cluster's queue (Slurm) or to submitit's
local executor. A row that fails or runs out of memory gets a result file that says so
(:func:`~drillbook.experiments.run.reproduce.reproduce` with ``keep_going``); a job
that reaches its time limit in the queue is requeued by submitit and resumes from its run
folder's last checkpoint (:meth:`Worker.checkpoint`; checked with submitit's local
executor, whose limit is signalled the same way). The executor of this process
(:class:`~drillbook.experiments.run.executors.ThisProcess`) calls :func:`run_job` itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ConfigError, DrillbookError, TrainingInterrupted
from .timing import Timing, run_timed

__all__ = ["JobSpec", "Worker", "main", "process_started", "run_job"]

#: the worker's exit statuses: a bad spec (one line on stderr), a job asked to stop
EXIT_BAD_SPEC, EXIT_INTERRUPTED = 2, 130


def process_started() -> float:
    """The :func:`time.monotonic` instant this process started (Linux: from
    ``/proc/self/stat``; elsewhere: now, i.e. when this is called)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        age = 0.0
    return time.monotonic() - max(age, 0.0)


@dataclass(frozen=True)
class JobSpec:
    """What a worker runs: one row of a table with one seed, on a device, within a budget.

    Attributes:
        table, row, seed: the job (:class:`~drillbook.experiments.run.jobs.Job`).
        device: where it trains (``cpu``, ``cuda``, ``cuda:1``; None: the default device
            where the worker runs).
        out, runs: the results folder and the run folders' root.
        budget_minutes: wall-clock minutes of training (None: to the end).
        overrides: ``key=value`` applied after the row's own.
        max_eval_tokens: a cap on the test evaluation (None: all of it).
        label: what its console lines start with (``row 2/9 drill-4 [cuda:0]``).
        threads: the CPU threads torch may use (None: torch's default).
        way, rows: how it runs, for its result file's ``execution``
            (:func:`~drillbook.experiments.run.documents.execution`): a process of its own
            (``process``, or ``process-mps`` under an MPS daemon) beside ``rows - 1`` others
            on its device.
        timing: train the job as a measurement of its speed instead
            (:mod:`~drillbook.experiments.run.timing`): warm-up steps, a start shared with
            the other rows, timed steps and a timing file; no result file.
    """

    table: str
    row: str
    seed: int
    device: str | None
    out: str
    runs: str
    budget_minutes: float | None = None
    overrides: tuple[str, ...] = ()
    max_eval_tokens: int | None = None
    label: str | None = None
    threads: int | None = None
    way: str = "process"
    rows: int = 1
    timing: Timing | None = None

    def to_json(self) -> str:
        """The spec as one line of JSON (:meth:`from_json` reads it back)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        """A spec from :meth:`to_json`'s JSON.

        Raises:
            ConfigError: not a JSON object, an unknown or a missing field.
        """
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"a job spec must be JSON ({err.msg} at column {err.colno}); "
                              f"write it with JobSpec.to_json") from None
        if not isinstance(fields, dict):
            raise ConfigError(f"a job spec must be a JSON object, got "
                              f"{type(fields).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING}
        if set(fields) - known or required - set(fields):
            raise ConfigError(f"a job spec has the fields {sorted(known)} (required: "
                              f"{sorted(required)}); this one has {sorted(fields)}")
        timing = fields.get("timing")
        if timing is not None:
            try:
                timing = Timing(**timing)
            except TypeError as err:
                raise ConfigError(f"a job spec's timing must be Timing's fields "
                                  f"({err})") from None
        return cls(**{**fields, "overrides": tuple(fields.get("overrides") or ()),
                      "timing": timing})


def run_job(spec: JobSpec, budget_since: float | None = None) -> str:
    """Train the job in this process and write its result file (a failure's too); returns
    the file's path (a timed job's: its timing file,
    :func:`~drillbook.experiments.run.timing.run_timed`). Its budget counts from
    ``budget_since`` (a :func:`time.monotonic` instant; default: the process's start,
    :func:`process_started`, so that the scheduler's reserve for its evaluation is not
    spent on starting torch)."""
    if spec.timing is not None:  # a measurement: no result file
        return run_timed(spec)
    import torch

    from .documents import execution
    from .reproduce import reproduce

    if spec.threads:
        torch.set_num_threads(spec.threads)
    [path] = reproduce(spec.table, rows=[spec.row], seed=spec.seed, device=spec.device,
                       budget_minutes=spec.budget_minutes, out=spec.out, runs=spec.runs,
                       overrides=list(spec.overrides), max_eval_tokens=spec.max_eval_tokens,
                       keep_going=True, label=spec.label,
                       execution=execution(spec.way, spec.rows),
                       budget_since=(process_started() if budget_since is None
                                     else budget_since))
    return str(path)


class Worker:
    """The callable a cluster's queue runs (``--launcher submitit``): ``Worker()(spec)`` is
    :func:`run_job`, and :meth:`checkpoint` is what submitit calls when the job reaches
    its time limit (the signal submitit asks the queue for shortly before it): the same
    job again, which resumes from the row's last checkpoint."""

    def __call__(self, spec: JobSpec) -> str:
        return run_job(spec)

    def checkpoint(self, spec: JobSpec) -> Any:
        """The job again (submitit's ``DelayedSubmission``), to be requeued."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(Worker(), spec)


def _read_spec(argument: str) -> JobSpec:
    text = argument
    if not argument.lstrip().startswith("{"):
        path = Path(argument)
        if not path.is_file():
            raise ConfigError(f"job spec {argument!r} is neither JSON text nor a file; pass "
                              f"JobSpec.to_json() or the path of a file holding it")
        text = path.read_text(encoding="utf-8")
    return JobSpec.from_json(text)


def main(argv: list[str] | None = None) -> int:
    """``python -m drillbook.experiments.run.worker SPEC``: run one job. Exit status 0 when
    its result file was written (a row that failed included), 2 for a bad spec (one line on
    stderr; ``DRILLBOOK_DEBUG=1`` raises instead), 130 when asked to stop first."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m drillbook.experiments.run.worker SPEC (a job spec as JSON, "
              "or a .json file holding it)", file=sys.stderr)
        return EXIT_BAD_SPEC
    debug = os.environ.get("DRILLBOOK_DEBUG", "") not in ("", "0")
    try:
        run_job(_read_spec(argv[0]))
    except (TrainingInterrupted, KeyboardInterrupt) as err:
        if debug:
            raise
        print(f"drillbook worker: interrupted: {err}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except DrillbookError as err:
        if debug:
            raise
        print(f"drillbook worker: error: {' '.join(str(err).split())}", file=sys.stderr,
              flush=True)
        return EXIT_BAD_SPEC
    return 0


if __name__ == "__main__":
    sys.exit(main())
