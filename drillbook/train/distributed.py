"""Several processes training one run (``torchrun``): joining the process group, this
process's rank, and the model wrapper the training step calls. How the loop shares the
work is :class:`drillbook.train.loop.TrainingLoop`'s docstring."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

__all__ = ["DDP", "distributed", "init_distributed", "rank_and_world_size"]


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
