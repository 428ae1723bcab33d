"""Experiments built from the package parts, in layers that import only downwards:

* :mod:`~drillbook.experiments.tables`: the papers' tables, each one declaration
  (:class:`~drillbook.experiments.tables.Table`) of its rows and of what the runner,
  the planner and the report read of it;
* :mod:`~drillbook.experiments.bench`: the cost benchmarks, which know no table;
* :mod:`~drillbook.experiments.results`: the result files (their schema, the analyses they
  carry), what the report, the comparisons with the papers and the spread across seeds
  read from them, and how they are shown;
* :mod:`~drillbook.experiments.run`: the runner, which trains a table's rows into result
  files: in this process, or as workers (the worker entry point) started by a launcher,
  processes here or jobs of a cluster's queue through submitit, within a deadline, and
  the plans of a GPU window with their predictions.

The names most used are importable from here.
"""

from ..provenance import environment
from .bench import (
    BENCH_FORMAT,
    BENCH_HEADS,
    SIZES,
    SWEEP_SIZES,
    TARGETS,
    HeadCost,
    ModelCost,
    Target,
    compare_heads,
    compare_models,
    compare_train_steps,
    evaluate_targets,
    format_report,
    greedy_decode,
    head_cost,
    make_train_step,
    model_cost,
    run_bench,
    run_model_bench,
    run_step_bench,
    run_targets,
    saved_bytes,
    time_call,
    time_train_step,
    vocab_sweep,
    write_report,
)
from .results import (
    RESULT_FORMAT,
    book_results,
    gpu_results,
    load_results,
    pack_results,
    unpack_results,
    validate_result,
    write_result,
)
from .results.compare import format_rows, full_command, plot_curves, ratios_to, table_rows
from .results.format import fmt
from .results.report import render_report
from .results.speed import speed_rows
from .run.reproduce import reproduce
from .tables import PLANS, TABLES, Plan, Row, Table, find_row, paper_params, records_for

__all__ = [
    "BENCH_FORMAT",
    "BENCH_HEADS",
    "PLANS",
    "RESULT_FORMAT",
    "SIZES",
    "SWEEP_SIZES",
    "TABLES",
    "TARGETS",
    "HeadCost",
    "ModelCost",
    "Plan",
    "Row",
    "Table",
    "Target",
    "book_results",
    "compare_heads",
    "compare_models",
    "compare_train_steps",
    "environment",
    "evaluate_targets",
    "find_row",
    "fmt",
    "format_report",
    "format_rows",
    "full_command",
    "gpu_results",
    "greedy_decode",
    "head_cost",
    "load_results",
    "make_train_step",
    "model_cost",
    "pack_results",
    "paper_params",
    "plot_curves",
    "ratios_to",
    "records_for",
    "render_report",
    "reproduce",
    "run_bench",
    "run_model_bench",
    "run_step_bench",
    "run_targets",
    "saved_bytes",
    "speed_rows",
    "table_rows",
    "time_call",
    "time_train_step",
    "unpack_results",
    "validate_result",
    "vocab_sweep",
    "write_report",
    "write_result",
]
