"""The one command a GPU window runs: its parts in order, each within a share of the time,
so that one that fails or runs long leaves time for the rest.

    make evidence MINUTES=9 OUT=evidence AUTHORS=../awd-lstm-lm MOS=../mos
    python tools/evidence.py --minutes 9 --out evidence --authors ../awd-lstm-lm --mos ../mos
    python tools/evidence.py --rehearse --out /tmp/rehearsal   # on a CPU, tiny sizes

The parts (:data:`PARTS`), each given its share of what is left of ``--minutes`` (a part
that ends early hands its time on to the next):

1. ``concurrency``: ``tools/concurrency.py``: one small row alone; 4, 8 and 16 small rows
   at once by each way there is (graphed steps on streams in one process; processes under
   MPS where ``nvidia-cuda-mps-control`` starts as a user-level daemon, quit whatever
   happens; plain processes); 4 paper-size rows the best way; throughput ratios and peak
   memory;
2. ``steps``: ``tools/authors_step.py --graphed``: the graphed paper-size AWD-LSTM step
   against the authors' (``--authors``), and the authors' MoS with and without its
   per-batch ``gc.collect()``, with kernel profiles (``--mos``);
3. ``gpu-small`` then ``gpu-multi30k``: the plans trained to their plateau, continuing
   from the committed windows (``drillbook reproduce PLAN``: final rows skipped, the rest
   largest predicted time first while they fit), the rows together the way part 1
   measured best (``--together``; plain processes where that was MPS);
4. ``paper-rows``: the paper-size tied and DRILL-4 rows (``gpu-ptb``) for as many epochs
   as fit, each row's curve in its run folder's log every epoch; then MoS and DOC if time
   remains;
5. ``chapters``: every chapter on the GPU in the small profile, and chapters 2 and 3 in
   the t4 profile, cell by cell and timed (``tools/chapter_cells.py``).

Everything comes back in ``OUT``: ``summary.txt`` (each part: its command, time box, time
taken and exit status), ``console.log`` (every part's output), the parts' reports
(``concurrency.json``, ``authors-step.json``, ``authors-step-authors-mos.json``,
``chapters.txt``) and ``results.tar.gz`` (every result
file the plans and rows wrote; unpack it as the README's GPU section says). The plans'
predictions are printed in the console (each row's predicted seconds); their dry runs
(``drillbook reproduce PLAN --dry-run h100``) are for a CPU before the window. The run
folders (checkpoints) stay beside ``OUT``. It needs only drillbook's own dependencies and
a Python with torch.

``--rehearse``: the same parts on the CPU at tiny sizes, within four minutes (each
part's sizes in :data:`REHEARSAL`): what it measures there means nothing; it checks that
the window's command runs end to end and brings back its files.
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
# the best way of part 1's report, as reproduce --together names it (MPS's daemon is the
# concurrency part's own and gone by part 3: its rows then run as plain processes)
from drillbook.experiments.run.executors import measured_way  # noqa: E402

#: seconds kept at the end for packing and the summary
END_SECONDS = 15.0
#: seconds between a part's own deadline and its time box (its last words)
MARGIN = 10.0
#: seconds a part past its time box has, once asked to stop, before it is killed
STOP_GRACE = 10.0

#: the parts, in order, and their shares of the window (of what is left when each starts)
PARTS = (("concurrency", 0.15), ("steps", 0.10), ("gpu-small", 0.25),
         ("gpu-multi30k", 0.12), ("paper-rows", 0.15), ("chapters", 0.23))
#: a rehearsal's shares: on a CPU every part's start-up (processes, data) costs more than
#: its tiny training
REHEARSAL_SHARES = {"concurrency": 0.15, "steps": 0.25, "gpu-small": 0.22,
                    "gpu-multi30k": 0.13, "paper-rows": 0.15, "chapters": 0.1}

#: the chapters of part 5: (source, profile)
CHAPTERS = (*[(p, "small") for p in ("01_softmax_bottleneck", "02_tied_joint_drill",
                                     "03_mixtures_mos_doc", "04_vmf_continuous_outputs",
                                     "05_joint_embeddings_nmt", "06_reproductions",
                                     "07_cost_of_output_layers")],
            ("02_tied_joint_drill", "t4"), ("03_mixtures_mos_doc", "t4"))

_LM_TINY = ["model.emsize=16", "model.nhid=16", "train.max_batches_per_epoch=2",
            "train.max_eval_tokens=200", "train.batch_size=8"]
#: a rehearsal's sizes: each part's extra arguments on a CPU
REHEARSAL = {
    "concurrency": ["--tiny", "--rows", "2", "--paper-rows", "2", "--warmup", "1",
                    "--steps", "2"],
    "steps": ["--tiny", "--steps", "2", "--rounds", "1", "--profile", "1", "--eval-windows",
              "2", "--set", *_LM_TINY[:2]],
    "gpu-small": ["--seed", "141", "--parallel", "2", "--set", *_LM_TINY,
                  "train.epochs=4"],
    "gpu-multi30k": ["--parallel", "2", "--set", "model.emb_size=16", "model.hidden=16",
                     "data.max_train_pairs=64", "train.max_eval_pairs=16", "train.epochs=4",
                     "train.max_len=8"],
    "paper-rows": ["--set", *_LM_TINY, "train.epochs=1000"],
    "chapters": ["--cells", "2"],
}


class Window:
    """The deadline of the whole call, and the record of its parts."""

    def __init__(self, minutes: float, out: Path, shares: dict[str, float]) -> None:
        self.shares = shares
        self.start = time.monotonic()
        self.end = self.start + 60 * minutes - END_SECONDS
        self.out = out
        self.steps: list[dict] = []
        self.console = open(out / "console.log", "a", encoding="utf-8")

    def left(self) -> float:
        return self.end - time.monotonic()

    def box(self, part: str) -> float:
        """The seconds ``part`` gets: its share of what is left, among the parts to come."""
        names = list(self.shares)
        later = sum(self.shares[name] for name in names[names.index(part):])
        return max(self.left(), 0.0) * self.shares[part] / later

    def run(self, name: str, command: list[str], limit: float, *,
            output: Path | None = None, env: dict | None = None) -> int | None:
        """Run ``command`` for at most ``limit`` seconds (and never past the deadline), its
        output in the console log (and in ``output``); returns its exit status, None when
        it was stopped at its limit or never started."""
        seconds = min(limit, self.left())
        if seconds < 5:
            self.record(name, None, 0.0, "not started: no time left", command)
            return None
        began = time.monotonic()
        self.console.write(f"\n$ {' '.join(command)}\n")
        self.console.flush()
        env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=ROOT, env=env)
        try:
            out, err = proc.communicate(timeout=seconds)
            status, note = proc.returncode, f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            # asked to stop first, so that its own clean-up ends what it started (a
            # measurement's worker processes, an MPS daemon); killed if it does not
            proc.terminate()
            try:
                out, err = proc.communicate(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            status = None
            note = f"stopped after {seconds:.0f} s (its time box)"
        text = (out or "") + (err or "")
        self.console.write(text)
        self.console.flush()
        if output is not None:
            with open(output, "a", encoding="utf-8") as f:
                f.write(text)
        self.record(name, status, time.monotonic() - began, note, command, limit)
        return status

    def record(self, name: str, status: int | None, seconds: float, note: str,
               command: list[str] | None = None, limit: float | None = None) -> None:
        self.steps.append({"step": name, "status": status, "seconds": round(seconds, 1),
                           "box_seconds": None if limit is None else round(limit, 1),
                           "note": note, "command": " ".join(command or [])})
        print(f"evidence: {name}: {note} ({seconds:.0f} s; {self.left():.0f} s left)",
              file=sys.stderr, flush=True)


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=None,
                        help="the whole window (default 9; 4 with --rehearse)")
    parser.add_argument("--out", type=Path, default=Path("evidence"))
    parser.add_argument("--runs", type=Path, help="run folders (default OUT/../OUT-runs)")
    parser.add_argument("--device", default=None, help="default cuda (cpu with --rehearse)")
    parser.add_argument("--authors", type=Path, help="a checkout of salesforce/awd-lstm-lm")
    parser.add_argument("--mos", type=Path, help="a checkout of zihangdai/mos")
    parser.add_argument("--skip", nargs="+", default=[], metavar="PART",
                        help=f"parts not to run: {', '.join(n for n, _ in PARTS)}")
    parser.add_argument("--rehearse", action="store_true",
                        help="on a CPU at tiny sizes (checks the command, measures nothing)")
    return parser


class _Call:
    """One call of the window command: its arguments, folders, window and commands."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.minutes = args.minutes or (4.0 if args.rehearse else 9.0)
        self.device = args.device or ("cpu" if args.rehearse else "cuda")
        self.out = args.out.resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = (args.runs or self.out.parent / f"{self.out.name}-runs").resolve()
        self.results = self.work / "results"
        self.window = Window(self.minutes, self.out,
                             REHEARSAL_SHARES if args.rehearse else dict(PARTS))
        self.python = [sys.executable]
        self.drillbook = [*self.python, "-m", "drillbook.cli"]
        self.tiny = REHEARSAL if args.rehearse else {}

    def part(self, name: str, command: list[str], **kw) -> int | None:
        """Run part ``name`` in its time box (or record it skipped)."""
        if name in self.args.skip:
            self.window.record(name, None, 0.0, "skipped (--skip)")
            return None
        return self.window.run(name, command, self.window.box(name), **kw)

    def reproduce(self, table: str, box: float, rows: list[str] | None = None) -> list[str]:
        """``drillbook reproduce TABLE`` (only ``rows``, all at once) within ``box``
        seconds, into this call's folders."""
        some = ["--rows", *rows] if rows else []
        parallel = ["--parallel", str(len(rows))] if rows else []
        return [*self.drillbook, "reproduce", table, *some, "--devices", self.device,
                *parallel, "--deadline-minutes", f"{max(box - MARGIN, 5) / 60:.3f}", "--out",
                str(self.results), "--runs", str(self.work / "runs"), "--quiet"]


