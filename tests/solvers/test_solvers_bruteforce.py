"""Solvers against brute-force enumeration on small random problems."""

from __future__ import annotations

import itertools
import math

import pytest

from solvers import Problem, evaluate, fastest_makespan, solve

SEEDS = range(24)


def _check_plan(bf, problem: Problem, sol, deadline: float | None) -> None:
    """The plan meets its deadline and its reported numbers are the true ones."""
    mk, e = bf.true_evaluate(problem, dict(sol.modes), deadline)
    assert sol.makespan == pytest.approx(mk, rel=1e-9, abs=1e-12)
    assert sol.energy == pytest.approx(e, rel=1e-9, abs=1e-9)
    if deadline is not None:
        assert sol.makespan <= deadline * (1 + 1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_milp_equals_brute_force(bf, seed: int) -> None:
    problem = bf.random_problem(seed)
    deadline = bf.deadline_between(problem, seed)
    opt, fastest, _ = bf.brute_force(problem, deadline)
    sol = solve(problem, deadline, method="milp", gap=1e-9)
    _check_plan(bf, problem, sol, deadline)
    assert sol.energy == pytest.approx(opt, rel=1e-6, abs=1e-6)
    assert sol.status == "optimal"
    assert sol.lower_bound <= opt + 1e-6 * abs(opt) + 1e-9
    assert fastest_makespan(problem) == pytest.approx(fastest, rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_relax_bounds_the_optimum(bf, seed: int) -> None:
    problem = bf.random_problem(seed)
    deadline = bf.deadline_between(problem, seed)
    opt, _, _ = bf.brute_force(problem, deadline)
    sol = solve(problem, deadline, method="relax")
    _check_plan(bf, problem, sol, deadline)
    assert sol.lower_bound <= opt + 1e-7 * abs(opt) + 1e-9
    assert sol.energy >= opt - 1e-9 * abs(opt) - 1e-9
    assert sol.gap == pytest.approx((sol.energy - sol.lower_bound) / abs(sol.energy), abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_auto_reaches_the_optimum(bf, seed: int) -> None:
    problem = bf.random_problem(seed, hold="deadline" if seed % 2 else "makespan")
    deadline = bf.deadline_between(problem, seed)
    opt, _, _ = bf.brute_force(problem, deadline)
    sol = solve(problem, deadline, method="auto", gap=1e-7)
    _check_plan(bf, problem, sol, deadline)
    assert sol.energy == pytest.approx(opt, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("seed", range(12))
def test_unconstrained_is_the_global_minimum(bf, seed: int) -> None:
    problem = bf.random_problem(seed + 100)
    opt, _, _ = bf.brute_force(problem, None)
    for method in ("milp", "relax"):
        sol = solve(problem, None, method=method, gap=1e-9)
        _check_plan(bf, problem, sol, None)
        assert sol.lower_bound <= opt + 1e-7 * abs(opt) + 1e-9
        if method == "milp":
            assert sol.energy == pytest.approx(opt, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("seed", range(30))
def test_groups_and_transitions_by_brute_force(bf, seed: int) -> None:
    base = bf.random_problem(seed + 200, settings=True, max_tasks=6)
    # Group same-device tasks pairwise; put a transition cost on every device whose
    # tasks are totally ordered (chain them with edges so that all are).
    by_dev: dict[str, list[str]] = {}
    for t in base.tasks:
        by_dev.setdefault(t.device, []).append(t.name)
    edges = list(base.edges)
    groups = []
    for names in by_dev.values():
        edges += [(a, b) for a, b in itertools.pairwise(names)]
        if len(names) >= 2 and seed % 3 != 0:
            settings_a = {
                m.setting for m in next(t for t in base.tasks if t.name == names[0]).modes
            }
            settings_b = {
                m.setting for m in next(t for t in base.tasks if t.name == names[1]).modes
            }
            if settings_a & settings_b:
                groups.append((names[0], names[1]))
    transition = {d: (0.05 + 0.1 * (seed % 4), 3.0 + seed) for d in by_dev}
    problem = Problem(base.tasks, tuple(edges), base.idle_power, tuple(groups), transition)
    deadline = None if seed % 4 == 0 else 1.3 * fastest_makespan(problem) + 0.2
    opt, fastest, _ = bf.brute_force(problem, deadline)
    assert fastest_makespan(problem) == pytest.approx(fastest, rel=1e-9)
    sol = solve(problem, deadline, method="milp", gap=1e-9)
    _check_plan(bf, problem, sol, deadline)
    assert sol.energy == pytest.approx(opt, rel=1e-6, abs=1e-6)
    relax = solve(problem, deadline, method="relax")
    _check_plan(bf, problem, relax, deadline)
    assert relax.lower_bound <= opt + 1e-7 * abs(opt) + 1e-9
    assert relax.energy >= opt - 1e-9 * abs(opt) - 1e-9
    names = dict(relax.modes)
    for group in groups:
        settings = {
            next(t for t in problem.tasks if t.name == n).modes[names[n]].setting for n in group
        }
        assert len(settings) == 1


def test_evaluate_matches_a_hand_computation() -> None:
    from solvers import Mode, Task

    # a (gpu0) -> b (gpu1); c (gpu0) after a as well.
    a = Task("a", "gpu0", (Mode(2.0, 300.0, var_energy=4.0), Mode(3.0, 250.0)))
    b = Task("b", "gpu1", (Mode(1.0, 120.0, var_energy=1.0),))
    c = Task("c", "gpu0", (Mode(0.5, 40.0), Mode(1.5, 60.0)))
    p = Problem((a, b, c), (("a", "b"), ("a", "c")), {"gpu0": 50.0, "gpu1": 30.0})
    sol = evaluate(p, {"a": 0, "b": 0, "c": 1})
    # Starts: a 0, b 2, c 2; ends 2, 3, 3.5 -> makespan 3.5.
    assert sol.starts == {"a": 0.0, "b": 2.0, "c": 2.0}
    assert sol.makespan == 3.5
    # Energy: 300 + 120 + 60 + 50·(3.5 − 3.5) + 30·(3.5 − 1) = 555.
    assert sol.energy == pytest.approx(555.0)
    assert sol.idle_energy == pytest.approx(75.0)
    assert sol.busy == {"gpu0": 3.5, "gpu1": 1.0}
    assert sol.var_energy == pytest.approx(5.0)
    assert math.isnan(sol.lower_bound)
    # Held to a 5 s deadline, both devices pay idle power until then.
    held = evaluate(Problem(p.tasks, p.edges, p.idle_power, hold="deadline"), sol.modes, 5.0)
    assert held.energy == pytest.approx(480.0 + 50.0 * 1.5 + 30.0 * 4.0)
    assert held.status == "evaluated"
    assert evaluate(p, sol.modes, 3.0).status == "late"
