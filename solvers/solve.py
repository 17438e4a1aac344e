"""Entry points: `solve`, `evaluate`, `fastest_makespan`, and the table of methods.

`solve` checks its arguments, starts one `Budget` and one `Incumbent`, and hands both
to the method asked for (`METHODS`: name → `Method`, as `scipy.optimize.minimize`
dispatches). Each method is a short sequence of stages (`solvers.stages`); its table
entry also says what it does and when it stops, so that whoever offers the choice (a
command line's ``--method``) reads its choices, help and defaults from here. Every plan
handed out is evaluated with the real mode durations and meets its deadline; its
`lower_bound` is the best certified bound found (the hull LP, the LP relaxation of the
exact model, or the MILP's own bound).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from solvers.budget import Budget
from solvers.coupled import COUPLED_SOLVER, groups_consistent, local_search, relax_coupled
from solvers.deadline import check_deadline, meets
from solvers.exceptions import ProblemError, SolverError
from solvers.incumbent import NUMERIC_GAP, Incumbent
from solvers.indexed import IndexedProblem, indexed
from solvers.milp import SOLVER_NAME, milp_columns, min_makespan, solve_milp
from solvers.problem import Problem
from solvers.scaling import all_fastest, scaled
from solvers.solution import Solution, build_solution
from solvers.stages import accept_exact, lp_bound, relax_stages, windows_stage
from solvers.stopping import RUN_TO_LIMIT, StopRule, Watch

__all__ = [
    "DEFAULT_GAP",
    "DEFAULT_METHOD",
    "DEFAULT_TIME_LIMIT_S",
    "DEFAULT_WORK_S",
    "METHODS",
    "Method",
    "default_work_s",
    "evaluate",
    "fastest_makespan",
    "fastest_plan",
    "method_named",
    "scaled",
    "solve",
]


def fastest_plan(ip: IndexedProblem) -> tuple[float, list[int]]:
    """The fastest makespan (s) and a cheapest-possible assignment achieving it.

    Every task in its fastest mode is exact unless groups or transition costs forbid
    that combination; then the exact model is solved for the shortest makespan, on the
    scaled problem and to a zero gap, and compared with the all-fastest plan paying its
    setting changes (never slower than the plan every task at its fastest gives).
    """
    modes = all_fastest(ip)
    groups_ok = groups_consistent(ip, modes)
    changes = any(ip.settings[a][modes[a]] != ip.settings[b][modes[b]] for a, b in ip.chain_pairs)
    if groups_ok and not changes:
        return ip.evaluate(modes).makespan, modes
    _, exact = min_makespan(scaled(ip))
    candidates = [exact, modes] if groups_ok else [exact]

    def key(m: list[int]) -> tuple[float, float]:
        ev = ip.evaluate(m)
        return ev.makespan, ev.energy

    best = min(candidates, key=key)
    return ip.evaluate(best).makespan, best


def fastest_makespan(problem: Problem) -> float:
    """The shortest makespan any assignment of modes achieves, s.

    Raises:
        ProblemError: the problem is malformed.
    """
    return fastest_plan(indexed(problem))[0]


def evaluate(problem: Problem, modes: Mapping[str, int], deadline: float | None = None) -> Solution:
    """Exact makespan, energy and earliest-start schedule of a given assignment.

    Args:
        problem: the problem.
        modes: task name → mode index, for every task.
        deadline: s; only used for the accounting horizon (``hold="deadline"``) and to
            flag a late plan (status ``"late"``).

    Returns:
        A `Solution` with status ``"evaluated"`` (or ``"late"``) and no bound.

    Raises:
        ProblemError: a task is missing from `modes`, unknown, or has no such mode.
    """
    clock = Budget.unlimited().stopwatch()
    ip = indexed(problem)
    deadline = check_deadline(deadline)
    unknown = sorted(set(modes) - set(ip.index))
    if unknown:
        raise ProblemError(f"modes names unknown task {unknown[0]!r}")
    assignment = []
    for i, name in enumerate(ip.names):
        if name not in modes:
            raise ProblemError(f"modes gives no mode for task {name!r}")
        m = modes[name]
        if (
            isinstance(m, bool)
            or not isinstance(m, (int, np.integer))
            or not 0 <= m < len(ip.durations[i])
        ):
            raise ProblemError(
                f"task {name!r}: mode {m!r} does not exist (it has {len(ip.durations[i])} modes)"
            )
        assignment.append(int(m))
    sol = build_solution(
        ip,
        assignment,
        deadline,
        status="evaluated",
        lower_bound=math.nan,
        solver="evaluate",
        method="evaluate",
        wall_time_s=0.0,
    )
    late = not meets(sol.makespan, deadline)
    return replace(
        sol,
        status="late" if late else "evaluated",
        message=(
            f"makespan {sol.makespan:.6g} s misses the deadline {deadline:.6g} s" if late else ""
        ),
        wall_time_s=clock(),
    )


#: Columns a second the exact model is built from arrays, about (one core); HiGHS's
#: presolve reads it in about as long again.
MILP_COLUMNS_PER_S = 400_000


def _milp_build_s(columns: int) -> float:
    """Seconds to build the exact model of `columns` binaries."""
    return columns / MILP_COLUMNS_PER_S


#: auto's split of the time on problems the MILP can take: the relax stages get this
#: share of the limit, then MILP windows this share of what is left, then the MILP.
AUTO_RELAX_SHARE = 0.6
AUTO_LNS_SHARE = 0.3

#: Above this many MILP columns (Pareto modes in all) auto gives the relax stages all
#: its time and skips the MILP stages: on 16 × 128 × 30 (123 k columns) the MILP's
#: root LP alone takes over 30 s and windows of 24 tasks find nothing in 40 s, while
#: relax sweeps find cheaper plans.
LARGE_COLUMNS = 20_000

#: Solver description of a coupled problem too large to relax in the time.
NO_TIME_TO_BUILD = "fastest plan + local search (no time to build the LP)"


@dataclass
class _Run:
    """One solve as its method sees it: the problem (scaled), the best plan, the time."""

    ip: IndexedProblem
    inc: Incumbent
    budget: Budget
    gap: float
    t_fast: float  # in ip's time unit


def _relax(run: _Run, budget: Budget | None = None) -> None:
    """LP relaxation, rounding, tiling, improvement (coupled: `relax_coupled`)."""
    ip, inc = run.ip, run.inc
    budget = budget or run.budget
    if not ip.coupled:
        relax_stages(ip, inc, run.t_fast, budget)
    elif _milp_build_s(milp_columns(ip)) > 0.5 * budget.remaining():
        # Building the relaxation would take most of the time.
        inc.out_of_time = True
        inc.notes.append("no lower bound within the time limit")
        inc.offer(local_search(ip, inc.modes, inc.deadline, budget, inc.watch), NO_TIME_TO_BUILD)
        inc.solver = NO_TIME_TO_BUILD
    else:
        modes, bound = relax_coupled(ip, inc.deadline, inc.modes, budget, watch=inc.watch)
        inc.offer_bound(bound)
        inc.offer(modes, COUPLED_SOLVER)
        inc.solver = COUPLED_SOLVER


def _exact(run: _Run, solver: str) -> None:
    """The exact MILP from the incumbent's plan, with the time left."""
    inc = run.inc
    inc.watch.arm()
    res = solve_milp(run.ip, inc.deadline, run.budget, gap=run.gap, warm=inc.modes, watch=inc.watch)
    accept_exact(inc, res, solver)
    if math.isnan(inc.bound) and not run.ip.coupled:
        lp_bound(inc)
    if res.status == "time_limit" and not inc.within(run.gap):
        inc.out_of_time = True


