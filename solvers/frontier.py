"""The plan-level time–energy frontier, from the fastest makespan to the energy-minimizing one.

Each point is a plan solved at one deadline and evaluated with its real durations; the
points are Pareto-filtered (makespan rising, energy falling). Deadlines start on an even
grid; where filtering leaves too few points, the widest makespan gaps are bisected. For
problems without groups or transition costs the hull LP is built once and re-solved
warm at every deadline.

Accounting: a frontier compares plans by their own makespan, so devices are held to the
makespan (``hold="deadline"`` gives the same energy when the deadline is the makespan).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from solvers.exceptions import ProblemError
from solvers.indexed import indexed, meets
from solvers.lp import HullLP
from solvers.problem import Problem
from solvers.relax import relax_once
from solvers.solution import Solution, build_solution
from solvers.solve import METHODS, _relax, fastest_plan, solve


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
    time_limit_per_point: float = 10.0,
) -> list[Solution]:
    """Time–energy frontier of whole plans.

    Args:
        problem: the problem.
        num_points: points wanted (at least; fewer only when fewer distinct Pareto
            plans exist between the two ends).
        method: ``"relax"``, ``"milp"`` or ``"auto"``, as in `solve`.
        time_limit_per_point: s per deadline.

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
    ip = indexed(problem)
    t_fast, fast = fastest_plan(ip)
    lp = None if ip.coupled or method != "relax" else HullLP(ip)

    def at(deadline: float | None, start: Solution | None = None) -> Solution:
        """The plan at one deadline; `start` (a plan meeting it) seeds the search."""
        t0 = time.perf_counter()
        if lp is None:
            return solve(problem, deadline, method=method, time_limit=time_limit_per_point)
        seeds = [[start.modes[name] for name in ip.names]] if start is not None else []
        res = relax_once(lp, deadline, seeds)
        if res is None:  # only at the fastest makespan, by float rounding in the LP
            return solve(problem, deadline, method=method, time_limit=time_limit_per_point)
        return build_solution(
            ip,
            res.modes,
            deadline,
            status="feasible",
            lower_bound=res.bound,
            solver="HiGHS LP + rounding",
            method=method,
            wall_time_s=time.perf_counter() - t0,
        )

    def end(deadline: float | None) -> Solution:
        """A plan at an end of the frontier, with the full relax effort."""
        if lp is None:
            return solve(problem, deadline, method=method, time_limit=time_limit_per_point)
        t0 = time.perf_counter()
        # The ends get the full search: they anchor the sweep. The energy-minimizing
        # end runs until the search stalls (as `solve(problem, None)` does), so that
        # the frontier ends at the same plan.
        limit = time_limit_per_point if deadline is None else min(time_limit_per_point, 1.5)
        modes, bound, solver = _relax(ip, deadline, fast, t_fast, limit, lp=lp)
        return build_solution(
            ip,
            modes,
            deadline,
            status="feasible",
            lower_bound=bound,
            solver=solver,
            method=method,
            wall_time_s=time.perf_counter() - t0,
        )

    cheapest = end(None)
    t_end = cheapest.makespan
    plans = [end(t_fast), cheapest]
    if t_end > t_fast * (1 + 1e-9):
        prev = plans[0]
        for d in np.linspace(t_fast, t_end, math.ceil(num_points * 1.3))[1:-1]:
            prev = at(float(d), prev)
            plans.append(prev)
        for _ in range(50):
            kept = pareto_filter(plans)
            # Bounded work: at most four times the points asked for are solved.
            if len(kept) >= num_points or len(plans) >= 4 * num_points:
                break
            spans = np.diff([s.makespan for s in kept])
            if len(spans) == 0:
                break
            need = num_points - len(kept)
            widest = np.argsort(spans)[::-1][: max(1, need)]
            added = 0
            for j in widest:
                lo, hi = kept[j].makespan, kept[j + 1].makespan
                if hi - lo <= 1e-9 * max(1.0, hi):
                    continue
                plans.append(at(0.5 * (lo + hi), kept[j]))
                added += 1
            if not added:
                break
    out = pareto_filter(plans)
    # Every point must meet its own deadline; the status reflects its gap.
    return [
        replace(s, status="optimal" if s.gap <= 1e-4 else s.status)
        for s in out
        if meets(s.makespan, s.deadline)
    ]
