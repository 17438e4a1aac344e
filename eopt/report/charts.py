"""The report's charts as inline SVG: frontiers, the schedule's Gantt chart, energy
breakdown and power traces.

Each function takes plain data and returns one ``<svg>`` element as a string.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from eopt.model.operating_point import OperatingPoint
from eopt.model.schedule import Schedule, ScheduledElement
from eopt.report.chart_rules import log_axes
from eopt.report.names import shorten
from eopt.report.region_bands import RegionBand
from eopt.report.svg import (
    MARGIN,
    LogScale,
    Scale,
    clock_colors,
    esc,
    fmt_num,
    fmt_share,
    nice_ticks,
    svg_axes,
    svg_open,
    text_color,
)

__all__ = [
    "PlotPoint",
    "breakdown_svg",
    "frontier_svg",
    "gantt_svg",
    "power_trace_svg",
    "setting_colors",
    "setting_key",
    "setting_text",
]


@dataclass(frozen=True)
class PlotPoint:
    """A point of a time–energy plot.

    Attributes:
        time_s: x, in s.
        energy_j: y, in J.
        low_j: Lower end of the energy's uncertainty bar (None: no bar).
        high_j: Upper end of the bar.
        label: Tooltip text.
        kind: ``frontier`` (on the Pareto frontier), ``dominated``, ``chosen``,
            ``baseline`` or ``bound`` (a certified lower bound).
        group: The category the point's colour says (its implementation κ); "" for none.
    """

    time_s: float
    energy_j: float
    low_j: float | None = None
    high_j: float | None = None
    label: str = ""
    kind: str = "frontier"
    group: str = ""


def frontier_svg(
    points: Sequence[PlotPoint],
    title: str,
    *,
    width: float = 640,
    height: float = 360,
    time_unit: str = "s",
    colors: Mapping[str, str] | None = None,
    chosen_label: str = "chosen",
) -> str:
    """Time–energy plot: the frontier as a step line through its points, uncertainty
    bars, dominated points grey (or hollow), the chosen point and the baseline marked.

    Args:
        points: The points.
        title: The chart's accessible title.
        width: Width, in px.
        height: Height, in px.
        time_unit: ``s`` or ``ms`` on the x axis.
        colors: Group → colour (see :func:`eopt.report.chart_rules.category_colors`);
            grouped points are drawn in their group's colour, dominated ones hollow, and
            the legend names every group.
        chosen_label: The legend's words for a ``chosen`` point.

    Axes are logarithmic (both) where the values span decades
    (:func:`eopt.report.chart_rules.log_axes`), so fast points are not squeezed into a
    corner.
    """
    scale_t = 1e3 if time_unit == "ms" else 1.0
    # An unknown (non-finite) value has no place on the axes: such a point is left out,
    # such a bar drawn without its ends, instead of writing x="inf" into the SVG. A bar of
    # no width (no variance measured) is no bar.
    points = [replace(p, low_j=_bar_end(p, p.low_j), high_j=_bar_end(p, p.high_j)) for p in points]
    points = [p for p in points if math.isfinite(p.time_s) and math.isfinite(p.energy_j)]
    colors = dict(colors or {})
    left, right, top, bottom = MARGIN
    legend, legend_rows = _legend_frontier(points, colors, chosen_label, left, width - right)
    top += 18 * legend_rows  # the legend sits above the plot area, never over data
    times = [p.time_s * scale_t for p in points]
    values_y = [p.energy_j for p in points]
    log = log_axes(times, values_y)
    values_y += [p.low_j for p in points if p.low_j is not None]
    values_y += [p.high_j for p in points if p.high_j is not None]
    fit = LogScale.fit if log else Scale.fit
    x = fit(times, left, width - right)
    y = fit(values_y, height - bottom, top)
    out = [svg_open(width, height, title, "chart frontier")]
    out.append(f"<title>{esc(title)}</title>")
    out.append(svg_axes(x, y, f"time ({time_unit})", "energy (J)", height))
    frontier = sorted((p for p in points if p.kind == "frontier"), key=lambda p: p.time_s)
    if len(frontier) > 1:
        # Staircase: between two frontier points the better energy is only reached
        # at the later time, so the achievable curve steps down.
        path = []
        for i, p in enumerate(frontier):
            px, py = x(p.time_s * scale_t), y(p.energy_j)
            if i == 0:
                path.append(f"M{px:.1f},{py:.1f}")
            else:
                path.append(f"H{px:.1f}V{py:.1f}")
        grouped = ' style="stroke:#222"' if colors else ""
        out.append(f'<path class="frontier-line" d="{" ".join(path)}"{grouped}/>')
    bounds = sorted((p for p in points if p.kind == "bound"), key=lambda p: p.time_s)
    if len(bounds) > 1:
        coords = " ".join(f"{x(p.time_s * scale_t):.1f},{y(p.energy_j):.1f}" for p in bounds)
        out.append(f'<polyline class="bound-line" points="{coords}"/>')
    order = {"dominated": 0, "bound": 1, "frontier": 2, "baseline": 3, "chosen": 4}
    for p in sorted(points, key=lambda p: order.get(p.kind, 2)):
        if p.kind == "bound":
            continue
        px, py = x(p.time_s * scale_t), y(p.energy_j)
        color = colors.get(p.group) if p.group else None
        if p.low_j is not None and p.high_j is not None:
            y0, y1 = y(p.low_j), y(p.high_j)
            stroke = f' style="stroke:{color}"' if color else ""
            out.append(
                f'<g class="errbar {esc(p.kind)}"{stroke}><line x1="{px:.1f}" x2="{px:.1f}" '
                f'y1="{y0:.1f}" y2="{y1:.1f}"/><line x1="{px - 3:.1f}" x2="{px + 3:.1f}" '
                f'y1="{y0:.1f}" y2="{y0:.1f}"/><line x1="{px - 3:.1f}" x2="{px + 3:.1f}" '
                f'y1="{y1:.1f}" y2="{y1:.1f}"/></g>'
            )
        tip = p.label or f"{fmt_num(p.time_s * scale_t)} {time_unit}, {fmt_num(p.energy_j)} J"
        out.append(_marker(p.kind, px, py, color, tip))
    out.append(legend)
    out.append("</svg>")
    return "".join(out)


def _bar_end(p: PlotPoint, end: float | None) -> float | None:
    """A bar end to draw, or None: unknown ends and bars of no width are not drawn."""
    if end is None or not math.isfinite(end):
        return None
    if p.low_j is not None and p.high_j is not None and p.high_j - p.low_j <= 0:
        return None
    return end


def _marker(kind: str, px: float, py: float, color: str | None, tip: str = "") -> str:
    """One point's marker. A grouped one is in its group's colour: filled on the frontier,
    hollow when dominated; a grouped ``chosen`` point is a ring, drawn over the cell's own
    marker, so a chosen cell still shows whether it is on the frontier. Ungrouped points
    are coloured by their kind's CSS class."""
    radius = 6 if kind in ("chosen", "baseline") else 3.5
    title = f"<title>{esc(tip)}</title>" if tip else ""
    if kind == "baseline":
        return (
            f'<rect x="{px - radius:.1f}" y="{py - radius:.1f}" width="{2 * radius:.1f}" '
            f'height="{2 * radius:.1f}" class="pt baseline">{title}</rect>'
        )
    style = ""
    if color and kind == "chosen":
        radius = 7.0
        style = ' style="fill:none;stroke:#222;stroke-width:2"'
    elif color:
        fill = "#fff" if kind == "dominated" else color
        style = f' style="fill:{fill};stroke:{color};stroke-width:1.4"'
    return (
        f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{radius:.1f}" class="pt {esc(kind)}"'
        f"{style}>{title}</circle>"
    )


