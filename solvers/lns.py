"""Large-neighbourhood search: re-optimize windows of tasks exactly with a MILP.

The exact model (`solvers.milp.ExactModel`) is built once. Each step frees the tasks of
one window — consecutive in the current schedule — pins every other task to its current
mode through variable bounds, and lets HiGHS find the best modes for the window within
a short time limit (presolve removes the pinned part). A window's result is kept when it
is cheaper, evaluated exactly with the real durations. Sweeps repeat until one brings
nothing.

Assumptions:
    No groups and no transition costs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solvers.budget import Budget
from solvers.indexed import IndexedProblem, meets
from solvers.milp import ExactModel
from solvers.stopping import Watch

#: Relative gap of each window solve (relative to the whole plan's energy): windows are
#: many and short; one that comes back worse is simply not taken.
WINDOW_GAP = 1e-4


def reoptimize(
    exact: ExactModel, modes: Sequence[int], free: np.ndarray, budget: Budget
) -> list[int] | None:
    """Best modes for the free tasks with the others pinned; None if nothing found.

    No warm start: HiGHS 1.16 can hand back the given solution unchanged, with another
    solution's objective, when presolve does most of the work — and presolve is what
    makes a window cheap. Every result is checked by the caller anyway.
    """
    exact.pin(modes, free)
    exact.model.run(max(0.01, budget.remaining()), budget=budget)
    if not exact.model.has_solution():
        return None
    chosen = exact.read_modes()
    out = list(modes)
    for i in np.flatnonzero(free):
        out[i] = chosen[i]
    return out


def lns(
    ip: IndexedProblem,
    modes: Sequence[int],
    deadline: float | None,
    budget: Budget,
    *,
    window: int = 24,
    step_limit: float = 0.3,
    watch: Watch | None = None,
) -> list[int]:
    """Improve a feasible plan by re-optimizing sliding windows of tasks exactly.

    Args:
        ip: the problem (uncoupled).
        modes: a feasible plan.
        deadline: s, or None.
        budget: the time allowed, building the model included.
        window: tasks freed per step (consecutive by start time).
        step_limit: s per window solve.
        watch: receives every cheaper plan; the search stops when it says so.

    Returns:
        A plan no worse than `modes`.
    """
    best = list(modes)
    best_e = ip.evaluate(best, deadline).energy
    if ip.n == 0:
        return best
    exact = ExactModel(ip, deadline)
    exact.model.set_option("mip_rel_gap", WINDOW_GAP)
    window = max(2, min(window, ip.n))
    stride = max(1, window // 2)
    improved = True
    while improved and not budget.expired():
        improved = False
        order = np.argsort(ip.evaluate(best).starts, kind="stable")
        for lo in range(0, max(1, ip.n - window + stride), stride):
            if budget.expired() or (watch is not None and watch.should_stop()):
                return best
            free = np.zeros(ip.n, dtype=bool)
            free[order[lo : lo + window]] = True
            cand = reoptimize(exact, best, free, budget.child(step_limit))
            if cand is None:
                continue
            ev = ip.evaluate(cand, deadline)
            if meets(ev.makespan, deadline) and ev.energy < best_e - 1e-9 * max(1.0, best_e):
                best, best_e = cand, ev.energy
                improved = True
                if watch is not None:
                    watch.offer(best_e, best)
    if watch is not None and not improved:
        watch.stall_detail = "a sweep of MILP windows found nothing cheaper"
    return best
