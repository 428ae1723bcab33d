"""The one training loop that every task's trainer shares.

:class:`TrainingLoop` owns everything that is not about the task (the device, the seed,
the run folder, checkpoints, limits, divergence checks, precision, several processes,
the log and the console); a task supplies its model, batches, loss and end-of-epoch
evaluation through the hooks of :class:`~drillbook.train.hooks.TaskHooks`. One optimiser
step is :class:`~drillbook.train.step.OptimizerStep`'s; what the run keeps (opening its
folder, ``last.pt``, the checks before anything is saved) is
:class:`~drillbook.train.run_state.RunState`'s, and how a run ended
:class:`~drillbook.train.status.RunStatus`.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm  # plain text bars: no widget warnings in notebooks

from ..configs import SectionedConfig
from ..errors import ConfigError, ResourceError, TrainingInterrupted
from ..precision import Precision, precision_label, precision_named, resolve_precision
from ..runtime import is_out_of_memory, resolve_device
from .checkpoint import rng_state
from .console import epoch_line, progress_line, say, stop_on_signals
from .distributed import CollectiveReducer, rank_and_world_size
from .graphs import GraphedStep, takes_graphs
from .hooks import TaskHooks
from .plateau import logged_plateau, rule_of
from .run_folder import PendingCheckpoint
from .run_state import RunState
from .status import RunStatus, run_to_end
from .step import LocalReducer, OptimizerStep, StepLoss, largest_weight

__all__ = ["LINE_SECONDS", "RunStatus", "StepLoss", "TrainingLoop", "largest_weight",
           "run_to_end", "stop_on_signals"]

#: seconds between two progress lines of an epoch where no bar is drawn
LINE_SECONDS = 30.0


class TrainingLoop(RunState, TaskHooks):
    """The shared machinery of a resumable training run.

    Constructing one opens the run folder (:mod:`drillbook.train.run_folder`: lock, checks
    before any write, a log that matches the checkpoint), seeds torch with
    ``train.seed``, builds the task (:meth:`~drillbook.train.hooks.TaskHooks.build`),
    restores ``last.pt`` on resume, and sets up the precision
    (:mod:`drillbook.precision`), ``torch.compile`` and the optimiser step
    (:class:`~drillbook.train.step.OptimizerStep`). :meth:`fit` then trains epoch by
    epoch: the task's batches, one step each, a checkpoint when one is due, the task's
    validation and log record at the end of each epoch, and one console line per epoch.

    **Divergence**: a step's loss that is not finite or above :attr:`max_loss`, or
    non-finite weights after its update, raise :class:`~drillbook.errors.TrainingDiverged`
    before anything is saved (a single process reads its steps' numbers back at logging
    points and before every save, not per step; the message names the step). So does a
    validation loss that is not finite or above :attr:`max_val_loss`; such an epoch's
    state is never saved, so every ``last.pt`` is one to resume from.

    **Checkpoint cadence** (one rule for both tasks): ``last.pt`` is written after every
    epoch, during an epoch once ``train.checkpoint_minutes`` have passed or
    ``train.checkpoint_steps`` steps were taken since the last one, and when a time or step
    limit stops the run.

    **What ``last.pt`` holds** besides the task's own state: ``format``, ``model``,
    ``optimizer``, ``epoch`` (in progress), ``step`` (optimiser steps so far), ``elapsed``
    (training seconds), ``epoch_acc`` (``[loss sum, tokens, batches]`` of the epoch so far),
    ``rng_cpu``, ``rng_cuda`` (every CUDA device's generator; empty without CUDA), what the
    task's ``process_state`` adds, ``scaler`` (the fp16 gradient scaler's state, or None)
    and ``changes`` (resumable values changed on resume).

    **Precision** (``train.amp``, :func:`~drillbook.precision.resolve_precision`): ``fp32``
    (float32), ``bf16`` (bfloat16 autocast; on CPU too), ``fp16`` (float16 autocast with a
    :class:`torch.amp.GradScaler`, whose state is checkpointed), ``tf32`` (float32 with
    TF32 matrix products in the training step, on a GPU that has them), or ``auto`` (bf16
    for a mixture head on a GPU with bfloat16, float32 otherwise, as measured). The old
    values of config files still load (``false`` and ``off`` = ``fp32``, ``true`` =
    ``bf16``).

    **Console**: a tqdm bar per epoch only when stderr is a terminal (``progress=None``) or
    when asked (``progress=True``), and one line per epoch on stderr (unless
    ``progress=False``)::

        epoch 3/500 | 1,204 updates | train loss 4.812 | val ppl 131.20 | lr 30 | 61s
        | 9,850 tok/s | saved best, checkpoint

    (one line on the console; broken here to fit). Where no bar is drawn, a line every
    :data:`LINE_SECONDS` within a long epoch. Timing never synchronises CUDA per step: the
    epoch's seconds are read once, after one synchronisation at the end of its batches.

    **Several processes** (``torchrun --nproc_per_node=N -m drillbook.cli train ...``; the
    command calls :func:`~drillbook.train.distributed.init_distributed`): when a
    ``torch.distributed`` process group is up, the model is wrapped in
    :class:`~torch.nn.parallel.DistributedDataParallel`, each process trains on its own
    share of every batch (the language model: its columns of the training stream;
    translation: its sentences of each batch) and the step takes a
    :class:`~drillbook.train.distributed.CollectiveReducer` (the pieces' losses weighted by
    their share of the batch's tokens across processes, the reported losses all-reduced).
    Rank 0 alone holds the run folder, decides when to checkpoint or stop (broadcast each
    step) and writes; the others read ``last.pt`` on resume and write nothing. ``last.pt``
    then holds ``world_size`` and, under ``ranks``, each process's own state (its random
    generators and its ``process_state``), so a run resumes with the same number of
    processes (a different number is refused). Each process draws its own dropout masks
    (seeded ``train.seed + rank`` after the model is built, which is identical everywhere).

    Args:
        config: the validated config; its ``train`` section extends
            :class:`~drillbook.configs.base.LoopConfig`.
        run_dir: the run folder.
        device: where to train (default :func:`~drillbook.runtime.default_device`).
        resume: continue from ``run_dir/last.pt``.
        progress: ``None``: a bar only on a terminal and one line per epoch on stderr;
            ``True``: a bar always; ``False``: nothing on the console.
        graphs: take the graph-ready step (a task whose trainer has one,
            :attr:`~drillbook.train.hooks.TaskHooks.graph_ready`); where it does not apply
            it is refused before anything is written
            (:func:`~drillbook.train.graphs.takes_graphs`, the one place that decides).

    Attributes:
        precision: the resolved ``train.amp``, its record
            (:class:`~drillbook.precision.Precision`: ``fp32``, ``bf16``, ``fp16`` or
            ``tf32``, and what each needs).
        graphs: whether the step is the graph-ready one
            (:class:`~drillbook.train.graphs.GraphedStep`).
        scaler: the fp16 gradient scaler, or None.
        model: the task's model (its weights are what is saved).
        forward_model: what the training step calls: the model, or its
            DistributedDataParallel wrapper.
        stepper: the optimiser step (:class:`~drillbook.train.step.OptimizerStep`, or,
            with ``graphs``, the same step body made graph-ready and captured on CUDA,
            :class:`~drillbook.train.graphs.GraphedStep`).
        reducer: what the step shares with other processes and how its numbers are
            checked (:class:`~drillbook.train.step.LocalReducer` or
            :class:`~drillbook.train.distributed.CollectiveReducer`).
        rank: this process's rank (0 without ``torchrun``).
        world_size: how many processes train together (1 without ``torchrun``).
        epoch: the epoch in progress (1-based).
        step: optimiser steps so far.
        elapsed: training seconds so far, over every call to :meth:`fit`.
        label: what the console lines start with (``reproduce`` names its row, ``"row 3/7
            drill"``).
        random_state: torch's random state when the trainer was ready to train (what a
            runner that interleaves several trainers in one process restores before
            each one's steps, :mod:`drillbook.train.interleaver`).
    """

    #: the ``"format"`` of this task's ``last.pt``
    checkpoint_format: str = ""
    #: a reported loss above this is divergence (the language model: the largest loss
    #: whose perplexity is finite)
    max_loss: float = math.inf
    #: the log record's validation metric the stopping rule reads, and whether higher is
    #: better (a translation's BLEU) or lower (a language model's perplexity)
    plateau_metric: str = "val_ppl"
    higher_is_better: bool = False
    #: how the epoch's training loss averages its batches, ``False`` as the mean of the
    #: batches' losses (the language model), ``True`` weighted by their tokens (translation)
    token_weighted: bool = False
    #: the epoch record's metric in the console line (a format string over the record)
    metric_line: str = ""

    #: the config class this trainer trains (a subclass of
    #: :class:`~drillbook.configs.SectionedConfig`); another is refused in one line
    config_type: type = SectionedConfig

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Refuse, in one line naming the fix, what is not a config this trainer trains: a
        config name, a dict, or the other task's config.

        Raises:
            ConfigError: ``LanguageModelTrainer trains language-model configs; 'multi30k/...' is a
                translation config: ...``.
        """
        if isinstance(config, cls.config_type):
            return
        name = cls.__name__
        if isinstance(config, str):
            fix = f"pass drillbook.configs.get_config({config!r})"
            raise ConfigError(f"{name} takes a config, not its name {config!r}: {fix}")
        if isinstance(config, dict):
            raise ConfigError(f"{name} takes a config, not a dict: pass "
                              f"drillbook.configs.config_from_dict(...) of it")
        if isinstance(config, SectionedConfig):
            raise ConfigError(f"{name} trains {cls.config_type.task} configs; "
                              f"{config.name!r} is a {config.task} config: train it with "
                              f"its task's trainer, drillbook.train.task_of(config).trainer")
        raise ConfigError(f"{name} takes a config (drillbook.configs.get_config(NAME)), got "
                          f"{type(config).__name__}")

    def __init__(self, config: SectionedConfig, run_dir: str | Path, *,
                 device: str | torch.device | None = None, resume: bool = False,
                 progress: bool | None = None, graphs: bool = False) -> None:
        self.check_config(config)
        # whether the step is the graph-ready one (refused here, before anything is
        # written, where it does not apply)
        self.graphs = graphs and takes_graphs(type(self), config, device, True)
        self.config, self.run_dir, self.progress = config, Path(run_dir), progress
        self.label = ""
        self.rank, self.world_size = rank_and_world_size()
        if device is None and self.world_size > 1 and torch.cuda.is_available():
            device = f"cuda:{torch.cuda.current_device()}"  # LOCAL_RANK's (init_distributed)
        self.device = resolve_device(device)
        # where training stands (what last.pt restores)
        self.epoch, self.step, self.elapsed = 1, 0, 0.0
        self.epoch_loss, self.epoch_tokens, self.epoch_batches = 0.0, 0, 0
        self.changes: list[dict[str, Any]] = []
        self.finished = self.plateaued = False  # ended early: by the task, by the rule
        self.plateau_rule = rule_of(config.train, self.higher_is_better)  # None: no rule
        self.events: list[str] = []  #: words for this epoch's console line
        self.stop_signal: int | None = None  #: a stop signal received while training
        self._pending: PendingCheckpoint | None = None  # a checkpoint not yet written
        self._last_sane = True  # last.pt's own loss was not seen to be insane
        if self.world_size > 1:
            self._open_together(resume)
        else:
            self._open(resume)
        #: the epochs the run folder held when this trainer opened it (resumed from): a
        #: result file's sitting starts after them
        self.epochs_before = self.epoch - 1
        self.reducer: LocalReducer | CollectiveReducer = (
            LocalReducer(self.model, self.max_loss, self._diverged) if self.world_size == 1
            else CollectiveReducer(self.model, self.device, self.max_loss, self._diverged))
        t = config.train
        self.stepper = (GraphedStep if self.graphs else OptimizerStep)(
            self, self.model, forward_model=self.forward_model, clip=t.clip,
            parts=t.accum_steps, precision=self.precision, device=self.device,
            scaler=self.scaler, reducer=self.reducer)
        self.random_state = rng_state()

    def _build(self, state: dict[str, Any] | None) -> None:
        """What the run folder calls between reading ``last.pt`` and restoring it: seed,
        the task's :meth:`build`, then the precision and ``compile``."""
        t = self.config.train
        torch.manual_seed(t.seed)
        self.build(state)
        head = getattr(self.model, "head", None)
        self.precision: Precision = precision_named(resolve_precision(
            t.amp, self.device, mixture=getattr(head, "is_mixture", False)))
        if self.precision.dtype == torch.float16 and self.device.type == "cpu" and any(
                isinstance(m, torch.nn.RNNBase) for m in self.model.modules()):
            raise ConfigError(f"train.amp={self.precision.name} on the CPU: torch's CPU LSTM "
                              f"has no float16 kernel; use train.amp=bf16 or fp32 here "
                              f"(float16 is for CUDA)")
        self.scaler = (torch.amp.GradScaler(self.device.type) if self.precision.scaler
                       else None)
        if t.compile:
            self.model.compile()  # in place: state_dict keys stay the same
        self.forward_model: torch.nn.Module = self.model  # DDP's wrapper, with torchrun
        if self.rank > 0:  # its own dropout masks; the model is built already
            torch.manual_seed(t.seed + self.rank)

    @property
    def max_val_loss(self) -> float:
        """The validation loss (nats per token) above which the run counts as diverged
        and its state is not saved (default :attr:`max_loss`, what :attr:`val_bound`
        says in words; the language model's bound is twice a uniform guess's)."""
        return self.max_loss

    #: :attr:`max_val_loss` in words, for the message that names it
    val_bound = "the largest training loss taken as sane"

    @property
    def writes(self) -> bool:
        """Whether this process writes files and console lines (rank 0)."""
        return self.rank == 0

    def close(self) -> None:
        """Give up the run folder's lock now (:meth:`fit` takes it again)."""
        self.folder.release()

    # ------------------------------------------------------------ one step
    def train_step(self, batch: Any) -> Tensor | float:
        """One optimiser step on ``batch`` (this process's share of it) by
        :attr:`stepper`; returns the batch's reported loss (over every process's share).

        A single process never waits for the device here: the loss stays a tensor and its
        checks are queued for :meth:`check_steps`. Several processes compare their numbers
        every step (a collective waits anyway)."""
        loss = self.stepper(batch, self.step)
        self.step += 1
        return loss

    # ------------------------------------------------------------ epochs
    def _train_batches(self, start: float, started_elapsed: float,
                       max_minutes: float | None, max_steps: int | None
                       ) -> Generator[None, None, str | None]:
        """Train the rest of the current epoch, yielding after each step; returns why it
        stopped early, or None."""
        t = self.config.train
        total, done = self.epoch_progress()
        bar = tqdm(total=total, initial=done, desc=f"epoch {self.epoch}",
                   disable=None if self.progress is None else not self.progress, leave=False)
        try:
            for batch in self.batches():  # from the saved position on
                loss = self.train_step(batch)
                self.epoch_tokens += self.stepper.tokens  # over every process
                self.epoch_batches += 1
                now = time.monotonic()
                self.elapsed = started_elapsed + now - start
                bar.update(1)
                line = bar.disable and now - self._last_line >= LINE_SECONDS
                if self.step % t.log_interval == 0 or line:  # a logging point
                    checked = self.check_steps()
                    loss = checked if checked is not None else loss
                    bar.set_postfix(loss=f"{loss:.3f}")
                    if line:
                        self._progress_line(loss, total)
                last_time, last_step = self._last_ckpt
                due = (now - last_time >= 60 * t.checkpoint_minutes or bool(
                    t.checkpoint_steps and self.step - last_step >= t.checkpoint_steps))
                stop = ("interrupted" if self.stop_signal is not None
                        else "budget" if max_minutes is not None
                        and now - start >= 60 * max_minutes
                        else "steps" if max_steps is not None and self.step >= max_steps
                        else None)
                if self.world_size > 1:  # rank 0's clock decides for every process
                    stops = (None, "budget", "steps", "interrupted")
                    flags = self.reducer.from_rank0([float(due), float(stops.index(stop))])
                    due, stop = bool(flags[0]), stops[int(flags[1])]
                if self._pending is not None and not due:  # its own loss is this step's
                    self.check_steps()
                if due or stop:
                    self.check_steps()  # never save a state that has not been checked
                    if stop:
                        self.save()
                    else:
                        self._save_within_epoch()
                    self._last_ckpt = (now, self.step)
                    self._checkpoints += 1
                if stop:
                    return stop
                yield
            return None
        finally:
            bar.close()

    def _progress_line(self, loss: float, total: int) -> None:
        """Where no bar is drawn (a log file, a pipe): a line every
        :data:`LINE_SECONDS` within an epoch, so a long epoch shows it is alive."""
        self._last_line = time.monotonic()
        if self.progress is not False and self.writes:
            say(progress_line(self.label, self.epoch, self.epoch_batches, total, loss))

    def _end_of_epoch(self, epoch_start: float, before: tuple[int, int]) -> dict[str, Any]:
        """The epoch's batches are done: check them, time them, let the task validate,
        refuse a diverged validation, log, move on and save; returns the record."""
        self.check_steps()  # the epoch's last steps, before its record and checkpoint
        if self.device.type == "cuda":  # this stream's work (other runs' go on)
            torch.cuda.current_stream(self.device).synchronize()
        seconds = time.monotonic() - epoch_start
        # this call's share of the epoch: (seconds, batches, tokens)
        self.epoch_timing = (seconds, self.epoch_batches - before[0],
                             self.epoch_tokens - before[1])
        record = self.end_epoch(seconds)
        val = record.get("val_loss", 0.0)
        if not (math.isfinite(val) and val <= self.max_val_loss):  # never saved
            bound = (f", over {self.max_val_loss:.4g} ({self.val_bound})"
                     if math.isfinite(self.max_val_loss) else "")
            # the state at this step: last.pt's too, if it was saved after the last batch
            raise self._diverged(f"the validation loss became {val:.4g} nats{bound}")
        record["precision"] = precision_label(self.precision)
        record["world_size"] = self.world_size  # processes: the batch is theirs in all
        record["tokens_per_second"] = (self.epoch_timing[2] / seconds if seconds > 0
                                       else None)
        if self.writes:
            self.folder.append_log(record)
        self.next_epoch()
        self.epoch += 1
        self.epoch_loss, self.epoch_tokens, self.epoch_batches = 0.0, 0, 0
        self.save()
        self._last_ckpt = (time.monotonic(), self.step)
        if self._check_plateau():
            self.events.append(f"plateau reached ({self.plateau_rule.describe()})")
        self._say(record, time.monotonic() - epoch_start)
        return record

    def _check_plateau(self) -> bool:
        """Whether the run's whole log has reached its plateau (then it is over)."""
        if logged_plateau(self.run_dir, self.plateau_rule, self.plateau_metric):
            self.finished = self.plateaued = True
        return self.plateaued

    def _epochs(self, max_epochs: int | None, max_minutes: float | None,
                max_steps: int | None) -> Generator[None, None, tuple[str, Any]]:
        """Train until the config's epochs, its stopping rule or a limit, yielding after
        each step; returns ``(reason, last record)``, reason ``done``, ``epochs``,
        ``converged``, ``plateau``, ``budget``, ``steps`` or ``interrupted``."""
        t = self.config.train
        self._check_plateau()  # a resumed run that had reached it trains no further
        start = time.monotonic()
        started_elapsed = self.elapsed
        self._last_ckpt = (start, self.step)
        self._last_line = start  # the first progress line comes within LINE_SECONDS
        final_epoch = t.epochs if max_epochs is None else min(t.epochs, max_epochs)
        record = None
        while self.epoch <= final_epoch and not self.finished:
            epoch_start = time.monotonic()
            before = (self.epoch_batches, self.epoch_tokens)
            self._checkpoints, self.events = 0, []
            # A checkpoint taken after an epoch's last batch resumes straight into its
            # validation: there are no batches left in this epoch.
            stop = yield from self._train_batches(start, started_elapsed, max_minutes,
                                                  max_steps)
            if stop is not None:
                return stop, record
            record = self._end_of_epoch(epoch_start, before)
            if self.stop_signal is not None:  # asked to stop during validation
                return "interrupted", record
        reason = ("plateau" if self.plateaued else "converged" if self.finished
                  else "done" if self.epoch > t.epochs else "epochs")
        return reason, record

    def training(self, max_epochs: int | None = None, max_minutes: float | None = None,
                 max_steps: int | None = None) -> Generator[None, None, RunStatus]:
        """:meth:`fit` one step at a time: a generator that yields after each optimiser
        step (an epoch's validation, log record and checkpoint come with its last step)
        and returns the :class:`RunStatus`; :func:`run_to_end` drives it. Stop signals
        are the caller's (:func:`stop_on_signals`). Several trainers in one process can
        be interleaved step by step this way (:mod:`drillbook.train.interleaver`)."""
        self.folder.acquire()
        try:
            reason, record = yield from self._epochs(max_epochs, max_minutes, max_steps)
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
                f"stopped by {signal.Signals(self.stop_signal).name} at epoch {self.epoch}, "
                f"step {self.step}; {self.folder.last} holds that step: continue with the "
                f"same command plus --resume")
        return RunStatus(reason, self.epoch - 1, record=record, **self.best())

    def fit(self, max_epochs: int | None = None, max_minutes: float | None = None,
            max_steps: int | None = None) -> RunStatus:
        """Train until the config's epochs, or a limit given here, whichever comes first.

        Args:
            max_epochs: stop after this many *completed* epochs in total.
            max_minutes: wall-clock budget for this call; the run checkpoints and stops.
            max_steps: stop after this many optimiser steps in total (tests use it).

        The run folder stays locked until this returns (or raises). Ctrl-C or SIGTERM
        stops after the current step and saves it (:func:`stop_on_signals`).

        Raises:
            TrainingDiverged: a non-finite (or overflowing) loss, or non-finite weights
                after a step; ``last.pt`` keeps the last checked state.
            TrainingInterrupted: stopped by a signal, after saving the step it stopped at.
            CheckpointError: a checkpoint could not be written (disk full).
        """
        with stop_on_signals([self]):
            return run_to_end(self.training(max_epochs, max_minutes, max_steps))

    def _say(self, record: dict[str, Any], seconds: float) -> None:
        """The epoch's console line on stderr (not with ``progress=False``)."""
        if self.progress is False or not self.writes:
            return
        events = list(self.events)
        if self._checkpoints:
            events.append(f"{self._checkpoints} mid-epoch checkpoint(s)")
        events.append("checkpoint")
        say(epoch_line(self.label, record, self.config.train.epochs,
                       self.metric_line.format(**record), seconds, events))
