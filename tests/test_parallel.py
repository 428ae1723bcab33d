"""Rows side by side within a deadline, the pack of their result files, the dry run, and
the one command of a GPU window, rehearsed on the CPU with tiny sizes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from drillbook.cli import main
from drillbook.errors import ConfigError
from drillbook.experiments import load_results, validate_result
from drillbook.experiments.results import (
    PACK_LIMIT_BYTES,
    gpu_results,
    pack_results,
    unpack_results,
)
from drillbook.experiments.run.cost_model import fit_step_model, measured_steps
from drillbook.experiments.run.launchers import SubmititLauncher, executor_parameters
from drillbook.experiments.run.plans import predict
from drillbook.experiments.run.scheduler import run_parallel, training_budget
from drillbook.experiments.run.timing import Timing
from drillbook.experiments.run.worker import JobSpec, Worker, process_started
from drillbook.experiments.tables import PLANS

ROOT = Path(__file__).resolve().parent.parent
IMPORTED = time.monotonic()  # when pytest imported this module
needs_data = pytest.mark.skipif(
    not (Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "ptb").is_dir(),
    reason="needs PTB: set DRILLBOOK_DATA (make test points it at ../shared/data)")
#: the tutorial rows made tiny, with epochs enough that only the deadline stops them
TINY = ["model.emsize=16", "model.nhid=16", "train.max_batches_per_epoch=2",
        "train.epochs=1000", "train.max_eval_tokens=200"]


def test_the_time_left_is_shared_among_the_waves_less_the_reserve():
    assert training_budget(100.0, jobs_left=4, parallel=2, reserve_seconds=10.0) == 40.0
    assert training_budget(100.0, jobs_left=1, parallel=4, reserve_seconds=10.0) == 90.0
    assert training_budget(10.0, jobs_left=3, parallel=1, reserve_seconds=5.0) < 0


def _the_healthy_row_and_the_failed_one_are_packed(tmp_path: Path) -> None:
    """What the workers of the tutorial table leave under ``tmp_path`` (its ``drill`` row's
    run folder broken) when the deadline comes: the healthy row stopped at its budget in
    time for its evaluation and analyses, the broken one's failure, and the pack."""
    docs = {d["row"]: d for d in load_results(tmp_path / "results")}
    tied, drill = docs["tied"], docs["drill"]
    # the deadline stopped the healthy row in time for its evaluation and analyses
    assert tied["status"] == "budget" and tied["epochs_done"] >= 1
    assert {"val_ppl", "test_ppl"} <= set(tied["metrics"])
    assert {"frequency_bands", "word_nll"} <= set(tied["analyses"])
    assert drill["status"] == "failed" and "no config.json" in drill["error"]
    assert all(validate_result(d) == [] for d in docs.values())
    # the pack holds the result files, no more, and reads as a results folder
    archive = tmp_path / "evidence.tar.gz"
    assert 0 < archive.stat().st_size <= PACK_LIMIT_BYTES
    unpacked = unpack_results(archive, tmp_path / "unpacked")
    assert sorted(p.relative_to(unpacked).as_posix() for p in unpacked.rglob("*.json")) == [
        "tutorial/drill.json", "tutorial/tied.json"]


