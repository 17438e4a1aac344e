"""The headline savings, `--static`, and the time-limit budget, against independent truths.

* The two headline numbers ("X % at no slowdown, Y % more for +5 %") equal brute-force
  minima over every cell assignment of a small pipeline, at the fastest makespan and at
  the deadline, each against the all-fastest plan.
* A static plan runs every element of a device at one clock, and is the brute-force
  optimum over one clock per device; the per-element plan it is compared with is the
  brute-force optimum without that restriction.
* The time budget is checked between the stages of building, with an injected clock:
  no test here times anything.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from eopt.model.library import Library
from eopt.model.planfile import Plan
from eopt.model.schedule import read_schedule, write_schedule
from eopt.plan import budget as budget_module
from eopt.plan.budget import SolveTimeLimitError, TimeBudget
from eopt.plan.perseus import read_perseus_profile
from eopt.plan.pipeline import pipeline_plan
from eopt.plan.solve import Savings, savings, solve_plan

IDLE_W = 100.0


@pytest.fixture(params=[0, 1])
def small(
    request: pytest.FixtureRequest, tmp_path: Path, synthetic_profile: Callable[..., Path]
) -> tuple[Plan, Library]:
    path = synthetic_profile(tmp_path / "p.csv", 2, request.param, IDLE_W)
    lib = Library(read_perseus_profile(path, IDLE_W))
    return pipeline_plan(2, 2, IDLE_W), lib  # 8 elements × 4 clocks: 65 536 assignments


def test_headline_numbers_equal_brute_force(
    small: tuple[Plan, Library], assignments: Callable[..., Any]
) -> None:
    plan, lib = small
    makespan, energy, _ = assignments(plan, lib, IDLE_W)
    fastest = makespan.min()
    all_fastest = energy[0]  # every element at its fastest clock (row 0: 1400 MHz each)
    assert makespan[0] == pytest.approx(fastest)
    deadline = 1.08 * fastest
    best_free = energy[makespan <= fastest * (1 + 1e-12)].min()
    best_paid = energy[makespan <= deadline * (1 + 1e-12)].min()

    schedule = solve_plan(plan, slowdown=0.08, method="milp", gap=0.0, library=lib)
    gains = savings(schedule)
    assert gains is not None
    assert gains.baseline_energy_j == pytest.approx(all_fastest, rel=1e-12)
    assert gains.at_fastest == pytest.approx(1 - best_free / all_fastest, abs=1e-9)
    assert gains.at_deadline == pytest.approx(1 - best_paid / all_fastest, abs=1e-9)
    assert gains.slowdown == pytest.approx(0.08)
    assert gains.at_fastest > 0  # free savings exist on U-shaped profiles
    assert gains.for_time >= 0  # a looser deadline never costs energy
    text = gains.headline()
    assert text.startswith(f"Saves {gains.at_fastest * 100:.1f} % at no slowdown, ")
    assert text.endswith(f"{gains.for_time * 100:.1f} % more for +8.0 % time")


def test_savings_round_trip_through_the_schedule_file(
    small: tuple[Plan, Library], tmp_path: Path
) -> None:
    plan, lib = small
    schedule = solve_plan(plan, slowdown=0.05, method="relax", library=lib)
    write_schedule(tmp_path / "s.json", schedule)
    again = savings(read_schedule(tmp_path / "s.json"))
    assert again == savings(schedule)
    assert again is not None and again.vs == "all-fastest"
    assert schedule.baseline is not None
    assert schedule.baseline["savings"]["at_deadline"] == pytest.approx(again.at_deadline)


def test_a_plan_at_the_fastest_makespan_has_one_headline_number(
    small: tuple[Plan, Library],
) -> None:
    plan, lib = small
    gains = savings(solve_plan(plan, slowdown=0.0, method="milp", gap=0.0, library=lib))
    assert gains is not None and gains.slowdown == 0.0
    assert gains.at_deadline == pytest.approx(gains.at_fastest)
    assert "more for" not in gains.headline()


def test_headline_of_a_plan_that_costs_more_at_no_slowdown() -> None:
    gains = Savings(100.0, 100.2, 84.4, 0.05)
    assert gains.headline() == "Uses 0.2 % more at no slowdown, saves 15.6 % at +5.0 % time"


def test_static_plan_is_the_best_one_clock_per_device(
    small: tuple[Plan, Library], assignments: Callable[..., Any]
) -> None:
    plan, lib = small
    makespan, energy, cells = assignments(plan, lib, IDLE_W)
    deadline = 1.15 * makespan.min()
    # Rows whose elements on each device share one clock.
    per_element = [[c.op_point.sm_clock_mhz for c in cs] for cs in cells]
    clocks = np.array(list(itertools.product(*per_element)))
    device_of = [e.device for e in plan.elements]
    one_clock = np.ones(len(clocks), dtype=bool)
    for device in {d.name for d in plan.devices}:
        cols = [i for i, d in enumerate(device_of) if d == device]
        one_clock &= (clocks[:, cols] == clocks[:, cols[:1]]).all(axis=1)
    fits = makespan <= deadline * (1 + 1e-12)
    best_static = energy[fits & one_clock].min()
    best_free = energy[fits].min()

    schedule = solve_plan(plan, deadline=deadline, method="milp", gap=0.0, library=lib, static=True)
    for device in schedule.devices:
        assert len({e.op_point.device_key for e in schedule.elements_on(device.name)}) == 1
    assert schedule.energy == pytest.approx(best_static, rel=1e-9)
    static = schedule.meta["static"]
    assert static["per_element_energy_j"] == pytest.approx(best_free, rel=1e-9)
    assert static["extra_energy_j"] == pytest.approx(best_static - best_free, rel=1e-6, abs=1e-9)
    assert best_static >= best_free


def test_static_refuses_a_deadline_one_clock_per_device_cannot_meet(tmp_path: Path) -> None:
    # Stage 0's forward is fastest at 1400 MHz, its backward at 1000 MHz: one clock for
    # both is slower than the per-element fastest plan.
    rows = ["stage,instruction,frequency,time,energy"]
    for kind, times in (("forward", (0.05, 0.06)), ("backward", (0.12, 0.10))):
        for f, t in zip((1400, 1000), times, strict=True):
            rows.append(f"0,{kind},{f},{t},{IDLE_W * t + 10}")
    lib = Library(read_perseus_profile(_write(tmp_path / "p.csv", rows), IDLE_W))
    plan = pipeline_plan(1, 1, IDLE_W)
    with pytest.raises(ValueError, match=r"one setting per GPU \(--static\).*fastest makespan"):
        solve_plan(plan, slowdown=0.0, method="milp", library=lib, static=True)


def _write(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


class StepClock:
    """A clock that moves only when told: ``advance(s)``."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_budget_refuses_when_building_used_it_up_and_names_the_stages() -> None:
    clock = StepClock()
    budget = TimeBudget(3.0, clock=clock)
    clock.advance(1.25)
    budget.check("reading the plan", "8000 elements")  # 1.75 s left: goes on
    clock.advance(2.0)
    with pytest.raises(SolveTimeLimitError) as info:
        budget.check("building the problem", "8000 elements")
    message = str(info.value)
    assert "time limit of 3 s ran out before solving 8000 elements" in message
    assert "reading the plan 1.25 s, building the problem 2.00 s" in message
    assert "raise --time-limit to 10 s or more" in message  # ceil(3 × 3.25 s spent)
    assert "\n" not in message


