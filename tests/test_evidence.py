"""What a GPU window brings back and how the book reads it: the authors' console logs,
DRILL's Table 3 from the committed H200 window, the report's window sections, the analyses
a result file may carry, and the archive a window's results travel in."""

from __future__ import annotations

import copy
import io
import json
import statistics
import tarfile
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import gpu_sitting

from drillbook.analysis import loss_by_band, loss_by_word, rare_word_f1
from drillbook.analysis.frequency import DRILL_BANDS, band_label
from drillbook.configs import get_nmt_config
from drillbook.errors import MissingFileError, ResultFileError
from drillbook.experiments import render_report, validate_result
from drillbook.experiments.results import book_results, gpu_results, load_results, unpack_results
from drillbook.experiments.results.authors_code import (
    PACKAGE_ROWS,
    authors_code_timings,
    read_authors_log,
)
from drillbook.experiments.results.evidence import (
    band_differences,
    committed_results,
    curve_points,
    f1_rows,
    missing_evidence,
    mixture_usage,
    plan_folder,
    plan_results,
    plan_runs,
    plot_band_differences,
    plot_f1,
    rank_rows,
    table_results,
    val_at_epoch,
    val_at_updates,
    window_rows,
)
from drillbook.experiments.results.speed import first_epochs, speed_rows
from drillbook.experiments.tables import TABLES
from drillbook.papers import RECORD
from drillbook.plotting import head_color

FP32, BF16 = (gpu_results("fp32", table="speed"),
              gpu_results("bf16", table="speed"))

LOG = """\
Model total parameters: 24221600
| epoch   1 |   100/  663 batches | lr 30.00000 | ms/batch 30.00 | loss  7.49 | ppl  1789.13
| epoch   1 |   200/  663 batches | lr 30.00000 | ms/batch 20.00 | loss  6.80 | ppl   897.85
| epoch   1 |   300/  663 batches | lr 30.00000 | ms/batch 22.00 | loss  6.50 | ppl   665.14
| epoch   1 |   400/  663 batches | lr 30.00000 | ms/batch 21.00 | loss  6.30 | ppl   544.57
-----------------------------------------------------------------------------------------
| end of epoch   1 | time: 11.63s | valid loss  5.80 | valid ppl   329.35
"""


# ------------------------------------------------------------------ the authors' logs
def test_an_authors_log_is_read_as_it_prints(tmp_path):
    path = tmp_path / "awd-ptb.log"
    path.write_text(LOG)
    run = read_authors_log(path)
    assert run == {"run": "awd-ptb", "ms_per_batch": [30.0, 20.0, 22.0, 21.0],
                   "loss": [7.49, 6.80, 6.50, 6.30],
                   "steady_ms_per_batch": 21.0, "batches_per_epoch": 663,
                   "batches_logged": 400, "parameters": 24221600, "epoch_seconds": 11.63,
                   "valid_ppl": 329.35}
    # a run killed before its epoch ended has no epoch time
    path.write_text(LOG.split("---")[0])
    assert read_authors_log(path)["epoch_seconds"] is None


def test_a_file_that_is_not_an_authors_log_is_refused(tmp_path):
    path = tmp_path / "x.log"
    path.write_text("Traceback (most recent call last):\n")
    with pytest.raises(ResultFileError, match="has no 'ms/batch' line"):
        read_authors_log(path)


def test_the_committed_authors_logs_are_one_epoch_of_each_run():
    runs = {r["run"]: r for r in authors_code_timings(FP32 / "authors-code")}
    assert set(runs) == set(PACKAGE_ROWS)
    for r in runs.values():
        assert r["steady_ms_per_batch"] == statistics.median(r["ms_per_batch"][1:])
        assert r["batches_logged"] <= r["batches_per_epoch"]
    # MoS's slow epoch was cut short (600 of 1106 batches): no epoch time, its ms/batch only
    ended = {n for n, r in runs.items() if r["epoch_seconds"] is not None}
    assert ended == {"awd-ptb", "drill-ptb", "drill-wt2"}


