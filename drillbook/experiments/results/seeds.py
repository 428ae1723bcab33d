"""One table row trained with several seeds: the spread a single run cannot show.

``drillbook reproduce TABLE --seed N`` writes ``<results>/<table>/seed-<N>/<row>.json``
beside the row's own ``<results>/<table>/<row>.json`` (its config's seed). This module
gathers a row's runs across those files and summarises a metric by its mean, its sample
standard deviation and its range, after checking that the runs differ in nothing but the
seed and reached the same point (status and epochs; runs that their plateau rule ended
may differ in epochs), and that the same arithmetic trained
them: equal training-code fingerprints (:mod:`~drillbook.experiments.results.fingerprint`)
or, for files written before fingerprints, the same commit, unless the book names the
difference (:data:`NAMED_CODE_DIFFERENCES`) where it shows the spread.

Which differences does a handful of seeds resolve? :func:`resolved` takes the plainest
rule, one a reader can check by eye in the table: two rows are told apart when their
ranges across seeds do not overlap. A difference smaller than the spread of either row is
never called. The rule is not proof against chance, though: two rows that are equally good
still show separate ranges with probability :func:`chance_separated` (1 in 10 with three
seeds each), so a table of many pairs will show a few by luck alone.

:func:`spread_table`, :func:`resolved_pairs` and :func:`plot_spread` present the spread:
the rows of a display table, every pair's verdict, and a figure of every seed's value.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import MissingPackageError, ResultFileError
from ...precision import canonical_precision
from ..tables import table_of
from .files import read_result
from .fingerprint import fingerprint_of, training_fingerprint
from .format import fmt

__all__ = [
    "NAMED_CODE_DIFFERENCES",
    "SEED_FOLDER",
    "SeedSpread",
    "chance_separated",
    "check_same_code",
    "code_difference",
    "plot_spread",
    "resolved",
    "resolved_pairs",
    "seed_runs",
    "seed_spread",
    "spread_table",
    "spreads_of",
]

#: prefix of the folder that holds one seed's result files: ``<table>/seed-<N>/``
SEED_FOLDER = "seed-"

#: the cpu-scale rows whose seeds were trained by different code, before result files
#: recorded a fingerprint: seed 141 at 9bf7052 (DOC's at 0e963e4), seeds 142 and 143 at
#: 9f2263c, 52 commits later, with the training code changed in between
_CPU_SCALE_MIXED = ("softmax", "tied", "drill-1", "drill-4", "mos", "doc", "sigsoftmax")

#: ``(table, row)`` -> the difference in training code between the row's seeds that the
#: book accepts and states wherever it shows the spread (:func:`code_difference`)
NAMED_CODE_DIFFERENCES: dict[tuple[str, str], str] = {
    ("cpu-scale", row): ("seed 141 at commit "
                         + ("0e963e4" if row == "doc" else "9bf7052")
                         + ", seeds 142 and 143 at 9f2263c (the training code changed in "
                           "between; no fingerprint was recorded then)")
    for row in _CPU_SCALE_MIXED}


@dataclass(frozen=True)
class SeedSpread:
    """A metric of one row across seeds.

    Attributes:
        row: the table row.
        seeds: the seeds, in the order of ``values``.
        values: the metric of each seed's run.
    """

    row: str
    seeds: tuple[int, ...]
    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float:
        """Sample standard deviation (n - 1 in the denominator); NaN for one run."""
        return statistics.stdev(self.values) if self.n > 1 else float("nan")

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)


def seed_runs(folder: str | Path, table: str) -> dict[str, list[dict[str, Any]]]:
    """Row name -> the result documents of every seed of that row in ``folder/table``
    (the row's own file first, then the ``seed-*`` folders in seed order).

    Raises:
        ResultFileError: two runs of a row differ in more than the seed (config, status
            or epochs), or a file is unreadable; the message names the files.
    """
    base = Path(folder) / table
    paths = sorted(base.glob("*.json"))
    paths += sorted(base.glob(f"{SEED_FOLDER}*/*.json"),
                    key=lambda p: (_seed_of(p.parent), p.name))
    runs: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path in paths:
        doc = read_result(path)
        runs.setdefault(doc["row"], []).append((path, doc))
    for row, docs in runs.items():
        first_path, first = docs[0]
        for path, doc in docs[1:]:
            what = _difference(first, doc) or code_difference(table, row, first, doc)
            if what:
                raise ResultFileError(
                    f"{path} and {first_path} ({table}/{row}) differ in {what}, not only "
                    f"in the seed; rerun the row with `drillbook reproduce {table} --rows "
                    f"{row} --seed {doc['seed']}` on the same code")
        seeds = [doc["seed"] for _, doc in docs]
        if len(set(seeds)) != len(seeds):
            raise ResultFileError(f"{base}: row {row!r} has two result files for one seed "
                                  f"({sorted(seeds)}); keep one of them")
    return {row: [doc for _, doc in docs] for row, docs in runs.items()}


def seed_spread(folder: str | Path, table: str, metric: str = "test_ppl",
                min_seeds: int = 1) -> list[SeedSpread]:
    """``metric`` of every row of ``folder/table`` across its seeds, in the table's row
    order (rows the table no longer has last, by name); rows with fewer than
    ``min_seeds`` runs are left out."""
    return spreads_of(seed_runs(folder, table), table, metric, min_seeds)


def spreads_of(runs: dict[str, list[dict[str, Any]]], table: str, metric: str = "test_ppl",
               min_seeds: int = 1) -> list[SeedSpread]:
    """:func:`seed_spread` of runs already gathered (row -> its seeds' documents, as
    :func:`seed_runs` gives them, or a plan's windows read as one table)."""
    order = table_of(table).order
    out = []
    for row, docs in runs.items():
        have = [d for d in docs if metric in d["metrics"]]
        if len(have) >= min_seeds and have:
            out.append(SeedSpread(row, tuple(d["seed"] for d in have),
                                  tuple(float(d["metrics"][metric]) for d in have)))
    return sorted(out, key=lambda s: (order(s.row), s.row))


def resolved(a: SeedSpread, b: SeedSpread) -> bool:
    """Whether the seeds tell ``a`` and ``b`` apart: their ranges do not overlap. Needs
    at least two seeds in each (one run has no range worth the name)."""
    if a.n < 2 or b.n < 2:
        return False
    return a.high < b.low or b.high < a.low


def chance_separated(n_a: int, n_b: int) -> float:
    """The probability that :func:`resolved` tells apart two rows that are equally good.

    If the ``n_a + n_b`` runs are draws from one continuous distribution, every way of
    labelling the sorted values with ``n_a`` a's and ``n_b`` b's is equally likely, and
    the ranges are separate in exactly two of the ``C(n_a + n_b, n_a)`` labellings (all
    a's below all b's, or all above): ``2 / C(n_a + n_b, n_a)``. Three seeds each give
    ``2 / 20 = 0.1``; two each ``2 / 6``. Zero below two seeds (the rule never calls it).

    Raises:
        ValueError: a negative count.
    """
    if n_a < 0 or n_b < 0:
        raise ValueError(f"run counts must be >= 0, got {n_a} and {n_b}")
    if n_a < 2 or n_b < 2:
        return 0.0
    return 2 / math.comb(n_a + n_b, n_a)


def spread_table(spreads: Sequence[SeedSpread], digits: int = 1) -> list[dict[str, str]]:
    """One display row per spread: ``row``, ``n``, ``seeds``, ``mean``, ``std``, ``low``,
    ``high`` as strings, with a dash for the std and range of a row with one run (its
    spread is not measured)."""
    out = []
    for s in spreads:
        measured = s.n >= 2
        out.append({"row": s.row, "n": str(s.n), "seeds": ", ".join(map(str, s.seeds)),
                    "mean": fmt(s.mean, digits),
                    "std": fmt(s.std if measured else None, digits),
                    "low": fmt(s.low if measured else None, digits),
                    "high": fmt(s.high if measured else None, digits)})
    return out


def resolved_pairs(spreads: Sequence[SeedSpread], min_seeds: int = 2) -> list[dict[str, Any]]:
    """Every pair of rows with at least ``min_seeds`` runs each (at least 2), in the order
    of ``spreads``: ``lower`` and ``higher`` (by mean), ``gap`` (the difference of the
    means, >= 0), ``resolved`` (:func:`resolved`) and ``chance`` (the probability that
    two equally good rows with these seed counts look resolved,
    :func:`chance_separated`; summed over the pairs, the number of resolved pairs to
    expect from noise alone)."""
    kept = [s for s in spreads if s.n >= max(2, min_seeds)]
    out = []
    for a, b in itertools.combinations(kept, 2):
        low, high = (a, b) if a.mean <= b.mean else (b, a)
        out.append({"lower": low.row, "higher": high.row, "gap": high.mean - low.mean,
                    "resolved": resolved(a, b), "chance": chance_separated(low.n, high.n)})
    return out


def told_apart(spreads: Sequence[SeedSpread], noun: str = "rows",
               digits: int = 2) -> list[str]:
    """One sentence per pair of :func:`resolved_pairs` that the seeds tell apart, e.g.
    ``"dual below tied by 1.55 (equally good rows look this separate with probability
    0.20)"``; ``noun`` names what the rows are (heads, systems). Empty when no pair is
    resolved."""
    return [f"{p['lower']} below {p['higher']} by {p['gap']:.{digits}f} (equally good "
            f"{noun} look this separate with probability {p['chance']:.2f})"
            for p in resolved_pairs(spreads) if p["resolved"]]


def plot_spread(spreads: Sequence[SeedSpread], *, ax=None, ylabel: str = "test perplexity"):
    """Every seed's value of each row as a dot in the row's head colour
    (:func:`drillbook.plotting.head_color`), with seaborn's strip plot, and for rows with
    two or more seeds a bar from ``mean - std`` to ``mean + std`` (sample standard
    deviation) with a tick at the mean.

    Returns:
        the matplotlib axes (one x position per spread, in order).

    Raises:
        MissingPackageError: seaborn is not installed.
    """
    try:
        import seaborn as sns
    except ImportError:
        raise MissingPackageError("plot_spread draws with seaborn, which is not installed: "
                                  "pip install 'drillbook[notebooks]'") from None
    import matplotlib.pyplot as plt

    from ...plotting import head_color

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.6))
    order = [s.row for s in spreads]
    points = {"row": [s.row for s in spreads for _ in s.values],
              "value": [v for s in spreads for v in s.values]}
    sns.stripplot(points, x="row", y="value", hue="row", order=order, hue_order=order,
                  palette={s.row: head_color(s.row) for s in spreads}, jitter=0.12,
                  size=5, alpha=0.8, ax=ax)
    if ax.get_legend() is not None:  # the x axis already names every row
        ax.get_legend().remove()
    for x, s in enumerate(spreads):
        if s.n >= 2:
            ax.errorbar(x + 0.3, s.mean, yerr=s.std, color=head_color(s.row), fmt="_",
                        markersize=10, capsize=3, linewidth=1.5)
    ax.set(xlabel="", ylabel=ylabel)
    return ax