def test_budget_shares_what_is_left_after_the_reserve() -> None:
    clock = StepClock()
    budget = TimeBudget(10.0, clock=clock)
    clock.advance(4.0)
    assert budget.left() == pytest.approx(6.0)
    assert budget.share(0.25) == pytest.approx(1.5)
    assert budget.share(1.0, keep=0.5) == pytest.approx(5.5)
    clock.advance(10.0)
    assert budget.share(1.0) == budget_module.MIN_SOLVE_S  # never zero or negative


@pytest.mark.parametrize("limit", [0.0, -1.0, math.nan, math.inf])
def test_budget_rejects_limits_that_cannot_be_kept(limit: float) -> None:
    with pytest.raises(ValueError, match="time limit must be"):
        TimeBudget(limit)


def test_solve_plan_checks_the_budget_after_building(
    small: tuple[Plan, Library], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building the problem is charged to the budget: a build that takes (on the injected
    clock) longer than the limit is refused before the solver is called."""
    plan, lib = small
    clock = StepClock()
    import eopt.plan.solve as solve_module

    real_build = solve_module.build_problem

    def slow_build(*args: object, **kwargs: object) -> object:
        clock.advance(5.0)  # as if building took 5 s
        return real_build(*args, **kwargs)

    def no_solver(*args: object, **kwargs: object) -> None:
        raise AssertionError("the solver must not start once the budget is spent")

    monkeypatch.setattr(solve_module, "build_problem", slow_build)
    monkeypatch.setattr("solvers.solve", no_solver)
    with pytest.raises(SolveTimeLimitError, match=r"building the problem 5\.00 s"):
        solve_plan(plan, slowdown=0.05, library=lib, budget=TimeBudget(3.0, clock=clock))


def test_solver_gets_only_what_building_left(
    small: tuple[Plan, Library], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, lib = small
    clock = StepClock()
    import eopt.plan.solve as solve_module
    import solvers

    real_build = solve_module.build_problem
    given: list[float] = []
    real_solve = solvers.solve

    def slow_build(*args: object, **kwargs: object) -> object:
        clock.advance(6.0)
        return real_build(*args, **kwargs)

    def spy(problem: object, **kwargs: object) -> object:
        given.append(float(kwargs["time_limit"]))  # type: ignore[arg-type]
        result = real_solve(problem, **kwargs)  # type: ignore[arg-type]
        clock.advance(given[-1])  # as if the solver used all it was given
        return result

    monkeypatch.setattr(solve_module, "build_problem", slow_build)
    monkeypatch.setattr(solvers, "solve", spy)
    solve_plan(
        plan, slowdown=0.05, method="relax", library=lib, budget=TimeBudget(10.0, clock=clock)
    )
    # 4 s left: a quarter for the plan at the fastest makespan, the rest, less the
    # reserve for the baseline and the schedule (5 % of 10 s), for the plan asked for.
    assert given == pytest.approx([1.0, 4.0 - 1.0 - 0.5])
    assert sum(given) <= 4.0
