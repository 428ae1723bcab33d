"""A language model's second stage and its runs read back: AWD-LSTM's fine-tuning
(:func:`finetune`, :func:`finetune_trainer`) and a trained model rebuilt from its run
folder (:func:`load_lm_run`)."""

from __future__ import annotations

from pathlib import Path

from ....configs import Config
from ....data import Corpus
from ....errors import MissingFileError, RunFolderError
from ....models import build_model
from ....runtime import resolve_device
from ... import lm
from ...checkpoint import LM_CHECKPOINT, LM_WEIGHTS, load_checkpoint, load_weights
from ...loop import RunStatus
from ...run_files import (
    BEST,
    CONFIG,
    FINETUNE,
    LoadedRun,
    checkpoint_path,
    read_run_config,
    resume_command,
)

__all__ = ["finetune", "finetune_trainer", "load_lm_run"]


def finetune(run_dir: str | Path, *, out: str | Path | None = None, device: str | None = None,
             resume: bool = False, max_epochs: int | None = None,
             max_minutes: float | None = None, progress: bool | None = None,
             corpus: Corpus | None = None, lr: float | None = None) -> tuple[RunStatus, Path]:
    """AWD-LSTM's fine-tuning stage: averaged SGD from a run's best weights.

    Writes a new run folder (default ``run_dir/finetune``) and stops at the first epoch
    whose validation loss is worse than the best before the last ``nonmono`` epochs. The
    best validation loss starts at the loaded model's, whose weights are the folder's
    first ``best.pt``: fine-tuning never leaves a worse model than it started from.

    Args:
        lr: the learning rate (default: the run's ``train.lr``). MoS's README fine-tunes
            at 25 on PTB and 20 on WikiText-2 (see :data:`drillbook.configs.FINETUNE_LR`).
            It is written into the new folder's ``config.json`` and every log record. A
            resumed fine-tuning run keeps it unless another one is given (a resumable
            change, recorded like ``drillbook train --resume --set train.lr=...``).
    """
    trainer = finetune_trainer(run_dir, out=out, device=device, resume=resume,
                               progress=progress, corpus=corpus, lr=lr)
    return trainer.fit(max_epochs=max_epochs, max_minutes=max_minutes), trainer.run_dir


def finetune_trainer(run_dir: str | Path, *, out: str | Path | None = None,
                     device: str | None = None, resume: bool = False,
                     progress: bool | None = None, corpus: Corpus | None = None,
                     lr: float | None = None) -> lm.LanguageModelTrainer:
    """The :class:`~drillbook.train.lm.LanguageModelTrainer` that :func:`finetune` runs (same
    arguments), for a caller that needs more than the stage's :class:`RunStatus` (steps,
    wall time, device)."""
    run_dir = Path(run_dir)
    config = read_run_config(run_dir, Config)
    out = Path(out) if out is not None else run_dir / FINETUNE
    if not resume and not (run_dir / BEST).exists():
        raise MissingFileError(f"{run_dir} has not finished an epoch (it has no {BEST}): "
                               f"fine-tuning starts from the best weights of a trained run; "
                               f"continue the run until an epoch ends "
                               f"({resume_command(run_dir)}), then fine-tune")
    if out.absolute() == run_dir.absolute():
        raise RunFolderError(f"finetune writes a run folder of its own: --out {out} is the "
                             f"run it starts from; leave --out out (default "
                             f"{run_dir / 'finetune'}) or name a new folder")
    if lr is None and resume and (out / CONFIG).exists():  # continue at the rate it began
        lr = read_run_config(out, Config).train.lr
    if lr is not None:
        config.train.lr = float(lr)  # validated (positive) when the run folder opens
    return lm.LanguageModelTrainer(config, out, device=device, resume=resume,
                                   progress=progress, corpus=corpus, stage="finetune",
                                   init_from=None if resume else run_dir / BEST)


def load_lm_run(run_dir: str | Path, config: Config | None = None, *, which: str = "best",
                device: str | None = None, corpus: Corpus | None = None) -> LoadedRun:
    """Rebuild a trained language model from its run folder: ``(config, model, corpus)``.

    Args:
        config: the run's config (default: read from its ``config.json``).
        which: ``"best"`` (``best.pt``, averaged weights if NT-ASGD had switched) or
            ``"last"`` (``last.pt``).
        corpus: the corpus (default :func:`~drillbook.train.lm.load_lm_data`).

    Raises:
        RunFolderError: no or an invalid ``config.json``.
        CheckpointError: the checkpoint is missing, unreadable, or not a language model's.
    """
    run_dir = Path(run_dir)
    config = config if config is not None else read_run_config(run_dir, Config)
    path = checkpoint_path(run_dir, which)
    device = resolve_device(device)
    state = load_checkpoint(path, device, formats=(LM_WEIGHTS, LM_CHECKPOINT))
    corpus = corpus if corpus is not None else lm.load_lm_data(config)
    model = build_model(config, len(corpus.vocab)).to(device)
    load_weights(model, state["model"], checkpoint=path, config=run_dir / CONFIG)
    model.eval()
    return LoadedRun(config, model, corpus)