def code_difference(table: str, row: str, a: dict[str, Any], b: dict[str, Any]) -> str:
    """How the code that trained two runs of one row differs ('' if it does not, or if the
    book names the difference, :data:`NAMED_CODE_DIFFERENCES`): their fingerprints, or,
    where a file has none, their commits."""
    if (table, row) in NAMED_CODE_DIFFERENCES:
        return ""
    fa, fb = fingerprint_of(a), fingerprint_of(b)
    if fa is not None and fb is not None:
        return "" if fa == fb else f"the training code (fingerprint {fa} vs {fb})"
    ca, cb = a.get("git_commit"), b.get("git_commit")
    if ca != cb:
        return (f"the training code (commits {str(ca)[:7]} vs {str(cb)[:7]}, and no "
                f"fingerprint to compare)")
    return ""


def check_same_code(table: str, docs: Sequence[dict[str, Any]]) -> None:
    """Refuse a table whose rows were trained by code that computes differently: each
    fingerprinted row's recorded digest against what today's code gives for its config
    (:func:`~drillbook.experiments.results.fingerprint.training_fingerprint`); rows that
    agree with today's code and rows that do not cannot be compared. Files without a
    fingerprint, and differences the book names (:data:`NAMED_CODE_DIFFERENCES`), pass.

    Raises:
        ResultFileError: naming the rows that differ and the command that re-runs them.
    """
    from ...configs import config_from_dict

    stale, current = [], []
    for doc in docs:
        recorded = fingerprint_of(doc)
        if recorded is None or (table, doc["row"]) in NAMED_CODE_DIFFERENCES:
            continue
        today = training_fingerprint(config_from_dict(doc["config"]))["digest"]
        (current if today == recorded else stale).append((doc["row"], doc["seed"]))
    if stale and current:
        rows = sorted({row for row, _ in stale})
        raise ResultFileError(
            f"{table}: rows {rows} were trained by code whose numbers differ from today's "
            f"(their fingerprints), and rows {sorted({r for r, _ in current})} by today's; "
            f"rerun them (`drillbook reproduce {table} --rows {' '.join(rows)}`) or name the "
            f"difference in drillbook.experiments.results.seeds.NAMED_CODE_DIFFERENCES")


