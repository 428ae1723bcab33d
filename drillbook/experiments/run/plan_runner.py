"""The plan runner: what is left of a plan that continues from window to window.

A plan whose rows train to their plateau
(:func:`~drillbook.experiments.tables.to_plateau`) rarely fits one GPU window whole.
:func:`run_plan` runs what is left of it:

* a row (and seed) whose result file is final
  (:func:`~drillbook.experiments.results.is_final`: it trained every epoch or reached its
  plateau, nothing pending) in a committed window of the same precision, or in this
  call's results folder, is skipped, as long as it trained the config the plan trains
  now;
* the others are started largest predicted time first
  (:func:`~drillbook.experiments.run.plans.predict`), each when a worker is free and only
  if its predicted time fits in what is left of the deadline; one that fits nowhere is
  not started and waits for the next window: the table's one queue
  (:func:`~drillbook.experiments.run.scheduler.run_table`), given the rows that are not
  final, through whichever executor the rows run on.

The windows' result files then read as one table per plan and precision
(:func:`~drillbook.experiments.results.gpu_union`), each row naming its window.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...configs import config_from_dict
from ...precision import precision_label, resolve_precision
from ...runtime import resolve_device
from ..results import book_results, gpu_union, is_final
from ..tables import Plan
from .executors import Executor
from .jobs import Job, table_jobs
from .plans import predict
from .scheduler import run_table

__all__ = ["final_jobs", "run_plan"]


def final_jobs(jobs: Sequence[Job], precision: str, *, results: str | Path | None = None,
               out: str | Path | None = None) -> set[tuple[str, int]]:
    """``(row, seed)`` of the ``jobs`` whose result file is final in a committed window of
    ``precision`` (under ``results``, default the book's), in ``results/<table>`` (a CPU
    plan's committed rows) or in ``out``, and trained the job's config as it is now (equal
    hashes)."""
    wanted = {(job.row.name, job.seed): job.config.hash() for job in jobs}
    table = {job.table for job in jobs}
    done = set()
    root = Path(results) if results is not None else book_results()
    for name in table:
        # the windows under results/gpu/, then results/<table>/ (where a CPU plan's rows
        # are committed) and out/<table>/
        extra = [f for f in (root, out) if f is not None and Path(f).is_dir()]
        for doc in gpu_union(name, precision, results=results, extra=extra):
            key = (doc["row"], doc["seed"])
            if key in wanted and is_final(doc) and doc.get("config") and \
                    config_from_dict(doc["config"]).hash() == wanted[key]:
                done.add(key)
    return done


def run_plan(plan: Plan, executor: Executor, *, out: str | Path, runs: str | Path,
             devices: Sequence[str | None], deadline_minutes: float | None = None,
             parallel: int | None = None, seeds: Sequence[int] | None = None,
             overrides: Sequence[str] = (), results: str | Path | None = None,
             sharing: str = "processes", device_class: str = "h100",
             **kwargs: Any) -> list[Path]:
    """What is left of ``plan``, within ``deadline_minutes`` (default: the plan's): the
    table's queue (:func:`~drillbook.experiments.run.scheduler.run_table`, through
    ``executor``; ``kwargs`` go on to it) given the rows that are not final, started
    largest predicted time first while they fit (see the module notes). ``sharing`` and
    ``device_class``: how the predictions are made
    (:data:`~drillbook.experiments.run.devices.SHARINGS`; the way the rows run, which
    processes are today). Returns the result files of the rows this call started."""
    began = time.monotonic()
    minutes = deadline_minutes or plan.deadline_minutes
    parallel = parallel or plan.parallel
    seeds = list(seeds) if seeds else list(plan.seeds) or None
    jobs = table_jobs(plan.table, seeds=seeds, overrides=overrides)
    device = resolve_device(devices[0]) if devices and devices[0] else resolve_device(None)
    first = jobs[0].config
    precision = precision_label(resolve_precision(first.train.amp, device))
    skip = final_jobs(jobs, precision, results=results, out=out)
    plan_now = Plan(plan.name, plan.table, tuple(seeds or ()), parallel, minutes,
                    plan.description, sharing, plan.plateau_epochs, plan.plateau_note)
    if device.type == "cpu":  # no GPU model applies: each config's step is timed here
        device_class = "cpu"
    rows = predict(plan_now, device_class=device_class, sharing=sharing, results=results,
                   overrides=overrides, skip=skip)
    predicted = {(p.job.row.name, p.job.seed): p.seconds for p in rows}
    print(f"{plan.name}: {len(skip)} of {len(skip) + len(rows)} row(s) final already; "
          f"predicted on "
          f"{device_class} ({sharing}, {parallel} at once): "
          + ", ".join(f"{p.job.name} {p.seconds:.0f} s"
                      f"{'' if p.plateau_epochs is None else f' ({p.plateau_epochs} ep)'}"
                      for p in rows if (p.job.row.name, p.job.seed) not in skip),
          file=sys.stderr, flush=True)
    left = minutes - (time.monotonic() - began) / 60  # the predictions took their time
    return run_table(plan.table, executor, seeds=seeds, parallel=parallel, devices=devices,
                     deadline_minutes=max(left, 0.05), out=out, runs=runs,
                     overrides=overrides, skip=skip, predicted=predicted, **kwargs)
