"""Fastest makespans with transition costs, and infeasible-deadline advice that works.

* With transition costs the all-fastest plan may pay setting changes, so the fastest
  makespan comes from the exact model. It was solved with HiGHS's default absolute gap
  of 1e-6 (1 µs on a makespan in seconds): on millisecond plans a plan 0.3 µs slower
  came back, and a feasible deadline between the two was refused.
* The advice "ask for a deadline of at least X s" was rounded to nearest at 6 digits,
  so X could lie below the fastest makespan and be refused again. It is rounded up.

Truth is brute force (`conftest.true_evaluate` over every assignment).
"""

from __future__ import annotations

import itertools
import re

import pytest

from solvers import InfeasibleDeadline, Mode, Problem, Task, fastest_makespan, solve

MS = 1e-3


def _two_settings() -> Problem:
    """Two tasks on one device; each is fastest at the setting the other is slow at, and
    a change costs 0.2 µs: the fastest plan changes settings once (2.0002 ms), keeping
    one setting takes 2.0005 ms."""
    a = Task("a", "g", (Mode(1.0 * MS, 0.3, setting="hi"), Mode(1.0005 * MS, 0.25, setting="lo")))
    b = Task("b", "g", (Mode(1.0005 * MS, 0.3, setting="hi"), Mode(1.0 * MS, 0.25, setting="lo")))
    return Problem((a, b), (("a", "b"),), {"g": 50.0}, transition={"g": (0.0002 * MS, 0.001)})


def test_fastest_makespan_with_a_transition_is_exact(bf) -> None:
    problem = _two_settings()
    _, fastest, _ = bf.brute_force(problem, None)
    assert fastest == pytest.approx(2.0002 * MS, rel=1e-12)
    assert fastest_makespan(problem) == pytest.approx(fastest, rel=1e-12)


@pytest.mark.parametrize("method", ["relax", "milp", "auto"])
def test_a_deadline_between_the_fastest_and_a_near_miss_is_accepted(bf, method: str) -> None:
    problem = _two_settings()
    deadline = 2.0003 * MS  # feasible: the setting change fits
    opt, _, _ = bf.brute_force(problem, deadline)
    sol = solve(problem, deadline, method=method)
    assert sol.makespan <= deadline
    assert sol.energy == pytest.approx(opt, rel=1e-9)


@pytest.mark.parametrize("seed", range(16))
def test_fastest_makespan_with_transitions_by_brute_force(bf, seed: int) -> None:
    """Random problems at millisecond scale, every device's tasks chained, with
    transition costs: the fastest makespan equals enumeration's."""
    base = bf.random_problem(seed + 500, settings=True, max_tasks=6)
    by_dev: dict[str, list[str]] = {}
    for t in base.tasks:
        by_dev.setdefault(t.device, []).append(t.name)
    edges = set(base.edges)
    for names in by_dev.values():
        edges |= set(itertools.pairwise(sorted(names, key=lambda n: int(n[1:]))))
    tasks = tuple(
        Task(
            t.name,
            t.device,
            tuple(Mode(m.duration * MS, m.energy * MS, setting=m.setting) for m in t.modes),
        )
        for t in base.tasks
    )
    problem = Problem(
        tasks,
        tuple(sorted(edges)),
        base.idle_power,
        transition={d: (0.0004 * MS, 0.002 * MS) for d in by_dev},
    )
    _, fastest, _ = bf.brute_force(problem, None)
    assert fastest_makespan(problem) == pytest.approx(fastest, rel=1e-12)
    solve(problem, fastest, method="relax")  # the fastest makespan is a feasible deadline


def _advised(err: InfeasibleDeadline) -> float:
    """The deadline the message asks for."""
    match = re.search(r"at least ([0-9.e+-]+) s", str(err))
    assert match, str(err)
    return float(match.group(1))


@pytest.mark.parametrize("fastest", [1.2345641, 0.002000441, 3.00000049e-5, 7261.98321])
def test_following_the_infeasible_deadline_advice_works(fastest: float) -> None:
    """Makespans whose 6-digit rounding to nearest lies below them."""
    problem = Problem((Task("a", "g", (Mode(fastest, 1.0),)),), (), {"g": 1.0})
    with pytest.raises(InfeasibleDeadline) as err:
        solve(problem, 0.5 * fastest)
    advised = _advised(err.value)
    assert advised >= fastest * (1 - 1e-9)
    assert solve(problem, advised).makespan == fastest
