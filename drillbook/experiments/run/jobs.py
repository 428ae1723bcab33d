"""The jobs of a table: its rows, each with the seeds asked for, resolved into configs
(:func:`table_jobs`), and what each job's rank is measured over (:func:`table_rank_cap`).
Every way of running a table's rows starts from these."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ...train.tasks import Task, task_of
from ...validation import SEED, as_list, check_choice, is_integer
from ..results.seeds import SEED_FOLDER
from ..tables import TABLES, Row

__all__ = ["NO_RANK", "Job", "table_jobs", "table_rank_cap"]


@dataclass(frozen=True)
class Job:
    """One run of a table: a row, trained with its config's seed or another one.

    Attributes:
        table, row: what is run.
        seed: the seed it trains with.
        folder: ``<table>``, or ``<table>/seed-<seed>`` for a seed other than the
            config's (its result file then sits beside the row's own).
        config: the resolved config (the row's overrides, the caller's, the seed).
    """

    table: str
    row: Row
    seed: int
    folder: str
    config: Any

    @property
    def name(self) -> str:
        """``drill-4``, or ``drill-4 seed 142`` for another seed."""
        return self.row.name + ("" if self.folder == self.table else f" seed {self.seed}")

    @property
    def data_key(self) -> str:
        """Its config's data section as text: jobs with equal keys train on one corpus,
        loaded once by the first of them."""
        return json.dumps(self.config.to_dict()["data"], sort_keys=True)

    def run_dir(self, runs: str | Path) -> Path:
        return Path(runs) / self.folder / self.row.name

    def result_path(self, out: str | Path) -> Path:
        return Path(out) / self.folder / f"{self.row.name}.json"


def table_jobs(table: str, rows: Sequence[str] | None = None,
               seeds: int | Sequence[int] | None = None,
               overrides: Sequence[str] = ()) -> list[Job]:
    """The runs of ``table``: its rows (or those named), each with every seed of ``seeds``
    (None: the config's own), in table order, row by row.

    Raises:
        ConfigError: an unknown table or row (the message lists the valid ones), or a row
            that asks its task for a stage it has not: fine-tuning, dynamic evaluation or a
            rank (:attr:`~drillbook.train.tasks.registry.Task.finetunes`,
            :attr:`~drillbook.train.tasks.registry.Task.streams`).
    """
    check_choice(table, sorted(TABLES), "table")
    overrides = as_list(overrides, "overrides", " of key=value strings")
    spec = TABLES[table]
    chosen = list(spec)
    if rows is not None:
        rows = as_list(rows, "rows", " of row names")
    if rows:
        names = {r.name for r in chosen}
        unknown = sorted(set(rows) - names)
        if unknown:
            raise ConfigError(f"unknown row(s) {unknown} in {table!r}; rows: {sorted(names)}")
        chosen = [r for r in chosen if r.name in rows]
    wanted = [seeds] if is_integer(seeds) or seeds is None else as_list(seeds, "seeds")
    wanted = [seed if seed is None else SEED.check(seed, "seed") for seed in wanted]
    jobs = []
    for row in chosen:
        config = row.resolve(overrides)
        _check_stages(table, row, task_of(config), rank=spec.rank)
        # each seed once: "--seed 7 7" (or the config's own seed named again) trains once
        for seed in dict.fromkeys(config.train.seed if s is None else s for s in wanted):
            if seed == config.train.seed:
                jobs.append(Job(table, row, config.train.seed, table, config))
            else:
                jobs.append(Job(table, row, seed, f"{table}/{SEED_FOLDER}{seed}",
                                row.resolve([*overrides, f"train.seed={seed}"])))
    return jobs


def _check_stages(table: str, row: Row, task: Task, *, rank: bool) -> None:
    """Refuse a row whose stages its task has not (before anything trains)."""
    asks = [(what, has) for what, wanted, has in (
        ("fine-tuning", row.finetunes, task.finetunes),
        ("dynamic evaluation", row.paper_dynamic is not None, task.streams),
        ("a rank", rank, task.streams)) if wanted]
    missing = [what for what, has in asks if not has]
    if missing:
        raise ConfigError(f"row {row.name!r} of {table!r} asks for {' and '.join(missing)}, "
                          f"which {task.name} runs ({row.config}) do not have; drop the "
                          f"row's paper_finetuned/paper_dynamic record or the table's rank")



#: ``stage_metrics(rank_cap=NO_RANK)``: measure no rank
NO_RANK = -1


def table_rank_cap(table: str, max_eval_tokens: int | None) -> int | None:
    """The positions a row of ``table`` ranks its output over (its table's
    ``rank_positions``, else ``max_eval_tokens``; ``NO_RANK`` for a table without a
    rank), what :func:`~drillbook.experiments.run.stages.finish_job` takes as ``rank_cap``."""
    spec = TABLES[table]
    return (spec.rank_positions or max_eval_tokens) if spec.rank else NO_RANK
