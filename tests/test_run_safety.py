"""A run folder holds one run, and nothing confusing is left behind: a folder never mixes
two runs, a refused or failed command leaves no trace, a full disk or a file-size limit
keeps the last checkpoint, a diverged run's "last finite state" is one to train on from,
and Ctrl-C or SIGTERM save the step they interrupt."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_cli import MICRO, needs_data
from test_train import make, tiny_config, tiny_corpus

from drillbook.cli import main
from drillbook.data import batchify
from drillbook.errors import (
    DataError,
    RunFolderError,
    RunFolderExistsError,
    TrainingDiverged,
    TrainingInterrupted,
)
from drillbook.train import evaluate, load_checkpoint, read_log

ROOT = Path(__file__).resolve().parent.parent


def snapshot(folder: Path) -> dict[str, bytes] | None:
    """Every file under ``folder`` with its bytes (None: no folder)."""
    if not folder.exists():
        return None
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def user_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    return err


@pytest.fixture
def finished(tmp_path) -> Path:
    """A finished tiny run (two epochs)."""
    run = tmp_path / "run"
    make(run, tiny_config(epochs=2)).fit()
    return run


# ------------------------------------------------------------------ one run per folder
def test_a_run_without_last_pt_is_not_mixed_with_a_new_one(finished):
    (finished / "last.pt").unlink()  # a finished run whose last.pt was deleted
    before = snapshot(finished)
    with pytest.raises(RunFolderExistsError, match=r"already holds a run \(best\.pt, "
                       r"log\.jsonl, config\.json\) that cannot be resumed") as exc:
        make(finished, tiny_config(epochs=2))
    assert "another --out folder" in str(exc.value) and "\n" not in str(exc.value)
    assert snapshot(finished) == before  # its log, config and weights kept as they were


def test_a_corrupt_last_pt_advises_a_new_folder_not_a_deletion(finished):
    (finished / "last.pt").write_bytes(b"truncated")
    with pytest.raises(Exception, match="train the run again into a new --out folder"):
        make(finished, tiny_config(epochs=3), resume=True)


# ------------------------------------------------------------------ no trace
def test_a_finished_run_leaves_no_lock_file(finished):
    assert not (finished / ".lock").exists()
    assert {p.name for p in finished.iterdir()} == {"config.json", "log.jsonl", "last.pt",
                                                   "best.pt"}


def test_a_run_that_fails_before_training_leaves_no_folder(tmp_path, monkeypatch):
    def no_corpus(config):
        raise DataError("no corpus in this test")

    monkeypatch.setattr("drillbook.train.lm.load_lm_data", no_corpus)
    run = tmp_path / "a" / "b" / "run"  # three folders the trainer would create
    from drillbook.train import LanguageModelTrainer

    with pytest.raises(DataError):
        LanguageModelTrainer(tiny_config(), run, device="cpu", progress=False)
    assert not (tmp_path / "a").exists()


def test_refused_commands_leave_the_folder_byte_identical(finished):
    before = snapshot(finished)
    with pytest.raises(RunFolderExistsError):  # a new run into it
        make(finished, tiny_config(epochs=2))
    with pytest.raises(RunFolderError, match="different config"):  # another model
        make(finished, tiny_config(epochs=2, bptt=7), resume=True)
    holder = make(finished, tiny_config(epochs=2), resume=True)  # a second trainer
    with pytest.raises(RunFolderError, match="in use"):
        make(finished, tiny_config(epochs=2), resume=True)
    holder.close()
    with pytest.raises(RunFolderError, match="finetune writes a run folder of its own"):
        from drillbook.train import finetune

        finetune(finished, out=finished, device="cpu", corpus=tiny_corpus(), progress=False)
    assert snapshot(finished) == before


def test_a_stale_lock_of_a_killed_trainer_is_gone_after_the_next_run(finished):
    (finished / ".lock").write_text("99999\n")  # what a killed process leaves
    make(finished, tiny_config(epochs=3), resume=True).fit()
    assert not (finished / ".lock").exists()
    assert not list(finished.glob(".*.tmp"))


def test_out_naming_a_file_is_one_line_and_the_file_is_kept(capsys, tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    line = user_error(capsys, ["train", "tutorial/ptb-tied", "--out", str(target)])
    assert "is a file, not a folder" in line
    assert target.read_text() == "mine"


# ------------------------------------------------------------------ divergence
def test_the_last_finite_state_is_one_to_resume_from(tmp_path, monkeypatch):
    """The second epoch blows up (its step size made 10,000 times larger, as a bad
    learning rate would): the error names epoch 1's checkpoint, whose validation loss is
    below twice a uniform guess's, and the resume the message advises trains."""
    run = tmp_path / "run"
    trainer = make(run, tiny_config(epochs=2))
    lr_scale = trainer.lr_scale
    monkeypatch.setattr(trainer, "lr_scale",
                        lambda batch: lr_scale(batch) * (1e4 if trainer.epoch == 2 else 1))
    with pytest.raises(TrainingDiverged) as exc:
        trainer.fit()
    message = str(exc.value)
    saved = load_checkpoint(run / "last.pt")
    assert f"(step {saved['step']})" in message and saved["epoch"] == 2  # epoch 1 done
    corpus = tiny_corpus()
    model = make(tmp_path / "probe", tiny_config()).model
    model.load_state_dict(saved["model"])
    loss, _ = evaluate(model, batchify(corpus.valid, 2), bptt=6)
    assert loss <= 2 * math.log(len(corpus.vocab))
    lr = float(re.search(r"--set train\.lr=([\d.e+-]+)", message)[1])
    monkeypatch.undo()
    status = make(run, tiny_config(epochs=4, lr=lr), resume=True).fit()
    assert status.reason == "done" and math.isfinite(read_log(run)[-1]["val_loss"])


