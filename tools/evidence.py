"""Turn a GPU window into evidence, in one command that ends on time whatever fails.

    make evidence PLAN=gpu-ptb MINUTES=9 OUT=evidence
    python tools/evidence.py --plan gpu-ptb gpu-multi30k --minutes 9 --out evidence

In order, each step within what is left of ``--minutes``:

1. the test suite's CUDA tests (``pytest -m cuda``; skipped, and said so, where pytest is
   not installed: a GPU machine may lack the dev tools);
2. ``drillbook bench targets --device cuda``: the cost targets on this GPU;
3. each plan (:data:`drillbook.experiments.run.plans.PLANS`): its predicted run (``--dry-run``),
   then its rows side by side on the GPU within the time left
   (``drillbook reproduce TABLE --parallel N --deadline-minutes M``).

Everything that comes back lies in ``OUT`` as at most eight files: ``summary.txt`` (what
each step did, its time and exit status), ``console.log`` (every step's output),
``cuda-tests.txt``, ``bench-targets.json``, ``predictions.txt`` and ``results.tar.gz``
(every result file of the plans; unpack it and ``drillbook report --results DIR``). It
needs only drillbook's own dependencies and a Python with torch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # drillbook from this checkout, installed or not
#: seconds kept at the end for packing and the summary
END_SECONDS = 20.0
#: seconds between a plan's own deadline and the window's end (its call's last words)
PLAN_MARGIN = 10.0
#: the longest the CUDA tests and the benchmark may take, each (seconds)
STEP_LIMITS = {"cuda-tests": 150.0, "bench": 120.0}


class Window:
    """The deadline of the whole call, and the record of its steps."""

    def __init__(self, minutes: float, out: Path) -> None:
        self.start = time.monotonic()
        self.end = self.start + 60 * minutes - END_SECONDS
        self.out = out
        self.steps: list[dict] = []
        self.console = open(out / "console.log", "a", encoding="utf-8")

    def left(self) -> float:
        return self.end - time.monotonic()

    def run(self, name: str, command: list[str], limit: float, *,
            output: Path | None = None) -> int | None:
        """Run ``command`` for at most ``limit`` seconds (and never past the deadline), its
        output in the console log (and in ``output``); returns its exit status, None when
        it was stopped at its limit or never started."""
        seconds = min(limit, self.left())
        if seconds < 5:
            self._record(name, None, 0.0, "not started: no time left")
            return None
        began = time.monotonic()
        self.console.write(f"\n$ {' '.join(command)}\n")
        self.console.flush()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=seconds,
                                  cwd=ROOT, env=env)
            status, text = done.returncode, done.stdout + done.stderr
            note = f"exit {status}"
        except subprocess.TimeoutExpired as err:
            status = None
            text = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                           for x in (err.stdout, err.stderr))
            note = f"stopped after {seconds:.0f} s"
        self.console.write(text)
        self.console.flush()
        if output is not None:
            output.write_text(text, encoding="utf-8")
        self._record(name, status, time.monotonic() - began, note)
        return status

    def _record(self, name: str, status: int | None, seconds: float, note: str) -> None:
        self.steps.append({"step": name, "status": status, "seconds": round(seconds, 1),
                           "note": note})
        print(f"evidence: {name}: {note} ({seconds:.0f} s; {self.left():.0f} s left)",
              file=sys.stderr, flush=True)


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", nargs="+", default=["gpu-ptb"],
                        help="plans of drillbook.experiments.tables.PLANS, in order")
    parser.add_argument("--minutes", type=float, default=9.0, help="the whole window")
    parser.add_argument("--out", type=Path, default=Path("evidence"))
    parser.add_argument("--runs", type=Path, help="run folders (default OUT/../evidence-runs)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--skip-tests", action="store_true", help="no CUDA tests")
    parser.add_argument("--skip-bench", action="store_true", help="no cost benchmark")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="overrides for every row (a rehearsal on a CPU: tiny sizes)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = (args.runs or out.parent / f"{out.name}-runs").resolve()
    results = work / "results"
    window = Window(args.minutes, out)
    python = [sys.executable]
    drillbook = [*python, "-m", "drillbook.cli"]

    if args.skip_tests:
        window._record("cuda-tests", None, 0.0, "skipped (--skip-tests)")
    elif not _have("pytest"):
        window._record("cuda-tests", None, 0.0, "skipped: pytest is not installed here "
                                                "(pip install pytest)")
    else:
        # a GPU machine may lack the book's tools (nbformat, ...): the modules that need
        # them hold no CUDA test, so they are let go rather than stop the collection
        window.run("cuda-tests", [*python, "-m", "pytest", "tests", "-m", "cuda", "-q",
                                  "-p", "no:cacheprovider", "--continue-on-collection-errors"],
                   STEP_LIMITS["cuda-tests"],
                   output=out / "cuda-tests.txt")
    if args.skip_bench:
        window._record("bench", None, 0.0, "skipped (--skip-bench)")
    else:
        window.run("bench", [*drillbook, "bench", "targets", "--device", args.device,
                             "--out", str(out / "bench-targets.json")], STEP_LIMITS["bench"])
    predictions = []
    for i, plan in enumerate(args.plan):
        left_plans = len(args.plan) - i
        minutes = max(window.left() / left_plans / 60, 0.0)
        dry = subprocess.run([*drillbook, "reproduce", plan, "--dry-run",
                              "--deadline-minutes", f"{max(minutes, 0.1):.2f}"],
                             capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        predictions.append(dry.stdout + dry.stderr)
        # what is left after the prediction, a few seconds short of the window's end: the
        # call ends by its own deadline, before the window stops it
        minutes = max((window.left() - PLAN_MARGIN) / left_plans / 60, 0.0)
        from drillbook.experiments.tables import PLANS

        spec = PLANS.get(plan)
        command = [*drillbook, "reproduce", spec.table if spec else plan,
                   "--devices", args.device, "--deadline-minutes", f"{minutes:.3f}",
                   "--out", str(results), "--runs", str(work / "runs"), "--keep-going"]
        if args.set:
            command += ["--set", *args.set]
        if spec is not None:
            command += ["--parallel", str(spec.parallel)]
            if spec.seeds:
                command += ["--seed", *map(str, spec.seeds)]
        else:  # a table that is no plan: all its rows at once
            from drillbook.experiments.tables import TABLES

            command += ["--parallel", str(len(TABLES.get(plan, [0])))]
        # the call ends by itself within its deadline; the limit is a second guard
        window.run(f"plan {plan}", command, 60 * minutes + 30)
    (out / "predictions.txt").write_text("\n\n".join(predictions), encoding="utf-8")
    if results.exists():
        packed = subprocess.run(
            [*python, "-c", "import sys; from drillbook.experiments.results import "
             "pack_results; print(pack_results(sys.argv[1], sys.argv[2]))",
             str(results), str(out / "results.tar.gz")],
            capture_output=True, text=True, cwd=ROOT, env={**os.environ,
                                                           "PYTHONPATH": str(ROOT)})
        window.console.write(packed.stdout + packed.stderr)
    summary = {"minutes": args.minutes, "plans": args.plan, "device": args.device,
               "elapsed_seconds": round(time.monotonic() - window.start, 1),
               "steps": window.steps}
    (out / "summary.txt").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    window.console.close()
    print(f"evidence: {len(list(out.iterdir()))} file(s) in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
