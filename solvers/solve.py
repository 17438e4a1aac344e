"""Entry points: `solve`, `evaluate`, `fastest_makespan` (method dispatch lives here).

Every plan handed out is evaluated with the real mode durations and meets its deadline;
its `lower_bound` is the best certified bound found (the hull LP, the LP relaxation of
the exact model, or the MILP's own bound).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from solvers.coupled import groups_consistent, local_search, relax_coupled
from solvers.exceptions import InfeasibleDeadline, ProblemError, SolverError, TimeLimitReached
from solvers.improve import improve, repair
from solvers.indexed import IndexedProblem, indexed, meets
from solvers.lns import lns
from solvers.lp import HullLP
from solvers.milp import candidate_modes, min_makespan, solve_milp, solver_name
from solvers.perturb import perturb_search
from solvers.problem import Problem
from solvers.relax import relax_search
from solvers.solution import Solution, build_solution, relative_gap
from solvers.stopping import RUN_TO_LIMIT, StopRule, Watch

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


#: Makespans (s) and energies (J) at which HiGHS's absolute tolerances (1e-7 on a
#: constraint, 1e-6 on the MIP gap) are already fine relative to the problem: plans of
#: 0.125 s to 2.3 h and 1 J to 1 GJ are modelled in seconds and joules as given, so
#: that the usual problems solve exactly as they always did.
WELL_SCALED_S = (2.0**-3, 2.0**13)
WELL_SCALED_J = (2.0**0, 2.0**30)


def _unit(x: float, well: tuple[float, float]) -> float:
    """1 when |x| lies in `well`, else the power of two nearest to |x| (1 for 0 or nan)."""
    x = abs(x)
    if not (math.isfinite(x) and x > 0) or well[0] <= x <= well[1]:
        return 1.0
    return 2.0 ** round(math.log2(x))


def scaled(ip: IndexedProblem) -> IndexedProblem:
    """`ip` in units about the all-fastest plan's makespan and energy (powers of two)
    where those lie outside `WELL_SCALED_S` / `WELL_SCALED_J`, so that every model built
    from it has numbers HiGHS's tolerances suit (`IndexedProblem.rescaled`).

    Built once and kept on `ip`.
    """
    cached = ip.__dict__.get("_scaled")
    if cached is None:
        modes = _all_fastest(ip)
        ev = ip.evaluate(modes)
        longest = max((float(np.max(d)) for d in ip.durations if len(d)), default=0.0)
        time_unit = _unit(ev.makespan or longest, WELL_SCALED_S)
        reference = max(abs(ev.energy), ev.task_energy, ip.idle_total_w * ev.makespan)
        energy_unit = _unit(reference, WELL_SCALED_J)
        cached = ip if time_unit == energy_unit == 1.0 else ip.rescaled(time_unit, energy_unit)
        ip._scaled = cached  # type: ignore[attr-defined]
    return cached  # type: ignore[no-any-return]


def _all_fastest(ip: IndexedProblem) -> list[int]:
    """Every task's fastest mode (ties: the cheapest)."""
    return [int(np.lexsort((ip.costs[i], ip.durations[i]))[0]) for i in range(ip.n)]


def fastest_plan(ip: IndexedProblem) -> tuple[float, list[int]]:
    """The fastest makespan (s) and a cheapest-possible assignment achieving it.

    Every task in its fastest mode is exact unless groups or transition costs forbid
    that combination; then the exact model is solved for the shortest makespan, on the
    scaled problem and to a zero gap, and compared with the all-fastest plan paying its
    setting changes (never slower than the plan every task at its fastest gives).
    """
    modes = _all_fastest(ip)
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
    watch: Watch | None = None,
) -> tuple[list[int], float, str]:
    """Relax method: (modes, bound, solver description).

    Times (deadline, t_fast) and the bound are in `ip`'s units.
    """
    if ip.coupled:
        if _milp_build_s(_milp_columns(ip)) > 0.5 * time_limit:
            # Building the relaxation through PuLP would take most of the limit.
            modes = local_search(ip, fast, deadline, max(0.0, time_limit), watch=watch)
            return modes, math.nan, NO_TIME_TO_BUILD
        modes, bound = relax_coupled(ip, deadline, fast, time_limit=time_limit, watch=watch)
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
        res = relax_search(lp, deadline, t_fast, time_limit=left, watch=watch)
    except TimeLimitReached:
        # No LP optimum in time, so no bound: the fastest plan, improved by exact
        # slack-to-energy moves with whatever time is left.
        modes = improve(ip, fast, deadline, time_limit=max(0.0, stop_at - time.perf_counter()))
        rest = stop_at - time.perf_counter()
        if rest > 0:
            modes = perturb_search(ip, modes, deadline, time_limit=rest, watch=watch)
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


