"""Experiments built from the package parts: cost benchmarks (reproductions follow)."""

from .bench import HeadCost, compare_heads, head_cost, time_call

__all__ = ["HeadCost", "compare_heads", "head_cost", "time_call"]
