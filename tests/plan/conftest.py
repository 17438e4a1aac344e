"""Shared checks for the plan tests."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from eopt.calculus.schedule import compose_schedule
from eopt.model.library import Library
from eopt.model.planfile import Plan
from eopt.model.schedule import Schedule
from eopt.model.signature import Signature

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


#: The clocks of the synthetic stage profiles, in MHz.
SYNTHETIC_CLOCKS = (1400, 1200, 1000, 800)


def write_synthetic_profile(path: Path, stages: int, seed: int, idle_w: float) -> Path:
    """A Perseus-style stage profile whose energy is U-shaped in the clock, as measured
    ones are: E = s̄·t + d with d falling with the clock until 1000 MHz and barely below
    at 800 MHz, so 800 MHz is (T, E)-dominated yet cheaper above idle."""
    rng = np.random.default_rng(seed)
    rows = ["stage,instruction,frequency,time,energy"]
    for s in range(stages):
        for kind, t0, d0 in (("forward", 0.05, 20.0), ("backward", 0.1, 45.0)):
            t0 *= rng.uniform(0.8, 1.2)
            for f in SYNTHETIC_CLOCKS:
                t = t0 * (1400.0 / f) ** 0.9
                d = d0 * (0.55 + 0.45 * (f / 1400.0) ** 2) * rng.uniform(0.97, 1.0)
                rows.append(f"{s},{kind},{f},{t!r},{idle_w * t + d!r}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def all_assignments(
    plan: Plan, lib: Library, idle_w: float
) -> tuple[np.ndarray, np.ndarray, list[list[Signature]]]:
    """Brute force: the makespan and energy of every cell assignment (one row each), and
    the cells per element (highest clock first). Energy is Σ E_i plus every device's idle
    draw up to the makespan."""
    names = [e.name for e in plan.elements]
    cells = [
        sorted(lib.by_name(e.type), key=lambda c: -c.op_point.sm_clock_mhz) for e in plan.elements
    ]
    t = np.array(list(itertools.product(*[[c.time for c in cs] for cs in cells])))
    e = np.array(list(itertools.product(*[[c.energy for c in cs] for cs in cells])))
    index = {n: i for i, n in enumerate(names)}
    finish = np.zeros_like(t)
    graph = nx.DiGraph(plan.edges())
    graph.add_nodes_from(names)
    for name in nx.topological_sort(graph):
        i = index[name]
        preds = [index[p] for p in graph.predecessors(name)]
        start = finish[:, preds].max(axis=1) if preds else 0.0
        finish[:, i] = start + t[:, i]
    makespan = finish.max(axis=1)
    energy = e.sum(axis=1) + idle_w * (len(plan.devices) * makespan - t.sum(axis=1))
    return makespan, energy, cells


@pytest.fixture()
def synthetic_profile() -> Callable[[Path, int, int, float], Path]:
    """:func:`write_synthetic_profile`, for tests to call."""
    return write_synthetic_profile


@pytest.fixture()
def assignments() -> Callable[..., tuple[np.ndarray, np.ndarray, list[list[Signature]]]]:
    """:func:`all_assignments` (brute force over every cell assignment), for tests to call."""
    return all_assignments
