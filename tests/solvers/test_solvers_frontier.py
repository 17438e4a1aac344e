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


def _random_pipeline(bf, seed: int, stages: int = 4, microbatches: int = 10):
    """A 1F1B pipeline whose ops' speeds and powers are drawn from `seed`, with more
    Pareto modes than `EXACT_COLUMNS` (the LP path of the frontier)."""
    import numpy as np

    from solvers import Mode

    rng = np.random.default_rng(seed)
    freqs = [1410 - 90 * k for k in range(6)]
    base = {(s, k): rng.uniform(0.03, 0.1) for s in range(stages) for k in "fb"}
    alpha = {(s, k): rng.uniform(0.6, 0.95) for s in range(stages) for k in "fb"}

    def modes(stage: int, kind: str) -> tuple[Mode, ...]:
        t_ref, a = base[stage, kind], alpha[stage, kind]
        out = []
        for f in freqs:
            t = t_ref * (a * 1410 / f + 1 - a)
            out.append(Mode(t, (100 + 260 * (f / 1410) ** 2.4) * t, label=f, setting=f))
        return tuple(out)

    return bf.one_f_one_b(stages, microbatches, modes, idle_w=70.0)


def _lp_path(problem) -> None:
    from solvers.frontier import EXACT_COLUMNS
    from solvers.indexed import indexed
    from solvers.milp import milp_columns
    from solvers.scaling import scaled

    assert milp_columns(scaled(indexed(problem))) > EXACT_COLUMNS


@pytest.mark.parametrize("seed", range(3))
def test_lp_frontier_ends_on_the_way_to_solves_plan(bf, monkeypatch, seed: int) -> None:
    """The energy-minimizing end is `solve(problem, None)`'s own search, stopped by a
    shorter stall window: never cheaper than that solve's plan, and with the solve's
    window it is that very plan."""
    import importlib

    from solvers import solve
    from solvers.stopping import STALL_MIN_S

    problem = _random_pipeline(bf, seed)
    _lp_path(problem)
    reference = solve(problem, None, method="relax")
    end = frontier(problem, num_points=20)[-1]
    assert end.energy >= reference.energy * (1 - 1e-12)
    assert end.energy <= reference.energy * (1 + 1e-3)
    module = importlib.import_module("solvers.frontier")
    monkeypatch.setattr(module, "END_STALL_MIN_S", STALL_MIN_S)
    same = frontier(problem, num_points=20)[-1]
    assert same.modes == reference.modes
    assert same.energy == reference.energy


@pytest.mark.parametrize("seed", range(3))
def test_lp_frontier_points_carry_certified_bounds(bf, seed: int) -> None:
    """Points swept without an LP solve of their own take the bound of a looser
    deadline: at most the hull LP's optimum at their own deadline, and at most their
    energy. Every point meets its deadline; two runs give the same frontier."""
    from solvers.indexed import indexed
    from solvers.lp import HullLP
    from solvers.scaling import scaled

    problem = _random_pipeline(bf, 10 + seed)
    _lp_path(problem)
    points = frontier(problem, num_points=25)
    assert len(points) >= 25
    ip = scaled(indexed(problem))
    lp = HullLP(ip)
    for s in points:
        assert s.deadline is not None or s is points[-1]
        if s.deadline is None:
            continue
        assert s.makespan <= s.deadline * (1 + 1e-9)
        lp.set_deadline(s.deadline / ip.time_unit)
        optimum = lp.solve()
        assert optimum is not None
        own = optimum.energy_bound(ip, s.deadline / ip.time_unit) * ip.energy_unit
        assert s.lower_bound <= own * (1 + 1e-7)
        assert s.lower_bound <= s.energy * (1 + 1e-9)
    again = frontier(problem, num_points=25)
    assert [(s.makespan, s.energy) for s in again] == [(s.makespan, s.energy) for s in points]


def test_sweep_bounds_fall_as_deadlines_rise(bf, monkeypatch) -> None:
    """`sweep_grid`: every plan meets its deadline and gets a bound; the bounds fall
    with the deadline (an LP-solved deadline's bound holds for every tighter one)."""
    import math

    import numpy as np

    from solvers import frontier_sweep
    from solvers.frontier_sweep import SweepStep, sweep_grid
    from solvers.indexed import indexed
    from solvers.lp import HullLP
    from solvers.scaling import scaled
    from solvers.solve import fastest_plan

    problem = _random_pipeline(bf, 7)
    original = indexed(problem)
    t_fast, fast = fastest_plan(original)
    ip = scaled(original)
    lp = HullLP(ip)
    lp.set_deadline(None)
    floor = lp.solve().energy_bound(ip, None)
    step = SweepStep(ip, lp)
    t0 = t_fast / ip.time_unit
    grid = np.linspace(t0, 1.1 * t0, 40)[1:]
    out = sweep_grid(step, grid, step.plan(fast), floor)
    assert any(plan.lp for _, plan in out) and not all(plan.lp for _, plan in out)

    # The LP step at least every `LP_STEP_EVERY` deadlines (cheap steps alone drift),
    # where without that rule longer runs of cheap steps occur.
    def cheap_runs(sweep) -> int:
        marks = "".join("L" if plan.lp else "c" for _, plan in sweep)
        return max(len(run) for run in marks.split("L"))

    assert cheap_runs(out) < frontier_sweep.LP_STEP_EVERY
    monkeypatch.setattr(frontier_sweep, "LP_STEP_EVERY", len(grid) + 1)
    assert cheap_runs(sweep_grid(step, grid, step.plan(fast), floor)) >= 3
    monkeypatch.undo()
    bounds = [plan.bound for _, plan in out]
    assert all(not math.isnan(b) for b in bounds)
    # Spaced wider than `CHEAP_STEP_SPACING`, every deadline gets the LP step.
    wide = sweep_grid(step, np.linspace(t0, 1.4 * t0, 20)[1:], step.plan(fast), floor)
    assert all(plan.lp for _, plan in wide)
    assert all(a >= b - 1e-12 * abs(a) for a, b in itertools.pairwise(bounds))
    for deadline, plan in out:
        assert plan.times.makespan <= deadline * (1 + 1e-9)
        assert plan.bound <= plan.energy * (1 + 1e-9)
        assert plan.energy == pytest.approx(ip.evaluate(plan.modes).energy, rel=1e-12)
    assert bounds[-1] >= floor * (1 - 1e-9)
