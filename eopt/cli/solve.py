"""``eopt solve``: minimum-energy κ and ω per element under a deadline, or the plan frontier."""

from __future__ import annotations

import csv
import math
from collections import Counter
from pathlib import Path

import click
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from eopt.calculus.library import Library
from eopt.cli._common import UserError, console, err_console, parse_percent, write_json
from eopt.devices.operating_point import OperatingPoint
from eopt.plan.planfile import Plan, read_plan
from eopt.plan.problem import load_plan_library
from eopt.plan.schedule import Schedule, write_schedule
from eopt.plan.solve import FrontierPlan, plan_frontier, solve_plan

__all__ = ["command", "summarize_choices"]

METHODS = ("auto", "milp", "relax")


def summarize_choices(schedule: Schedule) -> list[tuple[str, str]]:
    """Per element type, how many elements run at each (κ, ω), fastest clock first:
    ``[("stage0.forward", "1410MHz×3, 1200MHz×9"), …]``."""
    counts: dict[str, Counter[tuple[str, OperatingPoint]]] = {}
    for e in schedule.elements:
        counts.setdefault(e.type, Counter())[(e.impl, e.op_point)] += 1

    def order(item: tuple[tuple[str, OperatingPoint], int]) -> tuple[str, float, float]:
        (impl, op), _ = item
        return (impl, -(op.sm_clock_mhz or 0.0), -(op.power_limit_w or 0.0))

    def label(impl: str, op: OperatingPoint) -> str:
        return op.label() if impl == "default" else f"{impl}@{op.label()}"

    return [
        (t, ", ".join(f"{label(*key)}×{n}" for key, n in sorted(c.items(), key=order)))
        for t, c in counts.items()
    ]


def _print_schedule(schedule: Schedule) -> None:
    table = Table(title="Choices per element type", title_justify="left")
    table.add_column("element type")
    table.add_column("κ/ω × count")
    for type_name, text in summarize_choices(schedule):
        table.add_row(type_name, text)
    console.print(table)
    low, high = schedule.interval
    deadline = (
        "none (energy-minimizing makespan)"
        if schedule.deadline is None
        else (f"{schedule.deadline:.6g} s")
    )
    console.print(f"deadline     {deadline}", highlight=False)
    console.print(f"makespan     {schedule.makespan:.6g} s", highlight=False)
    console.print(
        f"energy       {schedule.energy:.6g} J  (± {schedule.energy_std:.3g} J; "
        f"{schedule.confidence:.0%} interval {low:.6g} … {high:.6g} J)",
        highlight=False,
    )
    if schedule.lower_bound is not None:
        gap = f"{schedule.gap:.3%}" if schedule.gap is not None else "n/a"
        console.print(f"lower bound  {schedule.lower_bound:.6g} J  (gap {gap})", highlight=False)
    solver = schedule.solver
    console.print(
        f"solver       {escape(str(solver.get('name')))}, status {solver.get('status')}, "
        f"{float(solver.get('wall_time_s') or 0.0):.2f} s",
        highlight=False,
    )
    if solver.get("message"):
        console.print(f"             {escape(str(solver['message']))}", highlight=False)
    base = schedule.baseline
    if base:
        saved = base["energy"] - schedule.energy
        added = schedule.makespan - base["makespan"]
        console.print(
            f"vs fastest   {base['energy']:.6g} J at {base['makespan']:.6g} s: saves "
            f"{saved:.6g} J ({saved / base['energy']:.2%}), adds {added:.4g} s "
            f"({added / base['makespan']:.2%})",
            highlight=False,
        )


