"""``drillbook bench heads|model|step|sweep|targets``: what the output heads cost, as ratios
to a tied head measured in the same process (:mod:`drillbook.experiments.bench`), and what
a whole training step of a config's model costs (:mod:`drillbook.experiments.bench.step`).
Each mode is a subcommand with only its own flags; every report has the same ``mode`` as
its subcommand."""

from __future__ import annotations

import argparse
import functools
import logging
import sys

from .common import (
    add_overrides,
    check_output,
    list_in_help,
    positive_float,
    positive_int,
    writing,
)

__all__ = ["add_commands"]


def _measure(args: argparse.Namespace) -> dict:
    """What every mode passes on: device, repeats, warm-up, precision."""
    return {"device": args.device or "cpu", "repeats": args.repeats, "warmup": args.warmup,
            "precision": args.precision}


def _encoder(args: argparse.Namespace) -> dict:
    return {"overrides": args.set or [], "batch_size": args.batch_size, "bptt": args.bptt}


def _sweep(args: argparse.Namespace) -> dict:
    return {"d": args.d, "tokens": args.tokens, "decode_positions": args.decode_positions,
            "max_seconds": args.max_seconds}


def _names(args: argparse.Namespace) -> list[str]:
    """``--heads`` (default: every benchmark head), the tied baseline first."""
    from ..experiments import BENCH_HEADS

    names = args.heads or list(BENCH_HEADS)
    return names if "tied" in names else ["tied", *names]


def _bench_heads(args: argparse.Namespace) -> dict:
    from ..experiments import run_bench

    return run_bench(_names(args), args.sizes or ["ptb"], d=args.d, tokens=args.tokens,
                     **_measure(args))


def _bench_model(args: argparse.Namespace) -> dict:
    from ..experiments import run_model_bench

    return run_model_bench(_names(args), args.sizes or ["ptb"], encoder_config=args.config,
                           **_encoder(args), **_measure(args))


def _bench_step(args: argparse.Namespace) -> dict:
    from ..experiments import run_step_bench

    return run_step_bench(args.configs, steps=args.step or (), size=args.size,
                          rounds=args.rounds, clock=args.clock, **_encoder(args),
                          **_measure(args))


def _bench_sweep(args: argparse.Namespace) -> dict:
    from ..experiments import SWEEP_SIZES, vocab_sweep

    return vocab_sweep(args.vocab_sizes or SWEEP_SIZES, **_sweep(args), **_measure(args),
                       compile=args.compile)


def _bench_targets(args: argparse.Namespace) -> dict:
    from ..experiments import run_targets

    return run_targets(**_encoder(args), **_sweep(args), **_measure(args))


def _cmd_bench(args: argparse.Namespace) -> int:
    from ..experiments import format_report, write_report
    from ..experiments.bench.measure import log

    if args.out:
        check_output(args.out, "--out", folder=False)
    handler = logging.StreamHandler(sys.stderr)  # what is being measured, line by line
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    level = log.level
    log.setLevel(logging.WARNING if getattr(args, "quiet", False) else logging.INFO)
    try:
        report = args.bench(args)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    print(format_report(report))
    if args.out:
        with writing(args.out, "--out"):
            path = write_report(report, args.out)
        print(f"wrote {path}")
    return 0


# ------------------------------------------------------------------ flags
def _add_measure_flags(p: argparse.ArgumentParser) -> None:
    list_in_help(p.add_argument("--precision", default="fp32",
                                help="one of %(names)s (default fp32); bf16 autocasts "
                                     "forward and loss"),
                 "drillbook.experiments.bench.measure", "PRECISIONS")
    p.add_argument("--repeats", type=positive_int, default=5, help="timed calls (default 5)")
    p.add_argument("--warmup", type=positive_int, default=2,
                   help="untimed calls first (default 2)")
    p.add_argument("--device", help="cpu (default) or cuda")
    p.add_argument("--out", help="write the JSON report here (e.g. results/bench/cpu.json)")


def _add_head_choice(p: argparse.ArgumentParser) -> None:
    list_in_help(p.add_argument("--heads", nargs="+",
                                help="heads to time (default: all): %(names)s; the tied "
                                     "baseline is always measured"),
                 "drillbook.experiments", "BENCH_HEADS")
    list_in_help(p.add_argument("--sizes", nargs="+",
                                help="vocabulary sizes, one or more of %(names)s (default ptb)"),
                 "drillbook.experiments", "SIZES")