@needs_data
def test_two_workers_a_failure_a_deadline_and_the_pack(tmp_path, capsys):
    broken = tmp_path / "runs" / "tutorial" / "drill"
    broken.mkdir(parents=True)
    (broken / "last.pt").write_bytes(b"not a checkpoint")  # this row's worker fails
    start = time.monotonic()
    # 75 s: 10 s of margin, each worker's 15 s reserve for its evaluation, 50 s from its
    # process's start (torch's import and the corpus counted) for training: on a slow
    # 2-core machine with the rest of the suite beside it, 20 s did not always reach the
    # end of one tiny epoch
    assert main(["reproduce", "tutorial", "--parallel", "2", "--devices", "cpu", "cpu",
                 "--deadline-minutes", "1.25", "--reserve-minutes", "0.25", "--set", *TINY,
                 "--max-eval-tokens", "200", "--out", str(tmp_path / "results"),
                 "--runs", str(tmp_path / "runs"),
                 "--pack", str(tmp_path / "evidence.tar.gz")]) == 0
    assert time.monotonic() - start < 75  # the whole call within its deadline
    captured = capsys.readouterr()
    assert "row 1/2 tied [cpu]: epoch 1/1000" in captured.err  # each row's epoch lines
    assert "2 job(s) in" in captured.err  # the summary table
    _the_healthy_row_and_the_failed_one_are_packed(tmp_path)
    assert main(["report", "--results", str(tmp_path / "evidence.tar.gz")]) == 0
    assert "| tied | `tutorial/ptb-tied` |" in capsys.readouterr().out


def test_a_workers_budget_counts_from_its_process_start():
    # the worker's training budget includes its start-up (torch's import, the corpus):
    # the instant it counts from is this process's start, before this module was imported
    assert process_started() <= IMPORTED <= time.monotonic()


