"""Repeated structure (`solvers.periodic`): detection, the cyclic MILP, tiled plans."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

from solvers import Mode
from solvers.budget import Budget
from solvers.indexed import IndexedProblem, meets
from solvers.lp import HullLP
from solvers.periodic import (
    CYCLIC_GAP,
    TILE_RANGE,
    TILES,
    cyclic_model,
    cyclic_plan,
    device_cycle_plans,
    find_repetition,
    period_price,
    steady_period,
    tile_choices,
    tiled_plans,
)
from solvers.relax import relax_once
from solvers.solve import fastest_plan
from solvers.stages import relax_plan


def convex_modes(s: int, k: str, count: int = 6) -> tuple[Mode, ...]:
    base = (1.0 if k == "f" else 2.0) * (1 + 0.07 * s)
    return tuple(
        Mode(base * (1 + 0.06 * j), base * 300 * (1 - 0.05 * j + 0.003 * j * j))
        for j in range(count)
    )


def microbatch(name: str) -> int:
    return int(name.split(".")[1][1:])


@pytest.mark.parametrize(("stages", "microbatches"), [(2, 12), (3, 14), (4, 20)])
def test_interior_is_the_steady_state_of_1f1b(bf, stages: int, microbatches: int) -> None:
    ip = IndexedProblem(bf.one_f_one_b(stages, microbatches, convex_modes))
    rep = find_repetition(ip)
    assert rep is not None
    # Every stage alternates F and B with the pattern of its neighbours exactly for
    # microbatches S … M − S − 1 (before: the warm-up; after: the cool-down).
    steady = {i for i, n in enumerate(ip.names) if stages <= microbatch(n) < microbatches - stages}
    assert set(np.flatnonzero(rep.interior)) == steady
    assert len(rep.members) == 2 * stages
    # Each pattern edge is a real edge wherever its tail is interior.
    by_class_rank = {(int(rep.task_class[i]), int(rep.rank[i])): i for i in range(ip.n)}
    for i in np.flatnonzero(rep.interior):
        for u, v, delta in rep.edges:
            if u == rep.task_class[i]:
                j = by_class_rank[(v, int(rep.rank[i]) + delta)]
                assert j in ip.succs[i]


def test_no_repetition_without_enough_repeats(bf) -> None:
    assert find_repetition(IndexedProblem(bf.random_problem(3, max_tasks=8, max_modes=4))) is None
    # Four microbatches: no microbatch is steady on every stage.
    assert find_repetition(IndexedProblem(bf.one_f_one_b(3, 8, convex_modes))) is None


def cycle_period(durations: list[float], edges, k: int) -> float:
    """The shortest period that fits one-period durations (inf if none): the largest
    Σ d / Σ δ over the cycles of the class graph, by enumeration."""
    g = nx.DiGraph()
    g.add_nodes_from(range(k))
    parallel: dict[tuple[int, int], list[int]] = {}
    for u, v, delta in edges:
        g.add_edge(u, v)
        parallel.setdefault((u, v), []).append(delta)
    best = 0.0
    for cycle in nx.simple_cycles(g):
        arcs = list(zip(cycle, cycle[1:] + cycle[:1], strict=True))
        d = sum(durations[u] for u, _ in arcs)
        for deltas in itertools.product(*(parallel[a] for a in arcs)):
            total = sum(deltas)
            if total <= 0:
                return np.inf
            best = max(best, d / total)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_cyclic_plan_matches_brute_force(bf, seed: int) -> None:
    rng = np.random.default_rng(seed)

    table: dict[tuple[int, str], tuple[Mode, ...]] = {}

    def random_modes(s: int, k: str) -> tuple[Mode, ...]:
        # One random mode table per (stage, kind), shared by all its microbatches.
        if (s, k) not in table:
            d = np.sort(rng.uniform(1.0, 2.0, size=4)) * (2.0 if k == "b" else 1.0)
            e = np.sort(rng.uniform(150.0, 400.0, size=4))[::-1] * d.mean()
            table[(s, k)] = tuple(Mode(float(a), float(b)) for a, b in zip(d, e, strict=True))
        return table[(s, k)]

    ip = IndexedProblem(bf.one_f_one_b(2, 12, random_modes))
    rep = find_repetition(ip)
    assert rep is not None
    k = len(rep.members)
    fast = cycle_period([float(ip.durations[i].min()) for i in rep.members], rep.edges, k)
    slow = cycle_period([float(ip.durations[i].max()) for i in rep.members], rep.edges, k)
    period_max = fast + rng.uniform(0.2, 0.8) * (slow - fast)

    def objective(choice) -> float:
        durations = [float(ip.durations[i][m]) for i, m in zip(rep.members, choice, strict=True)]
        p = cycle_period(durations, rep.edges, k)
        cost = sum(float(ip.costs[i][m]) for i, m in zip(rep.members, choice, strict=True))
        return cost + ip.idle_total_w * p if p <= period_max * (1 + 1e-9) else np.inf

    best = min(
        objective(c) for c in itertools.product(*(range(len(ip.durations[i])) for i in rep.members))
    )
    got = cyclic_plan(ip, rep, period_max, Budget.of(30.0))
    assert got is not None
    assert objective(got) == pytest.approx(best, rel=CYCLIC_GAP)


def test_cyclic_plan_below_the_fastest_period_is_none(bf) -> None:
    ip = IndexedProblem(bf.one_f_one_b(3, 14, convex_modes))
    rep = find_repetition(ip)
    assert rep is not None
    fast = cycle_period(
        [float(ip.durations[i].min()) for i in rep.members], rep.edges, len(rep.members)
    )
    assert cyclic_plan(ip, rep, 0.99 * fast, Budget.of(30.0)) is None
    assert cyclic_plan(ip, rep, 1.001 * fast, Budget.of(30.0)) is not None


@pytest.mark.parametrize("slack", [1.02, 1.05, 1.10])
def test_tiled_plans_meet_the_deadline_and_respect_the_bound(bf, slack: float) -> None:
    ip = IndexedProblem(bf.one_f_one_b(4, 24, convex_modes))
    rep = find_repetition(ip)
    assert rep is not None
    t_fast, _ = fastest_plan(ip)
    deadline = slack * t_fast
    lp = HullLP(ip)
    once = relax_once(lp, deadline)
    bound = once.bound
    plans = tiled_plans(lp, deadline, once.lp_point, rep, Budget.of(60.0))
    assert plans
    for plan in plans:
        ev = ip.evaluate(plan, deadline)
        assert meets(ev.makespan, deadline)
        assert ev.energy >= bound * (1 - 1e-9)
    assert not lp.fixed.any()


def test_relax_stages_keep_the_best_tiled_plan(bf, monkeypatch) -> None:
    import solvers.stages as stages

    seen: list[list[int]] = []

    def recording(*args, **kwargs):
        plans = tiled_plans(*args, **kwargs)
        seen.extend(plans)
        return plans

    monkeypatch.setattr(stages, "tiled_plans", recording)
    ip = IndexedProblem(bf.one_f_one_b(4, 24, convex_modes))
    t_fast, fast = fastest_plan(ip)
    deadline = 1.05 * t_fast
    found = relax_plan(ip, deadline, fast, t_fast, Budget.of(5.0))
    assert seen, "the relax stages did not tile this pipeline"
    best_tiled = min(ip.evaluate(plan, deadline).energy for plan in seen)
    e_found = ip.evaluate(found.modes, deadline).energy
    assert meets(ip.evaluate(found.modes).makespan, deadline)
    assert e_found <= best_tiled * (1 + 1e-12)


def _tiling_case(bf):
    """A 4 × 24 pipeline, its repetition, fastest makespan, LP and LP point at 1.05 ×."""
    ip = IndexedProblem(bf.one_f_one_b(4, 24, convex_modes))
    rep = find_repetition(ip)
    assert rep is not None
    t_fast, _ = fastest_plan(ip)
    lp = HullLP(ip)
    return ip, rep, t_fast, lp, relax_once(lp, 1.05 * t_fast).lp_point


def test_no_tiling_when_the_time_is_spent(bf) -> None:
    _, rep, t_fast, lp, point = _tiling_case(bf)
    assert tiled_plans(lp, 1.05 * t_fast, point, rep, Budget.of(0.0)) == []
    assert tiled_plans(lp, 1.05 * t_fast, point, rep, Budget.of(1.0), step_estimate=2.0) == []


def test_longer_blocks_contain_the_shorter_ones(bf) -> None:
    """A plan that repeats every rank also repeats every two ranks: per rank, the
    2-rank block can only be cheaper. Its LP relaxation is exactly as cheap (averaging
    the two ranks of any LP solution gives a 1-rank one)."""
    ip = IndexedProblem(bf.one_f_one_b(3, 14, convex_modes))
    rep = find_repetition(ip)
    assert rep is not None
    k = len(rep.members)
    fast = cycle_period([float(ip.durations[i].min()) for i in rep.members], rep.edges, k)
    per_rank = {}
    for block in (1, 2):
        for integer in (False, True):
            model = cyclic_model(ip, rep, 1.08 * fast * block, block=block, integer=integer)
            model.highs.setOptionValue("mip_rel_gap", 1e-9)
            model.highs.run()
            per_rank[(block, integer)] = model.highs.getInfo().objective_function_value / block
    assert per_rank[(2, False)] == pytest.approx(per_rank[(1, False)], rel=1e-9)
    assert per_rank[(2, True)] <= per_rank[(1, True)] * (1 + 1e-9)
    assert per_rank[(1, False)] <= per_rank[(2, True)] * (1 + 1e-9)
    # The 2-rank block's plan, read back, has one mode per class and rank.
    model = cyclic_model(ip, rep, 1.08 * fast * 2, block=2)
    model.highs.run()
    choice = model.choice()
    assert len(choice) == k
    assert all(len(row) == 2 for row in choice)


def _random_1f1b(bf, seed: int, stages: int, modes: int = 5) -> IndexedProblem:
    """A 1F1B pipeline with one random convex-ish mode table per (stage, kind)."""
    rng = np.random.default_rng(seed)
    table: dict[tuple[int, str], tuple[Mode, ...]] = {}

    def random_modes(s: int, k: str) -> tuple[Mode, ...]:
        if (s, k) not in table:
            d = np.sort(rng.uniform(1.0, 2.0, size=modes)) * (2.0 if k == "b" else 1.0)
            e = np.sort(rng.uniform(150.0, 400.0, size=modes))[::-1] * d.mean()
            table[(s, k)] = tuple(Mode(float(a), float(b)) for a, b in zip(d, e, strict=True))
        return table[(s, k)]

    return IndexedProblem(bf.one_f_one_b(stages, 4 * stages + 4, random_modes))


@pytest.mark.parametrize("seed", range(8))
def test_device_cycle_plans_score_what_the_cyclic_milp_proves(bf, seed: int) -> None:
    """At any price of time and any longest period, the cheapest plan by the device
    cycles scores exactly the cyclic MILP's proven optimum (Σ cost + price · Π), and
    fits every cycle of the class graph at its period."""
    ip = _random_1f1b(bf, seed, stages=2 + seed % 3)
    rep = find_repetition(ip)
    assert rep is not None
    k = len(rep.members)
    rng = np.random.default_rng(100 + seed)
    fast = cycle_period([float(ip.durations[i].min()) for i in rep.members], rep.edges, k)
    slow = cycle_period([float(ip.durations[i].max()) for i in rep.members], rep.edges, k)
    for price in (ip.idle_total_w, float(rng.uniform(0, 20)) * ip.idle_total_w):
        period_max = fast + float(rng.uniform(0.1, 0.9)) * (slow - fast)
        ranked = device_cycle_plans(ip, rep, 0.0, period_max, price, 3)
        assert ranked
        plan, period, score = ranked[0]
        durations = [float(ip.durations[i][m]) for i, m in zip(rep.members, plan, strict=True)]
        assert cycle_period(durations, rep.edges, k) <= period * (1 + 1e-9)
        assert period <= period_max * (1 + 1e-12)
        cost = sum(float(ip.costs[i][m]) for i, m in zip(rep.members, plan, strict=True))
        assert score == pytest.approx(cost + price * period, rel=1e-12)
        milp = cyclic_model(ip, rep, period_max, price=price)
        milp.model.set_option("mip_rel_gap", 1e-9)
        assert milp.model.run(60.0) == "optimal"
        assert score == pytest.approx(milp.model.objective(), rel=1e-7)
        # The ranking: distinct plans, scores never falling.
        assert len({tuple(p) for p, _, _ in ranked}) == len(ranked)
        assert all(a[2] <= b[2] for a, b in itertools.pairwise(ranked))


def test_device_cycles_that_cannot_tell_leave_it_to_the_milp(bf, monkeypatch) -> None:
    import solvers.periodic as periodic

    ip = _random_1f1b(bf, 3, stages=3)
    rep = find_repetition(ip)
    assert rep is not None
    fast = cycle_period(
        [float(ip.durations[i].min()) for i in rep.members], rep.edges, len(rep.members)
    )
    by_cycles = cyclic_plan(ip, rep, 1.1 * fast, Budget.of(30.0))
    monkeypatch.setattr(periodic, "DEVICE_COMBINATIONS", 1)
    assert device_cycle_plans(ip, rep, 0.0, 1.1 * fast, ip.idle_total_w, 1) is None
    by_milp = cyclic_plan(ip, rep, 1.1 * fast, Budget.of(30.0))

    def cost(plan: list[int]) -> float:
        return sum(float(ip.costs[i][m]) for i, m in zip(rep.members, plan, strict=True))

    assert cost(by_milp) == pytest.approx(cost(by_cycles), rel=CYCLIC_GAP)


@pytest.mark.parametrize("seed", range(6))
def test_fits_finds_every_cycle_that_overruns(bf, seed: int) -> None:
    """`_fits` against the enumeration of the class graph's cycles."""
    from solvers.periodic import _fits

    ip = _random_1f1b(bf, seed, stages=3)
    rep = find_repetition(ip)
    assert rep is not None
    rng = np.random.default_rng(seed)
    for _ in range(20):
        durations = [float(rng.choice(ip.durations[i])) for i in rep.members]
        need = cycle_period(durations, rep.edges, len(rep.members))
        assert _fits(rep.edges, durations, need * 1.001)
        assert not _fits(rep.edges, durations, need * 0.99)


def test_tiles_are_distinct_near_the_lp_period_and_cheapest_first(bf) -> None:
    ip, rep, _, _, point = _tiling_case(bf)
    period = steady_period(rep, point.starts)
    price = period_price(ip, rep, period)
    assert price > 0
    tiles = list(tile_choices(ip, rep, period, Budget.of(30.0)))
    assert 1 <= len(tiles) <= TILES
    assert len({tuple(t) for t in tiles}) == len(tiles)
    lo, hi = TILE_RANGE
    ranked = device_cycle_plans(ip, rep, lo * period, hi * period, price, TILES)
    assert [p for p, _, _ in ranked] == tiles