def _legend_frontier(
    points: Sequence[PlotPoint],
    colors: Mapping[str, str],
    chosen_label: str,
    x_min: float,
    x_max: float,
) -> tuple[str, int]:
    """The legend as rows of swatches above the plot area; returns (svg, rows).

    Grouped points: one entry per group in its colour, then what filled, hollow and
    ringed markers mean (in grey). Otherwise one entry per kind.
    """
    names = {
        "frontier": "on the Pareto frontier" if colors else "Pareto frontier",
        "dominated": "dominated",
        "bound": "lower bound",
        "chosen": chosen_label,
        "baseline": "all-fastest baseline",
    }
    kinds = [k for k in names if any(p.kind == k for p in points)]
    groups = [g for g in colors if any(p.group == g for p in points)]
    # (swatch drawn at (x, y), text) per entry.
    entries: list[tuple[Callable[[float, float], str], str]] = [
        (lambda x, y, c=colors[g]: _swatch(x, y, c), g) for g in groups
    ]
    for kind in kinds:
        entries.append((lambda x, y, k=kind: _kind_swatch(k, x, y, bool(colors)), names[kind]))
    out = ['<g class="legend">']
    row, x0 = 0, x_min + 6
    for swatch, text in entries:
        shown = text if len(text) <= 40 else text[:39] + "…"
        step = 24 + 6.4 * len(shown)
        if x0 + step > x_max and x0 > x_min + 6:
            row, x0 = row + 1, x_min + 6
        y0 = 12.0 + 18 * row
        out.append(
            f'<g class="legend-entry">{swatch(x0, y0)}'
            f'<text x="{x0 + 10:.1f}" y="{y0 + 4:.1f}">{esc(shown)}</text></g>'
        )
        x0 += step
    out.append("</g>")
    return "".join(out), (row + 1 if entries else 0)


