"""The fused output loss against the plain path on one device (made for a GPU): the time
and the peak memory of a training step, fused over plain.

Two kinds of measurement, each contender measured in alternating rounds (plain, fused,
plain, fused, ...) and its fastest round kept:

* ``head``: every head of the benchmark that has a distribution over words (vMF has none)
  alone on random features, ``d = 400``, at PTB's vocabulary with 20 x 70 positions and at
  WikiText-2's with 80 x 70 (the AWD-LSTM's batches), forward, loss and backward
  (:func:`drillbook.experiments.bench.heads.head_cost`);
* ``step``: the paper-size AWD-LSTM's training step (``ptb/awd-lstm``'s encoder, batch
  20 x 70) with the tied, DRILL-4, MoS-15 and DOC heads at PTB's vocabulary, and the tied
  and MoS-15 heads at WikiText-2's (``wt2/awd-lstm``'s encoder, batch 80 x 70)
  (:func:`drillbook.experiments.bench.model.model_cost`).

Peak memory is CUDA's peak during the training steps above what was allocated before them
(weights, inputs); on a CPU there is none and the column is empty.

    python tools/fused_gpu.py --device cuda --out fused-gpu.json
    python tools/fused_gpu.py --tiny --device cpu     # checks that it runs (means nothing)
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # drillbook from this checkout, installed or not

from drillbook.experiments.bench.heads import (  # noqa: E402
    BENCH_HEADS,
    SIZES,
    bench_head,
    head_cost,
)
from drillbook.experiments.bench.model import model_cost  # noqa: E402
from drillbook.heads import HEADS  # noqa: E402

#: (vocabulary size name, positions per step) of the heads alone
HEAD_SHAPES = (("ptb", 20 * 70), ("wt2", 80 * 70))
#: (head, vocabulary size name, batch, encoder config) of the whole paper-size step
STEPS = (("tied", "ptb", 20, "ptb/awd-lstm"), ("drill-4", "ptb", 20, "ptb/awd-lstm"),
         ("mos-15", "ptb", 20, "ptb/awd-lstm"), ("doc-15+5", "ptb", 20, "ptb/awd-lstm"),
         ("tied", "wt2", 80, "wt2/awd-lstm"), ("mos-15", "wt2", 80, "wt2/awd-lstm"))
#: a tiny run's sizes (a CPU rehearsal)
TINY_STEP = ["model.emsize=16", "model.nhid=16", "model.nlayers=2"]


def _distribution_heads() -> list[str]:
    return [name for name, (kind, _) in BENCH_HEADS.items() if HEADS[kind].is_distribution]


def _best(measure, rounds: int) -> dict[str, dict | None]:
    """``measure(fused)`` for plain and fused in alternating rounds; each one's fastest
    (None: it ran out of the device's memory)."""
    import torch

    best: dict[str, dict | None] = {}
    for _ in range(rounds):
        for path, fused in (("plain", False), ("fused", True)):
            if path in best and best[path] is None:
                continue
            gc.collect()  # the last measurement's graph and buffers, before this one's peak
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            try:
                row = measure(fused)
            except torch.OutOfMemoryError:  # the next measurement empties the cache
                best[path] = None
                continue
            if path not in best or row["train_step_s"] < best[path]["train_step_s"]:
                best[path] = row
    return best


def _record(what: str, name: str, size: str, tokens: int, best: dict[str, dict]) -> dict:
    plain, fused = best["plain"], best["fused"]
    out = {"what": what, "name": name, "size": size, "vocab_size": SIZES[size],
           "tokens": tokens}
    for path, row in best.items():  # None: out of memory
        out[f"{path}_ms"] = None if row is None else 1000 * row["train_step_s"]
        out[f"{path}_peak_bytes"] = None if row is None else row["peak_bytes"]
    both = plain is not None and fused is not None
    out["time_ratio"] = fused["train_step_s"] / plain["train_step_s"] if both else None
    out["memory_ratio"] = (fused["peak_bytes"] / plain["peak_bytes"]
                           if both and plain["peak_bytes"] else None)
    return out


def run(device: str, rounds: int, tiny: bool, parts: str = "all") -> list[dict]:
    rows = []
    repeats, warmup = (1, 1) if tiny else (5, 2)
    heads = _distribution_heads()
    shapes = (("ptb", 64),) if tiny else HEAD_SHAPES
    if parts == "steps":
        shapes = ()
    d = 8 if tiny else 400
    for size, tokens in shapes:
        for name in heads:
            kind, options = bench_head(name, d)
            best = _best(lambda fused, kind=kind, options=options, size=size, tokens=tokens:
                         head_cost(kind, vocab_size=SIZES[size], d=d, tokens=tokens,
                                   device=device, repeats=repeats, warmup=warmup,
                                   fused=fused, **options).to_dict(), rounds)
            rows.append(_record("head", name, size, tokens, best))
            print(_line(rows[-1]), flush=True)
    steps = (("tied", "ptb", 2, "ptb/awd-lstm"), ("mos-15", "wt2", 2, "wt2/awd-lstm")
             ) if tiny else STEPS
    for name, size, batch, encoder in steps:
        settings = dict(encoder_config=encoder, batch_size=batch,
                        device=device, repeats=repeats, warmup=warmup)
        if tiny:
            settings.update(overrides=TINY_STEP, bptt=5, eval_batch_size=2)
        best = _best(lambda fused, name=name, size=size, settings=settings:
                     model_cost(name, size, fused=fused, **settings).to_dict(), rounds)
        bptt = next(row["bptt"] for row in best.values() if row is not None)
        rows.append({**_record("step", name, size, batch * bptt, best), "encoder": encoder})
        print(_line(rows[-1]), flush=True)
    return rows


def _mib(n: int | None) -> str:
    return f"{n / 2**20:10.0f}" if n else f"{'-':>10}"


def _number(x: float | None, width: int, missing: str = "-") -> str:
    return f"{x:{width}.2f}" if x is not None else f"{missing:>{width}}"


def _line(r: dict) -> str:
    """One row of the printed table (``OOM``: that path ran out of the device's memory)."""
    return (f"{r['what']:<5}{r['name']:<20}{r['size']:<5}{r['tokens']:>6}"
            f"{_number(r['plain_ms'], 10, 'OOM')}{_number(r['fused_ms'], 10, 'OOM')}"
            f"{_number(r['time_ratio'], 8)}{_mib(r['plain_peak_bytes'])}"
            f"{_mib(r['fused_peak_bytes'])}{_number(r['memory_ratio'], 8)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternating rounds of plain and fused (default 2)")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes: a rehearsal")
    parser.add_argument("--parts", choices=("all", "steps"), default="all",
                        help="all (default), or only the whole steps")
    parser.add_argument("--out", type=Path, help="write the rows here as JSON")
    args = parser.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("fused_gpu: no CUDA device here; pass --device cpu (with --tiny to rehearse)",
              file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"{'':<5}{'head':<20}{'V':<5}{'pos':>6}{'plain ms':>10}{'fused ms':>10}"
          f"{'ratio':>8}{'plain MiB':>10}{'fused MiB':>10}{'ratio':>8}")
    start = time.monotonic()
    rows = run(args.device, args.rounds, args.tiny, args.parts)
    device = (torch.cuda.get_device_name() if args.device.startswith("cuda")
              else "cpu")
    report = {"device": device, "torch": torch.__version__, "tf32": False,
              "rounds": args.rounds, "tiny": args.tiny, "parts": args.parts,
              "seconds": round(time.monotonic() - start, 1), "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
