"""When a search stops before its time limit, and why it stopped.

A solve stops at the first of:

- ``"optimal"``: the certified gap is within the requested optimality gap;
- ``"gap"``: the certified gap (plan against the best lower bound) is at most
  `StopRule.gap` (0.1 % by default): more search could gain at most that much;
- ``"stalled"``: the searches that improve a finished plan (iterated improvement, MILP
  windows, the MILP, one after the other) gained at most `StopRule.stall_gain`
  (0.01 %) of the energy over the last window, the window being the longer of
  `StopRule.stall_min_s` and `StopRule.stall_share` of the time spent so far (so that
  a search that needed 40 s to find its first plan gets 20 s to improve it);
- ``"work_limit"``: the budget of work, when no time limit was given;
- ``"time_limit"``: an explicit time limit, the hard cap on wall time;
- ``"interrupted"``: Ctrl-C (KeyboardInterrupt); the best plan found is kept;
- ``"done"``: every stage ran to its end (nothing left to try).

Both rules apply once a first plan is finished (`Watch.arm`): building it (for relax:
one LP, sweeps, dives, tiling) takes bounded shares of the time limit and finds most of
what the search finds, while the searches after it would otherwise run to the limit.

Seconds here are read on the solve's clock (`solvers.budget`): reference seconds of
work charged, unless an explicit time limit puts the solve on the wall clock. So by
default every rule counts work, and one input stops at one plan on any machine at any
load.

A `Watch` follows one solve: stages offer it every cheaper plan and every better bound,
and ask it whether to go on. It is a plain object passed down, with an injectable clock,
so tests drive it without timing anything.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from solvers.budget import now
from solvers.solution import relative_gap

#: Default `StopRule.gap`: a certified gap this small ends the search.
STOP_GAP = 1e-3

#: Default `StopRule.stall_gain`: gains up to this share of the energy over a window
#: count as a stall.
STALL_GAIN = 1e-4

#: Default shortest stall window, s.
STALL_MIN_S = 2.0

#: Default stall window as a share of the time spent so far.
STALL_SHARE = 0.5

#: Why a solve stopped (`Solution.stop_reason`).
REASONS = ("optimal", "gap", "stalled", "work_limit", "time_limit", "interrupted", "done")


@dataclass(frozen=True)
class StopRule:
    """When a solve may stop before its time limit.

    Attributes:
        gap: stop once the certified relative gap is at most this (0: never).
        stall_gain: stop once the improving searches gained at most this share of the
            energy over the last window (0: never).
        stall_min_s: shortest window, s on the solve's clock (work by default).
        stall_share: window as a share of the time spent so far.
    """

    gap: float = STOP_GAP
    stall_gain: float = STALL_GAIN
    stall_min_s: float = STALL_MIN_S
    stall_share: float = STALL_SHARE

    def window(self, elapsed_s: float) -> float:
        """The stall window after `elapsed_s` s of searching, s."""
        return max(self.stall_min_s, self.stall_share * elapsed_s)


#: Never stop before the time limit (except at the optimality gap or on Ctrl-C).
RUN_TO_LIMIT = StopRule(gap=0.0, stall_gain=0.0)


@dataclass
class Watch:
    """The progress of one solve: best plan and bound so far, and whether to stop.

    Energies are in whatever units the solve works in (they are compared as ratios).

    Attributes:
        rule: when to stop.
        clock: the solve's clock (`solvers.budget`: work charged, or the wall), s.
        started: the clock's reading at the start of the solve.
        best: lowest energy offered so far (inf before any).
        bound: best certified lower bound so far (nan when none).
        modes: the plan of the lowest energy offered with its modes (None before any).
        modes_energy: that plan's energy.
        reason: why the solve should stop (one of `REASONS`), None while it goes on.
        detail: the reason in words, for messages.
        interrupted: set on Ctrl-C; stages stop at their next check.
        stall_detail: set when the search stalled (over the window, or a search ran
            out of moves: its patience, a sweep of windows that found nothing).
    """

    rule: StopRule = field(default_factory=StopRule)
    clock: Callable[[], float] = now
    started: float = math.nan
    best: float = math.inf
    bound: float = math.nan
    modes: list[int] | None = None
    modes_energy: float = math.inf
    reason: str | None = None
    detail: str = ""
    interrupted: bool = False
    stall_detail: str = ""
    _history: list[tuple[float, float]] = field(default_factory=list)
    _armed_at: float | None = None

    def __post_init__(self) -> None:
        if math.isnan(self.started):
            self.started = self.clock()

    def elapsed(self) -> float:
        """Seconds since the solve started."""
        return self.clock() - self.started

    def offer(self, energy: float, modes: Sequence[int] | None = None) -> None:
        """Record a plan (or, without `modes`, an incumbent's energy, e.g. HiGHS's)."""
        if not math.isfinite(energy):
            return
        if energy < self.best:
            self.best = energy
            self._history.append((self.elapsed(), energy))
        if modes is not None and energy < self.modes_energy:
            self.modes, self.modes_energy = list(modes), energy

    def offer_bound(self, bound: float) -> None:
        """Record a certified lower bound."""
        if math.isfinite(bound) and not (bound <= self.bound):
            self.bound = bound

    def gap(self) -> float:
        """The certified relative gap of the best energy (nan without a bound)."""
        if not math.isfinite(self.best):
            return math.nan
        return relative_gap(self.best, self.bound)

    def arm(self) -> None:
        """Start the stall clock, once: from here on the searches improve a finished
        plan (iterated improvement, MILP windows, the MILP). Later calls keep the first
        start, so that the window spans every such search: a solve whose searches
        together gain nothing over the window stops, whichever search runs."""
        if self._armed_at is None:
            self._armed_at = self.elapsed()

    def stop(self, reason: str, detail: str) -> None:
        """Record why the solve stops (the first reason stays)."""
        if self.reason is None:
            self.reason, self.detail = reason, detail

    def should_stop(self) -> bool:
        """True when the solve should stop: Ctrl-C or the stop gap (`reason` says
        which), or a stall (`stall_detail` says so)."""
        if self.interrupted:
            self.stop("interrupted", "interrupted (Ctrl-C)")
        if self.reason is not None:
            return True
        if self._armed_at is None:
            return False  # a first plan is still being built (bounded by its own shares)
        gap = self.gap()
        if self.rule.gap > 0 and gap <= self.rule.gap:
            self.stop("gap", f"certified gap {gap:.3%} ≤ {self.rule.gap:.3%}")
            return True
        if self._stalled():
            window = self.rule.window(self.elapsed())
            self.stall_detail = (
                f"no gain above {self.rule.stall_gain:.3%} in the last {window:.3g} s"
            )
            return True
        return False

    def _stalled(self) -> bool:
        if self.rule.stall_gain <= 0 or self._armed_at is None or not self._history:
            return False
        now = self.elapsed()
        start = now - self.rule.window(now)
        if start < self._armed_at:
            return False  # not yet a whole window of this search
        # The best energy at the window's start: the last improvement before it (the
        # history is in time order; searches check this every step, so bisect).
        k = bisect.bisect_right(self._history, (start, math.inf)) - 1
        then = self._history[max(k, 0)][1]
        return then - self.best <= self.rule.stall_gain * abs(self.best)
