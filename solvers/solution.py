"""`Solution`: a mode assignment with its exact schedule, energy and optimality gap."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from solvers.indexed import IndexedProblem, meets


@dataclass(frozen=True)
class Solution:
    """A plan: one mode per task, its earliest-start schedule and its energy.

    Makespan and energy are always recomputed from the chosen modes' real durations and
    energies (never from a solver's internal, possibly rounded, values).

    Attributes:
        status: ``"optimal"`` (its own `gap` is within the requested gap),
            ``"time_limit"`` (the solver stopped at its time limit or its budget of
            work; `gap` says how far from proved), ``"interrupted"`` (stopped by
            Ctrl-C; the best plan found),
            ``"feasible"`` (any other stop; `gap` against the certified bound),
            ``"evaluated"`` (an assignment given by the caller) or ``"late"``
            (an evaluated assignment that misses its deadline).
        modes: task name → chosen mode index.
        starts: task name → start time, s (earliest start with real durations).
        makespan: s.
        energy: J, E = Σ E_i + transition energy + Σ_dev s̄_dev·(H − busy_dev).
        lower_bound: J, a certified lower bound on the optimum (nan when unknown).
        gap: (energy − lower_bound) / |energy| (nan when unknown).
        deadline: s, or None.
        solver: which engine produced it, e.g. ``"HiGHS LP + rounding"``.
        method: the `method=` asked for.
        wall_time_s: s of wall time spent.
        var_energy: Σ var_energy of the chosen modes, J².
        message: a human-readable note (why a method was switched, limits hit...).
        horizon: H of the accounting, s (the makespan, or the deadline when held).
        task_energy: Σ_i E_i, J.
        idle_energy: Σ_dev s̄_dev·(H − busy_dev), J.
        transition_energy: J paid for setting changes.
        transitions: number of setting changes paid for.
        busy: device → busy time, s (durations plus transition times).
        durations: task name → duration, s.
        var_makespan: variance of the makespan along the critical path, s² (durations
            of one path treated as independent).
        stop_reason: why the search stopped (`solvers.stopping.REASONS`):
            ``"optimal"``, ``"gap"`` (certified gap within the stop gap), ``"stalled"``,
            ``"work_limit"`` (the budget of work, without a time limit), ``"time_limit"``,
            ``"interrupted"`` or ``"done"``; empty when not solved.
    """

    status: str
    modes: Mapping[str, int]
    starts: Mapping[str, float]
    makespan: float
    energy: float
    lower_bound: float
    gap: float
    deadline: float | None
    solver: str
    method: str
    wall_time_s: float
    var_energy: float
    message: str = ""
    horizon: float = 0.0
    task_energy: float = 0.0
    idle_energy: float = 0.0
    transition_energy: float = 0.0
    transitions: int = 0
    busy: Mapping[str, float] = field(default_factory=dict)
    durations: Mapping[str, float] = field(default_factory=dict)
    var_makespan: float = 0.0
    stop_reason: str = ""

    @property
    def std_energy(self) -> float:
        """Standard deviation of the energy, J (independent tasks)."""
        return math.sqrt(max(self.var_energy, 0.0))

    @property
    def idle(self) -> Mapping[str, float]:
        """Device → idle time within the horizon, s."""
        return {dev: self.horizon - b for dev, b in self.busy.items()}

    @property
    def feasible(self) -> bool:
        """True when the plan meets its deadline (or has none)."""
        return meets(self.makespan, self.deadline)


def relative_gap(energy: float, lower_bound: float) -> float:
    """(energy − bound) / |energy|, clamped at 0; nan when the bound is unknown, inf
    without a plan (energy inf: an inf/inf ratio is nan, and max(0, nan) would be 0)."""
    if math.isnan(lower_bound) or math.isnan(energy):
        return math.nan
    if math.isinf(energy):
        return math.inf
    if energy == 0:
        return 0.0 if lower_bound >= -1e-12 else math.inf
    # |energy|: with same-device overlaps and modes drawing less than s̄, totals can
    # be negative (the idle term removes static power counted twice).
    return max(0.0, (energy - lower_bound) / abs(energy))


def build_solution(
    ip: IndexedProblem,
    modes: Sequence[int],
    deadline: float | None,
    *,
    status: str,
    lower_bound: float,
    solver: str,
    method: str,
    wall_time_s: float,
    message: str = "",
) -> Solution:
    """Evaluate an assignment exactly and wrap it in a `Solution`."""
    ev = ip.evaluate(modes, deadline)
    names = ip.names
    var_energy = float(sum(ip.tasks[i].modes[m].var_energy for i, m in enumerate(modes)))
    # Variance of the makespan: along one critical path (ties broken arbitrarily).
    var_dur = [ip.tasks[i].modes[m].var_duration for i, m in enumerate(modes)]
    var_makespan = _critical_path_variance(ip, ev.starts, ev.durations, var_dur)
    # A bound computed by a solver may overshoot the true optimum by its float
    # tolerance; never report one above a plan we actually hold.
    lb = math.nan if math.isnan(lower_bound) else min(lower_bound, ev.energy)
    return Solution(
        status=status,
        modes={names[i]: int(m) for i, m in enumerate(modes)},
        starts={names[i]: float(s) for i, s in enumerate(ev.starts)},
        makespan=ev.makespan,
        energy=ev.energy,
        lower_bound=lb,
        gap=relative_gap(ev.energy, lb),
        deadline=deadline,
        solver=solver,
        method=method,
        wall_time_s=wall_time_s,
        var_energy=var_energy,
        message=message,
        horizon=ev.horizon,
        task_energy=ev.task_energy,
        idle_energy=ev.idle_energy,
        transition_energy=ev.transition_energy,
        transitions=ev.transitions,
        busy={dev: float(b) for dev, b in zip(ip.devices, ev.busy, strict=False)},
        durations={names[i]: float(d) for i, d in enumerate(ev.durations)},
        var_makespan=var_makespan,
    )


def _critical_path_variance(
    ip: IndexedProblem, starts: Sequence[float], dur: Sequence[float], var: Sequence[float]
) -> float:
    """Σ var_duration along one longest path, walking back from the last task to end."""
    if ip.n == 0:
        return 0.0
    ends = [s + d for s, d in zip(starts, dur, strict=False)]
    v = max(range(ip.n), key=lambda i: ends[i])
    total = 0.0
    while True:
        total += var[v]
        tol = 1e-12 * max(1.0, ends[v])
        prev = [u for u in ip.preds[v] if abs(ends[u] - starts[v]) <= tol]
        if ip.chain_prev[v] >= 0 and not prev:
            u = ip.chain_prev[v]
            if ends[u] <= starts[v] + tol and starts[v] > 0:
                prev = [u]
        if not prev or starts[v] <= 0:
            return total
        v = prev[0]
