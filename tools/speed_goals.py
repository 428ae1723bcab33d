"""Time per update of the paper-size PTB models against the authors' code, and print ratios.

    python tools/speed_goals.py --device cuda --out speed-goals.json
    python tools/speed_goals.py --device cuda --before ../drillbook-old --out speed.json

Each model trains ``--epochs`` short epochs of ``--batches`` updates at the paper's
settings (``drillbook train CONFIG --set train.epochs=E train.max_batches_per_epoch=N``,
a fresh process each); its time per update is the last epoch's training seconds over its
updates (``epoch_seconds / batches`` of ``log.jsonl``), which leaves the first epoch's warm-up
out. The authors' time is the steady ``ms/batch`` of their own console logs on the same
kind of GPU (:mod:`drillbook.experiments.results.authors_code`, the committed window
``drillbook/results/gpu/2026-11-26-h200-fp32/authors-code``), so only a run on that kind
of GPU compares like with like; the script says which device it ran on.

With ``--before ROOT`` (another checkout of drillbook, e.g. ``git worktree add ../old
COMMIT``) each model is timed with that code too, alternating with this checkout's, so a
change's effect is measured on the same machine in the same call.

Goals (the issue "Faster than the authors' code on a GPU"): AWD-LSTM and DRILL at most
0.9 times the authors' time per update, MoS at most 0.2 times. Prints one line per run and
a table of ratios; writes everything to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from drillbook.atomic import write_json  # noqa: E402
from drillbook.experiments.results.authors_code import authors_code_timings  # noqa: E402
from drillbook.provenance import environment, git_state  # noqa: E402
from drillbook.train.run_files import read_log  # noqa: E402

AUTHORS = ROOT / "drillbook/results/gpu/2026-11-26-h200-fp32/authors-code"
#: model -> (named config, the authors' log, the goal: at most this ratio to the authors')
MODELS = {"awd-lstm": ("ptb/awd-lstm", "awd-ptb", 0.9),
          "drill-4": ("ptb/awd-lstm-drill", "drill-ptb", 0.9),
          "mos-15": ("ptb/awd-lstm-mos", "mos-ptb", 0.2)}


def time_model(root: Path, config: str, device: str, epochs: int, batches: int,
               extra: list[str], work: Path) -> dict:
    """Train ``config`` with the drillbook at ``root``; its last epoch's time per update."""
    run = Path(tempfile.mkdtemp(dir=work))
    command = [sys.executable, "-m", "drillbook.cli", "train", config, "--device", device,
               "--out", str(run / "run"), "--quiet", "--set", f"train.epochs={epochs}",
               f"train.max_batches_per_epoch={batches}", *extra]
    env = {**os.environ, "PYTHONPATH": str(root)}
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=root)
    seconds = time.monotonic() - began
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:],
                "wall_seconds": round(seconds, 1)}
    log = read_log(run / "run")
    last = log[-1]
    return {"ms_per_update": 1000 * last["epoch_seconds"] / last["batches"],
            "epochs": len(log), "updates_last_epoch": last["batches"],
            "val_ppl_last": last.get("val_ppl"), "wall_seconds": round(seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=250, help="updates per epoch")
    parser.add_argument("--before", type=Path, help="another drillbook checkout to time too")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="more overrides for every run (e.g. train.amp=bf16)")
    parser.add_argument("--out", type=Path, default=Path("speed-goals.json"))
    args = parser.parse_args(argv)
    authors = {log["run"]: log for log in authors_code_timings(AUTHORS)}
    versions = {"this": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for model in args.models:
            config, log, goal = MODELS[model]
            theirs = authors[log]["steady_ms_per_batch"]
            for version in (["before", "this"] if args.before else ["this"]):
                row = {"model": model, "config": config, "version": version,
                       "authors_ms_per_batch": theirs, "goal_ratio": goal,
                       **time_model(versions[version], config, args.device, args.epochs,
                                    args.batches, args.set, Path(work))}
                if "ms_per_update" in row:
                    row["ratio"] = row["ms_per_update"] / theirs
                    row["meets_goal"] = row["ratio"] <= goal
                    print(f"{model} ({version}): {row['ms_per_update']:.1f} ms per update, "
                          f"authors {theirs:.1f}: ratio {row['ratio']:.2f} (goal <= {goal})",
                          flush=True)
                else:
                    print(f"{model} ({version}): failed: {row['error']}", flush=True)
                rows.append(row)
    write_json(args.out, {"format": "drillbook-speed-goals/1", "environment":
                          environment(args.device), "source": git_state(),
                          "settings": {"epochs": args.epochs, "batches": args.batches,
                                       "set": args.set, "before": str(args.before)},
                          "authors_logs": str(AUTHORS.relative_to(ROOT)), "rows": rows})
    print(f"\n{'model':<10} {'version':<7} {'ms/update':>9} {'authors':>8} {'ratio':>6} "
          f"{'goal':>5}")
    for r in rows:
        if "ratio" in r:
            print(f"{r['model']:<10} {r['version']:<7} {r['ms_per_update']:>9.1f} "
                  f"{r['authors_ms_per_batch']:>8.1f} {r['ratio']:>6.2f} {r['goal_ratio']:>5}")
    print(f"written: {args.out}")
    return 0 if all("ratio" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
