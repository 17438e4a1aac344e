"""Matplotlib plots of frontiers (PNG, SVG, PDF — by the file's extension).

``plot_frontier`` draws an :class:`eopt.Frontier` (dominated cells grey), several of
them as panels of one figure (a mapping name → Frontier), or the rows of a frontier table
(e.g. the plan frontier of ``eopt solve --frontier``), with uncertainty bars at the
frontier's confidence and the frontier as a staircase. Axes turn logarithmic where the
points span decades (:func:`eopt.report.chart_rules.log_axes`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eopt.report.chart_rules import log_axes
from eopt.report.inputs import FrontierRow

if TYPE_CHECKING:
    from eopt.calculus.frontier import Frontier

__all__ = ["plot_frontier"]

# (time, energy, time bar half-width, (energy bar below, above) | None)
_Point = tuple[float, float, float, tuple[float, float] | None]


def plot_frontier(
    frontier: Frontier | Sequence[FrontierRow] | Mapping[str, Frontier],
    path: str | Path,
    *,
    title: str = "time–energy frontier",
    chosen: tuple[float, float] | None = None,
    baseline: tuple[float, float] | None = None,
    time_unit: str = "s",
    show_dominated: bool = True,
) -> Path:
    """Plot frontier(s) with uncertainty bars and write the figure to ``path``.

    Args:
        frontier: An :class:`eopt.Frontier`, a mapping name → Frontier (one panel
            each), or frontier-table rows.
        path: Output file; the format follows its extension (``.png``, ``.svg``, ``.pdf``).
        title: Figure title.
        chosen: (time s, energy J) of a chosen point to mark (single panel).
        baseline: (time s, energy J) of a reference, e.g. all-fastest (single panel).
        time_unit: ``s`` or ``ms`` on the x axis.
        show_dominated: Draw the dominated cells of a Frontier in grey.

    Raises:
        ValueError: an unknown file extension or time unit, or nothing to plot.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    target = Path(path)
    if target.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ValueError(f"{target}: plot files must end in .png, .svg or .pdf")
    if time_unit not in ("s", "ms"):
        raise ValueError(f"time_unit must be 's' or 'ms', got {time_unit!r}")
    panels: dict[str, Any] = dict(frontier) if isinstance(frontier, Mapping) else {"": frontier}
    if not panels:
        raise ValueError("nothing to plot: no frontier given")
    k = 1e3 if time_unit == "ms" else 1.0
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    size = (6.4, 4.2) if len(panels) == 1 else (4.2 * cols, 3.4 * rows)
    fig, axes = plt.subplots(rows, cols, figsize=size, dpi=120, squeeze=False)
    try:
        for ax, (name, item) in zip(axes.flat, panels.items(), strict=False):
            front, dominated, confidence = _series(item)
            if show_dominated and dominated:
                _errorbar(ax, dominated, k, color="#bbbbbb", label="dominated")
            if front:
                ordered = sorted(front)
                _errorbar(ax, ordered, k, color="#3b528b", label="frontier")
                ax.step(
                    [p[0] * k for p in ordered],
                    [p[1] for p in ordered],
                    where="post",
                    color="#3b528b",
                    lw=1,
                )
            if len(panels) == 1:
                if baseline is not None:
                    ax.plot(
                        baseline[0] * k, baseline[1], "s", color="#222222", ms=7, label="baseline"
                    )
                if chosen is not None:
                    ax.plot(chosen[0] * k, chosen[1], "o", color="#e4572e", ms=8, label="chosen")
            ax.set_title(name or title, fontsize=9 if name else 11)
            points = front + dominated
            log = log_axes([p[0] for p in points], [p[1] for p in points])
            if log:  # the rule of every eopt time–energy chart (eopt.report.chart_rules)
                ax.set_xscale("log")
                ax.set_yscale("log")
            scale = ", log scale" if log else ""
            ax.set_xlabel(f"time ({time_unit}{scale})")
            ax.set_ylabel(f"energy (J{scale})")
            ax.grid(alpha=0.3, which="both" if log else "major")
            if confidence is not None and not name:
                ax.text(
                    0.99,
                    0.01,
                    f"bars: {confidence:.0%} intervals",
                    ha="right",
                    va="bottom",
                    transform=ax.transAxes,
                    fontsize=7,
                    color="#555555",
                )
        for ax in list(axes.flat)[len(panels) :]:
            ax.set_visible(False)
        axes.flat[0].legend(frameon=False, fontsize=8)
        if len(panels) > 1:
            fig.suptitle(title, fontsize=11)
        fig.tight_layout()
        fig.savefig(target)
    finally:
        plt.close(fig)
    return target


def _errorbar(ax: Any, points: Sequence[_Point], k: float, **style: Any) -> None:
    bars = [p[3] for p in points]
    yerr = None
    if any(b is not None for b in bars):
        yerr = [[b[0] if b else 0.0 for b in bars], [b[1] if b else 0.0 for b in bars]]
    xerr = [p[2] * k for p in points] if any(p[2] > 0 for p in points) else None
    ax.errorbar(
        [p[0] * k for p in points],
        [p[1] for p in points],
        xerr=xerr,
        yerr=yerr,
        fmt="o",
        ms=3.5,
        capsize=2,
        lw=0.8,
        **style,
    )


def _series(item: Any) -> tuple[list[_Point], list[_Point], float | None]:
    """(frontier points, dominated points, confidence) of a Frontier or table rows."""
    if hasattr(item, "points") and hasattr(item, "achievable"):
        from eopt.calculus.uncertainty import c_alpha

        confidence = float(item.confidence)
        c = c_alpha(confidence)
        on = {id(p) for p in item.points}

        def one(p: Any) -> _Point:
            e_half = c * math.sqrt(p.var_energy)
            return (
                p.time,
                p.energy,
                c * math.sqrt(p.var_time),
                (e_half, e_half) if e_half else None,
            )

        front = [one(p) for p in item.points]
        dominated = [one(p) for p in item.achievable if id(p) not in on]
        return front, dominated, confidence
    rows: Sequence[FrontierRow] = item
    out: list[_Point] = []
    for r in rows:
        bar = None
        if r.low_j is not None and r.high_j is not None:
            bar = (r.energy_j - r.low_j, r.high_j - r.energy_j)
        out.append((r.time_s, r.energy_j, 0.0, bar))
    return out, [], None
