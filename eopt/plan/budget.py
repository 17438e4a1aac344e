"""The time limit of a solve as a budget that every stage draws from.

``eopt solve --time-limit 3`` promises an answer in about 3 s, model building included:
reading the plan, building the problem and indexing it count, and the solver gets what
is left. Building cannot stop half-way, so it is checked between stages: when the budget
is spent before the solver could start, the solve is refused with the time building took
and a limit that would do (:class:`SolveTimeLimitError`). Once the solver runs, it keeps to
what it was given and hands out the best plan found by then.

The clock is injectable, so tests can check the mechanism without timing anything.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from eopt.model.planfile import PlanError

__all__ = ["MIN_SOLVE_S", "SolveTimeLimitError", "TimeBudget"]

#: Seconds the solver needs at least to return something better than a refusal; with
#: less left after building, the solve is refused.
MIN_SOLVE_S = 0.05


class SolveTimeLimitError(PlanError):
    """The time limit ran out before the solver could start (building took it all)."""


@dataclass
class TimeBudget:
    """Wall time for one solve, counted from ``started``.

    Attributes:
        limit_s: The whole budget, in s.
        clock: A monotonic clock in s (``time.perf_counter``; tests inject their own).
        started: The clock's reading when the budget began (default: at creation), e.g.
            the start of the command, so that reading the plan counts too.
        stages: (stage, s spent in it) in order, for messages.
    """

    limit_s: float
    clock: Callable[[], float] = time.perf_counter
    started: float | None = None
    stages: list[tuple[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (isinstance(self.limit_s, (int, float)) and self.limit_s > 0):
            raise PlanError(f"time limit must be > 0 s, got {self.limit_s!r}")
        if not math.isfinite(self.limit_s):
            raise PlanError(f"time limit must be finite, got {self.limit_s!r}")
        if self.started is None:
            self.started = self.clock()
        self._mark = self.started

    def spent(self) -> float:
        """Seconds used so far."""
        assert self.started is not None
        return self.clock() - self.started

    def left(self) -> float:
        """Seconds left (negative once overspent)."""
        return self.limit_s - self.spent()

    def check(self, stage: str, size: str = "") -> None:
        """Record that ``stage`` (e.g. "building the problem") is done; refuse to go on
        when too little is left for the solver.

        Args:
            stage: What just finished, as a gerund phrase.
            size: The problem's size for the message (e.g. "8000 elements").

        Raises:
            SolveTimeLimitError: naming the stages, their times and a limit that would do.
        """
        now = self.clock()
        self.stages.append((stage, now - self._mark))
        self._mark = now
        if self.left() >= MIN_SOLVE_S:
            return
        spent = self.spent()
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
