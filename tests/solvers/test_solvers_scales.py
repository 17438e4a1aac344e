"""The same problem at µs, ms, s and hour scales gives the same relative answer.

HiGHS's tolerances are absolute (1e-7 on a constraint, 1e-6 on the MIP gap). A plan of
tens of µs solved in raw seconds and joules misses its deadline "within tolerance", or
stops at the all-fastest plan "within the gap"; the fallback then had energy ∞, whose gap
came out 0, and the all-fastest plan was labelled optimal 22–45 % above the optimum.
Models are now built in units about the problem's own makespan and energy.

Truth is brute force on the unscaled problem; every scale must match it.
"""

from __future__ import annotations

import math

import pytest

from solvers import Mode, Problem, Task, frontier, solve
from solvers.solution import relative_gap
from solvers.stopping import RUN_TO_LIMIT

#: (time, energy) factors: µs elements of µJ … hour-long elements of MJ; the last one
#: changes the power scale too (W → mW).
SCALES = [(1e-6, 1e-6), (1e-7, 1e-7), (1e-3, 1e-3), (1.0, 1.0), (3600.0, 3600.0), (1e-5, 1e-8)]

SEEDS = [0, 3, 7, 9, 17, 19, 23]


def scaled(problem: Problem, time: float, energy: float) -> Problem:
    """`problem` with every duration × `time` and every energy × `energy`."""
    tasks = tuple(
        Task(
            t.name,
            t.device,
            tuple(
                Mode(m.duration * time, m.energy * energy, label=m.label, setting=m.setting)
                for m in t.modes
            ),
        )
        for t in problem.tasks
    )
    return Problem(
        tasks,
        problem.edges,
        {d: w * energy / time for d, w in problem.idle_power.items()},
        problem.groups,
        {d: (tau * time, eps * energy) for d, (tau, eps) in problem.transition.items()},
        problem.hold,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("time", "energy"), SCALES)
def test_milp_is_exact_at_every_scale(bf, seed: int, time: float, energy: float) -> None:
    base = bf.random_problem(seed)
    deadline = bf.deadline_between(base, seed)
    opt, _, _ = bf.brute_force(base, deadline)
    sol = solve(scaled(base, time, energy), deadline * time, method="milp", gap=1e-9)
    assert sol.makespan <= deadline * time * (1 + 1e-9)
    assert sol.energy / energy == pytest.approx(opt, rel=1e-6)
    assert sol.status == "optimal"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("method", ["relax", "auto"])
def test_every_method_gives_the_same_relative_answer(bf, seed: int, method: str) -> None:
    base = bf.random_problem(seed)
    deadline = bf.deadline_between(base, seed)
    opt, _, _ = bf.brute_force(base, deadline)
    answers = []
    for time, energy in SCALES:
        sol = solve(scaled(base, time, energy), deadline * time, method=method, stop=RUN_TO_LIMIT)
        assert sol.makespan <= deadline * time * (1 + 1e-9)
        assert sol.energy / energy >= opt * (1 - 1e-9)
        assert sol.lower_bound / energy <= opt * (1 + 1e-7)
        answers.append((sol.energy / energy, sol.status))
    first = answers[0]
    for other in answers[1:]:
        assert other[0] == pytest.approx(first[0], rel=1e-9)
        assert other[1] == first[1]


@pytest.mark.parametrize("method", ["milp", "relax", "auto"])
@pytest.mark.parametrize(("time", "energy"), SCALES)
def test_optimal_only_when_its_own_gap_says_so(bf, method: str, time: float, energy: float) -> None:
    for seed in SEEDS:
        base = bf.random_problem(seed)
        deadline = bf.deadline_between(base, seed)
        sol = solve(scaled(base, time, energy), deadline * time, method=method)
        if sol.status == "optimal":
            assert sol.gap <= 1e-4 + 1e-6
            opt, _, _ = bf.brute_force(base, deadline)
            assert sol.energy / energy <= opt * (1 + 1e-4 + 1e-6)


def test_a_missing_plan_is_infinitely_far_from_its_bound() -> None:
    # inf / inf is nan, and max(0, nan) is 0: a plan of energy ∞ read as gap 0.
    assert relative_gap(math.inf, 10.0) == math.inf
    assert math.isnan(relative_gap(5.0, math.nan))


@pytest.mark.parametrize(("time", "energy"), SCALES)
def test_frontier_is_the_same_at_every_scale(bf, time: float, energy: float) -> None:
    base = bf.random_problem(301, max_tasks=6)
    reference = [(s.makespan, s.energy) for s in frontier(base, num_points=8)]
    points = [
        (s.makespan / time, s.energy / energy)
        for s in frontier(scaled(base, time, energy), num_points=8)
    ]
    assert len(points) == len(reference)
    for (t, e), (t0, e0) in zip(points, reference, strict=True):
        assert t == pytest.approx(t0, rel=1e-9)
        assert e == pytest.approx(e0, rel=1e-9)
