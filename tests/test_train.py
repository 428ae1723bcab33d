"""The trainer: exact resume (also after SIGKILL), NT-ASGD, divergence, run folders."""

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
import torch

from drillbook.configs import (
    Config,
    DataConfig,
    HeadConfig,
    ModelConfig,
    TrainConfig,
    apply_overrides,
)
from drillbook.data import batchify, load_corpus_from_files
from drillbook.errors import MissingFileError, RunFolderError, RunFolderExistsError
from drillbook.train import (
    LanguageModelTrainer,
    TrainingDiverged,
    evaluate,
    finetune,
    has_checkpoint,
    load_checkpoint,
    load_run,
    read_log,
)

TINY = Path(__file__).parent / "data" / "tiny"


def tiny_corpus():
    return load_corpus_from_files({s: TINY / f"{s}.txt" for s in ("train", "valid", "test")},
                                  name="tiny")


def tiny_config(**train) -> Config:
    return Config(
        name="test/tiny",
        data=DataConfig("tiny"),
        model=ModelConfig(emsize=12, nhid=16, nlayers=2, dropout=0.3, dropouth=0.2,
                          dropouti=0.3, dropoute=0.1, wdrop=0.3),
        head=HeadConfig("tied"),
        train=TrainConfig(**{**dict(batch_size=4, eval_batch_size=2, test_batch_size=2, bptt=6,
                                    lr=5.0, epochs=3, nonmono=1, checkpoint_minutes=1e6,
                                    seed=3), **train}),
    )


def make(run_dir, config=None, **kw) -> LanguageModelTrainer:
    return LanguageModelTrainer(config or tiny_config(), run_dir, device="cpu",
                                corpus=tiny_corpus(), progress=False, **kw)


