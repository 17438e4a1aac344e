"""Exceptions raised by the `solvers` package.

Every exception here carries a one-line message that names the offending task, edge,
device or deadline and says how to fix it, so that a command-line front end can print it
without a traceback.
"""

from __future__ import annotations

import decimal
import math
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


#: Relative slack below the fastest makespan that advice may round up from: a tenth of
#: the tolerance within which a deadline counts as met (`solvers.indexed.meets`).
ADVICE_RTOL = 1e-10


def round_up(value: float, digits: int = 6) -> str:
    """`value` with `digits` significant digits, rounded up (toward +inf).

    Advice such as "ask for a deadline of at least X s" must hold when followed: X
    rounded to nearest can fall below the value it stands for, and the deadline asked
    for is refused again.

    Example:
        >>> round_up(0.00200049999), round_up(2.5), round_up(1234567.0)
        ('0.0020005', '2.5', '1.23457e+06')
    """
    if not math.isfinite(value):
        return repr(value)
    # Decimal(value) is the double's exact value, so the ceiling is never below it;
    # and the nearest double to a decimal at or above a double is at or above it too.
    exact = decimal.Decimal(value)
    up = decimal.Context(prec=digits, rounding=decimal.ROUND_CEILING).plus(exact)
    return f"{float(up):.{digits}g}"


class InfeasibleDeadline(SolverError, ValueError):  # noqa: N818 (name fixed by the API)
    """No assignment of modes meets the deadline.

    Attributes:
        deadline: the requested deadline, s.
        fastest_makespan: the shortest makespan any assignment achieves, s.
    """

    def __init__(self, deadline: float, fastest_makespan: float) -> None:
        self.deadline = float(deadline)
        self.fastest_makespan = float(fastest_makespan)
        # Deadlines are met up to a relative 1e-9 (`solvers.indexed.meets`): rounding
        # up from just inside that keeps float noise (0.30000000000000004) from
        # printing as 0.300001.
        advised = self.fastest_makespan * (1 - ADVICE_RTOL)
        fastest = round_up(advised)
        # Enough digits that the deadline does not read as the fastest makespan.
        digits = 6
        while f"{self.deadline:.{digits}g}" == round_up(advised, digits) and digits < 17:
            digits += 1
        super().__init__(
            f"deadline {self.deadline:.{digits}g} s is below the fastest achievable makespan "
            f"{fastest} s; ask for a deadline of at least {fastest} s"
        )


class TimeLimitReached(SolverError):  # noqa: N818 (a stop, not a failure)
    """A solver stage ran into the time limit before it finished.

    Raised by LP solves that HiGHS stopped at the limit; the entry points catch it and
    hand out the best plan found so far.
    """
