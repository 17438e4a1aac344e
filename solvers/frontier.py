"""The plan-level time–energy frontier, from the fastest makespan to the energy-minimizing one.

Each point is a plan solved at one deadline and evaluated with its real durations; the
points are Pareto-filtered (makespan rising, energy falling). Deadlines start on an even
grid; while fewer points than asked are kept, the widest makespan gaps between kept
points are searched: first at their middle, then just below their slower end (the
slowest plan faster than that end, which is a new point whenever one exists in the
gap), until the count is reached or every gap is known to hold no plan. For problems
without groups or transition costs the hull LP is built once and re-solved warm at every
deadline.

Small problems (at most `EXACT_COLUMNS` Pareto modes in all) are solved exactly at every
deadline, by the MILP as well as by the LP rounding: a point is then the optimum at its
own makespan, and a gap found empty holds no plan. (With the LP rounding alone, points
on random 9-task DAGs sat up to 23 % above the optimum at their makespan, and frontiers
ended with fewer points than there were Pareto plans.)

Accounting: a frontier compares plans by their own makespan, so devices are held to the
makespan (``hold="deadline"`` gives the same energy when the deadline is the makespan).
Every model works on the scaled problem (`solvers.solve.scaled`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from solvers.budget import Budget
from solvers.exceptions import ProblemError, TimeLimitReached
from solvers.indexed import indexed, meets
from solvers.lns import reoptimize
from solvers.lp import HullLP
from solvers.milp import ExactModel, milp_columns
from solvers.perturb import perturb_search
from solvers.problem import Problem
from solvers.relax import relax_once
from solvers.scaling import scaled
from solvers.solution import Solution, build_solution, relative_gap
from solvers.solve import METHODS, fastest_plan, solve
from solvers.stages import relax_plan
from solvers.stopping import RUN_TO_LIMIT

#: Problems with at most this many Pareto modes in all (the exact model's binaries) are
#: solved exactly at every frontier deadline: HiGHS solves such models in milliseconds.
EXACT_COLUMNS = 200

#: s, at most, of one exact solve of a frontier point (the point keeps the LP rounding's
#: plan when HiGHS finds nothing better by then).
EXACT_POINT_S = 1.0

#: s, at most, of the search at the fastest end of the frontier (the points between the
#: ends are single LP steps; the energy-minimizing end searches until its iterated
#: improvement runs out of patience, within the time per point, so that the frontier
#: ends at the plan `solve(problem, None)` finds).
END_POINT_S = 1.5

#: Steps in a row without a cheaper plan after which the iterated improvement at the
#: fastest end stops (`solvers.perturb.perturb_search`). The end is one LP step and
#: this search, counted in steps rather than seconds so that a loaded machine gets the
#: same plan. On 8 × 32: 11 391.2 J in 0.08 s (50 steps: 11 384.6 J in 0.4 s; the full
#: relax search: 11 383.2 J in 1.5 s; the LP step alone: 11 405.2 J; LP bound
#: 11 317.4 J). The end only anchors the sweep; the points after it are single steps.
FAST_END_PATIENCE = 25

#: Deadlines on the first even grid, per point asked for; `_fill` searches the gaps
#: between kept points for the rest.
GRID_PER_POINT = 1.3

#: Relative step below a kept point's makespan where the next slower plan is looked
#: for: ten times the solvers' feasibility tolerance, so that the point itself does not
#: count as meeting the deadline.
BELOW = 1e-6


def pareto_filter(solutions: list[Solution]) -> list[Solution]:
    """Keep the plans no other plan beats in both makespan and energy, by makespan."""
    ordered = sorted(solutions, key=lambda s: (s.makespan, s.energy))
    kept: list[Solution] = []
    for s in ordered:
        if kept and s.energy >= kept[-1].energy - 1e-12 * max(1.0, abs(s.energy)):
            continue
        if kept and s.makespan <= kept[-1].makespan:
            kept[-1] = s  # same makespan, cheaper
            continue
        kept.append(s)
    return kept


def frontier(
    problem: Problem,
    num_points: int = 100,
    method: str = "relax",
    time_limit_per_point: float | None = None,
    *,
    work_per_point: float = 10.0,
) -> list[Solution]:
    """Time–energy frontier of whole plans.

    Args:
        problem: the problem.
        num_points: points wanted (at least; fewer only when the search finds no more
            distinct Pareto plans between the two ends, or after solving four times as
            many deadlines; small problems are searched exactly, so fewer means fewer
            exist).
        method: ``"relax"``, ``"milp"`` or ``"auto"``, as in `solve`.
        time_limit_per_point: s of wall time per deadline; None (or inf): no wall
            limit, each point runs on `work_per_point` instead.
        work_per_point: without a time limit, the work per deadline, in reference
            seconds (`solvers.budget.WorkMeter`): the same frontier on any machine at
            any load.

    Returns:
        Feasible plans sorted by makespan, energy strictly falling: from a plan at the
        fastest makespan to the energy-minimizing one. Each carries the deadline it was
        solved for and that deadline's lower bound.

    Raises:
        ProblemError: malformed problem or arguments.
    """
    if method not in METHODS:
        raise ProblemError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    if not isinstance(num_points, int) or num_points < 2:
        raise ProblemError(f"num_points must be an integer >= 2, got {num_points!r}")
    if problem.hold != "makespan":
        problem = replace(problem, hold="makespan")
    original = indexed(problem)
    t_fast, fast = fastest_plan(original)
    ip = scaled(original)
    time_unit, energy_unit = ip.time_unit, ip.energy_unit
    lp = None if ip.coupled or method != "relax" else HullLP(ip)
    lp_name = "HiGHS LP" if lp is None or lp.method == "highs" else "network LP"
    small = milp_columns(ip) <= EXACT_COLUMNS
    exact = ExactModel(ip, None) if small and not ip.coupled and method != "milp" else None
    on_wall = time_limit_per_point is not None and math.isfinite(time_limit_per_point)
    per_point = float(time_limit_per_point) if on_wall else float(work_per_point)
    exact_s = min(EXACT_POINT_S, per_point)

    def budget_of(seconds: float) -> Budget:
        """A point's budget: wall seconds under a time limit, else work."""
        return Budget.of(seconds) if on_wall else Budget.of_work(seconds)

    def wrap(
        modes: list[int], deadline: float | None, bound: float, solver: str, t0: Budget
    ) -> Solution:
        """A frontier point: `modes` evaluated in s and J; `bound` in scaled units."""
        return build_solution(
            original,
            modes,
            deadline,
            status="feasible",
            lower_bound=bound * energy_unit,
            solver=solver,
            method=method,
            wall_time_s=t0.wall_elapsed(),
        )

    def solved(deadline: float | None) -> Solution:
        """`solve` at one deadline, searching to its limit (no early stop: a frontier
        point is worth its whole time)."""
        limit = exact_s if small and method != "milp" else per_point
        exact = "milp" if small else method
        sol = solve(
            problem,
            deadline,
            method=exact,
            time_limit=limit if on_wall else None,
            stop=RUN_TO_LIMIT,
            work_limit=limit,
        )
        if sol.status == "interrupted":
            raise KeyboardInterrupt  # `solve` kept its plan; the frontier stops as a whole
        return sol

    def tightened(sol: Solution, deadline: float | None) -> Solution:
        """On small uncoupled problems, `sol` or the exact MILP's plan, the cheaper, with
        the better of the two bounds."""
        if exact is None:
            return sol
        t0 = budget_of(exact_s)
        exact.set_deadline(None if deadline is None else deadline / time_unit)
        exact.tighten(1e-9)
        start = [sol.modes[name] for name in original.names]
        modes = reoptimize(exact, start, np.ones(ip.n, dtype=bool), t0)
        # HiGHS's bound at this deadline (devices held to the makespan: no offset).
        dual = exact.model.dual_bound() * energy_unit
        bound = sol.lower_bound
        if math.isfinite(dual):
            bound = dual if math.isnan(bound) else max(bound, dual)
        if modes is not None:
            ev = original.evaluate(modes)
            if meets(ev.makespan, deadline) and ev.energy < sol.energy:
                return wrap(modes, deadline, bound / energy_unit, "HiGHS MILP", t0)
        return replace(
            sol,
            lower_bound=min(bound, sol.energy),
            gap=relative_gap(sol.energy, min(bound, sol.energy)),
        )

    def at(deadline: float | None, start: Solution | None = None) -> Solution:
        """The plan at one deadline; `start` (a plan meeting it) seeds the search."""
        t0 = Budget.unlimited()
        if lp is None:
            return tightened(solved(deadline), deadline)
        seeds = [[start.modes[name] for name in original.names]] if start is not None else []
        scaled_deadline = None if deadline is None else deadline / time_unit
        res = relax_once(lp, scaled_deadline, seeds)
        if res is None:  # only at the fastest makespan, by float rounding in the LP
            return tightened(solved(deadline), deadline)
        sol = wrap(res.modes, deadline, res.bound, f"{lp_name} + rounding", t0)
        return tightened(sol, deadline)

    def end(deadline: float | None) -> Solution:
        """A plan at an end of the frontier (None: the energy-minimizing end)."""
        if lp is None:
            return tightened(solved(deadline), deadline)
        if deadline is not None:
            return fastest_end(deadline)
        # The energy-minimizing end runs the whole relax search until it stalls (as
        # `solve(problem, None)` does), so that the frontier ends at the same plan.
        t0 = budget_of(per_point)
        inc = relax_plan(ip, None, fast, t_fast / time_unit, t0, lp=lp)
        return tightened(wrap(inc.modes, None, inc.bound, inc.solver, t0), None)

    def fastest_end(deadline: float) -> Solution:
        """The plan at the fastest makespan: one LP step from the fastest plan, then
        iterated improvement until `FAST_END_PATIENCE` steps bring nothing."""
        assert lp is not None
        t0 = budget_of(min(per_point, END_POINT_S))
        # The LP step gets the end's time too: a cold LP of thousands of tasks can take
        # longer, and the fastest plan itself then starts the search, without a bound.
        lp.budget = t0
        try:
            res = relax_once(lp, deadline / time_unit, [fast])
            if res is None:  # the LP says infeasible: only by float rounding
                return tightened(solved(deadline), deadline)
            start, bound, solver = res.modes, res.bound, f"{lp_name} + rounding + local search"
        except TimeLimitReached:
            start, bound, solver = list(fast), math.nan, "fastest plan + local search"
        finally:
            lp.budget = None
        modes = perturb_search(ip, start, deadline / time_unit, t0, patience=FAST_END_PATIENCE)
        return tightened(wrap(modes, deadline, bound, solver, t0), deadline)

    cheapest = end(None)
    t_end = cheapest.makespan
    plans = [end(t_fast), cheapest]
    if t_end > t_fast * (1 + 1e-9):
        prev = plans[0]
        for d in np.linspace(t_fast, t_end, math.ceil(num_points * GRID_PER_POINT))[1:-1]:
            prev = at(float(d), prev)
            plans.append(prev)
        plans = _fill(plans, num_points, at)
    out = pareto_filter(plans)
    # Every point must meet its own deadline; the status reflects its gap.
    return [
        replace(s, status="optimal" if s.gap <= 1e-4 else s.status)
        for s in out
        if meets(s.makespan, s.deadline)
    ]


def _fill(
    plans: list[Solution], num_points: int, at: Callable[[float, Solution], Solution]
) -> list[Solution]:
    """Search the gaps between kept points until `num_points` are kept.

    A gap (lo, hi) between consecutive kept points is searched first at its middle
    deadline, then just below `hi` (`BELOW`): the plan found there is the slowest one
    faster than `hi`, so if it is no new point, the gap holds none (exactly so where
    every deadline is solved exactly). Widest gaps first; at most four times the points
    asked for are solved in all.
    """
    plans = list(plans)
    tried: dict[tuple[float, float], int] = {}  # gap → searches done (0, 1, 2 = empty)
    while len(plans) < 4 * num_points:
        kept = pareto_filter(plans)
        need = num_points - len(kept)
        if need <= 0:
            break
        gaps = [
            (kept[j + 1].makespan - kept[j].makespan, j)
            for j in range(len(kept) - 1)
            if tried.get((kept[j].makespan, kept[j + 1].makespan), 0) < 2
            and kept[j + 1].makespan - kept[j].makespan > BELOW * kept[j + 1].makespan
        ]
        if not gaps:
            break
        gaps.sort(reverse=True)
        for _, j in gaps[:need]:
            lo, hi = kept[j], kept[j + 1]
            key = (lo.makespan, hi.makespan)
            step = tried.get(key, 0)
            deadline = 0.5 * (lo.makespan + hi.makespan) if step == 0 else hi.makespan * (1 - BELOW)
            new = at(deadline, lo)
            plans.append(new)
            found = lo.makespan < new.makespan < hi.makespan and new.energy < lo.energy
            # A gap where the middle found nothing is searched below its end next; one
            # where that found nothing too is done.
            tried[key] = 2 if found or step == 1 else 1
            if found:
                tried[key] = 2  # split: its two halves are new gaps
    return plans
