"""The seam between the two tasks: one record per task (:class:`Task`), looked up by a
config's ``task``, that the command line, ``reproduce`` and evaluation use instead of
asking which task they have.

>>> from drillbook.configs import get_config
>>> task_of(get_config("multi30k/de-en-softmax")).metric
'BLEU'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..configs import LANGUAGE_MODEL, TRANSLATION, SectionedConfig, config_classes
from ..validation import check_choice
from .lm import (
    Trainer,
    evaluate_lm_run,
    finetune_trainer,
    load_lm_data,
    load_lm_run,
    split_stream,
)
from .loop import RunStatus, TrainingLoop
from .run_files import LoadedRun, read_run_config
from .translation import (
    NMTTrainer,
    evaluate_translation_run,
    load_translation_data,
    load_translation_run,
)

__all__ = ["TASKS", "Task", "load_run", "task_of"]


@dataclass(frozen=True)
class Task:
    """What differs between the two tasks.

    Attributes:
        name: the config's ``task`` (``"language-model"``, ``"translation"``).
        config_class: the class of its configs.
        trainer: the :class:`~drillbook.train.loop.TrainingLoop` subclass that trains it
            (the loop's hooks are its methods).
        metric: what it is measured in (``"perplexity"``, ``"BLEU"``).
        metric_key: the metric's key in results: ``val_<key>`` and ``test_<key>``
            (``"ppl"``, ``"bleu"``).
        short: the metric's name in a console line (``"ppl"``, ``"BLEU"``).
        best_value: ``status -> float``: the best validation metric of a
            :class:`~drillbook.train.loop.RunStatus` (what selected ``best.pt``).
        load_data: ``config -> data``: the corpus it trains on, missing files downloaded
            first (checksum-verified): one policy for both tasks, used by the trainers,
            :func:`load_run` and evaluation.
        load_run: ``(run_dir, config, *, which, device, corpus) -> LoadedRun``.
        evaluate: ``(run, split, *, data, max_items, beam) -> dict``: the metric of a
            loaded run on a split (``ppl`` with ``loss`` and ``tokens``, or ``bleu`` with
            ``bleu_signature``, ``beam`` and ``sentences``).
        describe: ``result -> str``: an :attr:`evaluate` result in words.
        finetune_trainer: ``(run_dir, *, out, device, resume, progress, corpus, lr) ->
            TrainingLoop``: the trainer of the task's second stage (AWD-LSTM's averaged-SGD
            fine-tuning), or None where the task has none.
        split_stream: ``(config, data, split) -> Tensor``: a split as one batchified token
            stream, what rank and dynamic evaluation read, or None where the task's text
            is not one stream (translation pairs).
        decodes: whether the task's models decode (beam search, ``translate``).
    """

    name: str
    config_class: type[SectionedConfig]
    trainer: type[TrainingLoop]
    metric: str
    metric_key: str
    short: str
    best_value: Callable[[RunStatus], float]
    load_data: Callable[[Any], Any]
    load_run: Callable[..., LoadedRun]
    evaluate: Callable[..., dict[str, Any]]
    describe: Callable[[dict[str, Any]], str]
    finetune_trainer: Callable[..., TrainingLoop] | None = None
    split_stream: Callable[..., Any] | None = None
    decodes: bool = False

    @property
    def finetunes(self) -> bool:
        """The task has a fine-tuning stage (``drillbook finetune``)."""
        return self.finetune_trainer is not None

    @property
    def streams(self) -> bool:
        """Its splits are token streams: rank and dynamic evaluation apply."""
        return self.split_stream is not None

    def best(self, status: RunStatus) -> str:
        """The best validation metric of ``status`` in words (``"best valid ppl
        123.45"``)."""
        if status.epoch == 0:  # nothing validated yet: no "best" to name
            return "no epoch finished"
        return f"best valid {self.short} {self.best_value(status):.2f}"


#: the two tasks, by the name configs give them
TASKS: dict[str, Task] = {
    LANGUAGE_MODEL: Task(
        name=LANGUAGE_MODEL, config_class=config_classes()[LANGUAGE_MODEL], trainer=Trainer,
        metric="perplexity", metric_key="ppl", short="ppl",
        best_value=lambda s: s.best_val_ppl, load_data=load_lm_data, load_run=load_lm_run,
        evaluate=evaluate_lm_run,
        describe=lambda r: f"perplexity {r['ppl']:.2f} over {r['tokens']:,} tokens",
        finetune_trainer=finetune_trainer, split_stream=split_stream),
    TRANSLATION: Task(
        name=TRANSLATION, config_class=config_classes()[TRANSLATION], trainer=NMTTrainer,
        metric="BLEU", metric_key="bleu", short="BLEU",
        best_value=lambda s: s.best_val_bleu, load_data=load_translation_data,
        load_run=load_translation_run, evaluate=evaluate_translation_run,
        describe=lambda r: (f"BLEU {r['bleu']:.2f} over {r['sentences']:,} sentences with "
                            f"beam {r['beam']}"),
        decodes=True),
}


def task_of(config: SectionedConfig | str) -> Task:
    """The :class:`Task` of a config (or of a task's name).

    Raises:
        ConfigError: an unknown task.
    """
    name = config if isinstance(config, str) else config.task
    return TASKS[check_choice(name, sorted(TASKS), "task")]


def load_run(run_dir: str | Path, *, which: str = "best", device: str | None = None,
             corpus: Any = None) -> LoadedRun:
    """Rebuild a trained model of either task from its run folder: ``(config, model,
    data)``, ``data`` being the language model's corpus or a translation run's two
    vocabularies (:class:`~drillbook.train.run_files.LoadedRun`).

    Args:
        which: ``"best"`` (``best.pt``; a language model's averaged weights once NT-ASGD
            switched) or ``"last"`` (``last.pt``).
        device: where to put the model (default :func:`~drillbook.runtime.default_device`).
        corpus: a language model's already loaded corpus (default: its task's
            ``load_data``).

    Raises:
        RunFolderError: no or an invalid ``config.json``.
        CheckpointError: the checkpoint is missing, unreadable, or of another kind.
    """
    config = read_run_config(run_dir)
    return task_of(config).load_run(run_dir, config, which=which, device=device,
                                    corpus=corpus)
