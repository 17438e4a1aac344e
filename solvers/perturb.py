"""Iterated improvement: speed up a slice of the schedule, improve, keep what pays.

`solvers.improve.improve` stops at a plan where no single slowdown fits the deadline.
When every path is nearly tight (LP-rounded plans on pipelines are), better plans are
several coordinated moves away: some tasks faster so that others can be slower. Each
step here takes the current best plan, moves every task that starts inside a random
time window to its next faster Pareto mode (always feasible: nothing gets longer),
lets `improve` spend the slack that opens up, and keeps the result when it is cheaper.

On ``solver_scale.py`` (16 × 128 × 30, 4096 tasks, 1.10 × T_allmax) 45 s of this takes
the relax plan from 0.545 % to 0.43 % above the LP bound; on 8 × 32 × 10 it is worth
about 0.05 %.

Assumptions:
    No groups and no transition costs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solvers.budget import Budget
from solvers.improve import improve, pareto_table
from solvers.indexed import IndexedProblem, meets
from solvers.stopping import Watch

#: Window widths, as fractions of the makespan, are drawn log-uniformly from this range.
WIDTH_RANGE = (0.002, 0.02)

#: Steps in a row without a cheaper plan after which the search stops early.
PATIENCE = 400


def perturb_search(
    ip: IndexedProblem,
    modes: Sequence[int],
    deadline: float | None,
    budget: Budget,
    *,
    seed: int = 0,
    patience: int = PATIENCE,
    watch: Watch | None = None,
) -> list[int]:
    """Improve a feasible plan by perturbation and slack-to-energy moves.

    Args:
        ip: the problem (uncoupled).
        modes: a plan that meets `deadline`.
        deadline: s, or None (the makespan is then free; the energy still counts it).
        budget: the time allowed.
        seed: seeds the windows drawn; the same seed and time give the same steps.
        patience: stop after this many steps in a row bring nothing.
        watch: receives every cheaper plan; the search stops when it says so (stop gap,
            a stall over its window, Ctrl-C), and is told when patience runs out.

    Returns:
        A plan meeting `deadline` whose energy is no higher than that of `modes`.
    """
    best = [int(m) for m in modes]
    if ip.n == 0 or budget.expired():
        return best
    best_e = ip.evaluate(best, deadline).energy
    idx, _, _ = pareto_table(ip)
    rng = np.random.default_rng(seed)
    lo, hi = np.log(WIDTH_RANGE[0]), np.log(WIDTH_RANGE[1])
    idle = 0
    starts = ip.evaluate(best).starts
    makespan = float(np.max(starts + ip.durations_of(best)))
    while not budget.expired() and idle < patience:
        if watch is not None and watch.should_stop():
            return best
        width = float(np.exp(rng.uniform(lo, hi))) * makespan
        a = float(rng.uniform(-width, makespan))
        window = np.flatnonzero((starts >= a) & (starts < a + width))
        trial = list(best)
        for i in window:
            at = np.flatnonzero(idx[i] == trial[i])
            if len(at) and at[0] > 0:
                trial[i] = int(idx[i, at[0] - 1])
        trial = improve(ip, trial, deadline, budget)
        ev = ip.evaluate(trial, deadline)
        if meets(ev.makespan, deadline) and ev.energy < best_e - 1e-12 * max(1.0, abs(best_e)):
            best, best_e = trial, ev.energy
            starts, makespan = ev.starts, ev.makespan
            idle = 0
            if watch is not None:
                watch.offer(best_e, best)
        else:
            idle += 1
    if watch is not None and idle >= patience:
        watch.stall_detail = f"{patience} steps in a row found nothing cheaper"
    return best
