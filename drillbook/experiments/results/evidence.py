"""What the chapters read from result files: the rows of a table as a GPU window or the
CPU runs left them, and the papers' kinds of figure drawn from them.

Every chapter has a section with its paper's central figure. It reads result files only
(never a checkpoint): :func:`plan_results` reads a GPU plan's rows from the windows that
ran it, as one table (``drillbook/results/gpu/<window>/``, see
:mod:`drillbook.experiments.run.plans`),
and while no window has, the chapter shows a committed CPU table instead and prints
:func:`missing_evidence`, the one command that would produce the real thing. The
functions below turn result files into the rows of those figures: ranks
(:func:`rank_rows`), DRILL Fig. 3's relative loss per frequency band
(:func:`band_differences`), validation curves (:func:`curve_points`), mixture usage
(:func:`mixture_usage`) and rare-word F1 (:func:`f1_rows`); :func:`plot_band_differences`
and :func:`plot_f1` draw the two that no other module draws.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import MissingFileError
from ...metrics import log_interpolate
from ...plotting import family_colors, head_color, head_kind
from ..tables import table_of
from .files import (
    FINAL_STATUSES,
    READABLE_FORMATS,
    book_results,
    gpu_results,
    gpu_union,
    load_results,
    read_result,
    result_task,
    trained_on,
)
from .seeds import check_same_code

__all__ = ["MIN_BAND_TYPES", "band_differences", "committed_results", "curve_points",
           "f1_rows", "missing_evidence", "mixture_usage", "plan_folder", "plan_results",
           "plan_runs", "plot_band_differences", "plot_f1", "rank_rows", "table_results",
           "val_at_epoch", "val_at_updates", "window_rows"]

#: a frequency band of fewer word types than this is greyed out in the book's figures of
#: DRILL's Fig. 3: its per-word mean moves by percents with any one word
MIN_BAND_TYPES = 100


def table_results(table: str, folder: str | Path | None = None, *,
                  seeds: bool = False) -> list[dict[str, Any]]:
    """The result files of ``table`` in a results folder (default: the book's), in the
    table's row order; with ``seeds``, also those of its seed folders
    (``<table>/seed-<N>/<row>.json``). Refused when its rows were trained by code that
    computes differently (:func:`~.seeds.check_same_code`)."""
    folder = Path(folder) if folder is not None else book_results()
    docs = [d for d in load_results(folder) if d["table"] == table]
    if seeds:
        docs += [read_result(p) for p in sorted((folder / table).glob("seed-*/*.json"))]
    check_same_code(table, docs)
    order = table_of(table).order
    return sorted(docs, key=lambda d: (order(d["row"]), d["seed"]))


def plan_runs(table: str, folder: str | Path | None = None) -> list[dict[str, Any]]:
    """Every run of a table trained seed by seed in sittings (the laptop plans), as the
    result files in a results folder (default: the book's) left it, in the table's order:
    ``row``, ``seed``, ``status``, ``final`` (its stopping rule or its epoch cap ended it:
    ``status`` in ``FINAL_STATUSES``), ``epochs``, ``valid`` (the best validation metric:
    perplexity, or BLEU for translation), ``test``, ``minutes`` (of training, on its
    device), ``minutes_per_epoch`` and ``device``: ``cpu`` or ``gpu``, the kind of device
    its sittings trained on (``cpu+gpu`` for a run that moved between them; its minutes
    then mean little)."""
    out = []
    for d in table_results(table, folder, seeds=True):
        key = result_task(d).metric_key
        metrics = d["metrics"]
        epochs = d["epochs_done"]
        minutes = d["wall_seconds"] / 60
        out.append({"row": d["row"], "seed": d["seed"], "status": d["status"],
                    "final": d["status"] in FINAL_STATUSES, "epochs": epochs,
                    "valid": metrics.get(f"val_{key}"), "test": metrics.get(f"test_{key}"),
                    "minutes": minutes,
                    "minutes_per_epoch": minutes / epochs if epochs else None,
                    "device": trained_on(d)})
    return out


def committed_results(folder: str | Path | None = None, *,
                      task: str | None = None) -> list[dict[str, Any]]:
    """Every result file in a results folder (default: the book's), at any depth: the
    tables' rows, their seed folders and the GPU windows' rows, each validated, sorted by
    path; with ``task`` (``"language-model"``, ``"translation"``), only the rows of that
    task's configs. Benchmark reports and other JSON files are not result files and are
    skipped."""
    folder = Path(folder) if folder is not None else book_results()
    docs = []
    for path in sorted(folder.rglob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue  # not JSON, so not a result file
        if isinstance(doc, dict) and doc.get("format") in READABLE_FORMATS:
            docs.append(read_result(path))
    if task is not None:
        docs = [d for d in docs if result_task(d).name == task]
    return docs


def plan_folder(table: str, results: str | Path | None = None,
                precision: str = "fp32") -> Path | None:
    """The newest GPU window of ``precision`` that holds result files of ``table``
    (``<results>/gpu/<window>-<precision>/``; ``results`` defaults to the book's
    folder), or None while no window has run it."""
    try:
        return gpu_results(precision, table=table, results=results)
    except MissingFileError:
        return None


def plan_results(table: str, results: str | Path | None = None,
                 precision: str = "fp32") -> list[dict[str, Any]]:
    """The rows of a GPU plan's ``table`` (seeds included) that the committed windows of
    ``precision`` trained, read as one table (:func:`~.files.gpu_union`: for each row and
    seed the newest final run, else the newest; each names its ``window``), in the
    table's order; an empty list while no window has run it. Refused when its rows were
    trained by code that computes differently (:func:`~.seeds.check_same_code`)."""
    docs = gpu_union(table, precision, results=results)
    check_same_code(table, docs)
    return docs


def missing_evidence(table: str) -> str:
    """One sentence for a chapter whose GPU plan has not run yet: what is missing and the
    command that produces it."""
    plan = next(iter(table_of(table).plans), None)
    command = (f"`make evidence MINUTES=9 OUT=evidence` on a GPU (the window's one command, "
               f"whose plans include {plan.name})" if plan
               else f"`drillbook reproduce {table}`")
    return (f"No GPU run of the {table} table is committed yet; {command} produces it "
            f"(the README's GPU section says how it reaches the book).")


def window_rows(docs: Sequence[dict[str, Any]], metric: str = "ppl") -> list[dict[str, Any]]:
    """What each row of a window reached, for a chapter to say before it draws from them:
    ``row``, ``status``, ``epochs``, ``last_val`` (the validation ``metric`` after its last
    epoch, from its curve), ``test`` (its test metric, None where none was written: a row
    the deadline stopped first) and ``pending`` (analyses it had not finished)."""
    out = []
    for d in docs:
        curve = curve_points(d, f"val_{metric}")
        out.append({"row": d["row"], "status": d["status"], "epochs": d["epochs_done"],
                    "last_val": curve[-1]["value"] if curve else None,
                    "test": d["metrics"].get(f"test_{metric}"),
                    "pending": d.get("pending", [])})
    return out


def val_at_epoch(docs: Sequence[dict[str, Any]], epoch: int, metric: str = "ppl"
                 ) -> dict[str, float]:
    """Row -> its validation ``metric`` after ``epoch`` epochs, for the rows whose curve
    reaches it: rows of one window compared after the same training, like with like, when
    the deadline stopped them at different points."""
    out = {}
    for d in docs:
        at = [p["value"] for p in curve_points(d, f"val_{metric}") if p["epoch"] == epoch]
        if at:
            out[d["row"]] = at[0]
    return out


def val_at_updates(docs: Sequence[dict[str, Any]], updates: float, metric: str = "ppl"
                   ) -> dict[str, float]:
    """Row -> its validation ``metric`` after ``updates`` training steps, read on its curve
    (each epoch's ``step``) and interpolated in log space between two epochs
    (:func:`drillbook.metrics.log_interpolate`), for the rows whose curve reaches it: rows
    of different batch sizes compared after the same number of updates, where
    :func:`val_at_epoch` compares them after unequal ones."""
    out = {}
    for d in docs:
        points = [p for p in d.get("curve", []) if isinstance(p.get("step"), int)
                  and isinstance(p.get(f"val_{metric}"), (int, float))]
        value = log_interpolate([p["step"] for p in points],
                                [p[f"val_{metric}"] for p in points], updates)
        if value is not None:
            out[d["row"]] = value
    return out


def _score_width(config: dict[str, Any]) -> int | None:
    """The size of the vectors a head scores the words with, whose ``+ 2`` bounds the rank
    of one softmax's log-probabilities: the untied softmax's last layer (``d_out``, else
    the embedding size), the dual head's joint space, and for every other head the
    embedding it shares (a mixture's components too: MoS-15 on PTB scores 280-wide
    vectors, though its last LSTM layer is 620 wide)."""
    model, head = config.get("model", {}), config.get("head", {})
    kind, options = head.get("kind"), head.get("options", {})
    if kind == "softmax":
        return model.get("d_out") or model.get("emsize")
    if kind == "dual" and options.get("d_joint"):
        return options["d_joint"]
    return model.get("emsize")


def rank_rows(docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per result with a measured rank: ``row``, ``seed``, ``d`` (the size of the
    vectors the head scores words with, so a single softmax's ceiling is ``d + 2``; a
    mixture's components are that size too), ``rank_tol_1`` (DRILL's tolerance),
    ``rank_numpy_tol`` (None where the matrix was too large for the float64 SVD),
    ``positions`` (the rows of the log-probability matrix) and ``val_ppl``."""
    return [{"row": d["row"], "seed": d["seed"], "d": _score_width(d["config"]),
             "rank_tol_1": d["metrics"]["rank_tol_1"],
             "rank_numpy_tol": d["metrics"].get("rank_numpy_tol"),
             "positions": d["metrics"].get("rank_positions"),
             "val_ppl": d["metrics"].get("val_ppl")}
            for d in docs if "rank_tol_1" in d["metrics"]]


def band_differences(docs: Sequence[dict[str, Any]], reference: str
                     ) -> list[dict[str, Any]]:
    """DRILL Fig. 3's quantity from the ``frequency_bands`` analyses of result files: for
    every other row and every band of training frequency, the relative difference of its
    test cross-entropy to the ``reference`` row's (DRILL in the paper),
    ``(CE_row - CE_reference) / CE_reference``: above zero where the reference does
    better on that band's words.

    Returns:
        one dict per row and band: ``row``, ``band``, ``types`` and ``tokens`` (of the
        band in the test text), ``relative`` (None for an empty band).

    Raises:
        ValueError: the reference row, or its ``frequency_bands``, is missing.
    """
    bands = {d["row"]: d.get("analyses", {}).get("frequency_bands") for d in docs}
    if not bands.get(reference):
        raise ValueError(f"no frequency_bands analysis for the reference row {reference!r}; "
                         f"rows with one: {sorted(r for r, b in bands.items() if b)}")
    ref = {b["band"]: b for b in bands[reference]}
    out = []
    for row, rows in bands.items():
        if row == reference or not rows:
            continue
        for b in rows:
            base = ref.get(b["band"], {}).get("mean_nll")
            relative = ((b["mean_nll"] - base) / base
                        if b["mean_nll"] is not None and base else None)
            out.append({"row": row, "band": b["band"], "types": b["types"],
                        "tokens": b["tokens"], "relative": relative})
    return out


def curve_points(doc: dict[str, Any], metric: str = "val_ppl") -> list[dict[str, float]]:
    """A result file's learning curve as points with ``epoch``, ``seconds`` (wall-clock
    since the start, where recorded) and ``value`` (``metric``), non-finite values left
    out."""
    import math

    return [{"epoch": p["epoch"], "seconds": p.get("elapsed_seconds"), "value": p[metric]}
            for p in doc.get("curve", []) if isinstance(p.get(metric), (int, float))
            and math.isfinite(p[metric])]


def mixture_usage(docs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Row -> the ``mixture`` analysis of each mixture row (usage per component, entropy,
    its maximum, DOC Table 4's coefficient of variation, the share of each layer)."""
    return {d["row"]: d["analyses"]["mixture"] for d in docs
            if "mixture" in d.get("analyses", {})}


def f1_rows(docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per row and training-frequency bin with decoded output's word F1 (vMF
    Table 5's analysis): ``row``, ``band``, ``reference_tokens``, ``f1``."""
    return [{"row": d["row"], "band": b["band"], "reference_tokens": b["reference_tokens"],
             "f1": b["f1"]}
            for d in docs for b in d.get("analyses", {}).get("rare_word_f1", [])]


def plot_band_differences(rows: Sequence[dict[str, Any]], reference: str, ax=None,
                          min_types: int | None = None):
    """Grouped bars of :func:`band_differences`, one group per band (its label with the
    word types in brackets), one bar per row in the head's colour, in percent; bands of
    fewer than ``min_types`` word types (default :data:`MIN_BAND_TYPES`) are greyed out:
    a mean over so few words moves by percents with any one of them."""
    import matplotlib.pyplot as plt

    min_types = MIN_BAND_TYPES if min_types is None else min_types
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.6))
    names = list(dict.fromkeys(r["row"] for r in rows))
    bands = list(dict.fromkeys(r["band"] for r in rows))
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        mine = {r["band"]: r for r in rows if r["row"] == name}
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(bands))]
        ys = [100 * (mine[b]["relative"] or 0.0) if b in mine else 0.0 for b in bands]
        ax.bar(xs, ys, width, color=head_color(name), label=name)
    types = {r["band"]: r["types"] for r in rows}
    ax.set_xticks(range(len(bands)), [f"{b}\n({types[b]})" for b in bands])
    for j, b in enumerate(bands):
        if types[b] < min_types:
            ax.axvspan(j - 0.45, j + 0.45, color="0.9", zorder=0)
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set(xlabel="training count of the target word (word types in the test text)",
           ylabel=f"cross-entropy vs {reference} (%)")
    ax.legend(frameon=False, fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return ax


def plot_f1(rows: Sequence[dict[str, Any]], ax=None):
    """Word F1 of decoded output per training-frequency bin (:func:`f1_rows`), a line per
    row in its head's colour, rows of one head in shades of it and in different line
    styles (:func:`~drillbook.plotting.family_colors`); bins without references are left
    out."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.6))
    bands = list(dict.fromkeys(r["band"] for r in rows))
    styles, seen = ("-", "--", ":", "-."), {}
    colors = family_colors([r["row"] for r in rows])
    for name in colors:
        mine = {r["band"]: r["f1"] for r in rows if r["row"] == name}
        points = [(j, mine[b]) for j, b in enumerate(bands) if mine.get(b) is not None]
        kind = head_kind(name)  # rows of one head (vMF's losses) differ by line style
        used = seen.get(kind, 0)
        seen[kind] = used + 1
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                ls=styles[used % len(styles)], color=colors[name], label=name)
    ax.set_xticks(range(len(bands)), bands)
    ax.set(xlabel="training count of the word", ylabel="word F1 of the translations",
           ylim=(0, 1))
    ax.legend(frameon=False, fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return ax

