"""What the chapters use to show the book's evidence, in one place.

A chapter reads the papers' numbers, the DRILL authors' published runs and the result
files that ship with the package, and draws them; it runs the benchmarks and the tables
it teaches. Each of those lives in the module that owns it (the papers' record in
:mod:`drillbook.papers`, the authors' runs in :mod:`drillbook.authors`, the result files
and what is read from them under :mod:`drillbook.experiments`, the book's look in
:mod:`drillbook.plotting`). This module gathers the names the chapters use, so that a
chapter imports them as one module and says where each comes from::

    from drillbook import book

    book.paper_value("drill:table1:awd-lstm-drill", "test_ppl")   # the papers' record
    book.authors_curve("ptb-drill").final_val_ppl                   # the authors' logs
    book.table_results("cpu-scale")                                 # committed result files
    book.runs_like_authors()                                        # ... read against the logs

It defines nothing of its own: every name is the function or table of the module named in
its documentation.
"""

from __future__ import annotations

from .authors import authors_bands, authors_curve, authors_curves, authors_data, authors_ranks
from .experiments import (
    BENCH_HEADS,
    SIZES,
    TABLES,
    book_results,
    compare_heads,
    compare_models,
    find_row,
    fmt,
    format_rows,
    full_command,
    gpu_results,
    load_results,
    plot_curves,
    reproduce,
    speed_rows,
    table_rows,
    time_call,
    vocab_sweep,
)
from .experiments.results.authors_code import authors_code_timings
from .experiments.results.compare import always_falls, cpu_tables, last_change, replay_rule
from .experiments.results.curves import (
    PAPER_TABLES,
    agreement_rows,
    authors_band_rows,
    figure_against_authors,
    full_run_cost,
    h200_ms_per_update,
    runs_like_authors,
)
from .experiments.results.evidence import (
    MIN_BAND_TYPES,
    band_differences,
    committed_results,
    f1_rows,
    missing_evidence,
    mixture_usage,
    plan_results,
    plan_runs,
    plot_band_differences,
    plot_f1,
    rank_rows,
    table_results,
    val_at_epoch,
    val_at_updates,
    window_rows,
)
from .experiments.results.seeds import (
    chance_separated,
    plot_spread,
    resolved,
    resolved_pairs,
    seed_spread,
    spread_table,
    spreads_of,
    told_apart,
)
from .experiments.tables import PLANS
from .papers import assert_quoted, paper_number, paper_value
from .plotting import family_colors, head_color, head_colors, label_log_range, tidy_log_axis

__all__ = [
    "BENCH_HEADS",
    "MIN_BAND_TYPES",
    "PAPER_TABLES",
    "PLANS",
    "SIZES",
    "TABLES",
    "agreement_rows",
    "always_falls",
    "assert_quoted",
    "authors_band_rows",
    "authors_bands",
    "authors_code_timings",
    "authors_curve",
    "authors_curves",
    "authors_data",
    "authors_ranks",
    "band_differences",
    "book_results",
    "chance_separated",
    "committed_results",
    "compare_heads",
    "compare_models",
    "cpu_tables",
    "f1_rows",
    "family_colors",
    "figure_against_authors",
    "find_row",
    "fmt",
    "format_rows",
    "full_command",
    "full_run_cost",
    "gpu_results",
    "h200_ms_per_update",
    "head_color",
    "head_colors",
    "label_log_range",
    "last_change",
    "load_results",
    "missing_evidence",
    "mixture_usage",
    "paper_number",
    "paper_value",
    "plan_results",
    "plan_runs",
    "plot_band_differences",
    "plot_curves",
    "plot_f1",
    "plot_spread",
    "rank_rows",
    "replay_rule",
    "reproduce",
    "resolved",
    "resolved_pairs",
    "runs_like_authors",
    "seed_spread",
    "speed_rows",
    "spread_table",
    "spreads_of",
    "table_results",
    "table_rows",
    "tidy_log_axis",
    "time_call",
    "told_apart",
    "val_at_epoch",
    "val_at_updates",
    "vocab_sweep",
    "window_rows",
]
