"""How a results table shows a value: numbers to a fixed number of decimals, a dash where
there is none (a row not run, a paper without the number)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MISSING", "fmt"]

#: what the display shows where a value is missing (a row not run, a paper without it)
MISSING = "-"


def fmt(value: Any, digits: int = 2) -> str:
    """A table cell: floats to ``digits`` decimals, other values as they are, a dash for
    None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)
