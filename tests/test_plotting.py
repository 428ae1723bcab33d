"""The book's one palette: a colour per registry head, found from any row or label."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from drillbook.experiments import TABLES
from drillbook.heads import HEADS
from drillbook.plotting import HEAD_COLORS, head_color, head_kind, tidy_log_axis


def test_every_registry_head_has_its_own_colour():
    assert list(HEAD_COLORS) == list(HEADS)
    assert len(set(HEAD_COLORS.values())) == len(HEAD_COLORS)


@pytest.mark.parametrize(("name", "kind"), [
    ("drill-4", "drill"), ("DRILL-1", "drill"), ("ptb-drill", "drill"), ("mos-15", "mos"),
    ("vmf-reg2-tied", "vmf"), ("sigsoftmax", "sigsoftmax"), ("ptb-awd-lstm", "tied"),
    ("softmax-tied", "tied"), ("AWD-LSTM-DoC", "doc"), ("wt2-mos", "mos")])
def test_names_resolve_to_their_head(name, kind):
    assert head_kind(name) == kind


def test_every_table_row_has_a_colour_and_unknown_names_are_refused():
    for rows in TABLES.values():
        for row in rows:
            assert head_color(row.name).startswith("#")
    with pytest.raises(KeyError, match="no output head named in 'lstm'"):
        head_kind("lstm")


def test_tidy_log_axis_drops_minor_labels():
    plt.switch_backend("Agg")
    fig, ax = plt.subplots()
    ax.semilogy([1, 2, 3], [20, 50, 90])
    tidy_log_axis(ax)
    fig.canvas.draw()
    assert all(not t.get_text() for t in ax.yaxis.get_minorticklabels())
    plt.close(fig)
