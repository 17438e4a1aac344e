"""Repeated structure: plan the steady state of an iterated DAG once, then tile it.

Pipeline iterations repeat one pattern many times (in 1F1B every microbatch runs the
same forward and backward on every stage, with the same edges to its neighbours). On
such DAGs the LP rounding loses most where the pattern repeats: at 16 × 128 × 30 and
1.05 × T_allmax, 438 of 527 J above the bound lie in the 98 steady microbatches. Here
the steady state is planned as a whole:

1. `find_repetition` groups tasks into *classes* (same device, same modes), ranks
   each class's tasks in topological order, and keeps the tasks whose edges follow
   their class's most common pattern (neighbour class, rank offset): the *interior*.
2. The cyclic model of one period: one task per class, every pattern edge u → v with
   rank offset δ as o_u + d_u ≤ o_v + δ · p, the period p bounded, minimizing
   Σ cost + price · p. `device_cycle_plans` solves it exactly where each device's own
   cycles decide it (every 1F1B pipeline), by enumerating each device's mode
   combinations; `cyclic_plan` falls back to the MILP (`cyclic_model`) elsewhere.
3. `tiled_plans` gives every interior task its class's mode, pins them in the hull LP,
   lets the LP plan the warm-up and cool-down around them, rounds that part, and hands
   back the plans (feasible, improved) for the periods near the LP's own that are
   cheapest once the time they take from the warm-up and cool-down is priced
   (`tile_choices`, `period_price`).

On 16 × 128 × 30 at 1.05 × T_allmax the best tiled plan is 0.54 % above the LP bound
after improvement, against 0.82 % for the rounded LP (``benchmarks/README.md``).

Assumptions:
    No groups and no transition costs (as `solvers.relax`).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Hashable, Iterator
from dataclasses import dataclass

import networkx
import numpy as np
import scipy.sparse as sp

from solvers.budget import Budget
from solvers.exceptions import SolverError
from solvers.highs import INF, Model
from solvers.hull import task_pareto
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
    price: float | None = None,
) -> CyclicModel:
    """The cyclic MILP (or its LP relaxation) of a block of `block` consecutive ranks.

    One task per (class, r < block), each with its class's Pareto modes; a pattern edge
    u → v with rank offset δ joins instance (u, r) to (v, (r + δ) mod block) across
    ⌊(r + δ) / block⌋ periods Π: o + d ≤ o' + ⌊(r + δ) / block⌋ · Π. The period Π is at
    most `period_max`; the objective per period is Σ cost + `price` · Π (by default
    `idle_price`: the idle power S̄).
    """
    k = len(rep.members)
    pareto = task_pareto(ip)
    modes = [pareto[i] for i in rep.members]
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
            [idle_price(ip) if price is None else float(price)],
        ]
    )
    col_lo = np.concatenate([np.zeros(nx), np.full(n, -INF), [0.0]])
    col_hi = np.concatenate([np.ones(nx), np.full(n, INF), [period_max]])
    col_lo[offset] = col_hi[offset] = 0.0  # offsets are defined up to a translation
    model = Model(
        cost, col_lo, col_hi, matrix, np.array(lo), np.array(hi), integer_columns=nx * integer
    )
    return CyclicModel(model, modes, first, block)


def idle_price(ip: IndexedProblem) -> float:
    """What a period's length costs by itself, W: the idle power S̄ (0 when devices are
    held to the deadline, whose idle energy is fixed)."""
    return 0.0 if ip.problem.hold == "deadline" else ip.idle_total_w


def cyclic_plan(
    ip: IndexedProblem, rep: Repetition, period_max: float, budget: Budget
) -> list[int] | None:
    """The cheapest one-period plan: a mode index per class; None if none was found.

    First by the device cycles alone (`device_cycle_plans`, exact when its plan fits
    every cycle), else by the cyclic MILP (`cyclic_model`) in HiGHS.

    Args:
        ip: the problem.
        rep: its repetition.
        period_max: s, the longest period allowed.
        budget: the time HiGHS may take.
    """
    fast = device_cycle_plans(ip, rep, 0.0, period_max, idle_price(ip), 1)
    if fast:
        return fast[0][0]
    cyclic = cyclic_model(ip, rep, period_max)
    cyclic.model.set_option("mip_rel_gap", CYCLIC_GAP)
    cyclic.model.run(budget.remaining(), budget=budget)
    if not cyclic.model.has_solution():
        return None
    return [row[0] for row in cyclic.choice()]


#: Largest number of mode combinations one device's classes may have for
#: `device_cycle_plans` to enumerate them.
DEVICE_COMBINATIONS = 200_000

#: Largest number of cycles among one device's classes that `device_cycle_plans` takes.
DEVICE_CYCLES = 64


def device_cycle_plans(
    ip: IndexedProblem,
    rep: Repetition,
    period_min: float,
    period_max: float,
    price: float,
    count: int,
) -> list[tuple[list[int], float, float]] | None:
    """The `count` cheapest one-period plans by each device's own cycles, cheapest first.

    The tasks of one device run one after another, so within a period its classes
    close cycles of pattern edges on that device alone (on a 1F1B stage, forward and
    backward: d_F + d_B ≤ Π). Keeping only those cycles relaxes the cyclic model into
    one small problem per device, whose every mode combination is enumerated: per
    combination, the shortest period it fits (the largest Σ d / Σ δ over the device's
    cycles) and its cost. For a period Π each device takes its cheapest combination
    that fits; Σ cost + `price` · Π changes only where Π passes a combination's period,
    so those periods in [`period_min`, `period_max`] (and `period_max`) are every
    candidate. A plan that fits every cycle of the whole class graph at its period (no
    positive cycle, `_fits`) is optimal for the cyclic model at that price: on 1F1B each
    one does, and at 64 stages the cheapest is found in milliseconds where HiGHS's MILP
    needs over 30 s to come within 1e-5 of it.

    Args:
        ip: the problem.
        rep: its repetition.
        period_min: s, the shortest period considered.
        period_max: s, the longest.
        price: what one second of period costs, J/s (`idle_price`, or what the rest of
            the schedule would give for it).
        count: plans wanted; different periods that give the same plan count once.

    Returns:
        (plan: a mode index per class, its period Π s, Σ cost + price · Π) for each plan,
        cheapest first; [] when no period in the range fits; None when this cannot
        tell: a device has too many combinations (`DEVICE_COMBINATIONS`) or a cycle
        with no rank step, or the cheapest plan breaks a cycle through several devices.
    """
    k = len(rep.members)
    pareto = task_pareto(ip)
    modes = [pareto[i] for i in rep.members]
    dur = [ip.durations[i][m] for i, m in zip(rep.members, modes, strict=True)]
    cost = [ip.costs[i][m] for i, m in zip(rep.members, modes, strict=True)]
    device = ip.task_device[np.asarray(rep.members)]
    # Classes on no device cycle take their cheapest (slowest) mode.
    free = [int(np.argmin(cost[c])) for c in range(k)]
    tables = []  # per device: (its classes, combinations, period needed, cost)
    for dev in np.unique(device):
        cycles = _device_cycles(rep, [int(c) for c in np.flatnonzero(device == dev)])
        if cycles is None:
            return None
        if not cycles:
            continue
        on = sorted({c for cyc, _ in cycles for c in cyc})
        sizes = [len(modes[c]) for c in on]
        if np.prod(sizes, dtype=float) > DEVICE_COMBINATIONS:
            return None
        grid = np.indices(sizes).reshape(len(on), -1)  # one column per combination
        need = np.zeros(grid.shape[1])
        for cyc, shift in cycles:
            if shift <= 0:
                return None
            total = sum(dur[c][grid[on.index(c)]] for c in cyc)
            need = np.maximum(need, total / shift)
        paid = sum(cost[c][grid[j]] for j, c in enumerate(on))
        order = np.argsort(need, kind="stable")
        need, paid, grid = need[order], paid[order], grid[:, order]
        # The cheapest combination fitting each period: a running minimum by period.
        best = np.minimum.accumulate(paid)
        at = np.concatenate([[0], np.flatnonzero(np.diff(best) < 0) + 1])
        tables.append((on, grid[:, at], need[at], best[at]))
    candidates = np.unique(np.concatenate([[period_max], *(t[2] for t in tables)]))
    candidates = candidates[(candidates >= period_min) & (candidates <= period_max)]
    total = price * candidates
    for _, _, need, best in tables:
        j = np.searchsorted(need, candidates, side="right") - 1
        total = total + np.where(j >= 0, best[np.maximum(j, 0)], np.inf)
    plans: list[tuple[list[int], float, float]] = []
    seen: set[tuple[int, ...]] = set()
    for at in np.argsort(total, kind="stable"):
        if len(plans) == count or not np.isfinite(total[at]):
            break
        period = float(candidates[at])
        choice = list(free)
        for on, grid, need, _ in tables:
            j = int(np.searchsorted(need, period, side="right")) - 1
            for row, c in enumerate(on):
                choice[c] = int(grid[row, j])
        plan = tuple(int(modes[c][choice[c]]) for c in range(k))
        if plan in seen:
            continue
        seen.add(plan)
        if not _fits(rep.edges, [float(dur[c][choice[c]]) for c in range(k)], period):
            return plans or None
        plans.append((list(plan), period, float(total[at])))
    return plans


def _device_cycles(rep: Repetition, classes: list[int]) -> list[tuple[list[int], int]] | None:
    """The simple cycles of pattern edges among `classes` (one device's), each with its
    rank step Σ δ (the smallest over parallel edges); None when there are more than
    `DEVICE_CYCLES`."""
    inside = set(classes)
    step: dict[tuple[int, int], int] = {}
    for u, v, delta in rep.edges:
        if u in inside and v in inside:
            step[(u, v)] = min(delta, step.get((u, v), delta))
    graph = networkx.DiGraph(list(step))
    out = []
    for cycle in networkx.simple_cycles(graph):
        if len(out) == DEVICE_CYCLES:
            return None
        arcs = zip(cycle, cycle[1:] + cycle[:1], strict=True)
        out.append((list(cycle), sum(step[a] for a in arcs)))
    return out


def _fits(edges: tuple[tuple[int, int, int], ...], durations: list[float], period: float) -> bool:
    """True when one-period `durations` fit period `period`: no cycle of the class graph
    with Σ d > Σ δ · period (Bellman–Ford on o_v ≥ o_u + d_u − δ · period)."""
    k = len(durations)
    u = np.array([e[0] for e in edges], dtype=np.int64)
    v = np.array([e[1] for e in edges], dtype=np.int64)
    w = np.asarray(durations)[u] - np.array([e[2] for e in edges], float) * period
    tol = 1e-9 * max(period, 1e-300)
    offset = np.zeros(k)
    for _ in range(k + 1):
        reach = offset[u] + w
        if not np.any(reach > offset[v] + tol):
            return True
        np.maximum.at(offset, v, reach)
    return False


#: Relative step around the LP's period over which `period_price` takes its slope.
PRICE_STEP = 1e-3

#: Periods `tiled_plans` chooses among, as multiples of the LP's steady period.
TILE_RANGE = (0.995, 1.002)

#: Tiles `tiled_plans` tries at most.
TILES = 4


def period_price(ip: IndexedProblem, rep: Repetition, period: float) -> float:
    """What one more second of steady period costs the rest of a schedule, J/s, to
    first order.

    A tile's period is paid for by the warm-up and cool-down, whose time it takes: at
    the LP's optimum a second is worth as much there as in the steady state, whose
    worth is the slope of the cyclic LP's cost (`cyclic_model`, relaxed, the period
    free of charge) at the LP's period: a central difference over ±`PRICE_STEP`. Past
    the idle power alone (`idle_price`), this is what tells a tile at 0.999 of the LP's
    period from one at 0.998 (on 64 × 512 × 30 at 1.10 ×: 0.468 % against 0.500 %
    above the bound once the plans are finished, in the order the prices rank them).
    """
    values = []
    for p in (period * (1 - PRICE_STEP), period * (1 + PRICE_STEP)):
        cyclic = cyclic_model(ip, rep, p, integer=False, price=0.0)
        if cyclic.model.run(math.inf) != "optimal":
            return idle_price(ip)
        values.append(cyclic.model.objective())
    return max(0.0, (values[0] - values[1]) / (2 * PRICE_STEP * period))


def tile_choices(
    ip: IndexedProblem, rep: Repetition, period: float, budget: Budget
) -> Iterator[list[int]]:
    """One-period plans to tile with, the most promising first (a mode per class).

    By the device cycles (`device_cycle_plans`): the `TILES` cheapest periods in
    `TILE_RANGE` of the LP's period `period` (s), at the price the rest of the
    schedule puts on time (`period_price`). The range is narrow because that price is
    a first-order one: the warm-up and cool-down gain less from each further second
    they are given (on GPT-3 8 × 512, a short warm-up, the plan tiled at 0.991 of the
    LP's period gained the rest a third of what it was priced at, and ended 0.88 %
    above the bound; at 0.996, 0.57 %). Where the device cycles cannot tell, the cyclic
    MILP at each of `PERIOD_SCALES` in turn, each in at most `CYCLIC_TIME_LIMIT` s and
    half of what `budget` has left.
    """
    lo, hi = TILE_RANGE
    price = period_price(ip, rep, period)
    ranked = device_cycle_plans(ip, rep, lo * period, hi * period, price, TILES)
    if ranked is not None:
        for plan, _, _ in ranked:
            yield plan
        return
    for scale in PERIOD_SCALES:
        limit = budget.child(CYCLIC_TIME_LIMIT, fraction=0.5)
        plan = cyclic_plan(ip, rep, scale * period, limit)
        if plan is not None:
            yield plan


def tiled_plans(
    lp: HullLP,
    deadline: float,
    point: LPPoint,
    rep: Repetition,
    budget: Budget,
    *,
    step_estimate: float | None = None,
    tiles: slice = slice(None),
) -> list[list[int]]:
    """The tiling stage: plans whose steady state repeats one cyclic plan
    (`tile_choices`, periods near the LP's; `tiles` of them, in that order).

    A tile is started only while the time left covers the part of it that cannot be
    interrupted, the pinned LP solve (and the cyclic MILP, where one is needed):
    `step_estimate` for the first tile, then the last one's measured time. The
    improvement of each plan gets what is left.

    Args:
        lp: the problem's LP (no pinned tasks; left without pins).
        deadline: s.
        point: the LP's optimum at `deadline` without pins (its steady period is the
            reference for the tiles').
        rep: the problem's repetition.
        budget: the time the stage may take.
        step_estimate: s; None: the LP's cold solve times 3 for HiGHS (the MILP takes
            at most half the time left, the pinned LP solve about 1.5 × a cold one on
            4096 tasks), 1.5 for the network method (a pinned solve costs about what
            a cold one does), or half of it for an LP without warm starts
            (`HullLP.warm`: presolve removes the pinned tasks, most of the LP).

    Returns:
        Feasible, improved plans (possibly none).
    """
    per_cold = 1.5 if lp.method == "network" else 3.0 if lp.warm else 0.5
    step = per_cold * lp.cold_solve_s if step_estimate is None else step_estimate
    if budget.remaining() <= step:
        return []
    ip = lp.ip
    lp.unfix_all()
    lp.set_deadline(deadline)
    inner = np.flatnonzero(rep.interior)
    plans = []
    took = budget.stopwatch()
    chosen = tile_choices(ip, rep, steady_period(rep, point.starts), budget)
    for cyclic in itertools.islice(chosen, tiles.start, tiles.stop):
        tile = np.asarray(cyclic)[rep.task_class[inner]]
        lp.fix(inner, tile)
        try:
            pinned = lp.solve()
        except SolverError:  # numerical trouble with this tile: try the next one
            pinned = None
        finally:
            lp.unfix_all()
        if pinned is not None:  # None: the tile leaves the warm-up and cool-down no room
            step = took()
            modes = round_down(lp, pinned.t)
            modes[inner] = tile
            plan = modes.tolist()
            if not meets(ip.evaluate(plan).makespan, deadline):
                plan = repair(ip, plan, deadline)
            plans.append(improve(ip, plan, deadline, budget))
        if budget.remaining() <= step:
            break
        took = budget.stopwatch()
    return plans
