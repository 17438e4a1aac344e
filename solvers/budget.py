"""The budget of a solve: one deadline on one clock, handed to every stage.

A solve starts one `Budget` of its limit; each stage receives a child budget
(seconds, or a fraction of what is left) whose end never lies past its parent's, and
asks it how much remains. Stages that cannot be interrupted (a cold LP solve,
building a model) check `remaining()` before they start; loops check `expired()`
between steps. This module is the only one that reads the wall clock.

The clock is one of two:

- **work** (`WorkMeter`, the default): the stages `charge` the work they do (task
  visits of a longest-path pass, arc visits of an interior-point step, simplex
  iterations), and the clock reads it in reference seconds (`WORK_UNITS_PER_S`). Every
  share, estimate and stall window is then a count of work: one input gives one plan
  on any machine at any load;
- **wall** (`now`): only for an explicit time limit, the hard cap it promises.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from solvers.exceptions import TimeLimitReached


def now() -> float:
    """The monotonic wall clock an explicit time limit is measured with, s."""
    return time.perf_counter()


#: Work units per reference second: one unit is about one task or arc visited in a
#: numpy or Python pass (0.3–1 µs on one idle core), so that a budget of work reads
#: about as many seconds as the same budget of wall time on an idle machine.
WORK_UNITS_PER_S = 2.0e6


class WorkMeter:
    """A clock that reads the work charged to it, not the time: reference seconds.

    Attributes:
        units: work charged so far (`WORK_UNITS_PER_S` to a reference second).
    """

    def __init__(self) -> None:
        self.units = 0.0

    def charge(self, units: float) -> None:
        """Add `units` of work done."""
        self.units += float(units)

    def __call__(self) -> float:
        """The work done so far, in reference seconds."""
        return self.units / WORK_UNITS_PER_S


@dataclass(frozen=True)
class Budget:
    """A wall-clock deadline: the clock reading by which a stage must be done.

    Attributes:
        end: the clock's reading at which the budget runs out, s (inf: no limit).
        clock: a monotonic clock, s (injectable for tests).
        started: the clock's reading when the budget was made, s.
        wall_started: the wall clock's reading (`now`) when the budget was made, s.
    """

    end: float
    clock: Callable[[], float] = now
    started: float = field(default=math.nan)
    wall_started: float = field(default_factory=now)

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

    @classmethod
    def of_work(cls, seconds: float) -> Budget:
        """A budget of `seconds` reference seconds of work, on a new `WorkMeter`."""
        return cls.of(seconds, WorkMeter())

    @property
    def counts_work(self) -> bool:
        """True when the clock reads work charged (`WorkMeter`), not the wall."""
        return isinstance(self.clock, WorkMeter)

    def charge(self, units: float) -> None:
        """Charge `units` of work to the clock (nothing on a wall clock)."""
        if isinstance(self.clock, WorkMeter):
            self.clock.charge(units)

    def wall_limit(self) -> float:
        """Seconds a wall-timed external solver (HiGHS) may take: what is left on a wall
        clock, inf on a work clock (whose limit the caller enforces by `charge`)."""
        return math.inf if self.counts_work else self.remaining()

    def remaining(self) -> float:
        """Seconds left (negative once spent; inf when unlimited)."""
        return self.end - self.clock()

    def elapsed(self) -> float:
        """Seconds since the budget was made."""
        return self.clock() - self.started

    def wall_elapsed(self) -> float:
        """Wall seconds since the budget was made (whatever its clock)."""
        return now() - self.wall_started

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
