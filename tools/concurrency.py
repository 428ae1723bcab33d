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
  - ``processes``: one process per row, as ``reproduce --parallel N`` runs them today;
  - ``processes-mps``: the same under NVIDIA's Multi-Process Service, where
    ``nvidia-cuda-mps-control`` exists: a daemon started as this user, its pipe and log
    folders in a temporary folder (no GPU setting is changed: no compute mode, no reset),
    quit when the measurement ends whatever happens; skipped, saying why, where it
    cannot start;

and then ``--paper-rows`` (4) paper-size rows (``ptb/awd-lstm``) at once, the way that
did best with small rows, against one paper-size row alone. Each row first takes
``--warmup`` steps (CUDA graphs are captured then), then ``--steps`` timed steps; the
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
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from drillbook.atomic import write_json  # noqa: E402
from drillbook.configs import apply_overrides, get_config  # noqa: E402
from drillbook.provenance import environment, git_state  # noqa: E402
from drillbook.train import LanguageModelTrainer as Trainer  # noqa: E402
from drillbook.train.interleaver import open_rows, train_together  # noqa: E402
from drillbook.train.lm import load_lm_data  # noqa: E402
from drillbook.train.ways import Way  # noqa: E402

SMALL, PAPER = "tutorial/ptb-tied", "ptb/awd-lstm"
#: what every measured row sets: no checkpoint by time, and (``config_of``) an epoch a
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


def config_of(name: str, tiny: bool, seed: int, steps: int):
    """``name`` as a measured row: ``steps`` steps in all fit in its first epoch."""
    return apply_overrides(get_config(name), [
        *MEASURE, *(TINY if tiny else []), f"train.seed={seed}",
        f"train.max_batches_per_epoch={steps + 1}"])


