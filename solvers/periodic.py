"""Repeated structure: plan the steady state of an iterated DAG once, then tile it.

Pipeline iterations repeat one pattern many times (in 1F1B every microbatch runs the
same forward and backward on every stage, with the same edges to its neighbours). On
such DAGs the LP rounding loses most where the pattern repeats: at 16 × 128 × 30 and
1.05 × T_allmax, 438 of 527 J above the bound lie in the 98 steady microbatches. Here
the steady state is planned as a whole:

1. `find_repetition` groups tasks into *classes* (same device, same modes), ranks
   each class's tasks in topological order, and keeps the tasks whose edges follow
   their class's most common pattern (neighbour class, rank offset): the *interior*.
2. `cyclic_plan` solves the cyclic MILP of one period: one task per class, every
   pattern edge u → v with rank offset δ as o_u + d_u ≤ o_v + δ · p, the period p
   bounded, minimizing Σ cost + S̄ · p (the design's accounting, per period).
3. `tiled_plans` gives every interior task its class's mode, pins them in the hull LP,
   lets the LP plan the warm-up and cool-down around them, rounds that part, and hands
   back the plans (feasible, improved) for several periods just below the LP's own
   (a tile at the LP's period leaves the warm-up and cool-down no time).

Measured on ``benchmarks/solver_scale.py`` (16 × 128 × 30, 1.05 × T_allmax): the
best of the four tiled plans is 0.54 % above the LP bound after improvement, against
0.82 % for the rounded LP, and relax's 60-s search ends at 0.48–0.49 % (0.62 %
without tiling). On 8 × 32 × 10 (``lowtime_synthetic.py``) relax gains 0–0.1 %.

Assumptions:
    No groups and no transition costs (as `solvers.relax`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solvers.budget import Budget
from solvers.exceptions import SolverError
from solvers.highs import INF, Model
from solvers.hull import pareto_modes
from solvers.improve import improve, repair
from solvers.indexed import IndexedProblem, meets
from solvers.lp import HullLP, LPPoint, round_down

#: A class needs at least this many tasks to count as repeated.
MIN_REPEATS = 8

#: The interior must hold at least this share of the tasks for tiling to be tried.
MIN_INTERIOR_SHARE = 0.5

#: Periods tried in turn, as multiples of the LP's own steady period: the tile must
#: leave the warm-up and cool-down a little time, so periods slightly below the LP's
#: do best (0.996 and 0.998 on 16 × 128 × 30, which come first in case time runs out).
PERIOD_SCALES = (0.996, 0.998, 0.994, 0.992)

#: Seconds HiGHS may spend on one cyclic MILP (at most half the time left). HiGHS
#: finds the plan early and spends the rest proving it: at 16 stages × 30 clocks the
#: optimum is found in 0.3 s and proven in 2.7 s.
CYCLIC_TIME_LIMIT = 1.5

#: Relative optimality gap at which a cyclic MILP stops (HiGHS's default).
CYCLIC_GAP = 1e-4


@dataclass(frozen=True)
class Repetition:
    """The repeated structure of a problem (see `find_repetition`).

    Attributes:
        task_class: class index per task, −1 for tasks in no repeated class.
        rank: position of each task within its class (topological order).
        interior: whether each task follows its class's pattern.
        edges: the pattern edges (class u, class v, rank offset δ): task of rank r in u
            precedes task of rank r + δ in v.
        members: a representative interior task per class (its modes stand for all).
    """

    task_class: np.ndarray
    rank: np.ndarray
    interior: np.ndarray
    edges: tuple[tuple[int, int, int], ...]
    members: tuple[int, ...]


def find_repetition(ip: IndexedProblem) -> Repetition | None:
    """Find the repeated pattern of `ip`'s DAG; None when there is none worth tiling.

    Tasks are in one class when they run on the same device with identical modes
    (durations and energies); a class needs `MIN_REPEATS` tasks. A task is interior
    when its successors and predecessors, as (class, rank offset) pairs, are exactly
    its class's most common such set, every class that set names is itself repeated,
    and its rank lies in the range where every class's tasks are interior. None also
    when the interior holds less than `MIN_INTERIOR_SHARE` of the tasks.
    """
    keys: dict[Hashable, int] = {}
    raw = np.empty(ip.n, dtype=np.int64)
    for i in range(ip.n):
        key = (int(ip.task_device[i]), ip.durations[i].tobytes(), ip.energies[i].tobytes())
        raw[i] = keys.setdefault(key, len(keys))
    sizes = np.bincount(raw, minlength=len(keys))
    repeated = sizes[raw] >= MIN_REPEATS
    task_class = np.where(repeated, raw, -1)
    rank = np.zeros(ip.n, dtype=np.int64)
    seen: Counter[int] = Counter()
    for i in range(ip.n):  # the IndexedProblem's order is topological
        rank[i] = seen[int(raw[i])]
        seen[int(raw[i])] += 1

    def pattern(i: int) -> frozenset[tuple[str, int, int]] | None:
        out = []
        for tag, nbrs in (("s", ip.succs[i]), ("p", ip.preds[i])):
            for j in nbrs:
                if task_class[j] < 0:
                    return None
                out.append((tag, int(task_class[j]), int(rank[j] - rank[i])))
        return frozenset(out)

    patterns = [pattern(i) if repeated[i] else None for i in range(ip.n)]
    steady: dict[int, frozenset[tuple[str, int, int]]] = {}
    for c in np.unique(task_class[task_class >= 0]):
        counts = Counter(patterns[i] for i in np.flatnonzero(task_class == c))
        counts.pop(None, None)
        if counts:
            steady[int(c)] = counts.most_common(1)[0][0]
    interior = np.array(
        [
            patterns[i] is not None and patterns[i] == steady.get(int(task_class[i]))
            for i in range(ip.n)
        ]
    )
    classes = sorted(int(c) for c in np.unique(task_class[interior]))
    named = {c for c in classes for _, d, _ in steady[c]}
    if not classes or not named <= set(classes):
        return None
    # Only the ranks at which every class is in its pattern: elsewhere (the pipeline's
    # fill and drain) some tasks are on paths the period does not describe.
    lo = max(int(rank[interior & (task_class == c)].min()) for c in classes)
    hi = min(int(rank[interior & (task_class == c)].max()) for c in classes)
    interior &= (rank >= lo) & (rank <= hi) & np.isin(task_class, classes)
    if not all((interior & (task_class == c)).any() for c in classes):
        return None
    if interior.sum() < MIN_INTERIOR_SHARE * ip.n:
        return None
    members = tuple(int(np.flatnonzero(interior & (task_class == c))[0]) for c in classes)
    # Classes are numbered 0 … k−1 from here on, in the order of `members`.
    number = {c: k for k, c in enumerate(classes)}
    edges = tuple(
        sorted(
            (number[c], number[d], delta)
            for c in classes
            for tag, d, delta in steady[c]
            if tag == "s"
        )
    )
    task_class = np.array([number.get(int(c), -1) for c in task_class], dtype=np.int64)
    return Repetition(task_class, rank, interior, edges, members)


def steady_period(rep: Repetition, starts: np.ndarray) -> float:
    """The period (s per rank step) of a schedule's steady state: the median over classes
    of (last − first interior start) / (rank difference)."""
    slopes = []
    for c in range(len(rep.members)):
        tasks = np.flatnonzero(rep.interior & (rep.task_class == c))
        lo, hi = tasks[np.argmin(rep.rank[tasks])], tasks[np.argmax(rep.rank[tasks])]
        if rep.rank[hi] > rep.rank[lo]:
            slopes.append((starts[hi] - starts[lo]) / (rep.rank[hi] - rep.rank[lo]))
    return float(np.median(slopes)) if slopes else 0.0


@dataclass
class CyclicModel:
    """The cyclic model of `block` consecutive ranks, built in HiGHS (see `cyclic_model`).

    Attributes:
        model: the model (not yet run).
        modes: per class, the Pareto modes offered (mode indices).
        first: per (class, r) instance, its first mode column; instance c · block + r.
        block: ranks per period.
    """

    model: Model
    modes: list[list[int]]
    first: np.ndarray
    block: int

    @property
    def highs(self) -> object:
        """The underlying HiGHS instance (for studies that set its options directly)."""
        return self.model.highs

    def choice(self) -> list[list[int]]:
        """The solution's mode index per class and rank within the block."""
        x = self.model.values()
        out = []
        for c, modes in enumerate(self.modes):
            row = []
            for r in range(self.block):
                j = self.first[c * self.block + r]
                row.append(int(modes[int(np.argmax(x[j : j + len(modes)]))]))
            out.append(row)
        return out


