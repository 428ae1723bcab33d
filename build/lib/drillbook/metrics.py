"""Small, dependency-free conversions between the quantities the package reports."""

from __future__ import annotations

import math
import sys

__all__ = ["MAX_LOSS", "perplexity"]

#: the largest loss (nats per token) whose perplexity is a finite float, ~709.78. A
#: training loss above it means the run diverged (a uniform guess costs only ``ln V``).
MAX_LOSS = math.log(sys.float_info.max)


def perplexity(loss: float) -> float:
    """``exp(loss)``, or ``inf`` where that overflows a float (``nan`` stays ``nan``)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf
