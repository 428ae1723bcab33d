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
  committed window timed (:mod:`drillbook.experiments.run.cost_model`), the fit's error on
  each printed;
* **sharing**: ``n`` rows at once train ``ratio(n)`` times one row's updates per second
  (:mod:`drillbook.experiments.run.devices`): as processes, measured (fitted to the first
  plan window: the GPU time-slices between processes); as graphed steps on streams in one
  process, an assumption until a window measures it; or by the sum of their arithmetic
  shares ``b F / t`` where that is larger;
* **epochs to plateau** of a row with a stopping rule: the mean of the committed runs of
  that row that reached it under the same rule (:func:`measured_plateaus`), else those of
  the table's other rows, else the plan's assumption, else its config's epochs;
* **validation** each epoch: a window of evaluation costs a third of a training step of
  the same size (forward only);
* **memory**: weights, gradients and optimiser state (4 bytes each), plus ``k`` times what
  autograd keeps for the backward pass, measured on the CPU at two small batches and
  extrapolated linearly in the positions of a step (:func:`activation_bytes`; ``k``
  fitted to the peaks a window measured), plus a CUDA context.

Each window tests these assumptions; its result files hold what each row actually
reached, and the next window's predictions read them. The dry run prints the predictions
(:mod:`drillbook.experiments.run.dry_run`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import DrillbookError
from ...train.ways import Way
from ...validation import check_choice
from ..results import book_results, gpu_union
from ..tables import Plan, to_plateau
from .cost_model import StepModel, cpu_step_seconds, fit_models, probe_config
from .devices import CUDA_CONTEXT_BYTES, DEVICE_CLASSES, SHARINGS, DeviceClass
from .jobs import Job, table_jobs
from .scheduler import END_MARGIN_SECONDS, training_budget
from .sizing import EpochWork, activation_bytes, epoch_flops, step_flops

__all__ = ["ASSUMPTIONS", "ROW_OVERHEAD_SECONDS", "EpochWork", "Prediction",
           "activation_bytes", "committed_runs", "epoch_flops", "measured_cpu_epochs",
           "measured_plateaus", "pack_windows", "predict", "step_flops"]

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
        step_source: on the CPU, where ``step_seconds`` comes from: ``runs`` (the median
            training epoch of the row's committed CPU runs, over its steps) or ``probe``
            (three steps timed here).
        epochs_done: the epochs its resumable checkpoint holds already (``runs`` of
            :func:`predict`); ``seconds`` counts only the epochs after them.
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
    step_source: str = ""
    epochs_done: int = 0


def _row_cost(job: Job, plan: Plan, device: DeviceClass, model: StepModel,
              measured: dict, epochs_run: dict | None = None) -> dict:
    """One row's step (seconds), its share of the GPU, its evaluation's seconds, its peak
    memory (GiB) and its epochs to plateau, as :func:`predict` adds them up. On the CPU
    the step is the median training epoch of the row's committed CPU runs
    (``epochs_run``, :func:`measured_cpu_epochs`) over its steps where there are any,
    else timed here."""
    config, a, b = job.config, model.a, model.b
    on_cpu = device.name == "cpu"
    sizes, flops, eval_flops, state, saved = probe_config(config)
    source = ""
    if on_cpu:  # measured here; an evaluation window is a third of a step's work
        seconds = (epochs_run or {}).get(job.row.name)
        if seconds:
            step, source = statistics.median(seconds) / max(sizes["steps"], 1), "runs"
        else:
            step, source = cpu_step_seconds(config, sizes), "probe"
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
            "plateau": _plateau_epochs(job, plan, measured), "source": source}


def predict(plan: Plan, *, device_class: str = "h200", steps_folder: str | Path | None = None,
            deadline_minutes: float | None = None, parallel: int | None = None,
            sharing: str | None = None, results: str | Path | None = None,
            model: StepModel | None = None, overrides: Sequence[str] = (),
            skip: frozenset[tuple[str, int]] | set[tuple[str, int]] = frozenset(),
            runs: str | Path | None = None) -> list[Prediction]:
    """Row by row, what ``plan`` reaches on ``device_class`` (see the module notes).

    Args:
        plan: the plan.
        device_class: a key of :data:`~drillbook.experiments.run.devices.DEVICE_CLASSES`.
        steps_folder: the measured GPU steps (default: the newest committed window's,
            :func:`~drillbook.experiments.run.cost_model.step_window`).
        deadline_minutes, parallel: instead of the plan's.
        sharing: a key of :data:`~drillbook.experiments.run.devices.SHARINGS`, instead of
            the plan's.
        results: the results folder holding ``gpu/`` (default: the book's): its windows
            give the measured epochs to plateau and the peaks the memory model is fitted to.
        model: the fitted models (default:
            :func:`~drillbook.experiments.run.cost_model.fit_models`).
        overrides: ``key=value`` for every row, after its own (a rehearsal's tiny sizes).
        skip: ``(row, seed)`` of rows left out (final already: what is left of a plan).
        runs: the run folders the plan trains in (``--runs``): a row of a plan trained
            to its plateau whose folder there holds a resumable checkpoint needs only the
            epochs after the ones its log records (at least one).
    """
    device = DEVICE_CLASSES[check_choice(device_class, sorted(DEVICE_CLASSES), "device class")]
    share_model = SHARINGS[check_choice(sharing or plan.sharing, sorted(SHARINGS), "sharing")]
    model = model or fit_models(steps_folder)
    parallel = parallel or plan.parallel
    deadline = 60 * (deadline_minutes or plan.deadline_minutes) - END_MARGIN_SECONDS
    jobs = [job for job in table_jobs(plan.table, seeds=plan.seeds or None,
                                      overrides=overrides)
            if (job.row.name, job.seed) not in skip]
    docs = committed_runs(plan.table, results)  # read once, for both of the below
    measured = measured_plateaus(plan.table, docs=docs)
    on_cpu = device.name == "cpu"
    epochs_run = measured_cpu_epochs(plan.table, docs=docs) if on_cpu else None
    rows = [_row_cost(job, plan, device, model, measured, epochs_run) for job in jobs]
    processes = share_model.way is Way.PROCESS
    out = []
    if to_plateau(plan):  # every row to its plateau: lanes filled, largest first
        lanes = min(parallel, len(rows)) or 1
        slowdown = (max(1.0, lanes / device.cpu_cores) if on_cpu else max(
            share_model.slowdown(lanes), sum(
                sorted((r["share"] for r in rows), reverse=True)[:lanes]),
            lanes / device.cpu_cores if processes else 1.0))
        need = []
        for r in rows:
            epoch = (r["steps"] * r["step"] + r["eval"]) * slowdown
            epochs = r["plateau"][0] or r["job"].config.train.epochs
            done = epochs_logged(r["job"].run_dir(runs)) if runs is not None else 0
            left = max(min(epochs, r["job"].config.train.epochs) - done, 1)
            need.append((epoch, epochs, done, left * epoch + ROW_OVERHEAD_SECONDS))
        windows = pack_windows([n[3] for n in need], lanes, deadline)
        for r, (epoch, epochs, done, seconds), w in zip(rows, need, windows, strict=True):
            reached = epochs if w is not None else done + int(
                max(deadline - ROW_OVERHEAD_SECONDS, 0) // epoch)
            out.append(Prediction(r["job"], r["steps"], r["step"], r["share"], slowdown,
                                  epoch, deadline, min(reached, epochs), r["peak"],
                                  r["plateau"][0], r["plateau"][1], seconds, w,
                                  r["source"], done))
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


def epochs_logged(run_dir: str | Path) -> int:
    """The epochs a run folder's resumable checkpoint holds, as its log records them (the
    last record's ``epoch``); 0 for a folder without ``last.pt`` or without a log (a run
    stopped inside its first epoch resumes there, but has no epoch to count)."""
    from ...train.run_files import has_checkpoint, read_log

    if not has_checkpoint(run_dir):
        return 0
    try:
        records = read_log(run_dir)
    except DrillbookError:  # no log yet, or an unreadable one: count nothing
        return 0
    return max((int(r.get("epoch", 0)) for r in records), default=0)


def committed_runs(table: str, results: str | Path | None = None) -> list[dict]:
    """The result files of every committed run of ``table``: any seed, any fp32 window,
    and the results folder's own ``<table>/``, where a CPU plan writes (``results``:
    default the book's)."""
    root = Path(results) if results is not None else book_results()
    return list(gpu_union(table, "fp32", results=results, extra=[root]))


def measured_plateaus(table: str, results: str | Path | None = None, *,
                      docs: Sequence[dict] | None = None) -> dict[str, list]:
    """Row name -> ``[(epochs, window, rule), ...]`` of every committed run of ``table``
    (:func:`committed_runs`, or ``docs`` where the caller has read them) that reached its
    plateau; ``rule`` is ``(epochs, tolerance)`` of the stopping rule it reached (None
    where its file does not say)."""
    out: dict[str, list] = {}
    for doc in committed_runs(table, results) if docs is None else docs:
        block = doc.get("plateau", {})
        if block.get("reached"):
            rule = ((block["epochs"], block["tolerance"])
                    if "epochs" in block and "tolerance" in block else None)
            out.setdefault(doc["row"], []).append((doc["epochs_done"], doc["window"], rule))
    return out


def measured_cpu_epochs(table: str, results: str | Path | None = None, *,
                        docs: Sequence[dict] | None = None) -> dict[str, list[float]]:
    """Row name -> the training seconds of every epoch (validation left out) that the
    committed CPU runs of ``table`` logged (any seed, any stopping status;
    :func:`committed_runs`, or ``docs`` where the caller has read them): what a row of
    that head took on this kind of machine, beside the other work of its sitting."""
    out: dict[str, list[float]] = {}
    for doc in committed_runs(table, results) if docs is None else docs:
        if not str(doc.get("device", "")).startswith("cpu"):
            continue
        seconds = [e["epoch_seconds"] for e in doc.get("curve") or ()
                   if isinstance(e, dict) and e.get("epoch_seconds")]
        out.setdefault(doc["row"], []).extend(seconds)
    return out


def _plateau_epochs(job: Job, plan: Plan, measured: dict[str, list]) -> tuple[int | None, str]:
    """The epochs ``job`` needs to reach its plateau, and where the number comes from: the
    mean of the committed runs of its row that reached it under the job's own rule (a run
    stopped by another rule says nothing about this one), else the mean of the table's
    other rows under that rule, else the plan's assumption, else its config's epochs;
    ``(None, "")`` for a row without a stopping rule."""
    t = job.config.train
    if t.plateau_epochs is None:
        return None, ""
    rule = (t.plateau_epochs, t.plateau_tolerance)
    def mean_epochs(runs: list) -> int:  # at most the config's cap
        return min(t.epochs, round(sum(r[0] for r in runs) / len(runs)))

    runs = [r for r in measured.get(job.row.name, ()) if r[2] == rule]
    if runs:
        return mean_epochs(runs), f"measured ({len(runs)} run(s), {runs[-1][1]})"
    others = [r for name, rows in measured.items() if name != job.row.name
              for r in rows if r[2] == rule]
    if others:  # the table's other rows under the same rule: closer than an assumption
        return mean_epochs(others), f"the table's other rows ({len(others)} run(s))"
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
