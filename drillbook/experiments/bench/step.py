"""A whole training step of a config's model, timed: encoder, head, loss, AR/TAR,
backward, gradient clipping and the optimiser step, as the trainer takes it.

:func:`time_train_step` times one config; :func:`compare_train_steps` times several
configs (or several step functions on one config) interleaved in one process, and gives
each one's mean and its ratio to the first. The step itself is a plain function
(:data:`TrainStep`, by default :func:`trainer_step`, which is the training loop's own
:class:`~drillbook.train.step.OptimizerStep`), so another implementation of the training
loop can be timed against the current one by passing its own.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import statistics
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from ...configs import Config, ConfigError, TrainConfig
from ...models import LanguageModel, build_model
from ...precision import autocast
from ...provenance import environment
from ...train.tasks.language_model.step import start_optimizer, trainer_step
from ...validation import as_list
from .heads import SIZES
from .measure import BENCH_FORMAT, amp_of, check_clock, log, time_call
from .model import bench_config

__all__ = ["TrainStep", "check_step", "compare_train_steps", "load_step", "make_train_step",
           "run_step_bench", "time_train_step", "trainer_step"]

#: ``step(model, optimizer, x, y, train, amp)``: one training step on word ids ``x`` and
#: targets ``y`` (both ``(T, B)``) with the config's ``train`` section; ``amp()`` gives
#: the autocast context the forward pass and loss run in. What it returns is ignored.
TrainStep = Callable[[LanguageModel, torch.optim.Optimizer, Tensor, Tensor, TrainConfig,
                      Callable[[], contextlib.AbstractContextManager]], object]


def _vocab_size(size: str | int) -> int:
    if isinstance(size, int):
        return size
    if size not in SIZES:
        raise ConfigError(f"unknown size {size!r}; choose from {sorted(SIZES)} or give V")
    return SIZES[size]


def make_train_step(config: str | Config, *, size: str | int = "ptb",
                    overrides: Sequence[str] = (), batch_size: int | None = None,
                    bptt: int | None = None, step: TrainStep = trainer_step,
                    device: str | torch.device = "cpu", precision: str = "fp32",
                    seed: int = 0) -> tuple[Callable[[], object], dict]:
    """A config's model, optimiser and one batch of random word ids, bound to ``step``.

    Args:
        config: a language-model config or its name (``drillbook configs``).
        size: a :data:`~.heads.SIZES` name or a vocabulary size ``V``.
        overrides: ``key=value`` changes to the config (``model.nhid=16``).
        batch_size, bptt: the batch, ``(bptt, batch_size)`` word ids; default the
            config's ``train`` values.
        step: the step to time (:data:`TrainStep`).
        precision: ``"fp32"``, or ``"bf16"`` for autocast around forward and loss.
        seed: the model's initialisation and the word ids.

    Returns:
        ``(call, info)``: ``call()`` takes one step; ``info`` says what it measures
        (``config``, ``head``, ``vocab_size``, ``batch_size``, ``bptt``, ``precision``,
        ``device``).
    """
    device = torch.device(device)
    amp_of(precision)  # checks the precision before any work
    if isinstance(config, str):
        config = bench_config(config, overrides)
    elif overrides:
        raise ConfigError("overrides go with a config name; apply them to a Config "
                          "yourself with drillbook.configs.apply_overrides")
    vocab_size, t = _vocab_size(size), config.train
    batch, length = batch_size or t.batch_size, bptt or t.bptt
    torch.manual_seed(seed)
    model = build_model(config, vocab_size).to(device)
    optimizer = start_optimizer(model, t)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (length + 1, batch), generator=gen).to(device)
    x, y = ids[:-1], ids[1:]

    def call() -> object:
        return step(model, optimizer, x, y, t, lambda: autocast(amp_of(precision), device))

    info = {"config": config.name, "overrides": list(overrides), "head": config.head.kind,
            "vocab_size": vocab_size, "batch_size": batch, "bptt": length,
            "precision": precision, "device": str(device)}
    return call, info


def time_train_step(config: str | Config, *, repeats: int = 5, warmup: int = 2,
                    clock: str = "wall", **settings) -> dict:
    """Mean seconds of one training step of a config's model (:func:`make_train_step`,
    timed by :func:`~.measure.time_call`).

    Args:
        config: a config or its name; settings: keyword arguments of
            :func:`make_train_step` (``size``, ``overrides``, ``step``, ``device``, ...).
        clock: ``"wall"``, or ``"cpu"`` for the process's CPU time (a busy CPU).

    Returns:
        ``make_train_step``'s ``info`` plus ``train_step_s`` and ``tokens_per_s``.
    """
    call, info = make_train_step(config, **settings)
    [seconds] = time_call(call, torch.device(info["device"]), repeats=repeats,
                          warmup=warmup, clock=clock)
    return {**info, "train_step_s": seconds,
            "tokens_per_s": info["batch_size"] * info["bptt"] / seconds}


def compare_train_steps(configs: Sequence[str | Config],
                        steps: Mapping[str, TrainStep] | None = None, *, rounds: int = 3,
                        repeats: int = 5, warmup: int = 2,
                        device: str | torch.device = "cpu", clock: str = "wall",
                        **settings) -> list[dict]:
    """Time every config under every step function, interleaved, in one process.

    Every contender (config x step) is built and warmed up first; then ``rounds`` times
    each contender in turn is timed over ``repeats`` steps (:func:`~.measure.time_call`), so
    a machine that slows down or speeds up touches all alike. The first contender is the
    baseline.

    Args:
        configs: configs or their names.
        steps: name -> :data:`TrainStep`; default ``{"trainer": trainer_step}``.
        rounds: timed blocks per contender.
        clock: ``"wall"``, or ``"cpu"``: the process's CPU time, which other work on a
            shared CPU disturbs less (:func:`~.measure.time_call`).
        settings: further keyword arguments of :func:`make_train_step` (``size``,
            ``overrides``, ``batch_size``, ``bptt``, ``precision``, ``seed``).

    Returns:
        one dict per contender: :func:`make_train_step`'s ``info``, ``step`` (its name),
        ``train_step_s`` (mean over the rounds), ``rounds_s`` (each round's mean),
        ``tokens_per_s``, ``ratio`` (mean / the baseline's mean) and ``ratio_min`` /
        ``ratio_max`` (the extremes of the round-by-round ratios: the spread).
    """
    if rounds < 1:
        raise ConfigError(f"rounds must be >= 1, got {rounds}")
    steps = {name: check_step(step, name)
             for name, step in dict(steps or {"trainer": trainer_step}).items()}
    configs = as_list(configs, "configs", " of config names")
    device = torch.device(device)
    check_clock(clock, device)
    contenders = []
    for config in configs:
        for name, step in steps.items():
            call, info = make_train_step(config, step=step, device=device, **settings)
            contenders.append((call, {**info, "step": name, "rounds_s": []}))
    for call, _ in contenders:
        time_call(call, device, repeats=1, warmup=warmup)
    for r in range(rounds):
        log.info("bench step: round %d/%d of %d contenders", r + 1, rounds, len(contenders))
        for call, row in contenders:
            [seconds] = time_call(call, device, repeats=repeats, warmup=0, clock=clock)
            row["rounds_s"].append(seconds)
    rows = [row for _, row in contenders]
    base = rows[0]
    for row in rows:
        row["train_step_s"] = statistics.fmean(row["rounds_s"])
        row["tokens_per_s"] = row["batch_size"] * row["bptt"] / row["train_step_s"]
        row["ratio"] = row["train_step_s"] / base["train_step_s"]
        per_round = [a / b for a, b in zip(row["rounds_s"], base["rounds_s"], strict=True)]
        row["ratio_min"], row["ratio_max"] = min(per_round), max(per_round)
    return rows


def check_step(fn: object, name: str) -> TrainStep:
    """``fn`` if it can be called as a step, ``fn(model, optimizer, x, y, train, amp)``.

    Raises:
        ConfigError: not callable, or a signature that does not take those six arguments.
    """
    if not callable(fn):
        raise ConfigError(f"step {name!r} is not callable; give a function "
                          f"step(model, optimizer, x, y, train, amp)")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: taken on trust
        return fn
    try:
        signature.bind(*range(6))
    except TypeError:
        raise ConfigError(f"step {name!r} takes {signature}; a step function takes the six "
                          f"arguments (model, optimizer, x, y, train, amp)") from None
    return fn


def load_step(spec: str) -> TrainStep:
    """The step function named ``module:function`` (e.g.
    ``drillbook.experiments.bench.step:trainer_step``).

    Raises:
        ConfigError: a malformed name, a module that cannot be imported, or no such
            callable in it.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"step {spec!r} must look like module:function, e.g. "
                          f"drillbook.experiments.bench.step:trainer_step")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"cannot import {module_name!r} for step {spec!r}: {err}") from err
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"{module_name} has no function {attr!r}; name a callable "
                          f"step(model, optimizer, x, y, train, amp)")
    return check_step(fn, spec)