def _swatch(x: float, y: float, color: str) -> str:
    """A group's legend swatch: a dot in its colour."""
    return f'<circle class="swatch" cx="{x:.1f}" cy="{y:.1f}" r="4.5" style="fill:{color}"/>'


def _kind_swatch(kind: str, x: float, y: float, grouped: bool) -> str:
    """A kind's legend swatch: its marker (in grey where colours name groups)."""
    if kind == "baseline":
        return f'<rect class="pt baseline" x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8"/>'
    if kind == "bound":
        return (
            f'<line class="bound-line" x1="{x - 6:.1f}" x2="{x + 6:.1f}" '
            f'y1="{y:.1f}" y2="{y:.1f}"/>'
        )
    if grouped:
        return _marker(kind, x, y, "#666")
    return f'<circle class="pt {kind}" cx="{x:.1f}" cy="{y:.1f}" r="4"/>'


def setting_key(element: ScheduledElement) -> OperatingPoint:
    """What a Gantt bar is coloured by: the element's device-wide operating point."""
    return element.op_point.device_wide()


def setting_text(point: OperatingPoint) -> str:
    """Legend text of a device-wide setting, e.g. ``1410 MHz`` or ``1200 MHz / 300 W``."""
    return point.text(fmt=fmt_num)


def setting_colors(points: Sequence[OperatingPoint]) -> dict[OperatingPoint, str]:
    """A colour per distinct setting, ordered slow → fast (SM clock, then limit, then
    memory clock): dark violet → yellow; the driver's default grey."""
    distinct = sorted(
        set(points),
        key=lambda p: (p.sm_clock_mhz or 0.0, p.power_limit_w or 0.0, p.mem_clock_mhz or 0.0),
    )
    ranked = [p for p in distinct if p.device_key != (None, None, None)]
    shades = clock_colors(list(range(len(ranked))))
    out = {p: shades[i] for i, p in enumerate(ranked)}
    out.update({p: "#9e9e9e" for p in distinct if p.device_key == (None, None, None)})
    return out


