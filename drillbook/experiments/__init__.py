"""Experiments built from the package parts: cost benchmarks (reproductions follow)."""

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

__all__ = [
    "BENCH_HEADS",
    "SIZES",
    "HeadCost",
    "compare_heads",
    "environment",
    "head_cost",
    "run_bench",
    "time_call",
]
