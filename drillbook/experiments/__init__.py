"""Experiments built from the package parts: paper-table reproductions, cost benchmarks."""

from .bench import (
    BENCH_HEADS,
    SIZES,
    HeadCost,
    compare_heads,
    environment,
    head_cost,
    run_bench,
    time_call,
)
from .reproduce import TABLES, Row, render_report, reproduce
from .results import RESULT_FORMAT, load_results, validate_result, write_result

__all__ = [
    "BENCH_HEADS",
    "RESULT_FORMAT",
    "SIZES",
    "TABLES",
    "HeadCost",
    "Row",
    "compare_heads",
    "environment",
    "head_cost",
    "load_results",
    "render_report",
    "reproduce",
    "run_bench",
    "time_call",
    "validate_result",
    "write_result",
]
