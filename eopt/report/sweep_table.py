"""What ``eopt sweep`` shows: its cells and their frontier as tables, and as JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from eopt.model.signature import Signature
from eopt.runs.sweep import Grid, SweepResult

__all__ = ["print_cells", "print_frontier", "result_json"]


def _pm(sig: Signature, key: str, scale: float = 1.0) -> str:
    """``±`` half the width of the bootstrap CI stored in ``meta[key]``."""
    ci = sig.meta.get(key)
    if not ci or len(ci) != 2:
        return ""
    return f" ±{(ci[1] - ci[0]) * scale / 2:.2g}"


def print_cells(signatures: tuple[Signature, ...], title: str, console: Console) -> None:
    """The measured cells as a table (per invocation, ± half the 95 % bootstrap CI).

    Times in s, energies in J, powers in W, each to four significant digits.

    Args:
        signatures: The cells.
        title: The table's title.
        console: Where to print.
    """
    table = Table(title=title, title_justify="left")
    for col in ("impl κ", "ω", "time s", "energy J", "static W", "dynamic J", "n", "flags"):
        table.add_column(col, justify="left" if col in ("impl κ", "ω", "flags") else "right")
    for sig in signatures:
        flags = ",".join(sorted({f["code"] for f in sig.meta.get("flags", [])}))
        table.add_row(
            escape(sig.impl),
            escape(sig.op_point.label()),
            f"{sig.time:.4g}{_pm(sig, 'ci_time_s')}",
            f"{sig.energy:.4g}{_pm(sig, 'ci_energy_j')}",
            f"{sig.static_power:.4g}",
            f"{sig.dynamic_energy:.4g}",
            str(sig.meta.get("n", "")),
            f"[yellow]{flags}[/]" if flags else "",
        )
    console.print(table)


def result_json(result: SweepResult, grid: Grid, device: Any, dominance: str) -> dict[str, Any]:
    """What ``eopt sweep --json`` prints: the cells, the frontier and what was written.

    Units are in the keys (``time_s``, ``energy_j``, ``static_power_w``); ``*_ci`` are the
    95 % bootstrap intervals of the per-invocation means.
    """
    from eopt.calculus.frontier import Frontier

    cells = []
    for sig in result.signatures:
        op = sig.op_point
        cells.append(
            {
                "name": sig.name,
                "impl": sig.impl,
                "op_point": op.label(),
                "sm_clock_mhz": op.sm_clock_mhz,
                "mem_clock_mhz": op.mem_clock_mhz,
                "power_limit_w": op.power_limit_w,
                "time_s": sig.time,
                "time_ci_s": sig.meta.get("ci_time_s"),
                "energy_j": sig.energy,
                "energy_ci_j": sig.meta.get("ci_energy_j"),
                "static_power_w": sig.static_power,
                "dynamic_energy_j": sig.dynamic_energy,
                "n": sig.meta.get("n"),
                "flags": sorted({f["code"] for f in sig.meta.get("flags", [])}),
            }
        )
    front = Frontier.from_signatures(result.signatures, dominance=dominance)
    return {
        "library": str(result.path),
        "device": {
            "name": device.name,
            "model": device.model,
            **({"uuid": device.uuid} if isinstance(getattr(device, "uuid", None), str) else {}),
        },
        "cells_in_grid": len(grid),
        "cells_swept": len(result.signatures),
        "measured": len(result.measured),
        "resumed": result.skipped,
        "failed": [cell.to_dict() for cell in result.failed],
        "notes": [*grid.notes, *result.repairs],
        "cells": cells,
        "frontier": front.to_rows(),
        "dominance": dominance,
    }


def print_frontier(signatures: tuple[Signature, ...], dominance: str, console: Console) -> None:
    """The Pareto frontier (time, energy) of the cells, with the chosen κ / ω.

    Args:
        signatures: The cells.
        dominance: The frontier's dominance rule under uncertainty.
        console: Where to print.
    """
    from eopt.calculus.frontier import Frontier

    front = Frontier.from_signatures(signatures, dominance=dominance)
    table = Table(
        title=f"Pareto frontier ({dominance} dominance, {front.confidence:.0%} intervals)",
        title_justify="left",
    )
    for col in ("impl κ", "ω", "time s", "energy J", "energy interval J", "dynamic J"):
        table.add_column(col, justify="left" if col in ("impl κ", "ω") else "right")
    for row in front.to_rows():
        table.add_row(
            escape(row["impl"]),
            escape(row["op_point"]),
            f"{row['time_s']:.4g}",
            f"{row['energy_j']:.4g}",
            f"[{row['energy_low_j']:.4g}, {row['energy_high_j']:.4g}]",
            f"{row['dynamic_energy_j']:.4g}",
        )
    console.print(table)
    fast, cheap = front.fastest, front.min_energy
    if fast is not cheap and fast.time > 0:
        console.print(
            f"min-energy point saves {1 - cheap.energy / fast.energy:.1%} energy for "
            f"{cheap.time / fast.time - 1:+.1%} time against the fastest."
        )
