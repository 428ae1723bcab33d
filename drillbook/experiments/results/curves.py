"""The DRILL authors' whole training curves with drillbook's runs on them, and what a full
run of each paper table costs on their GPU and on the GPU the book measured.

The authors' logs (:mod:`drillbook.authors`) run 600 epochs; drillbook's runs at the same
setting have reached a few so far (GPU windows of about ten minutes). Drawn together, the
first epochs of ours land on the first epochs of theirs:

* :func:`runs_like_authors` finds every committed run of the package at the setting of
  one of the authors' logs (same corpus, model, head and training recipe; the seed, the
  number of epochs and the precision may differ), in every GPU window: result files, and
  a window's epoch logs of rows that wrote none;
* :func:`agreement_rows` reads each of their epochs against the authors' curve at the
  same epoch and at the same number of updates (an epoch of MoS at batch 12 is 1.67
  epochs' worth of the tied model's updates at batch 20);
* :func:`plot_against_authors` draws the curves against epochs or updates, log axes, and
  :func:`figure_against_authors` a figure of them, against both;
* :func:`authors_band_rows` and :func:`band_rows` put the authors' DRILL Fig. 3 data and a
  comparison of one's own (:func:`drillbook.analysis.compare_by_frequency`) in the rows
  :func:`~drillbook.experiments.results.evidence.plot_band_differences` draws;
* :func:`full_run_cost` multiplies a table's epochs by the seconds an epoch took in the
  authors' logs (GTX 1080 Ti) and by the milliseconds an update took on the H200
  (:func:`h200_ms_per_update`).
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...authors import authors_bands, authors_curves, expected_updates
from ...configs import get_config
from ...data import corpus_spec
from ...plotting import head_color, label_log_range, tidy_log_axis
from ..tables import TABLES, find_row
from .files import book_results, load_results
from .speed import first_epochs

__all__ = ["PAPER_TABLES", "agreement_rows", "authors_band_rows", "band_rows",
           "figure_against_authors", "full_run_cost", "h200_ms_per_update",
           "plot_against_authors", "runs_like_authors", "same_setting"]

#: the paper tables whose full-run cost the book states (the reproduction tables of
#: DRILL Tables 1-4 and of the mixtures' papers)
PAPER_TABLES = ("drill-main", "drill-table4", "mos-doc", "rank", "speed")

#: training fields that shape a learning curve; the others (epochs, precision, seed,
#: checkpointing, logging) may differ between two runs at the same setting
_RECIPE = ("batch_size", "bptt", "lr", "optimizer", "nonmono", "variable_bptt", "clip",
           "wdecay", "alpha", "beta", "accum_steps", "max_batches_per_epoch",
           "max_eval_tokens", "eval_batch_size")


def _setting(config: dict[str, Any]) -> tuple:
    train = config.get("train", {})
    return (json.dumps(config.get("data"), sort_keys=True),
            json.dumps(config.get("model"), sort_keys=True),
            json.dumps(config.get("head"), sort_keys=True),
            *(train.get(k) for k in _RECIPE))


def same_setting(config: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two configs (as dicts) train the same model the same way: equal data, model
    and head sections and equal recipe (batch size, BPTT, learning rate, optimiser, ...);
    the seed, the epochs, the precision and the checkpointing may differ."""
    return _setting(config) == _setting(other)


def _points(curve: Sequence[dict[str, Any]], steps_done: int | None = None
            ) -> list[dict[str, float]]:
    """``epoch``, ``updates`` and ``val_ppl`` of every epoch of a curve (a one-epoch row
    that recorded no step gives its ``steps_done``)."""
    out = []
    for p in curve:
        step = p.get("step", steps_done if len(curve) == 1 else None)
        if isinstance(p.get("val_ppl"), (int, float)) and step is not None:
            out.append({"epoch": p["epoch"], "updates": step, "val_ppl": p["val_ppl"]})
    return out


