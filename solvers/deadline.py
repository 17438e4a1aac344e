"""Deadlines: the one rule for what a deadline may be, and when a makespan meets it.

Every entry point (`solvers.solve`, `solvers.evaluate`, eopt's plan solving) checks a
deadline here, and every plan is held to it by `meets`.
"""

from __future__ import annotations

import math

from solvers.exceptions import InfeasibleDeadline, ProblemError

#: Relative tolerance on a deadline: a makespan may exceed it by float rounding only.
DEADLINE_RTOL = 1e-9


def meets(makespan: float, deadline: float | None) -> bool:
    """True when `makespan` (s) meets `deadline` (s) up to float rounding."""
    return deadline is None or makespan <= deadline * (1 + DEADLINE_RTOL) + 1e-12


def check_deadline(deadline: object, fastest: float | None = None) -> float | None:
    """The deadline as a float, s, after the one rule: None, or a finite number > 0.

    Args:
        deadline: the deadline given (s), or None (no deadline).
        fastest: the fastest achievable makespan, s; when given, a deadline it does not
            meet is refused.

    Returns:
        ``float(deadline)``, or None.

    Raises:
        ProblemError: not a finite number of seconds > 0.
        InfeasibleDeadline: below `fastest` (the message names it).
    """
    if deadline is None:
        return None
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)):
        raise ProblemError(f"deadline must be a number of seconds > 0, got {deadline!r}")
    d = float(deadline)
    if not (math.isfinite(d) and d > 0):
        raise ProblemError(f"deadline must be a finite number of seconds > 0, got {deadline!r}")
    if fastest is not None and not meets(fastest, d):
        raise InfeasibleDeadline(d, fastest)
    return d
