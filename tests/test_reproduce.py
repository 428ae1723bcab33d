"""Reproductions: the result schema, a tiny budgeted run that resumes, the report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from drillbook.cli import main
from drillbook.configs import get_config
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
    from drillbook.nmt.config import get_nmt_config

    for table, rows in TABLES.items():
        assert len({r.name for r in rows}) == len(rows), table
        for row in rows:
            (get_nmt_config if row.config.startswith("multi30k/") else get_config)(row.config)


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
