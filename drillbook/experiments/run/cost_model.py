"""What a row's step costs: its time and its memory, measured or modelled.

On a GPU the time of a training step is ``t = a + b F`` (``F`` its matrix-product FLOPs,
:func:`~drillbook.experiments.run.sizing.step_flops`), ``a`` and ``b`` fitted by least
squares (:func:`fit_step_model`) to the solo steps the newest committed window timed
(:func:`bench_steps`, :func:`step_window`; :func:`measured_steps` reads a window's speed
rows); its peak memory is the weights, gradients and optimiser state plus ``k`` times what
autograd keeps for the backward pass (:func:`probe_config`), ``k`` fitted to the peaks the
windows measured (:func:`memory_rows`, :func:`fit_memory_scale`). :func:`fit_models` fits
both at once (:class:`StepModel`). On this machine's CPU no model applies: a config's step
is timed here (:func:`cpu_step_seconds`, the step its task declares).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...configs import config_from_dict, get_config
from ...errors import ConfigError, MissingFileError
from ...train.tasks import task_of
from ..results import book_results
from ..tables import find_row
from .sizing import activation_bytes, epoch_flops, sizing_of, state_bytes, step_flops

__all__ = ["StepModel", "bench_steps", "cpu_step_seconds", "fit_memory_scale", "fit_models",
           "fit_step_model", "measured_steps", "memory_rows", "probe_config", "step_window"]

#: the CPU's step times measured in this process, by config (its seed aside)
_CPU_STEPS: dict[str, float] = {}


def cpu_step_seconds(config, sizes: dict[str, Any], steps: int = 3) -> float:
    """The seconds of one training step of ``config`` on this CPU with one thread, the
    fastest of ``steps`` after one to warm up (measured once per config in a process): the
    step its task declares (:meth:`~drillbook.train.tasks.registry.Sizing.cpu_step_call`:
    the language-model trainer's own step on random word ids of the step's shape, a
    translation model's loss and backward pass on random sentence pairs of the mean
    lengths)."""
    key = config.copy()
    key.train.seed = 0
    key = json.dumps(key.to_dict(), sort_keys=True)
    if key in _CPU_STEPS:
        return _CPU_STEPS[key]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        call = task_of(config).sizing.cpu_step_call(config, sizes,
                                                    torch.Generator().manual_seed(0))
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


# ------------------------------------------------------------------ the measured steps
def measured_steps(folder: str | Path) -> list[dict[str, Any]]:
    """The training steps the package measured on a GPU: one dict per ``fp32`` result file
    of the ``speed`` table under ``folder`` (``<folder>/speed/*.json``), and per log of a
    row without one (``<folder>/logs/<row>.log.jsonl``): ``row``, ``seconds_per_step``
    (an epoch's training seconds over its updates), ``positions`` (tokens per update) and
    ``flops`` (:func:`~drillbook.experiments.run.sizing.step_flops`)."""
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
        _, _, _, state, saved = probe_config(config)
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


_PROBED: dict[str, tuple] = {}


def probe_config(config) -> tuple:
    """``(sizes, step FLOPs, evaluation window FLOPs, state bytes, saved bytes)`` of a
    config, computed once per config whatever its seed (seeds change no size)."""
    key = config.copy()
    key.train.seed = 0
    key = json.dumps(key.to_dict(), sort_keys=True)
    if key not in _PROBED:
        sizes = sizing_of(config).sizes(config)
        work = epoch_flops(config, sizes)
        _PROBED[key] = (sizes, work.step, work.window, state_bytes(config, sizes),
                        activation_bytes(config, sizes["vocab"], sizes["positions"],
                                         **sizes["extra"]))
    return _PROBED[key]
