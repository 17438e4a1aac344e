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
4. `relax_search` also tiles the steady state of repeated DAGs (pipeline iterations)
   from a cyclic model (`solvers.periodic`), then perturbs the best plan and improves
   it again while time is left (`solvers.perturb`).

`relax_once` is the cheap variant (one LP solve, rounding down, improvement) used for
frontier sweeps; `relax_search` runs it, a sweep of deadlines from the fastest
makespan, and diving, and keeps the best plan.

Integrality: the hull LP bound is loose on 1F1B pipelines (about 200 of 512 tasks sit
between two modes at once, and no discrete plan fits every tight path as the LP does).
On ``lowtime_bench/s4_m8_u1ms`` at 1.05 × T_allmax a 150-s MILP proves the optimum at
least 0.16 % above the LP bound (LP 1963.20 J, proven ≥ 1966.42 J, best 1967.78 J). On
8 × 32 a 7-minute MILP from the best plan raises the bound by only 0.12 % (1.05 ×) and
0.10 % (1.20 ×) and lowers the plan by 0.05 % and 0 %
(``benchmarks/results/solver_gap_8x32_*.json``): most of the 0.5–0.6 % gap there is
most likely in the bound, not in the plans.

Assumptions:
    No groups and no transition costs (see `solvers.coupled` for those).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from solvers.exceptions import TimeLimitReached
from solvers.improve import improve, repair
from solvers.indexed import IndexedProblem, meets
from solvers.lp import HullLP, LPPoint, classify, round_down, vertex_modes
from solvers.periodic import Repetition, find_repetition, tiled_plans
from solvers.perturb import perturb_search
from solvers.solution import relative_gap
from solvers.stopping import Watch


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
    *,
    time_limit: float = 60.0,
    batch: float = 0.2,
    improve_passes: bool = True,
    max_rounds: int | None = None,
) -> RelaxResult | None:
    """Run the relax method on a prepared LP. None when the deadline is infeasible.

    Args:
        lp: the problem's LP (pinned tasks are released first and on return).
        deadline: s, or None for the energy-minimizing makespan.
        time_limit: s; diving falls back to pinning everything at once, and the
            improvement stops, when it is spent.
        batch: fraction of the fractional tasks pinned per LP solve (1.0: all at once).
        improve_passes: run the slack-to-energy improvement after rounding.
        max_rounds: LP re-solves allowed; after that every fractional task left is
            pinned to its faster mode at once (None: no limit).
    """
    t0 = time.perf_counter()
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
        out_of_time = time.perf_counter() - t0 > 0.5 * time_limit or (
            max_rounds is not None and solves > max_rounds
        )
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
        remaining = max(0.0, time_limit - (time.perf_counter() - t0))
        modes = improve(ip, modes, deadline, time_limit=remaining)
    return RelaxResult([int(m) for m in modes], bound, first, solves)


def relax_once(
    lp: HullLP, deadline: float | None, seeds: Sequence[Sequence[int]] = ()
) -> RelaxResult | None:
    """A cheap relax step for frontier sweeps: one warm LP solve, no diving.

    Rounds every fractional task to its faster mode (which fits the LP's schedule),
    improves that plan and every seed plan (assignments meeting `deadline`, e.g. the
    plan at the previous, tighter deadline) by slack-to-energy moves, and keeps the
    cheapest. None when the deadline is infeasible.

    Assumptions:
        `lp` has no pinned tasks.
    """
    ip = lp.ip
    lp.set_deadline(deadline)
    point = lp.solve()
    if point is None:
        return None
    rounded = round_down(lp, point.t).tolist()
    if deadline is not None and not meets(ip.evaluate(rounded).makespan, deadline):
        rounded = repair(ip, rounded, deadline)
    best: list[int] | None = None
    best_e = np.inf
    for start in (rounded, *seeds):
        # The LP's stop time bounds the improvement too (10 s without one).
        modes = improve(ip, start, deadline, time_limit=max(0.0, min(10.0, lp.time_left())))
        ev = ip.evaluate(modes, deadline)
        if meets(ev.makespan, deadline) and ev.energy < best_e:
            best, best_e = modes, ev.energy
    assert best is not None  # the rounded plan always qualifies
    return RelaxResult([int(m) for m in best], point.energy_bound(ip, deadline), point, 1)


