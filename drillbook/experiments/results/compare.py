"""The papers' numbers next to ours, table by table, and the learning curves behind ours.

:func:`table_rows` lists *every* row of a reproduction table, run or not: the paper's
numbers come from :mod:`drillbook.papers` through the keys each row names (the main run's
and, where the paper fine-tunes, the fine-tuned run's), ours from the committed result
files. A row nobody has run yet has ``None`` for our numbers, never a made-up one;
:func:`format_rows` turns the rows into strings for display, with a dash for every gap.
:func:`plot_curves` draws what the result files recorded epoch by epoch,
:func:`last_change` and :func:`always_falls` read those curves, :func:`replay_rule` asks
where another stopping rule would have ended them, :func:`cpu_tables` names
the tables sized for a CPU, and :func:`full_command` prints the command that runs a table
to the end.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...train.plateau import PlateauRule, plateau_epoch
from ...validation import check_choice
from ..tables import TABLES
from .files import load_results, result_precision
from .format import fmt

__all__ = ["always_falls", "cpu_tables", "format_rows", "full_command",
           "last_change", "plot_curves", "ratios_to", "replay_rule", "table_rows"]

def format_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str],
                digits: int = 2) -> list[dict[str, str]]:
    """``columns`` of each row (from :func:`table_rows`) as display strings: numbers with
    ``digits`` decimals, a dash where a row has no value (not run, or no paper number)."""
    return [{c: fmt(r.get(c), digits) for c in columns} for r in rows]


def table_rows(table: str, folder: str | Path = "results",
               docs: Sequence[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every row of ``table`` with the papers' numbers and ours (``None`` where missing):
    ours from the result files in ``folder``, or from ``docs`` (a plan's windows read as
    one table, :func:`~drillbook.experiments.results.gpu_union`: each row's first seed).

    Returns:
        one dict per row, in the table's order:

        * ``row``, ``config``, ``paper_record`` (the keys compared with the main run),
          ``paper_finetuned_record`` (the key compared with the fine-tuned run, or None),
          ``paper_source``;
        * the papers' numbers: ``paper_valid``, ``paper_test`` (perplexity, or BLEU for
          translation rows) for the main run, ``paper_finetuned_valid`` and
          ``paper_finetuned_test`` after fine-tuning, and every other value of the main
          run's records as ``paper_<metric>`` (``paper_seconds_per_epoch``,
          ``paper_ratio_to_tied``, ``paper_rank``, ``paper_rank_tol_1``, ...) and of the
          fine-tuned record as ``paper_finetuned_<metric>`` (``paper_finetuned_params_m``);
        * ours: ``valid``, ``test``, ``status``, ``epochs_done``, ``budget_minutes``,
          ``wall_seconds``, ``device``, ``precision``, every other metric under its own
          name, ``curve``; after fine-tuning ``finetuned_valid``, ``finetuned_test``,
          ``finetuned_status``, ``finetuned_epochs_done``, ``finetuned_lr`` and
          ``finetuned_curve``; after dynamic evaluation of the fine-tuned run
          ``dynamic_valid`` and ``dynamic_test``, beside the paper's
          ``paper_dynamic_valid`` and ``paper_dynamic_test``.

    Raises:
        ConfigError: unknown table.
        ResultFileError: an invalid result file.
    """
    check_choice(table, sorted(TABLES), "table")
    ours: dict[str, dict[str, Any]] = {}
    for d in docs if docs is not None else load_results(folder):
        if d["table"] == table:
            ours.setdefault(d["row"], d)
    out = []
    for row in TABLES[table]:
        key = row.task.metric_key
        valid, test = f"val_{key}", f"test_{key}"
        paper, tuned = row.paper_values("main"), row.paper_values("finetuned")
        dynamic = row.paper_values("dynamic")
        entry: dict[str, Any] = {
            "row": row.name, "config": row.config, "paper_record": list(row.paper),
            "paper_finetuned_record": row.paper_finetuned,
            "paper_source": "; ".join(row.paper_sources()) or None,
            "paper_valid": paper.get(valid), "paper_test": paper.get(test),
            "paper_finetuned_valid": tuned.get(valid), "paper_finetuned_test": tuned.get(test),
            "paper_dynamic_valid": dynamic.get(valid), "paper_dynamic_test": dynamic.get(test),
            **{f"paper_{k}": v for k, v in paper.items() if k not in (valid, test)},
            **{f"paper_finetuned_{k}": v for k, v in tuned.items() if k not in (valid, test)},
        }
        doc = ours.get(row.name)
        metrics = doc["metrics"] if doc else {}
        entry.update({
            "valid": metrics.get(valid), "test": metrics.get(test),
            "status": doc["status"] if doc else None,
            "epochs_done": doc["epochs_done"] if doc else None,
            "budget_minutes": doc["budget_minutes"] if doc else None,
            "wall_seconds": doc["wall_seconds"] if doc else None,
            "device": doc["device"] if doc else None,
            "precision": result_precision(doc) if doc else None,
            **{k: v for k, v in metrics.items() if k not in (valid, test)},
            "curve": doc["curve"] if doc else [],
        })
        block = doc.get("finetuned") if doc else None
        entry.update({
            "finetuned_valid": block["metrics"].get(valid) if block else None,
            "finetuned_test": block["metrics"].get(test) if block else None,
            "finetuned_status": block["status"] if block else None,
            "finetuned_epochs_done": block["epochs_done"] if block else None,
            "finetuned_lr": block["lr"] if block else None,
            "finetuned_curve": block["curve"] if block else [],
        })
        dyn = doc.get("dynamic") if doc else None
        entry.update({"dynamic_valid": dyn["metrics"].get(valid) if dyn else None,
                      "dynamic_test": dyn["metrics"].get(test) if dyn else None})
        out.append(entry)
    return out


