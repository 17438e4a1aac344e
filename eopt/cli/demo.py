"""``eopt demo``: the whole pipeline on the simulated GPU."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from eopt.cli._common import Fraction, console, err_console, write_json
from eopt.cli.options import json_option, quiet_option, seed_option
from eopt.model.units import format_energy, format_percent, format_time

__all__ = ["command"]


@click.command("demo")
@click.option(
    "--out",
    "out_dir",
    default="eopt-demo",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the files.",
)
@click.option(
    "--stages",
    default=4,
    show_default=True,
    type=click.IntRange(2, 16),
    help="Pipeline stages (one simulated GPU each).",
)
@click.option(
    "--microbatches",
    default=8,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Microbatches per training iteration.",
)
@click.option(
    "--slowdown",
    type=Fraction(),
    default="5%",
    show_default=True,
    help="Deadline above the fastest iteration time (a bare 5 is refused: write 5%).",
)
@seed_option("Seed of the simulator's noise.")
@json_option("Print the headline numbers as JSON.")
@quiet_option()
def command(
    out_dir: Path, stages: int, microbatches: int, slowdown: float, seed: int, as_json: bool
) -> None:
    """Run the whole pipeline on the simulated GPU in under a minute.

    Sweeps simulated transformer-stage kernels and an all-reduce over SM clocks, builds a
    1F1B pipeline plan, solves it for a deadline 5 % above the fastest iteration, writes
    the schedule, an HTML report and a Perfetto trace, and shows `eopt apply --dry-run`
    and the runtime controller on simulated GPUs.

    The demo owns the files it writes in --out (sweep.jsonl, signatures.jsonl,
    plan.yaml, schedule.json, frontier.csv, report.html, trace.json): every run replaces
    them, so `eopt demo` can be run again as it is; other files there are left alone.

    \b
    Examples:
      eopt demo
      eopt demo --out /tmp/demo --stages 4 --microbatches 8 --slowdown 10%
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from eopt.demo import run_demo

    err_console.print(
        "eopt demo: everything runs on the simulated GPU (eopt sim).", highlight=False
    )
    labels = {"sweep": "Measuring (κ, ω) cells", "solve": "Solving"}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=console.quiet or as_json,
    ) as bar:
        tasks: dict[str, int] = {}

        def progress(step: str, done: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = bar.add_task(labels.get(step, step), total=total)
            bar.update(tasks[step], completed=done, total=total)

        started = time.time()
        try:
            result = run_demo(
                out_dir,
                stages=stages,
                microbatches=microbatches,
                slowdown=slowdown,
                seed=seed,
                progress=progress,
            )
        except KeyboardInterrupt:
            plan = Path(out_dir) / "schedule.json"
            # Only a plan this run wrote (the solve's best so far), not an old run's.
            fresh = plan.exists() and plan.stat().st_mtime >= started
            kept = f"; the best plan found is in {plan}" if fresh else ""
            err_console.print(f"[yellow]Interrupted[/] (Ctrl-C){escape(kept)}.", highlight=False)
            sys.exit(130)
    if as_json:
        write_json("-", _summary(result))
        return
    gains = result.savings
    if gains is not None:
        console.print(
            f"[bold green]{escape(gains.headline())}[/] against every element at its "
            f"fastest setting, optimality gap "
            f"{'n/a' if result.gap is None else format_percent(result.gap, 2)}.",
            highlight=False,
        )
    console.print(
        f"[bold]Characterized[/] {result.cells} signatures → "
        f"{escape(str(result.files['library']))}",
        highlight=False,
    )
    console.print(
        f"[bold]Plan[/] 1F1B, {stages} stages × {microbatches} microbatches + "
        f"gradient all-reduce → {escape(str(result.files['plan']))}",
        highlight=False,
    )
    console.print(
        f"[bold]Solved[/] deadline {format_time(result.deadline_s)} "
        f"(fastest {format_time(result.fastest_makespan_s)} "
        f"{format_percent(slowdown, sign=True)}) with {result.solver.get('name', '?')} "
        f"({result.solver.get('status', '?')}) → {escape(str(result.files['schedule']))}",
        highlight=False,
    )
    gap = "n/a" if result.gap is None else format_percent(result.gap, 2)
    console.print(
        f"  energy {format_energy(result.energy_j)} vs all-fastest "
        f"{format_energy(result.baseline_energy_j)}: saves {format_energy(result.saved_j)} "
        f"({format_percent(result.saved_fraction)}), time added "
        f"{format_time(result.time_added_s)} "
        f"({format_percent(result.time_added_fraction, sign=True)}), optimality gap {gap}",
        highlight=False,
    )
    console.print(f"[bold]Report[/] {escape(str(result.files['report']))}", highlight=False)
    console.print(
        f"[bold]Perfetto trace[/] {escape(str(result.files['trace']))} (open at ui.perfetto.dev)",
        highlight=False,
    )
    console.print(
        f"[bold]Plan frontier[/] {escape(str(result.files['frontier']))}", highlight=False
    )
    console.print("[bold]eopt apply --dry-run[/] (simulated GPUs):", highlight=False)
    for line in result.dry_run:
        console.print("  " + line, highlight=False, markup=False)
    console.print("  " + result.apply_summary, highlight=False, markup=False)
    sw = result.switches
    if sw.get("count"):
        console.print(
            f"[bold]Runtime controller[/] one iteration on simulated GPUs: {sw['count']} "
            f"switches, p50 {format_time(sw['p50_s'], 3)}, p99 {format_time(sw['p99_s'], 3)}; "
            "GPUs restored.",
            highlight=False,
        )
    console.print(f"Done in {result.wall_s:.1f} s.", highlight=False)


def _summary(result: Any) -> dict[str, Any]:
    """What ``eopt demo --json`` prints: the files and the headline numbers."""
    gains = result.savings
    return {
        "files": {name: str(path) for name, path in result.files.items()},
        "cells": result.cells,
        "fastest_makespan_s": result.fastest_makespan_s,
        "deadline_s": result.deadline_s,
        "makespan_s": result.makespan_s,
        "energy_j": result.energy_j,
        "baseline_energy_j": result.baseline_energy_j,
        "gap": result.gap,
        "savings": None if gains is None else gains.to_dict(),
        "solver": result.solver,
        "switches": result.switches,
        "wall_s": result.wall_s,
    }
