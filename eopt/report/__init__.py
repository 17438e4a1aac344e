"""Reports: the standalone HTML report, Perfetto traces, matplotlib frontier plots.

Every name here loads on first use, so that a command that prints one table
(``eopt attribute``, ``eopt compare``) does not import the HTML report, its schedule
files and their graph library; matplotlib loads only when a plot is drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from eopt.model.lazy import lazy_attributes

if TYPE_CHECKING:
    from eopt.report.breakdown import Baseline, EnergyBreakdown, baseline_of, energy_breakdown
    from eopt.report.compare_report import render_compare_report, write_compare_report
    from eopt.report.html import render_report, write_report
    from eopt.report.inputs import (
        FrontierRow,
        Measurement,
        Region,
        ReportInputError,
        read_frontier_csv,
        read_measurement,
    )
    from eopt.report.perfetto import predicted_power, schedule_trace, write_trace

_LAZY = {
    "Baseline": "eopt.report.breakdown",
    "EnergyBreakdown": "eopt.report.breakdown",
    "baseline_of": "eopt.report.breakdown",
    "energy_breakdown": "eopt.report.breakdown",
    "render_compare_report": "eopt.report.compare_report",
    "write_compare_report": "eopt.report.compare_report",
    "render_report": "eopt.report.html",
    "write_report": "eopt.report.html",
    "FrontierRow": "eopt.report.inputs",
    "Measurement": "eopt.report.inputs",
    "Region": "eopt.report.inputs",
    "ReportInputError": "eopt.report.inputs",
    "read_frontier_csv": "eopt.report.inputs",
    "read_measurement": "eopt.report.inputs",
    "predicted_power": "eopt.report.perfetto",
    "schedule_trace": "eopt.report.perfetto",
    "write_trace": "eopt.report.perfetto",
}

__all__ = [
    "Baseline",
    "EnergyBreakdown",
    "FrontierRow",
    "Measurement",
    "Region",
    "ReportInputError",
    "baseline_of",
    "energy_breakdown",
    "plot_frontier",
    "predicted_power",
    "read_frontier_csv",
    "read_measurement",
    "render_compare_report",
    "render_report",
    "schedule_trace",
    "write_compare_report",
    "write_report",
    "write_trace",
]


def plot_frontier(frontier: Any, path: str | Path, **options: Any) -> Path:
    """Plot frontier(s) to a PNG/SVG/PDF file; see :func:`eopt.report.plots.plot_frontier`
    (imported on first use: matplotlib is slow to import)."""
    from eopt.report.plots import plot_frontier as _plot

    return _plot(frontier, path, **options)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
