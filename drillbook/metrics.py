"""Small, dependency-free conversions between the quantities the package reports."""

from __future__ import annotations

import bisect
import math
import sys
from collections.abc import Sequence

__all__ = ["MAX_LOSS", "log_interpolate", "perplexity"]

#: the largest loss (nats per token) whose perplexity is a finite float, ~709.78. A
#: training loss above it means the run diverged (a uniform guess costs only ``ln V``).
MAX_LOSS = math.log(sys.float_info.max)


def perplexity(loss: float) -> float:
    """``exp(loss)``, or ``inf`` where that overflows a float (``nan`` stays ``nan``)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def log_interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float | None:
    """``y`` at ``x`` on a curve of positive values ``ys`` at increasing ``xs``: exactly
    ``ys[i]`` at ``x == xs[i]``, linear in ``log y`` between two points (a perplexity after
    a fractional epoch, or after a number of updates between two epochs' counts), None
    outside ``[xs[0], xs[-1]]``."""
    if not xs or not xs[0] <= x <= xs[-1]:
        return None
    i = bisect.bisect_left(xs, x)
    if xs[i] == x:
        return ys[i]
    t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return math.exp((1 - t) * math.log(ys[i - 1]) + t * math.log(ys[i]))
