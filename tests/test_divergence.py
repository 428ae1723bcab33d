"""A diverged run offers for resuming only a state whose own loss was sane, and where it
has none, says to start again: real ``drillbook train`` processes, one line each."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import MICRO, needs_data
from test_train import make, tiny_config

from drillbook.errors import TrainingDiverged
from drillbook.train import load_checkpoint

#: the tutorial config made tiny (three steps an epoch), a checkpoint after every step
EVERY_STEP = [*MICRO, "train.checkpoint_steps=1"]
#: a step size no model survives (and no clipping to save it)
EXPLODE = ["train.lr=1e6", "train.clip=0"]


def train(run: Path, *settings: str, resume: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "drillbook.cli", "train", "tutorial/ptb-tied", "--quiet",
         "--out", str(run), *(["--resume"] if resume else []), "--set", *EVERY_STEP,
         *settings],
        capture_output=True, text=True, timeout=300, env={**os.environ, "TQDM_DISABLE": "1"})


def one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip()


@needs_data
def test_the_state_saved_after_the_exploding_update_is_not_offered(tmp_path):
    """Epoch 1 trains sanely; the first update of epoch 2 explodes (finite weights, a
    huge loss at the next step). The checkpoint taken after that update is never written:
    the message offers epoch 1's state, which resumes and trains at a sane rate."""
    run = tmp_path / "run"
    assert train(run, "train.epochs=1").returncode == 0
    line = one_line(train(run, "train.epochs=2", *EXPLODE, resume=True))
    assert re.search(r"training diverged: the loss became \S+ at epoch 2, step 4 ", line)
    assert "last.pt holds the last sane state (step 3)" in line
    assert "--resume --set train.lr=500000" in line
    assert load_checkpoint(run / "last.pt")["step"] == 3
    resumed = train(run, "train.epochs=2", resume=True)  # the config's own rate and clip
    assert resumed.returncode == 0, resumed.stderr
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2]
    assert log[-1]["val_loss"] <= 2 * math.log(10_000)  # below twice a uniform guess's


@needs_data
def test_a_run_with_no_sane_state_says_to_start_again_and_leaves_nothing(tmp_path):
    """The first update explodes: the state after it is the first checkpoint due, and
    its own loss is the next step's, huge. Nothing is offered; the advice works."""
    run = tmp_path / "run"
    line = one_line(train(run, "train.epochs=1", *EXPLODE))
    assert re.search(r"the loss became \S+ at epoch 1, step 1 ", line)
    assert "no checkpoint was written yet: start again with --set train.lr=500000" in line
    assert not run.exists()  # the same folder can be used again
    assert train(run, "train.epochs=1").returncode == 0


def test_a_resumed_state_whose_own_loss_diverges_is_not_offered_again(tmp_path):
    """A limit's checkpoint is written whatever the next step would do: stopped right
    after an exploding update, the run saves that state. Resumed, its first loss
    diverges: the message says that ``last.pt`` is the state that diverged, and to start
    again (into a new folder)."""
    run = tmp_path / "run"
    config = tiny_config(epochs=1, lr=1e6, clip=0)
    make(run, config).fit(max_steps=1)
    assert load_checkpoint(run / "last.pt")["step"] == 1
    with pytest.raises(TrainingDiverged) as exc:
        make(run, tiny_config(epochs=1, lr=1.0, clip=0), resume=True).fit()
    message = str(exc.value)
    assert "at epoch 1, step 1 " in message
    assert "last.pt (step 1) is the state that diverged and no earlier one was kept" in message
    assert "start the run again with --set train.lr=0.5" in message
    assert "into a new --out folder" in message and "--resume" not in message