# ------------------------------------------------------------------ DRILL Table 3 on a GPU
def test_speed_rows_divide_by_their_corpus_baseline_and_quote_the_record():
    rows = {r["row"]: r for r in speed_rows(FP32, BF16)}
    epochs = first_epochs(FP32)
    assert set(rows) == set(epochs) <= {r.name for r in TABLES["speed"]}
    for name, r in rows.items():
        base = epochs[TABLES["speed"].baseline_of(name)]
        assert r["ratio"] == epochs[name]["seconds"] / base["seconds"]
        assert r["ms_per_update"] == 1000 * epochs[name]["seconds"] / epochs[name]["updates"]
        assert r["repo_seconds_per_epoch"] == RECORD[f"drill-repo:speed:{name}"][
            "seconds_per_epoch"]
        paper = RECORD[f"drill:sec4.1.1:{name}-speed"].values
        if "ratio_to_tied" in paper:
            assert r["paper_ratio"] == paper["ratio_to_tied"]
    # bfloat16 was measured for two rows only; the others have no such number
    assert {n for n, r in rows.items() if r["bf16_seconds_per_epoch"]} == {
        d["row"] for d in load_results(BF16)}
    theirs = {PACKAGE_ROWS[r["run"]]: r["steady_ms_per_batch"]
              for r in authors_code_timings(FP32 / "authors-code")}
    for name, ms in theirs.items():
        assert rows[name]["ratio_to_authors"] == rows[name]["ms_per_update"] / ms


