"""Which regions a measured run's power trace shows as bands, with their calls and colours.

A band is one region: every call of it on the trace's time axis, in one colour, under
its name. The regions are taken in the order of the region table (outer before inner),
at most :data:`MAX_BANDS` of them; a trace with thousands of kernels would otherwise
paint the chart solid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from eopt.report.chart_rules import category_colors
from eopt.report.inputs import Measurement
from eopt.report.svg import fmt_num

__all__ = ["MAX_BANDS", "RegionBand", "region_bands"]

#: At most this many regions get a band.
MAX_BANDS = 8


@dataclass(frozen=True)
class RegionBand:
    """One region's calls on the power trace.

    Attributes:
        name: The region's name (as in the region table).
        spans: (start s, end s) of each call, on the trace's time axis.
        color: Its colour (``#rrggbb``).
        summary: What its tooltip says: calls, time and energy.
    """

    name: str
    spans: tuple[tuple[float, float], ...]
    color: str
    summary: str = ""


def region_bands(m: Measurement, limit: int = MAX_BANDS) -> tuple[list[RegionBand], int]:
    """The bands of a measured run and how many timed regions were left without one.

    Args:
        m: The run; its ``calls`` give the times.
        limit: Most bands.

    Returns:
        (bands in table order, number of further regions with calls not shown).
    """
    spans: dict[str, list[tuple[float, float]]] = {}
    for name, start, end in m.calls:
        if math.isfinite(start) and math.isfinite(end) and end >= start:
            spans.setdefault(name, []).append((start, end))
    order = [r.name for r in m.regions if r.name in spans]
    order += [n for n in spans if n not in order]
    shown = order[:limit]
    colors = category_colors(shown)
    by_name = {r.name: r for r in m.regions}
    bands = []
    for name in shown:
        region = by_name.get(name)
        calls = len(spans[name])
        summary = f"{name}: {calls} call{'s' if calls != 1 else ''}"
        if region is not None:
            summary += f", {fmt_num(region.time_s)} s, {fmt_num(region.energy_j)} J"
        bands.append(RegionBand(name, tuple(sorted(spans[name])), colors[name], summary))
    return bands, len(order) - len(shown)
