"""The executors that run each of the scheduler's jobs
(:func:`~drillbook.experiments.run.scheduler.run_table`) as a worker elsewhere: the worker
entry point (:mod:`~drillbook.experiments.run.worker`) given its
:class:`~drillbook.experiments.run.worker.JobSpec`, started by a launcher
(:class:`~drillbook.experiments.run.executors.Executor`).

* :class:`ProcessLauncher` (``--launcher local``): a process on this machine,
  ``python -m drillbook.experiments.run.worker SPEC``, its console lines read from its
  stderr as they come, stopped with SIGTERM (then SIGKILL) at the deadline.
* :class:`SubmititLauncher` (``--launcher submitit``): a job submitted through
  `submitit <https://github.com/facebookincubator/submitit>`_ to an existing engine for many
  machines, a Slurm cluster's queue, or submitit's local executor on this machine
  (``cluster="local"``, what the tests use); its console lines read from the job's log as
  they come, cancelled at the deadline. Each job asks for the time it is given (its
  training budget and reserve) unless ``timeout_min`` is set; a job that reaches that
  limit is requeued and resumes
  (:meth:`~drillbook.experiments.run.worker.Worker.checkpoint`).

Either way the scheduler keeps the deadline, writes the result file of a job that ended
without one and prints the summary; a launcher only starts, watches and stops.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...errors import ConfigError, MissingPackageError
from ...train.ways import Way
from ...validation import check_choice
from .executors import Handle
from .worker import JobSpec, Worker

__all__ = ["CLUSTERS", "LAUNCHERS", "Handle", "ProcessLauncher", "SubmititLauncher",
           "executor_parameters"]

#: the launchers ``drillbook reproduce --launcher`` knows
LAUNCHERS = ("local", "submitit")
#: the engines :class:`SubmititLauncher` submits to (``--cluster``)
CLUSTERS = ("slurm", "local")
# ------------------------------------------------------------------ processes here
class _ProcessHandle(Handle):
    def __init__(self, process: subprocess.Popen) -> None:
        super().__init__()
        self.process = process

    def poll(self) -> int | None:
        return self.process.poll()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class ProcessLauncher:
    """Each job a process of the worker entry point on this machine, in a session of its
    own (a deadline stops it and whatever it started), with ``threads`` CPU threads
    (default: the job's own, :attr:`~drillbook.experiments.run.worker.JobSpec.threads`);
    ``way``: processes, or processes under an MPS daemon the caller started
    (:class:`~drillbook.train.ways.Way`), whose clients' environment (its pipe folder)
    ``env`` adds to this process's."""

    needs_time_limit = False

    def __init__(self, threads: int | None = None, way: Way = Way.PROCESS,
                 env: Mapping[str, str] | None = None) -> None:
        self.threads, self.way, self.env = threads, way, dict(env or {})

    def start(self, spec: JobSpec, relay: Callable[[str], None], *,
              seconds: float = math.inf) -> Handle:
        threads = str(self.threads or spec.threads or 1)
        env = {**os.environ, **self.env, "OMP_NUM_THREADS": threads,
               "MKL_NUM_THREADS": threads}
        process = subprocess.Popen(
            [sys.executable, "-m", "drillbook.experiments.run.worker", spec.to_json()],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env=env, start_new_session=True)
        handle = _ProcessHandle(process)

        def read() -> None:
            for line in process.stderr:
                line = line.rstrip("\n")
                handle.keep(line)
                relay(line)

        threading.Thread(target=read, daemon=True).start()
        return handle


# ------------------------------------------------------------------ submitit
class _SubmititHandle(Handle):
    def __init__(self, job: Any) -> None:
        super().__init__()
        self.job = job

    def poll(self) -> int | None:
        if not self.job.done():
            return None
        try:
            error = self.job.exception()
        except Exception as err:  # no result at all: the job was killed
            error = err
        if error is not None:
            self.keep(" ".join(str(error).split())[-300:])
            return 1
        return 0

    def stop(self) -> None:
        # submitit's local executor keeps the job's controller process, which passes
        # SIGTERM on to the worker; a queue's job gets it from scancel
        controller = getattr(self.job, "_process", None)
        if controller is not None:
            if controller.poll() is None:
                controller.send_signal(signal.SIGTERM)
        else:
            subprocess.call(["scancel", "--signal=TERM", str(self.job.job_id)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill(self) -> None:
        self.job.cancel(check=False)


def _follow(path: Path, handle: _SubmititHandle, relay: Callable[[str], None]) -> None:
    """Pass the lines a job writes to ``path`` on, as they come, until the job ends (the
    lines of submitit's own logger are kept, not relayed)."""
    offset, rest = 0, ""
    while True:
        ended = handle.job.done()
        if path.exists():
            with path.open(encoding="utf-8", errors="replace") as f:
                f.seek(offset)
                text = f.read()
                offset = f.tell()
            *lines, rest = (rest + text).split("\n")
            for line in lines:
                handle.keep(line)
                if not line.startswith("submitit "):
                    relay(line)
        if ended:
            return
        time.sleep(0.2)


def executor_parameters(pairs: list[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` pairs (``--executor``) as submitit's executor parameters, each value
    read as JSON where it is (``timeout_min=600``, ``gpus_per_node=1``) and as text
    otherwise (``slurm_partition=gpu``).

    Raises:
        ConfigError: a pair without ``=``.
    """
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise ConfigError(f"--executor {pair!r} is not KEY=VALUE; e.g. --executor "
                              f"timeout_min=600 slurm_partition=gpu gpus_per_node=1")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what making ``path``
    would create first), or None when ``path`` exists."""
    missing = None
    for folder in [path, *path.parents]:
        if folder.exists():
            return missing
        missing = folder
    return missing


class SubmititLauncher:
    """Each job submitted through submitit (see the module notes).

    Args:
        folder: where submitit keeps each job's pickles and logs
            (``<folder>/<job id>_0_log.err``, ...).
        cluster: ``slurm`` or ``local`` (processes on this machine, the tests' choice);
            None: what submitit detects (Slurm where ``sbatch`` exists, else local).
        parameters: the executor's parameters (:func:`executor_parameters`):
            ``timeout_min``, ``gpus_per_node``, ``cpus_per_task``, ``mem_gb``,
            ``slurm_partition``, ...

    Raises:
        MissingPackageError: submitit is not installed.
        ConfigError: a parameter submitit refuses, or an unknown cluster.
    """

    way = Way.PROCESS

    def __init__(self, folder: str | Path, cluster: str | None = None,
                 parameters: Mapping[str, Any] | None = None) -> None:
        check_choice(cluster, [None, *CLUSTERS], "cluster")
        try:
            import submitit
        except ImportError:
            raise MissingPackageError("--launcher submitit needs submitit, which is not "
                                      "installed: pip install 'drillbook[cluster]'") from None
        self.parameters = dict(parameters or {})
        self.needs_time_limit = "timeout_min" not in self.parameters
        made = _first_missing(Path(folder))  # what the executor makes, and a refusal removes
        try:
            self.executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
            self.executor.update_parameters(**self.parameters)
        except (AssertionError, NameError, ValueError, TypeError, RuntimeError) as err:
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
            raise ConfigError(f"submitit refuses {f'--cluster {cluster} ' if cluster else ''}"
                              f"--executor "
                              f"{' '.join(f'{k}={v}' for k, v in self.parameters.items())}: "
                              f"{' '.join(str(err).split())}") from None

    def start(self, spec: JobSpec, relay: Callable[[str], None], *,
              seconds: float = math.inf) -> Handle:
        if self.needs_time_limit:
            if not math.isfinite(seconds):
                raise ConfigError("a job submitted through submitit needs a time limit: "
                                  "give --budget-minutes or --deadline-minutes, or "
                                  "--executor timeout_min=MINUTES")
            # a minute more than it is given: the scheduler, not the queue, stops it
            self.executor.update_parameters(timeout_min=math.ceil(seconds / 60) + 1)
        self.executor.update_parameters(name=f"{spec.table}-{spec.row}-{spec.seed}")
        job = self.executor.submit(Worker(), spec)
        handle = _SubmititHandle(job)
        threading.Thread(target=_follow, args=(Path(job.paths.stderr), handle, relay),
                         daemon=True).start()
        return handle
