"""Same-device parallel groups and the one-at-a-time rule, checked against the calculus.

* the paper-style pair A (2 s) ∥ B (1 s) at s = 50 W, s̄ = 30 W costs s·max T + Σd;
* brute force: every cell assignment of a small two-device plan with a group whose members
  differ in duration, placed at earliest start (groups co-start, each device runs the
  rest one at a time in file order), priced by ``compose_schedule`` — the minimum under
  each deadline equals ``solve_plan(method="milp")``, with and without clock-change costs;
* the implied one-at-a-time edges, including their tie-break and cross-device consistency;
* plans whose groups would have to wait for themselves are refused with the place named.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from eopt.calculus.operators import par
from eopt.calculus.schedule import compose_schedule
from eopt.model.library import Library
from eopt.model.operating_point import OperatingPoint
from eopt.model.planfile import Plan, PlanDevice, PlanElement, PlanError
from eopt.model.schedule import Schedule
from eopt.model.signature import Signature
from eopt.plan.problem import build_problem
from eopt.plan.solve import solve_plan

Checker = Callable[[Schedule, Plan, Library], None]

# Static power per SM clock: 1000 MHz draws less than g0 idles at (60 W), so a longer run
# there can be cheaper than waiting (the below-idle pruning rule has work to do).
STATIC_W = {1400.0: 70.0, 1000.0: 45.0, 800.0: 40.0}
IDLE_W = {"g0": 60.0, "g1": 50.0}


def _cell(name: str, clock: float, time_s: float, dynamic_j: float, impl: str) -> Signature:
    return Signature(
        name=name,
        static_power=STATIC_W[clock],
        time=time_s,
        dynamic_energy=dynamic_j,
        var_time=(0.01 * time_s) ** 2,
        var_energy=(0.02 * dynamic_j) ** 2,
        impl=impl,
        op_point=OperatingPoint(sm_clock_mhz=clock),
    )


def _library(seed: int, cells: dict[str, Sequence[tuple[str, float]]]) -> Library:
    """Random cells per type: time grows and dynamic energy falls as the clock drops."""
    rng = np.random.default_rng(seed)
    sigs = []
    for name, grid in cells.items():
        t0, d0 = rng.uniform(0.5, 2.0), rng.uniform(10.0, 40.0)
        for impl, clock in grid:
            slow = 1.0 if impl == "default" else rng.uniform(0.8, 1.3)
            t = t0 * (1400.0 / clock) ** 0.9 * slow * rng.uniform(0.95, 1.05)
            d = d0 * (0.5 + 0.5 * (clock / 1400.0) ** 2) / slow * rng.uniform(0.9, 1.1)
            sigs.append(_cell(name, clock, t, d, impl))
    return Library(sigs)


def _small_plan(transition: bool) -> Plan:
    """Six elements on two devices; the file order is a topological order, so each device
    runs its units in file order."""
    g0 = PlanDevice("g0", IDLE_W["g0"], transition_time_s=0.05 if transition else 0.0,
                    transition_energy_j=0.7 if transition else 0.0)  # fmt: skip
    return Plan(
        devices=(g0, PlanDevice("g1", IDLE_W["g1"])),
        elements=(
            PlanElement("a", "g0", "ta"),
            PlanElement("b", "g1", "tb", ("a",)),
            PlanElement("c", "g0", "tc", ("a",)),
            PlanElement("d", "g0", "td", ("b",)),
            PlanElement("e", "g1", "te"),  # free: g1 runs it after b (file order)
            PlanElement("f", "g0", "tf", ("c", "e")),
        ),
        groups=(("c", "d"),),
    )


SMALL_CELLS: dict[str, Sequence[tuple[str, float]]] = {
    "ta": [("default", 1400.0), ("default", 1000.0), ("default", 800.0)],
    "tb": [("default", 1400.0), ("default", 1000.0)],
    "tc": [("default", 1400.0), ("default", 1000.0)],
    "td": [("default", 1400.0), ("default", 1000.0), ("split", 1000.0)],
    "te": [("default", 1400.0), ("default", 800.0)],
    "tf": [("default", 1400.0), ("default", 1000.0), ("default", 800.0)],
}


def _place(plan: Plan, chosen: dict[str, Signature]) -> dict[str, float]:
    """Earliest starts: units in file order; a group co-starts after every member's
    dependencies and its device's previous unit (plus the clock change, if it pays one)."""
    group_of = {n: g for g in plan.groups for n in g}
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    last: dict[str, tuple[float, tuple[float | None, ...] | None]] = {}
    for elem in plan.elements:
        if elem.name in start:
            continue
        unit = group_of.get(elem.name, (elem.name,))
        device = plan.device(elem.device)
        setting = chosen[unit[0]].op_point.device_key
        ready, previous = last.get(device.name, (0.0, None))
        if previous is not None and previous != setting:
            ready += device.transition_time_s
        for member in unit:
            for dep in plan.element(member).after:
                ready = max(ready, end[dep])
        for member in unit:
            start[member] = ready
            end[member] = ready + chosen[member].time
        last[device.name] = (max(end[m] for m in unit), setting)
    return start


