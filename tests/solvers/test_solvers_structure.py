"""The solve pipeline's seams: one budget, one door to HiGHS, one deadline rule.

The budget is driven by a fake clock (no timing); the deadline rule is checked at its
edges; the package's sources are scanned for clocks and solver imports outside the
modules that own them.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

import solvers
from solvers import InfeasibleDeadline, Mode, Problem, ProblemError, Task, check_deadline
from solvers.budget import Budget
from solvers.exceptions import TimeLimitReached

PACKAGE = Path(solvers.__file__).parent


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_children_never_outlive_their_parent() -> None:
    clock = FakeClock()
    parent = Budget.of(10.0, clock)
    assert parent.remaining() == pytest.approx(10.0)
    assert parent.child(30.0).end == parent.end  # capped by the parent
    assert parent.child(2.0).remaining() == pytest.approx(2.0)
    assert parent.child(fraction=0.25).remaining() == pytest.approx(2.5)
    assert parent.child(keep=1.0).remaining() == pytest.approx(9.0)
    # A fraction of what is left after the part kept back.
    assert parent.child(fraction=0.5, keep=2.0).remaining() == pytest.approx(4.0)
    clock.now += 4.0
    assert parent.remaining() == pytest.approx(6.0)
    assert parent.elapsed() == pytest.approx(4.0)
    # `until` counts from the parent's start: 40 % of 10 s is spent at 104 s.
    assert parent.until(0.4).remaining() == pytest.approx(0.0)
    assert parent.until(0.6).remaining() == pytest.approx(2.0)


def test_a_spent_budget_says_so() -> None:
    clock = FakeClock()
    budget = Budget.of(1.0, clock)
    watch = budget.stopwatch()
    budget.check("the first step")  # time left: no error
    clock.now += 1.5
    assert budget.expired() and watch() == pytest.approx(1.5)
    with pytest.raises(TimeLimitReached, match="the next step"):
        budget.check("the next step")
    assert not Budget.unlimited().expired()


def _one_task() -> Problem:
    return Problem((Task("a", "gpu0", (Mode(2.0, 10.0), Mode(3.0, 8.0))),), (), {"gpu0": 1.0})


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, math.nan, math.inf, True, "5", [1.0]])
def test_one_deadline_rule_everywhere(bad: object) -> None:
    with pytest.raises(ProblemError, match="deadline must be"):
        check_deadline(bad)
    # solve and evaluate apply the same rule.
    with pytest.raises(ProblemError, match="deadline must be"):
        solvers.solve(_one_task(), bad, method="relax")  # type: ignore[arg-type]
    with pytest.raises(ProblemError, match="deadline must be"):
        solvers.evaluate(_one_task(), {"a": 0}, bad)  # type: ignore[arg-type]


def test_deadline_below_the_fastest_makespan_names_it() -> None:
    assert check_deadline(None) is None
    assert check_deadline(3, fastest=2.0) == 3.0
    assert check_deadline(2.0, fastest=2.0 * (1 + 1e-12)) == 2.0  # float rounding only
    with pytest.raises(InfeasibleDeadline, match="ask for a deadline of at least 2"):
        check_deadline(1.9, fastest=2.0)


def _code(path: Path) -> str:
    """A module's source without docstrings and comments (names in prose don't count)."""
    text = re.sub(r'"""(?:.|\n)*?"""', "", path.read_text(encoding="utf-8"))
    return re.sub(r"#[^\n]*", "", text)


@pytest.mark.parametrize(
    ("pattern", "owner"),
    [
        (r"\bperf_counter\b|\bmonotonic\b|\btime\.time\b", "budget.py"),
        (r"\bimport highspy\b|\bhighspy\.", "highs.py"),
        (r"\bimport pulp\b|\bpulp\.", None),
        (r"scipy\.optimize|\blinprog\b", None),
    ],
)
def test_clocks_and_solver_libraries_live_in_one_module(pattern: str, owner: str | None) -> None:
    users = sorted(p.name for p in PACKAGE.glob("*.py") if re.search(pattern, _code(p)))
    assert users == ([owner] if owner else []), f"{pattern!r} used in {users}"