def test_a_log_line_is_preferred_to_the_result_file(tmp_path):
    """The result file's seconds per epoch is a mean over its epochs; the log's first line
    is the first epoch alone, what the authors' logs time."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "ptb-mos.log.jsonl").write_text(
        json.dumps({"epoch_seconds": 2.0, "batches": 10}) + "\n"
        + json.dumps({"epoch_seconds": 9.0, "batches": 10}) + "\n")
    assert first_epochs(tmp_path) == {"ptb-mos": {"seconds": 2.0, "updates": 10}}
    assert first_epochs(None) == {}


# ------------------------------------------------------------------ the report
def test_the_report_gives_each_window_its_sections(tmp_path):
    window = tmp_path / "gpu" / FP32.name
    for path in FP32.rglob("*"):
        if path.is_file():
            target = window / path.relative_to(FP32)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    text = render_report(tmp_path)
    assert f"## GPU window {FP32.name}" in text
    assert "### speed" in text and "### The authors' code on the same GPU" in text
    lines = [line for line in text.splitlines() if line.startswith("| awd-ptb |")]
    assert len(lines) == 1 and "| ptb-awd-lstm |" in lines[0]
    # the authors' MoS is no baseline until a window has timed it without its host cost
    mos = [line for line in text.splitlines() if line.startswith("| mos-ptb |")]
    assert len(mos) == 1 and mos[0].endswith("| withheld |")
    assert "their training loop calls gc.collect() after every small batch" in text
    assert render_report(tmp_path) == text  # the same files give the same bytes
    benchmarks_only = tmp_path / "gpu" / "2099-01-01-gpu-fp32" / "bench"
    benchmarks_only.mkdir(parents=True)
    (benchmarks_only / "speed.json").write_text("{}")
    assert render_report(tmp_path) == text  # no empty section for a window of benchmarks


# ------------------------------------------------------------------ analyses
def test_band_labels():
    assert [band_label(*b) for b in ((4, 5), (50, 100), (5000, None))] == ["4", "50-99",
                                                                          "5000+"]


def test_loss_by_band_adds_up_what_a_loop_over_tokens_adds_up(gen):
    vocab = 40
    target = torch.randint(0, vocab, (500,), generator=gen)
    nll = torch.rand(500, generator=gen) * 5
    counts = torch.randint(0, 3000, (vocab,), generator=gen)
    counts[:3] = 0  # never seen in training: in no band
    sums, tokens = loss_by_word(nll, target, vocab)
    rows = loss_by_band(sums, tokens, counts)
    for (lo, hi), row in zip(DRILL_BANDS, rows, strict=True):
        inside = [i for i, w in enumerate(target.tolist())
                  if lo <= counts[w] and (hi is None or counts[w] < hi)]
        assert row["tokens"] == len(inside)
        assert row["types"] == len({int(target[i]) for i in inside})
        if inside:
            assert row["mean_nll"] == pytest.approx(float(nll[inside].double().mean()))
        else:
            assert row["mean_nll"] is None


def test_rare_word_f1_matches_counting_by_hand():
    hyps = [["a", "a", "b", "c"], ["d", "x"]]
    refs = [["a", "b", "b"], ["d", "y", "y", "z"]]
    counts = {"a": 1, "b": 1, "c": 2, "d": 5000, "y": 1, "z": 50}  # x: never seen (0)
    rows = {r["band"]: r for r in rare_word_f1(hyps, refs, counts)}
    # count 1: a (hyp 2, ref 1, matched 1), b (1, 2, 1), y (0, 2, 0)
    one = rows["1"]
    assert (one["matches"], one["hypothesis_tokens"], one["reference_tokens"]) == (2, 3, 5)
    assert one["precision"] == pytest.approx(2 / 3) and one["recall"] == pytest.approx(2 / 5)
    assert one["f1"] == pytest.approx(2 * (2 / 3) * (2 / 5) / (2 / 3 + 2 / 5))
    assert rows["0"]["recall"] is None and rows["0"]["precision"] == 0  # x, unseen
    assert rows["2"]["precision"] == 0 and rows["2"]["f1"] is None  # c: no reference
    assert rows["1000+"]["f1"] == 1.0
    # z is in the references only: no translation produced a 10-99 word, F1 0
    assert (rows["10-99"]["precision"], rows["10-99"]["recall"], rows["10-99"]["f1"]) == (
        None, 0.0, 0.0)
    assert sum(r["hypothesis_tokens"] for r in rows.values()) == sum(map(len, hyps))
    assert Counter(r["reference_tokens"] for r in rows.values())[0] == len(rows) - 3
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        rare_word_f1(hyps, refs[:1], counts)


# ------------------------------------------------------------------ the result schema
def _doc() -> dict:
    return copy.deepcopy(load_results(FP32)[0])


def test_older_result_files_still_read_and_the_analyses_block_is_checked():
    doc = _doc()
    assert doc["format"] == "drillbook-result/2" and validate_result(doc) == []
    doc["format"] = "drillbook-result/3"
    doc["analyses"] = {"rare_word_f1": [], "sentences_per_second": 12.5}
    assert validate_result(doc) == []
    doc["analyses"]["spectra"] = []
    assert any("spectra" in p for p in validate_result(doc))
    doc = _doc()
    doc["status"] = "deadline"
    doc["error"] = "stopped at the window's deadline"
    assert validate_result(doc) == []
    doc["status"] = "crashed"
    assert any("status" in p for p in validate_result(doc))


def test_an_archive_entry_outside_its_folder_is_refused(tmp_path):
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = b"{}"
        info = tarfile.TarInfo("../outside.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ResultFileError, match=r"'\.\./outside\.json' is not a result file"):
        unpack_results(archive, tmp_path / "in")
    assert not (tmp_path / "outside.json").exists()


def test_the_window_folders_hold_only_small_files():
    for path in Path(FP32).parent.rglob("*"):
        assert not path.is_file() or path.stat().st_size < 2**20, path


# ------------------------------------------------------------------ the chapters' evidence
def _with_analyses(doc: dict, row: str, table: str, bands: list[float | None],
                   **analyses) -> dict:
    """A copy of a committed result file as another table's row, carrying analyses."""
    new = copy.deepcopy(doc)
    new["format"], new["table"], new["row"] = "drillbook-result/3", table, row
    labels = [("1-9", 1, 10, 5), ("10-99", 10, 100, 40), ("100+", 100, None, 300)]
    new["analyses"] = {"frequency_bands": [
        {"band": b, "low": lo, "high": hi, "types": 3, "tokens": n if v is not None else 0,
         "mean_nll": v} for (b, lo, hi, n), v in zip(labels, bands, strict=True)],
        **analyses}
    assert validate_result(new) == []
    return new


def _window(root: Path, name: str, docs: list[dict], seed_folder: str | None = None) -> None:
    for doc in docs:
        folder = root / "gpu" / name / doc["table"] / (seed_folder or "")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{doc['row']}.json").write_text(json.dumps(doc))


def test_table_results_come_in_the_tables_row_order():
    docs = table_results("cpu-scale")
    assert [d["row"] for d in docs] == [r.name for r in TABLES["cpu-scale"]]
    ranks = rank_rows(docs)
    assert [r["rank_tol_1"] for r in ranks] == [d["metrics"]["rank_tol_1"] for d in docs]
    assert {r["d"] for r in ranks} == {d["config"]["model"]["emsize"] for d in docs}


def test_a_plan_trained_in_sittings_lists_every_run_and_how_far_it_got(tmp_path):
    base = next(d for d in table_results("laptop-lm", seeds=True)  # at its plateau
                if (d["row"], d["seed"]) == ("sigsoftmax", 141))
    stopped = copy.deepcopy(base)
    stopped.update(seed=143, status="deadline", epochs_done=0, wall_seconds=30.0,
                   metrics={}, sittings=[gpu_sitting([1, 0], base["git_commit"])])
    (tmp_path / "laptop-lm" / "seed-143").mkdir(parents=True)
    (tmp_path / "laptop-lm" / "sigsoftmax.json").write_text(json.dumps(base))
    (tmp_path / "laptop-lm" / "seed-143" / "sigsoftmax.json").write_text(json.dumps(stopped))
    first, second = plan_runs("laptop-lm", tmp_path)
    assert (first["row"], first["seed"], first["final"], first["epochs"]) == (
        "sigsoftmax", 141, True, base["epochs_done"])
    assert first["valid"] == base["metrics"]["val_ppl"]
    assert first["test"] == base["metrics"]["test_ppl"]
    assert first["minutes_per_epoch"] == pytest.approx(
        base["wall_seconds"] / 60 / base["epochs_done"])
    assert (second["seed"], second["final"], second["test"], second["minutes_per_epoch"]) == (
        143, False, None, None)
    assert (first["device"], second["device"]) == ("cpu", "gpu")
    stopped["sittings"].insert(0, {**stopped["sittings"][0], "device": base["device"]})
    (tmp_path / "laptop-lm" / "seed-143" / "sigsoftmax.json").write_text(json.dumps(stopped))
    assert plan_runs("laptop-lm", tmp_path)[1]["device"] == "cpu+gpu"


def test_rank_rows_give_the_width_of_the_scored_vectors():
    """A mixture scores embedding-sized components (280 for MoS on PTB), not its 620-wide
    last layer; the untied softmax scores its last layer; the dual head its joint space."""
    from drillbook.configs import apply_overrides, get_config

    def d_of(config) -> int:
        doc = {"row": "r", "seed": 1, "config": config.to_dict(),
               "metrics": {"rank_tol_1": 1}}
        return rank_rows([doc])[0]["d"]

    assert d_of(get_config("ptb/awd-lstm-mos")) == d_of(get_config("ptb/awd-lstm-doc")) == 280
    assert get_config("ptb/awd-lstm-mos").model.d_out == 620
    assert d_of(get_config("ptb/awd-lstm")) == d_of(get_config("ptb/awd-lstm-drill")) == 400
    assert d_of(get_config("ptb/awd-lstm-full-softmax")) == 1150
    dual = apply_overrides(get_config("ptb/awd-lstm-dual"), ["head.options.d_joint=300"])
    assert d_of(dual) == 300


def test_a_plan_is_read_from_every_window_that_ran_it_as_one_table(tmp_path):
    assert plan_results("gpu-ptb", tmp_path) == []  # no window has run it yet
    assert ("`make evidence MINUTES=9 OUT=evidence` on a GPU (the window's one command, "
            "whose plans include gpu-ptb)") in missing_evidence("gpu-ptb")
    committed = {d["row"] for d in plan_results("gpu-ptb")}  # the H200 window of 2026-11-26
    assert committed == {"tied", "drill-4", "mos-15", "doc"}
    base = table_results("cpu-scale")[0]
    old = _with_analyses(base, "tied", "gpu-ptb", [6.0, 5.0, 4.0])
    new = _with_analyses(base, "drill-4", "gpu-ptb", [5.0, 4.5, 4.0])
    seed = copy.deepcopy(new)
    seed["seed"] = 142
    _window(tmp_path, "2026-01-01-h100-fp32", [old])
    _window(tmp_path, "2026-02-01-h200-fp32", [new])
    _window(tmp_path, "2026-02-01-h200-fp32", [seed], seed_folder="seed-142")
    _window(tmp_path, "2026-03-01-h200-bf16", [old])  # another precision: not this one
    found = plan_results("gpu-ptb", tmp_path)
    assert [(d["row"], d["seed"], d["window"]) for d in found] == [
        ("tied", old["seed"], "2026-01-01-h100"), ("drill-4", new["seed"], "2026-02-01-h200"),
        ("drill-4", 142, "2026-02-01-h200")]
    assert [d["row"] for d in plan_results("gpu-ptb", tmp_path, "bf16")] == ["tied"]


def test_band_differences_are_drill_fig3s_relative_cross_entropy():
    base = table_results("cpu-scale")[0]
    docs = [_with_analyses(base, "tied", "gpu-ptb", [6.0, 5.0, None]),
            _with_analyses(base, "drill-4", "gpu-ptb", [5.0, 4.0, 4.0]),
            _with_analyses(base, "mos-15", "gpu-ptb", [5.5, 4.0, 3.0])]
    rows = {(r["row"], r["band"]): r["relative"] for r in band_differences(docs, "drill-4")}
    assert rows == {("tied", "1-9"): pytest.approx(0.2), ("tied", "10-99"): pytest.approx(0.25),
                    ("tied", "100+"): None, ("mos-15", "1-9"): pytest.approx(0.1),
                    ("mos-15", "10-99"): 0.0, ("mos-15", "100+"): pytest.approx(-0.25)}
    with pytest.raises(ValueError, match="reference row 'doc'"):
        band_differences(docs, "doc")
    import matplotlib.pyplot as plt

    plt.switch_backend("Agg")
    ax = plot_band_differences(band_differences(docs, "drill-4"), "drill-4")
    assert len(ax.patches) == 2 * 3 + 3  # a bar per row and band; every band of 3 words grey
    plt.close("all")
    ax = plot_band_differences(band_differences(docs, "drill-4"), "drill-4", min_types=3)
    assert len(ax.patches) == 2 * 3  # none under 3 word types
    plt.close("all")


def test_curves_usage_and_f1_from_result_files():
    base = table_results("cpu-scale")[0]
    f1 = [{"band": "0", "low": 0, "high": 1, "reference_tokens": 4, "hypothesis_tokens": 2,
           "matches": 1, "precision": 0.5, "recall": 0.25, "f1": 1 / 3},
          {"band": "1", "low": 1, "high": 2, "reference_tokens": 0, "hypothesis_tokens": 0,
           "matches": 0, "precision": None, "recall": None, "f1": None}]
    mixture = {"usage": [0.5, 0.5], "entropy": 0.6, "max_entropy": 0.69, "cv": 0.1,
               "usage_by_layer": {}, "positions": 10}
    doc = _with_analyses(base, "mos", "gpu-small", [5.0, 4.0, 3.0], rare_word_f1=f1,
                         mixture=mixture)
    points = curve_points(doc)
    assert [p["epoch"] for p in points] == [p["epoch"] for p in base["curve"]]
    assert [p["value"] for p in points] == [p["val_ppl"] for p in base["curve"]]
    assert mixture_usage([doc, base]) == {"mos": mixture}
    rows = f1_rows([doc])
    assert [(r["band"], r["f1"]) for r in rows] == [("0", 1 / 3), ("1", None)]
    import matplotlib.pyplot as plt

    plt.switch_backend("Agg")
    ax = plot_f1(rows)
    assert list(ax.lines[0].get_xdata()) == [0]  # the empty bin is left out
    family = [{**r, "row": name} for name in ("vmf-reg2", "vmf-reg2-tied", "softmax")
              for r in rows]
    ax = plot_f1(family)  # rows of one head: distinct shades of its colour
    colors = [line.get_color() for line in ax.lines]
    assert len(set(colors)) == 3
    assert colors[0] == head_color("vmf") and colors[2] == head_color("softmax")
    plt.close("all")


