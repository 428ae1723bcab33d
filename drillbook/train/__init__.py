"""Training every task on one loop (:mod:`~drillbook.train.loop`: precision, accumulation,
several processes; the hooks a task implements, :mod:`~drillbook.train.hooks`; one
optimiser step, :mod:`~drillbook.train.step`), resumable run folders with atomic checkpoints
(:mod:`~drillbook.train.run_folder`, :mod:`~drillbook.train.checkpoint`), the AWD-LSTM recipe
(:mod:`~drillbook.train.lm`), translation (:mod:`~drillbook.train.translation`), dynamic
evaluation (:mod:`~drillbook.train.dynamic`, its update in
:mod:`~drillbook.train.dynamic_update`, its resumable state in
:mod:`~drillbook.train.dynamic_state`), what differs between tasks
(:mod:`~drillbook.train.tasks`: one package per task, and their registry), the
graph-ready step and its optimisers
(:mod:`~drillbook.train.graphs`, :mod:`~drillbook.train.optimizers`) and several runs
trained in one process (:mod:`~drillbook.train.interleaver`)."""

from ..errors import TrainingDiverged
from ..metrics import MAX_LOSS, perplexity
from .checkpoint import load_checkpoint, save_atomic
from .lm import LanguageModelTrainer, evaluate, training_loss
from .loop import RunStatus
from .run_files import LoadedRun, has_checkpoint, read_log
from .tasks import TASKS, Task, load_run, register_task, task_of, unregister_task
from .tasks.language_model import finetune
from .translation import NMTTrainer, translation_loss

__all__ = [
    "MAX_LOSS",
    "TASKS",
    "LanguageModelTrainer",
    "LoadedRun",
    "NMTTrainer",
    "RunStatus",
    "Task",
    "TrainingDiverged",
    "evaluate",
    "finetune",
    "has_checkpoint",
    "load_checkpoint",
    "load_run",
    "perplexity",
    "read_log",
    "register_task",
    "save_atomic",
    "task_of",
    "training_loss",
    "translation_loss",
    "unregister_task",
]
