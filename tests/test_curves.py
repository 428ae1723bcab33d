"""drillbook's runs on the authors' curves, and what a full run costs
(drillbook.experiments.results.curves), read from the committed GPU windows."""

from __future__ import annotations

import json

import matplotlib
import pytest

from drillbook.authors import authors_curves
from drillbook.configs import apply_overrides, get_config
from drillbook.experiments import TABLES, book_results
from drillbook.experiments.results.curves import (
    PAPER_TABLES,
    _bound_config,
    agreement_rows,
    authors_band_rows,
    band_rows,
    figure_against_authors,
    full_run_cost,
    h200_ms_per_update,
    plot_against_authors,
    runs_like_authors,
    same_setting,
)
from drillbook.heads import HEADS
from drillbook.heads.registry import language_model_refusal

matplotlib.use("Agg")
CURVES = authors_curves()
RUNS = runs_like_authors()
GPU = book_results() / "gpu"


def test_same_setting_ignores_seed_epochs_and_precision_only():
    base = get_config("ptb/awd-lstm").to_dict()
    for change in ("train.seed=1", "train.epochs=7", "train.amp=bf16"):
        other = apply_overrides(get_config("ptb/awd-lstm"), [change]).to_dict()
        assert same_setting(base, other), change
    for change in ("train.batch_size=12", "train.lr=20", "model.dropouti=0.3",
                   "train.max_batches_per_epoch=10"):
        other = apply_overrides(get_config("ptb/awd-lstm"), [change]).to_dict()
        assert not same_setting(base, other), change
    assert not same_setting(base, get_config("ptb/awd-lstm-drill").to_dict())


def test_every_committed_run_at_an_authors_setting_is_found():
    found = {(r["window"], r["row"]): r for r in RUNS}
    window2 = "2026-11-26-h200-window2-fp32"
    gpu_ptb = {d.stem: json.loads(d.read_text())
               for d in (GPU / window2 / "gpu-ptb").glob("*.json")}
    for row, log in (("tied", "ptb-awd-lstm"), ("drill-4", "ptb-drill"), ("mos-15", "ptb-mos")):
        run = found[(window2, row)]
        assert run["authors"] == log and run["source"] == "result"
        assert [p["val_ppl"] for p in run["points"]] == [p["val_ppl"] for p in
                                                         gpu_ptb[row]["curve"]]
        assert [p["updates"] for p in run["points"]] == [p["step"] for p in
                                                         gpu_ptb[row]["curve"]]
    assert (window2, "doc") not in found  # DOC's authors published no such log
    # the speed table's one-epoch rows, of both precisions, and a row that left only its log
    assert {r for w, r in found if w == "2026-11-26-h200-fp32"} == {
        "ptb-awd-lstm", "ptb-drill", "ptb-mos", "wt2-awd-lstm", "wt2-drill", "wt2-mos"}
    assert found[("2026-11-26-h200-fp32", "wt2-mos")]["source"] == "log"
    assert found[("2026-11-26-h200-bf16", "ptb-mos")]["precision"] == "bf16-autocast"


def test_agreement_reads_the_authors_curve_at_the_same_epoch_and_updates():
    rows = agreement_rows(RUNS)
    for r in rows:
        curve = CURVES[r["authors"]]
        assert r["authors_epoch"] == curve.val_ppl[r["epoch"] - 1]
        assert r["ratio"] == pytest.approx(r["ours"] / r["authors_epoch"])
        theirs = r["updates"] / curve.updates_per_epoch
        assert (r["authors_updates"] is None) == (theirs < 1)
    drill = [r for r in rows if r["row"] == "drill-4"]
    assert [r["epoch"] for r in drill] == [1, 2, 3, 4, 5]
    # MoS's epoch is 1.67 tied epochs of updates: read at equal updates, the tied
    # model's curve after MoS's second epoch is the tied model past its third
    mos2 = next(r for r in rows if r["row"] == "mos-15" and r["epoch"] == 2)
    tied = CURVES["ptb-awd-lstm"]
    assert tied.val_ppl[3] < tied.val_ppl_after_updates(mos2["updates"]) < tied.val_ppl[2]


def test_the_figure_draws_every_curve_and_run_on_log_axes():
    import matplotlib.pyplot as plt

    names = ["ptb-awd-lstm", "ptb-drill"]
    for x in ("epoch", "updates"):
        ax = plot_against_authors(names, RUNS, x=x)
        assert ax.get_xscale() == ax.get_yscale() == "log"
        labels = [line.get_label() for line in ax.get_lines()]
        assert sum(label.startswith("authors") for label in labels) == 2
        drawn = [r for r in RUNS if r["authors"] in names]
        assert sum(label.startswith("drillbook") for label in labels) == len(drawn)
        last = ax.get_lines()[1]  # the DRILL log, all 600 epochs
        assert len(last.get_xdata()) == 600
        if x == "updates":
            assert last.get_xdata()[-1] == pytest.approx(CURVES["ptb-drill"].updates[-1])
        plt.close(ax.figure)
    with pytest.raises(ValueError, match="epoch"):
        plot_against_authors(names, x="steps")
    fig = figure_against_authors([names, ["wt2-mos"]], RUNS, titles=["PTB", "WikiText-2"])
    assert [ax.get_title() for ax in fig.axes] == [
        "PTB, against epochs", "PTB, against updates", "WikiText-2, against epochs",
        "WikiText-2, against updates"]
    assert [ax.get_legend() is not None for ax in fig.axes] == [False, True, False, True]
    plt.close(fig)