def weights(trainer: LanguageModelTrainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def log(run_dir: Path) -> list[dict]:
    return read_log(run_dir)


def assert_same_run(a: Path, b: Path, wa: dict, wb: dict) -> None:
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k  # bit-identical, not merely close
    la, lb = log(a), log(b)
    assert [r["val_loss"] for r in la] == [r["val_loss"] for r in lb]
    assert [r["train_loss"] for r in la] == [r["train_loss"] for r in lb]


def test_resume_mid_epoch_is_bit_identical(tmp_path):
    ref = make(tmp_path / "ref")
    ref.fit()
    split = make(tmp_path / "split")
    assert not has_checkpoint(tmp_path / "split")  # an open folder is not yet resumable
    status = split.fit(max_steps=5)  # stops mid-epoch 1 with a checkpoint
    assert status.reason == "steps" and split.step == 5
    del split
    resumed = make(tmp_path / "split", resume=has_checkpoint(tmp_path / "split"))
    assert resumed.step == 5
    assert resumed.fit().reason == "done"
    assert_same_run(tmp_path / "ref", tmp_path / "split", weights(ref), weights(resumed))


def test_resume_at_an_epoch_boundary_and_after_asgd_switch(tmp_path):
    cfg = tiny_config()
    ref = make(tmp_path / "ref", cfg)
    ref.fit()
    first = make(tmp_path / "split", cfg)
    first.fit(max_epochs=2)
    resumed = make(tmp_path / "split", cfg, resume=True)
    resumed.fit()
    assert_same_run(tmp_path / "ref", tmp_path / "split", weights(ref), weights(resumed))


CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_train import make, tiny_config
    from drillbook.train import LanguageModelTrainer
    step = LanguageModelTrainer.train_step
    def slow_step(self, batch):
        time.sleep(0.15)
        return step(self, batch)
    LanguageModelTrainer.train_step = slow_step
    make({run!r}, tiny_config(checkpoint_steps=1)).fit()
""")


def test_killed_run_resumes_bit_identical(tmp_path):
    """SIGKILL a real training process, resume from what it left, compare."""
    ref = make(tmp_path / "ref", tiny_config(checkpoint_steps=1))
    ref.fit()
    run = tmp_path / "killed"
    code = CHILD.format(tests=str(Path(__file__).parent), run=str(run))
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "TQDM_DISABLE": "1"})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ckpt = run / "last.pt"
            if ckpt.exists() and load_checkpoint(ckpt)["step"] >= 9:  # into epoch 2
                break
            assert proc.poll() is None, "the child finished before it could be killed"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert not list(run.glob(".*.tmp"))  # no half-written checkpoint was left in place
    resumed = make(run, tiny_config(checkpoint_steps=1), resume=True)
    assert 9 <= resumed.step < ref.step
    resumed.fit()
    assert_same_run(tmp_path / "ref", run, weights(ref), weights(resumed))


def test_nt_asgd_switches_when_validation_stalls_and_best_holds_averages(tmp_path, monkeypatch):
    trainer = make(tmp_path / "run", tiny_config(epochs=4, nonmono=1))
    # AWD-LSTM's rule: switch when the loss is worse than the best of the epochs before
    # the last `nonmono` (here: epoch 3's 5.5 > min(5.0)); epoch 2 has too few before it
    losses = iter([5.0, 4.0, 5.5, 4.2])
    monkeypatch.setattr(trainer, "_validate", lambda: next(losses))
    trainer.fit()
    records = log(tmp_path / "run")
    assert [r["optimizer"] for r in records] == ["sgd", "sgd", "asgd", "asgd"]
    assert [r["switched_to_asgd"] for r in records] == [False, False, True, False]
    assert isinstance(trainer.optimizer, torch.optim.ASGD)
    best = load_checkpoint(tmp_path / "run" / "best.pt")
    assert best["epoch"] == 2 and best["val_loss"] == 4.0


def test_best_weights_are_the_averaged_ones_after_the_switch(tmp_path, monkeypatch):
    trainer = make(tmp_path / "run", tiny_config(epochs=4, nonmono=1))
    losses = iter([5.0, 4.0, 5.5, 3.0])
    monkeypatch.setattr(trainer, "_validate", lambda: next(losses))
    trainer.fit()
    best = load_checkpoint(tmp_path / "run" / "best.pt")["model"]
    for name, p in trainer.model.named_parameters():
        ax = trainer.optimizer.state[p]["ax"]
        assert torch.equal(best[name], ax), name
    assert any(not torch.equal(best[n], p) for n, p in trainer.model.named_parameters())


def test_divergence_keeps_the_checkpoint_and_its_advice_resumes(tmp_path, monkeypatch):
    trainer = make(tmp_path / "run", tiny_config(checkpoint_steps=2))
    head_loss = trainer.model.head.loss
    calls = {"n": 0}

    def sometimes_nan(*args, **kwargs):
        calls["n"] += 1
        loss = head_loss(*args, **kwargs)
        return loss * float("nan") if calls["n"] == 4 else loss

    monkeypatch.setattr(trainer.model.head, "loss", sometimes_nan)
    with pytest.raises(TrainingDiverged, match=r"loss became nan at epoch 1, step 3.*last.pt"
                       ) as exc:
        trainer.fit()
    assert load_checkpoint(tmp_path / "run" / "last.pt")["step"] == 2
    # the advice, followed literally, continues the run from last.pt at the lower lr
    assert "\n" not in str(exc.value)
    advice = re.search(r"--resume --set (\S+)", str(exc.value)).group(1)
    assert advice == "train.lr=2.5"  # half of tiny_config's 5.0
    config = apply_overrides(tiny_config(checkpoint_steps=2), [advice])
    resumed = make(tmp_path / "run", config, resume=True)
    assert resumed.step == 2
    assert {g["lr"] for g in resumed.optimizer.param_groups} == {2.5}
    assert resumed.fit().reason == "done"
    assert {r["lr"] for r in log(tmp_path / "run")} == {2.5}
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["lr"] == 2.5
    changes = load_checkpoint(tmp_path / "run" / "last.pt")["changes"]
    assert changes == [{"epoch": 1, "step": 2, "changes": {"train.lr": [5.0, 2.5]}}]


def test_run_folders_are_not_overwritten_or_resumed_with_another_config(tmp_path):
    make(tmp_path / "run").fit(max_steps=1)
    with pytest.raises(RunFolderExistsError, match="--resume"):
        make(tmp_path / "run")
    with pytest.raises(RunFolderError, match=r"different config \(train\.bptt: 6 -> 7\)"):
        make(tmp_path / "run", tiny_config(bptt=7), resume=True)
    make(tmp_path / "run", tiny_config(epochs=5), resume=True).close()  # longer is fine
    with pytest.raises(MissingFileError, match="without --resume"):
        make(tmp_path / "empty", resume=True)


def test_evaluate_matches_a_manual_loop():
    cfg = tiny_config()
    corpus = tiny_corpus()
    from drillbook.models import build_model

    torch.manual_seed(0)
    model = build_model(cfg, len(corpus.vocab)).eval()
    data = batchify(corpus.valid, 2)
    loss, n = evaluate(model, data, bptt=5)
    with torch.no_grad():
        out = model(data[:-1])
        logp = model.head.log_prob(out.features)
        expected = -logp.gather(-1, data[1:].unsqueeze(-1)).mean()
    assert n == data[1:].numel()
    assert loss == pytest.approx(float(expected), rel=1e-5)


def test_log_and_load_run(tmp_path):
    trainer = make(tmp_path / "run")
    status = trainer.fit()
    records = log(tmp_path / "run")
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert status.best_val_loss == min(r["val_loss"] for r in records)
    config, model, _ = load_run(tmp_path / "run", corpus=tiny_corpus(), device="cpu")
    assert config.hash() == tiny_config().hash()
    data = batchify(tiny_corpus().valid, 2)
    assert math.isclose(evaluate(model, data, 6)[0], status.best_val_loss, rel_tol=1e-6)


def test_finetune_starts_averaged_and_stops_at_the_trigger(tmp_path, monkeypatch):
    make(tmp_path / "run").fit()
    losses = iter([4.0, 3.9, 4.1, 3.0, 2.0])  # epoch 3: 4.1 > min(4.0) with nonmono 1
    monkeypatch.setattr(LanguageModelTrainer, "_validate", lambda self: next(losses))
    status, out = finetune(tmp_path / "run", corpus=tiny_corpus(), device="cpu", progress=False)
    assert status.reason == "converged" and status.epoch == 3
    records = log(out)
    assert {r["stage"] for r in records} == {"finetune"}
    assert {r["optimizer"] for r in records} == {"asgd"}


def test_finetune_starts_from_the_loaded_model_and_never_saves_a_worse_one(tmp_path,
                                                                          monkeypatch):
    """As AWD-LSTM's finetune.py: the loaded model's validation loss is the one to beat."""
    loss0 = make(tmp_path / "run").fit().best_val_loss
    loaded = load_checkpoint(tmp_path / "run" / "best.pt", "cpu")["model"]
    for name, deltas, best_epoch in [("worse", (0.5, 0.2, 0.9), 0),
                                     ("better", (0.5, -0.25, 0.9), 2)]:
        values = iter([loss0 + d for d in deltas])  # epoch 3 triggers (nonmono 1)
        monkeypatch.setattr(LanguageModelTrainer, "_validate", lambda self, v=values: next(v))
        status, out = finetune(tmp_path / "run", out=tmp_path / name, corpus=tiny_corpus(),
                               device="cpu", progress=False)
        assert status.reason == "converged" and status.epoch == 3
        best = load_checkpoint(out / "best.pt", "cpu")
        assert best["epoch"] == best_epoch
        expected = loss0 + min(0.0, *deltas)
        assert math.isclose(status.best_val_loss, expected, rel_tol=1e-6)
        assert math.isclose(best["val_loss"], expected, rel_tol=1e-6)
        same = all(torch.equal(best["model"][k], v) for k, v in loaded.items())
        assert same == (name == "worse")  # the loaded weights, until a better epoch
        assert log(out)[0]["best_val_ppl"] == pytest.approx(math.exp(loss0), rel=1e-6)


def test_finetune_learning_rate_is_settable_recorded_and_kept_on_resume(tmp_path,
                                                                        monkeypatch):
    from drillbook.cli import main
    from drillbook.configs import ConfigError
    from drillbook.train.tasks.language_model import finetune_trainer

    make(tmp_path / "run").fit()
    run = tmp_path / "run"
    finetune(run, corpus=tiny_corpus(), device="cpu", progress=False, lr=2.5, max_epochs=1)
    saved = json.loads((run / "finetune" / "config.json").read_text())
    assert saved["train"]["lr"] == 2.5 and [r["lr"] for r in log(run / "finetune")] == [2.5]
    resumed = finetune_trainer(run, corpus=tiny_corpus(), device="cpu", progress=False,
                               resume=True)  # no lr given: the one it began with
    assert resumed.config.train.lr == 2.5 == resumed.optimizer.param_groups[0]["lr"]
    resumed.close()
    changed = finetune_trainer(run, corpus=tiny_corpus(), device="cpu", progress=False,
                               resume=True, lr=3.0)  # a resumable change, as for training
    assert changed.config.train.lr == 3.0 == changed.optimizer.param_groups[0]["lr"]
    changed.close()
    with pytest.raises(ConfigError, match=r"train\.lr"):
        finetune(run, out=tmp_path / "x", corpus=tiny_corpus(), device="cpu", lr=0.0)
    monkeypatch.setattr("drillbook.train.lm.load_corpus", lambda name, **kw: tiny_corpus())
    assert main(["finetune", str(run), "--out", str(tmp_path / "cli"), "--lr", "4",
                 "--max-epochs", "1", "--device", "cpu", "--quiet"]) == 0
    assert json.loads((tmp_path / "cli" / "config.json").read_text())["train"]["lr"] == 4.0
    assert json.loads((run / "config.json").read_text())["train"]["lr"] == 5.0  # untouched
