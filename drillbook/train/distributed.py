"""Several processes training one run (``torchrun``): joining the process group, this
process's rank, the model wrapper the training step calls, and the reducer the step
takes in place of the single process's (:class:`CollectiveReducer`). How the loop shares
the work is :class:`drillbook.train.loop.TrainingLoop`'s docstring."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .step import Checked, nonfinite_update

__all__ = ["DDP", "CollectiveReducer", "all_sum", "distributed", "init_distributed",
           "rank_and_world_size"]


def init_distributed() -> bool:
    """Join the process group ``torchrun`` describes (``WORLD_SIZE`` > 1 in the
    environment), with NCCL on CUDA and gloo otherwise; each process on CUDA takes GPU
    ``LOCAL_RANK``. Returns whether a group is up (False: a single process, nothing
    done)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if cuda else "gloo")
    return True


@contextlib.contextmanager
def distributed() -> Iterator[int]:
    """Run the enclosed training in ``torchrun``'s process group, if there is one
    (:func:`init_distributed`), and leave the group afterwards. Yields this process's
    rank (0 for a single process): only rank 0 should print results."""
    started = not (dist.is_available() and dist.is_initialized()) and init_distributed()
    try:
        yield rank_and_world_size()[0]
    finally:
        if started:
            dist.destroy_process_group()


def rank_and_world_size() -> tuple[int, int]:
    """``(rank, world size)`` of the current process group, ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class DDP(DistributedDataParallel):
    """DistributedDataParallel that lends the wrapped model's attributes (``head``,
    ``encoder``, ``pad_id``), so the tasks' loss functions take it for the model."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


def _collective(values: list[float], device: torch.device) -> torch.Tensor:
    """``values`` as a float64 tensor where the process group's backend reads it (the
    GPU for NCCL, else the CPU)."""
    return torch.tensor(values, dtype=torch.float64,
                        device=device if dist.get_backend() == "nccl" else "cpu")


def all_sum(values: list[float], device: torch.device) -> list[float]:
    """``values`` summed over the processes of the group (each process gets the sums);
    ``device``: this process's (where NCCL adds)."""
    t = _collective(values, device)
    dist.all_reduce(t)
    return t.tolist()


class CollectiveReducer:
    """The reducer of a process among several (:class:`~drillbook.train.step.OptimizerStep`
    takes one or the other; the single process's is
    :class:`~drillbook.train.step.LocalReducer`).

    Every step the processes add up their tokens, so that each piece's loss is weighted
    by its share of the batch's tokens across processes (the averaged gradient is then the
    one batch's gradient); they add up each piece's loss and stop together when it is not
    finite or too large; and each checks its weights after the update (a collective waits
    for the device anyway, so nothing is deferred). Between the pieces of an accumulated
    step the gradients are not all-reduced (``no_sync``): once, at the last.

    Args:
        model: the model whose weights are checked after each update.
        device: where it trains (collectives of NCCL run there, gloo's on the CPU).
        max_loss: a reported loss above it is divergence.
        diverged: ``(what, step, own_loss) -> exception`` to raise when a check fails
            (as for :class:`~drillbook.train.step.LocalReducer`).
    """

    def __init__(self, model: torch.nn.Module, device: torch.device, max_loss: float,
                 diverged) -> None:
        self.model, self.device, self.max_loss, self.diverged = model, device, max_loss, \
            diverged
        self.world_size = dist.get_world_size()
        self._checked: list = []
        self._step, self._tokens, self._total, self._reported = 0, 0, 0.0, 0.0

    def all_sum(self, values: list[float]) -> list[float]:
        """``values`` summed over the processes (each process gets the sums)."""
        return all_sum(values, self.device)

    def from_rank0(self, values: list[float]) -> list[float]:
        """Rank 0's ``values``, on every process."""
        t = _collective(values, self.device)
        dist.broadcast(t, 0)
        return t.tolist()

    def begin(self, step: int, tokens: int) -> tuple[int, float]:
        """This process's batch of ``tokens`` begins a step: ``(tokens over every process,
        world size x this process's share of them)`` (DDP averages the gradients)."""
        total = self.all_sum([float(tokens)])[0]
        self._step, self._tokens, self._total, self._reported = step, tokens, total, 0.0
        return int(total), self.world_size * tokens / total

    def piece_context(self, model, last: bool):
        return contextlib.nullcontext() if last else model.no_sync()

    def piece(self, loss, share: float) -> None:
        """Every process sees the same numbers and stops together."""
        value, raw = loss.loss.item(), loss.report.item()
        w = share * self._tokens / self._total
        value, raw, too_big = self.all_sum([value * w, raw * w, float(raw > self.max_loss)])
        if too_big:
            raw = math.inf
        if not math.isfinite(value) or raw > self.max_loss:
            raise self.diverged(f"the loss became {raw if raw > self.max_loss else value}",
                                self._step, True)
        self._reported += raw  # already weighted by the piece's share

    def end(self) -> float:
        """After the update: stop before a checkpoint could save non-finite weights."""
        self._checked.append(Checked(self._step, int(self._total), self._reported))
        bad = nonfinite_update(self.model)
        if bad:  # the step's loss was sane (its starting state can be kept): queued above
            raise self.diverged(bad, self._step, False)
        return self._reported

    def check(self) -> list:
        """The steps taken since the last call (checked already, as they were taken)."""
        checked, self._checked = self._checked, []
        return checked
