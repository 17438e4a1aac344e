"""``eopt demo``: the whole pipeline on the simulated GPU."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from eopt.cli._common import console, err_console

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
    "--slowdown", default="5%", show_default=True, help="Deadline above the fastest iteration time."
)
@click.option("--seed", default=0, show_default=True, help="Seed of the simulator's noise.")
def command(out_dir: Path, stages: int, microbatches: int, slowdown: str, seed: int) -> None:
    """Run the whole pipeline on the simulated GPU in under a minute.

    Sweeps simulated transformer-stage kernels and an all-reduce over SM clocks, builds a
    1F1B pipeline plan, solves it for a deadline 5 % above the fastest iteration, writes
    the schedule, an HTML report and a Perfetto trace, and shows `eopt apply --dry-run`
    and the runtime controller on simulated GPUs.

    \b
    Examples:
      eopt demo
      eopt demo --out /tmp/demo --stages 4 --microbatches 8 --slowdown 10%
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from eopt.cli._common import parse_percent
    from eopt.demo import run_demo

    fraction = parse_percent(slowdown)
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
    ) as bar:
        tasks: dict[str, int] = {}

        def progress(step: str, done: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = bar.add_task(labels.get(step, step), total=total)
            bar.update(tasks[step], completed=done, total=total)

        result = run_demo(
            out_dir,
            stages=stages,
            microbatches=microbatches,
            slowdown=fraction,
            seed=seed,
            progress=progress,
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
        f"[bold]Solved[/] deadline {result.deadline_s:.4g} s "
        f"(fastest {result.fastest_makespan_s:.4g} s "
        f"+ {fraction:.0%}) with {result.solver.get('name', '?')} "
        f"({result.solver.get('status', '?')}) → {escape(str(result.files['schedule']))}",
        highlight=False,
    )
    gap = "n/a" if result.gap is None else f"{result.gap:.3%}"
    console.print(
        f"  energy {result.energy_j:.5g} J vs all-fastest {result.baseline_energy_j:.5g} J: "
        f"[bold green]saves {result.saved_j:.4g} J ({result.saved_fraction:.1%})[/], "
        f"time added {result.time_added_s * 1e3:.4g} ms ({result.time_added_fraction:+.1%}), "
        f"optimality gap {gap}",
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
    sw = result.switches
    if sw.get("count"):
        console.print(
            f"[bold]Runtime controller[/] one iteration on simulated GPUs: {sw['count']} "
            f"switches, p50 {sw['p50_s'] * 1e3:.3g} ms, p99 {sw['p99_s'] * 1e3:.3g} ms; "
            "GPUs restored.",
            highlight=False,
        )
    console.print(f"Done in {result.wall_s:.1f} s.", highlight=False)
