"""Exceptions raised by the `solvers` package.

Every exception here carries a one-line message that names the offending task, edge,
device or deadline and says how to fix it, so that a command-line front end can print it
without a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence


class SolverError(Exception):
    """Base class of every error raised by `solvers`."""


class ProblemError(SolverError, ValueError):
    """The problem is malformed (unknown device or task, empty modes, negative numbers...)."""


class CycleError(ProblemError):
    """The precedence edges contain a cycle.

    Attributes:
        cycle: the task names along the cycle, first name repeated at the end.
    """

    def __init__(self, cycle: Sequence[str]) -> None:
        self.cycle = tuple(cycle)
        path = " -> ".join(self.cycle)
        super().__init__(f"precedence edges form a cycle: {path}; remove one of these edges")


class InfeasibleDeadline(SolverError, ValueError):  # noqa: N818 (name fixed by the API)
    """No assignment of modes meets the deadline.

    Attributes:
        deadline: the requested deadline, s.
        fastest_makespan: the shortest makespan any assignment achieves, s.
    """

    def __init__(self, deadline: float, fastest_makespan: float) -> None:
        self.deadline = float(deadline)
        self.fastest_makespan = float(fastest_makespan)
        super().__init__(
            f"deadline {self.deadline:.6g} s is below the fastest achievable makespan "
            f"{self.fastest_makespan:.6g} s; ask for a deadline of at least "
            f"{self.fastest_makespan:.6g} s"
        )


class TimeLimitReached(SolverError):  # noqa: N818 (a stop, not a failure)
    """A solver stage ran into the time limit before it finished.

    Raised by LP solves that HiGHS stopped at the limit; the entry points catch it and
    hand out the best plan found so far.
    """
