"""The hull LP through its dual network (`solvers.network`) against HiGHS.

HiGHS solves the LP in its primal form by a general simplex; the network method solves
the dual circulation by an interior point and certifies its bound from a flow. The two
share nothing but the hull tables, so agreement of the bound checks both. The schedule
the network method returns is checked on its own: within the task bounds, meeting the
deadline, and costing (by the LP's own objective) what the bound says — the primal–dual
certificate of optimality.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from solvers import Mode
from solvers.exceptions import SolverError, TimeLimitReached
from solvers.flowipm import Laplacian, min_cost_circulation
from solvers.indexed import indexed
from solvers.lp import HullLP
from solvers.scaling import scaled
from solvers.solve import fastest_plan

#: Relative agreement of the two bounds (the target is 1e-6; both methods do far better).
AGREE = 1e-8


def _clock_modes(rng: np.random.Generator, base: float) -> tuple[Mode, ...]:
    """30 SM clocks of a compute-bound kernel with ±1 % noise (as benchmarks/lp_scale)."""
    modes = []
    for f in np.linspace(1410, 780, 30):
        t = base * (0.85 * 1410 / f + 0.15) * rng.uniform(0.99, 1.01)
        p = (105 + 245 * (f / 1410) ** 2.4) * rng.uniform(0.99, 1.01)
        modes.append(Mode(float(t), float(t * p)))
    return tuple(modes)


def _pipeline(bf, stages: int, microbatches: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    table = {
        (s, k): _clock_modes(rng, 0.042 * (2.0 if k == "b" else 1.0) * rng.uniform(0.95, 1.05))
        for s in range(stages)
        for k in "fb"
    }
    problem = bf.one_f_one_b(stages, microbatches, lambda s, k: table[(s, k)], idle_w=75.0)
    ip = scaled(indexed(problem))
    return ip, fastest_plan(indexed(problem))[0] / ip.time_unit


def _both(ip, deadline, pins=None):
    out = []
    for method in ("highs", "network"):
        lp = HullLP(ip, method=method)
        if pins is not None:
            lp.fix(*pins)
        lp.set_deadline(deadline)
        out.append((lp, lp.solve()))
    return out


def _check_schedule(lp: HullLP, point, deadline) -> None:
    """The network's schedule is feasible and costs its own bound (optimality)."""
    ip = lp.ip
    pinned = lp.fixed
    lo = np.where(pinned, lp._pin_d, lp.t_lo)
    hi = np.where(pinned, lp._pin_d, lp.t_hi)
    assert np.all(point.t >= lo - 1e-12) and np.all(point.t <= hi + 1e-12)
    makespan = float(np.max(ip.earliest_starts(point.t) + point.t))
    if deadline is not None:
        assert makespan <= deadline * (1 + 1e-8)
    net = lp.network
    held = lp.hold_deadline and deadline is not None
    idle = 0.0 if held else ip.idle_total_w
    primal = net.primal_objective(point.t, makespan, idle, pinned, lp._pin_c)
    assert primal == pytest.approx(point.objective, rel=1e-8)


@pytest.mark.parametrize(("stages", "microbatches"), [(4, 32), (8, 64)])
def test_bound_agrees_with_highs_on_the_benchmark_pipelines(bf, stages, microbatches) -> None:
    # The two smallest sizes of benchmarks/lp_scale.py (the benchmark checks every size).
    ip, t_fast = _pipeline(bf, stages, microbatches)
    deadline = 1.10 * t_fast
    (_, highs), (lp, net) = _both(ip, deadline)
    assert lp.method == "network"
    assert net.objective == pytest.approx(highs.objective, rel=AGREE)
    _check_schedule(lp, net, deadline)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("hold", ["makespan", "deadline"])