def cyclic_model(
    ip: IndexedProblem,
    rep: Repetition,
    period_max: float,
    *,
    block: int = 1,
    integer: bool = True,
) -> CyclicModel:
    """The cyclic MILP (or its LP relaxation) of a block of `block` consecutive ranks.

    One task per (class, r < block), each with its class's Pareto modes; a pattern edge
    u → v with rank offset δ joins instance (u, r) to (v, (r + δ) mod block) across
    ⌊(r + δ) / block⌋ periods Π: o + d ≤ o' + ⌊(r + δ) / block⌋ · Π. The period Π is at
    most `period_max`; the objective per period is Σ cost + S̄ · Π (S̄ dropped when
    devices are held to the deadline).
    """
    k = len(rep.members)
    modes = [pareto_modes(ip.durations[i], ip.costs[i]) for i in rep.members]
    sizes = [len(modes[c]) for c in range(k) for _ in range(block)]
    first = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    nx, n = int(first[-1]), k * block
    offset, period = nx, nx + n
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    for j, size in enumerate(sizes):  # one mode per instance
        rows += [len(lo)] * size
        cols += range(first[j], first[j] + size)
        vals += [1.0] * size
        lo.append(1.0)
        hi.append(1.0)
    for u, v, delta in rep.edges:
        d = ip.durations[rep.members[u]][modes[u]]
        for r in range(block):
            a, b = u * block + r, v * block + (r + delta) % block
            rows += [len(lo)] * (len(d) + 3)
            cols += [*range(first[a], first[a] + len(d)), offset + a, offset + b, period]
            vals += [*d.tolist(), 1.0, -1.0, -float((r + delta) // block)]
            lo.append(-INF)
            hi.append(0.0)
    matrix = sp.csc_matrix((vals, (rows, cols)), shape=(len(lo), period + 1))
    matrix.sort_indices()
    cost = np.concatenate(
        [
            *(ip.costs[rep.members[c]][modes[c]] for c in range(k) for _ in range(block)),
            np.zeros(n),
            [0.0 if ip.problem.hold == "deadline" else ip.idle_total_w],
        ]
    )
    col_lo = np.concatenate([np.zeros(nx), np.full(n, -INF), [0.0]])
    col_hi = np.concatenate([np.ones(nx), np.full(n, INF), [period_max]])
    col_lo[offset] = col_hi[offset] = 0.0  # offsets are defined up to a translation
    model = Model(
        cost, col_lo, col_hi, matrix, np.array(lo), np.array(hi), integer_columns=nx * integer
    )
    return CyclicModel(model, modes, first, block)


def cyclic_plan(
    ip: IndexedProblem, rep: Repetition, period_max: float, budget: Budget
) -> list[int] | None:
    """The cheapest one-period plan: a mode index per class; None if none was found.

    Args:
        ip: the problem.
        rep: its repetition.
        period_max: s, the longest period allowed.
        budget: the time HiGHS may take.
    """
    cyclic = cyclic_model(ip, rep, period_max)
    cyclic.model.set_option("mip_rel_gap", CYCLIC_GAP)
    cyclic.model.run(budget.remaining(), budget=budget)
    if not cyclic.model.has_solution():
        return None
    return [row[0] for row in cyclic.choice()]


def tiled_plans(
    lp: HullLP,
    deadline: float,
    point: LPPoint,
    rep: Repetition,
    budget: Budget,
    *,
    step_estimate: float | None = None,
) -> list[list[int]]:
    """The tiling stage: plans whose steady state repeats one cyclic plan, for periods
    near the LP's.

    A tile is started only while the time left covers the part of it that cannot be
    interrupted, the cyclic MILP and the pinned LP solve (seconds on 4096 tasks):
    `step_estimate` for the first tile, then the last one's measured time. The
    improvement of each plan gets what is left.

    Args:
        lp: the problem's LP (no pinned tasks; left without pins).
        deadline: s.
        point: the LP's optimum at `deadline` without pins (its steady period is the
            reference for the tiles').
        rep: the problem's repetition.
        budget: the time the stage may take.
        step_estimate: s; None: 3 × the LP's cold solve (the MILP takes at most half
            the time left, the pinned LP solve about 1.5 × a cold one on 4096 tasks),
            or half of it for an LP without warm starts (`HullLP.warm`: presolve
            removes the pinned tasks, most of the LP).

    Returns:
        Feasible, improved plans (possibly none).
    """
    per_cold = 3.0 if lp.warm else 0.5
    step = per_cold * lp.cold_solve_s if step_estimate is None else step_estimate
    if budget.remaining() <= step:
        return []
    ip = lp.ip
    lp.unfix_all()
    lp.set_deadline(deadline)
    period = steady_period(rep, point.starts)
    inner = np.flatnonzero(rep.interior)
    plans = []
    for scale in PERIOD_SCALES:
        if budget.remaining() <= step:
            break
        took = budget.stopwatch()
        limit = budget.child(CYCLIC_TIME_LIMIT, fraction=0.5)
        cyclic = cyclic_plan(ip, rep, scale * period, limit)
        if cyclic is None:
            continue
        tile = np.asarray(cyclic)[rep.task_class[inner]]
        lp.fix(inner, tile)
        try:
            pinned = lp.solve()
        except SolverError:  # numerical trouble with this tile: try the next period
            pinned = None
        finally:
            lp.unfix_all()
        if pinned is None:  # the tile leaves the warm-up and cool-down no room
            continue
        step = took()
        modes = round_down(lp, pinned.t)
        modes[inner] = tile
        plan = modes.tolist()
        if not meets(ip.evaluate(plan).makespan, deadline):
            plan = repair(ip, plan, deadline)
        plans.append(improve(ip, plan, deadline, budget))
    return plans
