"""Plans for a GPU window, and what they are predicted to reach before it is spent.

A lent GPU comes rarely and for minutes, so what a window will hold has to be worked out on
a CPU beforehand. A :class:`Plan` is a table of rows trained side by side
(:mod:`drillbook.experiments.run.scheduler`) within a deadline; :func:`predict` says, row by
row, the seconds per epoch, the epochs reached by the deadline (or needed to reach the
plateau, and the window each row runs in, for a plan trained to its plateau) and the peak
memory on a device class, from a stated model (:data:`ASSUMPTIONS`):

* **time** of a training step, ``t = a + b F``: ``F`` its matrix-product FLOPs
  (:func:`step_flops`, forward and backward), ``a`` a fixed cost per step (kernel
  launches, the Python loop), both fitted by least squares to the solo steps the newest
  committed window timed (:func:`bench_steps`; :func:`measured_steps` reads the first
  window's speed rows), the fit's error on each printed;
* **sharing**: ``n`` rows at once train ``ratio(n)`` times one row's updates per second
  (:class:`Sharing`): as processes, measured (:data:`SHARING_COST`, fitted to the first
  plan window: the GPU time-slices between processes); as graphed steps on streams in one
  process, an assumption until a window measures it (:data:`ASSUMED_RATIO` at
  :data:`ASSUMED_ROWS` rows); or by the sum of their arithmetic shares ``b F / t`` where
  that is larger;
* **epochs to plateau** of a row with a stopping rule: the mean of the committed windows'
  runs of that row that reached it (:func:`measured_plateaus`), else the plan's
  assumption, else its config's epochs;
* **validation** each epoch: a window of evaluation costs a third of a training step of
  the same size (forward only);
* **memory**: weights, gradients and optimiser state (4 bytes each), plus ``k`` times what
  autograd keeps for the backward pass, measured on the CPU at two small batches and
  extrapolated linearly in the positions of a step (:func:`activation_bytes`; ``k``
  fitted to the peaks a window measured, :func:`fit_memory_scale`), plus a CUDA context.

Each window tests these assumptions; its result files hold what each row actually
reached, and the next window's predictions read them.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...configs import config_from_dict, get_config
from ...errors import ConfigError, MissingFileError
from ...train.ways import Way
from ...validation import check_choice
from ..results import book_results, gpu_union
from ..tables import Plan, find_row
from .jobs import Job, table_jobs
from .scheduler import END_MARGIN_SECONDS, training_budget
from .sizing import (
    EpochWork,
    activation_bytes,
    epoch_flops,
    sizing_of,
    state_bytes,
    step_flops,
)

__all__ = ["ASSUMED_RATIO", "ASSUMED_ROWS", "ASSUMPTIONS", "DEVICE_CLASSES",
           "ROW_OVERHEAD_SECONDS", "SHARINGS", "SHARING_COST", "DeviceClass", "EpochWork",
           "Prediction", "Sharing", "StepModel", "activation_bytes", "bench_steps",
           "epoch_flops", "fit_memory_scale", "fit_models", "fit_step_model",
           "format_predictions", "measured_plateaus", "measured_steps", "memory_rows",
           "pack_windows", "predict", "step_flops", "step_window"]

#: what each further row on the same GPU adds to a row's time, as a multiple of its time
#: alone, when the rows are processes: fitted to the gpu-ptb window of 2026-11-26 (NVIDIA
#: H200, four rows at once; ``drillbook/results/gpu/2026-11-26-h200-window2-fp32``): each
#: row's epoch against the refitted step model's time alone (:func:`bench_steps`), 4.20 to
#: 4.63 times, mean 4.37 = 1 + 3 x 1.12 (against the first step model, which overestimated
#: a step alone: 3.33 to 3.62, c = 0.82). Four processes gave less than one process's
#: throughput (4 / 4.37 = 0.92): the GPU time-slices between them.
SHARING_COST = 1.12


@dataclass(frozen=True)
class Sharing:
    """How rows at once on one GPU share it: ``n`` rows together train ``ratio(n)`` times
    the row-updates per second of one row alone (each row is ``n / ratio(n)`` times
    slower than alone).

    Attributes:
        way: the way the rows run (:class:`~drillbook.train.ways.Way`): processes
            (measured), graphed steps on streams (the goal, not measured yet).
        note: where the numbers come from, printed with every prediction.
        measured: the ratios were measured in a window (False: assumed).
    """

    way: Way
    note: str
    measured: bool

    @property
    def name(self) -> str:
        """``processes``, ``graphs-assumed``: the way's sharing name
        (:attr:`drillbook.train.ways.Way.sharing`, ``--sharing``)."""
        return str(self.way.sharing)

    def ratio(self, n: int) -> float:
        """Aggregate throughput of ``n`` rows at once, in rows alone."""
        if n <= 1:
            return 1.0
        if self.way is Way.PROCESS:
            return n / (1.0 + SHARING_COST * (n - 1))
        # assumed: linear from 1 row (1x) to ASSUMED_ROWS rows (ASSUMED_RATIO x), flat after
        return 1.0 + (min(n, ASSUMED_ROWS) - 1) * (ASSUMED_RATIO - 1) / (ASSUMED_ROWS - 1)

    def slowdown(self, n: int) -> float:
        """Each of ``n`` rows at once against its time alone."""
        return n / self.ratio(n)


#: the goal of graphed steps on streams in one process: this many small rows at once ...
ASSUMED_ROWS = 16
#: ... train this many times one small row's updates per second (assumed until a window
#: measures it with tools/concurrency.py)
ASSUMED_RATIO = 8.0

#: how rows share a GPU, by name
SHARINGS: dict[str, Sharing] = {sharing.name: sharing for sharing in (
    Sharing(Way.PROCESS, f"rows as processes, measured: each of n rows at once "
                         f"1 + {SHARING_COST} (n - 1) times slower than alone "
                         f"(the gpu-ptb window of 2026-11-26, four rows)", True),
    Sharing(Way.GRAPHS_ON_STREAMS, f"graphed steps on streams in one process, "
                                   f"ASSUMED (not measured yet): {ASSUMED_ROWS} rows at once "
                                   f"train {ASSUMED_RATIO:g}x one row's updates per "
                                   f"second, linear below", False),
)}

#: seconds each row needs beyond its epochs: start-up (data, model), its test evaluation,
#: rank and analyses, its result file (assumed; a window's console log times them)
ROW_OVERHEAD_SECONDS = 20.0

#: the model's assumptions, in words (printed with every prediction)
ASSUMPTIONS = (
    "training step t = a + b F, F its forward+backward matrix-product FLOPs, a and b fitted "
    "to the solo steps the newest window measured (tools/speed_goals.py, fp32: the "
    "paper-size PTB models); the fixed cost a of a 3-layer model's step is kept for "
    "smaller models (fewer launches: an overestimate for them)",
    "rows sharing one GPU: each is max(n / ratio(n) for n rows at once, the sum of their "
    "arithmetic shares b F / t, rows / CPU cores for processes) times slower than alone; "
    "ratio(n) is the sharing's (printed above)",
    "a plan with a deadline's equal shares: every wave of rows gets an equal share of it, a "
    "fifth (10 s to 3 min) kept for evaluation and the result file; a plan trained to the "
    "plateau: each row needs its epochs to plateau plus 20 s, and a window holds the rows "
    "that fit, largest first, on its lanes",
    "an evaluation window costs a third of a training step of the same positions; a "
    "translation's validation also decodes greedily, max_len steps of a third of the "
    "fixed cost a per batch",
    "memory = 4 bytes x (weights + gradients + optimiser state) + k x autograd's saved "
    "tensors (measured on the CPU at two small batches, linear in the positions; k fitted "
    "to the peaks the gpu-ptb window measured) + 0.5 GiB of CUDA context",
    "a translation step's positions are the mean sentence lengths of the training pairs",
)

#: the CUDA context and allocator's own memory, assumed (bytes)
CUDA_CONTEXT_BYTES = int(0.5 * 2**30)


@dataclass(frozen=True)
class DeviceClass:
    """A kind of GPU a plan is sized for.

    Attributes:
        name: ``h200``, ``h100``.
        memory_gib: its memory.
        step_scale: its training step's time as a multiple of the measured H200's.
        note: where ``step_scale`` comes from.
        cpu_cores: the CPU cores beside it (each worker keeps one busy).
    """

    name: str
    memory_gib: float
    step_scale: float
    note: str
    cpu_cores: int = 16


#: the device classes :func:`predict` knows
DEVICE_CLASSES: dict[str, DeviceClass] = {
    "h200": DeviceClass("h200", 141.0, 1.0, "measured (the speed rows)"),
    "h100": DeviceClass("h100", 80.0, 1.0, "assumed as fast as the H200: the same compute, "
                                           "and these steps are bound by latency, not by "
                                           "memory bandwidth"),
    # this machine's CPU: no GPU model applies, each config's step is timed here
    "cpu": DeviceClass("cpu", 0.0, 1.0, "measured on this CPU: three training steps of each "
                                        "config, one thread (cpu_step_seconds)",
                       cpu_cores=os.cpu_count() or 1),
}

#: the CPU's step times measured in this process, by config (its seed aside)
_CPU_STEPS: dict[str, float] = {}


def cpu_step_seconds(config, sizes: dict[str, Any], steps: int = 3) -> float:
    """The seconds of one training step of ``config`` on this CPU with one thread, the
    fastest of ``steps`` after one to warm up (measured once per config in a process): the
    language-model trainer's own step on random word ids of the step's shape, or a
    translation model's loss and backward pass on random sentence pairs of the mean
    lengths."""
    key = config.copy()
    key.train.seed = 0
    key = json.dumps(key.to_dict(), sort_keys=True)
    if key in _CPU_STEPS:
        return _CPU_STEPS[key]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        call = _cpu_step_call(config, sizes)
        call()
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    _CPU_STEPS[key] = min(times)
    return _CPU_STEPS[key]


def _cpu_step_call(config, sizes: dict[str, Any]):
    gen = torch.Generator().manual_seed(0)
    if config.task == "translation":
        from ...train.tasks.translation import random_pairs_step as translation_loss

        extra = sizes["extra"]
        model, loss = translation_loss(config, sizes["vocab"], gen, **extra)
        n = config.train.batch_size
        return lambda: loss(n).backward()
    from contextlib import nullcontext

    from ...models import build_model
    from ..bench.step import start_optimizer, trainer_step

    torch.manual_seed(0)
    model = build_model(config, sizes["vocab"]).train()
    optimizer = start_optimizer(model, config.train)
    length = max(1, round(sizes["positions"] / config.train.batch_size))
    ids = torch.randint(0, sizes["vocab"], (length + 1, config.train.batch_size), generator=gen)
    return lambda: trainer_step(model, optimizer, ids[:-1], ids[1:], config.train, nullcontext)


# ------------------------------------------------------------------ FLOPs
# ------------------------------------------------------------------ the measured steps
def measured_steps(folder: str | Path) -> list[dict[str, Any]]:
    """The training steps the package measured on a GPU: one dict per ``fp32`` result file
    of the ``speed`` table under ``folder`` (``<folder>/speed/*.json``), and per log of a
    row without one (``<folder>/logs/<row>.log.jsonl``): ``row``, ``seconds_per_step``
    (an epoch's training seconds over its updates), ``positions`` (tokens per update) and
    ``flops`` (:func:`step_flops`)."""
    folder = Path(folder)
    rows: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("logs/*.log.jsonl")):
        record = json.loads(path.read_text().splitlines()[0])
        rows[path.name.removesuffix(".log.jsonl")] = {
            "seconds": record["epoch_seconds"], "steps": record["batches"],
            "tokens": record["tokens"]}
    configs = {}
    for path in sorted(folder.glob("speed/*.json")):
        doc = json.loads(path.read_text())
        configs[doc["row"]] = config_from_dict(doc["config"])
        if doc["row"] not in rows:
            rows[doc["row"]] = {"seconds": doc["metrics"]["seconds_per_epoch"],
                                "steps": doc["steps_done"] // max(doc["epochs_done"], 1),
                                "tokens": None}
    out = []
    for row, r in rows.items():
        if row not in configs:
            spec = find_row("speed", row)
            if spec is None:
                continue
            configs[row] = spec.resolve()
        config = configs[row]
        sizes = sizing_of(config).sizes(config)
        positions = r["tokens"] / r["steps"] if r["tokens"] else sizes["positions"]
        out.append({"row": row, "seconds_per_step": r["seconds"] / r["steps"],
                    "positions": positions,
                    "flops": step_flops(config, sizes["vocab"], positions)})
    return out


#: the configs tools/speed_goals.py times, by its model names
_SPEED_GOAL_CONFIGS = {"awd-lstm": "ptb/awd-lstm", "drill-4": "ptb/awd-lstm-drill",
                       "mos-15": "ptb/awd-lstm-mos"}


def bench_steps(window: str | Path) -> list[dict[str, Any]]:
    """The solo training steps a window's ``tools/speed_goals.py`` measured in float32,
    with the code it ran (``<window>/bench/**/speed-goals*.json``, rows of this checkout's
    version without overrides): one dict per row as :func:`measured_steps` gives them
    (``row`` is ``<call>/<model>``)."""
    window = Path(window)
    out = []
    for path in sorted(window.glob("bench/**/speed-goals*.json")):
        doc = json.loads(path.read_text())
        if doc.get("settings", {}).get("set"):
            continue  # tf32, compile: not the fp32 step
        for r in doc.get("rows", []):
            if r.get("version", "this") != "this" or "ms_per_update" not in r:
                continue
            config = get_config(r.get("config") or _SPEED_GOAL_CONFIGS[r["model"]])
            sizes = sizing_of(config).sizes(config)
            where = path.parent.relative_to(window / "bench").as_posix()
            out.append({"row": f"{where}/{r['model']}".lstrip("./"),
                        "seconds_per_step": r["ms_per_update"] / 1000,
                        "positions": sizes["positions"],
                        "flops": step_flops(config, sizes["vocab"], sizes["positions"])})
    return out


def step_window(results: str | Path | None = None) -> Path:
    """The newest committed GPU window (fp32) whose benchmarks timed solo steps
    (:func:`bench_steps`): what the step model is fitted to.

    Raises:
        MissingFileError: none has.
    """
    root = (Path(results) if results is not None else book_results()) / "gpu"
    found = sorted(p for p in root.glob("*-fp32") if p.is_dir() and bench_steps(p))
    if not found:
        raise MissingFileError(f"no GPU window under {root} timed solo steps "
                               f"(bench/**/speed-goals*.json); run tools/speed_goals.py in "
                               f"a window and commit its file")
    return found[-1]


def fit_step_model(steps: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """``(a, b)`` of ``t = a + b F`` by least squares over :func:`measured_steps` (both
    kept non-negative: a negative fixed cost or rate is read as zero and the other
    refitted)."""
    if len(steps) < 2:
        raise ConfigError("the step-time model needs at least two measured steps; commit the "
                          "speed rows of a GPU window")
    x = torch.tensor([s["flops"] for s in steps], dtype=torch.float64)
    y = torch.tensor([s["seconds_per_step"] for s in steps], dtype=torch.float64)
    design = torch.stack([torch.ones_like(x), x], dim=1)
    a, b = torch.linalg.lstsq(design, y[:, None]).solution.flatten().tolist()
    if a < 0:
        a, b = 0.0, float((x * y).sum() / (x * x).sum())
    if b < 0:
        a, b = float(y.mean()), 0.0
    return a, b


# ------------------------------------------------------------------ memory
def memory_rows(results: str | Path | None = None) -> list[dict[str, Any]]:
    """The peak memory the committed windows measured (fp32 result files with
    ``peak_gpu_memory_bytes``, their seed folders included), beside what the memory model
    counts for the same row: ``row``, ``peak`` (bytes), ``state`` (weights, gradients and
    optimiser state) and ``saved`` (autograd's saved tensors of one step, unscaled)."""
    root = (Path(results) if results is not None else book_results()) / "gpu"
    out = []
    for path in sorted(root.glob("*-fp32/*/*.json")) + sorted(root.glob("*-fp32/*/*/*.json")):
        doc = json.loads(path.read_text())
        peak = doc.get("metrics", {}).get("peak_gpu_memory_bytes") if isinstance(
            doc, dict) else None
        if not peak:
            continue
        config = config_from_dict(doc["config"])
        _, _, _, state, saved = _probe(config)
        out.append({"row": f"{path.parent.parent.name}/{doc['table']}/{doc['row']}",
                    "peak": float(peak), "state": state, "saved": saved})
    return out


def fit_memory_scale(rows: Sequence[dict[str, Any]]) -> float:
    """``k`` of ``peak = state + k saved`` by least squares over :func:`memory_rows` (1.0,
    the CPU probe as it is, without rows)."""
    if not rows:
        return 1.0
    num = sum((r["peak"] - r["state"]) * r["saved"] for r in rows)
    den = sum(r["saved"] ** 2 for r in rows)
    return max(num / den, 1.0) if den else 1.0


# ------------------------------------------------------------------ predictions
@dataclass(frozen=True)
class Prediction:
    """What a row is predicted to reach (:func:`predict`).

    Attributes:
        job: the row (and seed).
        steps_per_epoch: optimiser steps of one epoch.
        step_seconds: a training step alone on the GPU.
        share: the arithmetic share ``b F / t`` of its step.
        slowdown: the factor the rows running beside it cost it.
        epoch_seconds: an epoch with its validation, beside those rows.
        budget_seconds: the training time it gets before the deadline (a plan with equal
            shares), or the time left in the window when it starts (a plan trained to
            the plateau).
        epochs: the epochs it reaches by then (at most its config's).
        peak_gib: its peak memory.
        plateau_epochs: the epochs it needs to reach its plateau (None: no stopping rule;
            its config's epochs where neither a window nor the plan says).
        plateau_source: where ``plateau_epochs`` comes from (``measured in WINDOW``,
            ``assumed``, ``the config's epochs``).
        seconds: what the row needs in all: its epochs to plateau (or its config's) and
            :data:`ROW_OVERHEAD_SECONDS`.
        window: the window (1, 2, ...) it is predicted to run in; None: it never fits one.
    """

    job: Job
    steps_per_epoch: int
    step_seconds: float
    share: float
    slowdown: float
    epoch_seconds: float
    budget_seconds: float
    epochs: int
    peak_gib: float
    plateau_epochs: int | None = None
    plateau_source: str = ""
    seconds: float = 0.0
    window: int | None = None


@dataclass(frozen=True)
class StepModel:
    """The fitted models and what they were fitted to (:func:`fit_models`)."""

    a: float
    b: float
    steps: list[dict[str, Any]]
    window: Path
    memory_scale: float
    memory: list[dict[str, Any]]


def fit_models(steps_folder: str | Path | None = None,
               results: str | Path | None = None) -> StepModel:
    """The step model fitted to ``steps_folder`` (a window with speed rows,
    :func:`measured_steps`) or to the newest window's solo steps (:func:`step_window`),
    and the memory model's ``k`` fitted to the committed peaks (:func:`memory_rows`)."""
    if steps_folder is not None:
        window = Path(steps_folder)
        steps = bench_steps(window) or measured_steps(window)
    else:
        window = step_window(results)
        steps = bench_steps(window)
    a, b = fit_step_model(steps)
    memory = memory_rows(results)
    return StepModel(a, b, steps, window, fit_memory_scale(memory), memory)


def _row_cost(job: Job, plan: Plan, device: DeviceClass, model: StepModel,
              measured: dict) -> dict:
    """One row's step (seconds), its share of the GPU, its evaluation's seconds, its peak
    memory (GiB) and its epochs to plateau, as :func:`predict` adds them up."""
    config, a, b = job.config, model.a, model.b
    on_cpu = device.name == "cpu"
    sizes, flops, eval_flops, state, saved = _probe(config)
    if on_cpu:  # measured here; an evaluation window is a third of a step's work
        step = cpu_step_seconds(config, sizes)
        eval_seconds = sizes["windows"] * step * eval_flops / max(flops, 1.0) / 3
        eval_seconds += sizes.get("decode_steps", 0) * step / 30
    else:
        step = (a + b * flops) * device.step_scale
        eval_seconds = sizes["windows"] * (a + b * eval_flops) * device.step_scale / 3
        # greedy decoding of the validation set: one small forward per target position
        eval_seconds += sizes.get("decode_steps", 0) * a * device.step_scale / 3
    peak = state + model.memory_scale * saved + (0 if on_cpu else CUDA_CONTEXT_BYTES)
    return {"job": job, "steps": int(sizes["steps"]), "step": step,
            "share": min(b * flops / step, 1.0), "eval": eval_seconds, "peak": peak / 2**30,
            "plateau": _plateau_epochs(job, plan, measured)}


def predict(plan: Plan, *, device_class: str = "h200", steps_folder: str | Path | None = None,
            deadline_minutes: float | None = None, parallel: int | None = None,
            sharing: str | None = None, results: str | Path | None = None,
            model: StepModel | None = None, overrides: Sequence[str] = (),
            skip: frozenset[tuple[str, int]] | set[tuple[str, int]] = frozenset()
            ) -> list[Prediction]:
    """Row by row, what ``plan`` reaches on ``device_class`` (see the module notes).

    Args:
        plan: the plan.
        device_class: a key of :data:`DEVICE_CLASSES`.
        steps_folder: the measured GPU steps (default: the newest committed window's,
            :func:`step_window`).
        deadline_minutes, parallel: instead of the plan's.
        sharing: a key of :data:`SHARINGS`, instead of the plan's.
        results: the results folder holding ``gpu/`` (default: the book's): its windows
            give the measured epochs to plateau and the peaks the memory model is fitted to.
        model: the fitted models (default: :func:`fit_models`).
        overrides: ``key=value`` for every row, after its own (a rehearsal's tiny sizes).
        skip: ``(row, seed)`` of rows left out (final already: what is left of a plan).
    """
    device = DEVICE_CLASSES[check_choice(device_class, sorted(DEVICE_CLASSES), "device class")]
    share_model = SHARINGS[check_choice(sharing or plan.sharing, sorted(SHARINGS), "sharing")]
    model = model or fit_models(steps_folder)
    parallel = parallel or plan.parallel
    deadline = 60 * (deadline_minutes or plan.deadline_minutes) - END_MARGIN_SECONDS
    jobs = [job for job in table_jobs(plan.table, seeds=plan.seeds or None,
                                      overrides=overrides)
            if (job.row.name, job.seed) not in skip]
    measured = measured_plateaus(plan.table, results)
    rows = [_row_cost(job, plan, device, model, measured) for job in jobs]
    on_cpu = device.name == "cpu"
    processes = share_model.way is Way.PROCESS
    out = []
    if plan.to_plateau:  # every row to its plateau: lanes filled, largest first
        lanes = min(parallel, len(rows)) or 1
        slowdown = (max(1.0, lanes / device.cpu_cores) if on_cpu else max(
            share_model.slowdown(lanes), sum(
                sorted((r["share"] for r in rows), reverse=True)[:lanes]),
            lanes / device.cpu_cores if processes else 1.0))
        need = []
        for r in rows:
            epoch = (r["steps"] * r["step"] + r["eval"]) * slowdown
            epochs = r["plateau"][0] or r["job"].config.train.epochs
            need.append((epoch, epochs, epochs * epoch + ROW_OVERHEAD_SECONDS))
        windows = pack_windows([n[2] for n in need], lanes, deadline)
        for r, (epoch, epochs, seconds), w in zip(rows, need, windows, strict=True):
            reached = epochs if w is not None else int(max(deadline - ROW_OVERHEAD_SECONDS,
                                                           0) // epoch)
            out.append(Prediction(r["job"], r["steps"], r["step"], r["share"], slowdown,
                                  epoch, deadline, min(reached, epochs), r["peak"],
                                  r["plateau"][0], r["plateau"][1], seconds, w))
        return out
    waves = math.ceil(len(rows) / parallel)
    reserve = min(max(deadline / waves / 5, 10.0), 180.0)
    budget = max(training_budget(deadline, len(rows), parallel, reserve), 0.0)
    for i, r in enumerate(rows):
        wave = rows[(i // parallel) * parallel:(i // parallel + 1) * parallel]
        slowdown = max(share_model.slowdown(len(wave)), sum(w["share"] for w in wave),
                       len(wave) / device.cpu_cores if processes else 1.0)
        epoch = r["steps"] * r["step"] * slowdown + r["eval"] * slowdown
        epochs = min(r["job"].config.train.epochs, int(budget // epoch))
        out.append(Prediction(r["job"], r["steps"], r["step"], r["share"], slowdown, epoch,
                              budget, epochs, r["peak"], r["plateau"][0], r["plateau"][1],
                              budget + reserve, 1))
    return out


_PROBES: dict[str, tuple] = {}


def _probe(config) -> tuple:
    """``(sizes, step FLOPs, evaluation window FLOPs, state bytes, saved bytes)`` of a
    config, computed once per config whatever its seed (seeds change no size)."""
    key = config.copy()
    key.train.seed = 0
    key = json.dumps(key.to_dict(), sort_keys=True)
    if key not in _PROBES:
        sizes = sizing_of(config).sizes(config)
        work = epoch_flops(config, sizes)
        _PROBES[key] = (sizes, work.step, work.window, state_bytes(config, sizes),
                        activation_bytes(config, sizes["vocab"], sizes["positions"],
                                         **sizes["extra"]))
    return _PROBES[key]


def measured_plateaus(table: str, results: str | Path | None = None) -> dict[str, list]:
    """Row name -> ``[(epochs, window), ...]`` of every committed run of ``table`` (any
    seed, any fp32 window, or the results folder's own ``<table>/``, where a CPU plan
    writes) that reached its plateau."""
    out: dict[str, list] = {}
    root = Path(results) if results is not None else book_results()
    for doc in gpu_union(table, "fp32", results=results, extra=[root]):
        if doc.get("plateau", {}).get("reached"):
            out.setdefault(doc["row"], []).append((doc["epochs_done"], doc["window"]))
    return out


def _plateau_epochs(job: Job, plan: Plan, measured: dict[str, list]) -> tuple[int | None, str]:
    """The epochs ``job`` needs to reach its plateau, and where the number comes from: the
    mean of the windows' runs of its row that reached it, else the plan's assumption, else
    its config's epochs; ``(None, "")`` for a row without a stopping rule."""
    t = job.config.train
    if t.plateau_epochs is None:
        return None, ""
    runs = measured.get(job.row.name)
    if runs:
        return (min(t.epochs, round(sum(e for e, _ in runs) / len(runs))),
                f"measured ({len(runs)} run(s), {runs[-1][1]})")
    if plan.plateau_epochs is not None:
        return min(t.epochs, plan.plateau_epochs), "assumed"
    return t.epochs, "the config's epochs"


def pack_windows(seconds: Sequence[float], lanes: int, window: float) -> list[int | None]:
    """The window (1, 2, ...) each job runs in when every window of ``window`` seconds
    fills ``lanes`` lanes with the jobs not yet run that fit in the time left on a lane,
    largest first (what :func:`~drillbook.experiments.run.scheduler.run_table` does
    with a plan trained to the plateau); None for a job longer than a window."""
    order = sorted(range(len(seconds)), key=lambda i: -seconds[i])
    where: list[int | None] = [None] * len(seconds)
    left = [i for i in order if seconds[i] <= window]
    number = 0
    while left:
        number += 1
        free = [0.0] * max(lanes, 1)
        for i in list(left):
            lane = min(range(len(free)), key=free.__getitem__)
            if free[lane] + seconds[i] <= window:
                free[lane] += seconds[i]
                where[i] = number
                left.remove(i)
    return where


def format_predictions(plan: Plan, predictions: Sequence[Prediction], *, device_class: str,
                       deadline_minutes: float, parallel: int,
                       steps_folder: str | Path | None = None, sharing: str | None = None,
                       results: str | Path | None = None,
                       model: StepModel | None = None) -> str:
    """The dry run's printout: the plan, one line per row, the memory of the rows that run
    together against the device's, the step and memory models' fits with their errors on
    the rows they were fitted to, and the assumptions; for a plan trained to its plateau
    also the windows the whole table needs, at the sharing assumed and at the sharing
    measured with processes."""
    device = DEVICE_CLASSES[device_class]
    if device.name == "cpu":
        return _cpu_printout(plan, predictions, deadline_minutes, parallel, device)
    share_model = SHARINGS[sharing or plan.sharing]
    model = model or fit_models(steps_folder)
    a, b = model.a, model.b
    lines = [f"plan {plan.name}: table {plan.table}, {len(predictions)} row(s), {parallel} at "
             f"once, {deadline_minutes:g} min on {device.name} ({device.memory_gib:g} GiB; "
             f"step time {device.note})",
             f"sharing: {share_model.note}; {parallel} rows at once: "
             f"{share_model.ratio(min(parallel, len(predictions))):.2f}x one row's throughput"]
    lines += _rule_lines(predictions)
    lines += _row_table(predictions, 24, [
        ("x slow", 6, lambda p: f"{p.slowdown:.2f}"), ("s/epoch", 7, _epoch_s),
        ("epochs", 6, lambda p: p.epochs), ("to plateau", 10, _to_plateau),
        ("minutes", 7, _minutes), ("window", 6, _window),
        ("peak GiB", 8, lambda p: f"{p.peak_gib:.2f}")])
    lines += _plateau_sources(plan, predictions)
    lanes = min(parallel, len(predictions)) or 1
    worst = max(sum(p.peak_gib for p in predictions[i:i + lanes])
                for i in range(0, len(predictions), lanes))
    fits = "fits" if worst <= device.memory_gib else "does NOT fit"
    lines.append(f"memory of the rows running together: at most {worst:.1f} GiB of "
                 f"{device.memory_gib:g} ({fits})")
    if plan.to_plateau:
        lines += _windows_lines(plan, predictions, device_class, deadline_minutes, parallel,
                                share_model, results, model)
    errors = ", ".join(
        f"{m['row']} {100 * (a + b * m['flops']) / m['seconds_per_step'] - 100:+.0f}%"
        for m in model.steps)
    lines.append(f"step model: a = {1000 * a:.1f} ms, b = {b * 1e12:.4f} ms per GFLOP "
                 f"({1e-12 / b if b else math.inf:.0f} TFLOP/s), fitted to "
                 f"{model.window.name}; its error on those rows: {errors}")
    k = model.memory_scale
    errors = ", ".join(f"{m['row']} {100 * (m['state'] + k * m['saved']) / m['peak'] - 100:+.0f}%"
                       f" (k = 1: {100 * (m['state'] + m['saved']) / m['peak'] - 100:+.0f}%)"
                       for m in model.memory) or "no peaks measured yet"
    lines.append(f"memory model: k = {k:.2f} x the CPU probe's saved tensors, fitted to the "
                 f"peaks measured; its error on those rows: {errors}")
    lines += ["assumptions:", *[f"  - {x}" for x in ASSUMPTIONS]]
    return "\n".join(lines)


def _cpu_printout(plan: Plan, predictions: Sequence[Prediction], deadline_minutes: float,
                  parallel: int, device: DeviceClass) -> str:
    """The dry run's printout on this CPU: the rows left, their measured step times, the
    epochs to plateau, the minutes each needs and the sitting it is predicted to run in,
    and the hours of the machine's cores they need in all."""
    lanes = min(parallel, len(predictions)) or 1
    lines = [f"plan {plan.name}: table {plan.table}, {len(predictions)} row(s) left, "
             f"{parallel} at once (one thread each) on this CPU ({device.cpu_cores} "
             f"core(s)), sittings of {deadline_minutes:g} min; step time {device.note}"]
    lines += _rule_lines(predictions)
    lines += _row_table(predictions, 32, [
        ("s/epoch", 7, _epoch_s), ("to plateau", 10, _to_plateau), ("minutes", 7, _minutes),
        ("sitting", 7, _window)])
    lines += _plateau_sources(plan, predictions)
    hours = sum(p.seconds for p in predictions) / 3600
    never = [p.job.name for p in predictions if p.window is None]
    lines.append(f"in all: {hours:.1f} core-hours, {hours / lanes:.1f} hours of {lanes} "
                 f"core(s) training a row each")
    if never:
        lines.append(f"longer than one sitting of {deadline_minutes:g} min (never started "
                     f"in one): {', '.join(never)}")
    return "\n".join(lines)


def _epoch_s(p: Prediction) -> str:
    return f"{p.epoch_seconds:.1f}"


def _to_plateau(p: Prediction) -> object:
    return p.plateau_epochs if p.plateau_epochs else "-"


def _minutes(p: Prediction) -> str:
    return f"{p.seconds / 60:.1f}"


def _window(p: Prediction) -> object:
    return p.window or "never"


def _row_table(predictions: Sequence[Prediction], name_width: int, columns) -> list[str]:
    """A dry run's table: the row, its steps per epoch and step time, then ``columns``
    (heading, width, the cell of a prediction), right-aligned."""
    columns = [("steps/ep", 8, lambda p: p.steps_per_epoch),
               ("ms/step", 7, lambda p: f"{1000 * p.step_seconds:.1f}"), *columns]
    lines = [" ".join([f"{'row':<{name_width}}", *(f"{h:>{w}}" for h, w, _ in columns)])]
    for p in predictions:
        lines.append(" ".join([f"{p.job.name:<{name_width}}",
                               *(f"{cell(p)!s:>{w}}" for _, w, cell in columns)]))
    return lines


def _plateau_sources(plan: Plan, predictions: Sequence[Prediction]) -> list[str]:
    """The line saying where the epochs to plateau come from (none without a rule)."""
    sources = sorted({p.plateau_source for p in predictions if p.plateau_source})
    if not sources:
        return []
    assumed = (f" ({plan.plateau_epochs} epochs, {plan.plateau_note})"
               if "assumed" in sources else "")
    return [f"epochs to plateau: {', '.join(sources)}{assumed}"]


def _rule_lines(predictions: Sequence[Prediction]) -> list[str]:
    """The line stating the plan's stopping rule (none without one)."""
    rule = _rule_of(predictions)
    return [f"stopping rule: {rule}"] if rule else []


def _rule_of(predictions: Sequence[Prediction]) -> str:
    """The stopping rule of the plan's rows, in words (empty: none has one)."""
    from .documents import plateau_block

    for p in predictions:
        block = plateau_block(p.job.config, reached=False)
        if block:
            return f"{block['plateau']['rule']} (at most {p.job.config.train.epochs} epochs)"
    return ""


def _windows_lines(plan: Plan, predictions: Sequence[Prediction], device_class: str,
                   deadline_minutes: float, parallel: int, share_model: Sharing,
                   results, model: StepModel) -> list[str]:
    """How many windows the whole table needs at this sharing, and at the other."""
    lines = []
    cases = [(share_model, parallel)]
    for other in SHARINGS.values():
        best = max(range(1, parallel + 1), key=lambda n: (round(other.ratio(n), 6), -n))
        cases += [(other, n) for n in dict.fromkeys([parallel, best])
                  if (other, n) not in cases]
    for other, lanes in cases:
        rows = predictions if (other, lanes) == cases[0] else predict(
            plan, device_class=device_class, deadline_minutes=deadline_minutes,
            parallel=lanes, sharing=other.name, results=results, model=model)
        placed = [p.window for p in rows if p.window is not None]
        never = sum(1 for p in rows if p.window is None)
        need = sum(p.seconds for p in rows) / min(lanes, len(rows)) / 60
        what = (f"{max(placed)} window(s) of {deadline_minutes:g} min" if placed
                else "no window")
        lines.append(f"whole table at {other.name} "
                     f"({'measured' if other.measured else 'ASSUMED'}), {lanes} at once "
                     f"({other.ratio(min(lanes, len(rows))):.2f}x one row): {what}"
                     + (f" for the rows that fit; {never} row(s) longer than a window never "
                        f"fit" if never else "")
                     + f"; {need:.1f} min of training per lane in all")
    return lines