def _processes_naming(text: str) -> list[str]:
    """The command lines of this machine's processes that contain ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if text in line:
            found.append(line)
    return found


@needs_data
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the processes from /proc")
def test_a_reproduce_stopped_by_sigterm_leaves_no_worker_behind(tmp_path):
    # each worker runs in a session of its own, which a signal to the command does not
    # reach: the command stops them before it ends, as a shell's kill or a queue sends it
    command = subprocess.Popen(
        [sys.executable, "-m", "drillbook.cli", "reproduce", "tutorial", "--rows", "tied",
         "--parallel", "1", "--devices", "cpu", "--deadline-minutes", "2", "--set", *TINY,
         "--out", str(tmp_path / "results"), "--runs", str(tmp_path / "runs")],
        stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        for line in command.stderr:
            if "epoch 1/1000" in line:  # its worker is training
                break
        assert len(_processes_naming(str(tmp_path / "runs"))) == 2  # the command, its worker
        command.send_signal(signal.SIGTERM)
        assert command.wait(timeout=60) == 130  # interrupted
    finally:
        command.kill()
    assert _processes_naming(str(tmp_path / "runs")) == []


def _worker(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """The worker entry point in a process of its own, as the scheduler starts it."""
    return subprocess.run([sys.executable, "-m", "drillbook.experiments.run.worker", *argv],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


def test_a_job_spec_travels_as_json_and_a_bad_one_is_one_line(tmp_path):
    spec = JobSpec("tutorial", "tied", 141, "cpu", "out", "runs", budget_minutes=0.5,
                   overrides=("model.emsize=16",), label="row 1/2 tied [cpu]")
    assert JobSpec.from_json(spec.to_json()) == spec
    for text, problem in [('{"table": "tutorial"}', "required"), ("[1, 2]", "JSON object"),
                          ("{oops", "must be JSON")]:
        with pytest.raises(ConfigError, match=problem):
            JobSpec.from_json(text)
    done = _worker('{"table": "tutorial", "row": "tied"}', cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("drillbook worker: error: a job spec has the fields")
    assert len(done.stderr.strip().splitlines()) == 1
    missing = _worker(str(tmp_path / "nowhere.json"), cwd=tmp_path)
    assert missing.returncode == 2 and "neither JSON text nor a file" in missing.stderr
    timed = replace(spec, timing=Timing(warmup=2, steps=5, folder="t", deadline=1e9,
                                        parent=7))
    assert JobSpec.from_json(timed.to_json()) == timed  # its timing comes back a Timing
    with pytest.raises(ConfigError, match="timing must be Timing's fields"):
        JobSpec.from_json(timed.to_json().replace('"warmup"', '"warm"'))


@needs_data
def test_the_worker_entry_point_writes_its_row_whatever_happens(tmp_path):
    spec = JobSpec("tutorial", "tied", 141, "cpu", str(tmp_path / "results"),
                   str(tmp_path / "runs"), budget_minutes=5.0,
                   overrides=(*TINY[:-2], "train.epochs=1", "train.max_eval_tokens=200"),
                   max_eval_tokens=200, label="row 1/1 tied [cpu]", threads=1)
    path = tmp_path / "spec.json"
    path.write_text(spec.to_json())
    done = _worker(str(path), cwd=tmp_path)  # a file holding the spec
    assert done.returncode == 0, done.stderr
    assert "row 1/1 tied [cpu]: epoch 1/1" in done.stderr
    doc = json.loads((tmp_path / "results" / "tutorial" / "tied.json").read_text())
    assert doc["status"] == "done" and validate_result(doc) == []
    # a row that cannot train still gets its result file, and the worker ends normally
    broken = tmp_path / "runs" / "tutorial" / "drill"
    broken.mkdir(parents=True)
    (broken / "last.pt").write_bytes(b"not a checkpoint")
    done = _worker(JobSpec(**{**json.loads(spec.to_json()), "row": "drill",
                              "overrides": spec.overrides}).to_json(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "results" / "tutorial" / "drill.json").read_text())
    assert doc["status"] == "failed" and "no config.json" in doc["error"]


def test_a_job_the_queue_stops_early_is_submitted_again_as_it_was():
    spec = JobSpec("tutorial", "tied", 141, "cuda", "out", "runs")
    again = Worker().checkpoint(spec)
    assert isinstance(again.function, Worker) and again.args == (spec,)


def test_submitit_parameters_are_checked_before_anything_is_submitted(tmp_path, capsys):
    assert executor_parameters(["timeout_min=600", "slurm_partition=gpu",
                                "gpus_per_node=1"]) == {
        "timeout_min": 600, "slurm_partition": "gpu", "gpus_per_node": 1}
    with pytest.raises(ConfigError, match="is not KEY=VALUE"):
        executor_parameters(["timeout_min"])
    with pytest.raises(ConfigError, match=r"submitit refuses .*gpus_per_nod"):
        SubmititLauncher(tmp_path / "s", cluster="local", parameters={"gpus_per_nod": 1})
    with pytest.raises(ConfigError, match="unknown cluster 'pbs'"):
        SubmititLauncher(tmp_path / "s", cluster="pbs")
    # a queue's job needs a time limit: without a budget or a deadline, nothing is submitted
    launcher = SubmititLauncher(tmp_path / "s", cluster="local")
    with pytest.raises(ConfigError, match="need a time limit each"):
        run_parallel("tutorial", launcher=launcher, out=tmp_path / "r", runs=tmp_path / "w")
    assert not list((tmp_path / "s").glob("*")) and not (tmp_path / "r").exists()
    with pytest.raises(SystemExit) as stopped:
        main(["reproduce", "tutorial", "--launcher", "pbs"])
    assert stopped.value.code == 2
    assert "error: unknown --launcher 'pbs'" in capsys.readouterr().err


@needs_data
@pytest.mark.slow
def test_rows_submitted_through_submitit_behave_as_local_workers(tmp_path, capsys):
    """``--launcher submitit`` on submitit's local executor: the same console lines,
    deadline, result files (a failing row's included) and pack as the local workers."""
    broken = tmp_path / "runs" / "tutorial" / "drill"
    broken.mkdir(parents=True)
    (broken / "last.pt").write_bytes(b"not a checkpoint")  # this row's job fails
    start = time.monotonic()
    # a reserve of half a minute: a job's interpreters start before its budget counts; a
    # deadline of 1.5 minutes leaves a slow 2-core machine time for one tiny epoch
    assert main(["reproduce", "tutorial", "--launcher", "submitit", "--cluster", "local",
                 "--deadline-minutes", "1.5", "--reserve-minutes", "0.5", "--set", *TINY,
                 "--max-eval-tokens", "200", "--out", str(tmp_path / "results"),
                 "--runs", str(tmp_path / "runs"),
                 "--pack", str(tmp_path / "evidence.tar.gz")]) == 0
    assert time.monotonic() - start < 100  # the whole call within its deadline
    captured = capsys.readouterr()
    assert "row 1/2 tied: epoch 1/1000" in captured.err  # each row's lines, as they come
    assert "submitit INFO" not in captured.err  # submitit's own log stays in its folder
    assert "2 job(s) in" in captured.err  # the summary table
    _the_healthy_row_and_the_failed_one_are_packed(tmp_path)
    assert len(list((tmp_path / "runs" / "submitit").glob("*_log.err"))) == 2  # its logs


def test_the_pack_refuses_more_than_it_may_hold(tmp_path, monkeypatch):
    from drillbook.errors import ResultFileError

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "row.json").write_bytes(os.urandom(4096))  # incompressible
    monkeypatch.setattr("drillbook.experiments.results.files.PACK_LIMIT_BYTES", 1024)
    with pytest.raises(ResultFileError, match="over the 0 MiB an archive may hold"):
        pack_results(tmp_path, tmp_path / "x.tar.gz")
    assert not (tmp_path / "x.tar.gz").exists()


