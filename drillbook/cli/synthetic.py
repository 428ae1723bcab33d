"""``drillbook synthetic-rank``: the softmax bottleneck on a synthetic language whose
log-probability matrix has a known rank (chapter 1), without any corpus."""

from __future__ import annotations

import argparse

from ..validation import argument_type, integer
from .common import CommandError, positive_int, print_json, seed

__all__ = ["add_commands"]


def _cmd_synthetic_rank(args: argparse.Namespace) -> int:
    import torch

    from ..analysis import DRILL_TOL, SyntheticLanguage, fit_head, singular_values
    from ..heads import build_head

    if args.logit_rank > args.vocab:
        raise CommandError(f"--logit-rank ({args.logit_rank}) cannot exceed --vocab "
                           f"({args.vocab}): lower it or raise --vocab")
    if args.logit_rank > args.contexts:  # U rows have rank at most U: the rank asked is lost
        raise CommandError(f"--logit-rank ({args.logit_rank}) cannot exceed --contexts "
                           f"({args.contexts}): {args.contexts} context(s) give a matrix of "
                           f"rank at most {args.contexts}; lower it or raise --contexts")
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
        print_json({"language": repr(lang), "true_rank": true_rank, "fits": rows})
        return 0
    print(f"{lang}\ntrue rank of A (numpy tol): {true_rank}")
    print(f"{'d':>6} {'KL (nats)':>12} {'rank':>6} {'rank@tol=1':>11}")
    for r in rows:
        print(f"{r['d']:>6} {r['kl']:>12.5f} {r['rank_numpy_tol']:>6} {r['rank_drill_tol']:>11}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``synthetic-rank``."""
    p = sub.add_parser(
        "synthetic-rank",
        help="fit softmax heads of growing size to a synthetic language (chapter 1)",
        description="Fit softmax heads of dimension d to a synthetic language with a known "
                    "log-probability matrix; print the KL gap and the rank of each fit.",
    )
    p.add_argument("--contexts", type=positive_int, default=256, help="U (default 256)")
    p.add_argument("--vocab", type=argument_type(integer(minimum=2), int), default=64,
                   help="V, at least 2 (default 64)")
    p.add_argument("--logit-rank", type=positive_int, default=64,
                   help="rank r of the true logits, at most V (default 64)")
    p.add_argument("--dims", type=positive_int, nargs="+", default=[2, 8, 32],
                   help="head dimensions d to fit (default 2 8 32)")
    p.add_argument("--steps", type=positive_int, default=300, help="Adam steps per fit")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_synthetic_rank)
