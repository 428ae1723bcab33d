"""Reading the result files' learning curves, and which tables a CPU can run."""

from __future__ import annotations

import pytest

from drillbook.experiments import TABLES
from drillbook.experiments.compare import always_falls, cpu_tables, last_change

CURVE = [{"epoch": 1, "val_ppl": 800.0}, {"epoch": 2, "val_ppl": 600.0},
         {"epoch": 3, "val_ppl": 570.0, "train_ppl": 500.0}]


def test_cpu_tables_are_the_tutorial_sized_ones():
    assert set(cpu_tables()) == {"tutorial", "cpu-scale"}
    assert all(t in TABLES for t in cpu_tables())


def test_last_change_is_the_relative_change_of_the_last_epoch():
    assert last_change(CURVE) == pytest.approx(-30 / 600)
    assert last_change(CURVE, "train_ppl") is None  # one point has no change
    assert last_change([]) is None
    nan_last = [*CURVE, {"epoch": 4, "val_ppl": float("nan")}]
    assert last_change(nan_last) == pytest.approx(-30 / 600)  # a NaN point is skipped


def test_always_falls_notices_a_single_rise():
    assert always_falls(CURVE)
    assert not always_falls([*CURVE, {"epoch": 4, "val_ppl": 580.0}])
    assert not always_falls([*CURVE, {"epoch": 4, "val_ppl": 570.0}])  # flat is not falling
    assert always_falls(CURVE[:1])
