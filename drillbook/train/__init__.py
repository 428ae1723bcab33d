"""Training both tasks on one loop (:mod:`~drillbook.train.loop`: precision, accumulation,
several processes), resumable run folders with atomic checkpoints
(:mod:`~drillbook.train.runs`, :mod:`~drillbook.train.checkpoint`), the AWD-LSTM recipe
(:mod:`~drillbook.train.lm`), translation (:mod:`~drillbook.train.translation`), dynamic
evaluation (:mod:`~drillbook.train.dynamic`) and the record of what differs between the two
tasks (:mod:`~drillbook.train.tasks`)."""

from ..errors import TrainingDiverged
from ..metrics import MAX_LOSS, perplexity
from .checkpoint import load_checkpoint, save_atomic
from .lm import Trainer, evaluate, finetune, training_loss
from .loop import RunStatus
from .runs import LoadedRun, has_checkpoint, read_log
from .tasks import TASKS, Task, load_run, task_of
from .translation import NMTTrainer, translation_loss

__all__ = [
    "MAX_LOSS",
    "TASKS",
    "LoadedRun",
    "NMTTrainer",
    "RunStatus",
    "Task",
    "Trainer",
    "TrainingDiverged",
    "evaluate",
    "finetune",
    "has_checkpoint",
    "load_checkpoint",
    "load_run",
    "perplexity",
    "read_log",
    "save_atomic",
    "task_of",
    "training_loss",
    "translation_loss",
]