def _milp(run: _Run) -> None:
    """The exact MILP from the fastest plan, refused when it cannot be built in time."""
    columns = milp_columns(run.ip)
    build = 2 * _milp_build_s(columns)  # building, then HiGHS's presolve reading it
    left = run.budget.remaining()
    if build > left:
        raise SolverError(
            f"the exact MILP has {columns} binaries: building it takes about {build:.0f} s,"
            f" more than the {max(0.0, left):.1f} s left of the time limit; raise the "
            f"time limit to {math.ceil(2 * build + run.budget.elapsed())} s or more, or use "
            "method relax (it stops within the limit with the best plan found)"
        )
    _exact(run, f"{SOLVER_NAME} MILP")


def _auto(run: _Run) -> None:
    """Relax with `AUTO_RELAX_SHARE` of the time, then MILP windows with
    `AUTO_LNS_SHARE` of the rest, then the exact MILP from the best plan (its bound
    often tightens the gap). Above `LARGE_COLUMNS` modes: relax with all the time."""
    ip, inc, budget = run.ip, run.inc, run.budget
    columns = milp_columns(ip)
    large = not ip.coupled and columns > LARGE_COLUMNS
    _relax(run, budget if large else budget.until(AUTO_RELAX_SHARE))
    inc.watch.arm()  # the relax stages may have ended before their improvement stage
    if large or inc.within(run.gap) or inc.should_stop():
        return
    if not ip.coupled and budget.remaining() > 0.5:
        windows_stage(inc, budget.child(fraction=AUTO_LNS_SHARE))
        if inc.within(run.gap) or inc.should_stop():
            return
    # Building the MILP must take under half of the time left.
    if budget.remaining() > 0.5 and _milp_build_s(columns) < 0.5 * budget.remaining():
        _exact(run, f"{inc.solver}, then {SOLVER_NAME} MILP")


