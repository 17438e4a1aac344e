"""`method="relax"`: LP relaxation, rounding that never lengthens a task, improvement.

1. Solve the convex-hull LP (`solvers.lp.HullLP`); its optimum is the certified lower
   bound.
2. LP diving: the tasks whose LP duration lies between two hull vertices are rounded a
   batch at a time — those closest to a mode first, each to its nearer mode — and
   pinned; the LP is re-solved so the free tasks absorb the time the pinned ones took or
   gave back. A batch that makes the LP infeasible is pinned to the faster modes
   instead (the cheapest mode no slower than the LP duration), which always fits the
   LP's own schedule. Repeat until the LP solution is integral.
3. Slack-to-energy improvement (`solvers.improve.improve`): move tasks with slack to
   slower, cheaper modes while the deadline holds.

`relax_once` is the cheap variant (one LP solve, rounding down, improvement) used for
frontier sweeps; `nearest_rounding` rounds the same LP point up where it sits near the
slower mode, then repairs the deadline (large problems, where re-solving is costly;
`solvers.stages` runs it after the first tile); `rounding_stage` runs `relax_once`,
sweeps of deadlines from the fastest makespan, and diving, and offers every plan to the
solve's `Incumbent`. The stages that follow it (tiling, iterated improvement) are in
`solvers.stages`.

Integrality: the hull LP bound is loose on 1F1B pipelines (about 200 of 512 tasks sit
between two modes at once); long MILP runs put most of the 0.5–0.6 % gap on 8 × 32 in
the bound, not in the plans (``benchmarks/results/solver_gap_*.json``).

Assumptions:
    No groups and no transition costs (see `solvers.coupled` for those).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from solvers.budget import Budget
from solvers.exceptions import TimeLimitReached
from solvers.improve import improve, repair, repair_batched
from solvers.incumbent import Incumbent
from solvers.indexed import meets
from solvers.lp import HullLP, LPPoint, classify, round_down, vertex_modes


@dataclass
class RelaxResult:
    """Outcome of `relax_assign`.

    Attributes:
        modes: mode index per task (task order of the `IndexedProblem`).
        bound: certified lower bound on the energy, J.
        lp_point: the first (unpinned) LP optimum.
        lp_solves: how many LP solves the diving took.
    """

    modes: list[int]
    bound: float
    lp_point: LPPoint
    lp_solves: int


def relax_assign(
    lp: HullLP,
    deadline: float | None,
    budget: Budget,
    *,
    batch: float = 0.2,
    improve_passes: bool = True,
    max_rounds: int | None = None,
) -> RelaxResult | None:
    """Run the relax method on a prepared LP. None when the deadline is infeasible.

    Args:
        lp: the problem's LP (pinned tasks are released first and on return).
        deadline: s, or None for the energy-minimizing makespan.
        budget: the time allowed; once half of it is spent, diving pins every task
            left at once, and the improvement stops when it is spent.
        batch: fraction of the fractional tasks pinned per LP solve (1.0: all at once).
        improve_passes: run the slack-to-energy improvement after rounding.
        max_rounds: LP re-solves allowed; after that every fractional task left is
            pinned to its faster mode at once (None: no limit).
    """
    dive = budget.child(fraction=0.5)
    ip = lp.ip
    lp.unfix_all()
    lp.set_deadline(deadline)
    first = lp.solve()
    if first is None:
        return None
    bound = first.energy_bound(ip, deadline)
    point = first
    solves = 1
    pinned = np.zeros(ip.n, dtype=bool)
    chosen = np.zeros(ip.n, dtype=np.int64)
    while True:
        on_vertex, down, up, position = classify(lp, point.t)
        open_ = np.flatnonzero(~on_vertex & ~pinned)
        if len(open_) == 0:
            break
        out_of_time = dive.expired() or (max_rounds is not None and solves > max_rounds)
        nearness = np.minimum(position[open_], 1.0 - position[open_])
        order = open_[np.argsort(nearness, kind="stable")]
        take = len(order) if out_of_time else max(1, int(np.ceil(batch * len(order))))
        sel = order[:take]
        if out_of_time:
            # Faster modes fit this LP point's own schedule: no re-solve needed.
            chosen[sel] = down[sel]
            pinned[sel] = True
            break
        go_up = (position[sel] > 0.5) & (up[sel] >= 0) & (not out_of_time)
        pick = np.where(go_up, up[sel], down[sel])
        lp.fix(sel, pick)
        nxt = lp.solve()
        solves += 1
        if nxt is None:
            # Rounding up did not fit: the faster modes always fit the LP's schedule.
            pick = down[sel]
            lp.fix(sel, pick)
            nxt = lp.solve()
            solves += 1
        if nxt is None:  # only by float trouble; stop diving, round the rest down
            chosen[sel] = pick
            pinned[sel] = True
            rest = np.flatnonzero(~pinned)
            _, down_all, _, _ = classify(lp, point.t)
            chosen[rest] = down_all[rest]
            pinned[rest] = True
            break
        chosen[sel] = pick
        pinned[sel] = True
        point = nxt
    modes = np.where(pinned, chosen, vertex_modes(lp, point.t)).tolist()
    lp.unfix_all()
    if deadline is not None and not meets(ip.evaluate(modes).makespan, deadline):
        modes = repair(ip, modes, deadline)
    if improve_passes:
        modes = improve(ip, modes, deadline, budget)
    return RelaxResult([int(m) for m in modes], bound, first, solves)


def relax_once(
    lp: HullLP,
    deadline: float | None,
    seeds: Sequence[Sequence[int]] = (),
    point: LPPoint | None = None,
) -> RelaxResult | None:
    """A cheap relax step for frontier sweeps: one warm LP solve, no diving.

    Rounds every fractional task to its faster mode (which fits the LP's schedule),
    improves that plan and every seed plan (assignments meeting `deadline`, e.g. the
    plan at the previous, tighter deadline) by slack-to-energy moves, and keeps the
    cheapest. None when the deadline is infeasible. `point`: the LP's optimum at
    `deadline`, when the caller has it (no solve then).

    Assumptions:
        `lp` has no pinned tasks.
    """
    ip = lp.ip
    if point is None:
        lp.set_deadline(deadline)
        point = lp.solve()
    if point is None:
        return None
    rounded = round_down(lp, point.t).tolist()
    if deadline is not None and not meets(ip.evaluate(rounded).makespan, deadline):
        rounded = repair(ip, rounded, deadline)
    best: list[int] | None = None
    best_e = np.inf
    # The LP's budget bounds the improvement too (without one: 10 s of work, so that a
    # frontier's points do not depend on the machine's load).
    budget = lp.budget.child(10.0) if lp.budget is not None else Budget.of_work(10.0)
    for start in (rounded, *seeds):
        modes = improve(ip, start, deadline, budget)
        ev = ip.evaluate(modes, deadline)
        if meets(ev.makespan, deadline) and ev.energy < best_e:
            best, best_e = modes, ev.energy
    assert best is not None  # the rounded plan always qualifies
    return RelaxResult([int(m) for m in best], point.energy_bound(ip, deadline), point, 1)


def lp_stage(lp: HullLP, inc: Incumbent) -> LPPoint | None:
    """The LP at `inc`'s deadline, its optimum offered as the bound (None: infeasible)."""
    lp.unfix_all()
    lp.set_deadline(inc.deadline)
    point = lp.solve()
    if point is not None:
        inc.offer_bound(point.energy_bound(lp.ip, inc.deadline))
    return point


#: Where an LP duration lies between two modes (0 at the faster, 1 at the slower) above
#: which `nearest_rounding` takes the slower one.
ROUND_UP_AT = 0.9


def nearest_rounding(
    lp: HullLP, point: LPPoint, deadline: float | None, budget: Budget
) -> list[int] | None:
    """The LP point rounded up where it sits near the slower mode, repaired, improved.

    Rounding every fractional task down (`relax_once`) leaves slack on thousands of
    paths that the slack-to-energy moves spend one greedy task at a time; rounding the
    tasks that sit near their slower mode up and then speeding up the cheapest critical
    tasks (`repair_batched`) keeps more of the LP's structure. On GPT-3 8 × 512 at
    +5 % (8 192 tasks) it ends 0.374 % above the bound, against 0.514 % for rounding
    down, for one more improvement's CPU (about 1.3 s).

    Args:
        lp: the LP (no pinned tasks).
        point: its optimum at `deadline`.
        deadline: in `lp`'s time unit, or None.
        budget: the work the repair and the improvement may do.

    Returns:
        A plan meeting `deadline`, or None (the budget ran out first).
    """
    ip = lp.ip
    on_vertex, down, up, position = classify(lp, point.t)
    slower = (position > ROUND_UP_AT) & (up >= 0)
    rounded = np.where(on_vertex, vertex_modes(lp, point.t), np.where(slower, up, down))
    modes: list[int] | None = [int(m) for m in rounded]
    if deadline is not None:
        modes = repair_batched(ip, modes, deadline, budget)
    if modes is None or budget.expired():
        return None
    return improve(ip, modes, deadline, budget)


#: Diving batch sizes tried in turn by `rounding_stage` while time remains; without a
#: deadline one dive of 0.05 (`solve(problem, None)` on 12 pipelines: the same plan or
#: a cheaper one on 11, 6e-7 dearer on 8 × 32 × 30, in 10–50 % less CPU).
DIVE_BATCHES = (0.2, 0.05, 1.0)
NO_DEADLINE_DIVES = (0.05,)

#: A dive is started only with time for this many warm relax steps left.
DIVE_STEPS = 20

#: Deadlines per sweep, one sweep after another while time remains. Different step
#: counts pass through different plans; on pipelines each sweep can find a cheaper one.
SWEEP_STEPS = (40, 100, 25, 70)


def sweep(
    lp: HullLP,
    start: float,
    end: float | None,
    steps: int,
    budget: Budget,
    *,
    stop: float,
    step_cost: float = 0.0,
    end_cost: float = 0.0,
) -> tuple[RelaxResult | None, float, float]:
    """Follow the frontier from deadline `start` (s) to `end`; the plan at `end`.

    Each step solves the LP at the next deadline, rounds, and also improves the plan of
    the previous (tighter) step (`relax_once` with it as seed), so good structure found
    at tight deadlines carries over to looser ones. When the time left no longer covers
    the steps planned, the remaining ones are spread wider; the sweep always ends with a
    plan for `end` (None only when `end` is infeasible).

    Args:
        lp: the problem's LP (no pinned tasks).
        start: first deadline, s (the fastest makespan).
        end: the deadline wanted, s, or None (no deadline at the last step).
        steps: deadlines in the sweep, the last one included.
        budget: the time the steps may take (the step at `end` runs regardless).
        stop: where the steps end, s: `end`, or the LP's makespan when `end` is None.
        step_cost: s, the caller's estimate of one step.
        end_cost: s, the caller's estimate of the last step (at `end` the slack-to-
            energy improvement has the most to do, so it is the slowest step).

    Returns:
        (the plan at `end`, the mean step, the last step), times in s.
    """
    seeds: list[list[int]] = []
    deadlines: list[float] = []
    if stop > start * (1 + 1e-9):
        deadlines = np.linspace(start, stop, max(2, steps))[:-1].tolist()
    spent, done = 0.0, 0
    k = 0
    while k < len(deadlines):
        estimate = 1.2 * spent / done if done else step_cost
        if estimate > 0:
            # Steps that still fit, keeping time for `end`; when fewer than planned,
            # the rest are spread wider (a long jump to `end` loses the structure).
            fit = int((budget.remaining() - end_cost) / estimate)
            if fit <= 0:
                break
            if fit < len(deadlines) - k:
                deadlines[k:] = np.linspace(deadlines[k], stop, fit + 1)[:-1].tolist()
        took = budget.stopwatch()
        res = relax_once(lp, deadlines[k], seeds)
        spent += took()
        done += 1
        if res is not None:
            seeds = [res.modes]
        k += 1
    step_cost = spent / done if done else step_cost
    took = budget.stopwatch()
    res = relax_once(lp, end, seeds)
    return res, step_cost, took()


def rounding_stage(
    lp: HullLP, inc: Incumbent, t_fast: float, budget: Budget, point: LPPoint | None = None
) -> LPPoint | None:
    """The LP and its rounding: plans from the LP relaxation, offered to `inc`.

    1. One LP solve, rounding and slack-to-energy improvement (`relax_once`); its
       optimum is the bound, offered to `inc`.
    2. Sweeps (`sweep`): deadlines from the fastest makespan up to the deadline, each
       plan seeding the next; one sweep per entry of `SWEEP_STEPS` while time remains.
       On 1F1B pipelines it beats one LP (16 × 128 × 30 at 1.05 × T_allmax: 0.82 %
       above the bound after one LP, 0.74 % after a 40-step sweep).
    3. LP diving with several batch sizes (`relax_assign`).

    Steps 2 and 3 start only while `budget` covers them (on 4096 tasks one sweep step
    takes seconds, and they are skipped), and only when the LP re-solves warm
    (`HullLP.warm`). An LP solve that reaches the end of `lp`'s
    budget stops the stage; the plans offered so far stay with `inc`.

    Args:
        lp: the problem's LP (pins are released).
        inc: the solve's best plan; its deadline is the one solved for.
        t_fast: the fastest makespan, in `lp`'s time unit (start of the sweeps).
        budget: the time steps 2 and 3 may take.
        point: the LP's optimum at the deadline (`lp_stage`), when already solved.

    Returns:
        The first LP optimum (None: the LP says the deadline is infeasible).

    Raises:
        TimeLimitReached: the first LP did not finish in time (no plan was offered).
    """
    deadline = inc.deadline
    lp.unfix_all()
    took = budget.stopwatch()
    first = relax_once(lp, deadline, point=point)
    if first is None:
        return None
    end_cost = took() + (lp.cold_solve_s if point else 0.0)  # an overestimate: a cold LP
    inc.offer_bound(first.bound)
    inc.offer(first.modes, inc.solver)
    if not lp.warm:
        return first.lp_point  # every further LP solve would be as slow as the first
    try:
        _round_more(lp, inc, first, t_fast, budget, end_cost)
    except TimeLimitReached:
        pass  # a later LP reached the time limit: the plans found so far stand
    finally:
        lp.unfix_all()  # a dive may have stopped with tasks pinned
    return first.lp_point


def _round_more(
    lp: HullLP, inc: Incumbent, first: RelaxResult, t_fast: float, budget: Budget, end_cost: float
) -> None:
    """Steps 2 and 3 of `rounding_stage`."""
    deadline = inc.deadline
    if lp.method == "network":
        # A network solve costs about the same cold or warm: the first step measured it.
        step_cost = end_cost
    else:
        took = budget.stopwatch()
        relax_once(lp, deadline)  # a warm step (the cold solve is far slower on large problems)
        step_cost = took()

    def done() -> bool:
        return inc.should_stop() or inc.gap() <= 1e-9

    stop = deadline if deadline is not None else first.lp_point.horizon
    # Without a deadline the sweeps' plans carry no structure to the end (measured on
    # 8 × 32: every sweep ends at the one-LP plan), so only the dives run.
    for steps in SWEEP_STEPS if deadline is not None else ():
        # A sweep spreads its steps wider when time is short; below about ten steps
        # it gains little over one LP.
        if done() or budget.remaining() < end_cost + min(steps, 10) * step_cost:
            break
        res, step_cost, end_cost = sweep(
            lp, t_fast, deadline, steps, budget, stop=stop, step_cost=step_cost, end_cost=end_cost
        )
        if res is not None:
            inc.offer(res.modes, inc.solver)
    for batch in DIVE_BATCHES if deadline is not None else NO_DEADLINE_DIVES:
        # A dive re-solves the LP dozens of times and then improves the plan.
        if done() or budget.remaining() < DIVE_STEPS * step_cost:
            break
        res = relax_assign(lp, deadline, budget, batch=batch)
        if res is not None:
            inc.offer(res.modes, inc.solver)