def gantt_svg(schedule: Schedule, *, width: float = 960, row_height: float = 30) -> str:
    """Gantt chart: one row per device, one bar per element coloured by its clock, idle
    gaps hatched, with a legend of clocks."""
    devices = [d.name for d in schedule.devices]
    left, right, top = 90.0, 130.0, 10.0
    legend_keys = setting_colors([setting_key(e) for e in schedule.elements])
    col_w = max(120.0, 7.0 * max((len(setting_text(k)) for k in legend_keys), default=0) + 28)
    per_row = max(1, int((width - left) // col_w))
    legend_rows = math.ceil((len(legend_keys) + 1) / per_row) if legend_keys else 0
    plot_h = row_height * max(1, len(devices))
    height = top + plot_h + 40 + 18 * legend_rows
    deadline = schedule.deadline
    if deadline is not None and not math.isfinite(deadline):
        deadline = None  # "no deadline" has no place on the time axis
    horizon = max(
        schedule.makespan,
        deadline or 0.0,
        max((e.end for e in schedule.elements), default=0.0),
    )
    x = Scale(0.0, horizon if horizon > 0 else 1.0, left, width - right)
    out = [svg_open(width, height, "Schedule per device", "chart gantt")]
    out.append(
        '<defs><pattern id="idle-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f4f4f4"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#cfcfcf" stroke-width="2"/></pattern></defs>'
    )
    for row, name in enumerate(devices):
        y0 = top + row * row_height
        elements = schedule.elements_on(name)
        idle_s = max(0.0, schedule.makespan - schedule.busy_time(name))
        band_w = x(schedule.makespan) - x(0)  # devices are held (and idle) to the makespan
        out.append(
            f'<rect class="idle" x="{x(0):.1f}" y="{y0 + 3:.1f}" width="{band_w:.1f}" '
            f'height="{row_height - 6:.1f}" fill="url(#idle-hatch)"><title>{esc(name)}: idle '
            f"{fmt_num(idle_s)} s of {fmt_num(schedule.makespan)} s</title></rect>"
        )
        out.append(
            f'<text class="row-label" x="{left - 8:.1f}" y="{y0 + row_height / 2 + 4:.1f}" '
            f'text-anchor="end">{esc(name)}</text>'
        )
        share = idle_s / schedule.makespan if schedule.makespan > 0 else 0.0
        out.append(
            f'<text class="row-note" x="{width - right + 8:.1f}" y="{y0 + row_height / 2 + 4:.1f}">'
            f"idle {share:.0%}</text>"
        )
        for e in elements:
            x0, x1 = x(e.start), x(e.end)
            color = legend_keys.get(setting_key(e), "#9e9e9e")
            tip = (
                f"{e.name} ({e.type}) on {e.device}: {fmt_num(e.start)}–{fmt_num(e.end)} s, "
                f"{fmt_num(e.energy)} J, {e.impl} @ {e.op_point.label()}"
            )
            out.append(
                f'<rect class="element" x="{x0:.2f}" y="{y0 + 3:.1f}" '
                f'width="{max(0.5, x1 - x0):.2f}" height="{row_height - 6:.1f}" fill="{color}">'
                f"<title>{esc(tip)}</title></rect>"
            )
            if x1 - x0 > 7 * len(e.name) + 4:
                out.append(
                    f'<text class="bar-label" x="{(x0 + x1) / 2:.1f}" '
                    f'y="{y0 + row_height / 2 + 4:.1f}" text-anchor="middle" '
                    f'style="fill:{text_color(color)}">{esc(e.name)}</text>'
                )
    axis_y = top + plot_h + 2
    out.append(f'<line class="axis" x1="{left}" x2="{width - right}" y1="{axis_y}" y2="{axis_y}"/>')
    for tick in nice_ticks(0.0, horizon):
        px = x(tick)
        out.append(
            f'<line class="axis" x1="{px:.1f}" x2="{px:.1f}" y1="{axis_y}" y2="{axis_y + 4}"/>'
            f'<text class="tick" x="{px:.1f}" y="{axis_y + 16:.1f}" text-anchor="middle">'
            f"{esc(fmt_num(tick))}</text>"
        )
    if deadline is not None:
        dx = x(deadline)
        out.append(
            f'<line class="deadline" x1="{dx:.1f}" x2="{dx:.1f}" y1="{top}" y2="{axis_y}">'
            f"<title>deadline {fmt_num(deadline)} s</title></line>"
        )
    out.append(
        f'<text class="axis-title" x="{(left + width - right) / 2:.1f}" y="{axis_y + 32:.1f}" '
        'text-anchor="middle">time (s)</text>'
    )
    ly = axis_y + 44
    out.append('<g class="legend">')
    for i, (key, color) in enumerate(legend_keys.items()):
        col, row = i % per_row, i // per_row
        lx = left + col * col_w
        text = setting_text(key)
        out.append(
            f'<rect x="{lx:.1f}" y="{ly + 18 * row - 9:.1f}" width="12" height="12" '
            f'fill="{color}"/>'
            f'<text x="{lx + 16:.1f}" y="{ly + 18 * row + 1:.1f}">{esc(text)}</text>'
        )
    if legend_keys:
        n = len(legend_keys)  # the idle swatch follows the settings
        lx, iy = left + (n % per_row) * col_w, ly + 18 * (n // per_row)
        out.append(
            f'<rect x="{lx:.1f}" y="{iy - 9:.1f}" width="12" height="12" fill="url(#idle-hatch)" '
            f'stroke="#bbb"/><text x="{lx + 16:.1f}" y="{iy + 1:.1f}">idle</text>'
        )
    out.append("</g></svg>")
    return "".join(out)


def breakdown_svg(parts: Mapping[str, float], *, width: float = 640, height: float = 64) -> str:
    """One horizontal stacked bar of energy parts (label → J)."""
    total = sum(v for v in parts.values() if v > 0)
    palette = ["#3b528b", "#21918c", "#5ec962", "#fde725", "#440154", "#8f8f8f", "#c0c0c0"]
    out = [svg_open(width, height, "Energy breakdown", "chart breakdown")]
    x0 = 0.0
    for i, (label, value) in enumerate(parts.items()):
        if value <= 0 or total <= 0:
            continue
        w = value / total * width
        color = palette[i % len(palette)]
        out.append(
            f'<rect x="{x0:.2f}" y="4" width="{w:.2f}" height="{height - 8}" fill="{color}">'
            f"<title>{esc(label)}: {fmt_num(value)} J ({fmt_share(value, total)})</title></rect>"
        )
        if w > 8 * len(label) + 10:
            out.append(
                f'<text class="bar-label" x="{x0 + w / 2:.1f}" y="{height / 2 + 4:.1f}" '
                f'text-anchor="middle" style="fill:{text_color(color)}">{esc(label)}</text>'
            )
        x0 += w
    out.append("</svg>")
    return "".join(out)


def power_trace_svg(
    samples: Sequence[tuple[float, float]],
    *,
    bands: Sequence[RegionBand] = (),
    width: float = 960,
    height: float = 260,
) -> str:
    """Power over time as a line, with each region's calls as a band.

    A band is a lane above the plot, labelled with the region's name, holding a bar per
    call (calls closer than a pixel merge), and the same spans shaded lightly over the
    power line; hovering a band names the region with its calls, time and energy.

    Args:
        samples: (time s, power W).
        bands: The regions to show (see :func:`eopt.report.region_bands.region_bands`).
        width: Width, in px.
        height: Height of the power plot, in px (the lanes add to it).
    """
    samples = [(t, w) for t, w in samples if math.isfinite(t) and math.isfinite(w)]
    left, right, top, bottom = MARGIN
    labels = [shorten(b.name, 32) for b in bands]  # the tooltip keeps it whole
    if bands:
        left = min(240.0, max(left, 6.5 * max(len(n) for n in labels) + 18))
    lane_h, lane_gap = 12.0, 5.0
    lanes_top = top
    plot_top = top + len(bands) * (lane_h + lane_gap) + (6.0 if bands else 0.0)
    total_h = height + plot_top - top
    times = [t for t, _ in samples] + [t for b in bands for span in b.spans for t in span]
    x = Scale.fit(times, left, width - right, pad=0.0)
    y = Scale.fit([0.0] + [w for _, w in samples], total_h - bottom, plot_top)
    out = [svg_open(width, total_h, "Power trace", "chart power")]
    out.append(svg_axes(x, y, "time (s)", "power (W)", total_h))
    for k, (band, label) in enumerate(zip(bands, labels, strict=True)):
        y0 = lanes_top + k * (lane_h + lane_gap)
        merged = _merged_px([(x(a), x(b)) for a, b in band.spans])
        out.append(f'<g class="region-band" data-region="{esc(band.name)}">')
        out.append(f"<title>{esc(band.summary or band.name)}</title>")
        out.append(
            f'<text class="band-label" x="{left - 6:.1f}" y="{y0 + lane_h - 2:.1f}" '
            f'text-anchor="end">{esc(label)}</text>'
        )
        for x0, x1 in merged:
            out.append(
                f'<rect class="band-call" x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" '
                f'height="{lane_h:.1f}" style="fill:{band.color}"/>'
            )
        for x0, x1 in merged:
            out.append(
                f'<rect class="band-shade" x="{x0:.1f}" y="{plot_top:.1f}" '
                f'width="{x1 - x0:.1f}" height="{total_h - bottom - plot_top:.1f}" '
                f'style="fill:{band.color}"/>'
            )
        out.append("</g>")
    if samples:
        coords = " ".join(f"{x(t):.1f},{y(w):.1f}" for t, w in samples)
        out.append(f'<polyline class="power-line" points="{coords}"/>')
    out.append("</svg>")
    return "".join(out)


def _merged_px(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Pixel spans, each at least 1 px wide, with those less than a pixel apart merged:
    a region called 10 000 times draws as many rects as the chart has pixels, at most."""
    merged: list[tuple[float, float]] = []
    for a, b in sorted((a, max(b, a + 1.0)) for a, b in spans):
        if merged and a <= merged[-1][1] + 1.0:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged
