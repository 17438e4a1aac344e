"""The figure of ``eopt frontier --plot``: element frontiers a reader can read at a glance.

One row per element: all its cells, and its frontier zoomed in (more than
:data:`MAX_ZOOMED` elements: one panel each). Each implementation κ has its own colour
(the same in every panel); frontier cells are filled markers joined by the Pareto
staircase, dominated cells hollow markers of their implementation's colour, so a
dominated cell is never mistaken for a disabled one. Frontier cells are labelled with
their operating point (``1410MHz``). Uncertainty bars (the frontier's confidence) sit
above the markers, and the caption gives the widest bar, so bars smaller than a marker
are not mistaken for missing ones. When the cells span more than :data:`LOG_SPAN` in
time or energy (one implementation much slower than the others), the overview's axes
are logarithmic and say so.

The file format follows the extension: ``.png``, ``.svg`` (text kept as text) or ``.pdf``.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eopt.report.chart_rules import LOG_SPAN, category_colors, log_axes

if TYPE_CHECKING:
    from eopt.calculus.frontier import Frontier, FrontierPoint

__all__ = ["LOG_SPAN", "MAX_ZOOMED", "plot_element_frontiers"]

#: Up to this many elements, each gets a second panel: its frontier zoomed in.
MAX_ZOOMED = 4

#: At most this many frontier cells of a panel get an operating-point label (evenly
#: spread, both ends always); more would overlap.
MAX_LABELS = 12


def _impl(point: FrontierPoint) -> str:
    sig = point.signature
    return sig.impl if sig is not None else "composite"


def _label(point: FrontierPoint) -> str:
    sig = point.signature
    return sig.op_point.label() if sig is not None else ""


def _labelled(count: int) -> set[int]:
    """Indices of the frontier cells that get a label (all, or an even spread)."""
    if count <= MAX_LABELS:
        return set(range(count))
    step = (count - 1) / (MAX_LABELS - 1)
    return {round(i * step) for i in range(MAX_LABELS)}


def plot_element_frontiers(
    frontiers: Mapping[str, Frontier],
    path: str | Path,
    *,
    title: str = "Time–energy frontiers",
) -> Path:
    """Draw each element's cells and frontier to ``path``.

    Up to :data:`MAX_ZOOMED` elements get a row each: all cells on the left, the frontier
    zoomed in (linear axes, labelled) on the right. More elements get one panel each.

    Args:
        frontiers: Element name → its :class:`eopt.Frontier` (from measured cells).
        path: Output file; ``.png``, ``.svg`` or ``.pdf``.
        title: Figure title.

    Returns:
        ``path``.

    Raises:
        ValueError: for another extension, or no frontier to draw.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    target = Path(path)
    if target.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ValueError(f"{target}: plot files must end in .png, .svg or .pdf")
    if not frontiers:
        raise ValueError("nothing to plot: no frontier given")

    colour = category_colors(_impl(p) for front in frontiers.values() for p in front.achievable)
    impls = list(colour)

    zoomed = len(frontiers) <= MAX_ZOOMED
    if zoomed:
        rows, cols = len(frontiers), 2
        size = (11.0, 4.4 * rows + 0.6)
    else:
        cols = 3
        rows = math.ceil(len(frontiers) / cols)
        size = (5.0 * cols, 3.9 * rows + 0.6)
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # SVG text stays searchable
        fig, axes = plt.subplots(rows, cols, figsize=size, dpi=110, squeeze=False)
        try:
            widest, any_log = 0.0, False
            for k, (name, front) in enumerate(frontiers.items()):
                ax = axes[k, 0] if zoomed else axes.flat[k]
                log, bar = _draw(ax, front, impls, colour, labels=not zoomed, log_ok=True)
                widest, any_log = max(widest, bar), any_log or log
                ax.set_title(
                    f"{name}: all {len(front.achievable)} cells, {len(front.points)} on "
                    "the frontier",
                    fontsize=9,
                )
                if zoomed:
                    zoom = axes[k, 1]
                    _draw(zoom, front, impls, colour, labels=True, log_ok=False)
                    _zoom_to_frontier(zoom, front)
                    zoom.set_title(f"{name}: the frontier, zoomed in", fontsize=9)
            if not zoomed:
                for ax in list(axes.flat)[len(frontiers) :]:
                    ax.set_visible(False)
            handles = [
                Line2D([], [], ls="", marker="o", mfc=colour[i], mec=colour[i], label=i)
                for i in impls
            ]
            handles.append(
                Line2D(
                    [], [], ls="", marker="o", mfc="white", mec="#555555", mew=1.2,
                    label="hollow: dominated in (T, E)",
                )
            )  # fmt: skip
            handles.append(Line2D([], [], color="#222222", lw=1.0, label="Pareto frontier"))
            axes.flat[0].legend(handles=handles, frameon=False, fontsize=7, loc="best")
            confidence = next(iter(frontiers.values())).confidence
            caption = (
                f"Bars: {confidence:.0%} intervals (the widest is ±{widest:.2%} of its energy; "
                "bars smaller than a marker are hidden by it). Labels: operating point."
                if widest > 0
                else "No bars: the cells carry no variance. Labels: operating point."
            )
            if any_log:
                caption += f" Log axes where the cells span more than {LOG_SPAN:g}×."
            fig.suptitle(title, fontsize=11)
            fig.text(
                0.5, 0.005, textwrap.fill(caption, 150), ha="center", va="bottom", fontsize=7,
                color="#444444",
            )  # fmt: skip
            fig.tight_layout(rect=(0, 0.05, 1, 1))
            fig.savefig(target)
        finally:
            plt.close(fig)
    return target


def _draw(
    ax: Any,
    front: Frontier,
    impls: Sequence[str],
    colour: Mapping[str, str],
    *,
    labels: bool,
    log_ok: bool,
) -> tuple[bool, float]:
    """One panel: cells by implementation, the staircase, labels; returns (log?, widest bar)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from eopt.calculus.uncertainty import c_alpha

    c = c_alpha(front.confidence)
    on = {id(p) for p in front.points}
    times = [p.time for p in front.achievable]
    energies = [p.energy for p in front.achievable]
    log = log_ok and log_axes(times, energies)
    widest = 0.0
    for impl in impls:
        mine = [p for p in front.achievable if _impl(p) == impl]
        for filled in (False, True):
            pts = [p for p in mine if (id(p) in on) == filled]
            if not pts:
                continue
            ax.errorbar(
                [p.time for p in pts],
                [p.energy for p in pts],
                xerr=[c * p.std_time for p in pts],
                yerr=[c * p.std_energy for p in pts],
                fmt="o",
                ms=6 if filled else 5,
                mfc=colour[impl] if filled else "white",
                mec=colour[impl],
                mew=1.2,
                ecolor="#111111" if filled else colour[impl],
                elinewidth=1.0 if filled else 0.6,
                capsize=3 if filled else 2,
                alpha=1.0 if filled else 0.8,
                zorder=3 if filled else 2,
                barsabove=True,
            )
        widest = max([widest, *(c * p.std_energy / p.energy for p in mine if p.energy > 0)])
    ordered = list(front.points)
    ax.step([p.time for p in ordered], [p.energy for p in ordered], where="post",
            color="#222222", lw=1.0, zorder=1)  # fmt: skip
    if labels:
        show = _labelled(len(ordered))
        for i, p in enumerate(ordered):
            if i in show and _label(p):
                # Alternate sides so that neighbours along the staircase do not overlap.
                above = i % 2 == 0
                ax.annotate(
                    _label(p),
                    (p.time, p.energy),
                    xytext=(6, 5) if above else (-6, -11),
                    textcoords="offset points",
                    ha="left" if above else "right",
                    fontsize=7,
                    color=colour[_impl(p)],
                )
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain = FuncFormatter(lambda v, _pos: f"{v:g}")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(plain)
            axis.set_minor_formatter(NullFormatter())
    scale = ", log scale" if log else ""
    ax.set_xlabel(f"time per invocation (s{scale})")
    ax.set_ylabel(f"energy per invocation (J{scale})")
    ax.grid(alpha=0.3, which="both" if log else "major")
    return log, widest


def _zoom_to_frontier(ax: Any, front: Frontier) -> None:
    """Limit ``ax`` to the frontier's cells (with their bars) and a margin."""
    from eopt.calculus.uncertainty import c_alpha

    c = c_alpha(front.confidence)
    pts = front.points
    t_lo = min(p.time - c * p.std_time for p in pts)
    t_hi = max(p.time + c * p.std_time for p in pts)
    e_lo = min(p.energy - c * p.std_energy for p in pts)
    e_hi = max(p.energy + c * p.std_energy for p in pts)
    # A single point (or a flat frontier) still gets a visible window around it.
    t_pad = max((t_hi - t_lo) * 0.12, abs(t_hi) * 0.02, 1e-12)
    e_pad = max((e_hi - e_lo) * 0.12, abs(e_hi) * 0.02, 1e-12)
    ax.set_xlim(t_lo - t_pad, t_hi + t_pad)
    ax.set_ylim(e_lo - e_pad, e_hi + e_pad)