def run_step_bench(configs: Sequence[str], *, steps: Sequence[str] = (),
                   size: str = "ptb", overrides: Sequence[str] = (),
                   batch_size: int | None = None, bptt: int | None = None,
                   device: str = "cpu", rounds: int = 3, repeats: int = 5, warmup: int = 2,
                   precision: str = "fp32", clock: str = "wall") -> dict:
    """The ``step`` benchmark: :func:`compare_train_steps` of named configs and step
    functions (``module:function``; default the trainer's step), as a JSON-ready report
    (``format``, ``mode`` ``"step"``, ``environment``, ``settings``, ``rows``)."""
    configs = as_list(configs, "configs", " of config names")
    named = ({spec: load_step(spec) for spec in as_list(steps, "steps", " of module:function")}
             or {"trainer": trainer_step})
    for name in configs:  # fail early on a bad name or override
        bench_config(name, overrides)
    rows = compare_train_steps(configs, named, rounds=rounds, repeats=repeats,
                               warmup=warmup, device=device, clock=clock, size=size,
                               overrides=overrides, batch_size=batch_size, bptt=bptt,
                               precision=precision)
    return {"format": BENCH_FORMAT, "mode": "step", "environment": environment(device),
            "settings": {"configs": list(configs), "steps": list(named), "size": size,
                         "overrides": list(overrides), "batch_size": rows[0]["batch_size"],
                         "bptt": rows[0]["bptt"], "device": str(device), "rounds": rounds,
                         "repeats": repeats, "warmup": warmup, "precision": precision,
                         "clock": clock,
                         "baseline": f"{rows[0]['config']} / {rows[0]['step']}",
                         "timed": "forward, loss, regulariser, AR/TAR, backward, clipping, "
                                  "optimiser step"},
            "rows": rows}
