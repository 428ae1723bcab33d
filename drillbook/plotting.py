"""One look for every figure in the book: a colour per head, tidy log axes.

Every chapter draws the same heads, so each head keeps one colour across the book: a reader
who learns that DRILL is the green line in chapter 2 finds it green in chapter 6. Each head
class declares its colour (:attr:`drillbook.heads.OutputHead.color`), chosen from
colour-blind-safe palettes (Okabe and Ito's, Paul Tol's) so that each stands out against
white (contrast at least 3:1) and from every other (the tests check both); a head that
declares none gets one derived from its kind (:func:`derived_color`), so a figure never
fails for want of a colour. The mixture-of-contexts variant of MoS (chapter 3) has its own.

>>> head_color("drill-4") == head_color("drill")
True
>>> head_color("vmf-reg2") == head_color("vmf")
True
"""

from __future__ import annotations

import colorsys
import hashlib
import math
import re
from collections.abc import Sequence

from .heads import HEADS, RegistryView

__all__ = ["HEAD_COLORS", "MIN_LEGEND_POINTS", "MIN_SERIES_DELTA_E", "VARIANT_COLORS",
           "cielab", "derived_color", "family_colors", "figure_problems", "head_color",
           "head_colors", "head_kind", "label_log_range", "log_tick_label", "tidy_log_axis"]