def ratios_to(rows: Sequence[dict[str, Any]], baseline: str,
              key: str = "seconds_per_epoch") -> dict[str, float | None]:
    """``row[key] / baseline_row[key]`` for every row (None where either is missing)."""
    base = next((r.get(key) for r in rows if r["row"] == baseline), None)
    return {r["row"]: (r[key] / base if base and r.get(key) is not None else None)
            for r in rows}


def cpu_tables() -> tuple[str, ...]:
    """The tables sized for a CPU (:attr:`~drillbook.experiments.tables.Table.device`
    ``cpu``: a row trains in minutes, or, in the laptop plans, to its plateau in an hour or
    a few on one core). Every other table is sized for a GPU: the papers' AWD-LSTM configs
    (hours to days per row), the translation tables on the full Multi30k, and the GPU
    windows' plans."""
    return tuple(name for name, table in TABLES.items() if table.device == "cpu")


def _points(curve: Sequence[dict[str, Any]], metric: str) -> list[float]:
    return [float(p[metric]) for p in curve
            if p.get(metric) is not None and math.isfinite(p[metric])]


def last_change(curve: Sequence[dict[str, Any]], metric: str = "val_ppl") -> float | None:
    """The relative change of ``metric`` over the last epoch of a learning curve,
    ``(y_last - y_prev) / y_prev`` (negative while a perplexity still falls); None when the
    curve has fewer than two points with the metric."""
    y = _points(curve, metric)
    return (y[-1] - y[-2]) / y[-2] if len(y) >= 2 else None


def always_falls(curve: Sequence[dict[str, Any]], metric: str = "val_ppl") -> bool:
    """Whether ``metric`` fell at every epoch of the curve (strictly; True for fewer than
    two points, which have nothing to contradict it)."""
    y = _points(curve, metric)
    return all(b < a for a, b in itertools.pairwise(y))