def _priced(plan: Plan, chosen: dict[str, Signature]) -> tuple[float, float]:
    """(makespan s, energy J) of the earliest-start placement, by the calculus.

    The calculus turns a clock-change gap into an idle element at s̄; the plan pays the
    change's energy instead, so that part is swapped."""
    start = _place(plan, chosen)
    placements = [(chosen[e.name], e.device, start[e.name]) for e in plan.elements]
    composed = compose_schedule(placements, idle_power=plan.idle_power())
    energy = composed.energy
    for dev in plan.devices:
        row = sorted(
            (e for e in plan.elements if e.device == dev.name), key=lambda e: start[e.name]
        )
        keys = [chosen[e.name].op_point.device_key for e in row]
        changes = sum(a != b for a, b in itertools.pairwise(keys))
        # Members of one group share the key, so only unit boundaries count.
        energy += changes * (dev.transition_energy_j - dev.idle_power_w * dev.transition_time_s)
    return composed.time, energy


def _all_assignments(plan: Plan, lib: Library) -> list[tuple[float, float]]:
    names = [e.name for e in plan.elements]
    options = [lib.by_name(e.type) for e in plan.elements]
    out = []
    for combo in itertools.product(*options):
        chosen = dict(zip(names, combo, strict=True))
        if any(len({chosen[n].op_point.device_key for n in g}) > 1 for g in plan.groups):
            continue  # a group runs at one device-wide setting
        out.append(_priced(plan, chosen))
    return out


def test_group_priced_by_par_not_per_member() -> None:
    """A (2 s, d = 10 J) ∥ B (1 s, d = 4 J) at s = 50 W on a device idling at 30 W:
    s·max T + Σd = 50·2 + 14 = 114 J (separate tasks would say 150 + 14 − 30 = 134 J)."""
    a = Signature("A", static_power=50.0, time=2.0, dynamic_energy=10.0, var_time=0.04,
                  var_energy=400.0)  # fmt: skip
    b = Signature("B", static_power=50.0, time=1.0, dynamic_energy=4.0, var_time=0.01,
                  var_energy=30.0)  # fmt: skip
    plan = Plan(
        devices=(PlanDevice("gpu", 30.0),),
        elements=(PlanElement("a", "gpu", "A"), PlanElement("b", "gpu", "B")),
        groups=(("a", "b"),),
    )
    schedule = solve_plan(plan, method="milp", library=Library([a, b]))
    assert schedule.energy == pytest.approx(114.0, rel=1e-12)
    assert schedule.makespan == pytest.approx(2.0, rel=1e-12)
    assert [e.start for e in schedule.elements] == [0.0, 0.0]
    assert [(e.duration, e.energy) for e in schedule.elements] == [(2.0, 110.0), (1.0, 54.0)]
    # σ² is par's: Σσ_d² + s²·Var(max T), not the members' Σσ_E².
    assert schedule.energy_std**2 == pytest.approx(par(a, b).var_energy, rel=1e-12)
    assert schedule.energy_std**2 != pytest.approx(a.var_energy + b.var_energy, rel=1e-3)


def test_group_without_a_shared_setting_is_refused() -> None:
    plan = Plan(
        devices=(PlanDevice("gpu", 30.0),),
        elements=(PlanElement("a", "gpu", "A"), PlanElement("b", "gpu", "B")),
        groups=(("a", "b"),),
    )
    lib = Library([_cell("A", 1400.0, 1.0, 5.0, "default"), _cell("B", 1000.0, 1.0, 5.0, "x")])
    expected = (
        r"groups\[0\] \(a, b\): its elements share no device-wide setting in the "
        r"libraries \(A: 1400MHz; B: 1000MHz\)"
    )
    with pytest.raises(PlanError, match=expected):
        build_problem(plan, lib)
    mismatched = Signature("B", static_power=49.0, time=1.0, dynamic_energy=4.0,
                           op_point=OperatingPoint(sm_clock_mhz=1400.0))  # fmt: skip
    with pytest.raises(PlanError, match=r"at 1400MHz, 'A' has static power 70 W but 'B' "):
        build_problem(plan, Library([_cell("A", 1400.0, 1.0, 5.0, "default"), mismatched]))


