"""Entry points: `solve`, `evaluate`, `fastest_makespan` (method dispatch lives here).

Every plan handed out is evaluated with the real mode durations and meets its deadline;
its `lower_bound` is the best certified bound found (the hull LP, the LP relaxation of
the exact model, or the MILP's own bound).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from solvers.coupled import groups_consistent, local_search, relax_coupled
from solvers.exceptions import InfeasibleDeadline, ProblemError, SolverError, TimeLimitReached
from solvers.improve import improve
from solvers.indexed import IndexedProblem, indexed, meets
from solvers.lns import lns
from solvers.lp import HullLP
from solvers.milp import candidate_modes, min_makespan, solve_milp, solver_name
from solvers.perturb import perturb_search
from solvers.problem import Problem
from solvers.relax import relax_search
from solvers.solution import Solution, build_solution, relative_gap

METHODS = ("auto", "relax", "milp")


def _check_deadline(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)):
        raise ProblemError(f"deadline must be a number of seconds, got {deadline!r}")
    d = float(deadline)
    if not math.isfinite(d) or d < 0:
        raise ProblemError(f"deadline must be a finite number of seconds >= 0, got {deadline!r}")
    return d


def fastest_plan(ip: IndexedProblem) -> tuple[float, list[int]]:
    """The fastest makespan (s) and a cheapest-possible assignment achieving it.

    Every task in its fastest mode is exact unless groups or transition costs forbid
    that combination; then the exact model is solved for the shortest makespan.
    """
    modes = [int(np.lexsort((ip.costs[i], ip.durations[i]))[0]) for i in range(ip.n)]
    consistent = all(
        len({ip.settings[i][modes[i]] for i in members}) == 1 for members in ip.groups
    ) and not any(ip.settings[a][modes[a]] != ip.settings[b][modes[b]] for a, b in ip.chain_pairs)
    if consistent:
        return ip.evaluate(modes).makespan, modes
    return min_makespan(ip)


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
    t0 = time.perf_counter()
    ip = indexed(problem)
    deadline = _check_deadline(deadline)
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
        wall_time_s=time.perf_counter() - t0,
    )


#: Modes a second that `HullLP` builds, about (390 000 measured on one core): below
#: the time that building needs, the relax method goes without the LP.
HULL_MODES_PER_S = 300_000

#: Solver descriptions of the relax method's stops at the time limit (no bound found).
LP_OUT_OF_TIME = "fastest plan + local search (the LP relaxation ran out of time)"
NO_TIME_TO_BUILD = "fastest plan + local search (no time to build the LP)"


def _relax(
    ip: IndexedProblem,
    deadline: float | None,
    fast: list[int],
    t_fast: float,
    time_limit: float,
    lp: HullLP | None = None,
) -> tuple[list[int], float, str]:
    """Relax method: (modes, bound J, solver description)."""
    if ip.coupled:
        if _milp_build_s(_milp_columns(ip)) > 0.5 * time_limit:
            # Building the relaxation through PuLP would take most of the limit.
            modes = local_search(ip, fast, deadline, max(0.0, time_limit))
            return modes, math.nan, NO_TIME_TO_BUILD
        modes, bound = relax_coupled(ip, deadline, fast, time_limit=time_limit)
        return modes, bound, "HiGHS LP relaxation + fixed settings + local search"
    t0 = time.perf_counter()
    stop_at = t0 + time_limit
    try:
        # Building the hull LP cannot be interrupted (0.8 s for 8000 tasks × 38 modes).
        if lp is None and sum(len(d) for d in ip.durations) / HULL_MODES_PER_S > time_limit:
            raise TimeLimitReached("no time left to build the LP relaxation")
        lp = lp or HullLP(ip)
        left = time_limit - (time.perf_counter() - t0)  # building the LP counts
        # Every LP solve ends by the limit (a cold solve of thousands of tasks can take
        # longer than a short limit); the search keeps the best plan found before.
        lp.stop_at = stop_at
        res = relax_search(lp, deadline, t_fast, time_limit=left)
    except TimeLimitReached:
        # No LP optimum in time, so no bound: the fastest plan, improved by exact
        # slack-to-energy moves with whatever time is left.
        modes = improve(ip, fast, deadline, time_limit=max(0.0, stop_at - time.perf_counter()))
        rest = stop_at - time.perf_counter()
        if rest > 0:
            modes = perturb_search(ip, modes, deadline, time_limit=rest)
        return modes, math.nan, LP_OUT_OF_TIME
    finally:
        if lp is not None:
            lp.stop_at = None
    if res is None:  # the LP says infeasible: only by float rounding at the boundary
        return list(fast), math.nan, "fastest plan"
    return res.modes, res.bound, "HiGHS LP + rounding + local search"


def _milp_columns(ip: IndexedProblem) -> int:
    """Binary columns of the full MILP (every candidate mode of every task)."""
    return sum(len(m) for m in candidate_modes(ip))


def _milp_build_s(columns: int) -> float:
    """Seconds PuLP takes to build a MILP of `columns` binaries (about 40 000 a second
    on one core); handing it to HiGHS and reading it back takes about as long again."""
    return columns / 40_000


#: auto's split of the time on problems the MILP can take: the relax search gets this
#: share of the limit, then MILP windows this share of what is left, then the MILP.
AUTO_RELAX_SHARE = 0.6
AUTO_LNS_SHARE = 0.3

#: Above this many MILP columns (Pareto modes in all) auto gives the relax search all
#: its time and skips the MILP stages: on 16 × 128 × 30 (123 k columns) the MILP's
#: root LP alone takes over 30 s and windows of 24 tasks find nothing in 40 s, while
#: relax sweeps find cheaper plans.
LARGE_COLUMNS = 20_000


def solve(
    problem: Problem,
    deadline: float | None = None,
    method: str = "auto",
    time_limit: float = 60.0,
    gap: float = 1e-4,
) -> Solution:
    """Minimum-energy assignment of modes whose makespan meets `deadline`.

    Args:
        problem: the problem.
        deadline: s; None finds the energy-minimizing makespan.
        method: ``"relax"`` (LP relaxation, rounding, improvement, then iterated
            improvement until `time_limit` or until it stalls; gap reported),
            ``"milp"`` (exact, within `time_limit`) or ``"auto"``: relax with
            `AUTO_RELAX_SHARE` of the time; while the gap exceeds `gap`, windows of
            tasks re-optimized by a MILP (`solvers.lns`, uncoupled problems) with
            `AUTO_LNS_SHARE` of the rest; then
            the full MILP warm-started from the best plan, when it can be built in
            time (its bound often tightens the gap). The best plan found is returned.
            Above `LARGE_COLUMNS` modes auto is relax with all the time.
        time_limit: s of wall time, roughly (model building can add to it).
        gap: relative optimality gap that counts as optimal.

    Returns:
        The plan; `status` is ``"optimal"`` (gap ≤ `gap`), ``"time_limit"`` or
        ``"feasible"``, and `lower_bound` is certified.

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
    t0 = time.perf_counter()
    if method not in METHODS:
        raise ProblemError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    if not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ProblemError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    if not (isinstance(gap, (int, float)) and 0 <= gap < 1):
        raise ProblemError(f"gap must be a fraction in [0, 1), got {gap!r}")
    deadline = _check_deadline(deadline)
    ip = indexed(problem)
    t_fast, fast = fastest_plan(ip)
    if deadline is not None and not meets(t_fast, deadline):
        raise InfeasibleDeadline(deadline, t_fast)
    notes: list[str] = []
    status = "feasible"
    solver = ""
    bound = math.nan

    def elapsed() -> float:
        return time.perf_counter() - t0

    # Kept back from the stages for reading and checking the final plan.
    reserve = min(1.0, 0.01 * time_limit)

    def left() -> float:
        return time_limit - reserve - elapsed()

    def gap_ok(energy: float) -> bool:
        return relative_gap(energy, bound) <= gap * (1 + 1e-6) + 1e-12

    columns = _milp_columns(ip)
    # Above `LARGE_COLUMNS` (uncoupled problems only) auto is relax with all the time.
    large = method == "auto" and not ip.coupled and columns > LARGE_COLUMNS
    if method == "milp":
        build = 2 * _milp_build_s(columns)  # building, then handing it over and back
        if build > left():
            raise SolverError(
                f"the exact MILP has {columns} binaries: building it takes about {build:.0f} s,"
                f" more than the {max(0.0, left()):.1f} s left of the time limit; raise the "
                f"time limit to {math.ceil(2 * build + elapsed())} s or more, or use method "
                "relax (it stops within the limit with the best plan found)"
            )
        modes, energy = fast, math.inf
    else:
        budget = left() if method == "relax" or large else AUTO_RELAX_SHARE * time_limit - elapsed()
        modes, bound, solver = _relax(ip, deadline, fast, t_fast, budget)
        energy = ip.evaluate(modes, deadline).energy
        if gap_ok(energy):
            status = "optimal"
        elif solver in (LP_OUT_OF_TIME, NO_TIME_TO_BUILD):
            status = "time_limit"
            notes.append(f"stopped at the time limit of {time_limit:g} s without a bound")
    if method == "auto" and status != "optimal" and not (ip.coupled or large) and left() > 0.5:
        better = lns(ip, modes, deadline, time_limit=AUTO_LNS_SHARE * left())
        e = ip.evaluate(better, deadline).energy
        if e < energy:
            modes, energy = better, e
            solver += " + MILP windows"
        if gap_ok(energy):
            status = "optimal"
    run_milp = method == "milp" or (
        method == "auto"
        and status != "optimal"
        and not large
        and left() > 0.5
        # Building the MILP through PuLP must take under half of the time left.
        and _milp_build_s(columns) < 0.5 * left()
    )
    if run_milp:
        warm = modes if method == "auto" else fast
        # The hand-over to HiGHS and back runs outside HiGHS's own clock.
        handover = _milp_build_s(columns)
        res = solve_milp(ip, deadline, time_limit=max(0.1, left() - handover), gap=gap, warm=warm)
        name = f"{res.solver} MILP"
        if res.modes is not None:
            ev = ip.evaluate(res.modes, deadline)
            if not meets(ev.makespan, deadline):
                notes.append(f"{name} plan missed the deadline by float tolerance; not used")
            elif ev.energy < energy or method == "milp":
                modes, energy = res.modes, ev.energy
                solver = name if method == "milp" else f"{solver}, then {name}"
        elif res.message:
            notes.append(res.message)
        if not math.isnan(res.bound):
            bound = res.bound if math.isnan(bound) else max(bound, res.bound)
        if math.isnan(bound) and not ip.coupled:
            lp = HullLP(ip)
            lp.set_deadline(deadline)
            lp_point = lp.solve()
            if lp_point is not None:
                bound = lp_point.energy_bound(ip, deadline)
        # The solver proved its plan optimal within `gap` (by its own tolerances).
        proved = res.status == "optimal" and energy <= res.objective + 1e-6 * (1 + abs(energy))
        if gap_ok(energy) or proved:
            status = "optimal"
        elif res.status == "time_limit":
            status = "time_limit"
            notes.append(f"{name} stopped at the time limit of {time_limit:g} s")
        else:
            status = "feasible"
        solver = solver or name
    elif method == "auto" and status not in ("optimal", "time_limit"):
        status = "time_limit"
        notes.append(f"stopped at the time limit of {time_limit:g} s")
    # Never hand out a late plan, or one that splits a group across settings.
    if not meets(ip.evaluate(modes).makespan, deadline) or not groups_consistent(ip, modes):
        modes = fast
        notes.append("fell back to the fastest plan")
    return build_solution(
        ip,
        modes,
        deadline,
        status=status,
        lower_bound=bound,
        solver=solver or solver_name(),
        method=method,
        wall_time_s=time.perf_counter() - t0,
        message="; ".join(notes),
    )
