"""Analysis tools: rank and spectra of log-probability matrices, synthetic languages."""

from .rank import DRILL_TOL, Spectrum, matrix_rank, singular_values
from .synthetic import FitResult, SyntheticLanguage, fit_head

__all__ = [
    "DRILL_TOL",
    "FitResult",
    "Spectrum",
    "SyntheticLanguage",
    "fit_head",
    "matrix_rank",
    "singular_values",
]