def _add_encoder_flags(p: argparse.ArgumentParser) -> None:
    add_overrides(p, "overrides of the encoder config (e.g. model.nhid=16)")
    p.add_argument("--batch-size", type=positive_int, help="default: the config's")
    p.add_argument("--bptt", type=positive_int, help="default: the config's")


def _add_feature_flags(p: argparse.ArgumentParser, d: int) -> None:
    p.add_argument("--d", type=positive_int, default=d, help=f"feature size (default {d})")
    p.add_argument("--tokens", type=positive_int, default=1400,
                   help="positions per step (default 1400 = 20 x 70)")


def _add_decode_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--decode-positions", type=positive_int,
                   help="positions per decoding call (default --tokens)")
    p.add_argument("--max-seconds", type=positive_float,
                   help="skip a head from the size where one step takes longer")


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``bench`` and its five modes."""
    bench = sub.add_parser(
        "bench", help="time output heads against a tied head",
        description="Mean forward+backward step time and evaluation time per token of "
                    "output heads, as ratios to a tied head measured in the same process; "
                    "memory autograd saves for backward (every device) and peak CUDA memory. "
                    "Choose what to measure: MODE --help describes each.")
    modes = bench.add_subparsers(dest="mode", metavar="MODE", required=True)
    # no abbreviated flags: `bench model ... --d 8` must not be read as --device 8
    mode = functools.partial(modes.add_parser, allow_abbrev=False)

    p = mode("heads", help="each head alone, on random features",
             description="Each output head alone on random features, at the "
                         "PTB / WikiText-2 / 50k vocabulary sizes.")
    _add_head_choice(p)
    _add_feature_flags(p, d=400)
    _add_measure_flags(p)
    p.set_defaults(bench=_bench_heads)

    p = mode("model", help="each head behind a config's encoder",
             description="Each output head behind the encoder of a language-model "
                         "config, a training step as the trainer takes it.")
    p.add_argument("config", metavar="CONFIG",
                   help="a language-model config (`drillbook configs`), e.g. ptb/awd-lstm")
    _add_head_choice(p)
    _add_encoder_flags(p)
    _add_measure_flags(p)
    p.set_defaults(bench=_bench_model)

    p = mode("step", help="a whole training step of configs' models",
             description="A whole training step of each config's model (encoder, head, "
                         "loss, AR/TAR, backward, gradient clipping, optimiser step) on "
                         "random word ids, the configs (and step functions) interleaved "
                         "in one process; mean time per step and ratio to the first.")
    p.add_argument("configs", metavar="CONFIG", nargs="+",
                   help="language-model configs (`drillbook configs`), e.g. ptb/awd-lstm "
                        "ptb/awd-lstm-drill; the first is the baseline")
    p.add_argument("--step", action="append", metavar="MODULE:FUNCTION",
                   help="a step function step(model, optimizer, x, y, train, amp) to time "
                        "(repeat to compare several; default the trainer's, "
                        "drillbook.experiments.bench.step:trainer_step)")
    list_in_help(p.add_argument("--size", default="ptb",
                                help="vocabulary size, one of %(names)s (default ptb)"),
                 "drillbook.experiments", "SIZES")
    p.add_argument("--rounds", type=positive_int, default=3,
                   help="timed blocks of --repeats steps per contender, interleaved "
                        "(default 3)")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall (default) or cpu: the process's CPU time, which other work "
                        "on a shared CPU disturbs less (CPU device only)")
    _add_encoder_flags(p)
    _add_measure_flags(p)
    p.set_defaults(bench=_bench_step)

    p = mode("sweep", help="vMF vs softmax as the vocabulary grows",
             description="vMF vs softmax at growing vocabulary sizes: training "
                         "step, decoding, memory.")
    p.add_argument("--vocab-sizes", type=positive_int, nargs="+",
                   help="sizes (default 10000 25000 50000 ... 800000)")
    _add_feature_flags(p, d=1024)
    _add_decode_flags(p)
    _add_measure_flags(p)
    p.add_argument("--compile", action="store_true",
                   help="both heads' losses through torch.compile (compiled in the first, "
                        "untimed step; such a sweep does not count for the cost targets)")
    p.set_defaults(bench=_bench_sweep)

    p = mode("targets", help="measure and check the cost targets",
             description="Measure what the cost targets need (tied, DRILL and "
                         "MoS behind the AWD-LSTM encoders; the vMF sweep at "
                         "V = 50,000) and print whether each is met.")
    _add_encoder_flags(p)
    _add_feature_flags(p, d=1024)
    _add_decode_flags(p)
    _add_measure_flags(p)
    p.set_defaults(bench=_bench_targets)

    for p in modes.choices.values():
        p.set_defaults(func=_cmd_bench)
