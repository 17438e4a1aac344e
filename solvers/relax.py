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
frontier sweeps; `relax_search` runs it, a sweep of deadlines from the fastest
makespan, and diving, and keeps the best plan.

Integrality: the hull LP bound is loose on pipelines (many tasks sit between two modes
at once); on the 8 × 32 1F1B benchmark it lies 0.4–0.8 % below the best plans known,
and a 120-s MILP only closes part of that.

Assumptions:
    No groups and no transition costs (see `solvers.coupled` for those).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from solvers.improve import improve, repair
from solvers.indexed import meets
from solvers.lp import HullLP, LPPoint
from solvers.solution import relative_gap

#: Relative distance below which an LP duration counts as sitting on a mode.
VERTEX_RTOL = 1e-9


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


def classify(lp: HullLP, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Locate LP durations among each task's modes.

    Args:
        lp: the LP (for its hull and Pareto tables).
        t: LP duration per task, s.

    Returns:
        (on_vertex, down, up, position): whether t sits on a hull vertex; the cheapest
        Pareto mode no slower than t; the next slower Pareto mode (−1 if none); and where
        t lies between the two (0 at `down`, 1 at `up`).
    """
    tol = VERTEX_RTOL * np.maximum(1.0, np.abs(t))
    on_vertex = np.min(np.abs(lp.hull_d - t[:, None]), axis=1) <= tol
    count = np.sum(lp.pareto_d <= (t + tol)[:, None], axis=1)
    pos_down = np.maximum(count - 1, 0)
    rows = np.arange(len(t))
    down = lp.pareto_idx[rows, pos_down]
    has_up = count < lp.pareto_len
    pos_up = np.minimum(count, lp.pareto_len - 1)
    up = np.where(has_up, lp.pareto_idx[rows, pos_up], -1)
    d_down = lp.pareto_d[rows, pos_down]
    d_up = np.where(has_up, lp.pareto_d[rows, pos_up], d_down + 1.0)
    position = np.clip((t - d_down) / np.maximum(d_up - d_down, 1e-300), 0.0, 1.0)
    return on_vertex, down, up, position


def vertex_modes(lp: HullLP, t: np.ndarray) -> np.ndarray:
    """Mode index of the hull vertex nearest to each LP duration."""
    k = np.argmin(np.abs(lp.hull_d - t[:, None]), axis=1)
    return np.array([lp.hull[i][j] for i, j in enumerate(k)], dtype=np.int64)


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
    on_vertex, down, _, _ = classify(lp, point.t)
    rounded = np.where(on_vertex, vertex_modes(lp, point.t), down).tolist()
    if deadline is not None and not meets(ip.evaluate(rounded).makespan, deadline):
        rounded = repair(ip, rounded, deadline)
    best: list[int] | None = None
    best_e = np.inf
    for start in (rounded, *seeds):
        modes = improve(ip, start, deadline)
        ev = ip.evaluate(modes, deadline)
        if meets(ev.makespan, deadline) and ev.energy < best_e:
            best, best_e = modes, ev.energy
    assert best is not None  # the rounded plan always qualifies
    return RelaxResult([int(m) for m in best], point.energy_bound(ip, deadline), point, 1)


#: Diving batch sizes tried in turn by `relax_search` while time remains.
DIVE_BATCHES = (0.2, 0.05, 1.0)


def relax_search(
    lp: HullLP,
    deadline: float | None,
    t_fast: float,
    *,
    time_limit: float = 60.0,
    sweep_steps: int = 40,
) -> RelaxResult | None:
    """The relax method's full search; the best of three plan generators.

    1. One LP solve, rounding and slack-to-energy improvement (`relax_once`).
    2. A sweep: deadlines from the fastest makespan up to `deadline`, each plan seeding
       the next (`relax_once` with the previous plan as seed); it follows the frontier
       and so carries good structure from tight to loose deadlines.
    3. LP diving with several batch sizes (`relax_assign`).

    Each stage only runs while the time left allows it. None when infeasible.

    Args:
        lp: the problem's LP.
        deadline: s, or None.
        t_fast: the fastest makespan, s (start of the sweep).
        time_limit: s of wall time.
        sweep_steps: most deadlines in the sweep.
    """
    t0 = time.perf_counter()
    ip = lp.ip
    lp.unfix_all()
    first = relax_once(lp, deadline)
    if first is None:
        return None
    best = first
    best_e = ip.evaluate(first.modes, deadline).energy
    step_cost = time.perf_counter() - t0

    def consider(res: RelaxResult | None) -> None:
        nonlocal best, best_e
        if res is None:
            return
        e = ip.evaluate(res.modes, deadline).energy
        if meets(ip.evaluate(res.modes).makespan, deadline) and e < best_e:
            best, best_e = RelaxResult(res.modes, first.bound, first.lp_point, res.lp_solves), e

    def left() -> float:
        return time_limit - (time.perf_counter() - t0)

    end = deadline if deadline is not None else first.lp_point.horizon
    steps = int(min(sweep_steps, max(0, 0.3 * time_limit / max(step_cost, 1e-3))))
    if steps >= 2 and end > t_fast * (1 + 1e-9):
        seeds: list[list[int]] = []
        last = None
        for d in np.linspace(t_fast, end, steps)[:-1]:
            if left() < 0.5 * time_limit:
                break
            last = relax_once(lp, float(d), seeds)
            if last is not None:
                seeds = [last.modes]
        if last is not None:
            consider(relax_once(lp, deadline, seeds))
    for batch in DIVE_BATCHES:
        if relative_gap(best_e, first.bound) <= 1e-9 or left() < 2 * step_cost:
            break
        consider(relax_assign(lp, deadline, time_limit=left(), batch=batch))
    lp.unfix_all()
    return best
