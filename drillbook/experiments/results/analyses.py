"""What a result file carries for the chapters beyond the metrics: the ``analyses``
block (its keys the task's :attr:`~drillbook.train.tasks.registry.Task.analyses_keys`), computed
from a trained run by its task's function (:attr:`~drillbook.train.tasks.registry.Task.analyses`,
declared in the task's package)."""

from __future__ import annotations

from typing import Any

from ...train.run_files import LoadedRun
from ...train.tasks import task_of

__all__ = ["result_analyses"]


def result_analyses(run: LoadedRun, split: str, *, data: Any,
                    max_items: int | None = None) -> dict[str, Any]:
    """The ``analyses`` block of a result file: what the run's task's function
    (:attr:`~drillbook.train.tasks.registry.Task.analyses`) finds on a split of ``data`` (its first
    ``max_items`` tokens or sentences, if given)."""
    return task_of(run.config).analyses(run, split, data=data, max_items=max_items)
