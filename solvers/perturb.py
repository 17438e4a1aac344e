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
from solvers.improve import improve_with_times, pareto_table
from solvers.indexed import IndexedProblem, meets
from solvers.paths import PathTimes
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
    idx, _, _ = pareto_table(ip)
    times = PathTimes.of(ip, ip.durations_of(best))
    best_e = ip.energy_at(best, times.makespan, deadline)
    rng = np.random.default_rng(seed)
    lo, hi = np.log(WIDTH_RANGE[0]), np.log(WIDTH_RANGE[1])
    idle = 0
    starts = np.array(times.starts)
    makespan = times.makespan
    while not budget.expired() and idle < patience:
        if watch is not None and watch.should_stop():
            return best
        width = float(np.exp(rng.uniform(lo, hi))) * makespan
        a = float(rng.uniform(-width, makespan))
        window = np.flatnonzero((starts >= a) & (starts < a + width))
        trial = list(best)
        moved = []
        for i in window:
            at = np.flatnonzero(idx[i] == trial[i])
            if len(at) and at[0] > 0:
                trial[i] = int(idx[i, at[0] - 1])
                moved.append(int(i))
        # Faster modes only: the trial meets the deadline before the improvement too.
        sped = times.changed(moved, [ip.durations[i][trial[i]] for i in moved])
        trial, trial_times = improve_with_times(ip, trial, deadline, budget, times=sped)
        trial_h = trial_times.makespan
        energy = ip.energy_at(trial, trial_h, deadline)
        if meets(trial_h, deadline) and energy < best_e - 1e-12 * max(1.0, abs(best_e)):
            best, best_e, times = trial, energy, trial_times
            starts, makespan = np.array(times.starts), trial_h
            idle = 0
            if watch is not None:
                watch.offer(best_e, best)
        else:
            idle += 1
    if watch is not None and idle >= patience:
        watch.stall_detail = f"{patience} steps in a row found nothing cheaper"
    return best
