"""A row across seeds: the display table, every pair's verdict, the chance of a verdict
between equal rows, and the figure."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.colors import to_hex

from drillbook.experiments.results.seeds import (
    SeedSpread,
    chance_separated,
    plot_spread,
    resolved,
    resolved_pairs,
    spread_table,
    told_apart,
)
from drillbook.plotting import head_color

TIED = SeedSpread("tied", (141, 142, 143), (10.0, 11.0, 12.5))
DRILL = SeedSpread("drill-1", (141, 142, 143), (8.0, 9.0, 9.5))
MOS = SeedSpread("mos", (141, 142), (11.5, 13.0))
DUAL = SeedSpread("dual", (141,), (20.0,))


def test_chance_separated_by_hand():
    assert chance_separated(3, 3) == pytest.approx(2 / 20)
    assert chance_separated(2, 2) == pytest.approx(2 / 6)
    assert chance_separated(2, 3) == pytest.approx(2 / 10)
    assert chance_separated(1, 5) == chance_separated(0, 0) == 0.0  # never called
    with pytest.raises(ValueError, match="run counts must be >= 0"):
        chance_separated(-1, 3)


def test_chance_separated_matches_the_rule_on_simulated_equal_rows():
    """The rule itself, applied to rows drawn from one distribution, separates them as
    often as the formula says (20,000 draws: a standard error under 0.003)."""
    rng = np.random.default_rng(0)
    for n_a, n_b in ((3, 3), (2, 4)):
        draws = rng.normal(250.0, 5.0, size=(20_000, n_a + n_b))
        hits = sum(resolved(SeedSpread("a", tuple(range(n_a)), tuple(d[:n_a])),
                            SeedSpread("b", tuple(range(n_b)), tuple(d[n_a:])))
                   for d in draws)
        assert hits / len(draws) == pytest.approx(chance_separated(n_a, n_b), abs=0.012)


def test_spread_table_shows_a_dash_where_one_seed_measures_no_spread():
    rows = {r["row"]: r for r in spread_table([TIED, DUAL], digits=2)}
    # mean 67/6; sample variance ((7/6)^2 + (1/6)^2 + (4/3)^2) / 2 = 19/12
    assert rows["tied"] == {"row": "tied", "n": "3", "seeds": "141, 142, 143",
                            "mean": f"{67 / 6:.2f}", "std": f"{math.sqrt(19 / 12):.2f}",
                            "low": "10.00", "high": "12.50"}
    assert rows["dual"] == {"row": "dual", "n": "1", "seeds": "141", "mean": "20.00",
                            "std": "-", "low": "-", "high": "-"}


def test_resolved_pairs_leave_out_single_seeds_and_order_by_mean():
    pairs = resolved_pairs([TIED, DRILL, MOS, DUAL])
    by = {(p["lower"], p["higher"]): p for p in pairs}
    assert set(by) == {("drill-1", "tied"), ("tied", "mos"), ("drill-1", "mos")}
    assert by[("drill-1", "tied")]["resolved"]  # 8-9.5 against 10-12.5
    assert not by[("tied", "mos")]["resolved"]  # 10-12.5 overlaps 11.5-13
    assert by[("drill-1", "tied")]["gap"] == pytest.approx(67 / 6 - 26.5 / 3)
    assert resolved_pairs([TIED, DRILL, MOS], min_seeds=3) == [by[("drill-1", "tied")] | {
        "lower": "drill-1", "higher": "tied"}]


def test_resolved_pairs_carry_the_chance_of_their_seed_counts():
    by = {(p["lower"], p["higher"]): p["chance"] for p in resolved_pairs([TIED, DRILL, MOS])}
    assert by == {("drill-1", "tied"): pytest.approx(2 / 20),
                  ("tied", "mos"): pytest.approx(2 / 10),
                  ("drill-1", "mos"): pytest.approx(2 / 10)}


def test_told_apart_says_each_resolved_pair_once_and_nothing_else():
    # drill-1 (8-9.5) lies below tied (10-12.5) and below mos (11.5-13); tied and mos overlap
    assert told_apart([TIED, DRILL, MOS, DUAL], noun="heads", digits=1) == [
        f"drill-1 below tied by {67 / 6 - 26.5 / 3:.1f} (equally good heads look this "
        "separate with probability 0.10)",
        f"drill-1 below mos by {12.25 - 26.5 / 3:.1f} (equally good heads look this "
        "separate with probability 0.20)"]
    assert told_apart([TIED, MOS]) == []


def test_plot_spread_draws_every_seed_in_its_head_colour_and_one_std_bars():
    fig, ax = plt.subplots()
    plot_spread([TIED, DUAL, MOS], ax=ax)
    dots = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert sorted(len(c.get_offsets()) for c in dots) == [1, 2, 3]
    for c in dots:
        x = np.asarray(c.get_offsets())[:, 0]
        row = ["tied", "dual", "mos"][round(float(x.mean()))]
        assert {to_hex(f) for f in c.get_facecolors()} == {head_color(row)}
    assert [t.get_text() for t in ax.get_xticklabels()] == ["tied", "dual", "mos"]
    assert ax.get_legend() is None
    # one error bar per row with two or more seeds, from mean - std to mean + std
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    spans = sorted(float(y) for c in bars for seg in c.get_segments() for y in seg[:, 1])
    assert spans == pytest.approx(sorted([TIED.mean - TIED.std, TIED.mean + TIED.std,
                                          MOS.mean - MOS.std, MOS.mean + MOS.std]))
    plt.close(fig)
