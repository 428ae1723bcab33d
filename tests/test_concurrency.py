"""``tools/concurrency.py``, the measurement of many rows on one device: its CPU rehearsal
runs end to end and writes its report; the MPS daemon it starts is quit whatever happens,
and where it cannot start the measurement goes on without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import concurrency  # noqa: E402

from drillbook.experiments.run import timing  # noqa: E402
from drillbook.experiments.run.timing import Timing  # noqa: E402
from drillbook.experiments.run.worker import JobSpec  # noqa: E402

needs_data = pytest.mark.skipif(
    not (Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "ptb").is_dir(),
    reason="needs PTB: set DRILLBOOK_DATA (make test points it at ../shared/data)")


@needs_data
def test_the_cpu_rehearsal_measures_every_way_and_writes_its_report(tmp_path):
    out = tmp_path / "concurrency.json"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "concurrency.py"),
                           "--device", "cpu", "--tiny", "--rows", "2", "--paper-rows", "1",
                           "--warmup", "1", "--steps", "2", "--threads", "1",
                           "--out", str(out)],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "TQDM_DISABLE": "1"})
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["format"] == "drillbook-concurrency/1"
    assert report["alone"]["updates"] == 2 and report["alone"]["ratio"] == 1.0
    small = report["small"]
    assert set(small) == {"in-process", "processes"}  # no CUDA: no MPS
    assert "not a CUDA device" in report["skipped"]["processes-mps"]
    assert small["in-process"]["2"]["execution"] == "interleaved-eager"
    assert small["processes"]["2"]["execution"] == "process"
    for rows in small.values():
        row = rows["2"]
        assert row["updates"] == 4 and row["wall_seconds"] > 0
        assert row["ratio"] == pytest.approx(
            row["updates_per_second"] / report["alone"]["updates_per_second"])
        assert row["peak_memory_bytes"] > 0
    assert report["best_way"] in small
    paper = report["paper"]
    assert paper["way"] == report["best_way"] and paper["together"]["updates"] == 2
    assert "x" in done.stdout and "written:" in done.stdout


def test_a_timed_wave_that_cannot_open_says_why_in_each_rows_timing(tmp_path):
    timed = Timing(warmup=1, steps=1, folder=str(tmp_path), deadline=time.time() + 60)
    specs = [JobSpec(table="tutorial", row="tied", seed=seed, device="cpu",
                     out=str(tmp_path), runs=str(tmp_path), overrides=("model.nhid=0",),
                     timing=timed) for seed in (1, 2)]
    timing.time_together(specs, device="cpu", graphs=False)
    assert sorted(p.name for p in tmp_path.glob("timed-*")) == ["timed-tied-1.json",
                                                                "timed-tied-2.json"]
    assert "nhid" in timing.read_timed(specs)["error"]
    (tmp_path / "timed-tied-2.json").unlink()
    assert timing.read_timed(specs[1:]) == {"error": "row tied-2 wrote no timing"}


FAKE_CONTROL = """#!{python}
import os, sys
with open({log!r}, "a") as f:
    f.write(" ".join([*sys.argv[1:], sys.stdin.read().strip() if not sys.argv[1:] else ""])
            + " " + os.environ["CUDA_MPS_PIPE_DIRECTORY"] + "\\n")
