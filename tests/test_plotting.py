"""The book's one palette: a colour per registry head, found from any row or label."""

from __future__ import annotations

import itertools
import math

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_rgb

from drillbook.experiments import TABLES
from drillbook.heads import HEADS
from drillbook.plotting import (
    HEAD_COLORS,
    MIN_SERIES_DELTA_E,
    VARIANT_COLORS,
    _number,
    cielab,
    derived_color,
    family_colors,
    figure_problems,
    head_color,
    head_kind,
    label_log_range,
    log_tick_label,
    tidy_log_axis,
)


def _luminance(color: str) -> float:
    """WCAG 2's relative luminance of a hex colour."""
    channels = [int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def test_every_registry_head_has_its_own_colour():
    assert list(HEAD_COLORS) == list(HEADS)
    colors = [*HEAD_COLORS.values(), *VARIANT_COLORS.values()]
    assert len(set(colors)) == len(colors)


def test_every_colour_stands_out_on_white_and_from_the_others():
    colors = {**HEAD_COLORS, **VARIANT_COLORS}
    for name, color in colors.items():  # WCAG's 3:1 for graphics against white
        assert 1.05 / (_luminance(color) + 0.05) >= 3.0, name
    lab = {name: cielab(color) for name, color in colors.items()}
    for a, b in itertools.combinations(colors, 2):  # CIE76 distance in L*a*b*
        assert math.dist(lab[a], lab[b]) >= 25, (
            f"{a} and {b} look alike: declare a colour of its own on the head class "
            f"(OutputHead.color)")


def test_every_head_declares_its_colour_and_a_head_without_one_gets_a_derived_one():
    assert all(HEAD_COLORS[kind] == cls.color for kind, cls in HEADS.items())
    kinds = [f"head-{i}" for i in range(200)] + ["scaled", "yellow", "x"]
    for kind in kinds:  # any kind: the same colour every time, dark enough on white
        color = derived_color(kind)
        assert color == derived_color(kind) and len(color) == 7
        assert 1.05 / (_luminance(color) + 0.05) >= 3.0, kind
    assert len({derived_color(k) for k in kinds}) > 150  # hues spread over the circle


def test_variants_have_their_own_colour():
    assert head_color("MoC (mos, mix=logits)") == VARIANT_COLORS["moc"]
    assert head_color("MoS") == HEAD_COLORS["mos"]


@pytest.mark.parametrize(("value", "label"), [
    (1e-6, "$10^{-6}$"), (0.001, "0.001"), (0.5, "0.5"), (300, "300"), (20_000, "20,000"),
    (1e5, "100,000"), (2e6, "$2\\times 10^{6}$")])
def test_log_ticks_read_as_plain_numbers_or_powers_of_ten(value, label):
    assert log_tick_label(value) == label


def test_one_log_axis_labels_its_ticks_in_one_form():
    fig, ax = _figure()
    ax.loglog([1, 2], [500, 2e6])
    tidy_log_axis(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.yaxis.get_majorticklabels() if t.get_text()]
    assert "$10^{3}$" in labels and not any("," in t for t in labels)  # no 1,000 beside 10^6
    plt.close(fig)


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


def test_rows_of_one_head_get_shades_of_its_colour():
    names = ["softmax", "vMF NLLvMF", "vMF reg2", "vMF reg2 tied", "vMF reg2"]
    colors = family_colors(names)
    assert list(colors) == ["softmax", "vMF NLLvMF", "vMF reg2", "vMF reg2 tied"]
    assert len(set(colors.values())) == 4
    assert colors["softmax"] == head_color("softmax")
    assert colors["vMF NLLvMF"] == head_color("vmf")  # the first row keeps the head's own
    base, darker, lighter = (to_rgb(colors[n]) for n in names[1:4])
    assert sum(darker) < sum(base) < sum(lighter)
    for a, b in zip(base, darker, strict=True):  # a shade of the same hue: each channel
        assert b == pytest.approx(0.5 * a, abs=0.003)  # moves 50% of the way to black
    assert _luminance(colors["vMF reg2 tied"]) <= _luminance("#ffffff") / 2
    with pytest.raises(ValueError, match="row 6 of its head"):
        family_colors([f"drill-{k}" for k in range(6)])


def test_log_range_ticks_leave_labels_in_view():
    """A short log range gets halves, a decade or two 1-2-5, a long one powers of ten."""
    import matplotlib
    import matplotlib.pyplot as plt

    from drillbook.plotting import label_log_range

    matplotlib.use("Agg")

    def ticks(values, axis="y"):
        _, ax = plt.subplots()
        ax.plot(values, values)
        ax.set(xscale="log", yscale="log")
        label_log_range(ax, values, axis)
        lo, hi = min(values), max(values)
        located = (ax.yaxis if axis == "y" else ax.xaxis).get_major_locator().tick_values(lo, hi)
        plt.close(ax.figure)
        return [round(t, 6) for t in located if lo <= t <= hi]

    assert ticks([120.0, 310.0]) == [150.0, 200.0, 250.0, 300.0]
    assert ticks([3.0, 90.0], "x") == [5.0, 10.0, 20.0, 50.0]
    # beyond two decades, powers of ten: 1-2-5 labels would print over each other
    assert ticks([1.0, 683.0], "x") == [1.0, 10.0, 100.0]
    assert ticks([686.0, 1.4e6], "x") == [1000.0, 10000.0, 100000.0, 1000000.0]


def _figure(**subplots):
    plt.switch_backend("Agg")
    return plt.subplots(**subplots)


def test_a_readable_figure_passes_the_figure_check():
    fig, ax = _figure()
    ax.loglog([10, 100, 1000], [1064, 3000, 6707], label="tied", color=head_color("tied"))
    ax.loglog([10, 100, 1000], [900, 2000, 5000], label="DRILL", color=head_color("drill"))
    ax.axhline(640, ls="--", color="grey", label="unigram")
    label_log_range(ax, [640, 6707])
    tidy_log_axis(ax, "both")
    ax.legend()
    assert figure_problems(fig) == []
    plt.close(fig)


def test_the_figure_check_finds_one_labelled_tick_on_a_long_log_axis():
    fig, ax = _figure()
    ax.bar(["tied", "softmax"], [1064, 6707])
    ax.set_yscale("log")
    ax.set_ylim(900, 7000)
    tidy_log_axis(ax)  # 1,000 is the only major tick in view
    assert any("y axis" in p and "1 labelled tick" in p for p in figure_problems(fig))
    plt.close(fig)


def test_the_figure_check_finds_overlapping_tick_labels():
    fig, ax = _figure(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    ax.set_xticks([0.0, 0.01, 0.02], ["1,000,000", "2,000,000", "3,000,000"])
    assert any("overlap" in p for p in figure_problems(fig))
    plt.close(fig)


def test_the_figure_check_refuses_run_folders_tiny_legends_and_lookalike_colours():
    fig, ax = _figure()
    ax.plot([1, 2], [1, 2], label="2026-11-26-h200-window2-fp32", color="#cc79a7")
    ax.plot([1, 2], [2, 3], label="reg2 tied", color="#d083b0")  # a near-identical pink
    ax.legend(fontsize=6)
    problems = figure_problems(fig)
    assert any("names a run folder" in p for p in problems)
    assert any("under 8 pt" in p for p in problems)
    assert any("colours" in p and "reg2 tied" in p for p in problems)
    plt.close(fig)


def test_one_model_drawn_as_line_and_markers_may_share_its_colour():
    fig, ax = _figure()
    ax.plot([1, 2, 3], [3, 2, 1], color=head_color("drill"), label="DRILL, the authors")
    ax.plot([1, 2], [3.1, 2.1], "o", color=head_color("drill"), label="DRILL, drillbook")
    ax.legend()
    assert figure_problems(fig) == []
    plt.close(fig)


@pytest.mark.parametrize(("text", "value"), [
    ("1,000", 1000.0), ("$10^{5}$", 1e5), ("$\\mathdefault{10^{3}}$", 1e3),
    ("\u22120.5", -0.5), ("$2\\times 10^{6}$", 2e6), ("tied", None), ("50%", 50.0)])
def test_tick_labels_read_as_numbers(text, value):
    assert _number(text) == value


def test_open_figures_are_checked_after_a_cell_and_a_problem_names_its_figure():
    from drillbook.notebook import FigureError, check_open_figures

    plt.close("all")
    fig, ax = _figure()
    ax.plot([1, 2], [1, 2], label="2026-11-26-h200-window2-fp32")
    ax.legend()
    fig.set_label("fig-example")
    with pytest.raises(FigureError, match=r"figure fig-example: .*names a run folder"):
        check_open_figures()
    plt.close("all")
    check_open_figures()  # nothing open: nothing to say


def test_the_chapters_read_evidence_through_one_module():
    """A chapter imports the papers' record, the authors' runs, the result files and the
    plotting helpers as ``drillbook.book``, not from the modules behind it."""
    import ast
    from pathlib import Path

    import drillbook.book

    internal = ("drillbook.experiments", "drillbook.authors", "drillbook.papers",
                "drillbook.plotting")
    for path in sorted((Path(__file__).parent.parent / "notebooks").glob("[0-9]*.py")):
        tree = ast.parse(path.read_text())
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in modules if m and m.startswith(internal)}, path.name
        used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name) and n.value.id == "book"}
        assert used <= set(drillbook.book.__all__), (path.name, used)


def test_rows_of_the_vmf_head_stay_apart_for_the_figure_check():
    names = ["vMF NLLvMF", "vMF reg2", "vMF reg2 tied", "vMF cosine", "vMF l2"]
    colors = family_colors(names)
    for a, b in itertools.combinations(names, 2):
        assert math.dist(cielab(colors[a]), cielab(colors[b])) >= MIN_SERIES_DELTA_E, (a, b)

