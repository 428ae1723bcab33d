"""A table is one declaration: its rows, epochs, device, rank, baseline rows, the papers'
columns and its plans, read by the runner, the planner and the report; every task
question of a row or a result file asked of its task record; one name per precision."""

from __future__ import annotations

import dataclasses

import pytest

from drillbook.configs import LANGUAGE_MODEL, TRANSLATION, get_config
from drillbook.experiments import PLANS, TABLES, Plan, Row, Table, render_report, write_result
from drillbook.experiments.results import result_task
from drillbook.experiments.results.compare import cpu_tables
from drillbook.experiments.results.evidence import missing_evidence
from drillbook.experiments.run.documents import failure_doc
from drillbook.experiments.run.jobs import table_jobs
from drillbook.experiments.tables import PAPER_RANKS, PAPER_SPEED, table_of
from drillbook.train.tasks import TASKS, Task

#: the kinds of paper column a table may declare, by the record metric each prints
KNOWN_COLUMNS = {c.metric: c for c in (*PAPER_SPEED, *PAPER_RANKS)}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_table_declares_the_paper_columns_its_records_give(name):
    table = TABLES[name]
    given = {m for row in table for m in row.paper_values("main") if m in KNOWN_COLUMNS}
    declared = {c.metric for c in table.paper_columns}
    assert declared == given, name  # no column without a number, no number without one


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_declared_row_asks_only_for_what_its_task_has(name):
    table = TABLES[name]
    jobs = table_jobs(name)  # refuses a stage the row's task has not
    assert [j.row.name for j in jobs] == [r.name for r in table]
    for job in jobs:
        task = job.row.task
        assert not table.rank or task.streams, (name, job.row.name)
        if table.epochs is not None:
            assert job.config.train.epochs == table.epochs
        baseline = table.baseline_of(job.row.name)
        assert baseline is None or table.row(baseline) is not None


def test_a_tables_epochs_come_before_each_rows_own_overrides():
    table = Table("t", (Row("a", "tutorial/ptb-tied"),
                        Row("b", "tutorial/ptb-tied", ("train.epochs=2", "train.lr=5"))),
                  epochs=3)
    assert table[0].overrides == ("train.epochs=3",)
    assert table[0].resolve().train.epochs == 3
    assert table[1].resolve().train.epochs == 2  # the row's own override wins
    assert [r.resolve().train.epochs for r in TABLES["cpu-scale"]] == [6] * len(
        TABLES["cpu-scale"])
    assert len(table) == 2 and list(table) == list(table.rows) and table[:1] == table.rows[:1]


def test_a_declaration_that_contradicts_itself_is_refused():
    row = Row("tied", "tutorial/ptb-tied")
    with pytest.raises(ValueError, match="names a row twice"):
        Table("t", (row, row))
    with pytest.raises(ValueError, match=r"divides by rows it does not have: \['awd'\]"):
        Table("t", (Row("x", "tutorial/ptb-tied", baseline="awd"),))
    with pytest.raises(ValueError, match=r"divides by rows it does not have: \['tied'\]"):
        Table("t", (Row("x", "tutorial/ptb-tied"),), baseline="tied")
    with pytest.raises(ValueError, match="plan 'p' runs table 'other'"):
        Table("t", (row,), plans=(Plan("p", "other"),))
    with pytest.raises(ValueError, match="device must be one of"):
        Table("t", (row,), device="tpu")


def test_speed_ratios_divide_by_the_baseline_of_the_rows_corpus():
    speed, main = TABLES["speed"], TABLES["drill-main"]
    assert {r.name: speed.baseline_of(r.name) for r in speed} == {
        f"{c}-{h}": f"{c}-awd-lstm" for c in ("ptb", "wt2") for h in ("awd-lstm", "drill", "mos")}
    assert main.baseline_of("wt2-drill") == "wt2-awd-lstm"
    assert TABLES["mos-doc"].baseline_of("ptb-mos") is None  # no AWD-LSTM row to divide by
    assert TABLES["cpu-scale"].baseline_of("mos") == "tied"
    assert table_of("no-such-table").baseline_of("tied") == "tied"  # an undeclared table


def test_the_cpu_tables_the_rank_tables_and_the_plans_are_what_the_tables_declare():
    assert cpu_tables() == tuple(n for n, t in TABLES.items() if t.device == "cpu")
    assert {n: t.rank_positions for n, t in TABLES.items() if t.rank} == {
        "rank": None, "cpu-scale": 2000, "gpu-ptb": 4000, "gpu-small": 2000,
        "laptop-lm": 2000}
    assert PLANS == {p.name: p for t in TABLES.values() for p in t.plans}
    assert all(TABLES[p.table].plans[0] is p for p in PLANS.values())
    assert "whose plans include gpu-small" in missing_evidence("gpu-small")
    assert "`drillbook reproduce speed`" in missing_evidence("speed")  # no plan: the table


def test_a_row_asking_its_task_for_a_stage_it_has_not_is_refused_before_training(
        monkeypatch):
    from drillbook.errors import ConfigError

    softmax = Row("softmax", "multi30k/de-en-softmax")
    monkeypatch.setitem(TABLES, "bad-ft", Table("bad-ft", (Row(
        "softmax", "multi30k/de-en-softmax", paper_finetuned="drill:table4:weight-tying"),),
        ))
    monkeypatch.setitem(TABLES, "bad-rank", Table("bad-rank", (softmax,), rank=True))
    with pytest.raises(ConfigError, match="asks for fine-tuning, which translation runs"):
        table_jobs("bad-ft")
    with pytest.raises(ConfigError, match="asks for a rank, which translation runs"):
        table_jobs("bad-rank")


def test_every_task_has_its_analyses_and_its_sizing():
    """What result files and the planner need of a task is part of its one record: every
    task declares it, and a record without it cannot be made (the error names it)."""
    for task in TASKS.values():
        assert callable(task.analyses), task.name
        sizing = task.sizing
        # every part is a function; an optional one (a default of None) may be left out
        assert all(callable(getattr(sizing, f.name))
                   or (f.default is None and getattr(sizing, f.name) is None)
                   for f in dataclasses.fields(sizing)), task.name
        assert callable(sizing.cpu_step_call)
    task = TASKS[LANGUAGE_MODEL]
    given = {f.name: getattr(task, f.name) for f in dataclasses.fields(task)}
    for missing in ("analyses", "sizing"):
        with pytest.raises(TypeError, match=missing):
            Task(**{k: v for k, v in given.items() if k != missing})


def test_a_result_files_task_is_the_one_its_config_stores():
    lm, nmt = get_config("tutorial/ptb-tied"), get_config("multi30k/de-en-softmax")
    assert result_task({"config": lm.to_dict()}).name == LANGUAGE_MODEL
    assert result_task({"config": nmt.to_dict()}).name == TRANSLATION
    old = {k: v for k, v in nmt.to_dict().items() if k != "task"}  # before configs named it
    assert result_task({"config": old}).name == TRANSLATION
    assert result_task({"config": {}}).name == LANGUAGE_MODEL


def test_the_report_names_a_translation_tables_metric_when_no_row_measured_one(tmp_path):
    """The metric comes from the rows' stored task, not from the metrics they hold: a
    translation table whose rows all failed is still a table of BLEU."""
    source = {"commit": None, "dirty": False}
    for job in table_jobs("multi30k-joint", rows=["softmax", "tied"]):
        write_result(job.result_path(tmp_path), failure_doc(
            job, source, status="failed", error="RuntimeError: no", device="cpu",
            seconds=0.0, run_dir=tmp_path / "runs", budget_minutes=None))
    text = render_report(tmp_path)
    assert "## multi30k-joint\n\nMetric: BLEU." in text
    assert "| softmax | `multi30k/de-en-softmax` |" in text


# ------------------------------------------------------------------ one spelling of precision
def test_old_result_files_name_their_precision_as_today(tmp_path):
    """The committed bf16 window's files say ``bf16-autocast`` (written before precisions
    had one name): they load, and read as ``bf16``; a seed run of today (``train.amp`` =
    ``fp32``) and an old one (``false``, later ``off``) are seeds of one row; an unknown
    name is refused."""
    import json
    import shutil

    from drillbook.errors import ResultFileError
    from drillbook.experiments import book_results, gpu_results, load_results, validate_result
    from drillbook.experiments.results import result_precision
    from drillbook.experiments.results.seeds import seed_runs

    old = load_results(gpu_results("bf16", table="speed"))
    assert {d["precision"] for d in old} == {"bf16-autocast"}
    assert {result_precision(d) for d in old} == {"bf16"}
    assert result_precision({}) == "fp32"  # the first files recorded none
    doc = json.loads((book_results() / "cpu-scale" / "tied.json").read_text())
    assert doc["config"]["train"]["amp"] is False and validate_result(doc) == []
    assert validate_result({**doc, "precision": "half"}) == [
        "precision 'half' is not one of ['fp32', 'bf16', 'fp16', 'tf32']"]
    (tmp_path / "cpu-scale" / "seed-7").mkdir(parents=True)
    shutil.copy(book_results() / "cpu-scale" / "tied.json", tmp_path / "cpu-scale")
    today = {**doc, "seed": 7, "precision": "fp32",
             "config": {**doc["config"], "train": {**doc["config"]["train"], "amp": "fp32",
                                                   "seed": 7}}}
    (tmp_path / "cpu-scale" / "seed-7" / "tied.json").write_text(json.dumps(today))
    assert [d["seed"] for d in seed_runs(tmp_path, "cpu-scale")["tied"]] == [doc["seed"], 7]
    today["config"]["train"]["amp"] = "bf16"  # a different precision is a different run
    (tmp_path / "cpu-scale" / "seed-7" / "tied.json").write_text(json.dumps(today))
    with pytest.raises(ResultFileError, match="differ in config"):
        seed_runs(tmp_path, "cpu-scale")
