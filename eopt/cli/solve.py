"""``eopt solve``: minimum-energy κ and ω per element under a deadline, or the plan frontier."""

from __future__ import annotations

import math
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

from eopt.cli._common import (
    Fraction,
    Probability,
    Quantity,
    UserError,
    check_output,
    console,
    err_console,
    write_json,
)
from eopt.cli.options import force_option, json_option, quiet_option
from eopt.model.library import Library
from eopt.model.operating_point import OperatingPoint
from eopt.model.planfile import Plan, read_plan
from eopt.model.schedule import Schedule, write_schedule
from eopt.model.units import (
    format_energy,
    format_percent,
    format_sigma,
    format_time,
)
from eopt.plan.budget import TimeBudget
from eopt.plan.problem import load_plan_library
from eopt.plan.solve import FrontierPlan, plan_frontier, savings, solve_plan
from solvers.solve import (
    DEFAULT_GAP,
    DEFAULT_METHOD,
    METHODS,
    method_named,
)
from solvers.stopping import STALL_GAIN, STOP_GAP

if TYPE_CHECKING:
    from eopt.plan.confidence import ConfidenceResult
    from solvers.stopping import StopRule

__all__ = ["MAX_POINTS", "command", "print_headline", "summarize_choices"]

#: Most frontier points one call computes (each is a solve).
MAX_POINTS = 1000

#: The option that governs each `solver.stop_reason` of a schedule.
STOP_OPTIONS = {
    "optimal": "--gap",
    "gap": "--stop-gap",
    "stalled": "--stall",
    "time_limit": "--time-limit",
    "work_limit": "--time-limit",
}


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


def print_headline(schedule: Schedule) -> None:
    """The first lines of `eopt solve` and `eopt demo`: what is saved at no slowdown,
    what more the slowdown buys, and (static plans) what one setting per GPU costs."""
    gains = savings(schedule)
    if gains is not None:
        console.print(
            f"[bold]{escape(gains.headline())}[/] against every element at its "
            f"fastest setting ({format_energy(gains.baseline_energy_j)} in "
            f"{format_time(float((schedule.baseline or {}).get('makespan', 0.0)))}).",
            highlight=False,
        )
    static = schedule.meta.get("static")
    if isinstance(static, dict) and static.get("per_element_energy_j"):
        per = float(static["per_element_energy_j"])
        extra = schedule.energy - per
        console.print(
            f"One setting per GPU (--static) costs {format_energy(extra)} "
            f"({format_percent(extra / per, sign=True)}) against the per-element plan "
            f"({format_energy(per)}), and needs no runtime controller.",
            highlight=False,
        )


def _print_schedule(schedule: Schedule) -> None:
    print_headline(schedule)
    table = Table(title="Choices per element type", title_justify="left")
    table.add_column("element type")
    table.add_column("κ/ω × count")
    for type_name, text in summarize_choices(schedule):
        table.add_row(escape(type_name), escape(text))
    console.print(table)
    gains = savings(schedule)
    if schedule.deadline is None:
        deadline = "none (energy-minimizing makespan)"
    else:
        deadline = format_time(schedule.deadline)
        if gains is not None:
            deadline += f" (fastest + {format_percent(gains.slowdown)})"
    console.print(f"deadline     {deadline}", highlight=False)
    console.print(f"makespan     {format_time(schedule.makespan)}", highlight=False)
    low, high = schedule.interval
    spread = format_sigma(schedule.energy_std, "J")
    if schedule.energy_std > 0:
        spread += (
            f"; {format_percent(schedule.confidence, 0)} interval "
            f"{format_energy(low)} … {format_energy(high)}"
        )
    console.print(f"energy       {format_energy(schedule.energy)}  ({spread})", highlight=False)
    if schedule.lower_bound is not None:
        gap = format_percent(schedule.gap, 3) if schedule.gap is not None else "n/a"
        console.print(
            f"lower bound  {format_energy(schedule.lower_bound)}  (gap {gap})", highlight=False
        )
    solver = schedule.solver
    limit = schedule.meta.get("time_limit_s")
    took = schedule.meta.get("wall_time_s", solver.get("wall_time_s") or 0.0)
    console.print(
        f"solver       {escape(str(solver.get('name')))}, status {solver.get('status')}, "
        f"{float(took):.2f} s" + (f" of the {float(limit):g} s limit" if limit else ""),
        highlight=False,
    )
    notes = [m for m in str(solver.get("message") or "").split("; ") if m]
    reason = str(solver.get("stop_reason") or "")
    if reason:
        # The solver's first note says why it stopped ("stopped: certified gap …").
        detail = (
            notes.pop(0).removeprefix("stopped: ")
            if notes and notes[0].startswith("stopped: ")
            else reason
        )
        option = STOP_OPTIONS.get(reason)
        console.print(
            f"stopped      {escape(detail)}" + (f" ({option})" if option else ""),
            highlight=False,
        )
    if notes:
        console.print(f"             {escape('; '.join(notes))}", highlight=False)
    base = schedule.baseline
    if base:
        saved = base["energy"] - schedule.energy
        added = schedule.makespan - base["makespan"]
        console.print(
            f"vs fastest   {format_energy(base['energy'])} in {format_time(base['makespan'])}:"
            f" saves {format_energy(saved)} ({format_percent(saved / base['energy'])}), adds "
            f"{format_time(added)} ({format_percent(added / base['makespan'])})",
            highlight=False,
        )


