"""Solving plans: minimum energy under a deadline, the plan frontier, and schedules.

The optimization itself is the ``solvers`` package's; this module maps a plan to its
problem (:mod:`eopt.plan.problem`) and a solution back to an ``eopt.schedule/1``
:class:`~eopt.plan.schedule.Schedule`, with the all-fastest plan as the baseline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from eopt.calculus.library import Library
from eopt.plan.planfile import Plan, PlanError
from eopt.plan.problem import PlanProblem, build_problem
from eopt.plan.schedule import DeviceInfo, Schedule, ScheduledElement

__all__ = [
    "Baseline",
    "FrontierPlan",
    "baseline",
    "plan_frontier",
    "resolve_deadline",
    "schedule_from_solution",
    "solve_plan",
]


@dataclass(frozen=True)
class Baseline:
    """The reference plan: every element at its fastest cell.

    Attributes:
        energy: J.
        makespan: s.
        modes: Element name → mode index.
    """

    energy: float
    makespan: float
    modes: Mapping[str, int]

    def to_dict(self) -> dict[str, Any]:
        """For the schedule file."""
        return {
            "energy": self.energy,
            "makespan": self.makespan,
            "label": "every element at its fastest cell",
        }


def fastest_modes(pp: PlanProblem) -> dict[str, int]:
    """Each solver task's fastest mode (ties: less energy): every lone element at its
    fastest cell, every group at the setting and cells that make it shortest."""
    problem: Any = pp.problem
    return {
        task.name: min(
            range(len(task.modes)), key=lambda k: (task.modes[k].duration, task.modes[k].energy)
        )
        for task in problem.tasks
    }


def baseline(pp: PlanProblem) -> Baseline:
    """Energy and makespan of the all-fastest plan (exact evaluation by ``solvers``)."""
    from solvers import evaluate

    modes = fastest_modes(pp)
    sol = evaluate(pp.problem, modes)
    return Baseline(energy=float(sol.energy), makespan=float(sol.makespan), modes=modes)


def resolve_deadline(
    pp: PlanProblem, deadline: float | None = None, slowdown: float | None = None
) -> float | None:
    """The deadline to solve for, in s.

    Args:
        pp: The plan problem.
        deadline: An explicit bound in s (wins over the others).
        slowdown: A fraction of the fastest makespan to allow on top of it (0.05 = 5 %).

    Returns:
        ``deadline``, else ``(1 + slowdown) ×`` the fastest makespan, else the plan's own
        deadline, else ``None`` (energy-minimizing makespan).
    """
    from solvers import fastest_makespan

    if deadline is not None:
        if not deadline > 0:
            raise PlanError(f"deadline must be > 0 s, got {deadline}")
        return float(deadline)
    if slowdown is not None:
        if slowdown < 0:
            raise PlanError(f"slowdown must be ≥ 0 (e.g. 5%), got {slowdown:g}")
        return float(fastest_makespan(pp.problem)) * (1.0 + slowdown)
    return pp.plan.deadline


def solve_plan(
    plan: Plan,
    deadline: float | None = None,
    slowdown: float | None = None,
    method: str = "auto",
    time_limit: float = 60.0,
    gap: float = 1e-4,
    library: Library | None = None,
) -> Schedule:
    """Choose κ and ω per element: minimum energy with the makespan within the deadline.

    Args:
        plan: The plan.
        deadline: Makespan bound in s; see :func:`resolve_deadline` for the defaults.
        slowdown: Bound relative to the fastest makespan (0.05 = fastest + 5 %).
        method: ``"auto"``, ``"milp"`` or ``"relax"`` (see ``solvers.solve``).
        time_limit: Solver time limit, in s.
        gap: Relative optimality gap at which the MILP may stop.
        library: Signatures; default: the plan's libraries.

    Returns:
        The schedule, with baseline, lower bound and gap.

    Raises:
        solvers.InfeasibleDeadline: naming the fastest achievable makespan.
    """
    from solvers import solve

    pp = build_problem(plan, library)
    bound = resolve_deadline(pp, deadline, slowdown)
    sol = solve(pp.problem, deadline=bound, method=method, time_limit=time_limit, gap=gap)
    return schedule_from_solution(pp, sol, baseline(pp))


def schedule_from_solution(pp: PlanProblem, sol: Any, base: Baseline | None = None) -> Schedule:
    """The :class:`Schedule` of a ``solvers.Solution`` of ``pp``.

    Each element gets its own chosen cell (duration, s·T + d, κ, ω) and its task's start:
    the members of a group co-start. The schedule's energy is the solution's (tasks, a
    group priced as ``par`` of its members, + idle over the makespan + transitions), which
    is the calculus' ``compose_schedule`` of the placed cells.
    """
    elements = []
    chosen = pp.element_signatures(sol.modes)
    for elem in pp.plan.elements:
        sig = chosen[elem.name]
        elements.append(
            ScheduledElement(
                name=elem.name,
                type=elem.type,
                device=elem.device,
                # A group's members co-start at their task's start.
                start=float(sol.starts[pp.task_of[elem.name]]),
                duration=sig.time,
                energy=sig.energy,
                impl=sig.impl,
                op_point=sig.op_point,
                dynamic_energy=sig.dynamic_energy,
                var_energy=sig.var_energy,
            )
        )
    lower = _finite(sol.lower_bound)
    return Schedule(
        elements=tuple(elements),
        devices=tuple(
            DeviceInfo(d.name, d.idle_power_w, d.gpu, d.transition_time_s, d.transition_energy_j)
            for d in pp.plan.devices
        ),
        makespan=float(sol.makespan),
        energy=float(sol.energy),
        energy_std=math.sqrt(max(0.0, float(sol.var_energy))),
        deadline=sol.deadline,
        lower_bound=lower,
        gap=_finite(sol.gap),
        solver={
            "name": sol.solver,
            "method": sol.method,
            "status": sol.status,
            "wall_time_s": sol.wall_time_s,
            "message": sol.message,
        },
        baseline=base.to_dict() if base is not None else None,
        plan=pp.plan.source or pp.plan.name,
        meta={
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "plan_name": pp.plan.name,
            "modes_per_type": {t: len(pp.cells[_first_of(pp, t)]) for t in pp.plan.types()},
            # Co-running elements (one ⊕ each): their static draw counts once.
            **({"groups": [list(g) for g in pp.plan.groups]} if pp.plan.groups else {}),
        },
    )


def _first_of(pp: PlanProblem, type_name: str) -> str:
    return next(e.name for e in pp.plan.elements if e.type == type_name)


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    x = float(value)
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class FrontierPlan:
    """One point of a plan's time–energy frontier.

    Attributes:
        makespan: s.
        energy: J.
        lower_bound: J (certified; ``None`` when unknown).
        gap: Relative gap to the bound.
        status: The solver's status for the point.
        solution: The ``solvers.Solution``.
        energy_std: σ of the predicted energy, in J.
    """

    makespan: float
    energy: float
    lower_bound: float | None
    gap: float | None
    status: str
    solution: Any
    energy_std: float = 0.0

    def to_row(self) -> dict[str, Any]:
        """A CSV row."""
        return {
            "makespan_s": self.makespan,
            "energy_j": self.energy,
            "energy_std_j": self.energy_std,
            "lower_bound_j": self.lower_bound,
            "gap": self.gap,
            "status": self.status,
        }


def plan_frontier(
    plan: Plan,
    num_points: int = 50,
    method: str = "relax",
    library: Library | None = None,
    progress: Callable[[int, int], None] | None = None,
    **solver_options: Any,
) -> tuple[list[FrontierPlan], PlanProblem]:
    """The plan-level time–energy frontier (fastest makespan → energy-minimizing one).

    Args:
        plan: The plan.
        num_points: Number of deadlines the solver sweeps.
        method: ``"relax"`` (fast, with bounds) or ``"milp"``.
        library: Signatures; default: the plan's libraries.
        progress: Called as ``progress(done, total)`` when the solver reports progress.
        **solver_options: Passed on to ``solvers.frontier``.

    Returns:
        The points sorted by makespan, and the plan problem (to map solutions back).
    """
    import inspect

    from solvers import frontier

    pp = build_problem(plan, library)
    kwargs: dict[str, Any] = {"num_points": num_points, "method": method, **solver_options}
    if progress is not None and "progress" in inspect.signature(frontier).parameters:
        kwargs["progress"] = progress
    sols = frontier(pp.problem, **kwargs)
    points = [
        FrontierPlan(
            makespan=float(s.makespan),
            energy=float(s.energy),
            lower_bound=_finite(s.lower_bound),
            gap=_finite(s.gap),
            status=str(s.status),
            solution=s,
            energy_std=math.sqrt(max(0.0, float(s.var_energy))),
        )
        for s in sols
    ]
    return sorted(points, key=lambda p: p.makespan), pp
