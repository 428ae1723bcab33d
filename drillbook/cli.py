"""The ``drillbook`` command.

    drillbook info                  versions, device, profile
    drillbook heads                 the output heads and their equations
    drillbook synthetic-rank ...    the softmax bottleneck on a synthetic language

``drillbook COMMAND --help`` describes each command.
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["main"]


def _cmd_info(args: argparse.Namespace) -> int:
    import torch

    from . import __version__
    from .runtime import default_device, resolve_profile

    dev = default_device()
    info = {
        "drillbook": __version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": str(dev),
        "profile": resolve_profile(dev).name,
    }
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for k, v in info.items():
            print(f"{k:>10}: {v}")
    return 0


def _cmd_heads(args: argparse.Namespace) -> int:
    from .heads import HEADS

    for kind, cls in HEADS.items():
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        print(f"{kind:>10}  {doc}")
    return 0


def _cmd_synthetic_rank(args: argparse.Namespace) -> int:
    import torch

    from .analysis import DRILL_TOL, SyntheticLanguage, fit_head, singular_values
    from .heads import build_head

    lang = SyntheticLanguage(args.contexts, args.vocab, args.logit_rank, seed=args.seed)
    true_rank = singular_values(lang.log_probs).rank()
    rows = []
    for d in args.dims:
        torch.manual_seed(args.seed)
        head = build_head("softmax", vocab_size=args.vocab, d_hidden=d).double()
        fit = fit_head(lang, head, steps=args.steps, seed=args.seed)
        with torch.no_grad():
            spec = singular_values(head.log_prob(fit.hidden))
        rows.append({"d": d, "kl": fit.kl, "rank_numpy_tol": spec.rank(),
                     "rank_drill_tol": spec.rank(DRILL_TOL)})
    if args.json:
        print(json.dumps({"language": repr(lang), "true_rank": true_rank, "fits": rows},
                         indent=2))
        return 0
    print(f"{lang}\ntrue rank of A (numpy tol): {true_rank}")
    print(f"{'d':>6} {'KL (nats)':>12} {'rank':>6} {'rank@tol=1':>11}")
    for r in rows:
        print(f"{r['d']:>6} {r['kl']:>12.5f} {r['rank_numpy_tol']:>6} {r['rank_drill_tol']:>11}")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="drillbook",
        description="Output layers for neural language generation: tied, bilinear, joint, "
                    "DRILL, MoS, DOC and vMF heads, and the tools of the drillbook textbook.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("info", help="print versions, device and profile")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("heads", help="list the output heads")
    p.set_defaults(func=_cmd_heads)

    p = sub.add_parser(
        "synthetic-rank",
        help="fit softmax heads of growing size to a synthetic language (chapter 1)",
        description="Fit softmax heads of dimension d to a synthetic language with a known "
                    "log-probability matrix; print the KL gap and the rank of each fit.",
    )
    p.add_argument("--contexts", type=_positive_int, default=256, help="U (default 256)")
    p.add_argument("--vocab", type=_positive_int, default=64, help="V (default 64)")
    p.add_argument("--logit-rank", type=_positive_int, default=64,
                   help="rank r of the true logits (default 64)")
    p.add_argument("--dims", type=_positive_int, nargs="+", default=[2, 8, 32],
                   help="head dimensions d to fit (default 2 8 32)")
    p.add_argument("--steps", type=_positive_int, default=300, help="Adam steps per fit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_synthetic_rank)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "synthetic-rank" and args.logit_rank > args.vocab:
        parser.error(f"--logit-rank ({args.logit_rank}) cannot exceed --vocab ({args.vocab})")
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
