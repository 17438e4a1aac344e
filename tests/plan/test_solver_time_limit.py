"""The solvers keep their time limit with the best plan found so far (no timing here).

An LP relaxation that HiGHS stops at the limit raises `TimeLimitReached`; the relax
method then hands out the fastest plan improved by local search (status "time_limit",
no bound), and a search that already has a plan keeps it. Where building a model alone
would take longer than the limit, the exact MILP is refused up front and the coupled
relaxation is skipped. Each case is forced by patching, not by a slow problem.
"""

from __future__ import annotations

import importlib
import math
import time

import pytest

from solvers import Mode, Problem, SolverError, Task, evaluate, solve
from solvers.coupled import groups_consistent
from solvers.exceptions import TimeLimitReached
from solvers.indexed import indexed
from solvers.lp import HullLP

# `solvers.solve` is also the name of the entry point the package exports.
solve_module = importlib.import_module("solvers.solve")


def _chain(n: int = 12) -> Problem:
    """A chain of n tasks on one device, three modes each (fast, middle, slow/cheap)."""
    modes = (
        Mode(1.0, 100.0, setting=1410),
        Mode(1.3, 80.0, setting=1200),
        Mode(1.8, 70.0, setting=1000),
    )
    tasks = tuple(Task(f"t{i}", "gpu0", modes) for i in range(n))
    edges = tuple((f"t{i}", f"t{i + 1}") for i in range(n - 1))
    return Problem(tasks, edges, {"gpu0": 20.0})


def test_a_stop_time_in_the_past_stops_the_lp_at_once() -> None:
    lp = HullLP(indexed(_chain()))
    lp.stop_at = time.perf_counter() - 1.0
    with pytest.raises(TimeLimitReached):
        lp.solve()
    lp.stop_at = None
    assert lp.solve() is not None  # without the stop it solves


def test_indexing_is_done_once_per_problem() -> None:
    problem = _chain()
    assert indexed(problem) is indexed(problem)
    assert indexed(_chain()) is not indexed(problem)  # equal values, separate objects


def test_relax_without_an_lp_in_time_returns_a_feasible_plan_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def out_of_time(self: HullLP) -> None:
        raise TimeLimitReached("the LP relaxation did not finish within the time limit")

    monkeypatch.setattr(HullLP, "solve", out_of_time)
    problem = _chain()
    deadline = 12 * 1.0 * 1.3  # room for slower modes
    sol = solve(problem, deadline=deadline, method="relax", time_limit=2.0)
    assert sol.makespan <= deadline * (1 + 1e-9)
    assert sol.status == "time_limit"
    assert math.isnan(sol.lower_bound) and math.isnan(sol.gap)  # no bound claimed
    assert "LP relaxation ran out of time" in sol.solver
    fastest = evaluate(problem, dict.fromkeys(sol.modes, 0))
    assert sol.energy < fastest.energy  # local search used the slack anyway


def test_a_search_that_has_a_plan_keeps_it_when_a_later_lp_runs_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = HullLP.solve
    calls = {"n": 0}

    def second_fails(self: HullLP) -> object:
        calls["n"] += 1
        if calls["n"] >= 2:
            raise TimeLimitReached("the LP relaxation did not finish within the time limit")
        return real(self)

    monkeypatch.setattr(HullLP, "solve", second_fails)
    problem = _chain()
    sol = solve(problem, deadline=14.0, method="relax", time_limit=2.0)
    assert "HiGHS LP" in sol.solver  # the first LP's plan, not the fallback
    assert not math.isnan(sol.lower_bound)
    assert sol.makespan <= 14.0 * (1 + 1e-9)


def test_milp_that_cannot_be_built_in_time_is_refused_up_front(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(solve_module, "_milp_build_s", lambda columns: 50.0)

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the MILP must not be built")

    monkeypatch.setattr(solve_module, "solve_milp", never)
    with pytest.raises(SolverError) as info:
        solve(_chain(), deadline=14.0, method="milp", time_limit=5.0)
    message = str(info.value)
    assert "building it takes about 100 s" in message
    assert "raise the time limit" in message and "method relax" in message


def test_coupled_relaxation_is_skipped_when_it_cannot_be_built_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(solve_module, "_milp_build_s", lambda columns: 50.0)

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the relaxation must not be built")

    monkeypatch.setattr(solve_module, "relax_coupled", never)
    base = _chain()
    names = tuple(t.name for t in base.tasks)
    problem = Problem(base.tasks, base.edges, base.idle_power, groups=(names,))
    sol = solve(problem, deadline=12 * 1.3, method="relax", time_limit=1.0)
    ip = indexed(problem)
    assert groups_consistent(ip, [sol.modes[name] for name in ip.names])
    assert "no time to build the LP" in sol.solver
    assert sol.makespan <= 12 * 1.3 * (1 + 1e-9)
    # One setting for the whole chain: 1200 MHz is the cheapest that fits 12 × 1.3 s.
    assert set(sol.modes.values()) == {1}
