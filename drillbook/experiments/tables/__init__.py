"""The papers' tables as the package reproduces them, each one declaration
(:class:`Table`): its rows (:class:`Row`, each a named config, the overrides that make the
row, and the keys of the papers' numbers it is compared with), what every row trains, the
row its speed ratios divide by, whether its rows measure a rank, the columns of the
papers' numbers the report prints (:class:`PaperColumn`) and the plans of a GPU window that
run it (:class:`Plan`). :data:`TABLES` holds them, each built from its declaration when it
is read, so that the tables that list every head take a head registered later too;
:mod:`~drillbook.experiments.run.reproduce` trains them, the planner
(:mod:`~drillbook.experiments.run.plans`) sizes their windows and
:mod:`~drillbook.experiments.results.report` shows them beside the papers', each reading a
table's properties from here and nowhere else. The records are declared in
:mod:`~drillbook.experiments.tables.records`, the book's tables in
:mod:`~drillbook.experiments.tables.declarations`."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, MutableMapping

from ...papers import paper_number
from .declarations import declarations
from .records import DEVICES, PAPER_RANKS, PAPER_SPEED, STAGES, PaperColumn, Plan, Row, Table

__all__ = ["DEVICES", "PAPER_RANKS", "PAPER_SPEED", "PLANS", "STAGES", "TABLES",
           "PaperColumn", "Plan", "Row", "Table", "Tables", "find_row", "paper_params",
           "records_for", "table_of", "to_plateau"]


class Tables(MutableMapping[str, Table]):
    """The tables by name, each built from its declaration when it is read: a table whose
    rows come from the head registry (``cpu-scale``, and ``gpu-small`` and ``laptop-lm``,
    which take their heads from it) lists every head registered by then, one registered
    after import (:func:`~drillbook.heads.register_head`) included, and one unregistered no
    longer.

    A table may also be set (``TABLES["tiny"] = Table("tiny", ...)``: a test's table) or
    deleted. A declared table set back to a table read from here (what
    ``monkeypatch.setitem`` does when it restores one), or to one equal to what its
    declaration builds now, is derived again."""

    def __init__(self, declarations: dict[str, Callable[[], Table]]) -> None:
        self._declared = declarations
        self._set: dict[str, Table | None] = {}  # None: a declared table deleted
        self._built: dict[int, weakref.ref] = {}  # id -> the tables built and still alive

    def _build(self, name: str) -> Table:
        table = self._declared[name]()
        key = id(table)
        self._built[key] = weakref.ref(table, lambda _, key=key: self._built.pop(key, None))
        return table

    def _derived(self, name: str, table: Table) -> bool:
        """Whether ``table`` is what the declaration of ``name`` builds (it built it)."""
        ref = self._built.get(id(table))
        return name in self._declared and (
            (ref is not None and ref() is table) or table == self._declared[name]())

    def __getitem__(self, name: str) -> Table:
        if name in self._set:
            table = self._set[name]
            if table is None:
                raise KeyError(name)
            return table
        return self._build(name)

    def __setitem__(self, name: str, table: Table) -> None:
        if not isinstance(table, Table) or table.name != name:
            raise ValueError(f"TABLES[{name!r}] must be a Table named {name!r}, got "
                             f"{table!r:.80}")
        if self._derived(name, table):
            self._set.pop(name, None)
        else:
            self._set[name] = table

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        if name in self._declared:
            self._set[name] = None
        else:
            del self._set[name]

    def __contains__(self, name: object) -> bool:
        if name in self._set:
            return self._set[name] is not None
        return name in self._declared

    def __iter__(self) -> Iterator[str]:
        names = [*self._declared, *(n for n in self._set if n not in self._declared)]
        return iter([n for n in names if n in self])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"Tables({list(self)})"


#: table name -> :class:`Table`, built when read (:class:`Tables`). Each row names its
#: own paper records (:mod:`drillbook.papers`).
TABLES: Tables = Tables(declarations())

#: the plans of a GPU window (``make evidence`` runs them), by name: those the tables declare
PLANS: dict[str, Plan] = {p.name: p for t in TABLES.values() for p in t.plans}


def table_of(name: str) -> Table:
    """The table ``name``; a table no longer declared (a result file may outlive it) is an
    empty one whose speed ratios divide by a ``tied`` row."""
    return TABLES.get(name) or Table(name, (), baseline="tied")


def records_for(config) -> list[str]:
    """The record keys of every table row that trains the same model on the same corpus as
    ``config`` (equal data, model and head sections; the training recipe may differ), in
    table order: what the papers print for this setup. ``ptb/awd-lstm-drill`` with
    ``head.options.depth=2`` finds DRILL Table 4's 2-layer row."""
    def model_of(c) -> tuple:
        d = c.to_dict()
        return type(c), *(d[k] for k in ("data", "model", "head"))

    wanted, keys = model_of(config), []
    for rows in TABLES.values():
        for row in rows:
            if model_of(row.resolve()) == wanted:
                keys += [k for stage in STAGES for k in row.paper_keys(stage)
                         if k not in keys]
    return keys


def to_plateau(plan: Plan) -> bool:
    """Every row of the plan's table has a stopping rule (``train.plateau_epochs``): the
    plan trains each row to its plateau, and continues from window to window."""
    rows = TABLES[plan.table] if plan.table in TABLES else ()
    return bool(rows) and all(r.resolve().train.plateau_epochs is not None for r in rows)


def find_row(table: str, name: str) -> Row | None:
    """The row ``name`` of ``table`` (None when the table or the row no longer exists: a
    result file may outlive the row that wrote it)."""
    return table_of(table).row(name)


def paper_params(config) -> dict[str, float]:
    """The papers' parameter counts (millions, as printed) of the model ``config`` builds:
    record key -> ``params_m`` for every table row of this model that has one
    (:func:`records_for`); shown beside :func:`drillbook.models.param_report`'s counts."""
    return {k: paper_number(k)["params_m"] for k in records_for(config)
            if "params_m" in paper_number(k).values}