@dataclass(frozen=True)
class Method:
    """One method of `solve`.

    Attributes:
        name: What `solve` takes as ``method``.
        run: Solves one run with its budget.
        summary: What it does, in a few words (for help texts).
        runs_to_limit: By default it searches until its optimality gap or its time
            limit (`RUN_TO_LIMIT`) instead of stopping early at a small certified gap
            or a stall (`StopRule()`).
    """

    name: str
    run: Callable[[_Run], None]
    summary: str
    runs_to_limit: bool = False

    @property
    def stop(self) -> StopRule:
        """The rule it stops by when `solve` is given none."""
        return RUN_TO_LIMIT if self.runs_to_limit else StopRule()


#: The methods of `solve`.
METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("auto", _auto, "relax, then MILP stages when the problem is small"),
        Method("milp", _milp, "exact (time-limited)", runs_to_limit=True),
        Method(
            "relax",
            _relax,
            "LP relaxation, rounding, a repeated steady state for pipelines, and local "
            "search (stops when it stalls)",
        ),
    )
}

#: The method `solve` uses unless told.
DEFAULT_METHOD = "auto"

#: The wall-clock time limit a caller that wants one usually gives, s. Without an
#: explicit `time_limit`, `solve` runs on a budget of work instead (`DEFAULT_WORK_S`).
DEFAULT_TIME_LIMIT_S = 60.0

#: `solve`'s budget of work unless given a time limit, in reference seconds
#: (`solvers.budget.WorkMeter`), up to `WORK_TASKS` tasks (`default_work_s`): its stop
#: rules then count work alone, so one input gives one plan on any machine at any load.
DEFAULT_WORK_S = 60.0

#: Above this many tasks the default budget of work grows with the tasks: an LP solve
#: and a longest-path pass cost in proportion to them (on 64 × 512 × 30, 65 536 tasks,
#: one LP solve is about 20 reference s), and a fixed budget would leave a large
#: problem no work past its first LP.
WORK_TASKS = 16_384


def default_work_s(tasks: int) -> float:
    """`solve`'s budget of work for a problem of `tasks` tasks, in reference seconds:
    `DEFAULT_WORK_S`, and in proportion to the tasks above `WORK_TASKS`."""
    return DEFAULT_WORK_S * max(1.0, tasks / WORK_TASKS)


#: `solve`'s optimality gap unless told (relative).
DEFAULT_GAP = 1e-4


def method_named(name: str) -> Method:
    """The method called `name`.

    Raises:
        ProblemError: for a name `METHODS` does not hold, listing the ones it does.
    """
    if name not in METHODS:
        raise ProblemError(f"unknown method {name!r}; use one of {', '.join(METHODS)}")
    return METHODS[name]


def _reserve(time_limit: float) -> float:
    """s kept back from the stages for reading and checking the final plan."""
    return min(1.0, 0.01 * time_limit)


