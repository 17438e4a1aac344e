"""The example plans in ``examples/plans`` load, solve, and price consistently."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from eopt.plan.planfile import read_plan
from eopt.plan.problem import build_problem
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
def test_two_gpu_example_groups_and_transitions(method: str) -> None:
    plan = read_plan(EXAMPLES / "dag_two_gpus.yaml")
    schedule = solve_plan(plan, method=method)  # the plan's own deadline
    assert schedule.deadline == plan.deadline
    assert schedule.makespan <= plan.deadline  # type: ignore[operator]
    by_name = {e.name: e for e in schedule.elements}
    for group in plan.groups:  # a group shares one device-wide setting
        assert len({by_name[n].op_point.device_key for n in group}) == 1
    for elem in plan.elements:
        for dep in elem.after:
            assert by_name[elem.name].start >= by_name[dep].end - 1e-12
    # Recompute the energy: elements + transitions + idle, with busy time including the
    # time spent switching clocks.
    energy = schedule.element_energy()
    for dev in plan.devices:
        row = schedule.elements_on(dev.name)
        changes = sum(
            a.op_point.device_key != b.op_point.device_key for a, b in itertools.pairwise(row)
        )
        busy = sum(e.duration for e in row) + changes * dev.transition_time_s
        energy += changes * dev.transition_energy_j
        energy += dev.idle_power_w * (schedule.makespan - busy)
        assert schedule.transitions(dev.name) == changes
    assert energy == pytest.approx(schedule.energy, rel=1e-10)
    # The schedule file's own breakdown adds up to its prediction.
    parts = schedule.element_energy() + schedule.idle_energy() + schedule.transition_energy()
    assert parts == pytest.approx(schedule.energy, rel=1e-10)