def _concurrency(call: _Call) -> None:
    """1. concurrency: every way of many rows at once, measured."""
    tool = ROOT / "tools" / "concurrency.py"
    if tool.is_file():
        call.part("concurrency", [*call.python, str(tool), "--device", call.device, "--out",
                                  str(call.out / "concurrency.json"),
                                  *call.tiny.get("concurrency", [])])
    else:
        call.window.record("concurrency", None, 0.0, "skipped: tools/concurrency.py is not "
                                                     "in this checkout")


def _steps(call: _Call) -> None:
    """2. the graphed step against the authors', and the authors' MoS with its profile."""
    args = call.args
    checkouts = [*(["--authors", str(args.authors)] if args.authors else []),
                 *(["--mos", str(args.mos)] if args.mos else [])]
    if checkouts:
        graphed = ["--graphed"] if "--graphed" in _help(ROOT / "tools" / "authors_step.py") \
            else []
        call.part("steps", [*call.python, str(ROOT / "tools" / "authors_step.py"),
                            *checkouts, "--device", call.device, "--out",
                            str(call.out / "authors-step.json"), *graphed,
                            *call.tiny.get("steps", [])])
    else:
        call.window.record("steps", None, 0.0, "skipped: give --authors and --mos "
                                               "(checkouts of the authors' repositories)")


def _plans(call: _Call, together: str | None) -> None:
    """3. the plans trained to their plateau, continuing from the committed windows, the
    rows together the way part 1 measured best."""
    nothing = call.work / "none"  # a rehearsal continues from an empty results folder
    if call.args.rehearse:
        nothing.mkdir(parents=True, exist_ok=True)
    for plan in ("gpu-small", "gpu-multi30k"):
        box = call.window.box(plan)
        command = [*call.reproduce(plan, box),
                   # a rehearsal continues from nothing: the committed windows are GPU runs
                   "--continue-from", str(nothing if call.args.rehearse
                                          else ROOT / "drillbook" / "results"),
                   *(["--together", together] if together else []),
                   *call.tiny.get(plan, [])]
        if call.args.rehearse:
            command += ["--reserve-minutes", "0.35"]
        call.part(plan, command)


def _paper_rows(call: _Call, together: str | None) -> None:
    """4. the paper-size rows for as many epochs as fit, the mixtures if time remains."""
    window = call.window
    for rows, name in ((["tied", "drill-4"], "paper-rows"), (["mos-15", "doc"],
                                                             "paper-rows-mixtures")):
        if name == "paper-rows":
            box = window.box("paper-rows")
        else:  # what the first pair left beyond the chapters' share
            box = window.left() - window.left() * window.shares["chapters"] / sum(
                window.shares[p] for p in ("paper-rows", "chapters"))
            if box < 120:
                window.record(name, None, 0.0, f"not started: {box:.0f} s left beyond the "
                                               f"chapters' share (2 min needed)")
                continue
        command = [*call.reproduce("gpu-ptb", box, rows),
                   *(["--together", together] if together else []),
                   *call.tiny.get("paper-rows", [])]
        if call.args.rehearse:
            command += ["--reserve-minutes", "0.35"]
        if "paper-rows" in call.args.skip:
            window.record(name, None, 0.0, "skipped (--skip)")
        else:
            window.run(name, command, max(box, 0.0))
        if call.args.rehearse:
            break  # one pair is enough to check it


def _chapters(call: _Call) -> None:
    """5. the chapters on the GPU, cell by cell, timed."""
    window = call.window
    if "chapters" in call.args.skip:
        window.record("chapters", None, 0.0, "skipped (--skip)")
        return
    chapters = CHAPTERS[:1] if call.args.rehearse else CHAPTERS
    for i, (chapter, profile) in enumerate(chapters):
        share = max(window.left(), 0.0) / (len(chapters) - i)  # the rest, shared
        window.run(f"chapter {chapter} ({profile})",
                   [*call.python, str(ROOT / "tools" / "chapter_cells.py"),
                    f"notebooks/{chapter}.py", "--profile", profile, "--seconds",
                    f"{max(share - MARGIN, 5):.0f}", *call.tiny.get("chapters", [])],
                   share, output=call.out / "chapters.txt",
                   env={"DRILLBOOK_PROFILE": profile})


def _pack_and_summarise(call: _Call) -> None:
    """What the rows wrote, packed; the window's summary."""
    if call.results.exists():
        packed = subprocess.run(
            [*call.python, "-c", "import sys; from drillbook.experiments.results import "
             "pack_results; print(pack_results(sys.argv[1], sys.argv[2]))",
             str(call.results), str(call.out / "results.tar.gz")],
            capture_output=True, text=True, cwd=ROOT, env={**os.environ,
                                                           "PYTHONPATH": str(ROOT)})
        call.window.console.write(packed.stdout + packed.stderr)
    summary = {"minutes": call.minutes, "device": call.device,
               "rehearsal": call.args.rehearse,
               "elapsed_seconds": round(time.monotonic() - call.window.start, 1),
               "parts": [n for n, _ in PARTS], "steps": call.window.steps}
    (call.out / "summary.txt").write_text(json.dumps(summary, indent=1) + "\n",
                                          encoding="utf-8")
    call.window.console.close()


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    unknown = sorted(set(args.skip) - {n for n, _ in PARTS})
    if unknown:
        parser.error(f"unknown part(s) {unknown}; the parts: {[n for n, _ in PARTS]}")
    call = _Call(args)
    _concurrency(call)
    _steps(call)
    together = measured_way(call.out / "concurrency.json")
    call.window.console.write(f"rows together: {together or 'the default way'} "
                              f"(from part 1)\n")
    _plans(call, together)
    _paper_rows(call, together)
    _chapters(call)
    _pack_and_summarise(call)
    print(f"evidence: {len(list(call.out.iterdir()))} file(s) in {call.out}", file=sys.stderr)
    return 0


def _help(tool: Path) -> str:
    """A tool's source (to ask whether it takes an option)."""
    return tool.read_text(encoding="utf-8") if tool.is_file() else ""


if __name__ == "__main__":
    sys.exit(main())
