"""The AWD-LSTM training recipe, resumable to the bit.

What one epoch does (Merity et al., 2018):

1. walk the training stream in windows of random length (70 w.p. 0.95, else 35, then
   ``max(5, N(bptt, 5))``), carrying the LSTM state across windows, the learning rate
   scaled by ``seq_len / bptt``;
2. loss = head NLL + ``alpha`` x mean(dropped output^2) (AR) + ``beta`` x mean of
   squared differences of consecutive undropped outputs (TAR);
3. clip the gradient norm, take an SGD step;
4. evaluate; **NT-ASGD**: once the validation loss is worse than the best of all epochs
   before the last ``nonmono``, switch to averaged SGD and evaluate with averaged weights.

State that a resumed run needs to continue *exactly* (tested: a killed CPU run resumed
from its last checkpoint ends bit-identical to an uninterrupted one): weights, optimiser
(kind and state), epoch, position in the epoch and the window-length generator, the
carried LSTM state, the global RNG (dropout masks), the validation history.

The run folder follows :mod:`drillbook.train.runs` (locked while training, checked before
anything is written, a log that matches the checkpoint); a non-finite loss or parameter
stops training with :class:`~drillbook.errors.TrainingDiverged` before it is saved.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm  # plain text bars: no widget warnings in notebooks

from ..configs.schema import Config
from ..data import BPTTSampler, Corpus, batchify, load_corpus
from ..errors import CheckpointError, ConfigError, DataError, TrainingDiverged
from ..metrics import MAX_LOSS, perplexity
from ..models import LanguageModel, build_model, eval_windows
from .checkpoint import LM_CHECKPOINT, LM_WEIGHTS, load_checkpoint
from .runs import (
    BEST,
    CONFIG,
    apply_learning_rate,
    checkpoint_path,
    diverged,
    nonfinite_update,
    open_run_folder,
    read_log,
    read_run_config,
)

__all__ = ["MAX_LOSS", "RunStatus", "Trainer", "TrainingDiverged", "evaluate", "finetune",
           "finetune_trainer", "load_run", "perplexity", "read_log", "training_loss"]


@dataclass
class RunStatus:
    """How :meth:`Trainer.fit` ended.

    Attributes:
        reason: ``"done"`` (all epochs), ``"epochs"`` (``max_epochs`` reached),
            ``"budget"`` (``max_minutes`` reached), ``"steps"`` (``max_steps`` reached),
            ``"converged"`` (fine-tuning stopped at its non-monotone trigger).
        epoch: epochs completed.
        best_val_loss: best validation loss so far (nats per token).
    """

    reason: str
    epoch: int
    best_val_loss: float

    @property
    def best_val_ppl(self) -> float:
        """``exp(best_val_loss)`` (``inf`` where it overflows or no epoch finished)."""
        return perplexity(self.best_val_loss)


def training_loss(model: LanguageModel, x: Tensor, y: Tensor, hidden, *, alpha: float,
                  beta: float) -> tuple[Tensor, Tensor, Any]:
    """The AWD-LSTM training objective of one batch (Merity et al. 2018, Sec. 4.6).

    ``loss = head.loss + head.regularizer (DOC's λ_β β) + α mean(h_last²) (AR)
    + β mean((r_t − r_{t−1})²) (TAR, on the last layer's output before dropout)``.

    Args:
        model: the language model; x, y: ``(T, B)`` inputs and targets; hidden: the
            carried state. alpha, beta: the AR and TAR weights (0 switches them off).

    Returns:
        ``(loss, raw_loss, out)``: the objective, the head's loss alone (what perplexity
        reports), and the model's output (for the hidden state).
    """
    out = model(x, hidden)
    raw_loss = model.head.loss(out.features, y)
    loss = raw_loss
    extra = model.head.regularizer(out.features)
    if extra is not None:
        loss = loss + extra
    if alpha:
        loss = loss + alpha * out.features.last.float().pow(2).mean()
    if beta and out.raw_last.shape[0] > 1:
        diff = out.raw_last[1:] - out.raw_last[:-1]
        loss = loss + beta * diff.float().pow(2).mean()
    return loss, raw_loss, out


@torch.no_grad()
def evaluate(model: LanguageModel, data: Tensor, bptt: int,
             max_tokens: int | None = None) -> tuple[float, int]:
    """Mean NLL per token of ``model`` on a batchified ``(T, B)`` stream.

    The recurrent state is carried across fixed windows of ``bptt`` tokens, as in
    AWD-LSTM's evaluation. Returns ``(loss, n_tokens)``; perplexity is ``exp(loss)``.
    """
    total, count = 0.0, 0
    for out, y in eval_windows(model, data, bptt, max_tokens):
        total += float(model.head.loss(out.features, y)) * y.numel()
        count += y.numel()
    if count == 0:
        raise DataError(f"the evaluation stream of shape {tuple(data.shape)} is too short "
                        f"for one window: use a smaller batch size (or more tokens)")
    return total / count, count


class Trainer:
    """Train a config's language model into a run folder, resumably.

    Args:
        config: the resolved config (written to ``run_dir/config.json``).
        run_dir: where ``config.json``, ``log.jsonl``, ``last.pt`` and ``best.pt`` live.
        device: where to train; default CUDA when available.
        corpus: an already loaded corpus (default: ``load_corpus(config.data.corpus)``).
        resume: continue from ``run_dir/last.pt``. Without it an existing run folder
            with a checkpoint is an error (nothing is overwritten by accident).
        progress: show a tqdm bar (default: only on a terminal).
        stage: ``"train"``, or ``"finetune"``: AWD-LSTM's second stage, which starts in
            averaged SGD from ``init_from`` and stops at the first non-monotone epoch.
        init_from: a ``best.pt``/``last.pt`` whose weights a new run starts from. A new
            fine-tuning run evaluates them once: their validation loss is the best so far
            and they are its first ``best.pt``, so it never saves a worse model than the
            one it loaded (as AWD-LSTM's ``finetune.py`` does).

    The trainer holds the run folder's lock from construction until :meth:`fit` returns
    (:meth:`close` gives it up earlier); a second trainer on the same folder fails with
    :class:`~drillbook.errors.RunFolderError`.

    Raises:
        ConfigError: an invalid config.
        RunFolderError: the folder is in use, holds another run, or holds none to resume.
        CheckpointError: ``last.pt`` (or ``init_from``) is unreadable or of another kind.
    """

    def __init__(self, config: Config, run_dir: str | Path, *, device: str | None = None,
                 corpus: Corpus | None = None, resume: bool = False,
                 progress: bool | None = None, stage: str = "train",
                 init_from: str | Path | None = None) -> None:
        if stage not in ("train", "finetune"):
            raise ValueError(f"stage must be 'train' or 'finetune', got {stage!r}")
        self.run_dir = Path(run_dir)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.progress = progress
        self.folder = open_run_folder(self.run_dir, config, resume)
        self.folder.start(
            LM_CHECKPOINT, self.device, restore=self._restore,
            build=lambda state: self._build(config, corpus, stage, init_from, state))
        if stage == "finetune" and init_from is not None and not resume:
            try:  # the loaded weights are the first best.pt: none worse is ever saved
                if math.isfinite(self.best_val_loss):
                    self._save_best(self.model.state_dict(), epoch=0,
                                    val_loss=self.best_val_loss)
            except BaseException:
                self.folder.release()
                raise

    def _build(self, config: Config, corpus: Corpus | None, stage: str,
               init_from: str | Path | None, state: dict | None) -> None:
        if state is not None and state["stage"] != stage:
            raise CheckpointError(f"{self.folder.last} is a {state['stage']!r} checkpoint, "
                                  f"not {stage!r}: resume it with the command that started "
                                  f"it")
        init_from = init_from if state is None else None
        self.config = config
        t = config.train
        torch.manual_seed(t.seed)
        self.corpus = corpus if corpus is not None else load_corpus(config.data.corpus)
        vocab_size = len(self.corpus.vocab)
        self.model = build_model(config, vocab_size).to(self.device)
        self.train_data = batchify(self.corpus.train, t.batch_size).to(self.device)
        self.valid_data = batchify(self.corpus.valid, t.eval_batch_size).to(self.device)
        self.sampler = BPTTSampler(self.train_data, t.bptt, seed=t.seed,
                                   variable=t.variable_bptt)
        self.stage, self.finished = stage, False
        if init_from is not None:
            weights = load_checkpoint(init_from, self.device, formats=(LM_WEIGHTS,
                                                                       LM_CHECKPOINT))
            self.model.load_state_dict(weights["model"])
        first = "adam" if t.optimizer == "adam" else "sgd"
        self.optimizer = self._make_optimizer("asgd" if stage == "finetune" else first)
        self.epoch = 1  # the epoch in progress
        self.step = 0
        self.hidden: Any = None
        self.val_history: list[float] = []
        self.best_val_loss = math.inf
        self.elapsed = 0.0
        self.epoch_loss, self.epoch_tokens, self.epoch_batches = 0.0, 0, 0
        self.changes: list[dict[str, Any]] = []  # resumable values changed on resume
        if stage == "finetune" and init_from is not None:
            # the loaded model is the one to beat (written as best.pt once the folder is up)
            loaded = evaluate(self.model, self.valid_data, t.bptt, t.max_eval_tokens)[0]
            self.best_val_loss = loaded if math.isfinite(loaded) else math.inf

    def close(self) -> None:
        """Give up the run folder's lock now (:meth:`fit` takes it again)."""
        self.folder.release()

    # ------------------------------------------------------------ optimisers
    @property
    def averaging(self) -> bool:
        return isinstance(self.optimizer, torch.optim.ASGD)

    def _make_optimizer(self, kind: str) -> torch.optim.Optimizer:
        t, params = self.config.train, self.model.parameters()
        if kind == "sgd":
            return torch.optim.SGD(params, lr=t.lr, weight_decay=t.wdecay)
        if kind == "asgd":
            return torch.optim.ASGD(params, lr=t.lr, t0=0, lambd=0.0, weight_decay=t.wdecay)
        if kind == "adam":
            return torch.optim.Adam(params, lr=t.lr, weight_decay=t.wdecay)
        raise ConfigError(f"train.optimizer must be 'sgd' or 'adam', got {kind!r}")

    def _optimizer_kind(self) -> str:
        return {torch.optim.SGD: "sgd", torch.optim.ASGD: "asgd",
                torch.optim.Adam: "adam"}[type(self.optimizer)]

    # ------------------------------------------------------------ checkpoints
    def _state(self) -> dict[str, Any]:
        return {
            "format": LM_CHECKPOINT,
            "config_hash": self.config.resume_key(),
            "model": self.model.state_dict(),
            "optimizer_kind": self._optimizer_kind(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "step": self.step,
            "sampler": self.sampler.state_dict(),
            "hidden": self.hidden,
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "val_history": list(self.val_history),
            "best_val_loss": self.best_val_loss,
            "elapsed": self.elapsed,
            "epoch_acc": [self.epoch_loss, self.epoch_tokens, self.epoch_batches],
            "stage": self.stage,
            "finished": self.finished,
            "changes": self.changes,
        }

    def _restore(self, state: dict[str, Any]) -> int:
        """Continue from a ``last.pt``; returns the epoch in progress."""
        self.model.load_state_dict(state["model"])
        self.optimizer = self._make_optimizer(state["optimizer_kind"])
        self.optimizer.load_state_dict(state["optimizer"])
        apply_learning_rate(self.optimizer, self.config.train.lr)  # may change on resume
        self.epoch, self.step = state["epoch"], state["step"]
        self.sampler.load_state_dict(state["sampler"])
        self.hidden = state["hidden"]
        torch.set_rng_state(state["rng_cpu"].cpu())
        if state["rng_cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["rng_cuda"]])
        self.val_history = list(state["val_history"])
        self.best_val_loss = state["best_val_loss"]
        self.elapsed = state["elapsed"]
        self.epoch_loss, self.epoch_tokens, self.epoch_batches = state["epoch_acc"]
        self.finished = state["finished"]
        self.changes = self.folder.change_history(state.get("changes", []), self.epoch,
                                                  self.step)
        return self.epoch

    def save(self) -> Path:
        """Write ``last.pt`` atomically."""
        return self.folder.save_last(self._state())

    # ------------------------------------------------------------ training
    def _train_step(self, batch) -> float:
        t = self.config.train
        self.model.train()
        hidden = self.hidden
        if hidden is None:
            hidden = self.model.init_hidden(batch.x.shape[1])
        with torch.autocast(self.device.type, dtype=torch.bfloat16,
                            enabled=t.amp and self.device.type == "cuda"):
            loss, raw_loss, out = training_loss(self.model, batch.x, batch.y, hidden,
                                                alpha=t.alpha, beta=t.beta)
        value, raw = loss.item(), raw_loss.item()
        if not math.isfinite(value) or raw > MAX_LOSS:
            raise self._diverged(f"the loss became {raw if raw > MAX_LOSS else value}")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if t.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip)
        group = self.optimizer.param_groups[0]
        base_lr = group["lr"]
        group["lr"] = base_lr * batch.lr_scale
        self.optimizer.step()
        group["lr"] = base_lr
        bad = nonfinite_update(self.model)
        if bad:  # stop before a checkpoint could save them
            raise self._diverged(bad)
        self.hidden = self.model.encoder.detach_hidden(out.hidden)
        self.step += 1
        return raw

    def _diverged(self, what: str) -> TrainingDiverged:
        return diverged(what, epoch=self.epoch, step=self.step, lr=self.config.train.lr,
                        folder=self.folder)

    @contextmanager
    def _averaged_weights(self) -> Iterator[None]:
        """Swap NT-ASGD's averaged weights in, and back afterwards.

        The copies are in-place updates of the parameters (under ``no_grad``, not
        through ``.data``), so they bump each parameter's version counter: the label
        caches of DRILL/dual heads (:class:`~drillbook.heads.label_cache.LabelCache`)
        see both swaps and never serve ``g_out(E)`` of the other weights.
        """
        params = [p for p in self.model.parameters() if "ax" in self.optimizer.state[p]]
        saved = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p in params:
                p.copy_(self.optimizer.state[p]["ax"])
        try:
            yield
        finally:
            with torch.no_grad():
                for p, value in zip(params, saved, strict=True):
                    p.copy_(value)

    def _validate(self) -> float:
        t = self.config.train
        if not self.averaging:
            return evaluate(self.model, self.valid_data, t.bptt, t.max_eval_tokens)[0]
        with self._averaged_weights():
            return evaluate(self.model, self.valid_data, t.bptt, t.max_eval_tokens)[0]

    def _best_state(self) -> dict[str, Any]:
        if not self.averaging:
            return self.model.state_dict()
        params = {id(p): self.optimizer.state[p]["ax"] for p in self.model.parameters()
                  if "ax" in self.optimizer.state[p]}
        state = {}
        for name, p in self.model.state_dict(keep_vars=True).items():
            state[name] = params.get(id(p), p).detach().clone()
        return state

    def _save_best(self, state: dict[str, Any], *, epoch: int, val_loss: float) -> None:
        self.folder.save_best({"format": LM_WEIGHTS, "model": state,
                               "config": self.config.to_dict(), "epoch": epoch,
                               "val_loss": val_loss})

    def _end_epoch(self, seconds: float) -> dict[str, Any]:
        t = self.config.train
        val_loss = self._validate()
        switched = False
        trigger = (len(self.val_history) > t.nonmono
                   and val_loss > min(self.val_history[:-t.nonmono]))
        if self.stage == "finetune":
            self.finished = trigger  # fine-tuning ends at its first non-monotone epoch
        elif trigger and t.optimizer == "sgd" and not self.averaging:
            self.optimizer = self._make_optimizer("asgd")  # NT-ASGD
            switched = True
        self.val_history.append(val_loss)
        improved = val_loss < self.best_val_loss
        if improved:
            self.best_val_loss = val_loss
            self._save_best(self._best_state(), epoch=self.epoch, val_loss=val_loss)
        train_loss = self.epoch_loss / max(self.epoch_batches, 1)
        record = {
            "epoch": self.epoch, "step": self.step, "train_loss": train_loss,
            "train_ppl": perplexity(train_loss), "val_loss": val_loss,
            "val_ppl": perplexity(val_loss), "best_val_ppl": perplexity(self.best_val_loss),
            "optimizer": self._optimizer_kind(), "switched_to_asgd": switched,
            "stage": self.stage, "lr": t.lr, "clip": t.clip,
            "epoch_seconds": seconds, "elapsed_seconds": self.elapsed,
            "tokens": self.epoch_tokens, "batches": self.epoch_batches,
        }
        self.folder.append_log(record)
        return record

    def _train_batches(self, start: float, started_elapsed: float,
                       max_minutes: float | None, max_steps: int | None) -> str | None:
        """Train the rest of the current epoch; return why it stopped early, or None."""
        t = self.config.train
        cap = t.max_batches_per_epoch
        bar = tqdm(total=self.sampler.num_batches(cap), initial=self.sampler.batches_done,
                   desc=f"epoch {self.epoch}",
                   disable=None if self.progress is None else not self.progress, leave=False)
        try:
            for batch in self.sampler.iter_epoch(cap):  # from the saved position on
                loss = self._train_step(batch)
                self.epoch_loss += loss
                self.epoch_tokens += batch.y.numel()
                self.epoch_batches += 1
                now = time.monotonic()
                self.elapsed = started_elapsed + now - start
                bar.update(1)
                if self.step % t.log_interval == 0:
                    bar.set_postfix(loss=f"{loss:.3f}", ppl=f"{perplexity(loss):.1f}")
                last_time, last_step = self._last_ckpt
                due = (now - last_time >= 60 * t.checkpoint_minutes or bool(
                    t.checkpoint_steps and self.step - last_step >= t.checkpoint_steps))
                stop = ("budget" if max_minutes is not None and now - start >= 60 * max_minutes
                        else "steps" if max_steps is not None and self.step >= max_steps
                        else None)
                if due or stop:
                    self.save()
                    self._last_ckpt = (now, self.step)
                if stop:
                    return stop
            return None
        finally:
            bar.close()

    def fit(self, max_epochs: int | None = None, max_minutes: float | None = None,
            max_steps: int | None = None) -> RunStatus:
        """Train until the config's epochs, or a limit given here, whichever comes first.

        Args:
            max_epochs: stop after this many *completed* epochs in total.
            max_minutes: wall-clock budget for this call; the run checkpoints and stops.
            max_steps: stop after this many optimiser steps in total (tests use it).

        The run folder stays locked until this returns (or raises).

        Raises:
            TrainingDiverged: a non-finite (or overflowing) loss, or non-finite weights
                after a step; ``last.pt`` keeps the last finite state.
            CheckpointError: a checkpoint could not be written (disk full).
        """
        self.folder.acquire()
        try:
            return self._fit(max_epochs, max_minutes, max_steps)
        finally:
            self.folder.release()

    def _fit(self, max_epochs: int | None, max_minutes: float | None,
             max_steps: int | None) -> RunStatus:
        t = self.config.train
        start = time.monotonic()
        started_elapsed = self.elapsed
        self._last_ckpt = (start, self.step)
        final_epoch = t.epochs if max_epochs is None else min(t.epochs, max_epochs)
        while self.epoch <= final_epoch and not self.finished:
            epoch_start = time.monotonic()
            # A checkpoint taken after an epoch's last batch resumes straight into its
            # validation: the sampler then has no batches left in this epoch.
            stop = self._train_batches(start, started_elapsed, max_minutes, max_steps)
            if stop is not None:
                return RunStatus(stop, self.epoch - 1, self.best_val_loss)
            self._end_epoch(time.monotonic() - epoch_start)
            self.sampler.new_epoch()
            self.epoch += 1
            self.epoch_loss, self.epoch_tokens, self.epoch_batches = 0.0, 0, 0
            self.save()
            self._last_ckpt = (time.monotonic(), self.step)
        reason = ("converged" if self.finished else "done" if self.epoch > t.epochs
                  else "epochs")
        return RunStatus(reason, self.epoch - 1, self.best_val_loss)


def finetune(run_dir: str | Path, *, out: str | Path | None = None, device: str | None = None,
             resume: bool = False, max_epochs: int | None = None,
             max_minutes: float | None = None, progress: bool | None = None,
             corpus: Corpus | None = None, lr: float | None = None) -> tuple[RunStatus, Path]:
    """AWD-LSTM's fine-tuning stage: averaged SGD from a run's best weights.

    Writes a new run folder (default ``run_dir/finetune``) and stops at the first epoch
    whose validation loss is worse than the best before the last ``nonmono`` epochs. The
    best validation loss starts at the loaded model's, whose weights are the folder's
    first ``best.pt``: fine-tuning never leaves a worse model than it started from.

    Args:
        lr: the learning rate (default: the run's ``train.lr``). MoS's README fine-tunes
            at 25 on PTB and 20 on WikiText-2 (see :data:`drillbook.configs.FINETUNE_LR`).
            It is written into the new folder's ``config.json`` and every log record. A
            resumed fine-tuning run keeps it unless another one is given (a resumable
            change, recorded like ``drillbook train --resume --set train.lr=...``).
    """
    trainer = finetune_trainer(run_dir, out=out, device=device, resume=resume,
                               progress=progress, corpus=corpus, lr=lr)
    return trainer.fit(max_epochs=max_epochs, max_minutes=max_minutes), trainer.run_dir


def finetune_trainer(run_dir: str | Path, *, out: str | Path | None = None,
                     device: str | None = None, resume: bool = False,
                     progress: bool | None = None, corpus: Corpus | None = None,
                     lr: float | None = None) -> Trainer:
    """The :class:`Trainer` that :func:`finetune` runs (same arguments), for a caller that
    needs more than the stage's :class:`RunStatus` (steps, wall time, device)."""
    run_dir = Path(run_dir)
    config = read_run_config(run_dir, Config)
    out = Path(out) if out is not None else run_dir / "finetune"
    if lr is None and resume and (out / CONFIG).exists():  # continue at the rate it began
        lr = read_run_config(out, Config).train.lr
    if lr is not None:
        config.train.lr = float(lr)  # validated (positive) when the run folder opens
    return Trainer(config, out, device=device, resume=resume, progress=progress,
                   corpus=corpus, stage="finetune", init_from=None if resume else run_dir / BEST)


def load_run(run_dir: str | Path, *, which: str = "best", device: str | None = None,
             corpus: Corpus | None = None) -> tuple[Config, LanguageModel, Corpus]:
    """Rebuild a trained model from its run folder.

    Args:
        which: ``"best"`` (``best.pt``, averaged weights if NT-ASGD had switched) or
            ``"last"`` (``last.pt``).

    Raises:
        RunFolderError: no or an invalid ``config.json``.
        CheckpointError: the checkpoint is missing, unreadable, or not a language model's.
    """
    run_dir = Path(run_dir)
    config = read_run_config(run_dir, Config)
    path = checkpoint_path(run_dir, which)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    state = load_checkpoint(path, device, formats=(LM_WEIGHTS, LM_CHECKPOINT))
    corpus = corpus if corpus is not None else load_corpus(config.data.corpus)
    model = build_model(config, len(corpus.vocab)).to(device)
    model.load_state_dict(state["model"])
    model.eval()
    return config, model, corpus
