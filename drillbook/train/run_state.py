"""What a training run keeps and how it is kept: opening its run folder and building its
task (:mod:`drillbook.train.run_folder`), the content of ``last.pt`` and restoring it, saving,
and the deferred checks of the steps taken, so that no state that diverged is ever
written. :class:`RunState` is the part of :class:`~drillbook.train.loop.TrainingLoop`
that holds them; the loop's epochs and steps are in :mod:`drillbook.train.loop`."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from ..errors import CheckpointError, ResourceError, RunFolderError, TrainingDiverged
from ..runtime import is_out_of_memory
from .checkpoint import rng_state, set_rng_state
from .distributed import DDP, all_sum
from .optimizers import apply_learning_rate
from .run_folder import FollowerFolder, open_run_folder
from .step import diverged

__all__ = ["RunState"]


def _to(obj: Any, device: torch.device | str) -> Any:
    """``obj`` (tensors in lists, tuples and dicts) on ``device``."""
    if isinstance(obj, Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


class RunState:
    """Opening, saving and restoring a training run, and checking its steps: the methods of
    :class:`~drillbook.train.loop.TrainingLoop` that keep its state (the loop sets the
    attributes they read: its config, device, rank, run folder, model, optimiser and the
    counters of where training stands)."""

    # ------------------------------------------------------------ opening
    def _open(self, resume: bool) -> None:
        """Open the run folder, seed, build and (on resume) restore, in the safe order."""
        self.folder = (open_run_folder(self.run_dir, self.config, resume) if self.rank == 0
                       else FollowerFolder(self.run_dir, resume))
        try:
            self.folder.start(self.checkpoint_format, self.device, build=self._build,
                              restore=self._restore)
        except (torch.OutOfMemoryError, RuntimeError, MemoryError) as err:
            if isinstance(err, ResourceError) or not is_out_of_memory(err):
                raise
            raise ResourceError(f"{self.device} ran out of memory building the model "
                                f"({str(err).splitlines()[0][:120]}); make the model smaller "
                                f"or use a device with more memory") from err

    def _open_together(self, resume: bool) -> None:
        """Every process opens its side of the run folder; if one fails, all stop."""
        error: BaseException | None = None
        try:
            self._open(resume)
        except BaseException as err:  # told to the others before it is raised
            error = err
        failed = all_sum([1.0 if error else 0.0], self.device)[0]
        if error is not None:
            raise error
        if failed:
            self.folder.release()
            raise RunFolderError(f"another process of this run could not open "
                                 f"{self.run_dir}; see its message (rank 0's names the fix)")
        # after every process has its weights: DDP's construction is collective too
        self.forward_model = DDP(
            self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)

    # ------------------------------------------------------------ checkpoints
    def _own_state(self) -> dict[str, Any]:
        """This process's random generators and ``process_state``."""
        cpu, cuda = rng_state()
        return {"rng_cpu": cpu, "rng_cuda": cuda, **self.process_state()}

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
        state.update(self.task_state())
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
        self.load_task_state(state)  # may rebuild the optimiser (its kind is the task's)
        self.optimizer.load_state_dict(state["optimizer"])
        apply_learning_rate(self.optimizer, self.config.train.lr)  # may change on resume
        self.epoch, self.step, self.elapsed = state["epoch"], state["step"], state["elapsed"]
        acc = list(state["epoch_acc"])
        if len(acc) == 2:  # translation checkpoints before the loop: no batch count
            acc.append(state.get("position", 0))
        self.epoch_loss, self.epoch_tokens, self.epoch_batches = acc
        own = state if self.world_size == 1 else _to(state["ranks"][self.rank], self.device)
        set_rng_state(own["rng_cpu"], own.get("rng_cuda"))
        self.load_process_state(own)
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.changes = self.folder.change_history(state.get("changes", []), self.epoch,
                                                  self.step)
        return self.epoch

    def save(self) -> None:
        """Write ``last.pt`` atomically (rank 0; every process returns once it is
        written, so none can read an older one)."""
        self._pending = None  # superseded
        self.folder.save_last(self._state())
        self._last_sane = True  # checked, validated, or not yet refuted (a limit's stop)
        if self.world_size > 1:
            dist.barrier()

    def _save_within_epoch(self) -> None:
        """A periodic checkpoint during an epoch: serialised now, written by
        :meth:`check_steps` once its state's own loss (the next step's) is seen to be
        sane; until then the previous ``last.pt`` stays."""
        self._pending = self.folder.prepare_last(self._state())

    # ------------------------------------------------------------ checks
    def _diverged(self, what: str, step: int | None = None,
                  own_loss: bool = True) -> TrainingDiverged:
        """The error for ``what`` at ``step`` (default the current one). ``own_loss``: the
        state the step started from failed (its loss, or its validation); else the state
        its update left. ``last.pt`` is offered for resuming unless it is the failed
        state, or its own loss was seen to be insane."""
        step = self.step if step is None else step
        if not own_loss:  # the step's own loss passed: its starting state may be kept
            self.check_steps()
        failed = step if own_loss else step + 1
        if failed == self.folder.saved_step:
            self._last_sane = False
        return diverged(what, epoch=self.epoch, step=step, lr=self.config.train.lr,
                        folder=self.folder, resumable=self._last_sane)

    def _sane(self, loss: float) -> bool:
        """Whether a state whose own reported loss is ``loss`` is one to resume from:
        finite and not above :attr:`max_val_loss`."""
        return math.isfinite(loss) and loss <= self.max_val_loss

    def check_steps(self) -> float | None:
        """Read back the steps taken since the last call (one wait for the device), add
        their losses to the epoch's, and raise :class:`~drillbook.errors.TrainingDiverged`
        at the first step whose loss was not finite or too large, or whose update left a
        weight non-finite, naming that step. Returns the last step's reported loss (None
        with none taken). Called at logging points, before every save and at the end of
        every epoch, so that no non-finite state is ever written.

        Each step's loss is also its starting state's own loss: a checkpoint taken within
        the epoch is written once the next step's loss is read back sane, and dropped
        otherwise; a ``last.pt`` whose own loss is insane is never offered for resuming."""
        reported = None
        for checked in self.reducer.check():
            reported = checked.loss
            self.epoch_loss += (checked.loss * checked.tokens if self.token_weighted
                                else checked.loss)
            sane = self._sane(checked.loss)
            if checked.step == self.folder.saved_step:
                self._last_sane = self._last_sane and sane
            pending = self._pending
            if pending is not None and checked.step == pending.step:
                self._pending = None
                if sane:
                    self.folder.commit_last(pending)
                    self._last_sane = True
        return reported
