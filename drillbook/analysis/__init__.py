"""Analysis tools: rank and spectra, synthetic languages, frequency bands, neighbours,
mixture diagnostics, a FLOP model, and translation accuracy by word frequency."""

from .cost import HeadFlops, awd_lstm_flops, head_flops
from .frequency import (
    AVERAGES,
    DECADE_BANDS,
    DEFAULT_BANDS,
    DRILL_BANDS,
    FrequencyBand,
    band_of,
    compare_by_frequency,
    loss_by_band,
    loss_by_word,
    token_nll,
    unigram_nll,
)
from .mixture import MixtureDiagnostics, mixture_diagnostics
from .neighbours import nearest_neighbours
from .rank import DRILL_TOL, Spectrum, log_prob_chunks, matrix_rank, rank_of, singular_values
from .synthetic import FitResult, SyntheticLanguage, fit_head
from .tail import ProbabilityBand, errors_by_probability
from .word_accuracy import F1_BANDS, accuracy_by_frequency, rare_word_f1

__all__ = [
    "AVERAGES",
    "DECADE_BANDS",
    "DEFAULT_BANDS",
    "DRILL_BANDS",
    "DRILL_TOL",
    "F1_BANDS",
    "FitResult",
    "FrequencyBand",
    "HeadFlops",
    "MixtureDiagnostics",
    "ProbabilityBand",
    "Spectrum",
    "SyntheticLanguage",
    "accuracy_by_frequency",
    "awd_lstm_flops",
    "band_of",
    "compare_by_frequency",
    "errors_by_probability",
    "fit_head",
    "head_flops",
    "log_prob_chunks",
    "loss_by_band",
    "loss_by_word",
    "matrix_rank",
    "mixture_diagnostics",
    "nearest_neighbours",
    "rank_of",
    "rare_word_f1",
    "singular_values",
    "token_nll",
    "unigram_nll",
]
