"""The charts of the comparison report as inline SVG: per-run series in run order with the
machine-state blocks marked, and histograms of bootstrap distributions.

Each function takes plain data and returns one ``<svg>`` element as a string.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from eopt.report.svg import MARGIN, Scale, esc, fmt_num, nice_ticks, svg_axes, svg_open

__all__ = ["Block", "Series", "histogram_svg", "run_series_svg"]


@dataclass(frozen=True)
class Series:
    """One variant's values, or one distribution.

    Attributes:
        name: Legend text.
        color: ``#rrggbb``.
        values: The values: per run in run order (run i is ``values[i - 1]``), or the
            resamples of a distribution.
    """

    name: str
    color: str
    values: Sequence[float]


@dataclass(frozen=True)
class Block:
    """Consecutive runs of one variant in another machine state.

    Attributes:
        series: Index of the variant's :class:`Series`.
        first: First run (1-based).
        last: Last run (1-based, inclusive).
        label: What the block's marker says (e.g. ``A runs 4–9: 1.4× time``).
    """

    series: int
    first: int
    last: int
    label: str


@dataclass(frozen=True)
class _RunScale(Scale):
    """A linear scale of run numbers: whole-number ticks only."""

    def ticks(self) -> list[float]:
        return [t for t in nice_ticks(max(1.0, self.lo), self.hi) if float(t).is_integer()]


def run_series_svg(
    title: str,
    y_label: str,
    series: Sequence[Series],
    blocks: Sequence[Block] = (),
    *,
    width: float = 960,
    height: float = 230,
) -> str:
    """Values per run in run order, one line per variant, its median dashed; each block a
    band in its variant's colour, labelled, with its runs' markers ringed."""
    left, right, top, bottom = MARGIN
    top += 18.0 * max(1, len(blocks))  # block labels sit above the plot area
    legend_h = 18.0
    total_h = height + legend_h
    n = max((len(s.values) for s in series), default=1)
    x = _RunScale(0.5, n + 0.5, left, width - right)
    values = [v for s in series for v in s.values if math.isfinite(v)]
    y = Scale.fit(values, total_h - bottom - legend_h, top, pad=0.08)
    out = [svg_open(width, total_h, title, "chart runs")]
    out.append(f"<title>{esc(title)}</title>")
    out.append(svg_axes(x, y, "run (in start order)", y_label, total_h - legend_h))
    for k, blk in enumerate(blocks):
        color = series[blk.series].color
        x0, x1 = x(blk.first - 0.5), x(blk.last + 0.5)
        label_y = top - 18.0 * (len(blocks) - k) + 12
        out.append(
            f'<g class="block" data-variant="{blk.series}"><title>{esc(blk.label)}</title>'
            f'<rect class="block-band" x="{x0:.1f}" y="{label_y - 10:.1f}" '
            f'width="{x1 - x0:.1f}" height="{total_h - bottom - legend_h - label_y + 10:.1f}" '
            f'style="fill:{color}"/>'
            f'<line class="block-edge" x1="{x0:.1f}" x2="{x0:.1f}" y1="{label_y - 10:.1f}" '
            f'y2="{total_h - bottom - legend_h:.1f}" style="stroke:{color}"/>'
            f'<line class="block-edge" x1="{x1:.1f}" x2="{x1:.1f}" y1="{label_y - 10:.1f}" '
            f'y2="{total_h - bottom - legend_h:.1f}" style="stroke:{color}"/>'
            f'<text class="block-label" x="{x0 + 4:.1f}" y="{label_y:.1f}" '
            f'style="fill:{color}">{esc(blk.label)}</text></g>'
        )
    in_block = {(b.series, i) for b in blocks for i in range(b.first, b.last + 1)}
    for k, s in enumerate(series):
        pts = [(i, v) for i, v in enumerate(s.values, 1) if math.isfinite(v)]
        if not pts:
            continue
        coords = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in pts)
        median = sorted(v for _, v in pts)
        mid = len(median) // 2
        med = median[mid] if len(median) % 2 else (median[mid - 1] + median[mid]) / 2
        out.append(f'<g class="run-series" data-series="{k}">')
        out.append(
            f'<line class="median" x1="{x(pts[0][0]):.1f}" x2="{x(pts[-1][0]):.1f}" '
            f'y1="{y(med):.1f}" y2="{y(med):.1f}" style="stroke:{s.color}">'
            f"<title>{esc(s.name)}: median {esc(fmt_num(med))}</title></line>"
        )
        out.append(f'<polyline class="series-line" points="{coords}" style="stroke:{s.color}"/>')
        for i, v in pts:
            ring = " in-block" if (k, i) in in_block else ""
            out.append(
                f'<circle class="run{ring}" cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" '
                f'style="fill:{s.color}"><title>{esc(s.name)} run {i}: '
                f"{esc(fmt_num(v))}</title></circle>"
            )
        out.append("</g>")
    entries = [(s.color, s.name, "swatch") for s in series]
    entries.append(("#666", "dashed: median", "median"))
    if blocks:
        entries.append(("#999", "band: a block of runs in another machine state", "band"))
    out.append(_legend(entries, left, total_h - 6))
    out.append("</svg>")
    return "".join(out)


def histogram_svg(
    title: str,
    x_label: str,
    series: Sequence[Series],
    *,
    interval: tuple[float | None, float | None] | None = None,
    reference: float | None = None,
    reference_label: str = "no difference",
    bins: int = 30,
    width: float = 310,
    height: float = 210,
) -> str:
    """Histograms of distributions on one axis (shares of their resamples), with an
    optional interval shaded and a reference value (e.g. 0: no change) marked.

    The axis covers the middle 99 % of the values (and the interval): a few far resamples
    would otherwise squeeze the distribution into one bar. The resamples beyond it are
    counted in the edge bins, and the edge says what share lies there ("◀ 0.3 %"). A
    reference off the axis is named at the edge it lies beyond.
    """
    left, right, top, bottom = MARGIN
    legend_h = 18.0 if interval is not None or reference is not None or len(series) > 1 else 0.0
    total_h = height + legend_h
    values = sorted(v for s in series for v in s.values if math.isfinite(v))
    extent = [_quantile(values, 0.005), _quantile(values, 0.995)] if values else [0.0, 1.0]
    if interval is not None:
        extent += [v for v in interval if v is not None and math.isfinite(v)]
    x = Scale.fit(extent, left, width - right, pad=0.06)
    lo, hi = x.lo, x.hi
    step = (hi - lo) / bins
    counts, beyond = [], [0, 0]
    for s in series:
        finite = [v for v in s.values if math.isfinite(v)]
        c = [0] * bins
        for v in finite:
            k = int((v - lo) / step) if step > 0 else 0
            if k < 0:
                beyond[0] += 1
            elif k >= bins:
                beyond[1] += 1
            c[min(bins - 1, max(0, k))] += 1
        counts.append([k / len(finite) if finite else 0.0 for k in c])
    peak = max((v for c in counts for v in c), default=1.0) or 1.0
    plot_bottom = total_h - bottom - legend_h
    y = Scale(0.0, peak * 1.15, plot_bottom, top)
    out = [svg_open(width, total_h, title, "chart histogram")]
    out.append(f"<title>{esc(title)}</title>")
    out.append(svg_axes(x, y, x_label, "share of resamples", total_h - legend_h))
    if interval is not None and interval[0] is not None and interval[1] is not None:
        a, b = x(interval[0]), x(interval[1])
        out.append(
            f'<rect class="ci-band" x="{a:.1f}" y="{top:.1f}" width="{max(1.0, b - a):.1f}" '
            f'height="{plot_bottom - top:.1f}"><title>interval '
            f"{esc(fmt_num(interval[0]))} to {esc(fmt_num(interval[1]))}</title></rect>"
        )
    for k, (s, c) in enumerate(zip(series, counts, strict=True)):
        out.append(f'<g class="histogram" data-series="{k}" style="fill:{s.color}">')
        for i, share in enumerate(c):
            if share <= 0:
                continue
            x0, x1 = x(lo + i * step), x(lo + (i + 1) * step)
            out.append(
                f'<rect x="{x0:.1f}" y="{y(share):.1f}" width="{max(0.5, x1 - x0 - 0.5):.1f}" '
                f'height="{y(0.0) - y(share):.1f}"/>'
            )
        out.append("</g>")
    total = max(1, len(values))
    for side, n in zip(("left", "right"), beyond, strict=True):
        if n:
            text = f"◀ {n / total:.1%}" if side == "left" else f"{n / total:.1%} ▶"
            out.append(_edge_note(text, side, x, top, "beyond the axis, in the edge bin"))
    drawn = reference is not None and lo <= reference <= hi
    if reference is not None:
        if drawn:
            rx = x(reference)
            out.append(
                f'<line class="reference" x1="{rx:.1f}" x2="{rx:.1f}" y1="{top:.1f}" '
                f'y2="{plot_bottom:.1f}"><title>{esc(fmt_num(reference))}: '
                f"{esc(reference_label)}</title></line>"
            )
        else:
            side = "left" if reference < lo else "right"
            name = f"{fmt_num(reference)}: {reference_label}"
            text = f"◀ {name}" if side == "left" else f"{name} ▶"
            out.append(_edge_note(text, side, x, top + 14, "off the axis"))
    entries = [(s.color, s.name, "swatch") for s in series] if len(series) > 1 else []
    if interval is not None:
        entries.append(("#999", "shaded: the interval", "band"))
    if drawn:
        entries.append(("#222", f"line: {reference_label}", "line"))
    if entries:
        out.append(_legend(entries, 8.0, total_h - 6))
    out.append("</svg>")
    return "".join(out)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values (nearest rank)."""
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _edge_note(text: str, side: str, x: Scale, y: float, why: str) -> str:
    """A note at the left or right edge of the plot area."""
    px, anchor = (x.p0 + 4, "start") if side == "left" else (x.p1 - 4, "end")
    return (
        f'<text class="edge-note" x="{px:.1f}" y="{y + 10:.1f}" text-anchor="{anchor}">'
        f"{esc(text)}<title>{esc(why)}</title></text>"
    )


def _legend(entries: Sequence[tuple[str, str, str]], x0: float, y0: float) -> str:
    """One row of legend entries, (colour, text, kind), at the bottom of a chart; kinds:
    ``swatch`` (a filled square), ``band`` (a pale one), ``median`` (a dashed line),
    ``line`` (a solid one)."""
    out = ['<g class="legend">']
    x = x0
    for color, text, kind in entries:
        if kind in ("median", "line"):
            swatch = (
                f'<line class="{"median" if kind == "median" else "reference"}" x1="{x:.1f}" '
                f'x2="{x + 12:.1f}" y1="{y0 - 4:.1f}" y2="{y0 - 4:.1f}" style="stroke:{color}"/>'
            )
        else:
            opacity = "0.25" if kind == "band" else "1"
            swatch = (
                f'<rect x="{x:.1f}" y="{y0 - 10:.1f}" width="12" height="12" '
                f'style="fill:{color};fill-opacity:{opacity}"/>'
            )
        out.append(
            f'<g class="legend-entry">{swatch}<text x="{x + 16:.1f}" y="{y0:.1f}">'
            f"{esc(text)}</text></g>"
        )
        x += 30 + 6.4 * len(text)
    out.append("</g>")
    return "".join(out)
