"""Experiments built from the package parts: paper-table reproductions, cost benchmarks."""

from .bench import (
    BENCH_FORMAT,
    BENCH_HEADS,
    SIZES,
    HeadCost,
    compare_heads,
    environment,
    head_cost,
    run_bench,
    saved_bytes,
    time_call,
    write_report,
)
from .bench_model import ModelCost, compare_models, model_cost, run_model_bench
from .bench_report import TARGETS, Target, evaluate_targets, format_report, run_targets
from .bench_step import compare_train_steps, make_train_step, run_step_bench, time_train_step
from .bench_sweep import SWEEP_SIZES, greedy_decode, vocab_sweep
from .compare import format_rows, full_command, plot_curves, ratios_to, table_rows
from .reproduce import TABLES, Row, baseline_row, find_row, render_report, reproduce
from .results import RESULT_FORMAT, book_results, load_results, validate_result, write_result

__all__ = [
    "BENCH_FORMAT",
    "BENCH_HEADS",
    "RESULT_FORMAT",
    "SIZES",
    "SWEEP_SIZES",
    "TABLES",
    "TARGETS",
    "HeadCost",
    "ModelCost",
    "Row",
    "Target",
    "baseline_row",
    "book_results",
    "compare_heads",
    "compare_models",
    "compare_train_steps",
    "environment",
    "evaluate_targets",
    "find_row",
    "format_report",
    "format_rows",
    "full_command",
    "greedy_decode",
    "head_cost",
    "load_results",
    "make_train_step",
    "model_cost",
    "plot_curves",
    "ratios_to",
    "render_report",
    "reproduce",
    "run_bench",
    "run_model_bench",
    "run_step_bench",
    "run_targets",
    "saved_bytes",
    "table_rows",
    "time_call",
    "time_train_step",
    "validate_result",
    "vocab_sweep",
    "write_report",
    "write_result",
]