def test_a_run_that_diverges_before_any_checkpoint_can_be_started_again(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match="no checkpoint was written yet: start again"):
        make(run, tiny_config(lr=1e5, max_batches_per_epoch=1)).fit()
    assert not run.exists()  # what the advice says works: the same folder, a lower rate
    make(run, tiny_config(lr=5.0, epochs=1)).fit()


# ------------------------------------------------------------------ interrupts
SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from test_train import make, tiny_config
    from drillbook.errors import TrainingInterrupted
    trainer = make({run!r}, tiny_config(epochs=1_000_000))
    print("training", flush=True)
    try:
        trainer.fit()
    except TrainingInterrupted as err:
        print(err, flush=True)
        sys.exit(130)
""")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_saves_the_step_it_stops_at(tmp_path, sig):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT.format(tests=str(ROOT / "tests"),
                                                                 run=str(run))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "training"
    time.sleep(1.5)  # well into training, far from any checkpoint due by time
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    step = int(re.search(r"step (\d+);", out)[1])
    assert f"stopped by {sig.name}" in out and "--resume" in out
    assert load_checkpoint(run / "last.pt")["step"] == step > 0
    assert not list(run.glob(".*.tmp")) and not (run / ".lock").exists()
    make(run, tiny_config(epochs=1_000_000), resume=True).fit(max_steps=step + 2)


def _interrupt_at(trainer, monkeypatch, step: int, times: int) -> None:
    """Send this process SIGINT ``times`` times during the step numbered ``step``."""
    real = trainer.train_step

    def step_and_interrupt(batch):
        if trainer.step == step:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGINT)
        return real(batch)

    monkeypatch.setattr(trainer, "train_step", step_and_interrupt)


@pytest.fixture
def ctrl_c():
    """SIGINT as Python sets it up in a terminal (Ctrl-C raises KeyboardInterrupt), whatever
    this test process inherited: started in the background by a shell, it ignores
    SIGINT."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, inherited)


@pytest.mark.usefixtures("ctrl_c")
def test_one_interrupt_stops_after_the_step_and_saves_it(tmp_path, monkeypatch):
    trainer = make(tmp_path / "run", tiny_config(epochs=1_000_000))
    _interrupt_at(trainer, monkeypatch, step=2, times=1)
    with pytest.raises(TrainingInterrupted, match=r"stopped by SIGINT at epoch \d+, step 3;"):
        trainer.fit()
    assert load_checkpoint(tmp_path / "run" / "last.pt")["step"] == 3
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


@pytest.mark.usefixtures("ctrl_c")
def test_a_second_interrupt_stops_at_once(tmp_path, monkeypatch):
    trainer = make(tmp_path / "run", tiny_config(epochs=1_000_000))
    _interrupt_at(trainer, monkeypatch, step=2, times=2)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert not (tmp_path / "run").exists()  # a new run that saved nothing leaves nothing


# ------------------------------------------------------------------ a full disk
@needs_data
@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs POSIX file-size limits")
def test_a_file_size_limit_keeps_the_last_checkpoint(tmp_path):
    run = tmp_path / "run"
    cli = [sys.executable, "-m", "drillbook.cli", "train", "tutorial/ptb-tied", "--quiet",
           "--out", str(run), "--set", *MICRO]
    subprocess.run(cli, check=True, capture_output=True, timeout=300)
    before = {name: (run / name).read_bytes() for name in ("last.pt", "best.pt")}
    limit = len(before["best.pt"]) // 2

    def small_files():
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    done = subprocess.run([*cli[:-len(MICRO)], *MICRO[:3], "train.epochs=2", *MICRO[4:],
                           "--resume"], capture_output=True, text=True, timeout=300,
                          preexec_fn=small_files)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not write" in lines[0] and "File too large" in lines[0]
    assert {name: (run / name).read_bytes() for name in before} == before
    assert not list(run.glob(".*.tmp")) and not (run / ".lock").exists()
    assert [json.loads(line)["epoch"] for line in (run / "log.jsonl").read_text().splitlines()
            ] == [1]  # the epoch whose checkpoint failed is not logged