def runs_like_authors(results: str | Path | None = None) -> list[dict[str, Any]]:
    """Every committed run of the package at the setting of one of the authors' logs.

    Looks in every GPU window of ``results`` (default: the book's; a folder without a
    ``gpu/`` folder, such as the ``--out`` of your own ``drillbook reproduce``, is read as
    one window): its result files and the epoch logs (``logs/<row>.log.jsonl``) of the
    ``speed`` table's rows that wrote no result file (their config is the table's row; the
    log records none).

    Returns:
        one dict per run: ``authors`` (the log's name, e.g. ``ptb-drill``), ``window``,
        ``table``, ``row``, ``precision``, ``seed`` (None for a log), ``source`` (``result``
        or ``log``) and ``points`` (``epoch``, ``updates``, ``val_ppl`` of each epoch).
    """
    root = Path(results) if results is not None else book_results()
    curves = authors_curves()
    settings = {name: get_config(c.config).to_dict() for name, c in curves.items()}

    def authors_of(config: dict[str, Any]) -> str | None:
        return next((n for n, s in settings.items() if same_setting(config, s)), None)

    runs = []
    windows = (sorted(p for p in (root / "gpu").glob("*") if p.is_dir())
               if (root / "gpu").is_dir() else [root])
    for window in windows:
        docs = load_results(window)
        for d in docs:
            name = authors_of(d["config"])
            if name is not None:
                runs.append({"authors": name, "window": window.name, "table": d["table"],
                             "row": d["row"], "precision": d.get("precision", "fp32"),
                             "seed": d["seed"], "source": "result",
                             "points": _points(d["curve"], d["steps_done"])})
        written = {(d["table"], d["row"]) for d in docs}
        for log in sorted(window.glob("logs/*.log.jsonl")):
            row = log.name.removesuffix(".log.jsonl")
            spec = find_row("speed", row)
            if spec is None or ("speed", row) in written:
                continue
            name = authors_of(spec.resolve().to_dict())
            records = [json.loads(line) for line in log.read_text().splitlines() if line]
            if name is not None:
                runs.append({"authors": name, "window": window.name, "table": "speed",
                             "row": row, "precision": records[0].get("precision", "fp32"),
                             "seed": None, "source": "log", "points": _points(records)})
    return [r for r in runs if r["points"]]


