"""One look for every figure in the book: a colour per head, tidy log axes.

Every chapter draws the same heads, so each head keeps one colour across the book: a reader
who learns that DRILL is the green line in chapter 2 finds it green in chapter 6. The
colours come from seaborn's colour-blind palette, one per entry of
:data:`drillbook.heads.HEADS`, in registry order.

>>> head_color("drill-4") == head_color("drill")
True
>>> head_color("vmf-reg2") == head_color("vmf")
True
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["HEAD_COLORS", "head_color", "head_colors", "head_kind", "tidy_log_axis"]

#: seaborn's "colorblind" palette (10 colours), written out so the package does not need
#: seaborn to name a colour
_COLORBLIND = ("#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161",
               "#fbafe4", "#949494", "#ece133", "#56b4e9")

#: head kind -> colour, one per head of the registry; the same everywhere in the book
HEAD_COLORS: dict[str, str] = {
    "softmax": _COLORBLIND[7],     # grey: the untied baseline
    "tied": _COLORBLIND[0],        # blue
    "bilinear": _COLORBLIND[9],    # light blue: a tied head with one more matrix
    "dual": _COLORBLIND[4],        # pink-violet
    "drill": _COLORBLIND[2],       # green
    "mos": _COLORBLIND[3],         # vermilion
    "doc": _COLORBLIND[1],         # orange: MoS's sibling
    "sigsoftmax": _COLORBLIND[5],  # brown
    "vmf": _COLORBLIND[6],         # pink
}

#: names used for heads in tables and configs that are not registry names
_ALIASES = {"awd-lstm": "tied", "softmax-tied": "tied", "joint": "dual",
            "mixture": "mos"}


def head_kind(name: str) -> str:
    """The registry head a row or label names: ``"drill-4"``, ``"DRILL-1"``,
    ``"ptb-drill"``, ``"mos-15"``, ``"vmf-reg2-tied"``, ``"AWD-LSTM-DRILL"`` all resolve.

    Raises:
        KeyError: no head of the registry is named in ``name``.
    """
    key = name.lower().strip()
    if key in HEAD_COLORS:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    # the first registry name that appears as a whole word (drill before softmax in
    # "drill-softmax" would be wrong, so take the leftmost match)
    hits = [(m.start(), kind) for kind in HEAD_COLORS
            for m in re.finditer(rf"(?<![a-z]){kind}(?![a-z])", key)]
    if hits:
        return min(hits)[1]
    for alias, kind in _ALIASES.items():
        if alias in key:
            return kind
    raise KeyError(f"no output head named in {name!r}; heads: {sorted(HEAD_COLORS)}")


def head_color(name: str) -> str:
    """The book's colour (a hex string) for the head that ``name`` names."""
    return HEAD_COLORS[head_kind(name)]


def head_colors(names: Sequence[str]) -> list[str]:
    """:func:`head_color` of each name, e.g. for ``DataFrame.plot.bar(color=...)``."""
    return [head_color(n) for n in names]


def tidy_log_axis(ax, axis: str = "y") -> None:
    """Drop the minor tick labels matplotlib puts on a short log axis (they crowd the
    major ones) and keep plain numbers on the major ticks."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    for which in (("x", "y") if axis == "both" else (axis,)):
        target = ax.xaxis if which == "x" else ax.yaxis
        target.set_minor_formatter(NullFormatter())
        major = ScalarFormatter()
        major.set_scientific(False)
        target.set_major_formatter(major)