def test_the_step_model_is_fitted_to_the_measured_gpu_steps():
    steps = measured_steps(gpu_results("fp32", table="speed"))
    assert {s["row"] for s in steps} == {"ptb-awd-lstm", "ptb-drill", "ptb-mos",
                                         "wt2-awd-lstm", "wt2-drill", "wt2-mos"}
    a, b = fit_step_model(steps)
    assert a > 0 and b > 0
    for s in steps:  # within a third of every measured step
        assert abs(a + b * s["flops"] - s["seconds_per_step"]) < s["seconds_per_step"] / 3


@needs_data
def test_the_dry_run_sizes_the_ptb_plan_without_a_gpu(capsys):
    rows = predict(PLANS["gpu-ptb"])
    assert [p.job.row.name for p in rows] == ["tied", "drill-4", "mos-15", "doc"]
    assert all(p.epochs >= 1 and p.peak_gib < 141 for p in rows)
    slowest = max(rows, key=lambda p: p.epoch_seconds)
    assert slowest.job.row.name in ("mos-15", "doc")  # the mixtures' steps are the longest
    assert main(["reproduce", "gpu-ptb", "--dry-run", "h100"]) == 0
    text = capsys.readouterr().out
    assert "on h100 (80 GiB" in text and "assumptions:" in text and "step model: a =" in text


@needs_data
def test_the_window_command_rehearsed_runs_its_parts_in_order_and_ends_on_time(tmp_path):
    """``tools/evidence.py --rehearse``: the next window's one command on the CPU at tiny
    sizes, here in one minute (its parts time-boxed to shares of it): every part is
    recorded in the window's order (run, stopped at its box, or skipped saying why), the
    call ends on time, and what the rows wrote comes back packed."""
    out = tmp_path / "evidence"
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "evidence.py"), "--rehearse",
                           "--minutes", "1", "--out", str(out), "--skip", "gpu-multi30k"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - start < 75
    summary = json.loads((out / "summary.txt").read_text())
    assert summary["rehearsal"] and summary["device"] == "cpu"
    steps = [s["step"] for s in summary["steps"]]
    assert steps[:5] == ["concurrency", "steps", "gpu-small", "gpu-multi30k", "paper-rows"]
    assert steps[-1] == "chapter 01_softmax_bottleneck (small)"
    notes = {s["step"]: s["note"] for s in summary["steps"]}
    assert notes["steps"].startswith("skipped: give --authors and --mos")
    assert notes["gpu-multi30k"] == "skipped (--skip)"
    for step, note in notes.items():  # each part ran cleanly, was stopped, or was skipped
        assert note == "exit 0" or note.startswith(("stopped", "skipped")), (step, note)
    for s in summary["steps"]:  # each within its time box
        assert s["box_seconds"] is None or s["seconds"] <= s["box_seconds"] + 2
    assert {"summary.txt", "console.log"} <= {p.name for p in out.iterdir()}
    assert "rows together: " in (out / "console.log").read_text()
    if (out / "results.tar.gz").exists():
        unpacked = unpack_results(out / "results.tar.gz", tmp_path / "r")
        assert {d["table"] for d in load_results(unpacked)} <= {"gpu-small", "gpu-ptb"}