def agreement_rows(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each epoch of each run (:func:`runs_like_authors`) beside the authors' curve:
    ``ours``; ``authors_epoch``, the authors' validation perplexity after the same epoch;
    ``authors_updates``, theirs after as many of *their* updates as the run had done
    (None before their first logged epoch); and ``ratio``, ours over ``authors_epoch``."""
    curves = authors_curves()
    out = []
    for run in runs:
        curve = curves[run["authors"]]
        for p in run["points"]:
            theirs = curve.val_ppl_at(p["epoch"])
            out.append({"authors": run["authors"], "window": run["window"],
                        "row": run["row"], "precision": run["precision"],
                        "epoch": p["epoch"], "updates": p["updates"], "ours": p["val_ppl"],
                        "authors_epoch": theirs,
                        "authors_updates": curve.val_ppl_after_updates(p["updates"]),
                        "ratio": p["val_ppl"] / theirs if theirs else None})
    return out


_MARKERS = ("o", "s", "^", "D", "v", "P")

#: the models of the authors' logs, in the book's words
_MODEL_WORDS = {"tied": "AWD-LSTM", "drill": "DRILL-4", "mos": "MoS-15"}
_PRECISION_WORDS = {"fp32": "float32", "bf16": "bfloat16", "bf16-autocast": "bfloat16",
                    "tf32": "TF32", "fp16": "float16"}


def window_words(folder: str) -> str:
    """A GPU window's result folder in a reader's words: ``2026-11-26-h200-window2-fp32``
    is ``H200 window 2``, ``2026-11-26-h200-bf16`` (no number: the first) ``H200 window
    1``; a folder of another form is returned as it is."""
    match = re.fullmatch(r"\d{4}-\d{2}-\d{2}-([a-z0-9]+?)(?:-window(\d+))?-[a-z0-9]+", folder)
    if match is None:
        return folder
    return f"{match.group(1).upper()} window {match.group(2) or 1}"


def plot_against_authors(names: Sequence[str], runs: Sequence[dict[str, Any]] = (), *,
                         x: str = "epoch", ax=None, legend: bool = True):
    """The authors' curves ``names`` (thin lines, the head's colour) and the runs of
    :func:`runs_like_authors` at their settings (markers edged in black, one shape per GPU
    window), validation perplexity against ``x`` (``"epoch"`` or ``"updates"``), both axes
    logarithmic with readable ticks.

    Returns:
        the matplotlib axes.
    """
    import matplotlib.pyplot as plt

    if x not in ("epoch", "updates"):
        raise ValueError(f"x must be 'epoch' or 'updates', got {x!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.8))
    curves = authors_curves()
    xs, ys = [], []
    for name in names:
        c = curves[name]
        along = c.epochs if x == "epoch" else c.updates
        ax.plot(along, c.val_ppl, color=head_color(name), lw=1.3, alpha=0.8,
                label=f"authors' log, {_MODEL_WORDS.get(c.head, c.head)} "
                      f"({len(c.epochs)} epochs, GTX 1080 Ti)")
        xs += list(along)
        ys += list(c.val_ppl)
    windows = list(dict.fromkeys(r["window"] for r in runs if r["authors"] in names))
    for run in runs:
        if run["authors"] not in names:
            continue
        marker = _MARKERS[windows.index(run["window"]) % len(_MARKERS)]
        px = [p[x] for p in run["points"]]
        py = [p["val_ppl"] for p in run["points"]]
        ax.plot(px, py, ls="none", marker=marker, ms=6, color=head_color(run["authors"]),
                mec="black", mew=0.7,
                label=f"drillbook, {_MODEL_WORDS.get(curves[run['authors']].head, run['row'])}: "
                      f"{window_words(run['window'])}, "
                      f"{_PRECISION_WORDS.get(run['precision'], run['precision'])}")
        xs += px
        ys += py
    ax.set(xscale="log", yscale="log", ylabel="validation perplexity",
           xlabel="epoch" if x == "epoch" else "updates (training steps)")
    label_log_range(ax, xs, "x")
    label_log_range(ax, ys, "y")
    tidy_log_axis(ax, "both")
    ax.grid(True, which="major", lw=0.4, color="0.85")
    if legend:
        ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax


def figure_against_authors(groups: Sequence[Sequence[str]], runs: Sequence[dict[str, Any]],
                           titles: Sequence[str] | None = None):
    """A figure of :func:`plot_against_authors`: one row of panels per group of the
    authors' curves (e.g. a corpus's), against epochs on the left and updates on the
    right, the legend beside the right-hand panels; ``titles`` names each row.

    Returns:
        the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(groups), 2, figsize=(13, 4.1 * len(groups)), squeeze=False)
    for i, names in enumerate(groups):
        for j, x in enumerate(("epoch", "updates")):
            plot_against_authors(names, runs, x=x, ax=axes[i, j], legend=j == 1)
            where = f"{titles[i]}, against" if titles else "Against"
            axes[i, j].set_title(f"{where} {'epochs' if x == 'epoch' else 'updates'}")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ DRILL Fig. 3
def authors_band_rows(average: str = "word") -> list[dict[str, Any]]:
    """The authors' Fig. 3 data (:func:`drillbook.authors.authors_bands`) as the rows of
    :func:`~drillbook.experiments.results.evidence.band_differences`: ``row`` (``tied``,
    ``bilinear``, ``dual``), ``band``, ``types``, ``tokens`` and ``relative``, each
    baseline's cross-entropy relative to DRILL's (a fraction; above zero where DRILL is
    better), averaged per ``"word"`` (Fig. 3's) or per ``"token"``."""
    if average not in ("word", "token"):
        raise ValueError(f"average must be 'word' or 'token', got {average!r}")
    return [{"row": model, "band": b.band, "types": b.types, "tokens": b.tokens,
             "relative": (b.relative_word if average == "word" else b.relative_token)[model]
             / 100}
            for model in ("tied", "bilinear", "dual") for b in authors_bands()]