#: A gap this small is float noise (HiGHS's feasibility tolerances on a scaled model):
#: a plan this close to its bound counts as optimal whatever gap was asked for.
NUMERIC_GAP = 1e-6


def solve(
    problem: Problem,
    deadline: float | None = None,
    method: str = "auto",
    time_limit: float = 60.0,
    gap: float = 1e-4,
    stop: StopRule | None = None,
) -> Solution:
    """Minimum-energy assignment of modes whose makespan meets `deadline`.

    Every model is built in units about the problem's own makespan and energy
    (`scaled`), so that solver tolerances mean the same for elements of microseconds
    and of hours.

    Args:
        problem: the problem.
        deadline: s; None finds the energy-minimizing makespan.
        method: ``"relax"`` (LP relaxation, rounding, improvement, then iterated
            improvement; gap reported), ``"milp"`` (exact, within `time_limit`) or
            ``"auto"``: relax with `AUTO_RELAX_SHARE` of the time; then windows of
            tasks re-optimized by a MILP (`solvers.lns`, uncoupled problems) with
            `AUTO_LNS_SHARE` of the rest; then the full MILP warm-started from the best
            plan, when it can be built in time (its bound often tightens the gap).
            Above `LARGE_COLUMNS` modes auto is relax with all the time.
        time_limit: s of wall time, the hard cap (model building can add a little).
        gap: relative optimality gap that counts as optimal.
        stop: when to stop before the time limit (`solvers.stopping.StopRule`). By
            default relax and auto stop once the certified gap is ≤ 0.1 %, or once a
            search that improves a finished plan gains ≤ 0.01 % over a window; milp,
            the exact method, runs to `gap` or the time limit
            (`solvers.stopping.RUN_TO_LIMIT`, which the others take too).

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
    t0 = time.perf_counter()
    if method not in METHODS:
        raise ProblemError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    if not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ProblemError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    if not (isinstance(gap, (int, float)) and 0 <= gap < 1):
        raise ProblemError(f"gap must be a fraction in [0, 1), got {gap!r}")
    deadline = _check_deadline(deadline)
    original = indexed(problem)
    t_fast, fast = fastest_plan(original)
    if deadline is not None and not meets(t_fast, deadline):
        raise InfeasibleDeadline(deadline, t_fast)
    # Every stage works on the scaled problem; the plan is evaluated in s and J at the end.
    ip = scaled(original)
    units = (ip.time_unit, ip.energy_unit)
    at = None if deadline is None else deadline / units[0]
    if stop is None:
        stop = RUN_TO_LIMIT if method == "milp" else StopRule()
    watch = Watch(rule=stop, started=t0)
    notes: list[str] = []
    state = _State(modes=list(fast), energy=ip.evaluate(fast, at).energy)
    watch.offer(state.energy, fast)
    try:
        _search(ip, at, method, time_limit, gap, t0, t_fast / units[0], state, watch, notes)
    except KeyboardInterrupt:
        # Ctrl-C: keep the cheapest plan seen (the stage that was running may have held
        # a cheaper one than the last stage handed back).
        watch.interrupted = True
    if watch.interrupted:  # (a MILP stopped by Ctrl-C returns normally) whatever came first
        watch.reason, watch.detail = "interrupted", "interrupted (Ctrl-C)"
    spent = time.perf_counter() - t0
    # The stages stop `reserve` s before the limit (see `_search`), or by their own
    # clocks a little earlier.
    out_of_time = state.status == "time_limit" or spent >= 0.98 * time_limit - _reserve(time_limit)
    if watch.modes is not None and watch.modes_energy < state.energy:
        state.modes, state.energy = watch.modes, watch.modes_energy
    modes = state.modes
    # Never hand out a late plan, or one that splits a group across settings.
    if not meets(original.evaluate(modes).makespan, deadline) or not groups_consistent(
        original, modes
    ):
        modes = fast
        notes.append("fell back to the fastest plan")
    bound = state.bound * units[1]
    sol = build_solution(
        original,
        modes,
        deadline,
        status=state.status,
        lower_bound=bound,
        solver=state.solver or solver_name(),
        method=method,
        wall_time_s=time.perf_counter() - t0,
    )
    # The status follows the plan's own gap, whatever a solver said about its model.
    optimal = sol.gap <= max(gap, NUMERIC_GAP)
    if watch.reason == "interrupted":
        status, reason, detail = "interrupted", "interrupted", watch.detail
    elif optimal:
        status, reason, detail = "optimal", "optimal", f"gap {sol.gap:.3%} ≤ {gap:.3%}"
    elif watch.reason == "gap":
        status, reason, detail = "feasible", "gap", watch.detail
    elif out_of_time:
        status, reason, detail = "time_limit", "time_limit", f"the time limit of {time_limit:g} s"
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
        wall_time_s=time.perf_counter() - t0,
    )


def _reserve(time_limit: float) -> float:
    """s kept back from the stages for reading and checking the final plan."""
    return min(1.0, 0.01 * time_limit)


@dataclass
class _State:
    """The plan a solve holds between its stages (energies and bound in scaled units)."""

    modes: list[int]
    energy: float
    bound: float = math.nan
    status: str = "feasible"
    solver: str = ""


def _search(
    ip: IndexedProblem,
    deadline: float | None,
    method: str,
    time_limit: float,
    gap: float,
    t0: float,
    t_fast: float,
    state: _State,
    watch: Watch,
    notes: list[str],
) -> None:
    """The stages of `solve` on the scaled problem; `state` holds the best plan.

    Args:
        ip: the scaled problem.
        deadline: in `ip`'s time unit, or None.
        method, time_limit, gap: as in `solve`.
        t0: `time.perf_counter()` at the start of the solve.
        t_fast: the fastest makespan, in `ip`'s time unit.
        state: the best plan so far, updated in place.
        watch: the solve's watch (stop rule, Ctrl-C).
        notes: messages for the solution, appended to.
    """

    def elapsed() -> float:
        return time.perf_counter() - t0

    reserve = _reserve(time_limit)

    def left() -> float:
        return time_limit - reserve - elapsed()

    def gap_ok(energy: float) -> bool:
        return relative_gap(energy, state.bound) <= max(gap, NUMERIC_GAP)

    def take(modes: list[int], solver: str) -> bool:
        """Keep `modes` when it meets the deadline and is no dearer; True if kept."""
        ev = ip.evaluate(modes, deadline)
        if not meets(ev.makespan, deadline) or ev.energy > state.energy:
            return False
        state.modes, state.energy, state.solver = list(modes), ev.energy, solver
        watch.offer(ev.energy, modes)
        return True

    def bound(value: float) -> None:
        if not math.isnan(value):
            state.bound = value if math.isnan(state.bound) else max(state.bound, value)
            watch.offer_bound(state.bound)

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
    else:
        budget = left() if method == "relax" or large else AUTO_RELAX_SHARE * time_limit - elapsed()
        modes, value, solver = _relax(ip, deadline, state.modes, t_fast, budget, watch=watch)
        bound(value)
        take(modes, solver)
        state.solver = solver
        if gap_ok(state.energy):
            return
        if solver in (LP_OUT_OF_TIME, NO_TIME_TO_BUILD):
            state.status = "time_limit"
            notes.append("no lower bound within the time limit")
    if method != "milp":
        watch.arm()  # the relax search may have ended before its improvement stage
        if watch.should_stop():
            return  # Ctrl-C, the stop gap or a stall: nothing more worth searching for
    if method == "auto" and not (ip.coupled or large) and left() > 0.5:
        better = lns(ip, state.modes, deadline, time_limit=AUTO_LNS_SHARE * left(), watch=watch)
        take(better, state.solver + " + MILP windows")
        if gap_ok(state.energy) or watch.should_stop():
            return
    run_milp = method == "milp" or (
        method == "auto"
        and not large
        and left() > 0.5
        # Building the MILP through PuLP must take under half of the time left.
        and _milp_build_s(columns) < 0.5 * left()
    )
    if not run_milp:
        return
    watch.arm()
    # auto starts from its best plan; milp from the fastest one (the state's plan).
    handover = _milp_build_s(columns)  # PuLP's hand-over to HiGHS and back, off its clock
    res = solve_milp(
        ip,
        deadline,
        time_limit=max(0.1, left() - handover),
        gap=gap,
        warm=state.modes,
        watch=watch,
    )
    name = f"{res.solver} MILP"
    bound(res.bound)
    if res.modes is not None:
        solver = name if method == "milp" else f"{state.solver}, then {name}"
        late = not meets(ip.evaluate(res.modes).makespan, deadline)
        if late and deadline is not None and not ip.coupled:
            # HiGHS accepts integrality within 1e-6, so its plan can overrun the deadline
            # by about a millionth: speed up what is critical, then spend the slack.
            fixed = improve(ip, repair(ip, res.modes, deadline), deadline, time_limit=1.0)
            if take(fixed, solver + " (repaired to the deadline)"):
                notes.append(f"{name} plan missed the deadline by its tolerance; repaired")
        elif not take(res.modes, solver) and late:
            notes.append(f"{name} plan missed the deadline by its tolerance; not used")
    elif res.message:
        notes.append(res.message)
    if method == "milp" and not state.solver:
        state.solver = name
    if math.isnan(state.bound) and not ip.coupled:
        lp = HullLP(ip)
        lp.set_deadline(deadline)
        lp_point = lp.solve()
        if lp_point is not None:
            bound(lp_point.energy_bound(ip, deadline))
    if res.status == "time_limit" and not gap_ok(state.energy):
        state.status = "time_limit"