def test_committed_results_are_every_result_file_at_any_depth(tmp_path):
    doc = _with_analyses(table_results("cpu-scale")[0], "tied", "gpu-ptb", [1.0, 1.0, 1.0])
    _window(tmp_path, "2026-02-01-h200-fp32", [doc])
    _window(tmp_path, "2026-02-01-h200-fp32", [doc], seed_folder="seed-142")
    (tmp_path / "cpu-scale").mkdir()
    (tmp_path / "cpu-scale" / "tied.json").write_text(json.dumps(doc))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "targets.json").write_text('{"format": "drillbook-bench/2"}')
    (tmp_path / "notes.json").write_text("not JSON")
    found = committed_results(tmp_path)
    assert [d["row"] for d in found] == ["tied"] * 3
    broken = copy.deepcopy(doc)
    del broken["metrics"]
    (tmp_path / "cpu-scale" / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(ResultFileError, match=r"broken\.json"):
        committed_results(tmp_path)
    book = committed_results()  # the package's own: the tables', seeds' and windows' rows
    assert {d["table"] for d in book} >= {"cpu-scale", "tutorial", "speed", "gpu-ptb"}
    assert len(book) > len(load_results(book_results()))
    by_task = {task: committed_results(task=task) for task in ("language-model", "translation")}
    split = by_task["language-model"] + by_task["translation"]
    assert len(split) == len(book) and all(d in book for d in split)  # each in one task
    assert {d["table"] for d in by_task["translation"]} <= {
        "laptop-nmt", "laptop-nmt-vmf", "gpu-multi30k", "multi30k-joint", "multi30k-vmf",
        "first-updates-nmt"}
    translation = copy.deepcopy(doc)
    translation["config"] = get_nmt_config("multi30k/de-en-dual").to_dict()
    (tmp_path / "cpu-scale" / "broken.json").unlink()
    (tmp_path / "cpu-scale" / "dual.json").write_text(json.dumps(translation))
    assert len(committed_results(tmp_path, task="language-model")) == 3
    assert [d["config"]["name"] for d in committed_results(tmp_path, task="translation")] == [
        "multi30k/de-en-dual"]


def test_plan_folder_names_the_window(tmp_path):
    assert plan_folder("gpu-ptb", tmp_path) is None
    doc = _with_analyses(table_results("cpu-scale")[0], "tied", "gpu-ptb", [1.0, 1.0, 1.0])
    _window(tmp_path, "2026-02-01-h200-fp32", [doc])
    assert plan_folder("gpu-ptb", tmp_path) == tmp_path / "gpu" / "2026-02-01-h200-fp32"


def test_the_newest_window_is_one_that_holds_result_files(tmp_path):
    """Without a table named, ``gpu_results`` passes over a newer window of benchmark
    reports only (nothing for ``load_results`` there); named, such a window is returned."""
    doc = _with_analyses(table_results("cpu-scale")[0], "tied", "gpu-ptb", [1.0, 1.0, 1.0])
    _window(tmp_path, "2026-02-01-h200-fp32", [doc])
    benchmarks = tmp_path / "gpu" / "2026-03-01-h200-fp32" / "bench"
    benchmarks.mkdir(parents=True)
    (benchmarks / "targets.json").write_text("{}")
    assert gpu_results("fp32", results=tmp_path) == tmp_path / "gpu" / "2026-02-01-h200-fp32"
    assert gpu_results("fp32", "2026-03-01-h200", results=tmp_path) == benchmarks.parent
    with pytest.raises(MissingFileError, match="with a 'speed' table"):
        gpu_results("fp32", table="speed", results=tmp_path)


def test_a_window_says_what_each_row_reached_and_compares_rows_at_one_epoch():
    """The committed H200 window: the deadline stopped tied and DRILL-4 after five epochs,
    before their test evaluation; MoS-15 and DOC stopped at their budget after two, with
    test perplexities. After two epochs every row has a validation perplexity."""
    docs = plan_results("gpu-ptb")
    rows = {r["row"]: r for r in window_rows(docs)}
    assert {r: (rows[r]["status"], rows[r]["epochs"], rows[r]["test"] is None)
            for r in rows} == {"tied": ("deadline", 5, True), "drill-4": ("deadline", 5, True),
                               "mos-15": ("budget", 2, False), "doc": ("budget", 2, False)}
    second = val_at_epoch(docs, 2)
    assert set(second) == set(rows) and set(val_at_epoch(docs, 5)) == {"tied", "drill-4"}
    assert second["tied"] == docs[[d["row"] for d in docs].index("tied")]["curve"][1]["val_ppl"]


def test_rows_of_unequal_batches_compared_at_equal_updates():
    """MoS-15 trains at batch 12, 1,140 updates an epoch against the tied model's 689: after
    its second epoch's updates the tied model is between its third and fourth epochs."""
    import math

    from drillbook.metrics import log_interpolate

    docs = {d["row"]: d for d in plan_results("gpu-ptb")}
    tied, mos = docs["tied"]["curve"], docs["mos-15"]["curve"]
    at = val_at_updates(docs.values(), mos[1]["step"])
    assert at["mos-15"] == mos[1]["val_ppl"]  # a logged epoch: its own value
    assert tied[3]["val_ppl"] < at["tied"] < tied[2]["val_ppl"]
    assert val_at_updates(docs.values(), tied[2]["step"])["tied"] == tied[2]["val_ppl"]
    assert "mos-15" not in val_at_updates(docs.values(), 10 * mos[-1]["step"])
    assert log_interpolate([1, 2], [100.0, 400.0], 1.5) == pytest.approx(math.sqrt(4e4))
    assert log_interpolate([1, 2], [100.0, 400.0], 2.5) is None
    assert log_interpolate([], [], 1) is None