def test_the_sharing_cost_is_what_the_committed_window_measured():
    """Four gpu-ptb rows at once on an H200 each took about 4.37 times the epoch the step
    model (refitted to the newest window's solo steps) predicts for it alone; the
    planner's sharing cost is fitted to exactly that, from the committed result files (the
    first model, the arithmetic shares, said 1.39; against the first step model, which
    overestimated a step alone, the rows took 3.33 to 3.62 times)."""
    from statistics import mean

    from drillbook.experiments.results import gpu_results, read_result
    from drillbook.experiments.run.devices import SHARING_COST

    folder = gpu_results("fp32", table="gpu-ptb")
    predictions = predict(PLANS["gpu-ptb"], parallel=4, deadline_minutes=5.65)
    ratios = []
    for p in predictions:
        doc = read_result(folder / "gpu-ptb" / f"{p.job.row.name}.json")
        measured = mean(c["epoch_seconds"] for c in doc["curve"])
        ratios.append(measured / (p.steps_per_epoch * p.step_seconds))
    assert min(ratios) > 4.1 and max(ratios) < 4.7  # every row, not only on average
    assert SHARING_COST == pytest.approx((mean(ratios) - 1) / 3, abs=0.01)
    assert {round(p.slowdown, 6) for p in predictions} == {round(1 + 3 * SHARING_COST, 6)}


def test_the_window_runs_its_rows_together_the_way_its_first_part_measured_best(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    from evidence import measured_way

    report = tmp_path / "concurrency.json"
    assert measured_way(report) is None  # the part did not finish: reproduce's default
    for best, way in (("in-process", "in-process"), ("processes", "processes"),
                      ("processes-mps", "processes"), (None, None)):
        report.write_text(json.dumps({"best_way": best}))
        assert measured_way(report) == way


@needs_data
@pytest.mark.slow
def test_the_queue_runs_a_row_in_this_process_as_reproduce_does(tmp_path, capsys):
    """The executor of this process, behind the same queue as the workers: the row trains
    as ``reproduce`` trains it (the same numbers), says it ran alone in its process, and
    the queue's summary ends the call."""
    from drillbook.experiments import reproduce
    from drillbook.experiments.run.documents import ALONE
    from drillbook.experiments.run.executors import ThisProcess
    from drillbook.experiments.run.scheduler import run_table

    overrides = [*TINY, "train.epochs=1"]
    [alone] = reproduce("tutorial", rows=["tied"], out=tmp_path / "alone", runs=tmp_path / "a",
                        overrides=overrides, max_eval_tokens=200, device="cpu",
                        progress=False)
    [queued] = run_table("tutorial", ThisProcess(), rows=["tied"], out=tmp_path / "queued",
                         runs=tmp_path / "q", overrides=overrides, max_eval_tokens=200,
                         quiet=True)
    a, q = (json.loads(Path(p).read_text()) for p in (alone, queued))
    assert q["execution"] == ALONE and (q["status"], q["epochs_done"]) == ("done", 1)
    assert q["metrics"]["test_ppl"] == a["metrics"]["test_ppl"]
    assert [e["val_ppl"] for e in q["curve"]] == [e["val_ppl"] for e in a["curve"]]
    assert "1 job(s) in" in capsys.readouterr().err