#: Diving batch sizes tried in turn by `relax_search` while time remains.
DIVE_BATCHES = (0.2, 0.05, 1.0)

#: A dive is started only with time for this many warm relax steps left.
DIVE_STEPS = 20

#: Share of `relax_search`'s time that sweeps and dives may use; the rest goes to
#: iterated improvement of the best plan they found.
GENERATOR_SHARE = 0.4

#: Share of `relax_search`'s time that tiling may use at least (`solvers.periodic`),
#: after the sweeps and dives.
TILING_SHARE = 0.2

#: Deadlines per sweep, one sweep after another while time remains. Different step
#: counts pass through different plans; on pipelines each sweep can find a cheaper one.
SWEEP_STEPS = (40, 100, 25, 70)


def sweep(
    lp: HullLP,
    start: float,
    end: float | None,
    steps: int,
    time_left: Callable[[], float],
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
        time_left: seconds left to the caller.
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
            fit = int((time_left() - end_cost) / estimate)
            if fit <= 0:
                break
            if fit < len(deadlines) - k:
                deadlines[k:] = np.linspace(deadlines[k], stop, fit + 1)[:-1].tolist()
        t0 = time.perf_counter()
        res = relax_once(lp, deadlines[k], seeds)
        spent += time.perf_counter() - t0
        done += 1
        if res is not None:
            seeds = [res.modes]
        k += 1
    step_cost = spent / done if done else step_cost
    t0 = time.perf_counter()
    res = relax_once(lp, end, seeds)
    return res, step_cost, time.perf_counter() - t0


def _deadline_binds(ip: IndexedProblem, point: LPPoint, deadline: float) -> bool:
    """True when the LP uses the whole deadline (the steady state then has a period to
    meet; with slack to spare, tiling has nothing to trade)."""
    return ip.problem.hold == "deadline" or point.horizon >= deadline * (1 - 1e-6)


def _repetition(ip: IndexedProblem) -> Repetition | None:
    """`find_repetition`, cached on the problem object (a frontier asks once per point)."""
    if not hasattr(ip, "_repetition"):
        ip._repetition = find_repetition(ip)  # type: ignore[attr-defined]
    return ip._repetition  # type: ignore[attr-defined]


def relax_search(
    lp: HullLP,
    deadline: float | None,
    t_fast: float,
    *,
    time_limit: float = 60.0,
    watch: Watch | None = None,
) -> RelaxResult | None:
    """`_relax_search`, keeping the best plan found when an LP solve reaches the time
    limit (`HullLP.stop_at`); without a plan yet, `TimeLimitReached` propagates.

    `watch` (optional) receives every cheaper plan and the bound, and ends the search
    early (stop gap, Ctrl-C; a stall once the iterated improvement runs)."""
    found: list[RelaxResult] = []
    try:
        return _relax_search(lp, deadline, t_fast, time_limit, found, watch)
    except TimeLimitReached:
        lp.unfix_all()  # a dive may have stopped with tasks pinned
        if not found:
            raise
        return found[-1]


def _relax_search(
    lp: HullLP,
    deadline: float | None,
    t_fast: float,
    time_limit: float,
    found: list[RelaxResult],
    watch: Watch | None = None,
) -> RelaxResult | None:
    """The relax method's full search: four plan generators, then iterated improvement.

    1. One LP solve, rounding and slack-to-energy improvement (`relax_once`).
    2. Sweeps (`sweep`): deadlines from the fastest makespan up to `deadline`, each
       plan seeding the next; one sweep per entry of `SWEEP_STEPS` while time remains.
       On 1F1B pipelines it beats one LP (16 × 128 × 30 at 1.05 × T_allmax: 0.82 %
       above the bound after one LP, 0.74 % after a 40-step sweep).
    3. LP diving with several batch sizes (`relax_assign`).
    4. Tiling, on DAGs that repeat a pattern (pipeline microbatches) when the deadline
       binds: plans whose steady state repeats the cheapest one-period plan
       (`solvers.periodic.tiled_plans`). On 16 × 128 × 30 at 1.05 × T_allmax the best
       is 0.54 % above the bound after improvement, against 0.82 % for step 1.
    5. Iterated improvement of the best plan (`solvers.perturb.perturb_search`) with
       the time left; it stops early once hundreds of steps in a row bring nothing.

    Stages 2 and 3 share `GENERATOR_SHARE` of the time and only run while it allows
    them (on 4096 tasks one sweep step takes seconds and they are skipped); stage 4
    takes what they leave of it, and at least `TILING_SHARE`. None when infeasible.

    Args:
        lp: the problem's LP.
        deadline: s, or None.
        t_fast: the fastest makespan, s (start of the sweeps).
        time_limit: s of wall time.
        found: every better plan is appended (the caller keeps the last on a stop).
        watch: receives plans and the bound; its stop rule ends the search early.
    """
    t0 = time.perf_counter()
    ip = lp.ip
    lp.unfix_all()
    first = relax_once(lp, deadline)
    if first is None:
        return None
    end_cost = time.perf_counter() - t0  # an overestimate: the LP was cold
    best = first
    found.append(best)
    best_e = ip.evaluate(first.modes, deadline).energy
    if watch is not None:
        watch.offer_bound(first.bound)
        watch.offer(best_e, first.modes)
    # A warm step (the cold LP solve above is far slower on large problems).
    t1 = time.perf_counter()
    relax_once(lp, deadline)
    step_cost = time.perf_counter() - t1

    def consider(res: RelaxResult | None) -> None:
        nonlocal best, best_e
        if res is None:
            return
        e = ip.evaluate(res.modes, deadline).energy
        if meets(ip.evaluate(res.modes).makespan, deadline) and e < best_e:
            best, best_e = RelaxResult(res.modes, first.bound, first.lp_point, res.lp_solves), e
            found.append(best)
            if watch is not None:
                watch.offer(e, res.modes)

    def left() -> float:
        return time_limit - (time.perf_counter() - t0)

    def done() -> bool:
        if watch is not None and watch.should_stop():
            return True
        return relative_gap(best_e, first.bound) <= 1e-9

    def generators_left() -> float:
        return GENERATOR_SHARE * time_limit - (time.perf_counter() - t0)

    stop = deadline if deadline is not None else first.lp_point.horizon
    # Without a deadline the sweeps' plans carry no structure to the end (measured on
    # 8 × 32: every sweep ends at the one-LP plan), so only the dives run.
    for steps in SWEEP_STEPS if deadline is not None else ():
        if done():
            break
        # A sweep spreads its steps wider when time is short; below about ten steps
        # it gains little over one LP.
        if generators_left() < end_cost + min(steps, 10) * step_cost:
            break
        res, step_cost, end_cost = sweep(
            lp,
            t_fast,
            deadline,
            steps,
            generators_left,
            stop=stop,
            step_cost=step_cost,
            end_cost=end_cost,
        )
        consider(res)
    for batch in DIVE_BATCHES:
        # A dive re-solves the LP dozens of times and then improves the plan.
        if done() or generators_left() < DIVE_STEPS * step_cost:
            break
        consider(relax_assign(lp, deadline, time_limit=generators_left(), batch=batch))
    lp.unfix_all()
    if deadline is not None and not done() and _deadline_binds(ip, first.lp_point, deadline):
        rep = _repetition(ip)
        if rep is not None:
            # Tiling comes after the sweeps so that it does not take their time; it may
            # use what they left, and at least `TILING_SHARE` of the limit.
            end = time.perf_counter() + max(generators_left(), TILING_SHARE * time_limit)

            def tiling_left() -> float:
                return min(left(), end - time.perf_counter())

            for modes in tiled_plans(lp, deadline, first.lp_point, rep, tiling_left):
                consider(RelaxResult(modes, first.bound, first.lp_point, 1))
                if done():
                    break
    if not done() and left() > 0:
        if watch is not None:
            watch.arm()  # from here on the search only improves a finished plan
        modes = perturb_search(ip, best.modes, deadline, time_limit=left(), watch=watch)
        consider(RelaxResult(modes, first.bound, first.lp_point, best.lp_solves))
    return best
