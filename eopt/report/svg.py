"""Small server-side SVG toolkit for the HTML report: scales, ticks, axes, colours.

Everything returns SVG markup as strings; every piece of text goes through
:func:`esc`, so names from user files cannot inject markup.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "NO_VARIANCE",
    "LogScale",
    "Scale",
    "clock_colors",
    "esc",
    "fmt_interval",
    "fmt_num",
    "fmt_share",
    "log_ticks",
    "nice_ticks",
    "svg_axes",
    "svg_open",
    "text_color",
]

# Margins of a plot area inside its SVG, in px: left, right, top, bottom.
MARGIN = (64.0, 16.0, 14.0, 42.0)

# A perceptually ordered palette (viridis anchors, dark = slow clock, bright = fast).
_VIRIDIS = [
    (68, 1, 84),
    (59, 82, 139),
    (33, 145, 140),
    (94, 201, 98),
    (253, 231, 37),
]


def esc(text: object) -> str:
    """HTML/SVG-escape any value's text (quotes included)."""
    return html.escape(str(text), quote=True)


def fmt_num(value: float, digits: int = 4) -> str:
    """Compact number for labels, ``digits`` significant digits, plain notation between
    0.001 and 10⁷ (``11006.3`` → ``11,006``, ``1410.0`` → ``1410``), else scientific."""
    if not math.isfinite(value):
        # Readers refuse NaN and infinity in files; what remains is an unknown value
        # (a region outside the power trace), never a number to print as "nan".
        return "unknown"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if not 1e-3 <= magnitude < 1e7:
        return f"{value:.{digits}g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(magnitude)))
    sep = "," if magnitude >= 1e4 else ""  # 1410 MHz, but 11,006 J
    text = f"{value:{sep}.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def fmt_share(part: float, whole: float, digits: int = 1) -> str:
    """``part / whole`` as a percentage (``40.0%``), or "" when it has no meaning (an
    unknown part, or a whole that is not a positive finite number) — never ``nan%``."""
    if not (math.isfinite(part) and math.isfinite(whole) and whole > 0):
        return ""
    return f"{part / whole:.{digits}%}"


#: What an interval of a value without variance says instead of "5753 – 5753 J".
NO_VARIANCE = "no variance measured"


def fmt_interval(low: float | None, high: float | None, unit: str = "", digits: int = 4) -> str:
    """An interval as ``low – high unit``; :data:`NO_VARIANCE` when it has no width (the
    value carries no variance: a zero-width interval would claim a certainty nobody
    measured), ``unknown`` when an end is missing or not finite."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return "unknown"
    if high - low <= 1e-12 * max(1.0, abs(low), abs(high)):
        return NO_VARIANCE
    suffix = f" {unit}" if unit else ""
    return f"{fmt_num(low, digits)} – {fmt_num(high, digits)}{suffix}"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (1-2-5 steps)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high <= low:
        return [low]
    raw = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


@dataclass(frozen=True)
class Scale:
    """Linear map from data [lo, hi] to pixels [p0, p1]."""

    lo: float
    hi: float
    p0: float
    p1: float

    @classmethod
    def fit(cls, values: Sequence[float], p0: float, p1: float, pad: float = 0.05) -> Scale:
        """A scale covering ``values`` with ``pad`` of the span added on both sides."""
        finite = [v for v in values if math.isfinite(v)]
        if not finite:
            return cls(0.0, 1.0, p0, p1)
        lo, hi = min(finite), max(finite)
        span = hi - lo
        if span <= 0:
            span = abs(hi) * 0.1 or 1.0
            lo, hi = lo - span / 2, hi + span / 2
        else:
            lo, hi = lo - pad * span, hi + pad * span
        return cls(lo, hi, p0, p1)

    #: What :func:`svg_axes` writes as the axis's ``data-scale``.
    kind = "linear"

    def __call__(self, value: float) -> float:
        return self.p0 + (value - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)

    def ticks(self) -> list[float]:
        """Round tick values inside the scale (1-2-5 steps)."""
        return nice_ticks(self.lo, self.hi)


def log_ticks(low: float, high: float) -> list[float]:
    """Tick values for a log axis over [low, high] (both > 0): the decades alone when at
    least three fall inside, else with 2 and 5 between them, else every digit; a range
    too narrow even for that gets linear 1-2-5 ticks (placed on the log axis)."""
    if not (math.isfinite(low) and math.isfinite(high)) or low <= 0 or high <= low:
        return []
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    every = max(1, math.ceil((last - first) / 8))  # at most about eight decade labels
    for steps in ((1.0,), (1.0, 2.0, 5.0), tuple(float(d) for d in range(1, 10))):
        ticks = [
            float(f"{m * 10.0**k:.12g}")
            for k in range(first, last + 1)
            if len(steps) > 1 or (k - first) % every == 0
            for m in steps
        ]
        inside = [t for t in ticks if low * (1 - 1e-9) <= t <= high * (1 + 1e-9)]
        if len(inside) >= 3:
            return inside
    return nice_ticks(low, high)


@dataclass(frozen=True)
class LogScale:
    """Logarithmic map from data [lo, hi] (both > 0) to pixels [p0, p1]."""

    lo: float
    hi: float
    p0: float
    p1: float

    kind = "log"

    @classmethod
    def fit(cls, values: Sequence[float], p0: float, p1: float, pad: float = 0.05) -> LogScale:
        """A scale covering the positive ``values`` with ``pad`` of the span (in decades)
        added on both sides."""
        positive = [v for v in values if math.isfinite(v) and v > 0]
        if not positive:
            return cls(1.0, 10.0, p0, p1)
        lo, hi = math.log10(min(positive)), math.log10(max(positive))
        width = hi - lo if hi > lo else 0.1
        return cls(10 ** (lo - pad * width), 10 ** (hi + pad * width), p0, p1)

    def __call__(self, value: float) -> float:
        # A value ≤ 0 has no place on a log axis: it is pinned to the lower edge.
        v = math.log10(value) if value > 0 else math.log10(self.lo)
        a, b = math.log10(self.lo), math.log10(self.hi)
        return self.p0 + (v - a) / (b - a) * (self.p1 - self.p0)

    def ticks(self) -> list[float]:
        """Decade ticks (see :func:`log_ticks`)."""
        return log_ticks(self.lo, self.hi)


def svg_open(width: float, height: float, label: str, css_class: str = "chart") -> str:
    """The opening ``<svg>`` tag with an accessible label."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{esc(css_class)}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
        f'role="img" aria-label="{esc(label)}">'
    )


