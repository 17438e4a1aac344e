"""The rules every eopt chart follows, in one place: when axes go logarithmic, and which
colour a category (an implementation κ, a region, a variant) gets.

Both the report's inline SVG charts (:mod:`eopt.report.charts`) and the matplotlib
figures (:mod:`eopt.report.frontier_plot`) ask these functions, so one library looks
the same in ``eopt report`` and ``eopt frontier --plot``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["CATEGORY_PALETTE", "LOG_SPAN", "category_colors", "log_axes", "span"]

#: Axes switch to log when the largest time (or energy) is more than this many times the
#: smallest: then a linear axis squeezes the fast cells into one corner.
LOG_SPAN = 5.0

#: Colours of categories in first-seen order (matplotlib's tab10: distinct for readers
#: with the common colour-vision deficiencies in its first few entries).
CATEGORY_PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
    "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
)  # fmt: skip


def span(values: Sequence[float]) -> float:
    """Largest over smallest of the positive ``values`` (1.0 when there are none)."""
    positive = [v for v in values if v > 0]
    if not positive:
        return 1.0
    return max(positive) / min(positive)


def log_axes(times: Sequence[float], energies: Sequence[float]) -> bool:
    """Whether a time–energy plot of these values gets log axes (both at once).

    True when times or energies span more than :data:`LOG_SPAN` and every value is
    positive (a log axis has no place for 0).
    """
    values = [*times, *energies]
    if not values or min(values) <= 0:
        return False
    return max(span(times), span(energies)) > LOG_SPAN


def category_colors(names: Iterable[str]) -> dict[str, str]:
    """A colour per distinct name, in first-seen order; the palette repeats past 10."""
    out: dict[str, str] = {}
    for name in names:
        if name not in out:
            out[name] = CATEGORY_PALETTE[len(out) % len(CATEGORY_PALETTE)]
    return out