def _luminance(color: str) -> float:
    """WCAG 2's relative luminance of a hex colour ``#rrggbb``."""
    r, g, b = ((c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
               for c in (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def derived_color(kind: str) -> str:
    """The colour of a head that declares none: a hue from a hash of ``kind`` (the same
    in every process), saturated, and dark enough for a contrast of at least 3:1 against
    white (WCAG 2's relative luminance at most 0.3)."""
    hue = int.from_bytes(hashlib.sha256(kind.encode()).digest()[:4], "big") / 2**32
    lightness = 0.45
    while True:
        rgb = colorsys.hls_to_rgb(hue, lightness, 0.7)
        color = "#" + "".join(f"{round(c * 255):02x}" for c in rgb)
        if _luminance(color) <= 0.3:  # 1.05 / (0.3 + 0.05) = 3
            return color
        lightness -= 0.01


#: head kind -> colour, one per head of the registry (what its class declares, else
#: :func:`derived_color`); the same everywhere in the book
HEAD_COLORS = RegistryView(lambda: {kind: cls.color or derived_color(kind)
                                    for kind, cls in HEADS.items()}, "head colour for")

#: variants a chapter draws beside the heads: name -> colour (MoC, MoS mixing logits)
VARIANT_COLORS: dict[str, str] = {"moc": "#9467bd"}

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
    if key in HEADS:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    # the first registry name that appears as a whole word (drill before softmax in
    # "drill-softmax" would be wrong, so take the leftmost match)
    hits = [(m.start(), kind) for kind in HEADS
            for m in re.finditer(rf"(?<![a-z]){kind}(?![a-z])", key)]
    if hits:
        return min(hits)[1]
    for alias, kind in _ALIASES.items():
        if alias in key:
            return kind
    raise KeyError(f"no output head named in {name!r}; heads: {sorted(HEADS)}")


def head_color(name: str) -> str:
    """The book's colour (a hex string) for the head that ``name`` names, or for the
    variant of :data:`VARIANT_COLORS` it names (``"MoC (mos, mix=logits)"``)."""
    for variant, color in VARIANT_COLORS.items():
        if re.search(rf"(?<![a-z]){variant}(?![a-z])", name.lower()):
            return color
    return HEAD_COLORS[head_kind(name)]


def head_colors(names: Sequence[str]) -> list[str]:
    """:func:`head_color` of each name, e.g. for ``DataFrame.plot.bar(color=...)``."""
    return [head_color(n) for n in names]


#: how far each further row of one head moves from the head's colour: towards black
#: (a negative fraction) or white (positive), in turn
_SHADES = (0.0, -0.5, 0.5, -0.8, 0.8)


def family_colors(names: Sequence[str]) -> dict[str, str]:
    """A distinct colour for each of several rows, rows of one head (``vMF NLLvMF``,
    ``vMF reg2``, ``vMF reg2 tied``) in shades of that head's colour: the first row of a
    head gets :func:`head_color`, the next a darker shade, then a lighter one, and so on.

    Raises:
        ValueError: more rows of one head than there are shades (five).
    """
    from matplotlib.colors import to_hex, to_rgb

    seen: dict[str, int] = {}
    colors = {}
    for name in dict.fromkeys(names):
        base = head_color(name)
        i = seen[base] = seen.get(base, -1) + 1
        if i >= len(_SHADES):
            raise ValueError(f"family_colors has {len(_SHADES)} shades of one head's colour; "
                             f"{name!r} is row {i + 1} of its head")
        shade, target = abs(_SHADES[i]), (0.0 if _SHADES[i] < 0 else 1.0)
        colors[name] = to_hex([c + shade * (target - c) for c in to_rgb(base)])
    return colors


def log_tick_label(value: float, powers: bool = False) -> str:
    """A log axis's tick label: a plain number from 0.001 to 999,999 (``0.01``, ``300``,
    ``200,000``), a power of ten outside that range or when ``powers`` (``$10^{-6}$``,
    ``$2\\times 10^{6}$``)."""
    if value <= 0 or not math.isfinite(value):
        return ""
    if not powers and 1e-3 <= value < 1e6:
        return f"{value:,.0f}" if value >= 1 and value == round(value) else f"{value:g}"
    exponent = math.log10(value)
    if abs(exponent - round(exponent)) < 1e-9:
        return f"$10^{{{round(exponent)}}}$"
    mantissa = value / 10 ** math.floor(exponent)
    return f"${mantissa:g}\\times 10^{{{math.floor(exponent)}}}$"


def tidy_log_axis(ax, axis: str = "y") -> None:
    """Drop the minor tick labels matplotlib puts on a short log axis (they crowd the
    major ones) and label the major ticks with :func:`log_tick_label`, in one form per
    axis: plain numbers where every label in view is short, powers of ten for all of them
    where one is not (never ``10,000`` beside ``$10^{6}$``)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    def formatter(target):
        def label(value: float, _pos) -> str:
            low, high = sorted(target.get_view_interval())
            return log_tick_label(value, powers=high >= 1e6 or 0 < low < 1e-3)
        return FuncFormatter(label)

    for which in (("x", "y") if axis == "both" else (axis,)):
        target = ax.xaxis if which == "x" else ax.yaxis
        target.set_minor_formatter(NullFormatter())
        target.set_major_formatter(formatter(target))


def label_log_range(ax, values: Sequence[float], axis: str = "y") -> None:
    """Major ticks on a log ``axis`` (``"x"`` or ``"y"``) that leave labels in view when the
    data span less than a decade or two (perplexities from 260 to 860 hold no power of
    ten): halves as well under a factor of four (120 to 310: 150, 200, 250, 300), every
    integer multiple of a power of ten under a decade, 1-2-5 under two decades, powers of
    ten beyond. Label them with :func:`tidy_log_axis`."""
    from matplotlib.ticker import LogLocator

    positive = [v for v in values if v > 0]
    if not positive:
        return
    span = max(positive) / min(positive)
    subs = ((1, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9) if span < 4 else tuple(range(1, 10))
            if span < 10 else (1, 2, 5) if span < 100 else (1,))
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(LogLocator(base=10, subs=subs))


# ---------------------------------------------------------------- a figure's readability

#: legend entries that name a run folder or a GPU window, not something of the book:
#: a date (2026-11-26), a window's number (window2), a path
_FOLDER_WORDS = re.compile(r"\d{4}-\d{2}-\d{2}|window\d|[\w-]+/[\w-]+/")

#: the smallest CIE76 distance in L*a*b* between two series of one axes: the distance the
#: book's palette keeps between heads, and :func:`family_colors` between up to five rows of
#: the vMF head (near-identical pinks, 21 apart, were what a reader could not tell apart)
MIN_SERIES_DELTA_E = 25.0

#: the smallest legend text, in points
MIN_LEGEND_POINTS = 8.0


def cielab(color) -> tuple[float, float, float]:
    """sRGB -> CIE L*a*b* (D65) of any matplotlib colour."""
    from matplotlib.colors import to_rgb

    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
               for c in to_rgb(color))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def _number(text: str) -> float | None:
    """The number a tick label shows (``"1,000"``, ``"$10^{5}$"``, ``"2×10⁴"``, ``"−3"``),
    or None when it shows a word."""
    plain = (text.replace("$", "").replace("\\mathdefault", "").replace("{", "")
             .replace("}", "").replace("\u2212", "-").replace(",", "").replace("%", "")
             .replace("\\times", "x").replace("\u00d7", "x").strip())
    match = re.fullmatch(r"(-?[\d.]+)(?:x10\^(-?\d+))?|10\^(-?\d+)", plain.replace(" ", ""))
    if match is None:
        return None
    try:
        if match.group(3) is not None:
            return 10.0 ** int(match.group(3))
        mantissa = float(match.group(1))
        return mantissa * 10.0 ** int(match.group(2)) if match.group(2) else mantissa
    except ValueError:
        return None


def _series(ax) -> list[tuple[str, object, tuple]]:
    """(label, colour, style) of each labelled series of ``ax``: lines, bars, markers."""
    from matplotlib.collections import Collection
    from matplotlib.container import BarContainer
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    out = []
    handles, labels = ax.get_legend_handles_labels()
    for handle, label in zip(handles, labels, strict=True):
        if isinstance(handle, Line2D):
            color = handle.get_color() if handle.get_linestyle() not in ("None", "", " ") \
                else handle.get_markerfacecolor()
            style = (handle.get_linestyle(), handle.get_marker())
        elif isinstance(handle, BarContainer) and handle.patches:
            color, style = handle.patches[0].get_facecolor(), ("bar", handle.patches[0].get_hatch())
        elif isinstance(handle, Patch):
            color, style = handle.get_facecolor(), ("patch", handle.get_hatch())
        elif isinstance(handle, Collection) and len(handle.get_facecolor()):
            color, style = handle.get_facecolor()[0], ("markers", str(handle.get_paths()[:1]))
        else:
            continue
        out.append((label, color, style))
    return out


def figure_problems(fig) -> list[str]:
    """What keeps a reader from reading ``fig``, one line each (empty when nothing does):

    * a numeric axis that spans more than a factor of two with fewer than two labelled
      ticks in view;
    * tick labels of one axis that overlap (measured from their rendered extents);
    * a legend entry that names a run folder or a GPU window (a date, ``window2``, a
      path) instead of the book's words, or legend text under :data:`MIN_LEGEND_POINTS`;
    * two labelled series of one axes whose colours are closer than
      :data:`MIN_SERIES_DELTA_E` in CIE L*a*b* (series drawn in one colour on purpose, in
      different styles, such as the same model's line and markers, are allowed).

    The book's chapters run it on every figure they draw (:func:`drillbook.notebook.setup`
    with ``DRILLBOOK_CHECK_FIGURES=1``, which ``make test`` sets).
    """
    import itertools

    from matplotlib.transforms import Bbox

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible() or not ax.axison:
            continue
        name = f"axes {i + 1}" + (f" ({ax.get_title()!r})" if ax.get_title() else "")
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            low, high = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
            ticks = [(tick, label) for tick, label
                     in zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=False)
                     if low - 1e-9 * abs(high - low) <= tick <= high + 1e-9 * abs(high - low)
                     and label.get_visible() and label.get_text().strip()]
            if not axis.get_visible() or not any(t.get_visible() for t in
                                                 axis.get_majorticklabels()):
                continue
            numbers = [_number(label.get_text()) for _, label in ticks]
            numeric = axis.get_scale() != "linear" or (numbers and None not in numbers)
            if numeric:
                spans = (axis.get_scale() == "log" and low > 0 and high / low > 2) or (
                    axis.get_scale() == "linear" and high > low)
                if spans and len(ticks) < 2:
                    problems.append(f"{name}: its {which} axis, from {low:.3g} to {high:.3g}, "
                                    f"has {len(ticks)} labelled tick(s); label at least two")
            boxes = [label.get_window_extent(renderer) for _, label in ticks]
            for a, b in itertools.combinations(range(len(boxes)), 2):
                overlap = Bbox.intersection(boxes[a], boxes[b])
                if overlap is not None and overlap.width > 1 and overlap.height > 1:
                    problems.append(f"{name}: {which} tick labels "
                                    f"{ticks[a][1].get_text()!r} and "
                                    f"{ticks[b][1].get_text()!r} overlap")
                    break
        legends = [ax.get_legend()] if ax.get_legend() else []
        for legend in legends:
            for text in legend.get_texts():
                if _FOLDER_WORDS.search(text.get_text()):
                    problems.append(f"{name}: legend entry {text.get_text()!r} names a run "
                                    f"folder; say what the run is in the book's words")
                if text.get_fontsize() < MIN_LEGEND_POINTS:
                    problems.append(f"{name}: legend entry {text.get_text()!r} is "
                                    f"{text.get_fontsize():.1f} pt, under "
                                    f"{MIN_LEGEND_POINTS:g} pt")
                    break
        series = _series(ax)
        for (la, ca, sa), (lb, cb, sb) in itertools.combinations(series, 2):
            distance = math.dist(cielab(ca), cielab(cb))
            if distance < MIN_SERIES_DELTA_E and not (distance < 1 and sa != sb):
                problems.append(f"{name}: series {la!r} and {lb!r} have colours "
                                f"{distance:.0f} apart in L*a*b* (at least "
                                f"{MIN_SERIES_DELTA_E:g}): give one another colour")
    for legend in fig.legends:
        for text in legend.get_texts():
            if _FOLDER_WORDS.search(text.get_text()):
                problems.append(f"figure legend entry {text.get_text()!r} names a run folder")
    return problems
