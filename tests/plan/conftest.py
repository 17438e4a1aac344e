"""Shared checks for the plan tests."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from eopt.calculus.library import Library
from eopt.calculus.schedule import compose_schedule
from eopt.plan.planfile import Plan
from eopt.plan.schedule import Schedule

Checker = Callable[[Schedule, Plan, Library], None]


def check_grouped_schedule(schedule: Schedule, plan: Plan, lib: Library) -> None:
    """Structure of a schedule of a plan with groups, and its energy by the calculus."""
    by_name = {e.name: e for e in schedule.elements}
    assert set(by_name) == {e.name for e in plan.elements}
    tol = 1e-9
    group_of = {n: g for g in plan.groups for n in g}
    for elem in plan.elements:
        placed = by_name[elem.name]
        for dep in elem.after:
            assert placed.start >= by_name[dep].end - tol, (dep, elem.name)
        (cell,) = [
            c
            for c in lib.by_name(elem.type)
            if (c.impl, c.op_point) == (placed.impl, placed.op_point)
        ]
        assert placed.duration == cell.time
        assert placed.energy == pytest.approx(cell.energy, rel=1e-12)
    for group in plan.groups:
        assert len({by_name[n].start for n in group}) == 1  # co-start
        assert len({by_name[n].op_point.device_key for n in group}) == 1  # one setting
    for a, b in itertools.combinations(schedule.elements, 2):
        if a.device == b.device and not (
            a.name in group_of and group_of[a.name] is group_of.get(b.name)
        ):
            assert a.end <= b.start + tol or b.end <= a.start + tol, (a.name, b.name)
    if schedule.deadline is not None:
        assert schedule.makespan <= schedule.deadline * (1 + 1e-12)
    chosen = {
        e.name: next(
            c
            for c in lib.by_name(e.type)
            if (c.impl, c.op_point) == (by_name[e.name].impl, by_name[e.name].op_point)
        )
        for e in plan.elements
    }
    placements = [(chosen[n], p.device, p.start) for n, p in by_name.items()]
    composed = compose_schedule(placements, idle_power=plan.idle_power())
    extra = sum(
        schedule.transitions(d.name)
        * (d.transition_energy_j - d.idle_power_w * d.transition_time_s)
        for d in plan.devices
    )
    assert composed.energy + extra == pytest.approx(schedule.energy, rel=1e-9)
    assert composed.time == pytest.approx(schedule.makespan, rel=1e-12)
    if schedule.lower_bound is not None:
        assert schedule.lower_bound <= schedule.energy * (1 + 1e-9)


@pytest.fixture()
def grouped_check() -> Checker:
    """:func:`check_grouped_schedule`, for tests to call."""
    return check_grouped_schedule
