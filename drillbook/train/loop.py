"""The one training loop that the language-model and the translation trainers share.

:class:`TrainingLoop` owns everything that is not about the task (the device, the seed,
the run folder, checkpoints, limits, divergence checks, precision, gradient accumulation,
several processes, the log and the console); a task supplies its batches, its loss and
its end-of-epoch evaluation through the hooks its docstring lists.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor
from tqdm import tqdm  # plain text bars: no widget warnings in notebooks

from ..configs import SectionedConfig
from ..errors import (
    CheckpointError,
    ConfigError,
    ResourceError,
    RunFolderError,
    TrainingDiverged,
    TrainingInterrupted,
)
from ..metrics import perplexity
from ..precision import autocast, matmul_precision, precision_label, resolve_precision
from ..runtime import is_out_of_memory, read_back, resolve_device
from .checkpoint import rng_state, set_rng_state
from .distributed import DDP, rank_and_world_size
from .runs import FollowerFolder, apply_learning_rate, diverged, nonfinite_update, open_run_folder

__all__ = ["RunStatus", "StepLoss", "TrainingLoop"]


@dataclass
class RunStatus:
    """How a trainer's ``fit()`` ended, for either task.

    Attributes:
        reason: ``"done"`` (all epochs), ``"epochs"`` (``max_epochs`` reached),
            ``"budget"`` (``max_minutes`` reached), ``"steps"`` (``max_steps`` reached),
            ``"converged"`` (fine-tuning stopped at its non-monotone trigger).
        epoch: epochs completed.
        best_val_loss: the best validation loss so far (nats per token), what selects a
            language model's ``best.pt`` (``inf`` for a translation run).
        best_val_bleu: the best validation BLEU so far, what selects a translation run's
            ``best.pt`` (None for a language model).
        record: the log record of the last epoch this call completed (None if it
            completed none).
    """

    reason: str
    epoch: int
    best_val_loss: float = math.inf
    best_val_bleu: float | None = None
    record: dict[str, Any] | None = None

    @property
    def best_val_ppl(self) -> float:
        """``exp(best_val_loss)`` (``inf`` where it overflows or no epoch finished)."""
        return perplexity(self.best_val_loss)

def _to(obj: Any, device: torch.device | str) -> Any:
    """``obj`` (tensors in lists, tuples and dicts) on ``device``."""
    if isinstance(obj, Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


def largest_weight(params: Sequence[Tensor]) -> Tensor:
    """``max |w|`` over every entry of ``params``, a 0-d tensor left on their device: it is
    finite exactly when every weight is (a NaN spreads through the maximum), and no sum
    can overflow it. One multi-tensor kernel on a GPU (torch >= 2.6) instead of a test per
    parameter."""
    if hasattr(torch.nn.utils, "get_total_norm"):
        return torch.nn.utils.get_total_norm(params, math.inf)
    with torch.no_grad():
        return torch.stack([p.abs().max() for p in params]).max()


class StepLoss(NamedTuple):
    """One piece of a batch's loss (what a task's ``_micro_loss`` returns).

    Attributes:
        loss: the scalar to differentiate (the objective of this piece, a mean over its
            tokens).
        report: the scalar that is checked for divergence and averaged into the epoch's
            training loss (the language model's head loss without AR/TAR; the
            translation loss itself).
        share: this piece's weight in the batch's mean (``1/k`` for ``k`` equal
            column slices; its share of the target tokens for translation); the loss is
            multiplied by it before the backward pass when ``k > 1``.
    """

    loss: Tensor
    report: Tensor
    share: float


class TrainingLoop:
    """The shared machinery of a resumable training run.

    It owns the device (:func:`~drillbook.runtime.default_device` unless one is given),
    the seed, the run folder (:mod:`drillbook.train.runs`: lock, checks before any write, a
    log that matches the checkpoint), the checkpoint cadence, the time and step limits,
    the divergence checks, the full random state, the precision
    (:mod:`drillbook.precision`: autocast and, for fp16, a gradient scaler), gradient
    accumulation, ``torch.compile``, the per-epoch log record and the one console line per
    epoch. A task subclass supplies only its batches, its loss and its end-of-epoch
    evaluation, through these hooks:

    * ``_build(state)``: the model (``self.model``), optimiser (``self.optimizer``) and data;
      ``state`` is the resume checkpoint or None. The loop has seeded torch with
      ``train.seed`` just before.
    * ``_task_state()`` / ``_restore_task(state)``: what the task adds to (reads from)
      ``last.pt`` besides what the loop keeps.
    * ``_epoch_batches()``: the rest of the current epoch's batches, from the saved position
      on; ``_epoch_progress()``: ``(batches in the epoch, batches done)`` for the bar;
      ``_batch_done(batch)``: called after each optimiser step (a position to advance);
      ``_new_epoch()``: move to the next epoch's batches.
    * ``_micro_batches(batch, parts)``: the batch cut into ``parts`` pieces for gradient
      accumulation (``train.accum_steps``); ``_micro_loss(micro, part)``: a
      :class:`StepLoss` for one piece.
    * ``_end_epoch(seconds)``: validate, save ``best.pt`` when it improved, return the log
      record (the loop appends it, with ``precision`` and ``tokens_per_second``, and prints
      the console line, with the events the task put in ``self._events``, such as
      ``"saved best"``); ``_summary(record)``: the record's metric in words
      (``"val ppl 123.45"``); ``self.finished = True`` ends training early.

    One **optimiser step** (``train.accum_steps = k``): the batch is cut into ``k`` pieces;
    each piece's loss is computed under autocast, checked (a non-finite loss, or one above
    :attr:`TrainingLoop.max_loss`, raises :class:`~drillbook.errors.TrainingDiverged`
    before anything is saved), scaled by the piece's share of the batch and back-propagated;
    then the gradients are unscaled (fp16), clipped to ``train.clip``, and the optimiser
    steps at ``lr x _lr_scale(batch)``; non-finite weights after the step raise
    ``TrainingDiverged`` too. With ``k = 1`` and precision ``fp32`` this is exactly the
    fp32 step the trainers took before the loop existed (bit for bit: the logs of both
    tasks matched on the same seeds when the loop replaced them).

    **Checkpoint cadence** (one rule for both tasks): ``last.pt`` is written after every
    epoch, during an epoch once ``train.checkpoint_minutes`` have passed or
    ``train.checkpoint_steps`` steps were taken since the last one, and when a time or step
    limit stops the run.

    **What ``last.pt`` holds** besides the task's own state: ``format``, ``model``,
    ``optimizer``, ``epoch`` (in progress), ``step`` (optimiser steps so far), ``elapsed``
    (training seconds), ``epoch_acc`` (``[loss sum, tokens, batches]`` of the epoch so far),
    ``rng_cpu``, ``rng_cuda`` (every CUDA device's generator; empty without CUDA), each task
    generator as ``rng_<name>``, ``scaler`` (the fp16 gradient scaler's state, or None), and
    ``changes`` (resumable values changed on resume).

    **Precision** (``train.amp``): ``fp32`` (float32), ``bf16`` (bfloat16 autocast; on CPU
    too), ``fp16`` (float16 autocast with a :class:`torch.amp.GradScaler`, whose state is
    checkpointed), ``tf32`` (float32 with TF32 matrix products in the training step, on
    a GPU that has them), ``auto`` (bf16 for a mixture head on a GPU with bfloat16, float32
    otherwise, as measured; :func:`resolve_precision`). The old boolean values of config
    files still load (``false`` and ``off`` = ``fp32``, ``true`` = ``bf16``).

    **Console**: a tqdm bar per epoch only when stderr is a terminal (``progress=None``) or
    when asked (``progress=True``), and one line per epoch on stderr (unless
    ``progress=False``)::

        epoch 3/500 | 1,204 updates | train loss 4.812 | val ppl 131.20 | lr 30 | 61s
        | 9,850 tok/s | saved best, checkpoint

    (one line on the console; broken here to fit).

    Timing never synchronises CUDA per step: the epoch's seconds are read once, after one
    synchronisation at the end of the epoch's training batches.

    **Several processes** (``torchrun --nproc_per_node=N -m drillbook.cli train ...``; the
    command calls :func:`~drillbook.train.distributed.init_distributed`): when a
    ``torch.distributed`` process group is up, the model is wrapped in
    :class:`~torch.nn.parallel.DistributedDataParallel`, each process trains on its own
    share of every batch (the language model: its columns of the training stream;
    translation: its sentences of each batch), each piece's loss is weighted by its share of
    the batch's tokens across processes (so the averaged gradient is the one batch's
    gradient), and the reported losses are all-reduced. Rank 0 alone holds the run folder,
    decides when to checkpoint or stop (broadcast each step) and writes; the others read
    ``last.pt`` on resume and write nothing. ``last.pt`` then holds ``world_size`` and,
    under ``ranks``, each process's own state (its random generators and what
    ``_rank_state`` adds, such as the language model's carried LSTM state), so a run resumes
    with the same number of processes (a different number is refused). Each process draws
    its own dropout masks (seeded ``train.seed + rank`` after the model is built, which is
    identical everywhere).

    Args:
        config: the validated config; its ``train`` section extends
            :class:`~drillbook.configs.base.LoopConfig`.
        run_dir: the run folder.
        device: where to train (default :func:`~drillbook.runtime.default_device`).
        resume: continue from ``run_dir/last.pt``.
        progress: ``None``: a bar only on a terminal and one line per epoch on stderr;
            ``True``: a bar always; ``False``: nothing on the console.
        build_args: passed on to the subclass's ``_build``.

    Attributes:
        precision: the resolved ``train.amp`` (``fp32``, ``bf16``, ``fp16`` or ``tf32``).
        scaler: the fp16 gradient scaler, or None.
        model: the task's model (its weights are what is saved).
        forward_model: what the training step calls: the model, or its
            DistributedDataParallel wrapper.
        rank: this process's rank (0 without ``torchrun``).
        world_size: how many processes train together (1 without ``torchrun``).
        epoch: the epoch in progress (1-based).
        step: optimiser steps so far.
        elapsed: training seconds so far, over every call to the task's ``fit()``.
    """

    #: the ``"format"`` of this task's ``last.pt`` (set by the subclass)
    checkpoint_format: str = ""
    #: a reported loss above this is divergence (for the language model the largest loss
    #: whose perplexity is finite)
    max_loss: float = math.inf

    @property
    def max_val_loss(self) -> float:
        """The validation loss (nats per token) above which the run counts as diverged and
        its state is not saved: twice a uniform guess's over the task's vocabulary (the
        task's trainer knows it), so that every saved state can be trained on from."""
        return self.max_loss
    #: how the epoch's training loss averages its batches, ``False`` as the mean of the
    #: batches' losses (the language model), ``True`` weighted by their tokens (translation)
    token_weighted: bool = False

    rank = 0
    world_size = 1
    #: what the console line starts with (``reproduce`` names its row, ``"row 3/7 drill"``)
    label = ""

    def _open(self, config: SectionedConfig, run_dir: str | Path, *,
              device: str | torch.device | None, resume: bool, progress: bool | None,
              build_args: tuple = ()) -> None:
        """Open the run folder, seed, build and (on resume) restore, in the safe order."""
        self.config, self.run_dir, self.progress = config, Path(run_dir), progress
        self.rank, self.world_size = rank_and_world_size()
        if device is None and self.world_size > 1 and torch.cuda.is_available():
            device = f"cuda:{torch.cuda.current_device()}"  # LOCAL_RANK's (init_distributed)
        self.device = resolve_device(device)
        if self.world_size > 1:
            self._open_together(config, resume, build_args)
        else:
            self._open_folder(config, resume, build_args)

    def _open_together(self, config: SectionedConfig, resume: bool, build_args: tuple) -> None:
        """Every process opens its side of the run folder; if one fails, all stop."""
        error: BaseException | None = None
        try:
            self._open_folder(config, resume, build_args)
        except BaseException as err:  # told to the others before it is raised
            error = err
        failed = self._all_sum([1.0 if error else 0.0])[0]
        if error is not None:
            raise error
        if failed:
            self.folder.release()
            raise RunFolderError(f"another process of this run could not open "
                                 f"{self.run_dir}; see its message (rank 0's names the fix)")
        # after every process has its weights: DDP's construction is collective too
        self.forward_model = DDP(
            self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)

    def _open_folder(self, config: SectionedConfig, resume: bool, build_args: tuple) -> None:
        self.folder = (open_run_folder(self.run_dir, config, resume) if self.rank == 0
                       else FollowerFolder(self.run_dir, resume))

        def build(state: dict | None) -> None:
            t = self.config.train
            torch.manual_seed(t.seed)
            self.finished = False
            self._events: list[str] = []
            self._build(state, *build_args)
            head = getattr(self.model, "head", None)
            self.precision = resolve_precision(
                t.amp, self.device, mixture=getattr(head, "is_mixture", False))
            if self.precision == "fp16" and self.device.type == "cpu" and any(
                    isinstance(m, torch.nn.RNNBase) for m in self.model.modules()):
                raise ConfigError("train.amp=fp16 on the CPU: torch's CPU LSTM has no "
                                  "float16 kernel; use train.amp=bf16 or fp32 here (fp16 "
                                  "is for CUDA)")
            self.scaler = (torch.amp.GradScaler(self.device.type)
                           if self.precision == "fp16" else None)
            if t.compile:
                self.model.compile()  # in place: state_dict keys stay the same
            # what the training step calls: the model (or, below, its DDP wrapper)
            self.forward_model: torch.nn.Module = self.model
            if self.rank > 0:  # its own dropout masks; the model is built already
                torch.manual_seed(t.seed + self.rank)
            self.epoch, self.step, self.elapsed = 1, 0, 0.0
            self._signal: int | None = None  # a stop signal received during fit()
            #: steps whose numbers are still on the device (:meth:`_check_steps`)
            self._unchecked: list[tuple] = []
            self.epoch_loss, self.epoch_tokens, self.epoch_batches = 0.0, 0, 0
            self.changes: list[dict[str, Any]] = []

        try:
            self.folder.start(self.checkpoint_format, self.device, restore=self._restore,
                              build=build)
        except (torch.OutOfMemoryError, RuntimeError, MemoryError) as err:
            if isinstance(err, ResourceError) or not is_out_of_memory(err):
                raise
            raise ResourceError(f"{self.device} ran out of memory building the model "
                                f"({str(err).splitlines()[0][:120]}); make the model smaller "
                                f"or use a device with more memory") from err

    @property
    def writes(self) -> bool:
        """Whether this process writes files and console lines (rank 0)."""
        return self.rank == 0

    def close(self) -> None:
        """Give up the run folder's lock now (the task's ``fit()`` takes it again)."""
        self.folder.release()

    # ------------------------------------------------------------ checkpoints
    def _generators(self) -> dict[str, torch.Generator]:
        """The task's own generators, checkpointed as ``rng_<name>``."""
        return {}

    def _rank_state(self) -> dict[str, Any]:
        """What differs between the processes of a distributed run, besides their random
        generators (the language model: its carried state)."""
        return {}

    def _restore_rank_state(self, state: dict[str, Any]) -> None:
        pass

    def _own_state(self) -> dict[str, Any]:
        """This process's random generators and ``_rank_state``."""
        cpu, cuda = rng_state()
        state = {"rng_cpu": cpu, "rng_cuda": cuda}
        for name, generator in self._generators().items():
            state[f"rng_{name}"] = generator.get_state()
        state.update(self._rank_state())
        return state

    def _state(self) -> dict[str, Any]:
        """``last.pt``'s content (a collective call when several processes train)."""
        state = {
            "format": self.checkpoint_format,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "step": self.step,
            "elapsed": self.elapsed,
            "epoch_acc": [self.epoch_loss, self.epoch_tokens, self.epoch_batches],
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "changes": self.changes,
        }
        own = self._own_state()
        if self.world_size == 1:
            state.update(own)
        else:
            ranks: list[Any] = [None] * self.world_size
            dist.all_gather_object(ranks, _to(own, "cpu"))
            state["world_size"], state["ranks"] = self.world_size, ranks
        state.update(self._task_state())
        return state

    def _restore(self, state: dict[str, Any]) -> int:
        """Continue from a ``last.pt``; returns the epoch in progress."""
        saved_world = state.get("world_size", 1)
        if saved_world != self.world_size:
            raise CheckpointError(f"{self.folder.last} was written by {saved_world} "
                                  f"process(es) and this run has {self.world_size}; resume "
                                  f"it with torchrun --nproc_per_node={saved_world} (or "
                                  f"without torchrun for 1)")
        self.model.load_state_dict(state["model"])
        self._restore_task(state)  # may rebuild the optimiser (its kind is the task's)
        self.optimizer.load_state_dict(state["optimizer"])
        apply_learning_rate(self.optimizer, self.config.train.lr)  # may change on resume
        self.epoch, self.step, self.elapsed = state["epoch"], state["step"], state["elapsed"]
        acc = list(state["epoch_acc"])
        if len(acc) == 2:  # translation checkpoints before the loop: no batch count
            acc.append(state.get("position", 0))
        self.epoch_loss, self.epoch_tokens, self.epoch_batches = acc
        own = state if self.world_size == 1 else _to(state["ranks"][self.rank], self.device)
        set_rng_state(own["rng_cpu"], own.get("rng_cuda"))
        for name, generator in self._generators().items():
            generator.set_state(own[f"rng_{name}"].cpu())
        self._restore_rank_state(own)
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.changes = self.folder.change_history(state.get("changes", []), self.epoch,
                                                  self.step)
        return self.epoch

    def save(self) -> Path:
        """Write ``last.pt`` atomically (rank 0; every process returns once it is
        written, so none can read an older one)."""
        path = self.folder.save_last(self._state())
        if self.world_size > 1:
            dist.barrier()
        return path

    # ------------------------------------------------------------ one step
    def _lr_scale(self, batch: Any) -> float:
        """The factor on ``lr`` for this batch's step (AWD-LSTM: ``seq_len / bptt``)."""
        return 1.0

    def _batch_tokens(self, batch: Any) -> int:
        raise NotImplementedError

    def _micro_batches(self, batch: Any, parts: int) -> Sequence[Any]:
        raise NotImplementedError

    def _micro_loss(self, micro: Any, part: int) -> StepLoss:
        raise NotImplementedError

    def _diverged(self, what: str, step: int | None = None) -> TrainingDiverged:
        return diverged(what, epoch=self.epoch, step=self.step if step is None else step,
                        lr=self.config.train.lr, folder=self.folder)

    def _collective(self, values: list[float]) -> Tensor:
        """``values`` as a float64 tensor where the process group's backend reads it (the
        GPU for NCCL, else the CPU)."""
        device = self.device if dist.get_backend() == "nccl" else "cpu"
        return torch.tensor(values, dtype=torch.float64, device=device)

    def _all_sum(self, values: list[float]) -> list[float]:
        """``values`` summed over the processes (each process gets the sums)."""
        t = self._collective(values)
        dist.all_reduce(t)
        return t.tolist()

    def _from_rank0(self, values: list[float]) -> list[float]:
        """Rank 0's ``values``, on every process."""
        t = self._collective(values)
        dist.broadcast(t, 0)
        return t.tolist()

    def _train_step(self, batch: Any) -> float | Tensor:
        """One optimiser step on ``batch`` (this process's share of it); returns the
        batch's reported loss (over every process's share).

        A single process never waits for the device here: the loss stays a tensor and
        its checks (finite, not overflowing; the weights finite after the update) are
        queued for :meth:`_check_steps`, which reads them all back at once at a logging
        point and before anything is saved. Several processes compare their numbers
        every step (a collective waits anyway). Under ``train.amp=tf32`` the whole step,
        backward pass included, runs with TF32 matrix products."""
        with matmul_precision(self.precision):
            return self._step(batch)

    def _step(self, batch: Any) -> float | Tensor:
        t = self.config.train
        parts, world = t.accum_steps, self.world_size
        self.model.train()
        micros = [batch] if parts == 1 else self._micro_batches(batch, parts)
        tokens = self._batch_tokens(batch)
        # this process's share of the batch's tokens, times world (DDP averages gradients)
        total = self._all_sum([float(tokens)])[0] if world > 1 else tokens
        rank_scale = world * tokens / total if world > 1 else 1.0
        self._step_tokens, self._rank_tokens = int(total), tokens
        self.optimizer.zero_grad(set_to_none=True)
        reported = 0.0
        checks: list[tuple[Tensor, Tensor, float]] = []  # (objective, reported, share)
        for part, micro in enumerate(micros):
            last = part == len(micros) - 1
            sync = contextlib.nullcontext() if world == 1 or last else \
                self.forward_model.no_sync()  # all-reduce the gradients once, at the end
            with sync:
                with autocast(self.precision, self.device):
                    piece = self._micro_loss(micro, part)
                if world > 1:  # every process sees the same numbers and stops together
                    value, raw = piece.loss.item(), piece.report.item()
                    w = piece.share * tokens / total
                    value, raw, too_big = self._all_sum(
                        [value * w, raw * w, float(raw > self.max_loss)])
                    if too_big:
                        raw = math.inf
                    if not math.isfinite(value) or raw > self.max_loss:
                        raise self._diverged(
                            f"the loss became {raw if raw > self.max_loss else value}")
                else:  # checked with the step's others, later (_check_steps)
                    value, raw = piece.loss.detach(), piece.report.detach()
                    checks.append((value, raw, piece.share))
                weight = piece.share * rank_scale
                loss = piece.loss if parts == 1 and world == 1 else piece.loss * weight
                if self.scaler is not None:
                    loss = self.scaler.scale(loss)
                loss.backward()
            if world > 1:
                reported += raw  # already weighted by the piece's share
            else:
                reported = raw if parts == 1 else reported + raw * piece.share
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if t.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip)
        group = self.optimizer.param_groups[0]
        base_lr = group["lr"]
        group["lr"] = base_lr * self._lr_scale(batch)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        group["lr"] = base_lr
        if world > 1:
            bad = nonfinite_update(self.model)
            if bad:  # stop before a checkpoint could save them
                raise self._diverged(bad)
        else:
            finite = torch.isfinite(largest_weight(list(self.model.parameters())))
            self._unchecked.append((self.step, tokens, checks, finite))
        self.step += 1
        return reported

    def _check_steps(self) -> float | None:
        """Read back the queued steps' numbers at once (one wait for the device), add their
        losses to the epoch's, and raise :class:`~drillbook.errors.TrainingDiverged` at
        the first step whose loss was not finite or too large, or whose update left a
        weight non-finite, naming that step. Returns the last step's reported loss (None
        with nothing queued). Called at logging points, before every save and at the end
        of every epoch, so that no non-finite state is ever written."""
        queued, self._unchecked = self._unchecked, []
        if not queued:
            return None
        numbers = read_back([x for _, _, checks, _ in queued for v, r, _ in checks
                             for x in (v, r)])
        flags = torch.stack([f for *_, f in queued]).tolist()
        pieces = iter(zip(numbers[::2], numbers[1::2], strict=True))
        reported = None
        for (step, tokens, checks, _), finite in zip(queued, flags, strict=True):
            read = [next(pieces) for _ in checks]
            for value, raw in read:
                if not math.isfinite(value) or raw > self.max_loss:
                    raise self._diverged(
                        f"the loss became {raw if raw > self.max_loss else value}", step)
            if not finite:
                raise self._diverged(nonfinite_update(self.model) or "the update made a "
                                     "weight non-finite", step)
            if len(read) == 1:
                reported = read[0][1]
            else:  # the pieces' shares, added in the order the step added them
                reported = 0.0
                for (_, raw), (_, _, share) in zip(read, checks, strict=True):
                    reported = reported + raw * share
            self.epoch_loss += reported * tokens if self.token_weighted else reported
        return reported

    # ------------------------------------------------------------ epochs
    def _epoch_batches(self) -> Iterator[Any]:
        raise NotImplementedError

    def _epoch_progress(self) -> tuple[int, int]:
        raise NotImplementedError

    def _batch_done(self, batch: Any) -> None:
        """Called after each optimiser step on ``batch``."""

    def _new_epoch(self) -> None:
        """Move the task's batches to the next epoch."""

    def _end_epoch(self, seconds: float) -> dict[str, Any]:
        raise NotImplementedError

    def _summary(self, record: dict[str, Any]) -> str:
        raise NotImplementedError

    def _train_batches(self, start: float, started_elapsed: float,
                       max_minutes: float | None, max_steps: int | None) -> str | None:
        """Train the rest of the current epoch; return why it stopped early, or None."""
        t = self.config.train
        total, done = self._epoch_progress()
        bar = tqdm(total=total, initial=done, desc=f"epoch {self.epoch}",
                   disable=None if self.progress is None else not self.progress, leave=False)
        try:
            for batch in self._epoch_batches():  # from the saved position on
                loss = self._train_step(batch)
                tokens = self._step_tokens  # over every process
                if self.world_size > 1:  # checked already (the single process: later)
                    self.epoch_loss += loss * tokens if self.token_weighted else loss
                self.epoch_tokens += tokens
                self.epoch_batches += 1
                self._batch_done(batch)
                now = time.monotonic()
                self.elapsed = started_elapsed + now - start
                bar.update(1)
                line = bar.disable and now - self._last_line >= LINE_SECONDS
                if self.step % t.log_interval == 0 or line:  # a logging point
                    checked = self._check_steps()
                    loss = checked if checked is not None else loss
                    bar.set_postfix(loss=f"{loss:.3f}")
                    if line:
                        self._progress_line(loss, total)
                last_time, last_step = self._last_ckpt
                due = (now - last_time >= 60 * t.checkpoint_minutes or bool(
                    t.checkpoint_steps and self.step - last_step >= t.checkpoint_steps))
                stop = ("interrupted" if self._signal is not None
                        else "budget" if max_minutes is not None
                        and now - start >= 60 * max_minutes
                        else "steps" if max_steps is not None and self.step >= max_steps
                        else None)
                if self.world_size > 1:  # rank 0's clock decides for every process
                    stops = (None, "budget", "steps", "interrupted")
                    flags = self._from_rank0([float(due), float(stops.index(stop))])
                    due, stop = bool(flags[0]), stops[int(flags[1])]
                if due or stop:
                    self._check_steps()  # never save a state that has not been checked
                    self.save()
                    self._last_ckpt = (now, self.step)
                    self._checkpoints += 1
                if stop:
                    return stop
            return None
        finally:
            bar.close()

    def _progress_line(self, loss: float, total: int) -> None:
        """Where no bar is drawn (a log file, a pipe): a line every
        :data:`LINE_SECONDS` within an epoch, so a long epoch shows it is alive."""
        self._last_line = time.monotonic()
        if self.progress is False or not self.writes:
            return
        where = f"epoch {self.epoch}: {self.epoch_batches:,}/{total:,} updates"
        print(f"{self.label}: {where}" if self.label else where,
              f"loss {loss:.3f}", sep=" | ", file=sys.stderr, flush=True)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _run(self, max_epochs: int | None, max_minutes: float | None,
             max_steps: int | None) -> tuple[str, dict[str, Any] | None]:
        """Train until the config's epochs or a limit; returns ``(reason, last record)``
        with reason ``done``, ``epochs``, ``converged``, ``budget`` or ``steps``."""
        t = self.config.train
        start = time.monotonic()
        started_elapsed = self.elapsed
        self._last_ckpt = (start, self.step)
        self._last_line = start  # the first progress line comes within LINE_SECONDS
        final_epoch = t.epochs if max_epochs is None else min(t.epochs, max_epochs)
        record = None
        while self.epoch <= final_epoch and not self.finished:
            epoch_start = time.monotonic()
            before = (self.epoch_batches, self.epoch_tokens)
            self._checkpoints, self._events = 0, []
            # A checkpoint taken after an epoch's last batch resumes straight into its
            # validation: there are no batches left in this epoch.
            stop = self._train_batches(start, started_elapsed, max_minutes, max_steps)
            if stop is not None:
                return stop, record
            self._check_steps()  # the epoch's last steps, before its record and checkpoint
            self._sync()
            seconds = time.monotonic() - epoch_start
            # this call's share of the epoch: (seconds, batches, tokens)
            self.epoch_timing = (seconds, self.epoch_batches - before[0],
                                 self.epoch_tokens - before[1])
            record = self._end_epoch(seconds)
            val = record.get("val_loss", 0.0)
            if not (math.isfinite(val) and val <= self.max_val_loss):  # never saved
                raise self._diverged(f"the validation loss became {val:.4g} nats, over "
                                     f"{self.max_val_loss:.4g} (twice a uniform guess's)")
            record["precision"] = precision_label(self.precision)
            record["world_size"] = self.world_size  # processes: the batch is theirs in all
            record["tokens_per_second"] = (self.epoch_timing[2] / seconds if seconds > 0
                                           else None)
            if self.writes:
                self.folder.append_log(record)
            self._new_epoch()
            self.epoch += 1
            self.epoch_loss, self.epoch_tokens, self.epoch_batches = 0.0, 0, 0
            self.save()
            self._last_ckpt = (time.monotonic(), self.step)
            self._say(record, time.monotonic() - epoch_start)
            if self._signal is not None:  # asked to stop during validation
                return "interrupted", record
        reason = ("converged" if self.finished else "done" if self.epoch > t.epochs
                  else "epochs")
        return reason, record

    def _best(self) -> dict[str, float]:
        """The task's best validation metric so far, as :class:`RunStatus` fields
        (``{"best_val_loss": ...}`` or ``{"best_val_bleu": ...}``)."""
        return {}

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
            with self._stop_on_signals():
                reason, record = self._run(max_epochs, max_minutes, max_steps)
        except (torch.OutOfMemoryError, RuntimeError, MemoryError) as err:
            self.folder.release(abandon=True)  # a new run that saved nothing leaves nothing
            if isinstance(err, ResourceError) or not is_out_of_memory(err):
                raise
            raise ResourceError(
                f"{self.device} ran out of memory at epoch {self.epoch}, step {self.step} "
                f"({str(err).splitlines()[0][:120]}); lower train.batch_size, split each "
                f"batch with train.accum_steps, or make the model smaller"
                + ("; resume from the last checkpoint with --resume"
                   if self.folder.saved_step is not None else "")) from err
        except BaseException:
            self.folder.release(abandon=True)  # a new run that saved nothing leaves nothing
            raise
        self.folder.release()
        if reason == "interrupted":
            raise TrainingInterrupted(
                f"stopped by {signal.Signals(self._signal).name} at epoch {self.epoch}, step "
                f"{self.step}; {self.folder.last} holds that step: continue with the same "
                f"command plus --resume")
        return RunStatus(reason, self.epoch - 1, record=record, **self._best())

    @contextlib.contextmanager
    def _stop_on_signals(self):
        """While training: Ctrl-C (SIGINT) or SIGTERM asks the loop to stop after the
        current step and save it (:class:`~drillbook.errors.TrainingInterrupted`); a
        second signal stops at once, as without the handler. Only in the main thread
        (where Python delivers signals); the previous handlers come back afterwards."""
        self._signal = None
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def ask(signum, frame):
            if self._signal is not None:  # the second time: stop now
                raise KeyboardInterrupt
            self._signal = signum
            if self.writes:
                print(f"{signal.Signals(signum).name}: stopping after this step to save it "
                      f"(again to stop at once)", file=sys.stderr, flush=True)

        previous = {sig: signal.signal(sig, ask) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _say(self, record: dict[str, Any], seconds: float) -> None:
        """The epoch's console line on stderr (not with ``progress=False``)."""
        if self.progress is False or not self.writes:
            return
        events = list(self._events)
        if self._checkpoints:
            events.append(f"{self._checkpoints} mid-epoch checkpoint(s)")
        events.append("checkpoint")
        rate = record.get("tokens_per_second")
        where = f"epoch {record['epoch']}/{self.config.train.epochs}"
        parts = [f"{self.label}: {where}" if self.label else where,
                 f"{record['step']:,} updates",
                 f"train loss {record['train_loss']:.3f}", self._summary(record),
                 f"lr {record['lr']:g}", f"{seconds:.0f}s",
                 f"{rate:,.0f} tok/s" if rate is not None else "- tok/s", ", ".join(events)]
        print(" | ".join(parts), file=sys.stderr, flush=True)


#: seconds between two progress lines of an epoch where no bar is drawn
LINE_SECONDS = 30.0
