"""The best plan of one solve, shared by its stages.

Every stage offers its plans and bounds to one `Incumbent`: a plan is kept when it
meets the deadline (evaluated exactly with the real durations) and is no dearer than
the one held; a bound is kept when it is higher. The incumbent passes both on to the
solve's `solvers.stopping.Watch`, which decides when the search may stop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from solvers.indexed import IndexedProblem, meets
from solvers.solution import relative_gap
from solvers.stopping import RUN_TO_LIMIT, Watch

#: A gap this small is float noise (HiGHS's feasibility tolerances on a scaled model):
#: a plan this close to its bound counts as optimal whatever gap was asked for.
NUMERIC_GAP = 1e-6


@dataclass
class Incumbent:
    """The best plan so far, in the units of the (scaled) problem it is for.

    Attributes:
        ip: the problem the stages work on.
        deadline: in `ip`'s time unit, or None.
        modes: the best plan (a mode index per task).
        energy: its energy, in `ip`'s energy unit.
        watch: the solve's watch (stop rule, Ctrl-C).
        bound: the best certified lower bound (nan while none).
        solver: which stages produced the plan, in words.
        out_of_time: set by a stage that ran out of time before it had a bound.
        notes: messages for the solution.
    """

    ip: IndexedProblem
    deadline: float | None
    modes: list[int]
    energy: float
    watch: Watch = field(default_factory=lambda: Watch(rule=RUN_TO_LIMIT))
    bound: float = math.nan
    solver: str = ""
    out_of_time: bool = False
    notes: list[str] = field(default_factory=list)

    @classmethod
    def start(
        cls, ip: IndexedProblem, deadline: float | None, modes: Sequence[int], watch: Watch
    ) -> Incumbent:
        """An incumbent holding `modes` (a plan meeting `deadline`)."""
        inc = cls(ip, deadline, [int(m) for m in modes], ip.evaluate(modes, deadline).energy)
        inc.watch = watch
        watch.offer(inc.energy, inc.modes)
        return inc

    def offer(self, modes: Sequence[int], solver: str) -> bool:
        """Keep `modes` when it meets the deadline and is no dearer; True if kept."""
        ev = self.ip.evaluate(modes, self.deadline)
        if not meets(ev.makespan, self.deadline) or ev.energy > self.energy:
            return False
        self.modes, self.energy, self.solver = [int(m) for m in modes], ev.energy, solver
        self.watch.offer(ev.energy, self.modes)
        return True

    def offer_bound(self, value: float) -> None:
        """Keep a certified lower bound when it is higher (nan: none)."""
        if not math.isnan(value):
            self.bound = value if math.isnan(self.bound) else max(self.bound, value)
            self.watch.offer_bound(self.bound)

    def gap(self) -> float:
        """The plan's certified relative gap (nan without a bound)."""
        return relative_gap(self.energy, self.bound)

    def within(self, gap: float) -> bool:
        """True when the certified gap is at most `gap` (or float noise)."""
        return self.gap() <= max(gap, NUMERIC_GAP)

    def should_stop(self) -> bool:
        """The watch's verdict: Ctrl-C, the stop gap or a stall."""
        return self.watch.should_stop()
