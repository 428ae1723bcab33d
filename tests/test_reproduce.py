"""Reproductions: the result schema, a tiny budgeted run that resumes, the report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from drillbook.cli import main
from drillbook.experiments import (
    TABLES,
    load_results,
    render_report,
    reproduce,
    validate_result,
    write_result,
)

ROOT = Path(__file__).resolve().parent.parent
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
    results = ROOT / "results"
    load_results(results)  # raises on any invalid file
    report = results / "REPORT.md"
    if report.exists():  # the committed report is exactly what the files give
        assert report.read_text() == render_report(results) + "\n"


def test_schema_rejects_what_it_should():
    assert "missing field 'metrics'" in validate_result({"format": "drillbook-result/1"})
    doc = {"status": "finished", "metrics": {"ppl": "low"}, "curve": [3]}
    problems = " ".join(validate_result(doc))
    assert "status 'finished'" in problems and "metric 'ppl'" in problems
    assert "curve points" in problems
    with pytest.raises(ValueError, match="not a valid result file"):
        write_result("/tmp/never.json", doc)


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
    assert "Metric: BLEU." in render_report(tmp_path / "r")


def _doc(table: str, row: str, config: str, **metrics) -> dict:
    """A minimal valid result document (a test fixture, not a measurement)."""
    return {"format": "drillbook-result/1", "table": table, "row": row, "config_name": config,
            "config": {}, "config_hash": "0", "seed": 1, "git_commit": None, "device": "cpu",
            "torch": "x", "cuda": None, "status": "budget", "epochs_done": 2, "steps_done": 9,
            "wall_seconds": 1.0, "budget_minutes": 5, "precision": "fp32",
            "metrics": metrics, "paper": {},
            "curve": [{"epoch": 1, "val_ppl": 200.0}, {"epoch": 2, "val_ppl": 150.0}]}


def test_table_rows_give_every_row_with_the_papers_numbers_and_none_where_not_run(tmp_path):
    from drillbook.experiments import table_rows

    rows = table_rows("drill-table4", tmp_path)
    assert [r["row"] for r in rows] == [r.name for r in TABLES["drill-table4"]]
    by = {r["row"]: r for r in rows}
    assert (by["tied"]["paper_valid"], by["tied"]["paper_test"]) == (60.0, 57.3)
    assert (by["drill-2"]["paper_valid"], by["drill-2"]["paper_test"]) == (58.7, 56.0)
    assert by["drill-4"]["paper_test"] == 55.7
    assert all(r["valid"] is None and r["status"] is None and r["curve"] == [] for r in rows)
    speed = {r["row"]: r for r in table_rows("speed", tmp_path)}
    assert speed["ptb-mos"]["paper_seconds_per_epoch"] == 138.0
    assert {r["paper_rank"] for r in table_rows("rank", tmp_path)} == {400.0, 401.0, 10000.0}
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
    assert "| rank (tol 1) | rank (numpy tol) | positions | paper rank |" in report
    assert "| 25.0 | 2.50 | 5000 | 4999 | 5000 | 10000 | cpu |" in report


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


def test_find_results_walks_up_and_clones_when_asked(tmp_path, monkeypatch):
    import subprocess

    from drillbook.experiments import find_results

    assert find_results(ROOT / "notebooks") == ROOT / "results"
    with pytest.raises(FileNotFoundError, match="pass clone="):
        find_results(tmp_path)
    repo = tmp_path / "origin"
    (repo / "results").mkdir(parents=True)
    (repo / "results" / "REPORT.md").write_text("# Reproduction results\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "r"], check=True)
    monkeypatch.chdir(tmp_path)
    found = find_results(tmp_path / "elsewhere", clone=f"git+file://{repo}@main")
    assert found == Path("drillbook-src/results").resolve()
    assert (found / "REPORT.md").read_text() == "# Reproduction results\n"