def solve(
    problem: Problem,
    deadline: float | None = None,
    method: str = DEFAULT_METHOD,
    time_limit: float | None = None,
    gap: float = DEFAULT_GAP,
    stop: StopRule | None = None,
    *,
    work_limit: float | None = None,
) -> Solution:
    """Minimum-energy assignment of modes whose makespan meets `deadline`.

    Every model is built in units about the problem's own makespan and energy
    (`solvers.scaling.scaled`), so that solver tolerances mean the same for elements of
    microseconds and of hours.

    Args:
        problem: the problem.
        deadline: s; None finds the energy-minimizing makespan.
        method: a key of `METHODS`: ``"relax"`` (LP relaxation, rounding, tiling,
            iterated improvement; gap reported), ``"milp"`` (exact, within
            `time_limit`) or ``"auto"`` (relax, then MILP windows, then the MILP
            warm-started from the best plan when it can be built in time).
        time_limit: s of wall time, the hard cap; every share of the search is then
            wall time, and a loaded machine may stop it sooner. None (or inf): no wall
            limit; the search runs on `work_limit` instead.
        gap: relative optimality gap that counts as optimal.
        stop: when to stop before the time limit (`solvers.stopping.StopRule`). By
            default the method's own (`Method.stop`): relax and auto stop once the
            certified gap is ≤ 0.1 %, or once a search that improves a finished plan
            gains ≤ 0.01 % over a window; milp, the exact method, runs to `gap` or the
            time limit (`solvers.stopping.RUN_TO_LIMIT`, which the others take too).
        work_limit: without `time_limit`, the work the search may do, in reference
            seconds (`solvers.budget.WorkMeter`: the same on any machine at any load);
            None: `default_work_s` of the problem's size.

    Returns:
        The plan; `status` is ``"optimal"`` (its gap ≤ `gap`), ``"time_limit"``,
        ``"interrupted"`` (Ctrl-C: the best plan found so far) or ``"feasible"``;
        `stop_reason` says why the search stopped; `lower_bound` is certified.

    Raises:
        InfeasibleDeadline: the deadline is below the fastest achievable makespan.
        ProblemError: malformed problem, deadline or method.

    Example:
        >>> from solvers import Mode, Problem, Task, solve
        >>> fast, slow = Mode(1.0, 100.0), Mode(2.0, 60.0)
        >>> p = Problem((Task("a", "gpu0", (fast, slow)),), (), {"gpu0": 10.0})
        >>> solve(p, deadline=1.5).modes["a"], solve(p, deadline=2.0).modes["a"]
        (0, 1)
    """
    chosen = method_named(method)
    if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ProblemError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    if work_limit is None:
        work_limit = default_work_s(len(problem.tasks))
    if not (isinstance(work_limit, (int, float)) and 0 < work_limit < math.inf):
        raise ProblemError(f"work_limit must be a positive finite number, got {work_limit!r}")
    if not (isinstance(gap, (int, float)) and 0 <= gap < 1):
        raise ProblemError(f"gap must be a fraction in [0, 1), got {gap!r}")
    wall = Budget.unlimited().stopwatch()
    on_wall = time_limit is not None and math.isfinite(time_limit)
    budget = Budget.of(time_limit) if on_wall else Budget.of_work(work_limit)
    original = indexed(problem)
    t_fast, fast = fastest_plan(original)
    deadline = check_deadline(deadline, t_fast)
    # Every stage works on the scaled problem; the plan is evaluated in s and J at the end.
    ip = scaled(original)
    at = None if deadline is None else deadline / ip.time_unit
    rule = stop or chosen.stop
    watch = Watch(rule=rule, clock=budget.clock, started=budget.started)
    inc = Incumbent.start(ip, at, fast, watch)
    # The stages stop `_reserve` s before a wall limit, for checking the plan after them.
    keep = _reserve(budget.limit_s) if on_wall else 0.0
    run = _Run(ip, inc, budget.child(keep=keep), gap, t_fast / ip.time_unit)
    try:
        chosen.run(run)
    except KeyboardInterrupt:
        # Ctrl-C: keep the cheapest plan seen (the stage that was running may have held
        # a cheaper one than the last stage handed back).
        watch.interrupted = True
    return _finish(original, inc, run, method, deadline, budget, wall)


def _finish(
    original: IndexedProblem,
    inc: Incumbent,
    run: _Run,
    method: str,
    deadline: float | None,
    budget: Budget,
    wall: Callable[[], float],
) -> Solution:
    """The incumbent as a `Solution` in s and J, with its status and stop reason."""
    watch = inc.watch
    if watch.interrupted:  # (a MILP stopped by Ctrl-C returns normally) whatever came first
        watch.reason, watch.detail = "interrupted", "interrupted (Ctrl-C)"
    out_of_time = inc.out_of_time or run.budget.remaining() <= 0.02 * budget.limit_s
    modes, energy = inc.modes, inc.energy
    if watch.modes is not None and watch.modes_energy < energy:
        modes = watch.modes
    notes = list(inc.notes)
    # Never hand out a late plan, or one that splits a group across settings.
    if not meets(original.evaluate(modes).makespan, deadline) or not groups_consistent(
        original, modes
    ):
        modes = fastest_plan(original)[1]
        notes.append("fell back to the fastest plan")
    sol = build_solution(
        original,
        modes,
        deadline,
        status="feasible",
        lower_bound=inc.bound * run.ip.energy_unit,
        solver=inc.solver or SOLVER_NAME,
        method=method,
        wall_time_s=wall(),
    )
    # The status follows the plan's own gap, whatever a solver said about its model.
    gap = run.gap
    if watch.reason == "interrupted":
        status, reason, detail = "interrupted", "interrupted", watch.detail
    elif sol.gap <= max(gap, NUMERIC_GAP):
        status, reason, detail = "optimal", "optimal", f"gap {sol.gap:.3%} ≤ {gap:.3%}"
    elif watch.reason == "gap":
        status, reason, detail = "feasible", "gap", watch.detail
    elif out_of_time and budget.counts_work:
        status, reason = "time_limit", "work_limit"
        detail = (
            f"the work limit of {budget.limit_s:g} reference s (counted in work, the "
            "same on any machine; a time limit replaces it)"
        )
    elif out_of_time:
        status, reason = "time_limit", "time_limit"
        detail = f"the time limit of {budget.limit_s:g} s"
    elif watch.stall_detail:
        status, reason, detail = "feasible", "stalled", watch.stall_detail
    else:
        status, reason, detail = "feasible", "done", "every stage finished"
    notes.insert(0, f"stopped: {detail}")
    return replace(
        sol,
        status=status,
        stop_reason=reason,
        message="; ".join(notes),
        wall_time_s=wall(),
    )