def band_rows(comparisons: dict[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Baseline name -> its :func:`drillbook.analysis.compare_by_frequency` bands against
    the reference, as the rows :func:`authors_band_rows` gives (the same bins, the same
    quantity), for drawing one's own comparison beside the authors'."""
    return [{"row": name, "band": b.label, "types": b.n_types, "tokens": b.n_tokens,
             "relative": b.rel_diff_percent / 100}
            for name, bands in comparisons.items() for b in bands]


# ------------------------------------------------------------------ full-run cost
def _speed_goal_rows(window: Path) -> list[dict[str, Any]]:
    """The float32 rows of a window's ``bench/**/speed-goals*.json`` at the code the
    window ran (``version`` ``this``; no ``--set`` that changes the precision or compiles)."""
    rows = []
    for path in sorted(window.glob("bench/**/speed-goals*.json")):
        doc = json.loads(path.read_text())
        if doc.get("settings", {}).get("set"):
            continue  # train.amp=tf32, train.compile=true: not the plain float32 step
        rows += [r for r in doc["rows"] if r.get("version") == "this" and "ms_per_update" in r]
    return rows


def h200_ms_per_update(results: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Config name -> the milliseconds of one float32 training update on the H200, from
    the newest window (by name) that timed the config alone: the median of its
    measurements (``tools/speed_goals.py`` rows, and the first epoch of a ``speed`` table
    row, its training seconds over its updates). Each value: ``ms``, ``window``, ``n``
    (measurements) and ``all`` (every measurement of that window)."""
    root = Path(results) if results is not None else book_results()
    found: dict[str, dict[str, Any]] = {}
    for window in sorted(p for p in (root / "gpu").glob("*-fp32") if p.is_dir()):
        measured: dict[str, list[float]] = {}
        for row, epoch in first_epochs(window).items():
            spec = find_row("speed", row)
            if spec is not None:
                measured.setdefault(spec.config, []).append(
                    1000 * epoch["seconds"] / epoch["updates"])
        for r in _speed_goal_rows(window):
            measured.setdefault(r["config"], []).append(r["ms_per_update"])
        for config, values in measured.items():
            found[config] = {"ms": statistics.median(values), "window": window.name,
                             "n": len(values), "all": values}
    return found


def _bound_config(config) -> str:
    """The measured model a row is at least as slow as: its corpus's MoS config for a
    mixture (DOC's 20 vectors cost more than MoS's 15), else its corpus's tied AWD-LSTM
    (every other head adds work to it)."""
    prefix = "ptb" if config.data.corpus == "ptb" else "wt2"
    return f"{prefix}/awd-lstm-mos" if config.head.kind in ("mos", "doc") else \
        f"{prefix}/awd-lstm"


def full_run_cost(table: str, results: str | Path | None = None) -> list[dict[str, Any]]:
    """What each row of ``table`` costs run to its config's last epoch (before
    fine-tuning), on the authors' GPU and on the H200.

    A row at the setting of one of the authors' logs takes that log's mean seconds per
    epoch (GTX 1080 Ti, training and validation); a row the H200 timed alone takes its
    milliseconds per update (:func:`h200_ms_per_update`, training only) times the updates
    of an epoch (:func:`drillbook.authors.expected_updates`). A row that was not measured
    gets the time of the model it is at least as slow as (a mixture: its corpus's MoS; any
    other head: its corpus's tied AWD-LSTM), and says so (``gtx_exact``, ``h200_exact``
    False): its hours are a lower bound.

    Returns:
        one dict per row: ``row``, ``config``, ``epochs``, ``updates_per_epoch``,
        ``gtx_hours``, ``gtx_basis``, ``gtx_exact``, ``h200_hours``, ``h200_basis``,
        ``h200_exact``.
    """
    curves = authors_curves()
    h200 = h200_ms_per_update(results)
    out = []
    for spec in TABLES[table]:
        config = spec.resolve()
        setting, t = config.to_dict(), config.train
        tokens = corpus_spec(config.data.corpus).tokens["train"]
        bound = _bound_config(config)
        # the authors' log of this very model, else of the model it is at least as slow as
        log = next((c for c in curves.values()
                    if same_setting(setting, get_config(c.config).to_dict())), None)
        gtx_exact = log is not None
        log = log or next(c for c in curves.values() if c.config == bound)
        # the H200's time per update of this model, else of that model (at its batch)
        h200_exact = config.name in h200 and same_setting(
            setting, get_config(config.name).to_dict())
        timed = get_config(config.name if h200_exact else bound)
        measured = h200.get(timed.name)
        updates = expected_updates(tokens, timed.train.batch_size, timed.train.bptt)
        out.append({
            "row": spec.name, "config": config.name, "epochs": t.epochs,
            "updates_per_epoch": expected_updates(tokens, t.batch_size, t.bptt),
            "gtx_hours": t.epochs * log.mean_seconds / 3600, "gtx_basis": log.name,
            "gtx_exact": gtx_exact,
            "h200_hours": (t.epochs * updates * measured["ms"] / 3.6e6
                           if measured else None),
            "h200_basis": f"{timed.name}, {measured['window']}" if measured else None,
            "h200_exact": h200_exact,
        })
    return out
