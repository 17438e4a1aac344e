"""The time budget of a solve: one wall-clock deadline, handed to every stage.

A solve starts one `Budget` of its time limit; each stage receives a child budget
(seconds, or a fraction of what is left) whose end never lies past its parent's, and
asks it how much time remains. Stages that cannot be interrupted (a cold LP solve,
building a model) check `remaining()` before they start; loops check `expired()`
between steps. This module is the only one that reads the clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from solvers.exceptions import TimeLimitReached


def now() -> float:
    """The monotonic clock every stage measures with, s."""
    return time.perf_counter()


@dataclass(frozen=True)
class Budget:
    """A wall-clock deadline: the clock reading by which a stage must be done.

    Attributes:
        end: the clock's reading at which the budget runs out, s (inf: no limit).
        clock: a monotonic clock, s (injectable for tests).
        started: the clock's reading when the budget was made, s.
    """

    end: float
    clock: Callable[[], float] = now
    started: float = field(default=math.nan)

    def __post_init__(self) -> None:
        if math.isnan(self.started):
            object.__setattr__(self, "started", self.clock())

    @classmethod
    def of(cls, seconds: float, clock: Callable[[], float] = now) -> Budget:
        """A budget of `seconds` s from now (inf: unlimited)."""
        start = clock()
        return cls(start + float(seconds), clock, start)

    @classmethod
    def unlimited(cls) -> Budget:
        """A budget that never runs out."""
        return cls(math.inf)

    def remaining(self) -> float:
        """Seconds left (negative once spent; inf when unlimited)."""
        return self.end - self.clock()

    def elapsed(self) -> float:
        """Seconds since the budget was made."""
        return self.clock() - self.started

    @property
    def limit_s(self) -> float:
        """The budget's whole length, s."""
        return self.end - self.started

    def expired(self) -> bool:
        """True once no time is left."""
        return self.remaining() <= 0

    def check(self, what: str) -> None:
        """Raise `TimeLimitReached` when no time is left for `what`."""
        if self.expired():
            raise TimeLimitReached(f"no time left for {what}")

    def child(
        self,
        seconds: float | None = None,
        *,
        fraction: float | None = None,
        keep: float = 0.0,
    ) -> Budget:
        """A budget inside this one.

        Args:
            seconds: its length, s (None: all that is left).
            fraction: its length as a share of what is left (applied after `keep`).
            keep: s of this budget held back from the child (for what follows it).

        Returns:
            A budget that ends at the earliest of: this one's end minus `keep`, now +
            `seconds`, now + `fraction` × (what is left − `keep`).
        """
        start = self.clock()
        end = self.end - keep
        if seconds is not None:
            end = min(end, start + float(seconds))
        if fraction is not None:
            end = min(end, start + fraction * max(0.0, self.end - keep - start))
        return Budget(end, self.clock, start)

    def until(self, share: float) -> Budget:
        """A child that ends when `share` of this whole budget (from its start) is spent."""
        return Budget(min(self.end, self.started + share * self.limit_s), self.clock)

    def stopwatch(self) -> Callable[[], float]:
        """A function returning the seconds since this call (to time a step)."""
        start = self.clock()
        return lambda: self.clock() - start
