"""The steps of a frontier sweep: a plan per deadline, each seeded by the one before.

A sweep walks the deadlines of `solvers.frontier` from the fastest makespan up. At each
deadline the plan of the previous (tighter) one still fits, and spending the slack
that opens up (`solvers.improve.improve_with_times`, from that plan's longest-path
times) costs about a third of a step that re-solves the hull LP, rounds it and
improves the rounded plan. A sweep takes that cheap step first and pays for the LP step
where the cheap one brings no new plan (the previous plan comes back unchanged), and
at least every `LP_STEP_EVERY` deadlines: cheap steps alone drift (on Perseus's GPT-3
A100 8 × 12 the frontier then sat 0.4–1.0 % above lowtime's best plans at 1.02–1.10 ×).

Bounds: the hull LP's optimum falls as the deadline grows (a looser deadline relaxes
it), so a deadline without its own LP solve takes the bound of the next LP-solved
deadline above it, or of the LP without a deadline (`floor`): weaker than its own, and
certified.

Assumptions:
    No groups and no transition costs (the frontier only sweeps uncoupled problems with
    its LP).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from solvers.budget import Budget
from solvers.improve import improve_with_times, repair
from solvers.indexed import IndexedProblem, meets
from solvers.lp import HullLP, round_down
from solvers.paths import PathTimes
from solvers.stopping import Watch

#: Reference seconds of work (`solvers.budget.WorkMeter`) one improvement may take, as
#: in `solvers.relax.relax_once`: never reached on frontier problems, and load-independent.
IMPROVE_WORK_S = 10.0


@dataclass
class Plan:
    """One plan of a sweep, in the units of the (scaled) problem.

    Attributes:
        modes: mode index per task.
        times: its longest-path times.
        energy: its energy.
        bound: a certified lower bound at its deadline (nan: not known yet).
        lp: True when its deadline had its own LP solve (the plan may be the rounded LP's).
    """

    modes: list[int]
    times: PathTimes
    energy: float
    bound: float = math.nan
    lp: bool = False


@dataclass
class EndWatch(Watch):
    """A `Watch` that also keeps every plan offered to it, in order.

    The search at the energy-minimizing end passes through plans at makespans just
    below its own; those that no other point beats become frontier points for free.

    Attributes:
        plans: every plan offered with its modes.
    """

    plans: list[list[int]] = field(default_factory=list)

    def offer(self, energy: float, modes: Sequence[int] | None = None) -> None:
        """Record a plan as `Watch.offer` does, and keep its modes."""
        super().offer(energy, modes)
        if modes is not None and math.isfinite(energy):
            self.plans.append([int(m) for m in modes])


class SweepStep:
    """Plans at single deadlines of one problem, by its hull LP and local search.

    Args:
        ip: the problem (uncoupled, scaled).
        lp: its hull LP (no tasks pinned).
    """

    def __init__(self, ip: IndexedProblem, lp: HullLP) -> None:
        self.ip = ip
        self.lp = lp

    def plan(self, modes: Sequence[int], times: PathTimes | None = None) -> Plan:
        """`modes` as a `Plan` (its times computed unless given)."""
        modes = [int(m) for m in modes]
        if times is None:
            times = PathTimes.of(self.ip, self.ip.durations_of(modes))
        return Plan(modes, times, self.ip.energy_at(modes, times.makespan, None))

    def seeded(self, deadline: float | None, seed: Plan) -> Plan:
        """`seed` (a plan meeting `deadline`) with the slack to `deadline` spent."""
        modes, times = improve_with_times(
            self.ip, seed.modes, deadline, Budget.of_work(IMPROVE_WORK_S), times=seed.times
        )
        return Plan(modes, times, self.ip.energy_at(modes, times.makespan, deadline))

    def with_lp(
        self, deadline: float | None, seeded: Plan | None = None
    ) -> tuple[Plan | None, float]:
        """The LP's rounded plan improved, or `seeded` (already improved at `deadline`)
        when that is cheaper; and the LP's bound. (None, nan) when the LP finds the
        deadline infeasible (only by float rounding at the fastest makespan).

        The same plan as `solvers.relax.relax_once` with `seeded`'s seed, which it
        improves first.
        """
        ip, lp = self.ip, self.lp
        lp.set_deadline(deadline)
        point = lp.solve()
        if point is None:
            return None, math.nan
        bound = point.energy_bound(ip, deadline)
        start = self.plan(round_down(lp, point.t).tolist())
        if deadline is not None and not meets(start.times.makespan, deadline):
            start = self.plan(repair(ip, start.modes, deadline))
        best = self.seeded(deadline, start)  # the rounded plan meets it
        if (
            seeded is not None
            and meets(seeded.times.makespan, deadline)
            and seeded.energy < best.energy
        ):
            best = seeded
        best.bound, best.lp = bound, True
        return best, bound


#: Deadlines between LP steps at most (`sweep_grid`). The frontier's mean energy over
#: its makespans on Perseus's GPT-3 A100 8 × 12: 5 732.1 J with the LP step at every
#: deadline, 5 734.2 J at every third, 5 791.9 J with none forced; about 10 % more CPU.
LP_STEP_EVERY = 3

#: Largest spacing of the deadlines, as a share of the first, at which a sweep skips the
#: LP step where the previous plan improved is a new plan; sparser grids take it at
#: every deadline (4 × 8 with 20 points: 2 of lowtime's 14 plans beaten by up to 5.1 J
#: otherwise). On 8 × 32 with 100 points the spacing is 0.27 %.
CHEAP_STEP_SPACING = 0.005


def sweep_grid(
    step: SweepStep, deadlines: Sequence[float], start: Plan, floor: float
) -> list[tuple[float, Plan]]:
    """Plans at rising `deadlines` (scaled units), each seeded by the one before.

    Each deadline first gets the previous plan improved (`SweepStep.seeded`); when that
    is the previous plan itself, or `LP_STEP_EVERY` deadlines have passed without one,
    the LP step (`SweepStep.with_lp`) runs too and the cheaper plan is kept. The first
    deadline always gets the LP step, and so does every deadline when they are spaced
    wider than `CHEAP_STEP_SPACING`.

    Args:
        step: the problem's steps.
        deadlines: rising deadlines, above `start`'s makespan or at it.
        start: a plan meeting the first deadline (the fastest end).
        floor: a certified bound at every deadline (the LP without a deadline).

    Returns:
        (deadline, plan) per deadline, every plan with a certified bound.
    """
    out: list[tuple[float, Plan]] = []
    prev = start
    spacing = np.diff(np.asarray(deadlines, dtype=float)).max(initial=0.0)
    every = len(deadlines) > 0 and spacing > CHEAP_STEP_SPACING * deadlines[0]
    last_lp = 0
    for k, deadline in enumerate(deadlines):
        seeded = step.seeded(deadline, prev)
        plan: Plan | None = seeded
        if k == 0 or every or seeded.modes == prev.modes or k - last_lp >= LP_STEP_EVERY:
            last_lp = k
            plan, _ = step.with_lp(deadline, seeded)
            if plan is None:
                plan = seeded
        out.append((float(deadline), plan))
        prev = plan
    # A deadline without its own LP solve takes the bound of the next one with one
    # (the LP bound falls as the deadline grows), else the bound without a deadline.
    later = floor
    for _, plan in reversed(out):
        if plan.lp and not np.isnan(plan.bound):
            later = plan.bound
        else:
            plan.bound = later
    return out
