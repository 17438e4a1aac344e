"""The schedule's energy breakdown adds up to its prediction, also with ⊕ groups."""

from __future__ import annotations

from pathlib import Path

import pytest

import eopt
from eopt.model.schedule import DeviceInfo, Schedule, ScheduledElement
from eopt.plan import read_plan, solve_plan
from eopt.report.breakdown import energy_breakdown

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plans"


def _element(name: str, start: float, duration: float, s: float, d: float) -> ScheduledElement:
    return ScheduledElement(
        name=name,
        type=name,
        device="g0",
        start=start,
        duration=duration,
        energy=s * duration + d,
        dynamic_energy=d,
    )


def test_overlapping_elements_share_static_power() -> None:
    # A (2 s) ∥ B (1 s) at s = 50 W, then C (1 s) after a 0.5 s gap; idle draw 30 W.
    elements = (
        _element("A", 0.0, 2.0, 50.0, 10.0),
        _element("B", 0.0, 1.0, 50.0, 4.0),
        _element("C", 2.5, 1.0, 50.0, 6.0),
    )
    sched = Schedule(elements=elements, devices=(DeviceInfo("g0", 30.0),), makespan=3.5, energy=0.0)
    assert [len(c) for c in sched.clusters("g0")] == [2, 1]
    assert sched.busy_time("g0") == pytest.approx(3.0)
    # Independent truth: the calculus composes the same placement.
    sigs = {
        e.name: eopt.Signature(e.name, 50.0, e.duration, e.dynamic_energy or 0.0, devices="g0")
        for e in elements
    }
    composed = eopt.compose_schedule(
        [(sigs[e.name], "g0", e.start) for e in elements], idle_power=30.0
    )
    total = sched.element_energy() + sched.idle_energy()
    assert total == pytest.approx(composed.energy, rel=1e-12)
    assert sched.element_energy() == pytest.approx(50 * 2 + 14 + 56)


def test_touching_elements_are_not_a_cluster() -> None:
    elements = (_element("A", 0.0, 1.0, 50.0, 1.0), _element("B", 1.0, 1.0, 50.0, 1.0))
    sched = Schedule(elements=elements, devices=(DeviceInfo("g0", 30.0),), makespan=2, energy=0)
    assert [len(c) for c in sched.clusters("g0")] == [1, 1]


@pytest.mark.parametrize("method", ["milp", "relax"])
def test_grouped_example_breakdown_adds_up(method: str) -> None:
    plan = read_plan(EXAMPLES / "dag_two_gpus.yaml")
    assert plan.groups, "the example must exercise same-device parallel groups"
    sched = solve_plan(plan, method=method)
    parts = sched.element_energy() + sched.idle_energy() + sched.transition_energy()
    assert parts == pytest.approx(sched.energy, rel=1e-9)
    breakdown = energy_breakdown(sched)
    assert breakdown.total_j == pytest.approx(sched.energy, rel=1e-9)