def _seed_of(folder: Path) -> int:
    try:
        return int(folder.name[len(SEED_FOLDER):])
    except ValueError:
        raise ResultFileError(f"{folder}: a seed folder is named {SEED_FOLDER}<integer>; "
                              f"rename or remove it") from None


#: the config sections that decide what a run trains
_TRAINED_BY = ("data", "model", "head", "train")


def _difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    """What, besides the seed, differs between two runs of one row ('' if nothing)."""
    def without_seed(doc: dict[str, Any]) -> dict[str, Any]:
        # what decides the training: data, model, head and recipe (a config's name,
        # description or an old file's copied paper numbers do not)
        config = {k: dict(doc["config"].get(k, {})) for k in _TRAINED_BY}
        config["train"].pop("seed", None)
        if "amp" in config["train"]:  # an old file's spelling ("off") is today's name
            config["train"]["amp"] = canonical_precision(config["train"]["amp"])
        return config

    # (updates may differ: the variable-length BPTT windows depend on the seed; so may the
    # epochs of runs that their plateau rule ended: the rule decides when each stops)
    stopped_by_rule = a.get("status") == b.get("status") == "plateau"
    for field in ("status", "epochs_done", "config_name"):
        if field == "epochs_done" and stopped_by_rule:
            continue
        if a.get(field) != b.get(field):
            return f"{field} ({a.get(field)!r} vs {b.get(field)!r})"
    if without_seed(a) != without_seed(b):
        return "config"
    return ""
