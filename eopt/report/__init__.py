"""Reports: the standalone HTML report, Perfetto traces, matplotlib frontier plots.

Heavier parts (matplotlib) load only when used.
"""

from pathlib import Path
from typing import Any

from eopt.report.breakdown import Baseline, EnergyBreakdown, baseline_of, energy_breakdown
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
    "render_report",
    "schedule_trace",
    "write_report",
    "write_trace",
]


def plot_frontier(frontier: Any, path: str | Path, **options: Any) -> Path:
    """Plot frontier(s) to a PNG/SVG/PDF file; see :func:`eopt.report.plots.plot_frontier`
    (imported on first use: matplotlib is slow to import)."""
    from eopt.report.plots import plot_frontier as _plot

    return _plot(frontier, path, **options)
