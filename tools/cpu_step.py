"""A small model's training step on a CPU: drillbook's with the fused output loss, drillbook's
with the plain loss (the reference path: the step as it was before the fused loss), and the
AWD-LSTM authors' step, on the same real batches, one thread, in one process; prints the ratios.

    DRILLBOOK_DATA=../shared/data python tools/cpu_step.py --authors ../awd-lstm-lm \\
        --out cpu-step.json

The sizes (``--sizes``, default all but ``paper``):

* ``32/64``: ``tutorial/ptb-tied`` at emsize 32, nhid 64, batch 64 x 35 (the laptop plan's
  kind of size: d much smaller than V = 10,000);
* ``tutorial``: ``tutorial/ptb-tied`` as it is (emsize 128, nhid 256), batch 32 x 35;
* ``multi30k``: ``multi30k/de-en-softmax-tutorial`` (128 units, batch 64), fused against
  plain only (the authors' code is a language model);
* ``paper``: ``ptb/awd-lstm`` (the paper's size, 24M parameters: seconds a step here),
  fused against plain only.

``--authors`` is a checkout of ``salesforce/awd-lstm-lm``: its ``model.py`` and
``splitcross.py`` driven as their ``main.py`` drives them (``tools/authors_step.py`` says
how); without it the authors' column is left out. The contenders alternate ``--rounds``
times ``--steps`` steps each, and the fastest round of each counts, so a busier minute
favours none. ``--clock cpu`` (default) times the process's CPU time, which other work on
the machine disturbs less than the wall clock; ``--clock wall`` the wall clock.

Last, it prints each step's arithmetic (the planner's count of its matrix products) against
this core's float32 matrix-product rate (the fastest of 20 products of 1024 x 1024
matrices): the share of that rate the fused step reaches, and the floor, the time that
arithmetic needs at that rate, over the authors' step: no ratio below the floor is
possible without doing less arithmetic.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from drillbook.atomic import write_json  # noqa: E402
from drillbook.configs import apply_overrides, get_config  # noqa: E402
from drillbook.experiments.run.cost_model import probe_config  # noqa: E402
from drillbook.provenance import environment, git_state  # noqa: E402

#: size -> (config, overrides, batch size, compare with the authors)
SIZES = {
    "32/64": ("tutorial/ptb-tied", ["model.emsize=32", "model.nhid=64"], 64, True),
    "tutorial": ("tutorial/ptb-tied", [], 32, True),
    "multi30k": ("multi30k/de-en-softmax-tutorial", [], 64, False),
    "paper": ("ptb/awd-lstm", [], 80, False),
}


def _clock(kind: str) -> float:
    if kind == "wall":
        return time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _system() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def timed(call, steps: int, clock: str) -> tuple[float, float]:
    """Seconds per call and system seconds per call over ``steps`` calls."""
    start, sys0 = _clock(clock), _system()
    for i in range(steps):
        call(i)
    return (_clock(clock) - start) / steps, (_system() - sys0) / steps


def _trainer(config, work: Path, name: str, fused: bool, corpus=None):
    from drillbook.train.tasks import task_of

    cls = task_of(config).trainer
    kwargs = {"corpus": corpus} if corpus is not None else {}
    trainer = cls(config, work / name, device="cpu", progress=False, **kwargs)
    trainer.model.head.fused_loss = None if fused else False
    return trainer


def measure(size: str, args) -> dict:
    name, overrides, batch, with_authors = SIZES[size]
    config = get_config(name)
    sets = [*overrides, f"train.batch_size={batch}", "train.log_interval=100000"]
    config = apply_overrides(config, sets)
    torch.manual_seed(0)
    steps = args.steps if size != "paper" else max(2, args.steps // 10)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        fused = _trainer(config, work, "fused", True)
        plain = _trainer(config, work, "plain", False, corpus=fused.corpus)
        plain.model.load_state_dict(fused.model.state_dict())
        batches = [b for _, b in zip(range(steps), fused.batches(), strict=False)]
        contenders = {"fused": lambda i: fused.train_step(batches[i % len(batches)]),
                      "plain": lambda i: plain.train_step(batches[i % len(batches)])}
        if with_authors and args.authors is not None:
            from authors_step import AuthorsStep, authors_model

            net, criterion = authors_model(args.authors, config, len(fused.corpus.vocab),
                                           torch.device("cpu"))
            theirs = AuthorsStep(net, criterion, config, batch, "cpu")

            def their_step(i: int) -> None:
                b = batches[i % len(batches)]
                theirs(b.x, b.y)

            contenders["authors"] = their_step
        for call in contenders.values():
            timed(call, 2, args.clock)  # warm-up
        rounds = []
        for r in range(args.rounds):
            row = {}
            for key, call in contenders.items():
                seconds, system = timed(call, steps, args.clock)
                row[key] = {"ms": 1000 * seconds, "system_ms": 1000 * system}
            rounds.append(row)
            print(f"  {size} round {r}: " + ", ".join(
                f"{k} {v['ms']:.1f} ms ({v['system_ms']:.1f} ms system)"
                for k, v in row.items()), flush=True)
        fused.check_steps()
        plain.check_steps()
        tokens = _tokens(batches)
        fused.close()
        plain.close()
    best = {k: min(rounds, key=lambda row, k=k: row[k]["ms"])[k] for k in contenders}
    gflop = probe_config(config)[1] / 1e9  # the planner's count of the step's arithmetic
    out = {"size": size, "config": name, "overrides": sets, "steps": steps,
           "tokens_per_step": tokens, "rounds": rounds, "best": best, "step_gflop": gflop,
           "fused_gflop_per_s": gflop / (best["fused"]["ms"] / 1000),
           "fused_over_plain": best["fused"]["ms"] / best["plain"]["ms"],
           "tokens_per_s": {k: tokens / (v["ms"] / 1000) for k, v in best.items()}}
    if "authors" in best:
        out["fused_over_authors"] = best["fused"]["ms"] / best["authors"]["ms"]
        out["plain_over_authors"] = best["plain"]["ms"] / best["authors"]["ms"]
    return out


def matmul_rate(n: int = 1024, repeats: int = 20) -> float:
    """This core's rate (GFLOP/s) at a square float32 matrix product of side ``n``, the
    fastest of ``repeats`` by the wall clock (other work only adds to a repeat's time):
    what the step's arithmetic could run at, at best."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def _tokens(batches) -> float:
    """Mean target tokens per step of ``batches`` (language-model windows or sentence
    pairs)."""
    counts = []
    for b in batches:
        y = b.y if hasattr(b, "y") else b.tgt_out
        counts.append(int(y.numel()))
    return sum(counts) / len(counts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--authors", type=Path, help="a checkout of salesforce/awd-lstm-lm")
    parser.add_argument("--sizes", nargs="+", default=["32/64", "tutorial", "multi30k"],
                        choices=list(SIZES))
    parser.add_argument("--steps", type=int, default=10, help="steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--out", type=Path, default=Path("cpu-step.json"))
    args = parser.parse_args(argv)
    if args.authors is not None and not (args.authors / "model.py").is_file():
        parser.error(f"{args.authors} holds no model.py: give a checkout of "
                     f"salesforce/awd-lstm-lm")
    torch.set_num_threads(args.threads)
    results = []
    for size in args.sizes:
        print(f"{size}:", flush=True)
        results.append(measure(size, args))
    print("\nfastest round of each, one training step (ms), "
          f"{args.threads} thread(s), {args.clock} clock:")
    print(f"{'size':<10}{'fused':>9}{'plain':>9}{'authors':>9}{'fused/plain':>13}"
          f"{'fused/authors':>15}{'plain/authors':>15}{'tokens/s fused':>16}")
    for r in results:
        b = r["best"]
        authors = f"{b['authors']['ms']:9.1f}" if "authors" in b else f"{'-':>9}"
        fa = f"{r['fused_over_authors']:15.3f}" if "authors" in b else f"{'-':>15}"
        pa = f"{r['plain_over_authors']:15.3f}" if "authors" in b else f"{'-':>15}"
        print(f"{r['size']:<10}{b['fused']['ms']:9.1f}{b['plain']['ms']:9.1f}{authors}"
              f"{r['fused_over_plain']:13.3f}{fa}{pa}{r['tokens_per_s']['fused']:16.0f}")
    rate = matmul_rate()
    print(f"\nthe step's arithmetic (the planner's count of its matrix products, forward "
          f"and backward) against this core's float32 matrix product ({rate:.0f} GFLOP/s "
          f"at 1024 x 1024 x 1024); floor: that arithmetic at that rate, the least a step "
          f"can take without doing less of it:")
    print(f"{'size':<10}{'GFLOP':>8}{'fused GFLOP/s':>15}{'of the rate':>13}{'floor ms':>10}"
          f"{'floor/authors':>15}")
    for r in results:
        floor = 1000 * r["step_gflop"] / rate
        r["floor_ms"] = floor
        fa = (f"{floor / r['best']['authors']['ms']:15.3f}" if "authors" in r["best"]
              else f"{'-':>15}")
        print(f"{r['size']:<10}{r['step_gflop']:8.2f}{r['fused_gflop_per_s']:15.1f}"
              f"{r['fused_gflop_per_s'] / rate:13.0%}{floor:10.1f}{fa}")
    doc = {"format": "drillbook-cpu-step/1", "matmul_gflop_per_s": rate,
           "environment": environment("cpu"),
           "source": git_state(), "settings": {**vars(args), "authors": str(args.authors),
                                              "out": str(args.out),
                                              "omp": os.environ.get("OMP_NUM_THREADS")},
           "results": results}
    write_json(args.out, doc)
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
