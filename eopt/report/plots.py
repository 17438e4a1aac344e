"""Matplotlib plots of frontiers (PNG, SVG, PDF — by the file's extension).

``plot_frontier`` is the one frontier plot of the project: ``eopt frontier --plot`` and
scripts call it with an :class:`eopt.Frontier` (its dominated cells are drawn grey) or
with rows of a frontier table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from eopt.report.inputs import FrontierRow

if TYPE_CHECKING:
    from eopt.frontier import Frontier

__all__ = ["plot_frontier"]

_C95 = 1.959963984540054


def plot_frontier(
    frontier: Frontier | Sequence[FrontierRow],
    path: str | Path,
    *,
    title: str = "time–energy frontier",
    chosen: tuple[float, float] | None = None,
    baseline: tuple[float, float] | None = None,
    time_unit: str = "s",
    show_dominated: bool = True,
) -> Path:
    """Plot a frontier with 95 % energy bars and write it to ``path``.

    Args:
        frontier: An :class:`eopt.Frontier` or frontier-table rows.
        path: Output file; the format follows its extension (``.png``, ``.svg``, ``.pdf``).
        title: Plot title.
        chosen: (time s, energy J) of a chosen point to mark.
        baseline: (time s, energy J) of a reference (e.g. all-fastest) to mark.
        time_unit: ``s`` or ``ms`` on the x axis.
        show_dominated: Draw the dominated cells of a Frontier in grey.

    Raises:
        ValueError: an unknown file extension or time unit.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    target = Path(path)
    if target.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ValueError(f"{target}: plot files must end in .png, .svg or .pdf")
    if time_unit not in ("s", "ms"):
        raise ValueError(f"time_unit must be 's' or 'ms', got {time_unit!r}")
    k = 1e3 if time_unit == "ms" else 1.0
    front, dominated = _series(frontier)
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    try:
        if show_dominated and dominated:
            t, e, err = zip(*dominated, strict=True)
            ax.errorbar(
                [x * k for x in t],
                e,
                yerr=_yerr(e, err),
                fmt="o",
                ms=3,
                color="#bbbbbb",
                ecolor="#dddddd",
                label="dominated",
            )
        if front:
            t, e, err = zip(*sorted(front), strict=True)
            ax.errorbar(
                [x * k for x in t],
                e,
                yerr=_yerr(e, err),
                fmt="o",
                ms=4,
                color="#3b528b",
                ecolor="#8fa3c7",
                capsize=2,
                label="frontier",
            )
            ax.step([x * k for x in t], e, where="post", color="#3b528b", lw=1)
        if baseline is not None:
            ax.plot(baseline[0] * k, baseline[1], "s", color="#222222", ms=7, label="baseline")
        if chosen is not None:
            ax.plot(chosen[0] * k, chosen[1], "o", color="#e4572e", ms=8, label="chosen")
        ax.set_xlabel(f"time ({time_unit})")
        ax.set_ylabel("energy (J)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(frameon=False, fontsize=8)
        fig.tight_layout()
        fig.savefig(target)
    finally:
        plt.close(fig)
    return target


Series = list[tuple[float, float, tuple[float, float] | None]]


def _series(frontier: Frontier | Sequence[FrontierRow]) -> tuple[Series, Series]:
    """(frontier points, dominated points) as (time, energy, (below, above) | None)."""
    if hasattr(frontier, "points") and hasattr(frontier, "achievable"):
        on = {id(p) for p in frontier.points}

        def one(p: object) -> tuple[float, float, tuple[float, float] | None]:
            std = math.sqrt(p.var_energy)  # type: ignore[attr-defined]
            bar = (_C95 * std, _C95 * std) if std > 0 else None
            return (p.time, p.energy, bar)  # type: ignore[attr-defined]

        front = [one(p) for p in frontier.points]
        dominated = [one(p) for p in frontier.achievable if id(p) not in on]
        return front, dominated
    rows: Sequence[FrontierRow] = frontier  # type: ignore[assignment]
    out: Series = []
    for r in rows:
        bar = None
        if r.low_j is not None and r.high_j is not None:
            bar = (r.energy_j - r.low_j, r.high_j - r.energy_j)
        out.append((r.time_s, r.energy_j, bar))
    return out, []


def _yerr(
    energies: Sequence[float], bars: Sequence[tuple[float, float] | None]
) -> list[list[float]] | None:
    if all(b is None for b in bars):
        return None
    return [[b[0] if b else 0.0 for b in bars], [b[1] if b else 0.0 for b in bars]]