def test_h200_speeds_are_the_newest_plain_float32_measurements():
    speeds = h200_ms_per_update()
    window3 = GPU / "2026-11-26-h200-window3-fp32" / "bench"
    fp32 = {r["config"]: r["ms_per_update"] for r in json.loads(
        (window3 / "call1" / "speed-goals-fp32.json").read_text())["rows"]}
    assert speeds["ptb/awd-lstm"]["ms"] == fp32["ptb/awd-lstm"]  # not tf32's, nor compile's
    assert speeds["ptb/awd-lstm"]["window"] == "2026-11-26-h200-window3-fp32"
    assert speeds["ptb/awd-lstm-drill"]["n"] == 2  # call1 and call2, their median
    # WikiText-2 was timed in the first window only: its speed rows' first epochs
    wt2 = json.loads((GPU / "2026-11-26-h200-fp32" / "speed" / "wt2-drill.json").read_text())
    assert speeds["wt2/awd-lstm-drill"]["ms"] == pytest.approx(
        1000 * wt2["metrics"]["seconds_per_epoch"] / wt2["steps_done"])


@pytest.mark.parametrize("table", PAPER_TABLES)
def test_full_run_cost_of_every_paper_table(table):
    speeds = h200_ms_per_update()
    rows = {r["row"]: r for r in full_run_cost(table)}
    assert list(rows) == [r.name for r in TABLES[table]]
    for spec in TABLES[table]:
        r, config = rows[spec.name], spec.resolve()
        assert r["epochs"] == config.train.epochs
        curve = CURVES[r["gtx_basis"]]
        assert r["gtx_hours"] == pytest.approx(r["epochs"] * curve.mean_seconds / 3600)
        assert r["gtx_exact"] == same_setting(config.to_dict(),
                                              get_config(curve.config).to_dict())
        timed = r["h200_basis"].split(",")[0]
        updates = r["updates_per_epoch"] * (
            1 if r["h200_exact"] else get_config(config.name).train.batch_size
            / get_config(timed).train.batch_size)
        assert r["h200_hours"] == pytest.approx(
            r["epochs"] * updates * speeds[timed]["ms"] / 3.6e6, rel=0.01)
        # a row that was not measured is bounded by the cheaper model it extends
        if not r["h200_exact"]:
            assert timed == _bound_config(config)


def test_every_language_model_head_has_a_measured_lower_bound():
    speeds, logs = h200_ms_per_update(), {c.config for c in CURVES.values()}
    for kind, cls in HEADS.items():
        if language_model_refusal(cls) is not None:  # vMF ends no language model
            continue
        for corpus in ("ptb", "wt2"):
            config = apply_overrides(get_config(f"{corpus}/awd-lstm"), [f"head.kind={kind}"])
            bound = _bound_config(config)
            assert bound in speeds and bound in logs, (kind, corpus)


def test_your_own_results_folder_is_read_as_one_window(tmp_path):
    """A reader's `drillbook reproduce gpu-ptb --out mine` lands on the authors' curves."""
    import shutil

    source = GPU / "2026-11-26-h200-window2-fp32" / "gpu-ptb"
    (tmp_path / "mine" / "gpu-ptb").mkdir(parents=True)
    shutil.copy(source / "drill-4.json", tmp_path / "mine" / "gpu-ptb" / "drill-4.json")
    runs = runs_like_authors(tmp_path / "mine")
    assert [(r["window"], r["row"], r["authors"]) for r in runs] == [
        ("mine", "drill-4", "ptb-drill")]
    assert runs_like_authors(tmp_path / "empty") == []


def test_the_authors_fig3_and_ones_own_bands_draw_alike():
    import matplotlib.pyplot as plt
    import torch

    from drillbook.analysis import compare_by_frequency
    from drillbook.authors import authors_bands
    from drillbook.experiments.results.evidence import plot_band_differences

    word, token = authors_band_rows("word"), authors_band_rows("token")
    assert len(word) == len(token) == 3 * 8
    rarest = authors_bands()[0]
    first = next(r for r in word if r["row"] == "tied")
    assert first["band"] == "1-49" and first["relative"] == rarest.relative_word["tied"] / 100
    assert next(r for r in token if r["row"] == "dual")["relative"] == pytest.approx(
        rarest.relative_token["dual"] / 100)
    # one's own comparison in the same rows: 3 words, counts 10, 60 and 6000
    target = torch.tensor([0, 1, 2, 0])
    mine = band_rows({"tied": compare_by_frequency(
        torch.tensor([1.0, 1.0, 1.0, 1.0]), torch.tensor([2.0, 1.0, 1.0, 2.0]), target,
        torch.tensor([10, 60, 6000]))})
    assert [r["band"] for r in mine] == [r["band"] for r in word if r["row"] == "tied"]
    assert mine[0]["relative"] == pytest.approx(1.0) and mine[0]["tokens"] == 2
    for rows in (word, mine):
        ax = plot_band_differences(rows, reference="drill")
        assert len(ax.patches) >= 8
        plt.close(ax.figure)
    with pytest.raises(ValueError, match="word"):
        authors_band_rows("type")
