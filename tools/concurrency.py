"""How many rows of a table one device trains at once, and which way: a measurement for a
GPU window, rehearsed on a CPU at tiny sizes.

    python tools/concurrency.py --device cuda --out concurrency.json
    python tools/concurrency.py --device cpu --tiny --out /tmp/concurrency.json

Small rows (``tutorial/ptb-tied``: a 2-layer AWD-LSTM on the real PTB, V = 10,000) are
trained

* one alone, the plain step in one process: the baseline every ratio divides by;
* ``--rows`` (4, 8 and 16) at once, by each way the device has:

  - ``in-process``: the rows as trainers of one process, stepped in turn by
    :func:`drillbook.train.interleaver.train_together`; on CUDA each row's steps captured as
    CUDA graphs and replayed on a stream of its own (``graphs-on-streams``), on a CPU
    eagerly (``interleaved-eager``);
  - ``processes``: one worker process per row, as ``reproduce --parallel N`` runs them;
  - ``processes-mps``: the same under NVIDIA's Multi-Process Service, where
    ``nvidia-cuda-mps-control`` exists: a daemon started as this user, its pipe and log
    folders in a temporary folder (no GPU setting is changed: no compute mode, no reset),
    quit when the measurement ends whatever happens; skipped, saying why, where it
    cannot start;

and then ``--paper-rows`` (4) paper-size rows (``ptb/awd-lstm``) at once, the way that
did best with small rows, against one paper-size row alone. Each way is the executor
``drillbook reproduce`` runs rows with (:class:`~drillbook.experiments.run.interleaved.Interleaved`,
:class:`~drillbook.experiments.run.launchers.ProcessLauncher` and its worker), given
timed jobs (:mod:`drillbook.experiments.run.timing`): each row first takes
``--warmup`` steps (CUDA graphs are captured then), then, rows in processes of their own
once all have warmed up, ``--steps`` timed steps; the
throughput is row-updates per second over the wall time of the timed steps (all rows',
first start to last end). Prints each ratio against one row alone and the peak memory
(CUDA: bytes the allocator handed out, summed over processes, without each process's own
CUDA context; CPU: the largest resident set of the process so far, a rough figure), and
writes a JSON report.

``--tiny`` shrinks both configs (16-wide layers, batches of 8 windows of 10 words) so that
the whole script runs on a CPU in minutes: what it measures there says nothing about a
GPU, it checks that the script runs end to end. Needs the corpora (``DRILLBOOK_DATA``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from drillbook.atomic import write_json  # noqa: E402
from drillbook.configs import get_config  # noqa: E402
from drillbook.errors import TrainingInterrupted  # noqa: E402
from drillbook.experiments.run.interleaved import Interleaved  # noqa: E402
from drillbook.experiments.run.launchers import ProcessLauncher  # noqa: E402
from drillbook.experiments.run.timing import Timing, key_of, read_timed  # noqa: E402
from drillbook.experiments.run.worker import JobSpec  # noqa: E402
from drillbook.experiments.tables import find_row  # noqa: E402
from drillbook.provenance import environment, git_state  # noqa: E402
from drillbook.train.lm import load_lm_data  # noqa: E402
from drillbook.train.ways import Way  # noqa: E402

#: the rows measured, as (table, row): a small row (``tutorial/ptb-tied``) and a
#: paper-size one (``ptb/awd-lstm``), neither with overrides of its own
SMALL, PAPER = ("tutorial", "tied"), ("speed", "ptb-awd-lstm")
SMALL_CONFIG, PAPER_CONFIG = find_row(*SMALL).config, find_row(*PAPER).config
#: what every measured row sets: no checkpoint by time, and (``overrides_of``) an epoch a
#: little longer than the measurement (no validation within it; the trainer counts the
#: epoch's batches when it starts, which a whole epoch of random lengths makes slow)
MEASURE = ["train.epochs=1000", "train.checkpoint_minutes=1000000"]
#: ``--tiny``: both configs at sizes a CPU trains in seconds
TINY = ["model.emsize=16", "model.nhid=16", "train.batch_size=8", "train.bptt=10",
        "train.eval_batch_size=4", "train.max_eval_tokens=200"]
MPS_CONTROL = "nvidia-cuda-mps-control"
#: the ways measured, as the report names them (``best_way``: what ``reproduce --together``
#: defaults to, :func:`drillbook.experiments.run.executors.default_way`)
IN_PROCESS, PROCESSES, MPS = (Way.IN_PROCESS.measured, Way.PROCESS.measured,
                              Way.PROCESS_MPS.measured)


def overrides_of(tiny: bool, steps: int) -> list[str]:
    """A measured row's overrides: ``steps`` steps in all fit in its first epoch."""
    return [*MEASURE, *(TINY if tiny else []), f"train.max_batches_per_epoch={steps + 1}"]


