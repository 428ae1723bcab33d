"""Plans that continue from window to window: windows packed largest first, final rows
skipped, the rest started while they fit the time left, and the windows' result files read
as one table, each row naming its window; the recast gpu-small plan's dry run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_parallel import needs_data

from drillbook.cli import main
from drillbook.experiments.results import gpu_union, is_final
from drillbook.experiments.results.evidence import plan_results
from drillbook.experiments.run.devices import SHARINGS
from drillbook.experiments.run.documents import failure_doc
from drillbook.experiments.run.jobs import table_jobs
from drillbook.experiments.run.launchers import Handle
from drillbook.experiments.run.plan_runner import final_jobs
from drillbook.experiments.run.plans import pack_windows
from drillbook.experiments.run.scheduler import run_parallel
from drillbook.experiments.tables import PLANS, TABLES, to_plateau


def test_windows_are_filled_largest_first_and_a_job_longer_than_one_never_fits():
    # two lanes of 10 s: 8 and 6 first, 4 beside the 6, 3 fits on neither, 2 beside the 8
    assert pack_windows([4.0, 8.0, 3.0, 6.0, 2.0, 11.0], 2, 10.0) == [1, 1, 2, 1, 1, None]
    assert pack_windows([5.0] * 4, 4, 5.0) == [1, 1, 1, 1]
    assert pack_windows([], 3, 5.0) == []


def test_the_sharings_say_what_is_measured_and_what_is_assumed():
    processes, graphs = SHARINGS["processes"], SHARINGS["graphs-assumed"]
    assert processes.measured and not graphs.measured
    assert graphs.ratio(16) == pytest.approx(8.0) and graphs.ratio(1) == 1.0
    assert graphs.ratio(32) == pytest.approx(8.0)  # no more than the goal, past 16 rows
    # four processes gave less than one process's throughput in the committed window
    assert processes.ratio(4) < 1.0 and processes.slowdown(4) == pytest.approx(4.36)


def _doc(job, status: str, epochs: int, **extra) -> dict:
    doc = failure_doc(job, {"commit": None, "dirty": False}, status=status, error="x",
                      device="cpu", seconds=1.0, run_dir=Path("/nonexistent"),
                      budget_minutes=None)
    doc.pop("error")
    return {**doc, "epochs_done": epochs, **extra}


def _write(folder: Path, job, doc: dict) -> None:
    path = job.result_path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def test_windows_accumulate_into_one_table_each_row_naming_its_window(tmp_path):
    tied, drill = table_jobs("tutorial", seeds=[141])
    tied_2 = table_jobs("tutorial", rows=["tied"], seeds=[142])[0]
    first = tmp_path / "gpu" / "2026-12-01-h100-fp32"
    second = tmp_path / "gpu" / "2026-12-02-h100-fp32"
    _write(first, tied, _doc(tied, "plateau", 9))  # final in the first window
    _write(first, drill, _doc(drill, "deadline", 2))
    _write(second, tied, _doc(tied, "deadline", 1))  # a later, unfinished run of it
    _write(second, drill, _doc(drill, "done", 6))
    _write(second, tied_2, _doc(tied_2, "budget", 3))
    _write(tmp_path / "gpu" / "2026-12-02-h100-bf16", drill, _doc(drill, "done", 1))
    union = gpu_union("tutorial", "fp32", results=tmp_path)
    assert [(d["row"], d["seed"], d["status"], d["window"]) for d in union] == [
        ("tied", 141, "plateau", "2026-12-01-h100"), ("tied", 142, "budget",
                                                      "2026-12-02-h100"),
        ("drill", 141, "done", "2026-12-02-h100")]
    assert [is_final(d) for d in union] == [True, False, True]
    assert not is_final({**union[0], "pending": ["rank"]})
    assert len(gpu_union("tutorial", "bf16", results=tmp_path)) == 1
    # the chapters' loader reads the union
    assert [d["window"] for d in plan_results("tutorial", tmp_path)] == [
        "2026-12-01-h100", "2026-12-02-h100", "2026-12-02-h100"]
    # a final row is skipped only if it trained the config the plan trains now
    jobs = table_jobs("tutorial", seeds=[141, 142])
    assert final_jobs(jobs, "fp32", results=tmp_path) == {("tied", 141), ("drill", 141)}
    changed = table_jobs("tutorial", seeds=[141, 142], overrides=["train.lr=3"])
    assert final_jobs(changed, "fp32", results=tmp_path) == set()
    # ... and this window's own folder counts too
    out = tmp_path / "now"
    _write(out, tied_2, _doc(tied_2, "plateau", 5))
    assert ("tied", 142) in final_jobs(jobs, "fp32", results=tmp_path, out=out)


class _Instant(Handle):
    def __init__(self, spec, seconds: float) -> None:
        super().__init__()
        self.spec, self.seconds, self.began = spec, seconds, time.monotonic()

    def poll(self):
        return 0 if time.monotonic() - self.began >= self.seconds else None

    def stop(self) -> None:
        self.seconds = 0.0

    def kill(self) -> None:
        self.seconds = 0.0


class _FakeLauncher:
    """Writes each job's result file at once and "runs" for the job's predicted seconds."""

    needs_time_limit = False

    def __init__(self, seconds: dict, out: Path) -> None:
        self.seconds, self.out, self.started = seconds, out, []

    def start(self, spec, relay, *, seconds: float) -> Handle:
        job = table_jobs(spec.table, rows=[spec.row], seeds=[spec.seed],
                         overrides=list(spec.overrides))[0]
        self.started.append((spec.row, spec.seed, round(seconds)))
        _write(self.out, job, _doc(job, "plateau", 3))
        return _Instant(spec, self.seconds[(spec.row, spec.seed)])


def test_a_continuing_plan_skips_final_rows_and_starts_only_what_fits(tmp_path, capsys):
    from drillbook.experiments.results.fingerprint import training_fingerprint

    jobs = table_jobs("tutorial", seeds=[1, 2, 3])
    for job in jobs:  # the result files' fingerprints, computed before the clock runs
        training_fingerprint(job.config)
    predicted = {(j.row.name, j.seed): s for j, s in zip(jobs, [0.2, 0.4, 0.6, 50.0, 0.3,
                                                                 0.1], strict=True)}
    launcher = _FakeLauncher({k: min(v, 0.5) for k, v in predicted.items()}, tmp_path / "r")
    written = run_parallel("tutorial", seeds=[1, 2, 3], parallel=2, deadline_minutes=0.5,
                           out=tmp_path / "r", runs=tmp_path / "w", launcher=launcher,
                           skip={("tied", 1)}, predicted=predicted, quiet=True)
    started = [(row, seed) for row, seed, _ in launcher.started]
    # largest first; ("drill", 1) needs 50 s of the 20 s left: never started
    assert started == [("tied", 3), ("tied", 2), ("drill", 2), ("drill", 3)]
    assert all(budget <= 30 for *_, budget in launcher.started)
    assert sorted(p.name for p in written) == ["drill.json"] * 2 + ["tied.json"] * 2
    assert not (tmp_path / "r" / "tutorial" / "seed-1" / "drill.json").exists()
    err = capsys.readouterr().err
    assert ("1 job(s) already final, skipped; 1 job(s) fit in no time left and wait for the "
            "next window: drill seed 1") in err


@needs_data
def test_the_recast_small_plan_says_its_rule_its_sharing_and_its_windows(capsys):
    plan = PLANS["gpu-small"]
    assert to_plateau(plan) and not to_plateau(PLANS["gpu-ptb"])
    assert len(TABLES["gpu-small"]) == 10 and plan.seeds == (141, 142, 143)
    for row in TABLES["gpu-small"]:
        t = row.resolve().train
        assert (t.plateau_epochs, t.plateau_tolerance) == (4, 0.02)
        assert (t.max_batches_per_epoch, t.max_eval_tokens, t.batch_size) == (None, None, 64)
        assert row.resolve().data.corpus == "ptb"  # the real PTB, its 10,000 words
    assert TABLES["gpu-small"].row("dual-lr5").resolve().train.lr == 5
    assert main(["reproduce", "gpu-small", "--dry-run", "h100", "--deadline-minutes",
                 "9"]) == 0
    text = capsys.readouterr().out
    assert "stopping rule: validation perplexity fell by less than 2% over the last 4" in text
    assert "epochs to plateau: assumed (20 epochs, from a reduced size of the recipe" in text
    assert "16 rows at once train 8x one row's updates per second" in text and "ASSUMED" in text
    assert "whole table at graphs-assumed (ASSUMED), 16 at once" in text
    assert "whole table at processes (measured), 16 at once" in text
    assert "step model: a =" in text and "memory model: k =" in text


def test_each_result_file_says_how_its_row_was_run_and_old_files_still_load(tmp_path):
    from test_reproduce import TINY_LM, tiny_reproduce

    from drillbook.experiments import reproduce
    from drillbook.experiments.results import read_result, validate_result
    from drillbook.experiments.run.documents import ALONE, execution
    from drillbook.experiments.run.worker import JobSpec

    [path] = reproduce("tutorial", rows=["tied"], **tiny_reproduce(
        tmp_path, [*TINY_LM, "train.epochs=1"]))
    doc = read_result(path)
    assert doc["execution"] == ALONE == {"way": "process", "rows": 1, "graphed": False}
    [path] = reproduce("tutorial", rows=["drill"], execution=execution(
        "interleaved-eager", 3), **tiny_reproduce(tmp_path, [*TINY_LM, "train.epochs=1"]))
    assert read_result(path)["execution"] == {"way": "interleaved-eager", "rows": 3,
                                              "graphed": False}
    del doc["execution"]  # a file written before rows recorded it
    assert validate_result(doc) == []
    assert validate_result({**doc, "execution": {"way": "process"}}) == [
        "missing field 'execution.rows'", "missing field 'execution.graphed'"]
    with pytest.raises(ValueError, match="way must be one of"):
        execution("threads")
    # the scheduler's workers say they are processes, and how many share their device
    spec = JobSpec("tutorial", "tied", 141, "cuda", "out", "runs", way="process-mps", rows=4)
    assert JobSpec.from_json(spec.to_json()) == spec


def test_together_chooses_the_way_explicitly_and_refuses_what_cannot_run(monkeypatch):
    from drillbook.cli.common import CommandError
    from drillbook.cli.tables import _together

    assert _together(None, ["cpu"], launcher="local") == "process"
    assert _together("processes", ["cuda:0"], launcher="local") == "process"
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    with pytest.raises(CommandError, match="needs an MPS daemon started as this user"):
        _together("mps", ["cuda:0"], launcher="local")
    with pytest.raises(CommandError, match="for processes on this machine's CUDA devices"):
        _together("mps", ["cpu"], launcher="local")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/mps-pipe")
    assert _together("mps", ["cuda:0"], launcher="local") == "process-mps"


def test_rows_trained_together_in_one_process_end_as_each_alone_and_say_so(tmp_path):
    """``--together in-process`` on a CPU: the rows take one eager step each in turn, and
    each row's result equals its run alone (the interleaved runner is bit-identical to
    ``fit()``), its file saying how it ran."""
    from test_reproduce import TINY_LM, tiny_reproduce
    from test_train import tiny_corpus

    from drillbook.experiments import reproduce
    from drillbook.experiments.results import read_result
    from drillbook.experiments.run.interleaved import run_in_process

    overrides = [*TINY_LM, "train.epochs=2"]
    alone = reproduce("tutorial", rows=["tied", "drill"],
                      **tiny_reproduce(tmp_path / "alone", overrides))
    together = run_in_process("tutorial", rows=["tied", "drill"], parallel=2,
                              devices=["cpu"], out=tmp_path / "t" / "r",
                              runs=tmp_path / "t" / "runs", overrides=overrides,
                              corpus=tiny_corpus(), quiet=True)
    assert [p.name for p in together] == ["tied.json", "drill.json"]
    for one, both in zip(alone, together, strict=True):
        a, b = read_result(one), read_result(both)
        assert b["execution"] == {"way": "interleaved-eager", "rows": 2, "graphed": False}
        assert (b["status"], b["epochs_done"]) == (a["status"], a["epochs_done"]) == ("done", 2)
        for key in ("val_ppl", "test_ppl"):
            assert b["metrics"][key] == a["metrics"][key]
        assert [e["val_ppl"] for e in b["curve"]] == [e["val_ppl"] for e in a["curve"]]


def test_rows_stopped_together_by_a_signal_each_keep_their_sitting(tmp_path, monkeypatch):
    """Rows trained in one process and stopped by a signal write no result file, but each
    run folder records the epochs it completed, and with which code, for the sitting that
    continues it."""
    import dataclasses
    import json

    from test_reproduce import TINY_LM
    from test_train import tiny_corpus

    from drillbook.errors import TrainingInterrupted
    from drillbook.experiments.run import interleaved

    real = interleaved.train_together

    def then_stopped(trainers, **kwargs):  # the signal comes after their first epoch
        return [dataclasses.replace(o, status=None, error=TrainingInterrupted("SIGTERM"))
                for o in real(trainers, **kwargs)]

    monkeypatch.setattr(interleaved, "train_together", then_stopped)
    with pytest.raises(TrainingInterrupted):
        interleaved.run_in_process("tutorial", rows=["tied", "drill"], parallel=2,
                                   devices=["cpu"], out=tmp_path / "r", runs=tmp_path / "runs",
                                   overrides=[*TINY_LM, "train.epochs=1"],
                                   corpus=tiny_corpus(), quiet=True)
    kept = sorted((tmp_path / "runs").rglob("sittings.json"))
    assert [path.parent.name for path in kept] == ["drill", "tied"]
    assert not list((tmp_path / "r").rglob("*.json"))
    for path in kept:
        record = json.loads(path.read_text())
        assert record["row"] == path.parent.name and len(record["sittings"]) == 1
        assert record["sittings"][0]["epochs"] == [1, 1]
        assert record["sittings"][0]["execution"]["way"] == "interleaved-eager"


def test_the_default_way_is_what_the_newest_window_measured_best(tmp_path, monkeypatch):
    from drillbook.cli.common import CommandError
    from drillbook.cli.tables import _together
    from drillbook.experiments.run import executors as together

    assert together.default_way(tmp_path) == "processes"  # nothing measured yet
    for window, best in (("2026-12-01-h100", "processes"), ("2026-12-02-h100",
                                                            "in-process")):
        bench = tmp_path / "gpu" / window / "bench"
        bench.mkdir(parents=True)
        (bench / "concurrency.json").write_text(json.dumps({"best_way": best}))
    assert together.default_way(tmp_path) == "in-process"
    monkeypatch.setattr(together, "default_way", lambda: "in-process")
    assert _together(None, ["cuda:0"], launcher="local") == "in-process"
    assert _together(None, ["cuda:0", "cuda:1"], launcher="local") == "process"
    assert _together("in-process", ["cpu"], launcher="local") == "in-process"
    with pytest.raises(CommandError, match="in this process, on one device"):
        _together("in-process", ["cuda:0", "cuda:1"], launcher="local")


def test_a_cpu_plan_skips_its_committed_final_rows_and_times_the_rest_here(tmp_path,
                                                                           monkeypatch):
    """laptop-lm's rows committed under results/laptop-lm/ (no GPU window) are final for
    the next sitting; the dry run on the CPU prints only the rows left, each timed by the
    planner on this CPU (here a stand-in time), and the core-hours they need."""
    from drillbook.experiments.run import plans
    from drillbook.experiments.run.dry_run import format_predictions

    plan = PLANS["laptop-lm"]
    jobs = table_jobs("laptop-lm", seeds=list(plan.seeds))
    tied = next(j for j in jobs if j.row.name == "tied" and j.seed == 141)
    mos = next(j for j in jobs if j.row.name == "mos" and j.seed == 142)
    _write(tmp_path, tied, _doc(tied, "plateau", 21))  # results/laptop-lm/tied.json
    _write(tmp_path, mos, _doc(mos, "deadline", 3))  # stopped: not final
    assert final_jobs(jobs, "fp32", results=tmp_path) == {("tied", 141)}
    timed = []
    monkeypatch.setattr(plans, "cpu_step_seconds",
                        lambda config, sizes: timed.append(config.head.kind) or 0.1)
    left = plans.predict(plan, device_class="cpu", deadline_minutes=120, parallel=2,
                         results=tmp_path, skip={("tied", 141)})
    assert len(left) == len(jobs) - 1 and ("tied", 141) not in {
        (p.job.row.name, p.job.seed) for p in left}
    assert timed and {p.slowdown for p in left} == {1.0}  # a core each
    # 426 steps of 0.1 s an epoch, plus its validation; 20 epochs assumed, plus 20 s
    p = left[0]
    assert p.steps_per_epoch == 426 and 42.6 < p.epoch_seconds < 46
    assert p.seconds == pytest.approx(20 * p.epoch_seconds + 20)
    text = format_predictions(plan, left, device_class="cpu", deadline_minutes=120,
                              parallel=2)
    assert f"{len(left)} row(s) left, 2 at once (one thread each) on this CPU" in text
    assert "core-hours" in text and "tied seed 142" in text


def test_a_cpu_dry_run_counts_only_the_epochs_after_a_rows_checkpoint(tmp_path, monkeypatch,
                                                                      capsys):
    """A row whose run folder holds a resumable checkpoint needs only the epochs after the
    ones its log records (its plateau measured or assumed, as before); a folder with a
    checkpoint but no finished epoch counts from the start. The CLI's CPU dry run reads
    --runs and --continue-from together and says which rows it resumed."""
    from drillbook.experiments.run import plans

    plan = PLANS["laptop-lm"]
    jobs = table_jobs("laptop-lm", seeds=list(plan.seeds))
    tied, mos = (next(j for j in jobs if j.row.name == row and j.seed == 142)
                 for row in ("tied", "mos"))
    runs = tmp_path / "runs"
    for job, epochs in ((tied, 7), (mos, 0)):
        folder = job.run_dir(runs)
        folder.mkdir(parents=True)
        (folder / "last.pt").write_bytes(b"checkpoint")
        if epochs:
            (folder / "log.jsonl").write_text("".join(
                json.dumps({"epoch": e, "val_ppl": 300.0 - e}) + "\n"
                for e in range(1, epochs + 1)))
    assert plans.epochs_logged(tied.run_dir(runs)) == 7
    assert plans.epochs_logged(mos.run_dir(runs)) == 0
    assert plans.epochs_logged(tmp_path / "nowhere") == 0
    monkeypatch.setattr(plans, "cpu_step_seconds", lambda config, sizes: 0.1)
    results = tmp_path / "results"
    results.mkdir()
    fresh, resumed = ({(p.job.row.name, p.job.seed): p for p in plans.predict(
        plan, device_class="cpu", deadline_minutes=120, parallel=2, results=results,
        runs=folder)} for folder in (None, runs))
    assert resumed["tied", 142].epochs_done == 7 and fresh["tied", 142].epochs_done == 0
    epoch = resumed["tied", 142].epoch_seconds
    assert resumed["tied", 142].seconds == pytest.approx((20 - 7) * epoch + 20)
    assert fresh["tied", 142].seconds == pytest.approx(20 * epoch + 20)
    assert resumed["mos", 142].seconds == fresh["mos", 142].seconds
    assert main(["reproduce", "laptop-lm", "--dry-run", "cpu", "--runs", str(runs),
                 "--continue-from", str(results)]) == 0
    text = capsys.readouterr().out
    assert "resumed from their checkpoints" in text and "tied seed 142 after epoch 7" in text
    assert f"{len(jobs)} row(s) left" in text


@pytest.mark.parametrize("device_class", ["cpu", "h100"])
def test_a_dry_run_of_a_plan_with_every_row_final_says_nothing_is_left(tmp_path, capsys,
                                                                       device_class):
    """Once every row of a plan is final in --continue-from, the dry run says so in one
    line, on the CPU and on a GPU (the GPU printout took the largest of no rows' memory
    and ended in a traceback)."""
    plan = PLANS["laptop-nmt-vmf"]
    jobs = table_jobs(plan.table, seeds=list(plan.seeds))
    for job in jobs:
        _write(tmp_path, job, _doc(job, "plateau", 5))
    assert final_jobs(jobs, "fp32", results=tmp_path) == {(j.row.name, j.seed) for j in jobs}
    assert main(["reproduce", plan.name, "--dry-run", device_class,
                 "--continue-from", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == (f"plan {plan.name}: table {plan.table}, no row left: every row "
                           f"(and seed) is final in the results read (its stopping rule "
                           f"reached, or all its epochs run); nothing to train")


def test_only_runs_stopped_by_a_rows_own_rule_measure_its_epochs_to_plateau(tmp_path):
    """A committed run that reached its plateau under another stopping rule (the rule
    changed since it trained) says nothing about how long the row needs now: the planner
    takes the table's other rows under the row's rule, else the plan's assumption, until a
    run of its own under it is in."""
    from drillbook.experiments.run.plans import _plateau_epochs, measured_plateaus

    plan = PLANS["laptop-lm"]
    tied = table_jobs("laptop-lm", rows=["tied"], seeds=[141])[0]
    t = tied.config.train
    old = {"epochs": t.plateau_epochs - 2, "tolerance": t.plateau_tolerance / 2,
           "reached": True, "rule": "an older rule"}
    _write(tmp_path, tied, _doc(tied, "plateau", 11, plateau=old))
    assert measured_plateaus("laptop-lm", tmp_path)["tied"][0][0] == 11
    assert _plateau_epochs(tied, plan, measured_plateaus("laptop-lm", tmp_path)) == (
        plan.plateau_epochs, "assumed")
    own = {**old, "epochs": t.plateau_epochs, "tolerance": t.plateau_tolerance}
    softmax = table_jobs("laptop-lm", rows=["softmax"], seeds=[141])[0]
    _write(tmp_path, softmax, _doc(softmax, "plateau", 24, plateau=own))
    # no run of its own under its rule: the other rows' runs under it stand in
    assert _plateau_epochs(tied, plan, measured_plateaus("laptop-lm", tmp_path)) == (
        24, "the table's other rows (1 run(s))")
    _write(tmp_path, tied, _doc(tied, "plateau", 27, plateau=own))
    epochs, source = _plateau_epochs(tied, plan, measured_plateaus("laptop-lm", tmp_path))
    assert epochs == 27 and source.startswith("measured (1 run(s)")


def test_a_cpu_plan_times_a_row_by_its_committed_runs_epochs_where_it_has_any(
        tmp_path, monkeypatch):
    """On the CPU the dry run takes a row's step from the median training epoch its
    committed CPU runs logged (any seed, any status) over its steps, and times only the
    rows without such runs here; the printout names the rows timed by their runs."""
    from drillbook.experiments.run import plans
    from drillbook.experiments.run.dry_run import format_predictions

    plan = PLANS["laptop-lm"]
    tied = table_jobs("laptop-lm", rows=["tied"], seeds=[142])[0]
    curve = [{"epoch": i + 1, "epoch_seconds": s} for i, s in enumerate([80.0, 60.0, 50.0])]
    _write(tmp_path, tied, _doc(tied, "deadline", 3, curve=curve))
    assert plans.measured_cpu_epochs("laptop-lm", tmp_path) == {"tied": [80.0, 60.0, 50.0]}
    monkeypatch.setattr(plans, "cpu_step_seconds", lambda config, sizes: 0.1)
    left = plans.predict(plan, device_class="cpu", deadline_minutes=120, parallel=2,
                         results=tmp_path)
    by_row = {p.job.row.name: p for p in left if p.job.seed == 141}
    assert by_row["tied"].step_source == "runs" and by_row["softmax"].step_source == "probe"
    assert by_row["tied"].step_seconds == pytest.approx(60.0 / 426)
    assert by_row["softmax"].step_seconds == 0.1
    text = format_predictions(plan, left, device_class="cpu", deadline_minutes=120,
                              parallel=2)
    assert "step time of tied: the median training epoch their committed CPU runs" in text
