"""Reading the result files' learning curves, and which tables a CPU can run."""

from __future__ import annotations

import pytest

from drillbook.experiments import TABLES
from drillbook.experiments.results.compare import (
    always_falls,
    cpu_tables,
    last_change,
    replay_rule,
)
from drillbook.train.plateau import PlateauRule

CURVE = [{"epoch": 1, "val_ppl": 800.0}, {"epoch": 2, "val_ppl": 600.0},
         {"epoch": 3, "val_ppl": 570.0, "train_ppl": 500.0}]


def test_cpu_tables_are_the_tutorial_sized_ones():
    assert set(cpu_tables()) == {"tutorial", "cpu-scale", "laptop-lm", "laptop-nmt",
                                 "laptop-nmt-vmf", "first-updates-nmt"}
    assert all(t in TABLES for t in cpu_tables())


def test_plot_curves_takes_a_colour_per_row():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from drillbook.experiments import plot_curves
    from drillbook.plotting import family_colors

    names = ["vmf-nllvmf", "vmf-reg2", "vmf-reg2-tied", "softmax"]
    colors = family_colors(names)
    fig, ax = plt.subplots()
    plot_curves([{"row": r, "curve": CURVE} for r in names], ax=ax, colors=colors)
    drawn = {line.get_label(): to_hex(line.get_color()) for line in ax.get_lines()}
    assert drawn == colors
    assert len(set(drawn.values())) == 4
    plt.close(fig)


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


def test_plot_curves_colours_each_line_by_its_head_and_keeps_the_legend_outside():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from drillbook.experiments import plot_curves
    from drillbook.plotting import head_color

    rows = [{"row": r, "curve": CURVE} for r in ("tied", "drill-1", "drill-4", "mystery")]
    rows.append({"row": "mos", "curve": []})  # not run: no line
    fig, ax = plt.subplots()
    plot_curves(rows, ax=ax)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines) == ["tied", "drill-1", "drill-4", "mystery"]
    assert to_hex(lines["drill-1"].get_color()) == to_hex(lines["drill-4"].get_color()) == (
        head_color("drill"))
    assert lines["drill-1"].get_linestyle() != lines["drill-4"].get_linestyle()
    assert to_hex(lines["tied"].get_color()) == head_color("tied")
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # right of the axes, over no curve
    assert ax.get_yscale() == "log"
    # 570 to 800 holds no power of ten: the axis still labels its ticks
    labels = [t.get_text() for t in ax.yaxis.get_ticklabels()
              if ax.get_ylim()[0] <= t.get_position()[1] <= ax.get_ylim()[1]]
    assert sum(bool(t) for t in labels) >= 2, labels
    plt.close(fig)


def _run(row, seed, values, metric="val_ppl"):
    return {"row": row, "seed": seed, "epochs_done": len(values),
            "curve": [{"epoch": i, metric: v} for i, v in enumerate(values, 1)]}


def test_replay_rule_names_where_a_shorter_rule_ends_a_run_and_what_it_leaves():
    # less than 1% over 2 epochs: after epoch 5, whose window's best (498) is 0.4% below
    # the 500 before it; the run went on to 419
    run = _run("tied", 141, [800.0, 600.0, 500.0, 498.0, 499.0, 450.0, 420.0, 419.0])
    never = _run("softmax", 142, [800.0, 600.0, 500.0])
    rows = replay_rule([run, never], PlateauRule(2, 0.01), "val_ppl")
    assert rows == [
        {"row": "tied", "seed": 141, "ends_after": 5, "best_then": 498.0, "epochs": 8,
         "best": 419.0},
        {"row": "softmax", "seed": 142, "ends_after": None, "best_then": 500.0,
         "epochs": 3, "best": 500.0}]


def test_replay_rule_takes_the_highest_bleu_for_a_rule_where_higher_is_better():
    run = _run("drill", 1, [10.0, 30.0, 35.0, 35.1, 35.0, 34.9, 37.0], metric="val_bleu")
    rule = PlateauRule(3, 0.005, higher_is_better=True)
    (row,) = replay_rule([run], rule, "val_bleu")
    # 35.0 before the window, at most 35.1 in it: +0.29% < 0.5% after epoch 6
    assert (row["ends_after"], row["best_then"], row["best"]) == (6, 35.1, 37.0)


def test_replay_rule_refuses_a_metric_the_curve_did_not_log():
    with pytest.raises(ValueError, match="logged no 'val_bleu'"):
        replay_rule([_run("tied", 141, [800.0, 600.0])], PlateauRule(2, 0.01), "val_bleu")
