"""The dry run's printout of a plan: what each row is predicted to reach
(:func:`~drillbook.experiments.run.plans.predict`), on a GPU with the step and memory
models' fits and errors and the assumptions, on this CPU with the sittings and core-hours
the rows left need.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..tables import Plan, to_plateau
from .cost_model import StepModel, fit_models
from .devices import DEVICE_CLASSES, SHARINGS, DeviceClass, Sharing
from .plans import ASSUMPTIONS, Prediction, predict

__all__ = ["format_predictions"]

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
    if not predictions:  # a plan continued to its end: say so instead of an empty table
        return (f"plan {plan.name}: table {plan.table}, no row left: every row (and seed) "
                f"is final in the results read (its stopping rule reached, or all its "
                f"epochs run); nothing to train")
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
    if to_plateau(plan):
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
    from_runs = sorted({p.job.row.name for p in predictions if p.step_source == "runs"})
    timing = (f"step time of {', '.join(from_runs)}: the median training epoch their "
              f"committed CPU runs logged, over its steps; of the others, " if from_runs
              else "step time ")
    lines = [f"plan {plan.name}: table {plan.table}, {len(predictions)} row(s) left, "
             f"{parallel} at once (one thread each) on this CPU ({device.cpu_cores} "
             f"core(s)), sittings of {deadline_minutes:g} min; {timing}{device.note}"]
    lines += _rule_lines(predictions)
    lines += _row_table(predictions, 32, [
        ("s/epoch", 7, _epoch_s), ("done", 4, lambda p: p.epochs_done),
        ("to plateau", 10, _to_plateau), ("minutes", 7, _minutes), ("sitting", 7, _window)])
    lines += _plateau_sources(plan, predictions)
    resumed = [f"{p.job.name} after epoch {p.epochs_done}" for p in predictions
               if p.epochs_done]
    if resumed:
        lines.append(f"resumed from their checkpoints (minutes: the epochs after those "
                     f"only): {', '.join(resumed)}")
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
