"""The record of a task (:class:`Task`) and the registry of them (:data:`TASKS`,
:func:`register_task`), looked up by a config's ``task``: what the command line, the
training loop's callers, ``reproduce``, the planner, the result files and evaluation ask
instead of asking which task they have. Each task is one package beside this module that
declares its record and registers it (:mod:`~drillbook.train.tasks.language_model`,
:mod:`~drillbook.train.tasks.translation`).

>>> from drillbook.configs import get_config
>>> task_of(get_config("multi30k/de-en-softmax")).metric
'BLEU'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ...configs import SectionedConfig, register_config_class, unregister_config_class
from ...errors import ConfigError
from ...validation import check_choice
from ..checkpoint import FORMATS
from ..loop import RunStatus, TrainingLoop
from ..run_files import LoadedRun, read_run_config

__all__ = ["EPOCH_KEYS", "TASKS", "TIME_KEYS", "Signature", "Sizing", "StepProbe", "Task",
           "TinyRun", "load_run", "register_task", "task_of", "unregister_task"]

#: the keys of a result file's learning curve that every task's log records have, before
#: its own (:attr:`Task.curve_keys`) and after them
EPOCH_KEYS = ("epoch", "step", "train_loss")
TIME_KEYS = ("epoch_seconds", "elapsed_seconds", "tokens_per_second", "lr")


class StepProbe(NamedTuple):
    """A task's training step on random data, for the planner and the command line's
    estimates: ``model`` in training mode and ``loss(n)``, the training loss of a step of
    ``n`` positions (tokens, or a translation's sentences), at two small sizes ``sizes``
    a probe of its saved tensors extrapolates from."""

    sizes: tuple[int, int]
    model: torch.nn.Module
    loss: Callable[[int], torch.Tensor]


class Signature(NamedTuple):
    """How a task's test metric was computed, as its evaluation states it: the ``key`` of
    an :attr:`Task.evaluate` result that holds it (kept at the top level of a result
    file), its ``name`` in ``drillbook eval``'s words, and the sentence of the report's
    paragraph that introduces it (the signatures follow)."""

    key: str
    name: str
    report: str


class TinyRun(NamedTuple):
    """The size of the tiny fixed run that fingerprints the code training a config
    (:mod:`drillbook.experiments.results.fingerprint`): its vocabulary, batch, positions
    per sequence and training steps."""

    vocab: int = 40
    batch: int = 3
    length: int = 5
    steps: int = 3


@dataclass(frozen=True)
class Sizing:
    """How the planner (:mod:`~drillbook.experiments.run.sizing`) and the command line's
    estimates (:mod:`drillbook.cli.estimates`) size a step of one task's configs.

    Attributes:
        sizes: ``config -> dict``: ``vocab`` (the output vocabulary), ``positions`` (of a
            training step: tokens of a language model, sentences of a translation batch),
            ``extra`` (what the other functions need beyond them: a translation's
            ``src_vocab``, ``src_len``, ``tgt_len``), ``steps`` and evaluation ``windows``
            per epoch, ``eval_positions``, and for a task that decodes ``decode_steps``.
        forward_flops: ``(config, vocab_size, positions, **extra) -> float``: the forward
            pass's matrix-product FLOPs.
        probe: ``(config, vocab_size, generator, **extra) -> StepProbe``: the step on
            random data whose saved tensors the planner measures (:class:`StepProbe`).
        model: ``(config, sizes) -> Module``: the model, to count its parameters.
        optimizer_states: ``config -> int``: tensors the optimiser keeps per parameter.
        step_seconds: ``(config, work, device, timed) -> (seconds, how)``: a training step
            of the real model timed on ``device`` (``timed(fn)``: the seconds of a call),
            ``work`` the epoch's :class:`~drillbook.experiments.run.sizing.EpochWork`, and
            how it was timed, in words.
        cpu_step: ``(config, sizes, generator) -> step``: a call that runs one training
            step of ``config`` at the step's ``sizes`` (:attr:`sizes`) on random data
            drawn from ``generator``, which the planner times on one CPU thread
            (:func:`~drillbook.experiments.run.cost_model.cpu_step_seconds`). None: the
            :attr:`probe`'s loss at the step's positions and its backward pass.
    """

    sizes: Callable[[Any], dict[str, Any]]
    forward_flops: Callable[..., float]
    probe: Callable[..., StepProbe]
    model: Callable[[Any, dict[str, Any]], torch.nn.Module]
    optimizer_states: Callable[[Any], int]
    step_seconds: Callable[..., tuple[float, str]]
    cpu_step: Callable[..., Callable[[], Any]] | None = None

    def cpu_step_call(self, config, sizes: dict[str, Any],
                      generator: torch.Generator) -> Callable[[], Any]:
        """The step :attr:`cpu_step` declares, or the :attr:`probe`'s loss of the step's
        ``positions`` and its backward pass."""
        if self.cpu_step is not None:
            return self.cpu_step(config, sizes, generator)
        probe = self.probe(config, sizes["vocab"], generator, **sizes["extra"])
        n = sizes["positions"]
        return lambda: probe.loss(n).backward()


@dataclass(frozen=True)
class Task:
    """Everything that differs between tasks, declared in the task's package.

    Attributes:
        name: the config's ``task`` (``"language-model"``, ``"translation"``).
        config_class: the class of its configs.
        trainer: the :class:`~drillbook.train.loop.TrainingLoop` subclass that trains it
            (the loop's hooks are its methods; its model builder is the trainer's
            :meth:`~drillbook.train.hooks.TaskHooks.build`).
        metric: what it is measured in (``"perplexity"``, ``"BLEU"``).
        metric_key: the metric's key in results: ``val_<key>`` and ``test_<key>``
            (``"ppl"``, ``"bleu"``).
        short: the metric's name in a console line (``"ppl"``, ``"BLEU"``).
        best_value: ``status -> float``: the best validation metric of a
            :class:`~drillbook.train.loop.RunStatus` (what selected ``best.pt``): "best"
            as the task means it.
        load_data: ``config -> data``: the corpus it trains on, missing files downloaded
            first (checksum-verified): one policy for every task, used by the trainers,
            :func:`load_run` and evaluation.
        load_run: ``(run_dir, config, *, which, device, corpus) -> LoadedRun``.
        evaluate: ``(run, split, *, data, max_items, beam) -> dict``: the metric of a
            loaded run on a split (``ppl`` with ``loss`` and ``tokens``, or ``bleu`` with
            ``bleu_signature``, ``beam`` and ``sentences``).
        describe: ``result -> str``: an :attr:`evaluate` result in words.
        analyses: ``(run, split, *, data, max_items) -> dict``: the ``analyses`` block of
            a result file (:func:`~drillbook.experiments.results.analyses.result_analyses`).
        analyses_keys: the keys that block may hold and the types of their values (what
            :func:`~drillbook.experiments.results.validate_result` checks).
        sizing: how the planner and the estimates size its step (:class:`Sizing`).
        curve_keys: what a result file's learning curve keeps of each log record (those a
            record has), in order.
        tiny_run: ``(config, size) -> (losses, model)``: the fingerprint's tiny run of a
            config (:class:`TinyRun`): the config at a few units, seeded, a few steps of
            the task's own training step on fixed random data; called in float64 on the
            CPU (:func:`~drillbook.experiments.results.fingerprint.training_fingerprint`).
        signature: how the test metric was computed (:class:`Signature`: a
            translation's sacreBLEU signature), kept at the top level of a result file,
            said by ``drillbook eval`` and the report; None where there is none.
        finetune_trainer: ``(run_dir, *, out, device, resume, progress, corpus, lr) ->
            TrainingLoop``: the trainer of the task's second stage (AWD-LSTM's averaged-SGD
            fine-tuning), or None where the task has none.
        split_stream: ``(config, data, split) -> Tensor``: a split as one batchified token
            stream, what rank and dynamic evaluation read, or None where the task's text
            is not one stream (translation pairs).
        decodes: whether the task's models decode (beam search, ``translate``).
        configs: its named configs, ``name -> () -> config`` (those of the built-in tasks
            are :mod:`drillbook.configs`'s own).
        checkpoint_formats: the ``"format"`` of each kind of file its trainer writes, and
            what such a file is in words (those of the built-in tasks are
            :data:`drillbook.train.checkpoint.FORMATS`' own).
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
    analyses: Callable[..., dict[str, Any]]
    analyses_keys: dict[str, tuple[type, ...]]
    sizing: Sizing
    curve_keys: tuple[str, ...]
    tiny_run: Callable[[Any, TinyRun], tuple[list[float], torch.nn.Module]]
    signature: Signature | None = None
    finetune_trainer: Callable[..., TrainingLoop] | None = None
    split_stream: Callable[..., Any] | None = None
    decodes: bool = False
    configs: dict[str, Callable[[], SectionedConfig]] | None = None
    checkpoint_formats: dict[str, str] | None = None

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

    def curve(self, log: list[dict]) -> list[dict]:
        """A result file's learning curve: :attr:`curve_keys` of each log record."""
        return [{k: r[k] for k in self.curve_keys if k in r and r[k] is not None}
                for r in log]


#: the tasks, by the name configs give them (each package registers its own)
TASKS: dict[str, Task] = {}


def register_task(task: Task, *, replace: bool = False) -> Task:
    """Make ``task`` known by its name: :func:`task_of` finds it, its config class reads
    its configs (:func:`~drillbook.configs.config_from_dict`), its named configs are
    :func:`~drillbook.configs.get_config`'s and its checkpoints load
    (:func:`~drillbook.train.checkpoint.load_checkpoint`). Returns it.

    Raises:
        ConfigError: the name is taken by another task (unless ``replace``), or its config
            class names another task.
    """
    if task.config_class.task != task.name:
        raise ConfigError(f"cannot register the task {task.name!r}: its config class "
                          f"{task.config_class.__name__} is of task "
                          f"{task.config_class.task!r}; set its task = {task.name!r}")
    if task.name in TASKS and TASKS[task.name] != task and not replace:
        raise ConfigError(f"cannot register the task {task.name!r}: the name is taken; "
                          f"unregister_task({task.name!r}) first or pass replace=True")
    register_config_class(task.config_class, task.configs or {})
    FORMATS.update(task.checkpoint_formats or {})
    TASKS[task.name] = task
    return task


def unregister_task(name: str) -> None:
    """Forget a task registered by :func:`register_task`, its config class, named configs
    and checkpoint formats with it."""
    task = TASKS.pop(check_choice(name, sorted(TASKS), "task"))
    unregister_config_class(task.config_class, task.configs or {})
    for kind in task.checkpoint_formats or {}:
        FORMATS.pop(kind, None)


def task_of(config: SectionedConfig | str) -> Task:
    """The :class:`Task` of a config (or of a task's name).

    Raises:
        ConfigError: an unknown task.
    """
    name = config if isinstance(config, str) else config.task
    return TASKS[check_choice(name, sorted(TASKS), "task")]


def load_run(run_dir: str | Path, *, which: str = "best", device: str | None = None,
             corpus: Any = None) -> LoadedRun:
    """Rebuild a trained model of any task from its run folder: ``(config, model,
    data)``, ``data`` being the language model's corpus or a translation run's two
    vocabularies (:class:`~drillbook.train.run_files.LoadedRun`).

    Args:
        which: ``"best"`` (``best.pt``; a language model's averaged weights once NT-ASGD
            switched) or ``"last"`` (``last.pt``).
        device: where to put the model (default :func:`~drillbook.runtime.default_device`).
        corpus: an already loaded corpus (default: its task's ``load_data``).

    Raises:
        RunFolderError: no or an invalid ``config.json``.
        CheckpointError: the checkpoint is missing, unreadable, or of another kind.
    """
    config = read_run_config(run_dir)
    return task_of(config).load_run(run_dir, config, which=which, device=device,
                                    corpus=corpus)