sys.exit({code})
"""


def fake_control(folder: Path, log: Path, code: int = 0) -> None:
    path = folder / concurrency.MPS_CONTROL
    path.write_text(FAKE_CONTROL.format(python=sys.executable, log=str(log), code=code))
    path.chmod(0o755)


def test_the_mps_daemon_is_this_users_in_a_temporary_folder_and_always_quit(
        tmp_path, monkeypatch):
    bin_dir, work = tmp_path / "bin", tmp_path / "work"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    fake_control(bin_dir, log)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(RuntimeError, match="a row failed"):
        with concurrency.mps_daemon(work) as (env, why):
            assert why == "" and env["CUDA_MPS_PIPE_DIRECTORY"].startswith(str(work))
            assert Path(env["CUDA_MPS_LOG_DIRECTORY"]).is_dir()
            raise RuntimeError("a row failed")
    calls = log.read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["-d", "quit"]  # started, then quit anyway
    assert all(c.split()[-1] == str(work / "mps-pipe") for c in calls)


def test_where_the_mps_daemon_cannot_start_the_measurement_goes_on(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_control(bin_dir, tmp_path / "calls.log", code=3)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with concurrency.mps_daemon(tmp_path / "work") as (env, why):
        assert env is None and "failed (exit 3)" in why
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with concurrency.mps_daemon(tmp_path / "work2") as (env, why):
        assert env is None and "not on PATH" in why


def test_a_worker_is_abandoned_once_its_measurement_is_gone_or_stopped_waiting(tmp_path):
    go, me = tmp_path / "go", os.getppid()  # a worker's parent: here, this test's
    later, earlier = time.time() + 60, time.time() - 1
    assert not timing.abandoned(me, later, go)
    assert timing.abandoned(me + 1_000_000, later, go)  # another parent: it died
    assert timing.abandoned(me, earlier, go)  # the start's deadline passed, no "go"
    go.touch()
    assert not timing.abandoned(me, earlier, go)  # started: it trains to the end


ORPHAN = """
import json, os, subprocess, sys
spec = json.loads({spec!r})
spec["timing"]["parent"] = os.getpid()
worker = subprocess.Popen([sys.executable, "-m", "drillbook.experiments.run.worker",
                           json.dumps(spec)], stdout=subprocess.DEVNULL,
                          stderr=open({log!r}, "w"))
print(worker.pid, flush=True)
"""


@pytest.mark.slow
def test_a_worker_whose_measurement_was_killed_ends_by_itself(tmp_path):
    """The measurement killed outright (no clean-up of its own runs): its worker, the
    scheduler's own, timing a job, sees its parent gone and exits."""
    spec = JobSpec(table="tutorial", row="tied", seed=1000, device="cpu", out=str(tmp_path),
                   runs=str(tmp_path), timing=Timing(warmup=1, steps=1, folder=str(tmp_path),
                                                     deadline=time.time() + 600, parent=0))
    parent = subprocess.run([sys.executable, "-c", ORPHAN.format(spec=spec.to_json(),
                                                                log=str(tmp_path / "log"))],
                            capture_output=True, text=True, timeout=60, check=True,
                            cwd=ROOT)
    pid = int(parent.stdout.split()[0])  # its parent has exited: the worker is an orphan
    stat = Path(f"/proc/{pid}/stat")
    end = time.monotonic() + 120  # it imports torch first
    while stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < end, "the orphaned worker is still running"
        time.sleep(0.2)
    assert not list(tmp_path.glob("timed-*"))  # it timed nothing
    assert (tmp_path / "log").read_text() == ""  # and said nothing: no bad spec, no error


def test_the_guard_finds_a_process_the_tests_started():
    from conftest import started_here

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.pid in started_here()
    finally:
        child.kill()
        child.wait()
    assert child.pid not in started_here()


@pytest.mark.slow
def test_a_window_part_past_its_time_box_is_asked_to_stop_before_it_is_killed(tmp_path):
    """``tools/evidence.py`` stops a part at its time box with a stop request first, so
    that the part's own clean-up (a measurement's workers, an MPS daemon) runs."""
    import evidence

    window = evidence.Window(minutes=5, out=tmp_path, shares={"part": 1.0})
    flag = tmp_path / "cleaned-up"
    part = ("import signal, sys, time\n"
            "def stop(*_):\n"
            f"    open({str(flag)!r}, 'w').close()\n"
            "    sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, stop)\n"
            "time.sleep(120)\n")
    try:
        status = window.run("part", [sys.executable, "-c", part], limit=6)
    finally:
        window.console.close()
    assert status is None and "time box" in window.steps[-1]["note"]
    assert flag.exists()