def peak_memory(device: torch.device) -> int:
    """The device's peak allocated bytes (CUDA), or this process's largest resident set."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


# ------------------------------------------------------------------ one process, N rows
def in_process(name: str, n: int, args, work: Path, corpus, graphs: bool) -> dict:
    """``n`` rows as trainers of this process, stepped in turn; the timed steps' wall."""
    device = torch.device(args.device)
    total = args.warmup + args.steps
    jobs = [(config_of(name, args.tiny, 1000 + i, total),
             work / f"{name.replace('/', '_')}-{i}") for i in range(n)]
    reset_peak(device)
    rows = open_rows(jobs, device=device, graphs=graphs, corpus=corpus)
    warm = train_together(rows, max_steps=args.warmup)  # graphs are captured here
    failed = [str(o.error) for o in warm if o.error is not None]
    if failed:
        return {"rows": n, "error": failed[0][:300]}
    began = time.perf_counter()
    timed = train_together(rows, max_steps=args.warmup + args.steps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall = time.perf_counter() - began
    failed = [str(o.error) for o in timed if o.error is not None]
    if failed:
        return {"rows": n, "error": failed[0][:300]}
    steps = sum(o.steps for o in timed)
    return {"rows": n, "execution": timed[0].execution, "wall_seconds": wall,
            "updates": steps, "updates_per_second": steps / wall,
            "peak_memory_bytes": peak_memory(device)}


# ------------------------------------------------------------------ N processes
#: a worker's exit status when it ends itself: its measurement is gone, or never said "go"
ABANDONED = 3


def abandoned(parent: int, deadline: float, go: Path) -> bool:
    """Whether a worker's measurement is gone (its parent is no longer ``parent``: killed,
    even by a signal no handler sees) or has stopped waiting for it (``deadline``, a
    ``time.time()``, passed without its "go")."""
    return os.getppid() != parent or (time.time() > deadline and not go.exists())


def watch_parent(parent: int, deadline: float, go: Path) -> None:
    """End this worker (status :data:`ABANDONED`) once it is :func:`abandoned`: checked
    now, then in a thread of its own, so that it ends whether it waits, warms up or
    trains."""
    def watch() -> None:
        while True:
            if abandoned(parent, deadline, go):
                os._exit(ABANDONED)
            time.sleep(0.2)

    if abandoned(parent, deadline, go):
        sys.exit(ABANDONED)
    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def worker(spec_path: str) -> int:
    """One row in a process of its own (what ``--worker`` runs): warm up, say so, wait for
    the start, train the timed steps, write when they began and ended. It ends itself when
    its measurement is gone or has stopped waiting for it (:func:`watch_parent`)."""
    spec = json.loads(Path(spec_path).read_text())
    watch_parent(spec["parent"], spec["deadline"], Path(spec["go"]))
    device = torch.device(spec["device"])
    config = config_of(spec["config"], spec["tiny"], spec["seed"],
                       spec["warmup"] + spec["steps"])
    trainer = Trainer(config, spec["run"], device=device, progress=False)
    trainer.fit(max_steps=spec["warmup"])
    reset_peak(device)
    Path(spec["ready"]).touch()
    while not Path(spec["go"]).exists():
        time.sleep(0.005)
    began = time.time()
    trainer.fit(max_steps=spec["warmup"] + spec["steps"])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    Path(spec["out"]).write_text(json.dumps({
        "began": began, "ended": time.time(), "steps": trainer.step - spec["warmup"],
        "peak_memory_bytes": peak_memory(device)}))
    return 0


def processes(name: str, n: int, args, work: Path, env: dict | None = None) -> dict:
    """``n`` rows, one process each, started together once all have warmed up."""
    go = work / "go"
    specs, procs = [], []
    # past this moment this process stops waiting for the workers to warm up, and so do they
    deadline = time.time() + args.start_timeout
    try:  # started inside: a worker that did start is ended whatever fails next
        for i in range(n):
            spec = {"config": name, "tiny": args.tiny, "seed": 1000 + i, "device": args.device,
                    "run": str(work / f"proc-{i}"), "warmup": args.warmup, "steps": args.steps,
                    "ready": str(work / f"ready-{i}"), "go": str(go),
                    "out": str(work / f"out-{i}.json"), "parent": os.getpid(),
                    "deadline": deadline}
            path = work / f"spec-{i}.json"
            path.write_text(json.dumps(spec))
            specs.append(spec)
            threads = [] if args.threads is None else ["--threads", str(args.threads)]
            procs.append(subprocess.Popen([sys.executable, __file__, "--worker", str(path),
                                           *threads],
                                          env={**os.environ, **(env or {})},
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True))
        while not all(Path(s["ready"]).exists() for s in specs):
            dead = [p for p in procs if p.poll() not in (None, 0)]
            if dead or time.time() > deadline:
                why = (dead[0].stderr.read().strip().splitlines() or ["?"])[-1] if dead \
                    else f"not ready within {args.start_timeout:g} s"
                return {"rows": n, "error": why[:300]}
            time.sleep(0.05)
        go.touch()
        for p in procs:
            p.wait()
        failed = [p for p in procs if p.returncode != 0]
        if failed:
            why = (failed[0].stderr.read().strip().splitlines() or ["?"])[-1]
            return {"rows": n, "error": why[:300]}
    finally:
        for p in procs:  # whatever happened: no worker outlives the measurement
            if p.poll() is None:
                p.kill()
                p.wait()
    outs = [json.loads(Path(s["out"]).read_text()) for s in specs]
    wall = max(o["ended"] for o in outs) - min(o["began"] for o in outs)
    steps = sum(o["steps"] for o in outs)
    return {"rows": n, "execution": Way.PROCESS.value, "wall_seconds": wall, "updates": steps,
            "updates_per_second": steps / wall,
            "peak_memory_bytes": sum(o["peak_memory_bytes"] for o in outs)}


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
        corpus = load_lm_data(get_config(SMALL))

        def fresh(label: str) -> Path:
            folder = work / label
            folder.mkdir()
            return folder

        print(f"{'way (rows)':<34} {'throughput':>18}   ratio   memory", flush=True)
        alone = in_process(SMALL, 1, args, fresh("alone"), corpus, graphs=False)
        say(alone, "alone (1)", alone.get("updates_per_second"))
        report["alone"] = alone
        base = alone.get("updates_per_second")
        if cuda:
            graphed = in_process(SMALL, 1, args, fresh("alone-graphed"), corpus, graphs=True)
            say(graphed, "alone, graphed (1)", base)
            report["alone_graphed"] = graphed
        ways = {IN_PROCESS: lambda n, f: in_process(SMALL, n, args, f, corpus, cuda),
                PROCESSES: lambda n, f: processes(SMALL, n, args, f)}
        daemon = (mps_daemon(work) if cuda
                  else contextlib.nullcontext((None, "not a CUDA device")))
        with daemon as (mps, why):
            if mps is not None:
                ways[MPS] = lambda n, f: processes(SMALL, n, args, f, env=mps)
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
                paper_alone = in_process(PAPER, 1, args, fresh("paper-alone"), None,
                                         graphs=False)
                say(paper_alone, "paper-size alone (1)", paper_alone.get(
                    "updates_per_second"))
                paper_ways = {IN_PROCESS: lambda f: in_process(
                                  PAPER, args.paper_rows, args, f, None, cuda),
                              PROCESSES: lambda f: processes(PAPER, args.paper_rows,
                                                               args, f),
                              MPS: lambda f: processes(
                                  PAPER, args.paper_rows, args, f, env=mps)}
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
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.worker:
        return worker(args.worker)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.tiny else 60)
    args.steps = args.steps if args.steps is not None else (4 if args.tiny else 200)
    if min(args.rows) < 1 or args.paper_rows < 0 or args.steps < 1 or args.warmup < 1:
        parser.error("--rows, --steps and --warmup take positive counts")
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA device (rehearse with "
                     "--device cpu --tiny)")
    # a stop request ends the measurement through its finally clauses (workers, MPS); a
    # kill that no handler sees ends the workers through their own watch (watch_parent)
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, lambda signum, frame: sys.exit(128 + signum))
    began = time.time()
    report = measure(args)
    write_json(args.out, {"format": "drillbook-concurrency/1",
                          "environment": environment(args.device), "source": git_state(),
                          "settings": {**vars(args), "out": str(args.out),
                                       "small": SMALL, "paper": PAPER,
                                       "threads": torch.get_num_threads()},
                          "seconds": time.time() - began, **report})
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
