"""One table row trained with several seeds: the spread a single run cannot show.

``drillbook reproduce TABLE --seed N`` writes ``<results>/<table>/seed-<N>/<row>.json``
beside the row's own ``<results>/<table>/<row>.json`` (its config's seed). This module
gathers a row's runs across those files and summarises a metric by its mean, its sample
standard deviation and its range, after checking that the runs differ in nothing but the
seed and reached the same point (status and epochs).

Which differences does a handful of seeds resolve? :func:`resolved` takes the plainest
rule, one a reader can check by eye in the table: two rows are told apart when their
ranges across seeds do not overlap. With three seeds that is conservative (a difference
smaller than the spread of either row is never called), which is the point.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ResultFileError
from .results import _read_result

__all__ = ["SEED_FOLDER", "SeedSpread", "resolved", "seed_runs", "seed_spread"]

#: prefix of the folder that holds one seed's result files: ``<table>/seed-<N>/``
SEED_FOLDER = "seed-"


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
        doc = _read_result(path)
        runs.setdefault(doc["row"], []).append((path, doc))
    for row, docs in runs.items():
        first_path, first = docs[0]
        for path, doc in docs[1:]:
            what = _difference(first, doc)
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
    """``metric`` of every row of ``folder/table`` across its seeds, in file order; rows
    with fewer than ``min_seeds`` runs are left out."""
    out = []
    for row, docs in seed_runs(folder, table).items():
        have = [d for d in docs if metric in d["metrics"]]
        if len(have) >= min_seeds and have:
            out.append(SeedSpread(row, tuple(d["seed"] for d in have),
                                  tuple(float(d["metrics"][metric]) for d in have)))
    return out


def resolved(a: SeedSpread, b: SeedSpread) -> bool:
    """Whether the seeds tell ``a`` and ``b`` apart: their ranges do not overlap. Needs
    at least two seeds in each (one run has no range worth the name)."""
    if a.n < 2 or b.n < 2:
        return False
    return a.high < b.low or b.high < a.low


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
        return config

    # (updates may differ: the variable-length BPTT windows depend on the seed)
    for field in ("status", "epochs_done", "config_name"):
        if a.get(field) != b.get(field):
            return f"{field} ({a.get(field)!r} vs {b.get(field)!r})"
    if without_seed(a) != without_seed(b):
        return "config"
    return ""
