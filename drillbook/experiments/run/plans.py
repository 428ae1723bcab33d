"""Plans for a GPU window, and what they are predicted to reach before it is spent.

A lent GPU comes rarely and for minutes, so what a window will hold has to be worked out on
a CPU beforehand. A :class:`Plan` is a table of rows trained side by side
(:mod:`drillbook.experiments.run.scheduler`) within a deadline; :func:`predict` says, row by
row, the seconds per epoch, the epochs reached by the deadline and the peak memory on a
device class, from a stated model (:data:`ASSUMPTIONS`):

* **time** of a training step, ``t = a + b F``: ``F`` its matrix-product FLOPs
  (:func:`step_flops`, forward and backward), ``a`` a fixed cost per step (kernel
  launches, the Python loop), both fitted by least squares to the steps the package
  measured on an H200 (:func:`measured_steps`, the committed ``speed`` rows);
* **sharing**: rows on one GPU slow each other down by ``1 + c (n - 1)`` for ``n`` rows
  at once (:data:`SHARING_COST` ``c``, fitted to the first window's rows: the GPU
  time-slices between processes, so latency-bound rows do not fill each other's idle
  time as hoped), or by the sum of their arithmetic shares ``b F / t`` where that is
  larger;
* **validation** each epoch: a window of evaluation costs a third of a training step of
  the same size (forward only);
* **memory**: weights, gradients and optimiser state (4 bytes each), plus what autograd
  keeps for the backward pass, measured on the CPU at two small batches and extrapolated
  linearly in the positions of a step (:func:`activation_bytes`), plus a CUDA context.

The first real window tests these assumptions; its result files hold what each row
actually reached.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ...configs import config_from_dict
from ...errors import ConfigError
from ...validation import check_choice
from ..results import gpu_results
from ..tables import Plan, find_row
from .reproduce import Job, table_jobs
from .scheduler import END_MARGIN_SECONDS, training_budget
from .sizing import sizing_of

__all__ = ["ASSUMPTIONS", "DEVICE_CLASSES", "SHARING_COST", "DeviceClass", "EpochWork",
           "Prediction", "activation_bytes", "epoch_flops", "fit_step_model",
           "format_predictions", "measured_steps", "predict", "step_flops"]

#: what each further row on the same GPU adds to a row's time, as a multiple of its time
#: alone: fitted to the gpu-ptb window of 2026-11-26 (NVIDIA H200, four rows at once, each
#: 3.33 to 3.62 times its predicted epoch alone, mean 3.45 = 1 + 3 x 0.82;
#: ``drillbook/results/gpu/2026-11-26-h200-window2-fp32``). The first model (the sum of
#: the rows' arithmetic shares) predicted 1.39.
SHARING_COST = 0.82

#: the model's assumptions, in words (printed with every prediction)
ASSUMPTIONS = (
    "training step t = a + b F, F its forward+backward matrix-product FLOPs, a and b fitted "
    "to the H200 speed rows the package measured (fp32)",
    "rows sharing one GPU slow each other down by max(1 + c (n - 1) for n rows at once, "
    "the sum of their arithmetic shares b F / t, rows / CPU cores), c = 0.82 fitted to "
    "the gpu-ptb window of 2026-11-26 (four rows at once: 3.3 to 3.6 times the predicted "
    "time alone; the GPU time-slices between processes)",
    "every wave of rows gets an equal share of the deadline, a fifth of it (10 s to 3 min) "
    "kept for evaluation and the result file",
    "an evaluation window costs a third of a training step of the same positions; a "
    "translation's validation also decodes greedily, max_len steps of a third of the "
    "fixed cost a per batch",
    "memory = 4 bytes x (weights + gradients + optimiser state) + autograd's saved tensors "
    "(measured on the CPU at two small batches, linear in the positions) + 0.5 GiB of CUDA "
    "context",
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
}


# ------------------------------------------------------------------ FLOPs
def step_flops(config, vocab_size: int, positions: float, **extra) -> float:
    """Matrix-product FLOPs of one training step, forward and backward (three times the
    forward pass, :attr:`~drillbook.experiments.run.sizing.TaskSizing.forward_flops` of the
    config's task): of a language model over ``positions`` positions, or (``extra``:
    ``src_vocab``, ``src_len``, ``tgt_len``) of a translation batch of ``positions``
    sentences."""
    return 3 * sizing_of(config).forward_flops(config, vocab_size, positions, **extra)


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
def activation_bytes(config, vocab_size: int, positions: float, **extra) -> float:
    """What autograd keeps for the backward pass of one training step of ``positions``
    positions (a language model) or sentences (translation, with ``extra``: ``src_vocab``,
    ``src_len``, ``tgt_len``): measured on the CPU at two small sizes by the task's probe
    (:attr:`~drillbook.experiments.run.sizing.TaskSizing.saved`, with
    :func:`~drillbook.experiments.bench.measure.saved_bytes`), extrapolated linearly."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    (n1, n2), bytes_at = sizing_of(config).saved(config, vocab_size, gen, **extra)
    y1, y2 = bytes_at(n1), bytes_at(n2)
    slope = max(y2 - y1, 0.0) / (n2 - n1)
    return max(y1 + slope * (positions - n1), 0.0)


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
        budget_seconds: the training time it gets before the deadline.
        epochs: the epochs it reaches (at most its config's).
        peak_gib: its peak memory.
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


class EpochWork(NamedTuple):
    """One epoch of a config in matrix-product FLOPs (:func:`epoch_flops`).

    Attributes:
        steps: optimiser steps.
        positions: positions (tokens, or a translation's sentences) per step.
        step: FLOPs of a training step, forward and backward (:func:`step_flops`).
        windows: evaluation windows of its validation.
        window: :func:`step_flops` of a window's positions; a window runs forward only,
            a third of that.
        vocab: the (target) vocabulary's size.
        extra: what a task's step needs beyond them (a translation's ``src_vocab``,
            ``src_len`` and ``tgt_len``; :class:`~drillbook.experiments.run.sizing.TaskSizing`).
    """

    steps: int
    positions: float
    step: float
    windows: float
    window: float
    vocab: int
    extra: dict[str, Any]


def epoch_flops(config, sizes: dict[str, Any] | None = None) -> EpochWork:
    """One epoch of ``config`` (:class:`EpochWork`), from its task's
    :attr:`~drillbook.experiments.run.sizing.TaskSizing.sizes` (given, or read: a
    translation config's data for its vocabularies and sentence lengths).

    Raises:
        ConfigError: a config the FLOP model has no formula for (a Transformer encoder).
    """
    sizes = sizing_of(config).sizes(config) if sizes is None else sizes
    return EpochWork(
        int(sizes["steps"]), float(sizes["positions"]),
        step_flops(config, sizes["vocab"], sizes["positions"], **sizes["extra"]),
        float(sizes["windows"]),
        step_flops(config, sizes["vocab"], sizes["eval_positions"], **sizes["extra"]),
        int(sizes["vocab"]), dict(sizes["extra"]))


def predict(plan: Plan, *, device_class: str = "h200", steps_folder: str | Path | None = None,
            deadline_minutes: float | None = None, parallel: int | None = None
            ) -> list[Prediction]:
    """Row by row, what ``plan`` reaches on ``device_class`` (see the module notes).

    Args:
        plan: the plan.
        device_class: a key of :data:`DEVICE_CLASSES`.
        steps_folder: the measured GPU steps (default: the window the package ships,
            :func:`~drillbook.experiments.results.gpu_results`).
        deadline_minutes, parallel: instead of the plan's.
    """
    device = DEVICE_CLASSES[check_choice(device_class, sorted(DEVICE_CLASSES), "device class")]
    folder = (Path(steps_folder) if steps_folder is not None
              else gpu_results("fp32", table="speed"))
    a, b = fit_step_model(measured_steps(folder))
    parallel = parallel or plan.parallel
    deadline = 60 * (deadline_minutes or plan.deadline_minutes) - END_MARGIN_SECONDS
    jobs = table_jobs(plan.table, seeds=plan.seeds or None)
    rows = []
    for job in jobs:
        config = job.config
        sizing = sizing_of(config)
        sizes = sizing.sizes(config)
        work = epoch_flops(config, sizes)
        flops, eval_flops = work.step, work.window
        step = (a + b * flops) * device.step_scale
        eval_seconds = sizes["windows"] * (a + b * eval_flops) * device.step_scale / 3
        # greedy decoding of the validation set: one small forward per target position
        eval_seconds += sizes.get("decode_steps", 0) * a * device.step_scale / 3
        params = sum(p.numel() for p in sizing.model(config, sizes).parameters())
        state = 4 * params * (2 + sizing.optimizer_states(config))
        saved = activation_bytes(config, sizes["vocab"], sizes["positions"], **sizes["extra"])
        rows.append({"job": job, "steps": int(sizes["steps"]), "step": step,
                     "share": min(b * flops / step, 1.0), "eval": eval_seconds,
                     "peak": (state + saved + CUDA_CONTEXT_BYTES) / 2**30})
    out = []
    waves = math.ceil(len(rows) / parallel)
    reserve = min(max(deadline / waves / 5, 10.0), 180.0)
    budget = max(training_budget(deadline, len(rows), parallel, reserve), 0.0)
    for i, r in enumerate(rows):
        wave = rows[(i // parallel) * parallel:(i // parallel + 1) * parallel]
        slowdown = max(1.0 + SHARING_COST * (len(wave) - 1), sum(w["share"] for w in wave),
                       len(wave) / device.cpu_cores)
        epoch = r["steps"] * r["step"] * slowdown + r["eval"] * slowdown
        epochs = min(r["job"].config.train.epochs, int(budget // epoch))
        out.append(Prediction(r["job"], r["steps"], r["step"], r["share"], slowdown, epoch,
                              budget, epochs, r["peak"]))
    return out


def format_predictions(plan: Plan, predictions: Sequence[Prediction], *, device_class: str,
                       deadline_minutes: float, parallel: int,
                       steps_folder: str | Path | None = None) -> str:
    """The dry run's printout: the plan, one line per row, the memory of the rows that run
    together against the device's, the step model's fit to the measured steps, and the
    assumptions."""
    device = DEVICE_CLASSES[device_class]
    folder = (Path(steps_folder) if steps_folder is not None
              else gpu_results("fp32", table="speed"))
    measured = measured_steps(folder)
    a, b = fit_step_model(measured)
    lines = [f"plan {plan.name}: table {plan.table}, {len(predictions)} row(s), {parallel} at "
             f"once, {deadline_minutes:g} min on {device.name} ({device.memory_gib:g} GiB; "
             f"step time {device.note})",
             f"{'row':<28} {'steps/ep':>8} {'ms/step':>8} {'share':>6} {'x slow':>6} "
             f"{'s/epoch':>8} {'budget s':>8} {'epochs':>6} {'peak GiB':>8}"]
    for p in predictions:
        lines.append(f"{p.job.name:<28} {p.steps_per_epoch:>8} {1000 * p.step_seconds:>8.1f} "
                     f"{p.share:>6.2f} {p.slowdown:>6.2f} {p.epoch_seconds:>8.1f} "
                     f"{p.budget_seconds:>8.0f} {p.epochs:>6} {p.peak_gib:>8.2f}")
    waves = [predictions[i:i + parallel] for i in range(0, len(predictions), parallel)]
    worst = max(sum(p.peak_gib for p in w) for w in waves)
    fits = "fits" if worst <= device.memory_gib else "does NOT fit"
    lines.append(f"memory of the rows running together: at most {worst:.1f} GiB of "
                 f"{device.memory_gib:g} ({fits})")
    errors = ", ".join(
        f"{m['row']} {100 * (a + b * m['flops']) / m['seconds_per_step'] - 100:+.0f}%"
        for m in measured)
    lines.append(f"step model: a = {1000 * a:.1f} ms, b = {b * 1e12:.4f} ms per GFLOP "
                 f"({1e-12 / b if b else math.inf:.0f} TFLOP/s), fitted to {folder.name}; "
                 f"its error on those rows: {errors}")
    lines += ["assumptions:", *[f"  - {x}" for x in ASSUMPTIONS]]
    return "\n".join(lines)