def test_random_problems_agree_with_highs_at_any_deadline(bf, seed, hold) -> None:
    problem = bf.random_problem(seed, max_tasks=14, max_modes=6, max_assignments=10**12, hold=hold)
    ip = scaled(indexed(problem))
    t_fast = fastest_plan(indexed(problem))[0] / ip.time_unit
    for deadline in (None, t_fast, 1.05 * t_fast, 1.4 * t_fast, 3.0 * t_fast):
        (_, highs), (lp, net) = _both(ip, deadline)
        assert (highs is None) == (net is None)
        assert net.objective == pytest.approx(highs.objective, rel=AGREE, abs=1e-9)
        assert net.energy_bound(ip, deadline) == pytest.approx(
            highs.energy_bound(ip, deadline), rel=AGREE, abs=1e-9
        )
        _check_schedule(lp, net, deadline)


def _pinned_agree(ip, deadline: float, tasks: list[int], modes: list[int]) -> HullLP:
    """Both methods with `tasks` pinned to `modes`: the same optimum (or both none), and
    a network schedule that costs it. The network's LP, still pinned."""
    (_, highs), (lp, net) = _both(ip, deadline, (tasks, modes))
    assert (highs is None) == (net is None)
    if net is not None:
        assert net.objective == pytest.approx(highs.objective, rel=AGREE)
        _check_schedule(lp, net, deadline)
    return lp


