"""Training: the AWD-LSTM recipe (NT-ASGD, AR/TAR, clipping), atomic resumable checkpoints."""

from .checkpoint import load_checkpoint, save_atomic
from .lm import (
    RunStatus,
    Trainer,
    TrainingDiverged,
    evaluate,
    finetune,
    load_run,
    read_log,
    training_loss,
)

__all__ = [
    "RunStatus",
    "Trainer",
    "TrainingDiverged",
    "evaluate",
    "finetune",
    "load_checkpoint",
    "load_run",
    "read_log",
    "save_atomic",
    "training_loss",
]
