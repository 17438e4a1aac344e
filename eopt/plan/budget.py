"""A solve's time limit, as the plan layer spends it: :class:`solvers.budget.Budget` plus
the stages of building the problem.

``eopt solve --time-limit 3`` promises an answer in about 3 s, model building included:
reading the plan, building the problem and indexing it count, and the solver gets what
is left. The clock and the deadline are the solvers' one :class:`~solvers.budget.Budget`;
this adapter adds only what the plan layer needs on top of it: a limit checked as a user
gave it, a log of the building stages, and the refusal when building left the solver
too little (:class:`SolveTimeLimitError`, with the time building took and a limit that
would do). Building cannot stop half-way, so it is checked between stages; once the
solver runs, it keeps to what it was given and hands out the best plan found by then.

The clock is injectable, so tests can check the mechanism without timing anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from eopt.model.planfile import PlanError

if TYPE_CHECKING:
    from solvers.budget import Budget

__all__ = ["MIN_SOLVE_S", "SolveTimeLimitError", "TimeBudget"]

#: Seconds the solver needs at least to return something better than a refusal; with
#: less left after building, the solve is refused.
MIN_SOLVE_S = 0.05


class SolveTimeLimitError(PlanError):
    """The time limit ran out before the solver could start (building took it all)."""


class TimeBudget:
    """Wall time for one solve, counted from ``started``.

    Args:
        limit_s: The whole budget, in s (finite, > 0); None: no wall limit (the solver
            then stops by rules that count work, the same on any machine).
        clock: A monotonic clock in s (default: the solvers' clock; tests inject their
            own).
        started: The clock's reading when the budget began (default: now), e.g. the
            start of the command, so that reading the plan counts too.

    Attributes:
        limit_s: The limit as given, in s.
        budget: The solvers' budget it draws on.
        stages: (stage, s spent in it) in order, for messages.

    Raises:
        PlanError: for a limit that is not a finite number of seconds above 0.
    """

    def __init__(
        self,
        limit_s: float | None,
        clock: Callable[[], float] | None = None,
        started: float | None = None,
    ) -> None:
        # Imported here: the solvers package loads HiGHS, and reading a schedule's
        # savings (eopt report) imports this module without solving anything.
        from solvers.budget import Budget, now

        if limit_s is None:
            # No wall limit: the solver runs on its budget of work (`solvers.budget`),
            # and the stages here are only logged.
            limit_s = math.inf
        elif not (isinstance(limit_s, (int, float)) and limit_s > 0):
            raise PlanError(f"time limit must be > 0 s, got {limit_s!r}")
        elif not math.isfinite(limit_s):
            raise PlanError(f"time limit must be finite, got {limit_s!r}")
        clock = clock or now
        start = clock() if started is None else started
        self.limit_s = float(limit_s)
        self.budget: Budget = Budget(start + self.limit_s, clock, start)
        self.stages: list[tuple[str, float]] = []

    @property
    def limited(self) -> bool:
        """True under a wall-clock limit; False when the solver counts work instead."""
        return math.isfinite(self.limit_s)

    def solver_limit(self, seconds: float) -> float | None:
        """The ``time_limit`` to hand `solvers.solve` for `seconds` of this budget:
        None without a wall limit (the solver then runs on its budget of work)."""
        return seconds if self.limited else None

    def spent(self) -> float:
        """Seconds used so far."""
        return self.budget.elapsed()

    def left(self) -> float:
        """Seconds left (negative once overspent)."""
        return self.budget.remaining()

    def check(self, stage: str, size: str = "") -> None:
        """Record that ``stage`` (e.g. "building the problem") is done; refuse to go on
        when too little is left for the solver.

        Args:
            stage: What just finished, as a gerund phrase.
            size: The problem's size for the message (e.g. "8000 elements").

        Raises:
            SolveTimeLimitError: naming the stages, their times and a limit that would do.
        """
        spent = self.spent()
        self.stages.append((stage, spent - sum(s for _, s in self.stages)))
        if not self.limited or self.left() >= MIN_SOLVE_S:
            return
        done = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.stages)
        # Building is a fixed cost; the solver then wants at least as long again.
        enough = max(math.ceil(3 * spent), math.ceil(self.limit_s) + 1)
        raise SolveTimeLimitError(
            f"the time limit of {self.limit_s:g} s ran out before solving"
            + (f" {size}" if size else "")
            + f" ({done}); raise --time-limit to {enough} s or more"
        )

    def share(self, fraction: float, keep: float = 0.0) -> float:
        """``fraction`` of the seconds left after keeping ``keep`` s back (never below
        ``MIN_SOLVE_S``)."""
        return max(MIN_SOLVE_S, fraction * (self.left() - keep))