def replay_rule(docs: Sequence[dict[str, Any]], rule: PlateauRule,
                metric: str) -> list[dict[str, Any]]:
    """Where ``rule`` would have ended each run, replayed on the curve its result file
    logged (``metric`` after every epoch): the question a change of stopping rule raises,
    answered from runs that trained past the point it names.

    Returns:
        one dict per document, in order: ``row``, ``seed``, ``ends_after`` (the epoch
        after which ``rule`` would have stopped the run; None if it never would),
        ``best_then`` (the best value up to that epoch, or over the whole curve if the
        rule never fires: the lowest perplexity, or the highest BLEU for a rule with
        ``higher_is_better``), ``epochs`` (the epochs the run trained) and ``best`` (its
        best over all of them).

    Raises:
        ValueError: a run logged no ``metric``.
    """
    best_of = max if rule.higher_is_better else min
    out = []
    for d in docs:
        logged = [float(p[metric]) for p in d["curve"] if p.get(metric) is not None]
        if not logged:
            raise ValueError(f"{d['row']} (seed {d['seed']}) logged no {metric!r} after any "
                             f"epoch; replay a metric its curve has")
        ends = plateau_epoch(logged, rule)
        out.append({"row": d["row"], "seed": d["seed"], "ends_after": ends,
                    "best_then": best_of(logged[:ends]), "epochs": d["epochs_done"],
                    "best": best_of(logged)})
    return out


def full_command(table: str, *, colab: bool = False) -> str:
    """The command that runs ``table`` to the end (no budget), resuming interrupted rows.

    With ``colab=True`` the run folders go to Google Drive, so a disconnected session
    loses at most one checkpoint interval: run the same cell again after reconnecting.
    """
    check_choice(table, sorted(TABLES), "table")
    command = f"drillbook reproduce {table}"
    if colab:
        command += " --runs /content/drive/MyDrive/drillbook/runs" \
                   " --out /content/drive/MyDrive/drillbook/results"
    return command


def plot_curves(rows: Sequence[dict[str, Any]], *, metric: str = "val_ppl", ax=None,
                x: str = "epoch", log_y: bool | None = None, title: str | None = None,
                colors: dict[str, str] | None = None):
    """Learning curves of the rows that have one (the output of :func:`table_rows`).

    Each line has its head's colour (:func:`drillbook.plotting.head_color`); rows of one
    head (DRILL at several depths) differ by line style. The legend sits outside the axes,
    to the right, so that it covers no curve.

    Args:
        rows: dicts with ``row`` and ``curve`` (a list of per-epoch points).
        metric: the curve field on the y axis (``val_ppl``, ``train_ppl``, ``val_bleu``).
        x: ``epoch`` or ``elapsed_seconds``.
        log_y: log scale (default: on for perplexities), with plain tick labels
            (:func:`drillbook.plotting.tidy_log_axis`).
        colors: row -> colour, in place of the head's (e.g.
            :func:`drillbook.plotting.family_colors`, shades for rows of one head).

    Returns:
        the matplotlib axes.
    """
    import matplotlib.pyplot as plt

    from ...plotting import head_color, label_log_range, tidy_log_axis

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.6))
    styles = ("-", "--", ":", "-.")
    used: dict[str | None, int] = {}
    drawn, values = 0, []
    for r in rows:
        points = [p for p in r.get("curve", []) if p.get(metric) is not None
                  and math.isfinite(p[metric]) and p.get(x) is not None]
        if points:
            try:
                color = (colors or {}).get(r["row"]) or head_color(r["row"])
            except KeyError:  # a row that names no head: matplotlib's next colour
                color = None
            style = styles[used.get(color, 0) % len(styles)]
            used[color] = used.get(color, 0) + 1
            ax.plot([p[x] for p in points], [p[metric] for p in points], marker="o",
                    markersize=3, color=color, linestyle=style, label=r["row"])
            values += [p[metric] for p in points]
            drawn += 1
    ax.set_xlabel({"epoch": "epoch", "elapsed_seconds": "wall-clock seconds"}.get(x, x))
    if x == "epoch":  # whole epochs only: no tick at 1.5
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(metric.replace("_", " "))
    if log_y if log_y is not None else metric.endswith("ppl"):
        ax.set_yscale("log")
        label_log_range(ax, values)
        tidy_log_axis(ax)
    if title:
        ax.set_title(title)
    if drawn:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.text(0.5, 0.5, "no result files yet", ha="center", va="center",
                transform=ax.transAxes)
    return ax
