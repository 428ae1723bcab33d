"""How a trainer's ``fit()`` ended (:class:`RunStatus`), and :func:`run_to_end`, which
drives a run given one step at a time."""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

from ..metrics import perplexity

__all__ = ["RunStatus", "run_to_end"]


class RunStatus:
    """How a trainer's ``fit()`` ended, for any task.

    Attributes:
        reason: ``"done"`` (all epochs), ``"epochs"`` (``max_epochs`` reached),
            ``"budget"`` (``max_minutes`` reached), ``"steps"`` (``max_steps`` reached),
            ``"converged"`` (fine-tuning stopped at its non-monotone trigger),
            ``"plateau"`` (the stopping rule ``train.plateau_epochs`` ended it,
            :mod:`drillbook.train.plateau`).
        epoch: epochs completed.
        best_val_loss: the best validation loss so far (nats per token), what selects a
            language model's ``best.pt`` (``inf`` for a task that selects by another
            number).
        best: what the trainer's :meth:`~drillbook.train.hooks.TaskHooks.best` returned
            beside it, each also an attribute (a translation's ``best_val_bleu``); what
            "best" means is its task's
            (:attr:`~drillbook.train.tasks.registry.Task.best_value`).
        record: the log record of the last epoch this call completed (None if it
            completed none).
    """

    def __init__(self, reason: str, epoch: int, best_val_loss: float = math.inf,
                 record: dict[str, Any] | None = None, **best: float) -> None:
        self.reason, self.epoch, self.best_val_loss = reason, epoch, best_val_loss
        self.record, self.best = record, best

    def __getattr__(self, name: str) -> float:
        best = self.__dict__.get("best", {})
        if name in best:
            return best[name]
        raise AttributeError(f"{type(self).__name__} has no {name!r}")

    def __repr__(self) -> str:
        fields = {"reason": self.reason, "epoch": self.epoch,
                  "best_val_loss": self.best_val_loss, **self.best, "record": self.record}
        return f"RunStatus({', '.join(f'{k}={v!r}' for k, v in fields.items())})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunStatus) and vars(self) == vars(other)

    @property
    def best_val_ppl(self) -> float:
        """``exp(best_val_loss)`` (``inf`` where it overflows or no epoch finished)."""
        return perplexity(self.best_val_loss)


def run_to_end(steps: Generator[None, None, Any]) -> Any:
    """Drive a generator of steps (:meth:`~drillbook.train.loop.TrainingLoop.training`) to
    its end; its value."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value