def _write_frontier_csv(path: Path, points: list[FrontierPlan]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(
            handle,
            fieldnames=["makespan_s", "energy_j", "energy_std_j", "lower_bound_j", "gap", "status"],
        )
        writer.writeheader()
        for p in points:
            writer.writerow(p.to_row())


def _print_frontier(points: list[FrontierPlan], rows: int = 12) -> None:
    table = Table(title=f"Plan frontier ({len(points)} points)", title_justify="left")
    for col in ("makespan s", "energy J", "lower bound J", "gap", "status"):
        table.add_column(col, justify="right")
    step = max(1, math.ceil(len(points) / rows))
    shown = points[::step]
    if points and shown[-1] is not points[-1]:
        shown.append(points[-1])
    for p in shown:
        table.add_row(
            f"{p.makespan:.6g}",
            f"{p.energy:.6g}",
            "" if p.lower_bound is None else f"{p.lower_bound:.6g}",
            "" if p.gap is None else f"{p.gap:.3%}",
            p.status,
        )
    console.print(table)


def _progress(*columns: ProgressColumn) -> Progress:
    """A transient progress display on stderr: description, bar, then `columns`."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        *columns,
        console=err_console,
        transient=True,
    )


def _run_frontier(
    plan: Plan, library: Library | None, points: int, method: str, time_limit: float
) -> list[FrontierPlan]:
    with _progress(
        TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), TimeRemainingColumn()
    ) as progress:
        # The bar pulses until the solver reports progress (when it supports a callback).
        task = progress.add_task("plan frontier", total=None)

        def report(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        result, _ = plan_frontier(
            plan,
            num_points=points,
            method=method,
            library=library,
            progress=report,
            time_limit_per_point=time_limit,
        )
    return result


@click.command("solve")
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--deadline", type=float, help="Makespan bound in seconds.")
@click.option("--slowdown", help="Bound relative to the fastest makespan, e.g. 5% (or 0.05).")
@click.option(
    "--method",
    type=click.Choice(METHODS),
    default="auto",
    show_default=True,
    help=(
        "milp: exact (time-limited); relax: LP relaxation, rounding, a repeated"
        " steady state for pipelines, and local search (stops when it stalls); auto:"
        " relax, then MILP stages when the problem is small."
    ),
)
@click.option(
    "--time-limit",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Solver time limit in s (per point with --frontier).",
)
@click.option(
    "--gap", type=click.FloatRange(min=0), default=1e-4, show_default=True, help="MILP gap."
)
@click.option(
    "--library",
    "libraries",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Signature library to use instead of the plan's own (repeatable).",
)
@click.option("--frontier", "want_frontier", is_flag=True, help="Compute the plan frontier.")
@click.option(
    "--points",
    type=click.IntRange(min=2),
    default=30,
    show_default=True,
    help="Frontier points (with --frontier).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="schedule.json (or frontier.csv with --frontier).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON on stdout.")
def command(
    plan_file: Path,
    deadline: float | None,
    slowdown: str | None,
    method: str,
    time_limit: float,
    gap: float,
    libraries: tuple[Path, ...],
    want_frontier: bool,
    points: int,
    output: Path | None,
    as_json: bool,
) -> None:
    """Choose κ and ω per element: minimum energy with the makespan within a deadline.

    Energy counts every element's E = s·T + d and every device's idle draw up to the
    makespan. Without --deadline/--slowdown the plan's own deadline is used, else the
    energy-minimizing makespan.

    \b
    Examples:
      eopt solve plan.yaml --slowdown 5% -o schedule.json
      eopt solve plan.yaml --deadline 3.0 --method milp --time-limit 120
      eopt solve plan.yaml --frontier --points 40 -o frontier.csv
    """
    if deadline is not None and slowdown is not None:
        raise UserError("give either --deadline or --slowdown, not both")
    if deadline is not None and deadline <= 0:
        raise click.BadParameter("must be > 0 seconds", param_hint="--deadline")
    fraction = parse_percent(slowdown) if slowdown is not None else None
    plan = read_plan(plan_file)
    library = load_plan_library(plan, libraries, own=False) if libraries else None
    if want_frontier:
        result = _run_frontier(
            plan, library, points, method if method != "auto" else "relax", time_limit
        )
        if output is not None:
            _write_frontier_csv(output, result)
        _print_frontier(result)
        if output is not None:
            console.print(f"Wrote {output}", highlight=False)
        return
    # relax and auto search until the time limit or until they stall: show that work
    # is going on (on stderr, so that --json output stays clean).
    with _progress(TimeElapsedColumn()) as progress:
        progress.add_task(
            f"solving {len(plan.elements)} elements ({method}, at most ~{time_limit:g} s)",
            total=None,
        )
        schedule = solve_plan(
            plan,
            deadline=deadline,
            slowdown=fraction,
            method=method,
            time_limit=time_limit,
            gap=gap,
            library=library,
        )
    if as_json:
        write_json("-", schedule.to_dict())
    else:
        _print_schedule(schedule)
    if output is not None:
        write_schedule(output, schedule)
        if not as_json:
            console.print(f"Wrote {output}", highlight=False)
