"""The example plans in ``examples/plans`` load, solve, and price consistently."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from eopt.model.library import Library
from eopt.model.planfile import read_plan
from eopt.model.schedule import ScheduledElement
from eopt.model.signature import Signature
from eopt.plan.problem import build_problem, load_plan_library
from eopt.plan.solve import baseline, solve_plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plans"


def test_every_example_plan_solves_within_its_deadline() -> None:
    plans = sorted(EXAMPLES.glob("*.yaml"))
    assert len(plans) >= 2
    for path in plans:
        plan = read_plan(path)
        schedule = solve_plan(plan, slowdown=0.05, method="relax")
        assert schedule.deadline is not None and schedule.makespan <= schedule.deadline
        assert schedule.baseline is not None and schedule.energy <= schedule.baseline["energy"]


def test_lowtime_example_baseline() -> None:
    """All-1410 MHz: 2.1791 s and 2333.4 J (lowtime_bench summary, independent)."""
    plan = read_plan(EXAMPLES / "lowtime_s4_m8.yaml")
    base = baseline(build_problem(plan))
    assert base.makespan == pytest.approx(2.179147262046083, rel=1e-12)
    assert base.energy == pytest.approx(2333.449353965276, rel=1e-10)


@pytest.mark.parametrize("method", ["milp", "relax"])
def test_two_gpu_example_groups_and_transitions(method: str, grouped_check: Any) -> None:
    plan = read_plan(EXAMPLES / "dag_two_gpus.yaml")
    lib = load_plan_library(plan)
    schedule = solve_plan(plan, method=method)  # the plan's own deadline
    assert schedule.deadline == plan.deadline
    assert schedule.makespan <= plan.deadline  # type: ignore[operator]
    # Groups co-start at one setting; everything else on a device runs one at a time.
    grouped_check(schedule, plan, lib)
    by_name = {e.name: e for e in schedule.elements}
    assert any(
        len({by_name[n].duration for n in group}) > 1 for group in plan.groups
    )  # the example's groups overlap partially
    # Recompute the energy by hand, unit by unit: a group draws its static power once
    # over its longest member (s·max T + Σd), a clock change costs its energy and time.
    energy = 0.0
    for dev in plan.devices:
        units: dict[float, list[ScheduledElement]] = {}
        for e in schedule.elements_on(dev.name):
            units.setdefault(e.start, []).append(e)
        keys = [u[0].op_point.device_key for u in units.values()]
        changes = sum(a != b for a, b in itertools.pairwise(keys))
        busy = changes * dev.transition_time_s
        for unit in units.values():
            cells = [_cell(lib, e) for e in unit]
            length = max(c.time for c in cells)
            busy += length
            energy += cells[0].static_power * length + sum(c.dynamic_energy for c in cells)
        energy += changes * dev.transition_energy_j
        energy += dev.idle_power_w * (schedule.makespan - busy)
        assert schedule.transitions(dev.name) == changes
    assert energy == pytest.approx(schedule.energy, rel=1e-10)


def test_two_gpu_example_solves_to_the_exhaustive_optimum() -> None:
    """Every assignment of the example (6 ⊕/element tasks, ≤ 8 choices each), placed at
    earliest start and priced like the hand computation above: the MILP's is the best."""
    plan = read_plan(EXAMPLES / "dag_two_gpus.yaml")
    pp = build_problem(plan, prune=False)
    from solvers import evaluate

    problem: Any = pp.problem
    names = [t.name for t in problem.tasks]
    best = min(
        sol.energy
        for combo in itertools.product(*(range(len(t.modes)) for t in problem.tasks))
        if (sol := evaluate(problem, dict(zip(names, combo, strict=True)))).makespan
        <= plan.deadline  # type: ignore[operator]
    )
    schedule = solve_plan(plan, method="milp")
    assert schedule.energy == pytest.approx(best, rel=1e-9)


def _cell(lib: Library, placed: ScheduledElement) -> Signature:
    (cell,) = [
        c
        for c in lib.by_name(placed.type)
        if (c.impl, c.op_point) == (placed.impl, placed.op_point)
    ]
    return cell
