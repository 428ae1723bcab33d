"""The records a reproduction table is declared with: a :class:`Row` (a named config, the
overrides that make the row, the keys of the papers' numbers it is compared with), a
:class:`PaperColumn` of the papers' numbers the report prints, a :class:`Plan` of a GPU
window that runs a table, and the :class:`Table` that holds them (all importable from
:mod:`drillbook.experiments.tables`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import overload

from ...configs import apply_overrides, get_config
from ...papers import paper_number, paper_values
from ...train.tasks import Task, task_of

__all__ = ["DEVICES", "PAPER_RANKS", "PAPER_SPEED", "STAGES", "PaperColumn", "Plan", "Row",
           "Table"]


#: the stages a row's paper numbers belong to: the main run, fine-tuning, and dynamic
#: evaluation of the fine-tuned run
STAGES = ("main", "finetuned", "dynamic")

#: what a table may be sized for: ``cpu`` (a row trains in minutes on a laptop's CPU, or
#: to its plateau in an hour or a few on one core: the laptop plans) or
#: ``gpu`` (the papers' models, the translation tables on the whole of Multi30k, the GPU
#: windows' plans)
DEVICES = ("cpu", "gpu")


@dataclass(frozen=True)
class Row:
    """One row of a paper table: a named config, the overrides that make the row, and the
    keys in :data:`drillbook.papers.RECORD` of the papers' numbers it is compared with.

    Attributes:
        paper: the records compared with the main run (before fine-tuning): DRILL's
            "w/o finetune" rows, speeds, ranks. Several records may be named when they
            give different metrics.
        paper_finetuned: the record compared with the fine-tuned run. A row that names one
            is fine-tuned after its main run, as the papers' authors did.
        paper_dynamic: the record compared with dynamic evaluation (Krause et al., 2018) of
            the fine-tuned run. A row that names one evaluates its fine-tuned ``best.pt``
            dynamically once fine-tuning has ended: the authors' grid searched on the
            validation split, the test split read with the best pair
            (:func:`drillbook.train.dynamic.evaluate_run`).
        baseline: the row of the same table its speed ratio divides by, where it is not
            the table's (:attr:`Table.baseline`): a table of two corpora divides each row
            by the baseline of its corpus.
    """

    name: str
    config: str
    overrides: tuple[str, ...] = ()
    paper: tuple[str, ...] = ()
    paper_finetuned: str | None = None
    paper_dynamic: str | None = None
    baseline: str | None = None

    @property
    def finetunes(self) -> bool:
        """The paper's number for this row is after fine-tuning, so the row fine-tunes."""
        return self.paper_finetuned is not None

    def paper_keys(self, stage: str = "main") -> tuple[str, ...]:
        """The record keys of one stage, ``"main"``, ``"finetuned"`` or ``"dynamic"``."""
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        if stage == "main":
            return self.paper
        key = self.paper_finetuned if stage == "finetuned" else self.paper_dynamic
        return (key,) if key else ()

    def paper_values(self, stage: str = "main") -> dict[str, float]:
        """The papers' values for one stage, read from the record now (never stored)."""
        return paper_values(self.paper_keys(stage))

    def paper_sources(self) -> list[str]:
        """Where the row's paper numbers are printed, main run first."""
        keys = [k for stage in STAGES for k in self.paper_keys(stage)]
        return list(dict.fromkeys(paper_number(k).source for k in keys))

    @property
    def task(self) -> Task:
        """The task the row trains (:class:`~drillbook.train.tasks.Task`): its config's."""
        return task_of(get_config(self.config))

    def resolve(self, extra: Sequence[str] = ()):
        """The row's config: the named config, the row's overrides, then ``extra``."""
        return apply_overrides(get_config(self.config), [*self.overrides, *extra])


@dataclass(frozen=True)
class PaperColumn:
    """A column of the papers' numbers that the report prints for a table, beside our own
    columns of the same kind.

    Attributes:
        metric: the metric in the paper's record (``seconds_per_epoch``, ``rank_tol_1``).
        header: the column's header.
        digits: decimals shown.
        beside: the group of our columns it follows: ``speed`` (seconds per epoch and the
            ratio to the baseline) or ``rank``.
    """

    metric: str
    header: str
    digits: int = 2
    beside: str = "speed"


#: DRILL's Table 3 (Sec. 4.1.1): the paper's seconds per epoch and ratio to the baseline
PAPER_SPEED = (PaperColumn("seconds_per_epoch", "paper s/epoch", 0),
               PaperColumn("ratio_to_tied", "paper x baseline", 1))
#: the ranks the papers and the DRILL authors' code give for the PTB test log-probabilities
PAPER_RANKS = (PaperColumn("rank_tol_1", "authors' code (tol 1)", beside="rank"),
               PaperColumn("rank", "DRILL Sec. 4.1.1", beside="rank"),
               PaperColumn("rank_test", "DOC Table 5 (test)", beside="rank"))


