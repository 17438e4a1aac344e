"""The plan-level time–energy frontier, from the fastest makespan to the energy-minimizing one.

Each point is a plan solved at one deadline and evaluated with its real durations; the
points are Pareto-filtered (makespan rising, energy falling). Deadlines start on an even
grid; while fewer points than asked are kept, the widest makespan gaps between kept
points are searched: first at their middle, then just below their slower end (the
slowest plan faster than that end, which is a new point whenever one exists in the
gap), until the count is reached or every gap is known to hold no plan.

For problems without groups or transition costs the hull LP is built once. The
energy-minimizing end is found first, by the search `solve(problem, None)` runs, on the
fresh LP; the plans that search passes through are candidate points too. The grid is
then swept from the fastest end up (`solvers.frontier_sweep`): each deadline gets the
previous plan with its new slack spent, and an LP step (a warm re-solve, rounding,
improvement) only where that brings no new plan.

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
from solvers.frontier_sweep import CHEAP_STEP_SPACING, EndWatch, Plan, SweepStep, sweep_grid
from solvers.incumbent import Incumbent
from solvers.indexed import indexed, meets
from solvers.lns import reoptimize
from solvers.lp import HullLP
from solvers.milp import ExactModel, milp_columns
from solvers.perturb import perturb_search
from solvers.problem import Problem
from solvers.relax import relax_once
from solvers.scaling import scaled
from solvers.solution import Solution, build_solution, relative_gap
from solvers.solve import METHODS, default_work_s, fastest_plan, solve
from solvers.stages import relax_stages
from solvers.stopping import RUN_TO_LIMIT, StopRule

#: Problems with at most this many Pareto modes in all (the exact model's binaries) are
#: solved exactly at every frontier deadline: HiGHS solves such models in milliseconds.
EXACT_COLUMNS = 200

#: s, at most, of one exact solve of a frontier point (the point keeps the LP rounding's
#: plan when HiGHS finds nothing better by then).
EXACT_POINT_S = 1.0

#: s, at most, of the search at the fastest end of the frontier (the points between the
#: ends are single steps; the energy-minimizing end runs `solve(problem, None)`'s search,
#: `END_STALL_MIN_S`).
END_POINT_S = 1.5

#: Steps in a row without a cheaper plan after which the iterated improvement at the
#: fastest end (one LP step, then `solvers.perturb.perturb_search`) stops: on 8 × 32
#: 11 391.2 J in 0.08 s (50 steps: 11 384.6 J in 0.4 s; the LP step alone: 11 405.2 J).
FAST_END_PATIENCE = 25

#: Reference seconds of work (`solvers.budget.WorkMeter`): the stall window of the
#: energy-minimizing end's search, `solve(problem, None)`'s own with this window in place
#: of `solvers.stopping.STALL_MIN_S`: it stops on the way to that solve's plan
#: (``lowtime_bench/s8_m32_u1ms``: 10 410.28 J against 10 409.58 J, +0.0067 %); where
#: the window's share of the time spent governs, at that plan itself (8 × 32 × 30).
END_STALL_MIN_S = 1.0

#: Deadlines on the first even grid, per point asked for; `_fill` searches the gaps
#: between kept points for the rest (on 8 × 32 with 1.1 the gaps took 0.8 s more).
GRID_PER_POINT = 1.2

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
            any load. The energy-minimizing end has `solve`'s own budget of work
            (`solvers.solve.default_work_s`; its stall rule ends it far sooner).

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

    step = SweepStep(ip, lp) if lp is not None else None
    lp_solver = f"{lp_name} + rounding"
    seeded_solver = f"local search from the previous point ({lp_name} bound, later deadline)"

    def point(plan: Plan, deadline: float | None, t0: Budget) -> Solution:
        """A sweep plan as a frontier point (`deadline` in s)."""
        return wrap(plan.modes, deadline, plan.bound, lp_solver if plan.lp else seeded_solver, t0)

    lp_bounds: list[tuple[float, float]] = []  # (scaled deadline, LP bound) solved so far

    def lp_bound(deadline: float | None) -> float:
        """A certified bound at `deadline` (scaled) without an LP solve: the best bound
        solved at a deadline no tighter (the LP bound falls as the deadline grows), or
        the bound without a deadline."""
        floor = ends[0] if ends else math.nan
        if deadline is None:
            return floor
        later = [b for d, b in lp_bounds if d >= deadline and not math.isnan(b)]
        return max(later) if later else floor

    def at(deadline: float | None, start: Solution | None = None) -> Solution:
        """The plan at one deadline; `start` (a plan meeting it) seeds the search."""
        t0 = Budget.unlimited()
        if step is None:
            return tightened(solved(deadline), deadline)
        scaled_deadline = None if deadline is None else deadline / time_unit
        plan = seeded = None
        if start is not None:
            first = step.plan([start.modes[n] for n in original.names])
            seeded = step.seeded(scaled_deadline, first)
            # As in the sweep: close to `start`, the LP step only where `start` improved
            # brings nothing new.
            near = deadline is not None and (
                deadline - start.makespan <= CHEAP_STEP_SPACING * t_fast
            )
            if near and seeded.modes != first.modes:
                plan = seeded
                plan.bound = lp_bound(scaled_deadline)
        if plan is None:
            plan, bound = step.with_lp(scaled_deadline, seeded)
            if scaled_deadline is not None:
                lp_bounds.append((scaled_deadline, bound))
        if plan is None:  # only at the fastest makespan, by float rounding in the LP
            return tightened(solved(deadline), deadline)
        return tightened(point(plan, deadline, t0), deadline)

    def end(deadline: float | None) -> Solution:
        """A plan at an end of the frontier (None: the energy-minimizing end)."""
        if lp is None:
            return tightened(solved(deadline), deadline)
        if deadline is not None:
            return fastest_end(deadline)
        return cheapest_end()

    def cheapest_end() -> Solution:
        """The energy-minimizing end: the search `solve(problem, None)` runs (its budget,
        this fresh LP, its stop rule with the shorter window `END_STALL_MIN_S`), so that
        the frontier ends on its way to that plan. The plans it passes through are kept
        in `trail` as candidate points."""
        assert lp is not None
        budget = Budget.of(per_point) if on_wall else Budget.of_work(default_work_s(ip.n))
        watch = EndWatch(
            rule=StopRule(stall_min_s=END_STALL_MIN_S), clock=budget.clock, started=budget.started
        )
        inc = Incumbent.start(ip, None, fast, watch)
        relax_stages(ip, inc, t_fast / time_unit, budget.child(keep=0.0), lp=lp)
        trail.extend(watch.plans)
        ends.append(inc.bound)
        return tightened(wrap(inc.modes, None, inc.bound, inc.solver, budget), None)

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

    trail: list[list[int]] = []  # plans the energy-minimizing end's search passed through
    ends: list[float] = []  # its bound (the LP without a deadline), scaled
    cheapest = end(None)
    t_end = cheapest.makespan
    plans = [end(t_fast), cheapest]
    if t_end > t_fast * (1 + 1e-9):
        plans += _trail_points(trail, exact is None, ends, wrap)
        deadlines = np.linspace(t_fast, t_end, math.ceil(num_points * GRID_PER_POINT))[1:-1]
        if step is not None:
            t0 = Budget.unlimited()
            start = step.plan([plans[0].modes[n] for n in original.names])
            floor = ends[0] if ends and not math.isnan(ends[0]) else math.nan
            last: list[int] | None = None
            for d, plan in sweep_grid(step, deadlines / time_unit, start, floor):
                if plan.lp:
                    lp_bounds.append((d, plan.bound))
                if plan.modes == last and exact is None:
                    continue  # the plan before, at a looser deadline: filtered out anyway
                last = plan.modes
                plans.append(tightened(point(plan, d * time_unit, t0), d * time_unit))
        else:
            prev = plans[0]
            for d in deadlines:
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


def _trail_points(
    trail: list[list[int]],
    use: bool,
    ends: list[float],
    wrap: Callable[[list[int], float | None, float, str, Budget], Solution],
) -> list[Solution]:
    """The plans the energy-minimizing end's search passed through, as points at their
    own makespans (bound: the LP without a deadline, certified at every deadline).

    None on small problems (`use` False): there every point must be the exact optimum
    at its makespan, and these are not solved exactly.
    """
    if not use or not ends:
        return []
    seen: set[tuple[int, ...]] = set()
    out = []
    t0 = Budget.unlimited()
    for modes in trail:
        key = tuple(modes)
        if key in seen:
            continue
        seen.add(key)
        sol = wrap(modes, None, ends[0], "the energy-minimizing end's search", t0)
        out.append(replace(sol, deadline=sol.makespan))
    return pareto_filter(out)


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
