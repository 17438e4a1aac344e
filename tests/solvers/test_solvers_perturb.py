"""Iterated improvement (`solvers.perturb`) against brute force and on a pipeline."""

from __future__ import annotations

import pytest

from solvers.budget import Budget
from solvers.improve import improve
from solvers.indexed import IndexedProblem, meets
from solvers.perturb import perturb_search
from solvers.solve import fastest_plan

SEEDS = range(24)


@pytest.mark.parametrize("seed", SEEDS)
def test_plan_meets_the_deadline_and_never_gets_worse(bf, seed: int) -> None:
    problem = bf.random_problem(seed, max_tasks=7, max_modes=4)
    deadline = bf.deadline_between(problem, seed)
    ip = IndexedProblem(problem)
    _, fast = fastest_plan(ip)
    start = improve(ip, fast, deadline)
    out = perturb_search(ip, start, deadline, Budget.of(30.0), patience=50)
    assign = {name: out[i] for i, name in enumerate(ip.names)}
    makespan, energy = bf.true_evaluate(problem, assign, deadline)
    _, start_energy = bf.true_evaluate(
        problem, {name: start[i] for i, name in enumerate(ip.names)}, deadline
    )
    opt, _, _ = bf.brute_force(problem, deadline)
    assert makespan <= deadline * (1 + 1e-9)
    assert energy <= start_energy + 1e-9 * abs(start_energy)
    assert energy >= opt - 1e-9 * abs(opt) - 1e-9


def test_finds_plans_that_single_slowdowns_cannot_reach(bf) -> None:
    problem, deadline = bf.pipeline_problem()
    ip = IndexedProblem(problem)
    _, fast = fastest_plan(ip)
    start = improve(ip, fast, deadline)
    e_start = ip.evaluate(start, deadline).energy
    out = perturb_search(ip, start, deadline, Budget.of(30.0), patience=200)
    ev = ip.evaluate(out, deadline)
    assert meets(ev.makespan, deadline)
    # `start` is a local optimum of `improve`; perturbation must get past it.
    assert ev.energy < e_start - 1e-6 * e_start


def test_same_seed_same_plan(bf) -> None:
    problem, deadline = bf.pipeline_problem(3, 4)
    ip = IndexedProblem(problem)
    _, fast = fastest_plan(ip)
    start = improve(ip, fast, deadline)
    a = perturb_search(ip, start, deadline, Budget.of(60.0), patience=40, seed=7)
    b = perturb_search(ip, start, deadline, Budget.of(60.0), patience=40, seed=7)
    assert a == b


def test_no_time_returns_the_start_plan(bf) -> None:
    problem, deadline = bf.pipeline_problem(2, 3)
    ip = IndexedProblem(problem)
    _, fast = fastest_plan(ip)
    assert perturb_search(ip, fast, deadline, Budget.of(0.0)) == [int(m) for m in fast]
