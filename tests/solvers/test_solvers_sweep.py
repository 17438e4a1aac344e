"""Frontier sweeps of the relax search against brute force on small random problems."""

from __future__ import annotations

import pytest

from solvers import Problem
from solvers.budget import Budget
from solvers.indexed import IndexedProblem, meets
from solvers.lp import HullLP
from solvers.relax import relax_once, sweep
from solvers.solve import fastest_plan
from solvers.stages import relax_plan

SEEDS = range(16)


def _setup(bf, seed: int) -> tuple[Problem, IndexedProblem, HullLP, float, float]:
    problem = bf.random_problem(seed, max_tasks=6, max_modes=4)
    deadline = bf.deadline_between(problem, seed)
    ip = IndexedProblem(problem)
    t_fast, _ = fastest_plan(ip)
    return problem, ip, HullLP(ip), deadline, t_fast


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("steps", [2, 7])
def test_sweep_plan_is_feasible_and_no_better_than_the_optimum(bf, seed: int, steps: int) -> None:
    problem, ip, lp, deadline, t_fast = _setup(bf, seed)
    if not meets(t_fast, deadline):
        pytest.fail("deadline_between gave a deadline below the fastest makespan")
    res, step_cost, end_cost = sweep(lp, t_fast, deadline, steps, Budget.of(60.0), stop=deadline)
    assert res is not None and step_cost >= 0 and end_cost >= 0
    assign = {name: res.modes[i] for i, name in enumerate(ip.names)}
    makespan, energy = bf.true_evaluate(problem, assign, deadline)
    opt, _, _ = bf.brute_force(problem, deadline)
    assert makespan <= deadline * (1 + 1e-9)
    assert energy >= opt - 1e-9 * abs(opt) - 1e-9
    assert res.bound <= opt + 1e-7 * abs(opt) + 1e-9


@pytest.mark.parametrize("seed", SEEDS)
def test_sweep_without_time_still_ends_at_the_deadline(bf, seed: int) -> None:
    problem, ip, lp, deadline, t_fast = _setup(bf, seed)
    res, _, _ = sweep(lp, t_fast, deadline, 50, Budget.of(0.0), stop=deadline)
    assert res is not None
    assign = {name: res.modes[i] for i, name in enumerate(ip.names)}
    assert bf.true_evaluate(problem, assign, deadline)[0] <= deadline * (1 + 1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_search_keeps_the_best_plan(bf, seed: int) -> None:
    _, ip, lp, deadline, t_fast = _setup(bf, seed)
    once = relax_once(lp, deadline)
    best = relax_plan(ip, deadline, fastest_plan(ip)[1], t_fast, Budget.of(30.0), lp=lp)
    assert once is not None and best is not None
    e_once = ip.evaluate(once.modes, deadline).energy
    e_best = ip.evaluate(best.modes, deadline).energy
    assert e_best <= e_once + 1e-9 * abs(e_once)
    assert meets(ip.evaluate(best.modes).makespan, deadline)
    assert best.bound == pytest.approx(once.bound, rel=1e-9, abs=1e-9)
