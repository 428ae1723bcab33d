"""The papers' tables as the package reproduces them, each one declaration
(:class:`~drillbook.experiments.tables.table.Table`): its rows, what every row trains,
the row speed ratios divide by, whether the rows measure a rank, the papers' columns the
report prints and the plans of a GPU window that run it. The runner and the planner
(:mod:`drillbook.experiments.run`) and the report (:mod:`drillbook.experiments.results`)
read them from here."""

from .registry import PLANS, TABLES, find_row, paper_params, records_for, table_of
from .table import DEVICES, PAPER_RANKS, PAPER_SPEED, STAGES, PaperColumn, Plan, Row, Table

__all__ = ["DEVICES", "PAPER_RANKS", "PAPER_SPEED", "PLANS", "STAGES", "TABLES", "PaperColumn",
           "Plan", "Row", "Table", "find_row", "paper_params", "records_for", "table_of"]