def timed_specs(row: tuple[str, str], n: int, args, work: Path, *,
                apart: bool) -> list[JobSpec]:
    """``n`` timed jobs of ``row`` (seeds 1000, 1001, ...) in ``work``; ``apart``: each in
    a process of its own (they wait for one start, and watch this process)."""
    timing = Timing(warmup=args.warmup, steps=args.steps, folder=str(work),
                    deadline=time.time() + args.start_timeout,
                    parent=os.getpid() if apart else None)
    table, name = row
    return [JobSpec(table=table, row=name, seed=1000 + i, device=args.device,
                    out=str(work / "results"), runs=str(work / "runs"),
                    overrides=tuple(overrides_of(args.tiny, args.warmup + args.steps)),
                    threads=args.threads, label=f"{name} {i}", way=Way.PROCESS.value,
                    rows=n, timing=timing)
            for i in range(n)]


def measure_way(executor, row: tuple[str, str], n: int, args, work: Path) -> dict:
    """``n`` rows of ``row`` at once, started by ``executor`` as the scheduler starts
    them (each timed: :mod:`drillbook.experiments.run.timing`): their throughput, or the
    error that stopped them. Rows in processes of their own start their timed steps
    together once all have warmed up; whatever happens, none outlives the measurement."""
    apart = not isinstance(executor, Interleaved)
    specs = timed_specs(row, n, args, work, apart=apart)
    timing = specs[0].timing
    handles = []
    try:  # started inside: a job that did start is ended whatever fails next
        handles = [executor.start(spec, lambda line: None) for spec in specs]
        while True:  # until every row has ended, or one has failed
            statuses = [handle.poll() for handle in handles]  # in-process: trains them
            failed = [h for h, status in zip(handles, statuses, strict=True)
                      if status not in (None, 0)]
            if failed:
                return {"rows": n, "error": (failed[0].lines or ["?"])[-1][:300]}
            if all(status == 0 for status in statuses):
                break
            if not timing.go.exists():
                if all(timing.ready(key_of(spec)).exists() for spec in specs):
                    timing.go.touch()
                elif time.time() > timing.deadline:
                    return {"rows": n, "error": f"not ready within {args.start_timeout:g} s"}
            time.sleep(0.05)
    finally:
        for handle in handles:  # whatever happened: no row outlives the measurement
            if handle.poll() is None:
                handle.kill()
    return {"rows": n, **read_timed(specs)}


