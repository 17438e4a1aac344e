"""Batched deadline repair (`solvers.improve.repair_batched`) and the nearest rounding
of the LP (`solvers.relax.nearest_rounding`), on random problems and pipelines."""

from __future__ import annotations

import pytest

from solvers.budget import Budget
from solvers.hull import pareto_modes
from solvers.improve import repair, repair_batched
from solvers.indexed import IndexedProblem, meets
from solvers.lp import HullLP
from solvers.relax import nearest_rounding
from solvers.solve import fastest_plan

SEEDS = range(24)


def _slowest(ip: IndexedProblem) -> list[int]:
    """Every task in its slowest Pareto mode (late for any tight deadline)."""
    return [int(pareto_modes(ip.durations[i], ip.costs[i])[-1]) for i in range(ip.n)]


@pytest.mark.parametrize("seed", SEEDS)
def test_batched_repair_meets_the_deadline_from_the_slowest_plan(bf, seed: int) -> None:
    problem = bf.random_problem(seed, max_tasks=7, max_modes=4)
    deadline = bf.deadline_between(problem, seed)
    ip = IndexedProblem(problem)
    start = _slowest(ip)
    out = repair_batched(ip, start, deadline)
    assert out is not None
    makespan, _ = bf.true_evaluate(problem, dict(zip(ip.names, out, strict=True)), deadline)
    assert makespan <= deadline * (1 + 1e-9)
    # It only ever speeds tasks up: no task is slower than where it started.
    for i, (a, b) in enumerate(zip(start, out, strict=True)):
        assert ip.durations[i][b] <= ip.durations[i][a]


@pytest.mark.parametrize("share", [0.0, 0.05, 0.5, 1.0])
def test_batched_repair_on_a_pipeline_for_any_share(bf, share: float) -> None:
    problem, deadline = bf.pipeline_problem(4, 8)
    ip = IndexedProblem(problem)
    start = _slowest(ip)
    assert not meets(ip.evaluate(start).makespan, deadline)
    out = repair_batched(ip, start, deadline, share=share)
    assert out is not None
    assert meets(ip.evaluate(out).makespan, deadline)


def test_batched_repair_with_share_zero_is_the_one_move_repair(bf) -> None:
    # One move a pass, the cheapest per second saved among the critical tasks: the
    # same rule as `repair`, so the same plan.
    problem, deadline = bf.pipeline_problem(3, 6)
    ip = IndexedProblem(problem)
    start = _slowest(ip)
    assert repair_batched(ip, start, deadline, share=0.0) == repair(ip, start, deadline)


def test_batched_repair_stops_on_a_spent_budget(bf) -> None:
    problem, deadline = bf.pipeline_problem(3, 6)
    ip = IndexedProblem(problem)
    assert repair_batched(ip, _slowest(ip), deadline, Budget.of_work(1e-9)) is None


@pytest.mark.parametrize("slack", [1.0, 1.03, 1.1, 1.3])
def test_nearest_rounding_meets_the_deadline_above_the_bound(bf, slack: float) -> None:
    problem, _ = bf.pipeline_problem(4, 8)
    ip = IndexedProblem(problem)
    t_fast, _ = fastest_plan(ip)
    deadline = slack * t_fast
    for method in ("highs", "network"):
        lp = HullLP(ip, method=method)
        lp.set_deadline(deadline)
        point = lp.solve()
        assert point is not None
        modes = nearest_rounding(lp, point, deadline, Budget.of_work(60.0))
        assert modes is not None
        ev = ip.evaluate(modes, deadline)
        assert meets(ev.makespan, deadline)
        bound = point.energy_bound(ip, deadline)
        assert ev.energy >= bound * (1 - 1e-9)


def test_nearest_rounding_without_work_left_gives_nothing(bf) -> None:
    problem, deadline = bf.pipeline_problem(3, 6)
    ip = IndexedProblem(problem)
    lp = HullLP(ip)
    lp.set_deadline(deadline)
    point = lp.solve()
    assert point is not None
    budget = Budget.of_work(1e-9)
    budget.charge(1.0)
    assert nearest_rounding(lp, point, deadline, budget) is None