@pytest.mark.parametrize("seed", range(6))
def test_pinned_tasks_agree_with_highs(bf, seed) -> None:
    ip, t_fast = _pipeline(bf, 3, 6, seed)
    rng = np.random.default_rng(seed)
    tasks = rng.choice(ip.n, ip.n // 3, replace=False).tolist()
    modes = [int(rng.integers(len(ip.durations[i]))) for i in tasks]
    # Pinned to arbitrary modes (dominated ones too), the deadline has to leave room.
    deadline = 1.6 * t_fast
    lp = _pinned_agree(ip, deadline, tasks, modes)
    lp.unfix_all()
    again = lp.solve()
    free = HullLP(ip, method="highs")
    free.set_deadline(deadline)
    assert again.objective == pytest.approx(free.solve().objective, rel=AGREE)


def test_deadline_below_the_fastest_makespan_is_infeasible(bf) -> None:
    ip, t_fast = _pipeline(bf, 3, 4)
    (_, highs), (_, net) = _both(ip, 0.99 * t_fast)
    assert highs is None and net is None


def test_bound_never_exceeds_the_optimum(bf) -> None:
    for seed in range(8):
        problem = bf.random_problem(seed, max_tasks=6, max_modes=3)
        deadline = bf.deadline_between(problem, seed)
        best, _, _ = bf.brute_force(problem, deadline)
        ip = indexed(problem)
        lp = HullLP(ip, method="network")
        lp.set_deadline(deadline)
        point = lp.solve()
        assert point.energy_bound(ip, deadline) <= best * (1 + 1e-9)


def test_the_same_input_gives_the_same_numbers(bf) -> None:
    ip, t_fast = _pipeline(bf, 4, 8)
    points = []
    for _ in range(2):
        lp = HullLP(ip, method="network")
        lp.set_deadline(1.08 * t_fast)
        points.append(lp.solve())
    assert points[0].objective == points[1].objective
    assert np.array_equal(points[0].t, points[1].t)
    assert np.array_equal(points[0].starts, points[1].starts)


def test_a_stop_time_in_the_past_stops_the_network_solve(bf) -> None:
    ip, t_fast = _pipeline(bf, 3, 4)
    lp = HullLP(ip, method="network")
    lp.set_deadline(1.1 * t_fast)
    lp.stop_at = time.perf_counter() - 1.0
    with pytest.raises(TimeLimitReached):
        lp.solve()
    lp.stop_at = None
    assert lp.solve() is not None


def test_unknown_method_is_refused(bf) -> None:
    ip, _ = _pipeline(bf, 2, 2)
    with pytest.raises(SolverError, match="unknown LP method 'simplex'"):
        HullLP(ip, method="simplex")


def test_circulation_of_a_two_route_network() -> None:
    # Nodes 0 → 1 → 3 and 0 → 2 → 3, back 3 → 0 at cost 5 per unit. The routes gain 9
    # and 7 per unit against the return's 5: both fill up (capacities 2 and 3).
    tail = np.array([0, 1, 0, 2, 3])
    head = np.array([1, 3, 2, 3, 0])
    cost = np.array([-4.0, -5.0, -3.0, -4.0, 5.0])
    cap = np.array([2.0, np.inf, 3.0, np.inf, np.inf])
    res = min_cost_circulation(tail, head, cost, cap, 4, scale=20.0)
    assert res.converged
    assert res.flow == pytest.approx([2, 2, 3, 3, 5], rel=1e-7)
    assert float(cost @ res.flow) == pytest.approx(-2 * 4 - 3 * 2, rel=1e-7)


def test_eliminating_nodes_solves_the_same_system() -> None:
    rng = np.random.default_rng(3)
    nodes = 9
    # Nodes 0–6 richly joined; 7 and 8 each joined to three of them only.
    inner = rng.integers(0, 7, 30)
    tail = np.concatenate([inner, [7, 1, 7, 8, 8, 4]])
    head = np.concatenate([(inner + rng.integers(1, 7, 30)) % 7, [0, 7, 2, 3, 5, 8]])
    theta = rng.uniform(0.1, 10.0, len(tail))
    plain = Laplacian(tail, head, nodes, ground=0)
    # Nodes 7 and 8 eliminated when they share no arc (the class keeps that true).
    reduced = Laplacian(tail, head, nodes, ground=0, eliminate=np.array([7, 8]))
    assert sorted(reduced.gone) == [7, 8]
    rhs = rng.normal(size=nodes - 1)
    inc = plain.incidence.toarray()
    dense = inc @ np.diag(theta) @ inc.T
    expect = np.linalg.solve(dense, rhs)
    assert plain.factor(theta)(rhs) == pytest.approx(expect, rel=1e-9)
    assert reduced.factor(theta)(rhs) == pytest.approx(expect, rel=1e-9)


def test_later_factorizations_reuse_the_ordering_and_still_solve_exactly() -> None:
    rng = np.random.default_rng(5)
    nodes = 40
    tail = rng.integers(0, nodes, 160)
    head = (tail + rng.integers(1, nodes, 160)) % nodes
    # A chain keeps the graph connected; nodes 30–39 hang off it and may be eliminated.
    tail = np.concatenate([tail, np.arange(nodes - 1)])
    head = np.concatenate([head, np.arange(1, nodes)])
    lap = Laplacian(tail, head, nodes, ground=0, eliminate=np.arange(30, 40))
    inc = lap.incidence.toarray()
    for _ in range(3):  # the first factorization orders, the later ones reuse it
        theta = 10.0 ** rng.uniform(-6, 6, len(tail))
        rhs = rng.normal(size=nodes - 1)
        expect = np.linalg.solve(inc @ np.diag(theta) @ inc.T, rhs)
        got = lap.factor(theta)(rhs)
        assert np.max(np.abs(got - expect)) <= 1e-7 * np.max(np.abs(expect))
    assert lap._order is not None and sorted(lap._order) == list(range(lap.schur_size))


@pytest.mark.parametrize("seed", range(3))
def test_a_pinned_steady_state_agrees_with_highs(bf, seed) -> None:
    """The tiling's solve: every steady task pinned (one arc each in the network),
    the warm-up and cool-down free. The same optimum as HiGHS, and a schedule that
    costs it."""
    from solvers.periodic import find_repetition

    ip, t_fast = _pipeline(bf, 4, 16, seed)
    rep = find_repetition(ip)
    assert rep is not None
    rng = np.random.default_rng(seed)
    inner = np.flatnonzero(rep.interior).tolist()
    per_class = [int(rng.integers(len(ip.durations[m]))) for m in rep.members]
    modes = [per_class[rep.task_class[i]] for i in inner]
    _pinned_agree(ip, 1.5 * t_fast, inner, modes)
