"""Bad input gives clear, specific errors."""

from __future__ import annotations

import pytest

from solvers import (
    CycleError,
    InfeasibleDeadline,
    Mode,
    Problem,
    ProblemError,
    Task,
    evaluate,
    fastest_makespan,
    solve,
)


def _chain() -> Problem:
    a = Task("a", "gpu0", (Mode(1.0, 10.0), Mode(2.0, 6.0)))
    b = Task("b", "gpu0", (Mode(1.179, 10.0), Mode(3.0, 5.0)))
    return Problem((a, b), (("a", "b"),), {"gpu0": 1.0})


@pytest.mark.parametrize("method", ["relax", "milp", "auto"])
def test_infeasible_deadline_names_fastest_makespan(method: str) -> None:
    with pytest.raises(InfeasibleDeadline) as err:
        solve(_chain(), deadline=2.0, method=method)
    assert err.value.fastest_makespan == pytest.approx(2.179)
    assert "2.179 s" in str(err.value) and "deadline 2 s" in str(err.value)
    assert fastest_makespan(_chain()) == pytest.approx(2.179)


def test_deadline_at_the_fastest_makespan_is_feasible() -> None:
    sol = solve(_chain(), deadline=2.179, method="relax")
    assert sol.makespan <= 2.179 * (1 + 1e-9)


def test_cycle_is_named() -> None:
    p = _chain()
    c = Task("c", "gpu0", (Mode(1.0, 1.0),))
    bad = Problem((*p.tasks, c), (("a", "b"), ("b", "c"), ("c", "a")), p.idle_power)
    with pytest.raises(CycleError) as err:
        solve(bad, 10.0)
    assert set(err.value.cycle) == {"a", "b", "c"}
    assert "cycle" in str(err.value) and "->" in str(err.value)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda p: Problem(p.tasks, p.edges, {"gpu9": 1.0}), "'gpu0' has no idle power"),
        (lambda p: Problem(p.tasks, (("a", "zz"),), p.idle_power), "unknown task 'zz'"),
        (
            lambda p: Problem((*p.tasks, Task("c", "gpu0", ())), p.edges, p.idle_power),
            "'c' has no modes",
        ),
        (
            lambda p: Problem((Task("a", "gpu0", (Mode(-1.0, 1.0),)),), (), p.idle_power),
            "task 'a' mode 0: duration",
        ),
        (
            lambda p: Problem((Task("a", "gpu0", (Mode(1.0, float("nan")),)),), (), p.idle_power),
            "task 'a' mode 0: energy",
        ),
        (lambda p: Problem(p.tasks, p.edges, {"gpu0": -5.0}), "idle power of device 'gpu0'"),
        (lambda p: Problem((*p.tasks, p.tasks[0]), p.edges, p.idle_power), "'a' appears twice"),
        (lambda p: Problem(p.tasks, p.edges, p.idle_power, hold="forever"), "hold must be"),
        (lambda p: Problem(p.tasks, p.edges, p.idle_power, groups=(("a", "b"),)), "has no setting"),
        (
            lambda p: Problem(p.tasks, p.edges, p.idle_power, transition={"gpu7": (1.0, 1.0)}),
            "unknown device 'gpu7'",
        ),
    ],
)
def test_malformed_problems_name_the_culprit(mutate, needle: str) -> None:
    with pytest.raises(ProblemError) as err:
        solve(mutate(_chain()), 10.0)
    assert needle in str(err.value)


def test_transition_needs_ordered_tasks() -> None:
    a = Task("a", "gpu0", (Mode(1.0, 1.0, setting=1),))
    b = Task("b", "gpu0", (Mode(1.0, 1.0, setting=2),))
    p = Problem((a, b), (), {"gpu0": 1.0}, transition={"gpu0": (0.1, 1.0)})
    with pytest.raises(ProblemError, match="not ordered by precedence"):
        p.validate()


def test_bad_arguments() -> None:
    with pytest.raises(ProblemError, match="unknown method"):
        solve(_chain(), 10.0, method="magic")
    with pytest.raises(ProblemError, match="deadline"):
        solve(_chain(), -1.0)
    with pytest.raises(ProblemError, match="no mode for task 'b'"):
        evaluate(_chain(), {"a": 0})
    with pytest.raises(ProblemError, match="mode 5 does not exist"):
        evaluate(_chain(), {"a": 5, "b": 0})
