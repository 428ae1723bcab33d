"""Faults a long training run meets: divergence, kills, a second trainer, a full disk,
corrupt or swapped files, configs that would train garbage. Each ends in one line that
names the problem and the fix (a drillbook.errors type), and nothing already saved is
lost."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_train import log, make, tiny_config, tiny_corpus

from drillbook.configs import (
    Config,
    ConfigError,
    HeadConfig,
    NMTConfig,
    apply_overrides,
    get_config,
    get_nmt_config,
)
from drillbook.data import batchify
from drillbook.errors import CheckpointError, RunFolderError, TrainingDiverged
from drillbook.train import (
    MAX_LOSS,
    RunStatus,
    evaluate,
    load_checkpoint,
    load_run,
    perplexity,
    read_log,
    save_atomic,
)
from drillbook.train import checkpoint as checkpoint_module
from drillbook.train.optimizers import apply_learning_rate
from drillbook.train.run_folder import RunLock


def drill_config(**train) -> Config:
    cfg = tiny_config(**train)
    cfg.head = HeadConfig("drill", {"depth": 1, "activation": "relu"})
    return cfg


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text
    return text


# ------------------------------------------------------------------ label cache
def test_evaluating_after_averaged_training_uses_no_stale_label_cache(tmp_path):
    """NT-ASGD validates with the averaged weights swapped in; the DRILL head's cached
    g_out(E) must follow both swaps, or evaluating the model afterwards scores with
    the averaged labels but the raw context."""
    trainer = make(tmp_path / "run", drill_config(epochs=1), stage="finetune")  # averaged
    trainer.fit()
    assert trainer.averaging
    data = batchify(tiny_corpus().valid, 2)
    first = evaluate(trainer.model, data, 6)[0]
    trainer.model.head.clear_cache()
    assert evaluate(trainer.model, data, 6)[0] == first


# ------------------------------------------------------------------ divergence
def test_perplexity_never_overflows():
    assert perplexity(math.log(30.0)) == pytest.approx(30.0, rel=1e-12)
    assert perplexity(1000.0) == math.inf
    assert math.isnan(perplexity(math.nan))
    assert RunStatus("done", 1, 1000.0).best_val_ppl == math.inf
    assert RunStatus("epochs", 0, math.inf).best_val_ppl == math.inf


def test_a_non_finite_update_is_never_saved(tmp_path, monkeypatch):
    """The loss is still finite, but step 3 leaves an inf weight: the run stops before
    the step-3 checkpoint, and last.pt keeps the finite state of step 2."""
    trainer = make(tmp_path / "run", tiny_config(checkpoint_steps=1))
    step = trainer.optimizer.step

    def poisoned_step(*args, **kwargs):
        out = step(*args, **kwargs)
        if trainer.step == 2:  # the third update
            with torch.no_grad():
                trainer.model.encoder.embedding.weight[0, 0] = math.inf
        return out

    monkeypatch.setattr(trainer.optimizer, "step", poisoned_step)
    with pytest.raises(TrainingDiverged, match=r"encoder\.embedding\.weight.* non-finite at "
                                               r"epoch 1, step 2.*last\.pt.*\(step 2\)") as exc:
        trainer.fit()
    one_line(exc.value)
    state = load_checkpoint(tmp_path / "run" / "last.pt")
    assert state["step"] == 2
    assert all(torch.isfinite(v).all() for v in state["model"].values())


def test_a_huge_finite_loss_is_divergence(tmp_path, monkeypatch):
    trainer = make(tmp_path / "run")
    head_loss = trainer.model.head.loss
    monkeypatch.setattr(trainer.model.head, "loss",
                        lambda *a, **k: head_loss(*a, **k) + 2 * MAX_LOSS)
    with pytest.raises(TrainingDiverged, match=r"loss became 14\d\d\.\d+ at epoch 1, step 0"
                                               r".*no checkpoint was written yet"):
        trainer.fit()


def test_a_lower_learning_rate_on_resume_reaches_averaged_sgd_at_once():
    """ASGD keeps its step size per parameter (``eta``, the last step's lr): it must
    follow the new lr from the very next step. Hand computation: p - eta * grad."""
    p = torch.nn.Parameter(torch.tensor([1.0]))
    opt = torch.optim.ASGD([p], lr=0.5, t0=0, lambd=0.0)
    p.grad = torch.tensor([1.0])
    opt.step()  # p = 1 - 0.5
    apply_learning_rate(opt, 0.125)
    opt.step()
    assert p.item() == 0.5 - 0.125
    assert opt.param_groups[0]["lr"] == 0.125


def test_translation_divergence_is_the_same_error_and_the_same_resume(tmp_path, monkeypatch):
    from test_nmt import small
    from test_nmt import tiny_corpus as tiny_parallel

    from drillbook.train import NMTTrainer

    run, corpus = tmp_path / "run", tiny_parallel()
    config = small("multi30k/de-en-softmax", "train.checkpoint_steps=1")
    trainer = NMTTrainer(config, run, device="cpu", corpus=corpus, progress=False)
    loss = trainer._loss
    monkeypatch.setattr(trainer, "_loss",
                        lambda batch: loss(batch) * (math.nan if trainer.step == 2 else 1))
    # the state saved after two steps is the one whose own loss (step 2's) was nan
    with pytest.raises(TrainingDiverged, match=r"loss became nan at epoch 1, step 2.*"
                                               r"\(step 1\).*--set train\.lr=0\.0005"):
        trainer.fit()
    resumed = NMTTrainer(apply_overrides(config, ["train.lr=0.0005"]), run, device="cpu",
                         corpus=corpus, resume=True, progress=False)
    assert resumed.step == 1 and resumed.optimizer.param_groups[0]["lr"] == 0.0005
    assert resumed.fit(max_epochs=1).record["lr"] == 0.0005


# ------------------------------------------------------------------ the lock
def test_a_second_trainer_on_the_same_folder_fails_at_once(tmp_path):
    run = tmp_path / "run"
    first = make(run)
    with pytest.raises(RunFolderError, match=rf"{re.escape(str(run))} is in use by another "
                                             r"trainer in this process"):
        make(run)
    assert not (run / "last.pt").exists()
    first.fit(max_steps=1)  # fit gives the lock up when it returns
    make(run, resume=True).close()


HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, f"{os.getpid()}\\n".encode())
print("locked", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_another_process_holding_the_folder_is_named_and_its_death_frees_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run / ".lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunFolderError, match=rf"another training process \(pid "
                                                 rf"{holder.pid}\)") as exc:
            make(run)
        one_line(exc.value)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    make(run).close()  # the lock file is still there, but nobody holds it


def test_the_translation_trainer_takes_the_same_lock(tmp_path):
    from drillbook.train import NMTTrainer

    lock = RunLock(tmp_path / "run")
    lock.acquire()
    with pytest.raises(RunFolderError, match="in use"):
        NMTTrainer(get_nmt_config("multi30k/de-en-softmax"), tmp_path / "run", device="cpu")
    lock.release()


# ------------------------------------------------------------------ configs
@pytest.mark.parametrize(("override", "message"), [
    ("train.clip=-1", r"invalid train\.clip=-1\.0: it must be 0 \(no clipping\) or"),
    ("train.optimizer=adamw", r"invalid train\.optimizer='adamw': it must be one of 'sgd', "
                              r"'adam'"),
    ("head.kind=vmf", r"head\.kind='vmf': .*cannot end a language model.*use one of .*drill"),
    ("train.nonmono=0", r"invalid train\.nonmono=0: it must be an integer >= 1"),
    ("train.max_batches_per_epoch=0", r"invalid train\.max_batches_per_epoch=0: it must be "
                                      r"null \(no cap\) or an integer >= 1"),
    ("train.epochs=0", r"invalid train\.epochs=0: .*0 would train nothing"),
    ("train.lr=0", r"invalid train\.lr=0\.0: it must be a finite number > 0"),
    ("train.bptt=0", r"invalid train\.bptt=0"),
    ("model.dropouth=1", r"invalid model\.dropouth=1\.0: it must be a dropout probability"),
])
def test_configs_that_would_train_garbage_are_refused_when_built(override, message):
    with pytest.raises(ConfigError, match=message) as exc:
        apply_overrides(get_config("tutorial/ptb-drill"), [override])
    one_line(exc.value)


def test_every_named_config_is_valid_and_from_dict_validates():
    from drillbook.configs import list_configs, list_nmt_configs

    for name in list_configs():
        get_config(name).validate()
    for name in list_nmt_configs():
        get_nmt_config(name).validate()
    d = get_config("ptb/awd-lstm").to_dict()
    d["train"]["clip"] = -0.5
    with pytest.raises(ConfigError, match=r"train\.clip=-0\.5"):
        Config.from_dict(d)
    with pytest.raises(ConfigError, match=r"train\.lr must be a finite number, got 'fast'"):
        Config.from_dict({**d, "train": {"lr": "fast"}})


@pytest.mark.parametrize(("override", "message"), [
    ("train.clip=-1", r"train\.clip=-1\.0"),
    ("train.negative_sampling=0", r"train\.negative_sampling=0\.0: .*\(0, 100\]"),
    ("data.target_embeddings=null", r"vmf head needs target word vectors"),
    ("data.target_embeddings=fasttext", r"data\.target_embeddings='fasttext'"),
    ("head.kind=mystery", r"unknown head kind 'mystery'"),
])
def test_translation_configs_are_validated_too(override, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(get_nmt_config("multi30k/de-en-vmf"), [override])


def test_an_invalid_config_handed_to_the_trainer_writes_nothing(tmp_path):
    cfg = tiny_config()
    cfg.train.clip = -1.0  # built by hand, never validated
    with pytest.raises(ConfigError, match=r"train\.clip=-1\.0"):
        make(tmp_path / "run", cfg)
    assert not (tmp_path / "run").exists()


def test_an_nmt_config_from_a_dict_is_validated():
    d = get_nmt_config("multi30k/de-en-softmax").to_dict()
    d["model"]["dropout"] = 1.5
    with pytest.raises(ConfigError, match=r"model\.dropout=1\.5"):
        NMTConfig.from_dict(d)


# ------------------------------------------------------------------ logs and kills
class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (the trainer object is dropped)."""


def test_a_kill_between_an_epochs_record_and_its_checkpoint_logs_no_epoch_twice(
        tmp_path, monkeypatch):
    cfg = tiny_config(checkpoint_steps=2)
    ref = make(tmp_path / "ref", cfg)
    ref.fit()
    run = tmp_path / "run"
    trainer = make(run, cfg)
    save = trainer.save

    def save_or_die():
        if trainer.epoch == 2:  # the checkpoint after epoch 1's record: killed first
            raise Killed
        return save()

    monkeypatch.setattr(trainer, "save", save_or_die)
    with pytest.raises(Killed):
        trainer.fit()
    assert [r["epoch"] for r in log(run)] == [1]
    assert load_checkpoint(run / "last.pt")["epoch"] == 1  # a mid-epoch-1 checkpoint
    stale = run / f".last.pt.{2**22 + 7}.tmp"  # what a writer killed mid-save leaves
    stale.write_bytes(b"\0" * 1000)
    resumed = make(run, cfg, resume=True)
    assert not stale.exists()
    resumed.fit()
    records = log(run)
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert [r["val_loss"] for r in records] == [r["val_loss"] for r in log(tmp_path / "ref")]


def test_read_log_names_a_corrupt_line(tmp_path):
    (tmp_path / "log.jsonl").write_text('{"epoch": 1}\n{"epoch": 2, "val\n')
    with pytest.raises(RunFolderError, match=r"log\.jsonl line 2 is not a JSON record"):
        read_log(tmp_path)


# ------------------------------------------------------------------ checkpoints
@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    make(run, tiny_config(epochs=1)).fit()
    return run


def copy_run(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for name in ("config.json", "log.jsonl", "last.pt", "best.pt"):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


def stamp(path: Path) -> tuple:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, path.read_bytes()


def test_best_pt_copied_over_last_pt_is_refused_by_kind(trained, tmp_path):
    run = copy_run(trained, tmp_path / "run")
    (run / "last.pt").write_bytes((run / "best.pt").read_bytes())
    before = stamp(run / "config.json")
    with pytest.raises(CheckpointError, match=r"last\.pt is a weights-only language-model "
                                              r"file \(best\.pt\), not a resumable") as exc:
        make(run, tiny_config(epochs=2), resume=True)
    one_line(exc.value)
    assert stamp(run / "config.json") == before  # nothing written before the checks


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda b: os.urandom(len(b)), "not a PyTorch zip archive"),
    (lambda b: b[: len(b) // 2], "incomplete zip archive"),
    (lambda b: b"", "empty file"),
])
def test_a_corrupt_checkpoint_is_one_line_without_torch_advice(trained, tmp_path, damage,
                                                               reason):
    run = copy_run(trained, tmp_path / "run")
    (run / "last.pt").write_bytes(damage((run / "last.pt").read_bytes()))
    with pytest.raises(CheckpointError) as exc:
        make(run, tiny_config(epochs=2), resume=True)
    text = one_line(exc.value)
    assert text.startswith(f"{run / 'last.pt'} is not a readable drillbook checkpoint "
                           f"(corrupt or truncated: {reason}")
    assert "weights_only" not in text and "into a new --out folder" in text  # not: delete it
    with pytest.raises(CheckpointError, match="not a readable"):
        load_run(run, which="last", corpus=tiny_corpus(), device="cpu")


def test_a_full_disk_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    target = save_atomic({"step": 1}, tmp_path / "last.pt")

    def no_space(obj, f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module.torch, "save", no_space)
    with pytest.raises(CheckpointError, match=r"could not write .*last\.pt: no space left "
                                              r".*the previous last\.pt is kept") as exc:
        save_atomic({"step": 2}, target)
    one_line(exc.value)
    monkeypatch.undo()
    assert torch.load(target, weights_only=True) == {"step": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no temporary file


def test_a_full_disk_during_training_stops_cleanly_and_resumes(tmp_path, monkeypatch):
    run = tmp_path / "run"
    trainer = make(run, tiny_config(checkpoint_steps=2))
    real_save = checkpoint_module.torch.save

    def fills_up(obj, f):
        if obj.get("step", 0) >= 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f)

    monkeypatch.setattr(checkpoint_module.torch, "save", fills_up)
    with pytest.raises(CheckpointError, match="no space left"):
        trainer.fit()
    monkeypatch.undo()
    assert load_checkpoint(run / "last.pt")["step"] == 2
    make(run, tiny_config(checkpoint_steps=2), resume=True).fit(max_steps=5)  # lock freed


# ------------------------------------------------------------------ config.json
@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"name": "x", "train": {"clip": -1}}'])
def test_a_garbage_config_json_is_named(trained, tmp_path, text):
    run = copy_run(trained, tmp_path / "run")
    (run / "config.json").write_text(text)
    with pytest.raises(RunFolderError, match=rf"{re.escape(str(run / 'config.json'))} "):
        make(run, tiny_config(epochs=2), resume=True)
    with pytest.raises(RunFolderError, match=re.escape(str(run / "config.json"))) as exc:
        load_run(run, corpus=tiny_corpus(), device="cpu")
    one_line(exc.value)


def test_config_json_is_rewritten_only_when_a_resumable_value_changes(trained, tmp_path):
    run = copy_run(trained, tmp_path / "run")
    before = stamp(run / "config.json")
    with pytest.raises(ConfigError, match=r"train\.epochs=0"):
        make(run, tiny_config(epochs=0), resume=True)
    assert stamp(run / "config.json") == before
    make(run, tiny_config(epochs=1), resume=True).close()  # the same config
    assert stamp(run / "config.json") == before
    make(run, tiny_config(epochs=2), resume=True).close()
    assert json.loads((run / "config.json").read_text())["train"]["epochs"] == 2
