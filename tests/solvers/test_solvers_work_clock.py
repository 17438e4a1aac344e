"""Stop rules that count work: one input gives one plan whatever the machine's speed.

Without a time limit a solve runs on a budget of work (`solvers.budget.WorkMeter`):
every share of the search, every step estimate and the stall window count work
charged, not seconds. The tests make the wall clock run 50 times fast (a machine 50
times slower, or as loaded) and ask for the identical plan; a solve under an explicit
time limit, whose clock is the wall, shows that the patched clock does reach the
solver.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from solvers import Mode, Problem, fastest_makespan, solve
from solvers.budget import WORK_UNITS_PER_S, Budget, WorkMeter
from solvers.stopping import REASONS


def _fast_clocks(monkeypatch: pytest.MonkeyPatch, factor: float) -> None:
    """Make perf_counter and monotonic run `factor` times as fast as real time."""
    real_perf, real_mono = time.perf_counter, time.monotonic
    origin_perf, origin_mono = real_perf(), real_mono()
    monkeypatch.setattr(
        time, "perf_counter", lambda: origin_perf + factor * (real_perf() - origin_perf)
    )
    monkeypatch.setattr(
        time, "monotonic", lambda: origin_mono + factor * (real_mono() - origin_mono)
    )


def _clocked_pipeline(bf, stages: int, microbatches: int, seed: int = 0) -> Problem:
    """A 1F1B pipeline of 12 seeded, non-convex clock modes per stage and kind: its LP
    bound is not exact, so the search runs its stages and stops by a rule."""
    rng = np.random.default_rng(seed)
    table = {}
    for s in range(stages):
        for kind, base in (("f", 1.0), ("b", 2.0)):
            share = np.sort(rng.uniform(0.55, 1.0, 12))[::-1]
            t = base * (1 + 0.1 * s) / share
            e = t * (80 + 220 * share**2.2) * (1 + 0.03 * rng.standard_normal(12))
            table[s, kind] = tuple(Mode(float(a), float(b)) for a, b in zip(t, e, strict=True))
    return bf.one_f_one_b(stages, microbatches, lambda s, kind: table[s, kind])


def _outcome(sol) -> tuple:
    return (sol.modes, sol.energy, sol.lower_bound, sol.stop_reason, sol.solver)


@pytest.mark.parametrize("method", ["auto", "relax"])
def test_a_solve_without_time_limit_gives_the_same_plan_on_a_clock_50_times_fast(
    bf, monkeypatch, method
) -> None:
    problem = _clocked_pipeline(bf, 3, 6)
    deadline = 1.05 * fastest_makespan(problem)
    calm = solve(problem, deadline, method=method)
    _fast_clocks(monkeypatch, 50.0)
    hurried = solve(problem, deadline, method=method)
    assert _outcome(hurried) == _outcome(calm)
    assert calm.stop_reason in REASONS and calm.stop_reason != "time_limit"
    assert calm.gap > 0  # a search that had to stop by a rule, not at a proven optimum


def test_the_patched_clock_reaches_a_solve_under_an_explicit_time_limit(bf, monkeypatch) -> None:
    problem, deadline = bf.pipeline_problem(3, 8)
    _fast_clocks(monkeypatch, 1e5)  # 1 s of the limit passes in 10 µs
    sol = solve(problem, deadline, method="relax", time_limit=1.0)
    assert sol.stop_reason == "time_limit"
    assert "time limit of 1 s" in sol.message


def test_a_spent_work_budget_is_reported_as_the_work_limit(bf) -> None:
    problem, deadline = bf.pipeline_problem(3, 8)
    sol = solve(problem, deadline, method="relax", stop=None, work_limit=1e-6)
    assert sol.stop_reason == "work_limit"
    assert sol.status == "time_limit"
    assert "work limit" in sol.message and "same on any machine" in sol.message
    # the plan handed out still meets its deadline
    assert sol.makespan <= deadline * (1 + 1e-9)


def test_a_work_budget_reads_work_charged_and_never_the_wall(monkeypatch) -> None:
    budget = Budget.of_work(2.0)
    assert budget.counts_work and budget.wall_limit() == math.inf
    _fast_clocks(monkeypatch, 1e9)
    assert budget.remaining() == pytest.approx(2.0)
    child = budget.child(fraction=0.5)
    child.charge(0.75 * WORK_UNITS_PER_S)
    assert not child.expired() and child.remaining() == pytest.approx(0.25)
    child.charge(0.25 * WORK_UNITS_PER_S)
    assert child.expired() and not budget.expired()
    assert budget.remaining() == pytest.approx(1.0)
    budget.charge(1.0 * WORK_UNITS_PER_S)
    assert budget.expired()


def test_a_wall_budget_ignores_charges() -> None:
    budget = Budget.of(100.0)
    budget.charge(1e12)
    assert not budget.counts_work and not budget.expired()
    meter = WorkMeter()
    meter.charge(WORK_UNITS_PER_S)
    assert meter() == pytest.approx(1.0)


def test_a_solve_refuses_a_work_limit_that_is_not_a_positive_finite_number(bf) -> None:
    from solvers import ProblemError

    problem, deadline = bf.pipeline_problem(2, 2)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ProblemError, match="work_limit"):
            solve(problem, deadline, work_limit=bad)


def test_modes_shared_by_many_tasks_are_checked_once_and_still_refused_when_bad() -> None:
    from solvers import ProblemError, Task

    good = (Mode(1.0, 10.0), Mode(2.0, 6.0))
    bad = (Mode(1.0, 10.0), Mode(2.0, math.nan))
    tasks = tuple(Task(f"t{i}", "gpu0", good) for i in range(50))
    Problem(tasks, (), {"gpu0": 5.0}).validate()  # one shared tuple of good modes passes
    broken = Problem(
        (*tasks, Task("t50", "gpu0", bad), Task("t51", "gpu0", bad)), (), {"gpu0": 5.0}
    )
    with pytest.raises(ProblemError, match=r"task 't50' mode 1: energy"):
        broken.validate()


def test_the_default_work_grows_with_the_tasks_past_its_size(bf, monkeypatch) -> None:
    import importlib

    solve_module = importlib.import_module("solvers.solve")
    from solvers.solve import DEFAULT_WORK_S, WORK_TASKS, default_work_s

    assert default_work_s(1) == DEFAULT_WORK_S
    assert default_work_s(WORK_TASKS) == DEFAULT_WORK_S
    assert default_work_s(4 * WORK_TASKS) == pytest.approx(4 * DEFAULT_WORK_S)
    # A solve without a work limit reads it from its problem's size: a budget so
    # small at this size that it is spent, and named in the message.
    problem, deadline = bf.pipeline_problem(3, 8)
    monkeypatch.setattr(solve_module, "WORK_TASKS", 1)
    monkeypatch.setattr(solve_module, "DEFAULT_WORK_S", 1e-9)
    sol = solve(problem, deadline, method="relax")
    assert sol.stop_reason == "work_limit"
    assert f"{1e-9 * len(problem.tasks):g} reference s" in sol.message