@pytest.mark.parametrize("transition", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_milp_matches_brute_force_with_a_group(
    seed: int, transition: bool, grouped_check: Checker
) -> None:
    plan = _small_plan(transition)
    lib = _library(seed, SMALL_CELLS)
    # The group's members differ in duration at every clock (the overlap is partial).
    for clock in (1400.0, 1000.0):
        tc = next(c.time for c in lib.by_name("tc") if c.op_point.sm_clock_mhz == clock)
        tds = [c.time for c in lib.by_name("td") if c.op_point.sm_clock_mhz == clock]
        assert all(not math.isclose(tc, td) for td in tds)
    truth = np.array(_all_assignments(plan, lib))
    assert len(truth) == 3 * 2 * (1 * 1 + 1 * 2) * 2 * 3  # settings shared inside the group
    fastest, slowest = truth[:, 0].min(), truth[:, 0].max()
    # The slowest assignment's makespan bounds nothing: the unconstrained optimum.
    for deadline in (fastest, 1.1 * fastest, 1.3 * fastest, slowest):
        feasible = truth[truth[:, 0] <= deadline * (1 + 1e-12)]
        schedule = solve_plan(plan, deadline=deadline, method="milp", library=lib)
        assert schedule.solver["status"] == "optimal"
        grouped_check(schedule, plan, lib)
        assert schedule.energy == pytest.approx(feasible[:, 1].min(), rel=1e-9), deadline


def test_pruning_keeps_every_optimum_with_a_group() -> None:
    """Pruned and unpruned problems reach the same optimum on a denser grid."""
    from solvers import fastest_makespan, solve

    cells = {k: [*v, ("alt", 1400.0), ("alt", 800.0)] for k, v in SMALL_CELLS.items()}
    cells["tc"] = [*cells["tc"], ("alt", 1000.0)]
    plan = _small_plan(False)
    lib = _library(7, cells)
    pruned, full = build_problem(plan, lib), build_problem(plan, lib, prune=False)
    group, everything = (pp.tasks[pp.task_of["c"]] for pp in (pruned, full))
    assert group.members == everything.members == ("c", "d")
    assert len(everything.choices) == 2 * 2 + 2 * 2 + 1 * 1  # per clock: tc × td cells
    assert len(group.choices) < len(everything.choices)  # pruning did something
    fastest = fastest_makespan(full.problem)
    assert fastest_makespan(pruned.problem) == pytest.approx(fastest, rel=1e-12)
    for deadline in (fastest, 1.2 * fastest, 100 * fastest):
        a = solve(full.problem, deadline=deadline, method="milp")
        b = solve(pruned.problem, deadline=deadline, method="milp")
        assert b.energy == pytest.approx(a.energy, rel=1e-9)


def _slack_plan(
    x_cells: list[Signature], y_cells: list[Signature], group: tuple[str, ...]
) -> tuple[Plan, Library]:
    """Group of x and y on g0 (s̄ = 60 W) beside a 3 s element z on g1 (s = s̄ = 50 W)."""
    z = Signature("Z", static_power=50.0, time=3.0, dynamic_energy=1.0)
    plan = Plan(
        devices=(PlanDevice("g0", 60.0), PlanDevice("g1", 50.0)),
        elements=(
            PlanElement("x", "g0", "X"),
            PlanElement("y", "g0", "Y"),
            PlanElement("z", "g1", "Z"),
        ),
        groups=(group,),
    )
    return plan, Library([*x_cells, *y_cells, z])


@pytest.mark.parametrize("group", [("x", "y"), ("y", "x")])
def test_group_member_below_idle_takes_the_slack(
    group: tuple[str, ...], grouped_check: Checker
) -> None:
    """At 1000 MHz the device draws s = 45 W < s̄ = 60 W: running the critical member 2 s
    (d = 5.5 J) beats 1 s (d = 5 J) then idling — though 1 s dominates in (T, d).

    g0: 45·2 + 5.5 + 2 + 60·(3 − 2) = 157.5 J (1 s: 45 + 5 + 2 + 60·2 = 172 J);
    g1: 50·3 + 1 = 151 J."""
    plan, lib = _slack_plan(
        [_cell("X", 1000.0, 1.0, 5.0, "fast"), _cell("X", 1000.0, 2.0, 5.5, "slow")],
        [_cell("Y", 1000.0, 0.5, 2.0, "default")],
        group,
    )
    schedule = solve_plan(plan, deadline=3.0, method="milp", library=lib)
    assert {e.name: e.impl for e in schedule.elements}["x"] == "slow"
    assert schedule.energy == pytest.approx(157.5 + 151.0, rel=1e-12)
    grouped_check(schedule, plan, lib)


@pytest.mark.parametrize("group", [("x", "y"), ("y", "x")])
def test_group_member_off_the_critical_path_saves_dynamic_energy(
    group: tuple[str, ...], grouped_check: Checker
) -> None:
    """At 1400 MHz (s = 70 W > s̄) a member shorter than the group costs only its d: y at
    0.9 s, 2.8 J beats 0.5 s, 3 J — though the latter is cheaper in (T, E − s̄·T).

    g0: 70·2 + 10 + 2.8 + 60·1 = 212.8 J; g1: 151 J."""
    plan, lib = _slack_plan(
        [_cell("X", 1400.0, 2.0, 10.0, "default")],
        [_cell("Y", 1400.0, 0.5, 3.0, "fast"), _cell("Y", 1400.0, 0.9, 2.8, "lean")],
        group,
    )
    schedule = solve_plan(plan, deadline=3.0, method="milp", library=lib)
    assert {e.name: e.impl for e in schedule.elements}["y"] == "lean"
    assert schedule.energy == pytest.approx(212.8 + 151.0, rel=1e-12)
    grouped_check(schedule, plan, lib)


def _unit_cells(*names: str) -> Library:
    return Library(
        [Signature(n, static_power=40.0, time=1.0 + 0.5 * i, dynamic_energy=3.0)
         for i, n in enumerate(names)]
    )  # fmt: skip


def test_unordered_elements_of_one_device_run_one_at_a_time(grouped_check: Checker) -> None:
    """p and q share g0 with no dependency: q waits for p (file order), and the energy is
    the sequential one — 40·(1 + 1.5) + 6 J on g0, no overlap priced or scheduled."""
    plan = Plan(
        devices=(PlanDevice("g0", 30.0),),
        elements=(PlanElement("p", "g0", "P"), PlanElement("q", "g0", "Q")),
    )
    lib = _unit_cells("P", "Q")
    schedule = solve_plan(plan, method="milp", library=lib)
    starts = {e.name: e.start for e in schedule.elements}
    assert starts == {"p": 0.0, "q": 1.0}
    assert schedule.makespan == pytest.approx(2.5, rel=1e-12)
    assert schedule.energy == pytest.approx(40.0 * 2.5 + 6.0, rel=1e-12)
    grouped_check(schedule, plan, lib)


def test_device_chains_follow_one_global_order(grouped_check: Checker) -> None:
    """Per-device file order would chain b → a on X and d → c on Y, which with a → d and
    c → b is a cycle; one topological order (file-order ties) runs a, d, c, b instead."""
    plan = Plan(
        devices=(PlanDevice("X", 20.0), PlanDevice("Y", 20.0)),
        elements=(
            PlanElement("b", "X", "B", ("c",)),
            PlanElement("d", "Y", "D", ("a",)),
            PlanElement("a", "X", "A"),
            PlanElement("c", "Y", "C"),
        ),
    )
    assert plan.device_order() == {"X": [("a",), ("b",)], "Y": [("d",), ("c",)]}
    lib = _unit_cells("A", "B", "C", "D")
    schedule = solve_plan(plan, method="milp", library=lib)
    grouped_check(schedule, plan, lib)
    by_name = {e.name: e for e in schedule.elements}
    assert by_name["a"].end <= by_name["d"].start <= by_name["c"].start
    assert by_name["c"].end <= by_name["b"].start
    # a (1 s) → d (2.5 s) → c (2 s) → b (1.5 s): one long chain across both devices.
    assert schedule.makespan == pytest.approx(7.0, rel=1e-12)
