"""Where a fitted log-probability matrix departs from the true one, by how probable the
word is.

The likelihood (equivalently the KL divergence ``E_c KL(P*(.|c) || p(.|c))``) weighs the
error ``e_{cv} = log p(v | c) - log P*(v | c)`` of every entry by ``P*(v | c)``: a word of
probability ``1e-7`` may be off by several nats and cost almost nothing. The rank and the
singular values of the log-probability matrix weigh every entry alike, so they see those
errors in full. :func:`errors_by_probability` splits the entries of a ``(U, V)`` matrix
into bands of ``P*`` and reports, per band, how many entries it holds, how much
probability they carry, how large the errors are, and which share of the squared
Frobenius error ``||log p - log P*||_F^2`` they hold.

That share bounds the spectrum: if ``rank(log P*) = k``, the energy of the model's matrix
beyond its ``k``-th singular value is at most the whole squared error (Eckart-Young: the
true matrix is one candidate rank-``k`` approximation),

.. math::

    \\sum_{i > k} \\sigma_i(\\log p)^2 \\;\\le\\; \\lVert \\log p - \\log P^* \\rVert_F^2 .
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from torch import Tensor

from ..errors import ConfigError

__all__ = ["ProbabilityBand", "errors_by_probability"]


@dataclass(frozen=True)
class ProbabilityBand:
    """The entries with ``low <= P*(v | c) < high`` of a ``(U, V)`` matrix.

    Attributes:
        low, high: the band's bounds on the true probability (``high`` is ``inf`` for the
            last band, so that ``P* = 1`` is counted).
        entries: the band's share of all ``U V`` entries.
        mass: the probability it carries, ``(1/U) sum_{(c, v) in band} P*(v | c)`` (the
            contexts weighted alike); the bands' masses sum to 1.
        rms_error: root mean square of ``log p - log P*`` over the band's entries, in nats
            (``nan`` for an empty band).
        sq_error_share: the band's share of ``||log p - log P*||_F^2`` (0 when the two
            matrices are equal).
    """

    low: float
    high: float
    entries: float
    mass: float
    rms_error: float
    sq_error_share: float

    @property
    def label(self) -> str:
        """The band as an inequality, e.g. ``"1e-06 <= P* < 1e-04"``."""
        if self.low == 0.0:
            return f"P* < {self.high:.0e}"
        if self.high == float("inf"):
            return f"P* >= {self.low:.0e}"
        return f"{self.low:.0e} <= P* < {self.high:.0e}"


def errors_by_probability(log_probs: Tensor, true_log_probs: Tensor,
                          edges: Sequence[float] = (1e-6, 1e-4, 1e-2)
                          ) -> list[ProbabilityBand]:
    """Split the errors of a model's log-probabilities by the true probability of the entry.

    Args:
        log_probs: ``log p``, the model's ``(U, V)`` log-probabilities.
        true_log_probs: ``log P*``, the true ``(U, V)`` log-probabilities (e.g.
            :attr:`SyntheticLanguage.log_probs <drillbook.analysis.SyntheticLanguage>`).
        edges: increasing band edges strictly between 0 and 1; the bands are
            ``[0, e_1), [e_1, e_2), ..., [e_last, 1]``.

    Returns:
        one :class:`ProbabilityBand` per band, from the least probable entries up.

    Raises:
        ConfigError: shapes differ, a matrix is not 2-d, or the edges are not increasing
            within (0, 1).
    """
    if log_probs.dim() != 2 or tuple(log_probs.shape) != tuple(true_log_probs.shape):
        raise ConfigError(f"expected two (contexts x vocabulary) matrices of one shape, got "
                         f"{tuple(log_probs.shape)} and {tuple(true_log_probs.shape)}")
    edges = [float(e) for e in edges]
    if any(not 0.0 < e < 1.0 for e in edges) or edges != sorted(set(edges)):
        raise ConfigError(f"edges must increase strictly within (0, 1), got {edges}")
    true = true_log_probs.detach().double().cpu()
    error = log_probs.detach().double().cpu() - true
    probs = true.exp()
    n_rows = true.shape[0]
    squared = error.square()
    total_sq = float(squared.sum())
    bounds = [0.0, *edges, float("inf")]
    bands = []
    for low, high in pairwise(bounds):
        inside = (probs >= low) & (probs < high)
        count = int(inside.sum())
        sq = float(squared[inside].sum())
        bands.append(ProbabilityBand(
            low=low, high=high, entries=count / probs.numel(),
            mass=float(probs[inside].sum()) / n_rows,
            rms_error=(sq / count) ** 0.5 if count else float("nan"),
            sq_error_share=sq / total_sq if total_sq > 0 else 0.0))
    return bands
