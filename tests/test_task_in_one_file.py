"""A new task is one record and one registration.

The task below is written from scratch in this file: copying random integer sequences
(the model reads a sequence and predicts each position's own word back). It declares its
config class, its trainer (the model built in the trainer's ``build``: an embedding and a
registered head), its data (made in memory), its evaluation and metric (word accuracy,
higher is better), its sizing and step-cost probe for the planner, its analyses, its
learning curve and its fingerprint's tiny run. Registered with one call
(``register_task(COPY)``), it is then taken without an edit anywhere else by ``drillbook
train``, ``drillbook eval``, a one-row ``reproduce`` with its result file, ``drillbook
report`` and the planner's dry run (``reproduce ... --dry-run``). Its module stands in for
a package of ``drillbook/train/tasks/``; the fixture unregisters it after each test.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import pytest
import torch
from torch import Tensor, nn

from drillbook.cli import main
from drillbook.configs import (
    ConfigError,
    HeadConfig,
    LoopConfig,
    SectionedConfig,
    config_classes,
    get_config,
    list_configs,
)
from drillbook.configs.base import LOOP_RULES
from drillbook.experiments import TABLES, Row, Table, render_report, reproduce, validate_result
from drillbook.heads import build_head
from drillbook.train import TASKS, load_run, read_log, register_task, unregister_task
from drillbook.train.checkpoint import FORMATS, load_checkpoint, load_weights
from drillbook.train.loop import TrainingLoop
from drillbook.train.optimizers import make_optimizer
from drillbook.train.run_files import CONFIG, LoadedRun, checkpoint_path
from drillbook.train.step import StepLoss
from drillbook.train.tasks import EPOCH_KEYS, TIME_KEYS, Sizing, StepProbe, Task, TinyRun

pytestmark = pytest.mark.usefixtures("one_thread")

CHECKPOINT, WEIGHTS = "copy-checkpoint/1", "copy-weights/1"


# ------------------------------------------------------------------ the config
@dataclass
class CopyData:
    vocab: int = 12  #: words 0..vocab-1
    length: int = 5  #: words per sequence
    sequences: int = 64  #: training sequences (validation and test: a quarter each)
    seed: int = 0  #: the data's own generator


@dataclass
class CopyModelSection:
    d: int = 8  #: the embedding's size


@dataclass
class CopyTrain(LoopConfig):
    seed: int = 0
    batch_size: int = 16
    lr: float = 0.5
    clip: float = 1.0
    epochs: int = 3


@dataclass
class CopyConfig(SectionedConfig):
    """Copy random sequences of ``data.vocab`` words."""

    name: str
    description: str = ""
    data: CopyData = field(default_factory=CopyData)
    model: CopyModelSection = field(default_factory=CopyModelSection)
    head: HeadConfig = field(default_factory=lambda: HeadConfig("softmax"))
    train: CopyTrain = field(default_factory=CopyTrain)
    paper: str | None = None

    task: ClassVar[str] = "copy"
    RULES: ClassVar[Mapping] = {f"train.{k}": rule for k, rule in LOOP_RULES.items()}


# ------------------------------------------------------------------ data and model
class CopySplits(NamedTuple):
    """``(sequences, length)`` word ids of each split."""

    train: Tensor
    valid: Tensor
    test: Tensor

    def split(self, name: str) -> Tensor:
        return getattr(self, name)


def load_copy(config: CopyConfig) -> CopySplits:
    d = config.data
    gen = torch.Generator().manual_seed(d.seed)
    sizes = (d.sequences, max(1, d.sequences // 4), max(1, d.sequences // 4))
    return CopySplits(*(torch.randint(0, d.vocab, (n, d.length), generator=gen)
                        for n in sizes))


class CopyNet(nn.Module):
    """An embedding of each word, scored by a registered head."""

    def __init__(self, config: CopyConfig) -> None:
        super().__init__()
        vocab, d = config.data.vocab, config.model.d
        self.embedding = nn.Embedding(vocab, d)
        self.head = build_head(config.head.kind, vocab_size=vocab, d_hidden=d,
                               embedding=self.embedding, **config.head.options)

    def forward(self, x: Tensor) -> Tensor:
        return self.embedding(x)

    def loss(self, x: Tensor) -> Tensor:
        return self.head.loss(self(x), x)


@torch.no_grad()
def measure(model: CopyNet, sequences: Tensor) -> dict[str, float]:
    """Mean loss per word and word accuracy (%) of copying ``sequences``."""
    model.eval()
    x = sequences.T.to(next(model.parameters()).device)  # (length, sequences)
    features = model(x)
    guess = model.head.log_prob(features).argmax(-1)
    out = {"loss": float(model.head.loss(features, x)),
           "accuracy": 100.0 * float((guess == x).float().mean()),
           "sequences": int(sequences.shape[0])}
    model.train()
    return out


# ------------------------------------------------------------------ the trainer
class CopyTrainer(TrainingLoop):
    """SGD on batches of sequences; ``best.pt``: the best validation accuracy."""

    checkpoint_format = CHECKPOINT
    config_type = CopyConfig
    token_weighted = True
    plateau_metric, higher_is_better = "val_accuracy", True
    metric_line = "val accuracy {val_accuracy:.1f}%"

    def __init__(self, config: CopyConfig, run_dir, *, device=None, corpus=None,
                 resume: bool = False, progress: bool | None = None) -> None:
        self._given = corpus
        super().__init__(config, run_dir, device=device, resume=resume, progress=progress)

    def build(self, state: dict | None) -> None:
        self.corpus = self._given if self._given is not None else load_copy(self.config)
        self.model = CopyNet(self.config).to(self.device)
        self.optimizer = make_optimizer("sgd", self.model.parameters(), self.config.train.lr,
                                        0.0)
        self.position, self.best_accuracy = 0, -math.inf

    def _epoch(self) -> list[Tensor]:
        return list(self.corpus.train.split(self.config.train.batch_size))

    def batches(self) -> Iterator[Tensor]:
        for batch in self._epoch()[self.position:]:
            self.position += 1
            yield batch.T.to(self.device)

    def epoch_progress(self) -> tuple[int, int]:
        return len(self._epoch()), self.position

    def next_epoch(self) -> None:
        self.position = 0

    def tokens(self, batch: Tensor) -> int:
        return batch.numel()

    def split(self, batch: Tensor, parts: int) -> list[Tensor]:
        return list(batch.tensor_split(parts, dim=1))

    def loss(self, piece: Tensor, part: int) -> StepLoss:
        loss = self.forward_model.loss(piece)
        return StepLoss(loss, loss)

    def end_epoch(self, seconds: float) -> dict[str, Any]:
        valid = measure(self.model, self.corpus.valid)
        if valid["accuracy"] > self.best_accuracy:
            self.best_accuracy = valid["accuracy"]
            self.folder.save_best({"format": WEIGHTS, "model": self.model.state_dict(),
                                   "epoch": self.epoch})
            self.events.append("saved best")
        return {"epoch": self.epoch, "step": self.step,
                "train_loss": self.epoch_loss / max(self.epoch_tokens, 1),
                "val_loss": valid["loss"], "val_accuracy": valid["accuracy"],
                "epoch_seconds": seconds, "elapsed_seconds": self.elapsed,
                "tokens": self.epoch_tokens, "lr": self.config.train.lr,
                "clip": self.config.train.clip}

    def task_state(self) -> dict[str, Any]:
        return {"position": self.position, "best_accuracy": self.best_accuracy}

    def load_task_state(self, state: dict[str, Any]) -> None:
        self.position, self.best_accuracy = state["position"], state["best_accuracy"]

    def best(self) -> dict[str, float]:
        return {"best_val_accuracy": self.best_accuracy}


# ------------------------------------------------------------------ reading a run back
def load_copy_run(run_dir, config: CopyConfig, *, which: str = "best", device=None,
                  corpus=None) -> LoadedRun:
    path = checkpoint_path(Path(run_dir), which)
    state = load_checkpoint(path, device or "cpu", formats=(WEIGHTS, CHECKPOINT))
    model = CopyNet(config).to(device or "cpu")
    load_weights(model, state["model"], checkpoint=path, config=Path(run_dir) / CONFIG)
    return LoadedRun(config, model.eval(), corpus if corpus is not None else load_copy(config))


def evaluate_copy(run: LoadedRun, split: str, *, data: CopySplits,
                  max_items: int | None = None, beam: int = 1) -> dict[str, Any]:
    return measure(run.model, data.split(split)[:max_items])


def copy_analyses(run: LoadedRun, split: str, *, data: CopySplits,
                  max_items: int | None = None) -> dict[str, Any]:
    """The accuracy at each position of the sequences."""
    x = data.split(split)[:max_items].T
    with torch.no_grad():
        guess = run.model.head.log_prob(run.model(x)).argmax(-1)
    return {"accuracy_by_position": [100.0 * float(row.float().mean())
                                     for row in guess == x]}


# ------------------------------------------------------------------ sizing and the tiny run
def _sizes(config: CopyConfig) -> dict[str, Any]:
    d, t = config.data, config.train
    return {"vocab": d.vocab, "positions": t.batch_size * d.length, "extra": {},
            "steps": math.ceil(d.sequences / t.batch_size), "windows": 1,
            "eval_positions": (d.sequences // 4) * d.length}


def _flops(config: CopyConfig, vocab_size: int, positions: float) -> float:
    return 2.0 * positions * config.model.d * vocab_size  # the head's scores


def _probe(config: CopyConfig, vocab_size: int, gen: torch.Generator) -> StepProbe:
    model = CopyNet(config).train()
    return StepProbe((8, 16), model, lambda n: model.loss(
        torch.randint(0, vocab_size, (1, n), generator=gen)))


def _step_seconds(config: CopyConfig, work, device, timed) -> tuple[float, str]:
    probe = _probe(config, work.vocab, torch.Generator().manual_seed(0))
    seconds = timed(lambda: probe.loss(round(work.positions)).backward())
    return seconds, f"{work.steps:,} steps of {seconds:.4f} s, one timed here"


def tiny_copy_run(config: CopyConfig, size: TinyRun) -> tuple[list[float], nn.Module]:
    gen = torch.Generator().manual_seed(0)
    model = CopyNet(config).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=config.train.lr)
    x = torch.randint(0, config.data.vocab, (size.length, size.batch), generator=gen)
    losses = []
    for _ in range(size.steps):
        optimizer.zero_grad()
        loss = model.loss(x)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, model


COPY = Task(
    name="copy", config_class=CopyConfig, trainer=CopyTrainer, metric="word accuracy",
    metric_key="accuracy", short="accuracy",
    best_value=lambda s: s.best_val_accuracy, load_data=load_copy, load_run=load_copy_run,
    evaluate=evaluate_copy,
    describe=lambda r: f"word accuracy {r['accuracy']:.1f}% over {r['sequences']} sequences",
    analyses=copy_analyses, analyses_keys={"accuracy_by_position": (list,)},
    sizing=Sizing(sizes=_sizes, forward_flops=_flops, probe=_probe,
                  model=lambda config, sizes: CopyNet(config),
                  optimizer_states=lambda config: 0, step_seconds=_step_seconds),
    curve_keys=(*EPOCH_KEYS, "val_loss", "val_accuracy", *TIME_KEYS), tiny_run=tiny_copy_run,
    configs={"copy/tiny": lambda: CopyConfig("copy/tiny", "copy random sequences")},
    checkpoint_formats={CHECKPOINT: "a resumable copy-task checkpoint (last.pt)",
                        WEIGHTS: "a weights-only copy-task file (best.pt)"})


@pytest.fixture
def copy_task(monkeypatch):
    """The task registered with one call (and a one-row table of its config), unregistered
    after the test."""
    register_task(COPY)
    monkeypatch.setitem(TABLES, "copy", Table("copy", (Row("copy", "copy/tiny"),),
                                              device="cpu"))
    yield COPY
    unregister_task("copy")
    assert "copy" not in TASKS and "copy" not in config_classes()
    assert "copy/tiny" not in list_configs() and CHECKPOINT not in FORMATS


def test_registration_makes_its_configs_and_checkpoints_known(copy_task):
    assert TASKS["copy"] is COPY and config_classes()["copy"] is CopyConfig
    assert list_configs("copy") == ["copy/tiny"]
    assert isinstance(get_config("copy/tiny"), CopyConfig) and CHECKPOINT in FORMATS
    assert register_task(COPY) is COPY  # the same record again: no change
    with pytest.raises(ConfigError, match="the name is taken"):
        register_task(Task(**{**vars(COPY), "metric": "another"}))


def test_train_and_eval_on_the_command_line(copy_task, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "copy/tiny", "--out", str(run), "--device", "cpu", "--quiet"]) == 0
    said = capsys.readouterr().out
    log = read_log(run)
    assert len(log) == 3 and [r["epoch"] for r in log] == [1, 2, 3]
    best = max(r["val_accuracy"] for r in log)
    assert f"best valid accuracy {best:.2f}" in said
    assert log[-1]["train_loss"] < math.log(12)  # it learned something: below a guess
    assert main(["eval", str(run), "--split", "test", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    config, model, data = load_run(run, device="cpu")
    assert isinstance(config, CopyConfig) and isinstance(model, CopyNet)
    assert result["accuracy"] == measure(model, data.test)["accuracy"]
    assert result["sequences"] == 16


def test_a_one_row_reproduce_its_report_and_the_dry_run(copy_task, tmp_path, capsys):
    out, runs = tmp_path / "results", tmp_path / "runs"
    (path,) = reproduce("copy", out=out, runs=runs, device="cpu", progress=False)
    doc = json.loads(path.read_text())
    assert path == out / "copy" / "copy.json" and validate_result(doc) == []
    assert doc["status"] == "done" and doc["config"]["task"] == "copy"
    log = read_log(runs / "copy" / "copy")
    assert doc["metrics"]["val_accuracy"] == max(r["val_accuracy"] for r in log)
    assert set(doc["curve"][0]) == {"epoch", "step", "train_loss", "val_loss",
                                    "val_accuracy", "epoch_seconds", "elapsed_seconds",
                                    "tokens_per_second", "lr"}
    assert len(doc["analyses"]["accuracy_by_position"]) == 5
    assert len(doc["fingerprint"]["losses"]) == 3
    assert main(["report", "--results", str(out)]) == 0
    report = capsys.readouterr().out
    assert "Metric: word accuracy." in report and "| copy | `copy/tiny` |" in report
    assert report == render_report(out) + "\n"
    assert main(["reproduce", "copy", "--dry-run"]) == 0
    assert "\ncopy " in capsys.readouterr().out
    # on this CPU the planner times the task's step: its probe's loss and backward pass,
    # where the task declares no step of its own
    assert main(["reproduce", "copy", "--dry-run", "cpu"]) == 0
    assert "\ncopy " in capsys.readouterr().out