def svg_axes(
    x: Scale | LogScale, y: Scale | LogScale, x_label: str, y_label: str, height: float
) -> str:
    """Axes, grid lines, tick labels and axis titles for a plot area; the group says each
    axis's kind (``data-x-scale="log"``) and a log axis's title says so."""
    parts = [f'<g class="axes" data-x-scale="{x.kind}" data-y-scale="{y.kind}">']
    left, right = min(x.p0, x.p1), max(x.p0, x.p1)
    top, bottom = min(y.p0, y.p1), max(y.p0, y.p1)
    x_label = _log_title(x_label) if x.kind == "log" else x_label
    y_label = _log_title(y_label) if y.kind == "log" else y_label
    for tick in y.ticks():
        py = y(tick)
        parts.append(
            f'<line class="grid" x1="{left:.1f}" x2="{right:.1f}" y1="{py:.1f}" y2="{py:.1f}"/>'
        )
        parts.append(
            f'<text class="tick y-tick" x="{left - 6:.1f}" y="{py + 4:.1f}" text-anchor="end">'
            f"{esc(fmt_num(tick))}</text>"
        )
    for tick in x.ticks():
        px = x(tick)
        parts.append(
            f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{top:.1f}" y2="{bottom:.1f}"/>'
        )
        parts.append(
            f'<text class="tick x-tick" x="{px:.1f}" y="{bottom + 16:.1f}" text-anchor="middle">'
            f"{esc(fmt_num(tick))}</text>"
        )
    parts.append(
        f'<line class="axis" x1="{left:.1f}" x2="{right:.1f}" y1="{bottom:.1f}" y2="{bottom:.1f}"/>'
    )
    parts.append(
        f'<line class="axis" x1="{left:.1f}" x2="{left:.1f}" y1="{top:.1f}" y2="{bottom:.1f}"/>'
    )
    parts.append(
        f'<text class="axis-title" x="{(left + right) / 2:.1f}" y="{height - 6:.1f}" '
        f'text-anchor="middle">{esc(x_label)}</text>'
    )
    parts.append(
        f'<text class="axis-title" x="14" y="{(top + bottom) / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {(top + bottom) / 2:.1f})">{esc(y_label)}</text>'
    )
    parts.append("</g>")
    return "".join(parts)


def _log_title(label: str) -> str:
    """``time (ms)`` → ``time (ms, log scale)``."""
    if label.endswith(")"):
        return label[:-1] + ", log scale)"
    return label + " (log scale)"


def _lerp_color(t: float) -> str:
    t = min(1.0, max(0.0, t))
    pos = t * (len(_VIRIDIS) - 1)
    i = min(int(pos), len(_VIRIDIS) - 2)
    frac = pos - i
    a, b = _VIRIDIS[i], _VIRIDIS[i + 1]
    r, g, bl = (round(a[k] + (b[k] - a[k]) * frac) for k in range(3))
    return f"#{r:02x}{g:02x}{bl:02x}"


def clock_colors(values: Sequence[float | None]) -> dict[float | None, str]:
    """A colour per distinct clock (or limit): slow = dark violet, fast = yellow; None grey."""
    distinct = sorted({v for v in values if v is not None})
    out: dict[float | None, str] = {}
    for i, v in enumerate(distinct):
        out[v] = _lerp_color(i / (len(distinct) - 1) if len(distinct) > 1 else 0.6)
    if any(v is None for v in values):
        out[None] = "#9e9e9e"
    return out


def text_color(fill: str) -> str:
    """Black or white, whichever reads better on the ``#rrggbb`` ``fill``."""
    r, g, b = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "#111" if luminance > 140 else "#fff"
