"""The plan frontier: feasible, Pareto, right endpoints (checked by brute force)."""

from __future__ import annotations

import itertools

import pytest

from solvers import frontier


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("method", ["relax", "milp"])
def test_frontier_is_feasible_pareto_with_exact_ends(bf, seed: int, method: str) -> None:
    problem = bf.random_problem(seed + 300, max_tasks=6)
    points = frontier(problem, num_points=12, method=method)
    assert points
    for s in points:
        mk, e = bf.true_evaluate(problem, dict(s.modes))
        assert s.makespan == pytest.approx(mk, rel=1e-9)
        assert s.energy == pytest.approx(e, rel=1e-9, abs=1e-9)
        assert s.deadline is None or s.makespan <= s.deadline * (1 + 1e-9)
        assert s.lower_bound <= s.energy + 1e-9 * (1 + abs(s.energy))
    for a, b in itertools.pairwise(points):
        assert a.makespan < b.makespan
        assert a.energy > b.energy
    # Ends: the fastest makespan, and the energy-minimizing plan.
    _, fastest, _ = bf.brute_force(problem, None)
    assert points[0].makespan == pytest.approx(fastest, rel=1e-9)
    global_min, _, _ = bf.brute_force(problem, None)
    if method == "milp":
        assert points[-1].energy == pytest.approx(global_min, rel=1e-6, abs=1e-6)
        at_fastest, _, _ = bf.brute_force(problem, fastest)
        assert points[0].energy == pytest.approx(at_fastest, rel=1e-6, abs=1e-6)
        # Every point is the optimum at its deadline.
        for s in points:
            opt, _, _ = bf.brute_force(problem, s.deadline)
            assert s.energy == pytest.approx(opt, rel=1e-6, abs=1e-6)
    else:
        assert points[-1].energy >= global_min - 1e-9 * (1 + abs(global_min))


def test_frontier_has_the_points_asked_for(bf) -> None:
    # A chain of tasks with many modes has many distinct Pareto plans.
    from solvers import Mode, Problem, Task

    tasks = tuple(
        Task(
            f"t{i}",
            f"d{i % 2}",
            tuple(Mode(1.0 + 0.1 * k + 0.01 * i, 100.0 / (1.0 + 0.1 * k) + i) for k in range(8)),
        )
        for i in range(6)
    )
    edges = tuple((f"t{i}", f"t{i + 1}") for i in range(5))
    problem = Problem(tasks, edges, {"d0": 5.0, "d1": 5.0})
    points = frontier(problem, num_points=20)
    assert len(points) >= 20
    energies = [s.energy for s in points]
    assert energies == sorted(energies, reverse=True)


def _pareto_plans(bf, problem) -> list[tuple[float, float]]:
    """Every Pareto-optimal (makespan s, energy J) by enumeration, makespan rising."""
    points = sorted(bf.true_evaluate(problem, a) for a in bf.all_assignments(problem))
    out: list[tuple[float, float]] = []
    for makespan, energy in points:
        if out and energy >= out[-1][1] - 1e-9 * abs(energy):
            continue
        if out and makespan <= out[-1][0] * (1 + 1e-12):
            out[-1] = (makespan, energy)
            continue
        out.append((makespan, energy))
    return out


# With LP rounding alone, every seed here but 305 and 311 (kept as controls) gave fewer
# points than Pareto plans exist, or a point above the optimum at its makespan (23 % at
# 301, 1 % at 300).
@pytest.mark.parametrize("seed", [300, 301, 305, 311, 312, 322, 340, 476, 491])
def test_small_frontiers_are_full_and_tight(bf, seed: int) -> None:
    problem = bf.random_problem(seed, max_tasks=9, max_modes=4, max_assignments=20000)
    truth = _pareto_plans(bf, problem)
    asked = 12
    points = frontier(problem, num_points=asked)
    # As many points as asked, where that many Pareto plans exist ...
    assert len(points) >= min(asked, len(truth))
    for s in points:
        # ... and each is the optimum at its own makespan.
        best = min(e for m, e in truth if m <= s.makespan * (1 + 1e-9))
        assert s.energy == pytest.approx(best, rel=1e-9)