@contextlib.contextmanager
def mps_daemon(work: Path) -> Iterator[tuple[dict | None, str]]:
    """An MPS control daemon of this user, its pipe and log folders under ``work``:
    yields ``(environment for its clients, "")``, or ``(None, why not)``; quit on the way
    out, whatever happened."""
    control = shutil.which(MPS_CONTROL)
    if control is None:
        yield None, f"{MPS_CONTROL} is not on PATH"
        return
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(work / "mps-pipe"),
           "CUDA_MPS_LOG_DIRECTORY": str(work / "mps-log")}
    for folder in env.values():
        Path(folder).mkdir(parents=True, exist_ok=True)
    full = {**os.environ, **env}
    try:
        started = subprocess.run([control, "-d"], env=full, capture_output=True, text=True,
                                 timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        yield None, f"{MPS_CONTROL} -d could not run: {err}"
        return
    if started.returncode != 0:
        yield None, (f"{MPS_CONTROL} -d failed (exit {started.returncode}): "
                     f"{(started.stderr or started.stdout).strip()[:200]}")
        return
    try:
        yield env, ""
    finally:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run([control], input="quit\n", env=full, capture_output=True,
                           text=True, timeout=60)


# ------------------------------------------------------------------ the measurement
def say(row: dict, label: str, alone: float | None) -> None:
    if "error" in row:
        print(f"{label:<34} failed: {row['error']}", flush=True)
        return
    ratio = row["updates_per_second"] / alone if alone else float("nan")
    print(f"{label:<34} {row['updates_per_second']:10.2f} updates/s   x{ratio:6.2f}   "
          f"peak {row['peak_memory_bytes'] / 2**20:9.1f} MiB", flush=True)
    row["ratio"] = ratio


def measure(args) -> dict:
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    report: dict = {"small": {}, "paper": {}, "skipped": {}}
    with tempfile.TemporaryDirectory(prefix="drillbook-concurrency-") as tmp:
        work = Path(tmp)
        corpus = load_lm_data(get_config(SMALL_CONFIG))

        def fresh(label: str) -> Path:
            folder = work / label
            folder.mkdir()
            return folder

        def in_process(row, n: int, folder: Path, graphs: bool, data=None) -> dict:
            executor = Interleaved(args.device, corpus=data, quiet=True, graphs=graphs)
            return measure_way(executor, row, n, args, folder)

        def processes(row, n: int, folder: Path, env: dict | None = None) -> dict:
            way = Way.PROCESS if env is None else Way.PROCESS_MPS
            return measure_way(ProcessLauncher(args.threads, way=way, env=env), row, n,
                               args, folder)

        print(f"{'way (rows)':<34} {'throughput':>18}   ratio   memory", flush=True)
        alone = in_process(SMALL, 1, fresh("alone"), False, corpus)
        say(alone, "alone (1)", alone.get("updates_per_second"))
        report["alone"] = alone
        base = alone.get("updates_per_second")
        if cuda:
            graphed = in_process(SMALL, 1, fresh("alone-graphed"), True, corpus)
            say(graphed, "alone, graphed (1)", base)
            report["alone_graphed"] = graphed
        ways = {IN_PROCESS: lambda n, f: in_process(SMALL, n, f, cuda, corpus),
                PROCESSES: lambda n, f: processes(SMALL, n, f)}
        daemon = (mps_daemon(work) if cuda
                  else contextlib.nullcontext((None, "not a CUDA device")))
        with daemon as (mps, why):
            if mps is not None:
                ways[MPS] = lambda n, f: processes(SMALL, n, f, env=mps)
            else:
                report["skipped"][MPS] = why
                print(f"{MPS}: skipped ({why})", flush=True)
            for way, run in ways.items():
                report["small"][way] = {}
                for n in args.rows:
                    row = run(n, fresh(f"{way}-{n}"))
                    say(row, f"{way} ({n})", base)
                    report["small"][way][str(n)] = row
            most = str(max(args.rows))  # the best way where the most rows share the GPU
            usable = {way: rows[most]["ratio"] for way, rows in report["small"].items()
                      if "ratio" in rows.get(most, {})}
            best = max(usable, key=usable.get) if usable else None
            report["best_way"] = best
            if best is not None and args.paper_rows:
                paper_alone = in_process(PAPER, 1, fresh("paper-alone"), False)
                say(paper_alone, "paper-size alone (1)", paper_alone.get(
                    "updates_per_second"))
                paper_ways = {IN_PROCESS: lambda f: in_process(PAPER, args.paper_rows, f,
                                                               cuda),
                              PROCESSES: lambda f: processes(PAPER, args.paper_rows, f),
                              MPS: lambda f: processes(PAPER, args.paper_rows, f, env=mps)}
                together = paper_ways[best](fresh("paper-together"))
                say(together, f"paper-size {best} ({args.paper_rows})",
                    paper_alone.get("updates_per_second"))
                report["paper"] = {"alone": paper_alone, "way": best,
                                   "together": together}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true",
                        help="both configs at CPU sizes: a rehearsal of the script")
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 8, 16],
                        help="how many small rows at once (default 4 8 16)")
    parser.add_argument("--paper-rows", type=int, default=4,
                        help="paper-size rows at once, the best way (0: none)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed steps per row first (default 60; --tiny 2)")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps per row (default 200; --tiny 4)")
    parser.add_argument("--start-timeout", type=float, default=600.0,
                        help="seconds the row processes may take to start and warm up")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch's CPU threads in every process (default torch's own "
                             "choice; 1 on a shared CPU)")
    parser.add_argument("--out", type=Path, default=Path("concurrency.json"))
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.tiny else 60)
    args.steps = args.steps if args.steps is not None else (4 if args.tiny else 200)
    if min(args.rows) < 1 or args.paper_rows < 0 or args.steps < 1 or args.warmup < 1:
        parser.error("--rows, --steps and --warmup take positive counts")
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA device (rehearse with "
                     "--device cpu --tiny)")
    # a stop request ends the measurement through its finally clauses (workers, MPS); a
    # kill that no handler sees ends the workers through their own watch (timing.py)
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, lambda signum, frame: sys.exit(128 + signum))
    began = time.time()
    try:
        report = measure(args)
    except TrainingInterrupted as err:  # asked to stop while rows trained in this process
        print(f"stopped: {err}", file=sys.stderr, flush=True)
        return 130
    write_json(args.out, {"format": "drillbook-concurrency/1",
                          "environment": environment(args.device), "source": git_state(),
                          "settings": {**vars(args), "out": str(args.out),
                                       "small": SMALL_CONFIG, "paper": PAPER_CONFIG,
                                       "threads": torch.get_num_threads()},
                          "seconds": time.time() - began, **report})
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    try:
        status = main()
    except SystemExit as stop:  # a stop request, once every finally clause has run
        status = stop.code if isinstance(stop.code, int) else 1
    # ends here, without the interpreter's teardown of the loaded corpus (seconds on a
    # busy CPU, past a window part's time box): every file is written and closed by now
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
