"""Training: the AWD-LSTM recipe (NT-ASGD, AR/TAR, clipping) on the loop both tasks share
(:mod:`drillbook.train.loop`: precision, accumulation, several processes), atomic resumable
checkpoints."""

from .checkpoint import load_checkpoint, save_atomic
from .lm import (
    MAX_LOSS,
    RunStatus,
    Trainer,
    TrainingDiverged,
    evaluate,
    finetune,
    load_run,
    perplexity,
    read_log,
    training_loss,
)
from .runs import has_checkpoint

__all__ = [
    "MAX_LOSS",
    "RunStatus",
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
    "training_loss",
]