@dataclass(frozen=True)
class Plan:
    """What one GPU window runs of a table: its seeds, how many rows at once, the deadline.

    A plan whose rows all have a stopping rule (``train.plateau_epochs``) trains each row
    to its plateau and continues from window to window
    (:func:`~drillbook.experiments.tables.to_plateau`): a window
    skips the rows whose result file is final, in that window's folder or a committed
    one, and starts the rows that fit in the time left, largest predicted time first.

    Attributes:
        name: the plan's name (``drillbook reproduce NAME``).
        table: the name of the :class:`Table` it runs (the table that declares it).
        seeds: the seeds of every row (empty: each row's own).
        parallel: rows at once on the GPU.
        deadline_minutes: the minutes of training and evaluation it is sized for.
        description: what it shows, in a sentence.
        sharing: how its rows are assumed to share the GPU in the dry run (a key of
            :data:`drillbook.experiments.run.devices.SHARINGS`).
        plateau_epochs: the epochs to plateau assumed for a row no window has trained to
            its plateau yet (None: its config's epochs).
        plateau_note: where that assumption comes from.
    """

    name: str
    table: str
    seeds: tuple[int, ...] = ()
    parallel: int = 4
    deadline_minutes: float = 6.5
    description: str = ""
    sharing: str = "processes"
    plateau_epochs: int | None = None
    plateau_note: str = ""


@dataclass(frozen=True)
class Table(Sequence[Row]):
    """One reproduction table, declared whole: a sequence of its rows (``table[0]``,
    ``len(table)``, ``for row in table``) with the properties every reader shares.

    Attributes:
        name: the table's name (``drillbook reproduce NAME``).
        rows: its rows, in the order the report shows them.
        epochs: the epochs every row trains (None: each config's own); the override
            ``train.epochs=N`` comes first in every row's overrides, before the row's own.
        device: what it is sized for, one of :data:`DEVICES`.
        rank: every row also measures the rank of its test log-probability matrix
            (:func:`drillbook.analysis.rank_of`).
        rank_positions: the test positions of that matrix (None: as many as the test
            evaluation reads).
        baseline: the row speed ratios divide by (a row may name its own,
            :attr:`Row.baseline`); None: no ratio.
        paper_columns: the papers' numbers the report prints beside ours, beyond the
            validation and test metrics (:data:`PAPER_SPEED`, :data:`PAPER_RANKS`).
        plans: the GPU windows' plans that run it (each names this table).
    """

    name: str
    rows: tuple[Row, ...]
    epochs: int | None = None
    device: str = "gpu"
    rank: bool = False
    rank_positions: int | None = None
    baseline: str | None = None
    paper_columns: tuple[PaperColumn, ...] = ()
    plans: tuple[Plan, ...] = field(default=())

    def __post_init__(self) -> None:
        rows = tuple(self.rows)
        if self.epochs is not None:
            rows = tuple(replace(r, overrides=(f"train.epochs={self.epochs}", *r.overrides))
                         for r in rows)
        object.__setattr__(self, "rows", rows)
        names = [r.name for r in rows]
        if len(set(names)) != len(names):
            raise ValueError(f"table {self.name!r} names a row twice: {names}")
        if self.device not in DEVICES:
            raise ValueError(f"table {self.name!r}: device must be one of {DEVICES}, got "
                             f"{self.device!r}")
        wanted = [self.baseline, *(r.baseline for r in rows)] if rows else []
        missing = sorted({b for b in wanted if b is not None} - set(names))
        if missing:
            raise ValueError(f"table {self.name!r} divides by rows it does not have: "
                             f"{missing}")
        for plan in self.plans:
            if plan.table != self.name:
                raise ValueError(f"plan {plan.name!r} runs table {plan.table!r}, not "
                                 f"{self.name!r}, which declares it")

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Row, ...]: ...

    def __getitem__(self, index):
        return self.rows[index]

    def __len__(self) -> int:
        return len(self.rows)

    def row(self, name: str) -> Row | None:
        """The row ``name`` (None when the table has no such row: a result file may
        outlive the row that wrote it)."""
        return next((r for r in self.rows if r.name == name), None)

    def order(self, name: str) -> int:
        """Where a row sorts in the report: its place in the table, rows it no longer has
        last."""
        names = [r.name for r in self.rows]
        return names.index(name) if name in names else len(names)

    def baseline_of(self, name: str) -> str | None:
        """The row that the speed ratio of row ``name`` divides by: the row's own
        :attr:`Row.baseline`, else the table's (None: no ratio)."""
        row = self.row(name)
        return (row.baseline if row is not None and row.baseline else None) or self.baseline

    def columns_beside(self, group: str) -> tuple[PaperColumn, ...]:
        """The :attr:`paper_columns` that follow our columns of ``group``."""
        return tuple(c for c in self.paper_columns if c.beside == group)