def _print_on_time(result: ConfidenceResult) -> None:
    """What meeting the deadline with the requested probability costs."""
    p = result.plan
    console.print(
        f"on time      {format_percent(p.monte_carlo)} of {p.samples} sampled runs "
        f"(±{format_percent(p.stderr, 2)}; Clark's normal approximation "
        f"{format_percent(p.analytic)}), asked {format_percent(result.confidence)}",
        highlight=False,
    )
    mean = result.mean_plan
    extra = result.energy_j - result.mean_plan_energy_j
    console.print(
        f"confidence   costs {format_energy(extra)} "
        f"({format_percent(result.premium, 2, sign=True)}) over the mean-deadline plan "
        f"({format_energy(result.mean_plan_energy_j)}, on time in "
        f"{format_percent(mean.monte_carlo)} of runs); solved for a mean deadline of "
        f"{format_time(result.tightened_deadline_s)}",
        highlight=False,
    )


def stop_rule(stop_gap: float | None, stall: float | None, method: str) -> StopRule | None:
    """The solver's stop rule from --stop-gap and --stall; what is not given keeps the
    solver's default for ``method`` (None when neither is given)."""
    if stop_gap is None and stall is None:
        return None
    rule = method_named(method).stop
    return replace(
        rule,
        gap=rule.gap if stop_gap is None else stop_gap,
        stall_gain=rule.stall_gain if stall is None else stall,
    )


def _percent(fraction: float) -> str:
    """``0.001`` → ``0.1%``: a default as --gap, --stop-gap and --stall read it."""
    return f"{100 * fraction:g}%"


def _method_help() -> str:
    """Each method and what it does; the default last, since it combines the others."""
    names = [n for n in METHODS if n != DEFAULT_METHOD] + [DEFAULT_METHOD]
    return "; ".join(f"{n}: {METHODS[n].summary}" for n in names) + "."


def _stop_default_help(default: float, *, name_the_others: bool = False) -> str:
    """``[default: 0.1% for auto and relax; milp runs to --gap or --time-limit]``: the
    methods that stop early by default (at ``default``) and, when asked, those that run
    to their limit."""
    early = " and ".join(n for n, m in METHODS.items() if not m.runs_to_limit)
    to_limit = [n for n, m in METHODS.items() if m.runs_to_limit]
    text = f"default: {_percent(default)} for {early}"
    if name_the_others and to_limit:
        verb = "runs" if len(to_limit) == 1 else "run"
        text += f"; {' and '.join(to_limit)} {verb} to --gap or --time-limit"
    return f"[{text}]"


def _write_frontier_csv(path: Path, points: list[FrontierPlan]) -> None:
    # The one frontier-table writer, shared with `eopt frontier --csv`.
    from eopt.model.frontier_table import write_frontier_csv

    write_frontier_csv(path, [p.to_row() for p in points])


def _with_interactions(
    schedule: Schedule, plan: Plan, libraries: tuple[Path, ...], graph_file: Path
) -> Schedule:
    """The schedule, with its prediction under the interaction graph in ``meta``.

    The solver chose modes with context-independent signatures; the graph's characterized
    pairs then price the schedule as it will run, and what stayed context-independent
    carries the Appendix D bias bound.
    """
    import dataclasses

    from eopt.calculus.contextual import ContextOutsideError
    from eopt.calculus.contextual_schedule import compose_with_interactions
    from eopt.calculus.interactions import InteractionsError, read_interactions
    from eopt.calculus.schedule import PlacementsError, solved_placements

    try:
        graph = read_interactions(graph_file)
        sigs = list(load_plan_library(plan, libraries, own=True))
        placed = solved_placements(schedule.to_dict(), sigs, str(graph_file))
        comp = compose_with_interactions(
            placed.placements, sigs, graph, placed.idle_power, outside="warn"
        )
    except (InteractionsError, PlacementsError, ContextOutsideError, ValueError) as exc:
        raise UserError(f"--graph {graph_file}: {exc}") from None
    base = schedule.energy
    info = {
        "graph": str(graph_file),
        "energy_j": comp.signature.energy,
        "std_energy_j": comp.signature.std_energy,
        "context_independent_energy_j": base,
        "bias_bound_j": comp.bias.bias,
        "substitutions": [
            {
                "edge": x.edge,
                "device": x.device,
                "start_s": x.start_s,
                "energy_shift_j": x.energy_shift_j,
            }
            for x in comp.substitutions
        ],
        "notes": list(comp.notes),
    }
    types = {e.type for e in schedule.elements}
    if not set(graph.nodes) & types:
        info["notes"].append(
            f"none of the graph's element types ({', '.join(graph.nodes)}) is in this "
            "schedule: is it the graph of another workload?"
        )
    return dataclasses.replace(schedule, meta={**schedule.meta, "interactions": info})


def _print_interactions(schedule: Schedule) -> None:
    info = schedule.meta.get("interactions") or {}
    base = info.get("context_independent_energy_j")
    shift = ""
    if isinstance(base, (int, float)) and base:
        shift = f" ({(info['energy_j'] - base) / base:+.2%} against the context-independent plan)"
    console.print(
        f"graph        {format_energy(info['energy_j'])}{shift}, "
        f"{len(info.get('substitutions', []))} characterized pair(s) used; bias bound of the "
        f"rest ±{format_energy(info['bias_bound_j'])}",
        highlight=False,
    )
    for note in info.get("notes", []):
        console.print(f"             note: {escape(note)}", highlight=False)


def _print_frontier(points: list[FrontierPlan], rows: int = 12) -> None:
    table = Table(title=f"Plan frontier ({len(points)} points)", title_justify="left")
    for col in ("makespan", "energy", "lower bound", "gap", "status"):
        table.add_column(col, justify="right")
    step = max(1, math.ceil(len(points) / rows))
    shown = points[::step]
    if points and shown[-1] is not points[-1]:
        shown.append(points[-1])
    for p in shown:
        table.add_row(
            format_time(p.makespan),
            format_energy(p.energy),
            "" if p.lower_bound is None else format_energy(p.lower_bound),
            "" if p.gap is None else format_percent(p.gap, 3),
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
        # --quiet silences stdout; the bar on stderr goes with it.
        disable=console.quiet,
    )


def _run_frontier(
    plan: Plan, library: Library | None, points: int, method: str, time_limit: float | None
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
@click.option(
    "--deadline", type=Quantity("s", positive=True), help="Makespan bound, e.g. 3s or 2500ms."
)
@click.option(
    "--slowdown",
    type=Fraction(),
    help="Bound relative to the fastest makespan, e.g. 5% (or 0.05; a bare 5 is refused).",
)
@click.option(
    "--method",
    type=click.Choice(list(METHODS)),
    default=DEFAULT_METHOD,
    show_default=True,
    help=_method_help(),
)
@click.option(
    "--time-limit",
    type=Quantity("s", positive=True),
    help="Wall time for the whole solve, reading and building the problem included "
    "(per point with --frontier). Without it the search stops by rules that count work, "
    "so one plan comes out on any machine at any load.",
)
@click.option(
    "--gap",
    type=Fraction(),
    default=_percent(DEFAULT_GAP),
    show_default=True,
    help="Optimality gap: a plan this close to its certified bound is optimal.",
)
@click.option(
    "--stop-gap",
    type=Fraction(),
    help="Stop once the certified gap is at most this "
    f"{_stop_default_help(STOP_GAP, name_the_others=True)}. 0 never stops on the gap.",
)
@click.option(
    "--stall",
    type=Fraction(),
    help="Stop once the search gains at most this over a window (2 reference seconds of "
    "work, or half the work done if longer; wall seconds under --time-limit) "
    f"{_stop_default_help(STALL_GAIN)}. 0 never stops on a stall.",
)
@click.option(
    "--library",
    "libraries",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Signature library to use instead of the plan's own (repeatable).",
)
@click.option(
    "--static",
    is_flag=True,
    help="One setting per GPU for the whole run (eopt apply can lock it without code "
    "changes); also solves the per-element plan and prints what --static costs.",
)
@click.option(
    "--confidence",
    type=Probability(),
    help="Meet the deadline with this probability under the signatures' time variances, "
    "e.g. 95%; prints what it costs over the plan that meets it on mean times.",
)
@click.option(
    "--graph",
    "graph_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Interaction graph (eopt.interactions/1, from `eopt check --write-graph`): also "
    "predict the solved schedule with its characterized pairs, and the bias bound of the "
    "rest (its libraries with --library).",
)
@click.option("--frontier", "want_frontier", is_flag=True, help="Compute the plan frontier.")
@click.option(
    "--points",
    type=click.IntRange(min=2, max=MAX_POINTS),
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
@force_option()
@json_option("Print the schedule as JSON on stdout.")
@quiet_option()
def command(
    plan_file: Path,
    deadline: float | None,
    slowdown: float | None,
    method: str,
    time_limit: float | None,
    gap: float,
    stop_gap: float | None,
    stall: float | None,
    libraries: tuple[Path, ...],
    static: bool,
    confidence: float | None,
    graph_file: Path | None,
    want_frontier: bool,
    points: int,
    output: Path | None,
    force: bool,
    as_json: bool,
) -> None:
    """Choose κ and ω per element: minimum energy with the makespan within a deadline.

    Energy counts every element's E = s·T + d and every device's idle draw up to the
    makespan. Without --deadline/--slowdown the plan's own deadline is used, else the
    energy-minimizing makespan. The first line says what is saved at no slowdown and
    what more the slowdown buys, both against every element at its fastest setting.

    auto and relax stop once the plan is certified within --stop-gap (0.1 %) of the
    optimum, or once the search gains no more than --stall (0.01 %) over a window; the
    last lines say why it stopped. Those rules count work, not seconds, and so does the
    search's own budget (larger for plans of more than 16 384 elements; plans of 2 048
    and more also stop within 0.5 % of their bound): the same plan on any machine at
    any load. --time-limit adds a wall-clock cap that covers everything, reading and
    building the problem included: the solver stops in time with the best plan found so
    far (and says so), and a plan too large to build within the limit is refused with the
    limit it needs. Ctrl-C stops the search, keeps the best plan found, and writes it (-o)
    before exiting with status 130.

    \b
    Examples:
      eopt solve plan.yaml --slowdown 5% -o schedule.json
      eopt solve plan.yaml --deadline 3s --method milp --time-limit 120s
      eopt solve plan.yaml --slowdown 5% --static -o static.json   # eopt apply can lock it
      eopt solve plan.yaml --frontier --points 40 -o frontier.csv
      eopt solve plan.yaml --slowdown 5% --stop-gap 0 --stall 0  # search to the limit
      eopt solve plan.yaml --deadline 3s --confidence 95%  # on time in 95 % of runs
    """
    budget = TimeBudget(time_limit)  # reading the plan counts against the limit too
    if deadline is not None and slowdown is not None:
        raise UserError("give either --deadline or --slowdown, not both")
    if want_frontier and static:
        raise UserError("--static solves one deadline; leave out --frontier (or --static)")
    if want_frontier and graph_file is not None:
        raise UserError("--graph predicts one solved schedule; leave out --frontier (or --graph)")
    if want_frontier and confidence is not None:
        raise UserError("--confidence solves one deadline; leave out --frontier (or --confidence)")
    check_output(output, force)
    plan = read_plan(plan_file)
    library = load_plan_library(plan, libraries, own=False) if libraries else None
    if want_frontier:
        result = _run_frontier(
            plan, library, points, method if method != "auto" else "relax", time_limit
        )
        if output is not None:
            _write_frontier_csv(output, result)
        if as_json:
            write_json("-", [p.to_row() for p in result])
        else:
            _print_frontier(result)
        if output is not None and not as_json:
            console.print(f"Wrote {output}", highlight=False)
        return
    budget.check("reading the plan", f"{len(plan.elements)} elements")
    # relax and auto search until the time limit or until they stall: show that work
    # is going on (on stderr, so that --json output stays clean).
    with _progress(TimeElapsedColumn()) as progress:
        cap = f", at most {format_time(time_limit, 3)}" if time_limit is not None else ""
        progress.add_task(f"solving {len(plan.elements)} elements ({method}{cap})", total=None)
        solve_args: dict[str, Any] = {
            "deadline": deadline,
            "slowdown": slowdown,
            "method": method,
            "gap": gap,
            "library": library,
            "static": static,
            "budget": budget,
            "stop": stop_rule(stop_gap, stall, method),
        }
        on_time: ConfidenceResult | None = None
        if confidence is None:
            schedule = solve_plan(plan, **solve_args)
        else:
            # Imported here: scipy's special functions are not needed for `eopt --help`.
            from eopt.plan.confidence import solve_with_confidence

            schedule, on_time = solve_with_confidence(plan, confidence, **solve_args)
    if graph_file is not None:
        schedule = _with_interactions(schedule, plan, libraries, graph_file)
    # The file first: a reader that closes the pipe early (`| head`) must not cost the plan.
    if output is not None:
        write_schedule(output, schedule)
    if as_json:
        write_json("-", schedule.to_dict())
    else:
        _print_schedule(schedule)
        if on_time is not None:
            _print_on_time(on_time)
        if graph_file is not None:
            _print_interactions(schedule)
        if output is not None:
            console.print(f"Wrote {output}", highlight=False)
    if schedule.solver.get("status") == "interrupted":
        kept = f"; wrote it to {output}" if output is not None else ""
        err_console.print(
            f"[yellow]Interrupted[/] (Ctrl-C): kept the best plan found so far{escape(kept)}.",
            highlight=False,
        )
        sys.exit(130)
