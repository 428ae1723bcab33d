"""Reproductions: the result schema, a tiny budgeted run that resumes, the report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import gpu_sitting
from test_train import tiny_corpus

from drillbook.cli import main
from drillbook.experiments import (
    TABLES,
    book_results,
    load_results,
    render_report,
    reproduce,
    validate_result,
    write_result,
)

ROOT = Path(__file__).resolve().parent.parent

#: a tiny AWD-LSTM on the tiny corpus; fine-tuning stops at its first non-monotone epoch
TINY_LM = ["model.emsize=12", "model.nhid=16", "train.batch_size=4", "train.bptt=6",
           "train.eval_batch_size=2", "train.test_batch_size=2", "train.nonmono=1",
           "train.lr=5"]


def tiny_reproduce(tmp_path: Path, overrides: list[str]) -> dict:
    """``reproduce``'s keyword arguments for a run of ``overrides`` on the tiny corpus, on
    the CPU, with its results and run folders under ``tmp_path``."""
    return dict(out=tmp_path / "r", runs=tmp_path / "runs", overrides=overrides,
                corpus=tiny_corpus(), device="cpu", progress=False)
needs_data = pytest.mark.skipif(
    not (Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "ptb").is_dir(),
    reason="needs the corpora: set DRILLBOOK_DATA (make test points it at ../shared/data)")

MICRO = ["model.emsize=16", "model.nhid=16", "train.max_batches_per_epoch=4",
         "train.epochs=2", "train.max_eval_tokens=300", "train.batch_size=8",
         "train.eval_batch_size=4", "train.test_batch_size=4"]


def test_every_table_row_names_a_real_config():
    for table, rows in TABLES.items():
        assert len({r.name for r in rows}) == len(rows), table
        for row in rows:
            assert row.resolve().name == row.config  # raises on an unknown name or override


def test_committed_result_files_are_valid_and_the_report_is_current():
    results = book_results()
    assert results == ROOT / "drillbook" / "results"  # the package's own folder
    assert load_results(results)  # raises on any invalid file
    # the committed report is exactly what the files give (regenerate it with
    # `drillbook report --results drillbook/results --out drillbook/results/REPORT.md`)
    assert (results / "REPORT.md").read_text() == render_report(results) + "\n"


def test_book_results_says_when_the_installed_package_lacks_them(tmp_path, monkeypatch):
    import importlib.resources

    from drillbook.errors import MissingFileError

    (tmp_path / "results").mkdir()  # a wheel built without its package data
    monkeypatch.setattr(importlib.resources, "files", lambda package: tmp_path)
    with pytest.raises(MissingFileError, match=r"results: the package's result files are "
                                               r"missing; reinstall drillbook"):
        book_results()


def test_schema_rejects_what_it_should():
    assert "missing field 'metrics'" in validate_result({"format": "drillbook-result/1"})
    doc = {"status": "finished", "metrics": {"ppl": "low"}, "curve": [3]}
    problems = " ".join(validate_result(doc))
    assert "status 'finished'" in problems and "metric 'ppl'" in problems
    assert "curve points" in problems
    with pytest.raises(ValueError, match="not a valid result file"):
        write_result("/tmp/never.json", doc)


def test_a_bleu_signature_is_optional_but_must_be_a_string():
    doc = _doc("multi30k-joint", "tied", "multi30k/de-en-softmax-tied", test_bleu=30.0)
    assert validate_result(doc) == []  # files from before the field stay valid
    doc["bleu_signature"] = "nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.6.0"
    assert validate_result(doc) == []
    doc["bleu_signature"] = 2
    assert validate_result(doc) == ["field 'bleu_signature' has type int, expected str"]


def test_a_dynamic_block_is_checked_like_the_rest():
    doc = _doc("drill-main", "ptb-awd-lstm", "ptb/awd-lstm", test_ppl=60.0)
    doc["dynamic"] = {"lr": 2e-5, "lamb": 0.02, "eps": 1e-3, "bptt": 5, "grad_batches": None,
                      "finished": True, "metrics": {"val_ppl": 52.0, "test_ppl": 51.0,
                                                    "test_tokens": 82430,
                                                    "static_test_ppl": 57.0}}
    assert validate_result(doc) == []
    doc["dynamic"].update(bptt=5.0, finished="yes")
    del doc["dynamic"]["lamb"]
    doc["dynamic"]["metrics"].pop("static_test_ppl")
    doc["dynamic"]["metrics"]["test_ppl"] = "51"
    assert sorted(validate_result(doc)) == sorted([
        "missing field 'dynamic.lamb'",
        "field 'dynamic.bptt' has type float, expected int",
        "field 'dynamic.finished' has type str, expected bool",
        "missing metric 'dynamic.metrics.static_test_ppl'",
        "dynamic.metric 'test_ppl' must be a number, got '51'"])
    doc["dynamic"] = [1]
    assert validate_result(doc) == ["field 'dynamic' must be a dict, got [1]"]


@needs_data
def test_tiny_budgeted_reproduction_writes_valid_files_and_resumes(tmp_path, capsys):
    out, runs = tmp_path / "results", tmp_path / "runs"
    args = ["reproduce", "tutorial", "--rows", "drill", "--out", str(out), "--runs",
            str(runs), "--set", *MICRO, "--max-eval-tokens", "200", "--quiet"]
    # a budget that ends the row mid-way: a valid file with status "budget"
    paths = reproduce("tutorial", rows=["drill"], budget_minutes=1e-6, out=out, runs=runs,
                      overrides=MICRO, max_eval_tokens=200, progress=False)
    first = json.loads(paths[0].read_text())
    assert first["status"] == "budget" and first["epochs_done"] == 0
    assert validate_result(first) == []
    # run again without a budget: the row resumes from its checkpoint and finishes
    assert main(args) == 0
    assert "drill: done after 2 epoch(s)" in capsys.readouterr().out
    doc = json.loads((out / "tutorial" / "drill.json").read_text())
    assert doc["status"] == "done" and doc["epochs_done"] == 2
    assert doc["steps_done"] == 8 and len(doc["curve"]) == 2
    assert {"val_ppl", "test_ppl"} <= set(doc["metrics"])
    assert doc["config"]["head"]["kind"] == "drill" and doc["torch"]
    assert doc["precision"] == "fp32" and doc["git_dirty"] in (True, False, None)
    report = render_report(out)
    assert "| drill | `tutorial/ptb-drill` |" in report and render_report(out) == report
    assert main(["report", "--results", str(out), "--out", str(tmp_path / "R.md")]) == 0
    assert (tmp_path / "R.md").read_text() == report + "\n"


def test_unknown_table_and_rows_are_clear_errors():
    with pytest.raises(ValueError, match="unknown table 'nope'"):
        reproduce("nope")
    with pytest.raises(ValueError, match=r"unknown row\(s\) \['x'\]"):
        reproduce("tutorial", rows=["x"])


@needs_data
def test_a_translation_row_reports_bleu(tmp_path):
    tiny = ["data.max_train_pairs=200", "train.epochs=1", "train.max_eval_pairs=20",
            "model.hidden=16", "model.emb_size=16"]
    paths = reproduce("multi30k-joint", rows=["tied"], out=tmp_path / "r", runs=tmp_path / "x",
                      overrides=tiny, progress=False)
    doc = json.loads(paths[0].read_text())
    assert validate_result(doc) == [] and doc["status"] == "done"
    assert {"val_bleu", "test_bleu", "output_layer_params"} <= set(doc["metrics"])
    signature = doc["bleu_signature"]  # the test BLEU is sacrebleu's, on detokenised text
    assert signature.startswith("nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:")
    report = render_report(tmp_path / "r")
    assert "Metric: BLEU." in report and f"signature `{signature}`" in report


def _doc(table: str, row: str, config: str, **metrics) -> dict:
    """A minimal valid result document (a test fixture, not a measurement)."""
    return {"format": "drillbook-result/1", "table": table, "row": row, "config_name": config,
            "config": {}, "config_hash": "0", "seed": 1, "git_commit": None, "device": "cpu",
            "torch": "x", "cuda": None, "status": "budget", "epochs_done": 2, "steps_done": 9,
            "wall_seconds": 1.0, "budget_minutes": 5, "precision": "fp32",
            "metrics": metrics, "paper": {},
            "curve": [{"epoch": 1, "val_ppl": 200.0}, {"epoch": 2, "val_ppl": 150.0}]}


def test_table_rows_give_every_row_with_the_papers_numbers_and_none_where_not_run(tmp_path):
    from drillbook.experiments import format_rows, table_rows

    rows = table_rows("drill-table4", tmp_path)
    assert [r["row"] for r in rows] == [r.name for r in TABLES["drill-table4"]]
    by = {r["row"]: r for r in rows}
    # the main run beside DRILL Table 1's "w/o finetune", the fine-tuned one beside Table 4
    assert (by["tied"]["paper_valid"], by["tied"]["paper_test"]) == (60.7, 58.8)
    assert (by["tied"]["paper_finetuned_valid"], by["tied"]["paper_finetuned_test"]) == (
        60.0, 57.3)
    assert (by["drill-2"]["paper_finetuned_valid"], by["drill-2"]["paper_finetuned_test"]) == (
        58.7, 56.0)
    assert by["drill-2"]["paper_finetuned_params_m"] == 24.5
    assert by["drill-4"]["paper_finetuned_test"] == 55.7
    assert all(r["valid"] is None and r["status"] is None and r["curve"] == [] and
               r["finetuned_test"] is None for r in rows)
    shown = format_rows(rows, ["row", "paper_valid", "paper_finetuned_test", "test"])
    assert shown[1] == {"row": "tied", "paper_valid": "60.70", "paper_finetuned_test": "57.30",
                        "test": "-"}
    assert shown[0]["paper_valid"] == "-"  # Table 4 gives no number before fine-tuning
    speed = {r["row"]: r for r in table_rows("speed", tmp_path)}
    assert speed["ptb-mos"]["paper_seconds_per_epoch"] == 138
    assert speed["wt2-mos"]["paper_ratio_to_tied"] == 9.7
    rank = {r["row"]: r for r in table_rows("rank", tmp_path)}
    assert {r["paper_rank_test"] for r in rank.values() if "paper_rank_test" in r} == {
        401, 10000}
    assert (rank["drill"]["paper_rank"], rank["drill"]["paper_rank_tol_1"]) == (400, 402)
    assert rank["mos"]["paper_rank"] == rank["mos"]["paper_rank_tol_1"] == 9981
    with pytest.raises(ValueError, match="unknown table 'nope'"):
        table_rows("nope", tmp_path)


def test_table_rows_read_our_files_and_the_report_shows_speed_ratios_and_rank(tmp_path):
    from drillbook.experiments import ratios_to, table_rows

    write_result(tmp_path / "rank" / "tied.json", _doc(
        "rank", "tied", "ptb/awd-lstm", val_ppl=90.0, test_ppl=85.0, seconds_per_epoch=10.0,
        rank_tol_1=402, rank_positions=5000))
    write_result(tmp_path / "rank" / "mos.json", _doc(
        "rank", "mos", "ptb/awd-lstm-mos", val_ppl=80.0, test_ppl=75.0,
        seconds_per_epoch=25.0, rank_tol_1=5000, rank_numpy_tol=4999, rank_positions=5000))
    rows = table_rows("rank", tmp_path)
    by = {r["row"]: r for r in rows}
    assert by["mos"]["valid"] == 80.0 and by["mos"]["rank_tol_1"] == 5000
    assert len(by["mos"]["curve"]) == 2 and by["doc"]["valid"] is None
    assert ratios_to(rows, "tied") == {"tied": 1.0, "drill": None, "mos": 2.5, "doc": None}
    report = render_report(tmp_path)
    assert ("| rank (tol 1) | rank (numpy tol) | positions | authors' code (tol 1) | "
            "DRILL Sec. 4.1.1 | DOC Table 5 (test) | device |") in report
    assert "| 25.0 | 2.50 | 5000 | 4999 | 5000 | 9981 | 9981 | 10000 | cpu |" in report
    assert "| tied | `ptb/awd-lstm` |" in report and "ft status" not in report


def test_the_report_reads_paper_numbers_from_the_record_not_the_file(tmp_path):
    """An old result file froze the parent config's (wrong) numbers; they are ignored."""
    doc = _doc("drill-table4", "drill-4-residual-previous", "ptb/awd-lstm-drill",
               val_ppl=90.0, test_ppl=85.0)
    doc["paper"] = {"valid_ppl": 58.2, "test_ppl": 55.7}
    write_result(tmp_path / "drill-table4" / "drill-4-residual-previous.json", doc)
    report = render_report(tmp_path)
    line = next(x for x in report.splitlines() if x.startswith("| drill-4-residual-previous"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    header = next(x for x in report.splitlines() if x.startswith("| row |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    got = dict(zip(columns, cells, strict=True))
    assert (got["paper ft valid"], got["paper ft test"]) == ("59.60", "57.50")
    assert (got["paper valid"], got["ft valid"], got["ft status"]) == ("-", "-", "-")
    assert (got["valid"], got["test"]) == ("90.00", "85.00") and "58.20" not in line


def test_full_command_and_curve_figures(tmp_path, capsys):
    from drillbook.experiments import full_command

    assert full_command("drill-table4") == "drillbook reproduce drill-table4"
    assert "--runs /content/drive/" in full_command("rank", colab=True)
    with pytest.raises(ValueError, match="unknown table"):
        full_command("nope")
    write_result(tmp_path / "r" / "tutorial" / "tied.json",
                 _doc("tutorial", "tied", "tutorial/ptb-tied", val_ppl=150.0))
    assert main(["report", "--results", str(tmp_path / "r"), "--figures",
                 str(tmp_path / "fig")]) == 0
    png = tmp_path / "fig" / "tutorial.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and f"wrote {png}" in capsys.readouterr().out


def test_a_row_whose_paper_fine_tunes_records_both_stages(tmp_path, monkeypatch):
    """On the tiny corpus: the main run, then AWD-LSTM's fine-tuning, each in the result
    file and each beside its own paper number in the report."""
    from drillbook.experiments import Row, Table, table_rows
    from drillbook.experiments.tables import TABLES as tables

    monkeypatch.setitem(tables, "tiny-ft", Table("tiny-ft", (Row(
        "tied", "tutorial/ptb-tied", paper=("drill:table1:awd-lstm-wo-finetune",),
        paper_finetuned="drill:table4:weight-tying"),)))
    kwargs = tiny_reproduce(tmp_path, [*TINY_LM, "train.epochs=2"])
    first = json.loads(reproduce("tiny-ft", budget_minutes=1e-6, **kwargs)[0].read_text())
    assert first["status"] == "budget" and "finetuned" not in first  # main run not done
    doc = json.loads(reproduce("tiny-ft", **kwargs)[0].read_text())
    assert validate_result(doc) == [] and doc["format"] == "drillbook-result/3"
    assert doc["status"] == "done" and "paper" not in doc
    block = doc["finetuned"]
    assert block["status"] in ("done", "converged") and block["lr"] == 5.0
    assert block["epochs_done"] == len(block["curve"]) >= 1 and block["steps_done"] > 0
    assert {"val_ppl", "test_ppl"} <= set(block["metrics"])
    # fine-tuning started from the main run's best model: never worse on validation
    assert block["metrics"]["val_ppl"] <= doc["metrics"]["val_ppl"] * (1 + 1e-9)
    assert (tmp_path / "runs" / "tiny-ft" / "tied" / "finetune" / "best.pt").exists()
    row = table_rows("tiny-ft", tmp_path / "r")[0]
    assert row["finetuned_valid"] == block["metrics"]["val_ppl"]
    assert (row["paper_valid"], row["paper_finetuned_valid"]) == (60.7, 60.0)
    report = render_report(tmp_path / "r")
    assert "| ft status | ft epochs | ft valid | ft test | paper ft valid | paper ft test |" in (
        report)
    assert f"| {block['status']} | {block['epochs_done']} |" in report
    assert "| 60.70 | 58.80 |" in report and "| 60.00 | 57.30 |" in report
    # a later call with no time left for fine-tuning keeps the block it recorded
    again = json.loads(reproduce("tiny-ft", budget_minutes=1e-9, **kwargs)[0].read_text())
    assert again["finetuned"] == block


def test_a_row_continued_in_sittings_keeps_where_and_with_what_each_ran(tmp_path,
                                                                       monkeypatch):
    """A row trained one epoch, then continued from its checkpoint to a second, records
    both sittings (the commit, the device, the epochs and the budget of each), not just the
    last one's; a file written before the list existed gives one sitting made of its own
    provenance; continued into another results folder, the row keeps them (its run folder
    records them beside its checkpoint); a row started afresh has its own sitting alone."""
    import importlib

    module = importlib.import_module("drillbook.experiments.run.reproduce")
    monkeypatch.setattr(module, "git_state",
                        lambda: {"commit": "aaaa", "dirty": False})
    kwargs = tiny_reproduce(tmp_path, [*TINY_LM, "train.epochs=1"])
    first = json.loads(reproduce("tutorial", rows=["tied"], **kwargs)[0].read_text())
    assert [(s["git_commit"], s["epochs"]) for s in first["sittings"]] == [("aaaa", [1, 1])]
    assert first["sittings"][0]["budget_minutes"] is None and validate_result(first) == []
    kwargs["overrides"] = [*TINY_LM, "train.epochs=2"]
    path = reproduce("tutorial", rows=["tied"], budget_minutes=30, **kwargs)[0]
    doc = json.loads(path.read_text())
    assert doc["epochs_done"] == 2 and validate_result(doc) == []
    assert [s["epochs"] for s in doc["sittings"]] == [[1, 1], [2, 2]]
    assert [s["budget_minutes"] for s in doc["sittings"]] == [None, 30]
    assert doc["sittings"][0] == first["sittings"][0] and doc["sittings"][1]["device"] == (
        doc["device"])
    # an older file without the list (and a run folder from before it kept one): its
    # provenance becomes the first sitting
    older = {k: v for k, v in first.items() if k != "sittings"} | {"git_commit": "old"}
    path.write_text(json.dumps(older))
    [kept] = (tmp_path / "runs").rglob("sittings.json")
    assert json.loads(kept.read_text())["sittings"] == doc["sittings"]
    kept.unlink()
    kwargs["overrides"] = [*TINY_LM, "train.epochs=3"]
    doc = json.loads(reproduce("tutorial", rows=["tied"], **kwargs)[0].read_text())
    assert (doc["sittings"][0]["git_commit"], doc["sittings"][0]["epochs"]) == ("old", [1, 2])
    assert [s["epochs"] for s in doc["sittings"]] == [[1, 2], [3, 3]]
    assert doc["sittings"][0]["partial"] and "partial" not in doc["sittings"][1]
    # continued into a new results folder, it keeps them: the run folder lists them too
    kwargs["overrides"] = [*TINY_LM, "train.epochs=4"]
    monkeypatch.setattr(module, "git_state", lambda: {"commit": "bbbb", "dirty": False})
    moved = json.loads(reproduce("tutorial", rows=["tied"],
                                 **{**kwargs, "out": tmp_path / "elsewhere"})[0].read_text())
    assert [(s["git_commit"], s["epochs"]) for s in moved["sittings"]] == [
        ("old", [1, 2]), ("aaaa", [3, 3]), ("bbbb", [4, 4])]
    assert moved["sittings"][:2] == doc["sittings"] and validate_result(moved) == []
    # a broken entry is named
    doc["sittings"][0] = {"epochs": "1-2"}
    assert "missing field 'sittings[0].git_commit'" in validate_result(doc)
    assert "field 'sittings[0].epochs' has type str, expected list" in validate_result(doc)


def test_a_sitting_stopped_by_a_signal_is_kept_for_the_one_that_continues_it(tmp_path,
                                                                               monkeypatch):
    """A sitting that a signal stops writes no result file, but its run folder records
    where and with which code it trained the epochs it completed, so the sitting that
    continues the row (into another results folder, too) lists it."""
    import importlib

    from drillbook.errors import TrainingInterrupted
    from drillbook.train.loop import TrainingLoop

    module = importlib.import_module("drillbook.experiments.run.reproduce")
    monkeypatch.setattr(module, "git_state", lambda: {"commit": "aaaa", "dirty": False})
    kwargs = tiny_reproduce(tmp_path, [*TINY_LM, "train.epochs=1"])
    reproduce("tutorial", rows=["tied"], **kwargs)
    real_fit = TrainingLoop.fit

    def one_epoch_then_stopped(self, *args, **kwargs):
        real_fit(self, max_epochs=self.epoch)  # completes this epoch, saves it
        raise TrainingInterrupted(f"stopped by SIGTERM at epoch {self.epoch}, step 1")

    monkeypatch.setattr(TrainingLoop, "fit", one_epoch_then_stopped)
    monkeypatch.setattr(module, "git_state", lambda: {"commit": "bbbb", "dirty": False})
    kwargs["overrides"] = [*TINY_LM, "train.epochs=3"]
    with pytest.raises(TrainingInterrupted, match="SIGTERM"):
        reproduce("tutorial", rows=["tied"], **kwargs)
    monkeypatch.setattr(TrainingLoop, "fit", real_fit)
    monkeypatch.setattr(module, "git_state", lambda: {"commit": "cccc", "dirty": False})
    doc = json.loads(reproduce("tutorial", rows=["tied"],
                               **{**kwargs, "out": tmp_path / "elsewhere"})[0].read_text())
    assert doc["epochs_done"] == 3 and validate_result(doc) == []
    assert [(s["git_commit"], s["epochs"]) for s in doc["sittings"]] == [
        ("aaaa", [1, 1]), ("bbbb", [2, 2]), ("cccc", [3, 3])]


def test_the_finetuned_block_is_validated():
    doc = _doc("tutorial", "tied", "tutorial/ptb-tied", val_ppl=1.0)
    doc["finetuned"] = {"status": "stopped", "epochs_done": 1, "steps_done": 2,
                        "wall_seconds": 1.0, "metrics": {"val_ppl": "x"}, "curve": [{}]}
    problems = " ".join(validate_result(doc))
    assert "finetuned.status 'stopped'" in problems and "missing field 'finetuned.lr'" in (
        problems)
    assert "finetuned.metric 'val_ppl'" in problems and "finetuned.curve points" in problems
    doc["finetuned"] = {"status": "converged", "epochs_done": 1, "steps_done": 2,
                        "wall_seconds": 1.0, "lr": 25.0, "metrics": {}, "curve": []}
    assert validate_result(doc) == []


def test_seeds_write_beside_the_row_and_give_a_spread(tmp_path, monkeypatch):
    """``--seed``: another seed's run lands in ``seed-<N>/``; the spread reads every seed,
    refuses runs that differ in more than the seed, and calls a difference only when the
    ranges do not overlap."""
    import shutil
    import statistics

    from drillbook.errors import ResultFileError
    from drillbook.experiments import Row, Table
    from drillbook.experiments.results.seeds import SeedSpread, resolved, seed_runs, seed_spread
    from drillbook.experiments.tables import TABLES as tables

    monkeypatch.setitem(tables, "tiny-seeds",
                        Table("tiny-seeds", (Row("tied", "tutorial/ptb-tied"),)))
    kwargs = tiny_reproduce(tmp_path, [
        "model.emsize=8", "model.nhid=8", "train.batch_size=4", "train.bptt=6",
        "train.eval_batch_size=2", "train.test_batch_size=2", "train.epochs=1"])
    own = reproduce("tiny-seeds", **kwargs)[0]
    assert own == tmp_path / "r" / "tiny-seeds" / "tied.json"
    assert reproduce("tiny-seeds", seed=141, **kwargs)[0] == own  # the config's own seed
    other = reproduce("tiny-seeds", seed=7, **kwargs)[0]
    assert other == tmp_path / "r" / "tiny-seeds" / "seed-7" / "tied.json"
    assert (tmp_path / "runs" / "tiny-seeds" / "seed-7" / "tied" / "best.pt").exists()
    docs = seed_runs(tmp_path / "r", "tiny-seeds")["tied"]
    assert [d["seed"] for d in docs] == [141, 7]
    values = [d["metrics"]["test_ppl"] for d in docs]
    assert values[0] != values[1]  # a different seed trains a different model
    (spread,) = seed_spread(tmp_path / "r", "tiny-seeds")
    assert spread.seeds == (141, 7) and spread.values == tuple(values)
    assert spread.mean == pytest.approx(statistics.mean(values))
    assert spread.std == pytest.approx(statistics.stdev(values))
    assert seed_spread(tmp_path / "r", "tiny-seeds", min_seeds=3) == []
    # the report's main table is the config's own seed only
    assert [d["seed"] for d in load_results(tmp_path / "r")] == [141]
    # a run that differs in more than its seed is refused, naming both files
    odd = tmp_path / "r" / "tiny-seeds" / "seed-9"
    odd.mkdir()
    doc = json.loads(other.read_text())
    doc["seed"], doc["config"]["train"]["lr"] = 9, 1.0
    (odd / "tied.json").write_text(json.dumps(doc))
    with pytest.raises(ResultFileError, match=r"seed-9/tied.json .* differ in config"):
        seed_runs(tmp_path / "r", "tiny-seeds")
    shutil.rmtree(odd)
    a = SeedSpread("a", (1, 2, 3), (10.0, 11.0, 12.0))
    assert resolved(a, SeedSpread("b", (1, 2, 3), (12.5, 13.0, 14.0)))
    assert not resolved(a, SeedSpread("c", (1, 2, 3), (11.5, 13.0, 14.0)))
    assert not resolved(a, SeedSpread("d", (1,), (20.0,)))  # one run has no range


def test_the_report_shows_a_table_across_seeds_once_a_row_has_two(tmp_path):
    def run(row: str, seed: int, test_ppl: float) -> dict:
        doc = _doc("cpu-scale", row, f"tutorial/ptb-{row}", val_ppl=1.0, test_ppl=test_ppl)
        doc["seed"], doc["config"] = seed, {"train": {"seed": seed}}
        return doc

    for row, ppl in (("mos", 280.0), ("tied", 260.0), ("doc", 236.0)):
        write_result(tmp_path / "cpu-scale" / f"{row}.json", run(row, 141, ppl))
    alone = render_report(tmp_path)
    assert "across seeds" not in alone  # one seed per row: nothing to add
    for seed, tied, mos in ((142, 262.0, 281.0), (143, 261.0, 279.0)):
        folder = tmp_path / "cpu-scale" / f"seed-{seed}"
        write_result(folder / "tied.json", run("tied", seed, tied))
        write_result(folder / "mos.json", run("mos", seed, mos))
    report = render_report(tmp_path)
    assert report.startswith(alone.rstrip("\n"))  # the main table is unchanged
    assert "### cpu-scale across seeds" in report
    assert "| tied | 3 | 141, 142, 143 | 261.00 | 1.00 | 260.00 | 262.00 |" in report
    assert "| doc | 1 | 141 | 236.00 | - | - | - |" in report
    # in the table's order (tied, mos, doc), not the files' (doc, mos, tied)
    assert report.index("| tied | 3 |") < report.index("| mos | 3 |") < report.index("| doc | 1 |")
    assert ("Pairs of rows with at least two seeds each: 1; resolved (ranges do not "
            "overlap): tied < mos.") in report
    assert "(gpu)" not in report  # every seed on one kind of device: no marks
    # a seed trained on a GPU, in a table whose other seeds trained on a CPU, is named
    doc = run("mos", 143, 279.0)
    doc["sittings"] = [gpu_sitting([1, 3])]
    write_result(tmp_path / "cpu-scale" / "seed-143" / "mos.json", doc)
    marked = render_report(tmp_path)
    assert "| mos | 3 | 141, 142, 143 (gpu) | 280.00 |" in marked
    assert "| tied | 3 | 141, 142, 143 | 261.00 |" in marked
    assert "A seed marked (gpu) trained on a GPU" in marked


def test_a_row_writes_its_test_metric_before_its_long_analyses(tmp_path, monkeypatch):
    """The rank (a float64 SVD) and the analyses come after the test metric: the file is
    written first with them ``pending``, so a deadline that stops the row during them
    leaves the test metric (an H200 window lost two rows' metrics that way)."""
    import sys

    reproducing = sys.modules["drillbook.experiments.run.stages"]
    seen = {}
    rank_of = reproducing.rank_of

    def rank_while_looking(model, data, bptt, positions):
        path = tmp_path / "r" / "gpu-ptb" / "tied.json"
        seen.update(json.loads(path.read_text()))
        return rank_of(model, data, bptt, 40)

    monkeypatch.setattr(reproducing, "rank_of", rank_while_looking)
    [path] = reproduce("gpu-ptb", rows=["tied"], **tiny_reproduce(
        tmp_path, [*TINY_LM, "train.epochs=1"]))
    assert seen["pending"] == ["rank", "analyses"] and "test_ppl" in seen["metrics"]
    assert validate_result(seen) == [] and "rank_tol_1" not in seen["metrics"]
    doc = json.loads(path.read_text())
    assert "pending" not in doc and "rank_tol_1" in doc["metrics"]
    assert doc["metrics"]["test_ppl"] == seen["metrics"]["test_ppl"]


def test_a_row_stopped_by_a_signal_is_not_written_as_failed(tmp_path, monkeypatch):
    """A worker stopped at the deadline mid-training saves its step and stops: its row is
    no failure (the scheduler writes its ``deadline`` file), even when the call keeps
    going past rows that fail."""
    from drillbook.errors import TrainingInterrupted
    from drillbook.train.loop import TrainingLoop

    def stopped(self, *args, **kwargs):
        raise TrainingInterrupted("stopped by SIGTERM at epoch 1, step 3")

    monkeypatch.setattr(TrainingLoop, "fit", stopped)
    with pytest.raises(TrainingInterrupted, match="SIGTERM"):
        reproduce("tutorial", rows=["tied"], keep_going=True,
                  **tiny_reproduce(tmp_path, TINY_LM))
    assert not (tmp_path / "r" / "tutorial" / "tied.json").exists()
