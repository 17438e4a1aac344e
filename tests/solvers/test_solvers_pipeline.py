"""A small 1F1B pipeline: relax and auto against the exact MILP, and hold="deadline"."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest

from solvers import Mode, Problem, evaluate, fastest_makespan, frontier, solve
from solvers.frontier import EXACT_COLUMNS
from solvers.indexed import indexed
from solvers.lp import HullLP
from solvers.milp import milp_columns
from solvers.relax import relax_once
from solvers.scaling import scaled
from solvers.solve import fastest_plan
from solvers.stopping import RUN_TO_LIMIT, STOP_GAP


def pipeline(
    one_f_one_b: Callable[..., Problem], stages: int, microbatches: int, clocks: int = 5
) -> Problem:
    """1F1B pipeline (`bf.one_f_one_b`) with a simple DVFS model per op."""
    freqs = [1410 - 90 * k for k in range(clocks)]

    def modes(kind: str, stage: int) -> tuple[Mode, ...]:
        t_ref = (0.04 if kind == "f" else 0.08) * (1.25 if stage == stages - 1 else 1.0)
        alpha = 0.85 if kind == "f" else 0.9
        out = []
        for f in freqs:
            t = t_ref * (alpha * 1410 / f + 1 - alpha)
            power = 105 + (245 if kind == "f" else 270) * (f / 1410) ** 2.4
            out.append(Mode(t, power * t, label=f, setting=f))
        return tuple(out)

    return one_f_one_b(stages, microbatches, lambda s, k: modes(k, s), idle_w=75.0)


@pytest.mark.parametrize("factor", [1.0, 1.1, 1.25])
def test_relax_close_to_exact_on_a_pipeline(bf, factor: float) -> None:
    problem = pipeline(bf.one_f_one_b, 3, 4)
    deadline = factor * fastest_makespan(problem)
    exact = solve(problem, deadline, method="milp", gap=1e-7, time_limit=30)
    assert exact.status == "optimal"
    relax = solve(problem, deadline, method="relax")
    assert relax.makespan <= deadline * (1 + 1e-9)
    assert relax.lower_bound <= exact.energy * (1 + 1e-7)
    assert exact.energy <= relax.energy * (1 + 1e-9)
    # The heuristic is near the optimum (it is usually exact on this small case).
    assert relax.energy <= exact.energy * 1.01
    # Searching to the end (no early stop), auto reaches the optimum ...
    auto = solve(problem, deadline, method="auto", gap=1e-7, time_limit=30, stop=RUN_TO_LIMIT)
    assert auto.energy == pytest.approx(exact.energy, rel=1e-6)
    # ... and by default it may stop once its certified gap is within 0.1 %.
    quick = solve(problem, deadline, method="auto", gap=1e-7, time_limit=30)
    assert quick.energy <= exact.energy * (1 + STOP_GAP) / (1 - STOP_GAP)
    assert quick.stop_reason in ("optimal", "gap", "stalled")


def test_holding_to_the_deadline_charges_idle_power_until_then(bf) -> None:
    problem = pipeline(bf.one_f_one_b, 2, 3)
    deadline = 1.3 * fastest_makespan(problem)
    held = Problem(problem.tasks, problem.edges, problem.idle_power, hold="deadline")
    a = solve(problem, deadline, method="milp", gap=1e-9)
    b = solve(held, deadline, method="milp", gap=1e-9)
    assert b.horizon == pytest.approx(deadline)
    # Held to the deadline, idling is charged anyway, so slowing down is free in time:
    # the plan is at least as slow and its energy is the makespan plan's plus idle
    # power over the gap, minus what the slower modes save.
    assert b.makespan >= a.makespan - 1e-9
    idle_w = sum(problem.idle_power.values())
    assert b.energy <= a.energy + idle_w * (deadline - a.makespan) + 1e-6
    assert b.energy >= a.energy - 1e-6
    relax = solve(held, deadline, method="relax")
    assert relax.lower_bound <= b.energy * (1 + 1e-7) and relax.energy >= b.energy * (1 - 1e-9)


def test_frontier_of_a_pipeline_spans_fastest_to_cheapest(bf) -> None:
    problem = pipeline(bf.one_f_one_b, 3, 4)
    points = frontier(problem, num_points=15)
    assert len(points) >= 15
    assert points[0].makespan == pytest.approx(fastest_makespan(problem), rel=1e-9)
    cheapest = solve(problem, None, method="milp", gap=1e-9)
    assert points[-1].energy <= cheapest.energy * 1.01
    assert all(a.energy > b.energy for a, b in itertools.pairwise(points))


def test_fastest_end_of_an_lp_frontier_improves_its_lp_step(bf) -> None:
    """Above `EXACT_COLUMNS` the fastest point is one LP step from the fastest plan,
    then iterated improvement: never dearer than the step, and on time."""
    problem = pipeline(bf.one_f_one_b, 4, 12)
    ip = scaled(indexed(problem))
    assert milp_columns(ip) > EXACT_COLUMNS  # the LP path, not the exact one
    t_fast, fast = fastest_plan(indexed(problem))
    step = relax_once(HullLP(ip), t_fast / ip.time_unit, [fast])
    assert step is not None
    step_energy = evaluate(problem, dict(zip(ip.names, step.modes, strict=True))).energy
    first = frontier(problem, num_points=10)[0]
    assert first.makespan == pytest.approx(t_fast, rel=1e-9)
    assert first.makespan <= first.deadline * (1 + 1e-9)
    assert first.energy <= step_energy * (1 + 1e-12)
    assert first.lower_bound <= first.energy


def test_fastest_end_without_time_for_its_lp_keeps_the_fastest_plan(bf) -> None:
    """With no time for the LP step the fastest end starts from the fastest plan and
    reports no bound, rather than running the LP past the time per point."""
    problem = pipeline(bf.one_f_one_b, 4, 12)
    t_fast, fast = fastest_plan(indexed(problem))
    fast_energy = evaluate(problem, dict(zip(indexed(problem).names, fast, strict=True))).energy
    first = frontier(problem, num_points=5, time_limit_per_point=1e-9)[0]
    assert first.makespan == pytest.approx(t_fast, rel=1e-9)
    assert math.isnan(first.lower_bound)
    assert first.energy <= fast_energy * (1 + 1e-12)
