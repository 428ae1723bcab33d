"""``drillbook reproduce`` and ``report``: train the rows of a paper table at a budget, and
turn the result files into Markdown tables and learning-curve figures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..atomic import write_atomic
from ..errors import MissingFileError, MissingPackageError, ResultFileError
from .common import add_overrides, list_in_help, positive_float, positive_int

__all__ = ["add_commands"]


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from ..experiments import reproduce
    from ..train.distributed import distributed

    with distributed() as rank:  # under torchrun: this is one process of several
        paths = reproduce(args.table, rows=args.rows, budget_minutes=args.budget_minutes,
                          out=args.out, runs=args.runs, device=args.device,
                          overrides=args.set, max_eval_tokens=args.max_eval_tokens,
                          progress=False if args.quiet else None, seed=args.seed)
    if rank:  # rank 0 wrote the result files and reports them
        return 0
    for path in paths:
        doc = json.loads(Path(path).read_text())
        metrics = ", ".join(f"{k} {v:.2f}" for k, v in doc["metrics"].items()
                            if isinstance(v, float))
        print(f"{doc['row']}: {doc['status']} after {doc['epochs_done']} epoch(s); "
              f"{metrics or 'no finished epoch yet'} -> {path}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from ..experiments import load_results, render_report

    folder = Path(args.results)
    if not folder.is_dir():
        raise MissingFileError(f"--results {folder}: no such folder; write result files "
                               f"with `drillbook reproduce TABLE --out {folder}`, or pass "
                               f"--results FOLDER where they are")
    if not load_results(folder):  # also checks every file, naming a bad one
        raise ResultFileError(f"no result files under {folder} (expected "
                              f"{folder}/<table>/<row>.json); run `drillbook reproduce "
                              f"TABLE --out {folder}` first")
    text = render_report(folder)
    if args.out:
        write_atomic(args.out, text + "\n")
        print(f"wrote {args.out}")
    else:
        print(text)
    if args.figures:
        for path in _curve_figures(args.results, Path(args.figures)):
            print(f"wrote {path}")
    return 0


def _curve_figures(results: str, folder: Path) -> list[Path]:
    """One PNG of validation curves per table that has result files."""
    try:
        import matplotlib
    except ImportError:
        raise MissingPackageError("--figures draws with matplotlib, which is not installed: "
                                  "`pip install matplotlib` (or drillbook[notebooks])"
                                  ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..experiments import TABLES, load_results, plot_curves, table_rows

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for table in sorted({d["table"] for d in load_results(results)} & set(TABLES)):
        rows = table_rows(table, results)
        bleu = any(p.get("val_bleu") is not None for r in rows for p in r["curve"])
        ax = plot_curves(rows, metric="val_bleu" if bleu else "val_ppl", title=table)
        path = folder / f"{table}.png"
        ax.figure.tight_layout()
        ax.figure.savefig(path, dpi=120)
        plt.close(ax.figure)
        written.append(path)
    return written


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``reproduce`` and ``report``."""
    p = sub.add_parser("reproduce", help="train the rows of a paper table at a budget",
                       description="Train (or resume) each row of a paper table into "
                                   "RUNS/<table>/<row>/ and write OUT/<table>/<row>.json "
                                   "with config, seed, commit, device, time and metrics.")
    list_in_help(p.add_argument("table", help="a paper table: %(names)s"),
                 "drillbook.experiments", "TABLES")
    p.add_argument("--rows", nargs="+", help="only these rows")
    p.add_argument("--budget-minutes", type=positive_float,
                   help="minutes per row for this call (rerun to continue)")
    p.add_argument("--out", default="results", help="results folder (default results)")
    p.add_argument("--runs", default="runs", help="run folders (default runs; not committed)")
    add_overrides(p, "overrides for every row")
    p.add_argument("--max-eval-tokens", type=positive_int, help="cap the test evaluation")
    p.add_argument("--seed", type=int,
                   help="train with this seed; a seed other than the config's writes "
                        "OUT/<table>/seed-<N>/<row>.json (the spread across seeds)")
    p.add_argument("--device")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_cmd_reproduce,
                   interrupted="; run the same command again to continue each row from its "
                               "last checkpoint")

    p = sub.add_parser("report", help="Markdown tables from the result files")
    p.add_argument("--results", default="results")
    p.add_argument("--out", help="write here instead of printing (e.g. results/REPORT.md)")
    p.add_argument("--figures", help="also write one learning-curve PNG per table here")
    p.set_defaults(func=_cmd_report)
