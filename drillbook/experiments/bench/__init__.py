"""What output layers cost, measured: a head alone, behind the AWD-LSTM encoder, whole
training steps, vMF against softmax as the vocabulary grows, and the cost targets with
their report tables, all on one measuring toolkit
(:mod:`drillbook.experiments.bench.measure`)."""

from .heads import (
    BENCH_HEADS,
    SIZES,
    HeadCost,
    check_names,
    compare_heads,
    fit_layers,
    head_bytes,
    head_cost,
    run_bench,
    score_bytes,
)
from .measure import (
    BENCH_FORMAT,
    CLOCKS,
    PRECISIONS,
    add_ratios,
    saved_bytes,
    step_costs,
    time_call,
    time_once,
    write_report,
)
from .model import ModelCost, bench_config, compare_models, model_cost, run_model_bench
from .report import TARGETS, Target, evaluate_targets, format_report, render_targets, run_targets
from .step import (
    compare_train_steps,
    load_step,
    make_train_step,
    run_step_bench,
    time_train_step,
    trainer_step,
)
from .sweep import SWEEP_SIZES, greedy_decode, vocab_sweep

__all__ = [
    "BENCH_FORMAT",
    "BENCH_HEADS",
    "CLOCKS",
    "PRECISIONS",
    "SIZES",
    "SWEEP_SIZES",
    "TARGETS",
    "HeadCost",
    "ModelCost",
    "Target",
    "add_ratios",
    "bench_config",
    "check_names",
    "compare_heads",
    "compare_models",
    "compare_train_steps",
    "evaluate_targets",
    "fit_layers",
    "format_report",
    "greedy_decode",
    "head_bytes",
    "head_cost",
    "load_step",
    "make_train_step",
    "model_cost",
    "render_targets",
    "run_bench",
    "run_model_bench",
    "run_step_bench",
    "run_targets",
    "saved_bytes",
    "score_bytes",
    "step_costs",
    "time_call",
    "time_once",
    "time_train_step",
    "trainer_step",
    "vocab_sweep",
    "write_report",
]
