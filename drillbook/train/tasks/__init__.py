"""The tasks: the record of one (:class:`Task`) and their registry
(:mod:`~drillbook.train.tasks.registry`), and one package per task that declares its
record and registers it: :mod:`~drillbook.train.tasks.language_model` and
:mod:`~drillbook.train.tasks.translation`. A new task is a package like them (or a
:class:`Task` given to :func:`register_task` anywhere)."""

from . import language_model, translation
from .registry import (
    EPOCH_KEYS,
    TASKS,
    TIME_KEYS,
    Signature,
    Sizing,
    StepProbe,
    Task,
    TinyRun,
    load_run,
    register_task,
    task_of,
    unregister_task,
)

__all__ = ["EPOCH_KEYS", "TASKS", "TIME_KEYS", "Signature", "Sizing", "StepProbe", "Task",
           "TinyRun", "language_model", "load_run", "register_task", "task_of", "translation",
           "unregister_task"]
