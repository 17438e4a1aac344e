"""Solving plans: minimum energy under a deadline, the plan frontier, and schedules.

The optimization itself is the ``solvers`` package's; this module maps a plan to its
problem (:mod:`eopt.plan.problem`) and a solution back to an ``eopt.schedule/1``
:class:`~eopt.model.schedule.Schedule`, with the all-fastest plan as the baseline.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from eopt.model.library import Library
from eopt.model.planfile import Plan, PlanError
from eopt.model.schedule import Schedule, ScheduledElement
from eopt.model.signature import Signature
from eopt.model.units import format_percent
from eopt.plan.budget import SolveTimeLimitError, TimeBudget
from eopt.plan.pipeline import library_device_model
from eopt.plan.problem import PlanProblem, build_problem

if TYPE_CHECKING:
    from solvers.stopping import StopRule

__all__ = [
    "Baseline",
    "FrontierPlan",
    "Savings",
    "SolveTimeLimitError",
    "TimeBudget",
    "baseline",
    "plan_frontier",
    "resolve_deadline",
    "savings",
    "schedule_from_solution",
    "solve_plan",
    "static_problem",
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
    from solvers import ProblemError, check_deadline, fastest_makespan

    if deadline is not None:
        try:  # the solvers' one rule for deadlines
            return check_deadline(deadline)
        except ProblemError as exc:
            raise PlanError(str(exc)) from None
    if slowdown is not None:
        if slowdown < 0:
            raise PlanError(f"slowdown must be ≥ 0 (e.g. 5%), got {slowdown:g}")
        return float(fastest_makespan(pp.problem)) * (1.0 + slowdown)
    return pp.plan.deadline


#: Share of the time left that the plan at the fastest makespan gets (the headline's
#: "X % at no slowdown"), and the per-element plan of a static solve; the plan asked
#: for gets the rest.
SIDE_SHARE = 0.25

#: `SIDE_SHARE` on problems from `solvers.lp.NETWORK_TASKS` tasks (their LP solved
#: through its network): there the side solve spends its whole share on rounding, one
#: LP point and its improvement, and on GPT-3 8 × 512 half the share costs 1.8 s CPU
#: less for a plan 0.06 % dearer (0.597 % above its bound instead of 0.533 %).
SIDE_SHARE_LARGE = 0.125

#: Shortest stall window (s) of the side solves (the plan at the fastest makespan, the
#: per-element plan of a static solve) under the default stop rule: they are references
#: for the headline, and the 2-s default window was most of a default solve's time.
SIDE_STALL_MIN_S = 0.5

#: Share of the time limit (at most `FINISH_MAX_S` s) kept back from the solvers for
#: evaluating the baseline and building the schedule after them.
FINISH_SHARE = 0.05
FINISH_MAX_S = 2.0


@dataclass(frozen=True)
class Savings:
    """The headline of a schedule: what is saved for free and what costs time.

    Attributes:
        baseline_energy_j: Every element at its fastest cell (the all-fastest plan), J.
        at_fastest_energy_j: The cheapest plan found at the fastest makespan, J.
        at_deadline_energy_j: The schedule's plan, J.
        slowdown: The schedule's deadline over the fastest makespan, minus 1 (the
            energy-minimizing makespan's when there is no deadline).
        vs: What the savings are measured against (``"all-fastest"``).
    """

    baseline_energy_j: float
    at_fastest_energy_j: float
    at_deadline_energy_j: float
    slowdown: float
    vs: str = "all-fastest"

    @property
    def at_fastest(self) -> float:
        """Fraction of the all-fastest energy saved at no slowdown."""
        return 1.0 - self.at_fastest_energy_j / self.baseline_energy_j

    @property
    def at_deadline(self) -> float:
        """Fraction of the all-fastest energy saved by the schedule's plan."""
        return 1.0 - self.at_deadline_energy_j / self.baseline_energy_j

    @property
    def for_time(self) -> float:
        """The part of :attr:`at_deadline` that the slowdown buys (percentage points of
        the all-fastest energy)."""
        return self.at_deadline - self.at_fastest

    def headline(self) -> str:
        """``Saves 15.5 % at no slowdown, 3.0 % more for +5.0 % time``: both against the
        all-fastest plan's energy. A plan that costs more at no slowdown (one setting per
        GPU can) says ``Uses 0.2 % more at no slowdown, saves 15.6 % at +5.0 % time``."""
        slower = format_percent(self.slowdown, sign=True)
        if self.at_fastest >= 0:
            free = f"Saves {format_percent(self.at_fastest)} at no slowdown"
            paid = f"{format_percent(self.for_time)} more for {slower} time"
        else:
            free = f"Uses {format_percent(-self.at_fastest)} more at no slowdown"
            paid = f"saves {format_percent(self.at_deadline)} at {slower} time"
        return free if self.slowdown <= 1e-9 else f"{free}, {paid}"

    def to_dict(self) -> dict[str, Any]:
        """For the schedule file (``baseline.savings``): fractions and joules."""
        return {
            "vs": self.vs,
            "at_fastest": self.at_fastest,
            "at_deadline": self.at_deadline,
            "slowdown": self.slowdown,
            "baseline_energy_j": self.baseline_energy_j,
            "at_fastest_energy_j": self.at_fastest_energy_j,
            "at_deadline_energy_j": self.at_deadline_energy_j,
        }


def savings(schedule: Schedule) -> Savings | None:
    """The headline savings stored in a schedule (``baseline.savings``), or None for a
    schedule written without them (by an older eopt, or by hand)."""
    data = (schedule.baseline or {}).get("savings")
    if not isinstance(data, Mapping):
        return None
    try:
        return Savings(
            baseline_energy_j=float(data["baseline_energy_j"]),
            at_fastest_energy_j=float(data["at_fastest_energy_j"]),
            at_deadline_energy_j=float(data["at_deadline_energy_j"]),
            slowdown=float(data["slowdown"]),
            vs=str(data.get("vs", "all-fastest")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def static_problem(pp: PlanProblem) -> PlanProblem:
    """``pp`` with every device's tasks in one solver group: one setting per GPU for the
    whole plan, so that ``eopt apply`` can lock it (no runtime controller needed).

    Assumptions:
        ``pp`` was built without pruning (``build_problem(prune=False)``): a cell that no
        per-element plan uses may be the one that a device-wide setting needs.
    """
    by_device: dict[str, list[str]] = {}
    for task in pp.tasks.values():
        by_device.setdefault(task.device, []).append(task.name)
    groups = tuple(tuple(names) for names in by_device.values() if len(names) > 1)
    # One setting for the whole run: there is nothing left to switch, nothing to pay.
    problem = replace(pp.problem, groups=groups, transition={})  # type: ignore[type-var]
    return replace(pp, problem=problem)


def solve_plan(
    plan: Plan,
    deadline: float | None = None,
    slowdown: float | None = None,
    method: str = "auto",
    time_limit: float | None = None,
    gap: float = 1e-4,
    library: Library | None = None,
    *,
    static: bool = False,
    budget: TimeBudget | None = None,
    stop: StopRule | None = None,
) -> Schedule:
    """Choose κ and ω per element: minimum energy with the makespan within the deadline.

    Besides the plan asked for, it finds the cheapest plan at the fastest makespan (what
    is saved at no slowdown, :class:`Savings`) and, with ``static``, the per-element plan
    it is compared with; both get a share of the time (``SIDE_SHARE``).

    Args:
        plan: The plan.
        deadline: Makespan bound in s; see :func:`resolve_deadline` for the defaults.
        slowdown: Bound relative to the fastest makespan (0.05 = fastest + 5 %).
        method: ``"auto"``, ``"milp"`` or ``"relax"`` (see ``solvers.solve``).
        time_limit: Wall time for everything, building the problem included, in s;
            None (the default): no wall limit, and every solve stops by rules that count
            work, so one plan comes out on any machine at any load.
        gap: Relative optimality gap at which the MILP may stop.
        library: Signatures; default: the plan's libraries.
        static: One device-wide setting per device for the whole plan (what ``eopt
            apply`` can lock without a runtime controller).
        budget: The time budget to draw from instead of a new one of ``time_limit``
            (the CLI starts it before reading the plan, so reading counts too).
        stop: When each solve may stop before its share of the time
            (``solvers.stopping.StopRule``); None: the solver's default for ``method``
            (relax and auto stop at a certified gap ≤ 0.1 % or when they stall, milp
            runs to ``gap`` or the limit).

    Returns:
        The schedule, with baseline, savings (``baseline.savings``), lower bound and gap,
        and why the search stopped (``solver["stop_reason"]``); with ``static`` its
        ``meta["static"]`` holds the per-element plan's energy. After a Ctrl-C its
        status is ``"interrupted"`` and it holds the best plan found.

    Raises:
        solvers.InfeasibleDeadline: naming the fastest achievable makespan.
        SolveTimeLimitError: the time limit ran out before the solver could start.
    """
    from solvers import check_deadline, fastest_makespan, solve
    from solvers.deadline import meets
    from solvers.exceptions import ADVICE_RTOL, round_up
    from solvers.lp import NETWORK_TASKS
    from solvers.solve import default_work_s, method_named

    budget = budget or TimeBudget(time_limit)
    size = f"{len(plan.elements)} elements"
    pp = build_problem(plan, library, prune=not static)
    budget.check("building the problem", size)
    t_fast = float(fastest_makespan(pp.problem))  # indexes the problem once, for all
    budget.check("indexing it", size)
    bound = check_deadline(resolve_deadline(pp, deadline, slowdown), t_fast)
    target = static_problem(pp) if static else pp
    # One setting per GPU may not reach the per-element fastest makespan (an element
    # whose fastest cell sits at another clock): its own fastest is the reference.
    t_target = float(fastest_makespan(target.problem)) if static else t_fast
    if static:
        budget.check("indexing the one-setting-per-GPU problem", size)
        if not meets(t_target, bound):
            # Rounded up, so that following the advice works.
            least = round_up(t_target * (1 - ADVICE_RTOL))
            raise PlanError(
                f"with one setting per GPU (--static) the fastest makespan is "
                f"{least} s, above the deadline {bound:.6g} s; ask for a deadline of at "
                f"least {least} s (+{t_target / t_fast - 1:.3%} over the "
                "per-element fastest), or solve without --static"
            )

    def run(
        problem: Any,
        at: float | None,
        seconds: float,
        rule: StopRule | None = stop,
        part: float = 1.0,
    ) -> Any:
        # Without a wall limit each solve gets its part of the work budget instead.
        return solve(
            problem,
            deadline=at,
            method=method,
            time_limit=budget.solver_limit(seconds),
            work_limit=part * default_work_s(len(problem.tasks)),
            gap=gap,
            stop=rule,
        )

    # The side solves stop on a shorter stall window, unless a rule was given (a method
    # that runs to its limit never stalls, whatever the window).
    side_rule = stop or replace(method_named(method).stop, stall_min_s=SIDE_STALL_MIN_S)

    def interrupted(side: Any) -> bool:
        return side is not None and side.status == "interrupted"

    # Kept back for what follows the solves: the baseline, the schedule, writing it.
    finish = min(FINISH_MAX_S, FINISH_SHARE * budget.limit_s)
    tight = bound is not None and bound <= t_target * (1 + 1e-9)
    # A Ctrl-C stops the solve that is running (it hands back its best plan, status
    # "interrupted") and every solve after it: the plan found for the fastest makespan
    # meets any looser deadline, so it stands in for the plan asked for.
    side = SIDE_SHARE_LARGE if len(target.problem.tasks) >= NETWORK_TASKS else SIDE_SHARE
    at_fastest = (
        None if tight else run(target.problem, t_target, budget.share(side), side_rule, side)
    )
    per_element = None
    if static and not interrupted(at_fastest):
        per_element = run(pp.problem, bound, budget.share(SIDE_SHARE), side_rule, SIDE_SHARE)
    given = budget.share(1.0, keep=finish)
    if interrupted(at_fastest) or interrupted(per_element):
        assert at_fastest is not None  # a static solve has a side solve first
        sol = _instead(at_fastest, bound)
    else:
        sol = run(target.problem, bound, given)
    if sol.status == "time_limit" and budget.limited:
        note = (
            f"this plan had {given:.3g} s of the {budget.limit_s:g} s limit (the rest went "
            "to reading and building the problem and to the plans it is compared with); "
            "a longer --time-limit may find a cheaper one"
        )
        sol = replace(sol, message="; ".join(m for m in (sol.message, note) if m))
    # The plan at the fastest makespan meets any looser deadline: never hand out worse.
    if at_fastest is not None and at_fastest.energy < sol.energy:
        sol = _cheaper(sol, at_fastest)
    base = baseline(pp)
    schedule = schedule_from_solution(target, sol, base)
    free = sol if at_fastest is None else at_fastest
    horizon = bound if bound is not None else float(sol.makespan)
    gains = Savings(
        baseline_energy_j=base.energy,
        at_fastest_energy_j=float(free.energy),
        at_deadline_energy_j=float(sol.energy),
        slowdown=max(0.0, horizon / t_fast - 1.0),
    )
    meta = dict(schedule.meta)
    if per_element is not None:
        meta["static"] = {
            "per_element_energy_j": float(per_element.energy),
            "per_element_makespan_s": float(per_element.makespan),
            "extra_energy_j": float(sol.energy) - float(per_element.energy),
        }
    meta["time_limit_s"] = budget.limit_s if budget.limited else None
    meta["wall_time_s"] = budget.spent()
    # Fractions of a zero (or negative: overlaps can draw less than idle) all-fastest
    # energy mean nothing: such a schedule carries no headline.
    extra = {"savings": gains.to_dict()} if base.energy > 0 else {}
    return replace(schedule, baseline={**base.to_dict(), **extra}, meta=meta)


def _instead(side: Any, deadline: float | None) -> Any:
    """The interrupted plan for the fastest makespan as the plan for ``deadline``: it meets
    that deadline, but its bound was for another one, so it carries none."""
    note = "interrupted before the plan asked for was searched; this is the fastest plan's"
    return replace(
        side,
        status="interrupted",
        stop_reason="interrupted",
        deadline=deadline,
        lower_bound=math.nan,
        gap=math.nan,
        message="; ".join(m for m in (side.message, note) if m),
    )


def _cheaper(sol: Any, other: Any) -> Any:
    """``other`` (a plan meeting ``sol``'s deadline too) in ``sol``'s place, with ``sol``'s
    bound and status, and the gap recomputed against that bound."""
    from solvers.solution import relative_gap

    note = "the plan found for the fastest makespan was cheaper and is used"
    return replace(
        other,
        status=sol.status,
        deadline=sol.deadline,
        lower_bound=sol.lower_bound,
        gap=relative_gap(float(other.energy), float(sol.lower_bound)),
        solver=sol.solver,
        method=sol.method,
        stop_reason=sol.stop_reason,
        message="; ".join(m for m in (sol.message, note) if m),
    )


def _placed_cells(
    pp: PlanProblem, sol: Any
) -> tuple[Mapping[str, Signature], list[ScheduledElement]]:
    """Each plan element's chosen cell and its placement (the task's start) in ``sol``."""
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
    return chosen, elements


def schedule_from_solution(pp: PlanProblem, sol: Any, base: Baseline | None = None) -> Schedule:
    """The :class:`Schedule` of a ``solvers.Solution`` of ``pp``.

    Each element gets its own chosen cell (duration, s·T + d, κ, ω) and its task's start:
    the members of a group co-start. The schedule's energy is the solution's (tasks, a
    group priced as ``par`` of its members, + idle over the makespan + transitions), which
    is the calculus' ``compose_schedule`` of the placed cells.
    """
    chosen, elements = _placed_cells(pp, sol)
    lower = _finite(sol.lower_bound)
    return Schedule(
        elements=tuple(elements),
        devices=tuple(pp.plan.devices),  # a schedule's device is its plan's (PlanDevice)
        makespan=float(sol.makespan),
        energy=float(sol.energy),
        energy_std=schedule_energy_std(pp, chosen, elements, float(sol.var_energy)),
        device_model=pp.plan.device_model or library_device_model(chosen.values()),
        deadline=sol.deadline,
        lower_bound=lower,
        gap=_finite(sol.gap),
        solver={
            "name": sol.solver,
            "method": sol.method,
            "status": sol.status,
            "wall_time_s": sol.wall_time_s,
            "stop_reason": getattr(sol, "stop_reason", ""),
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


def schedule_energy_std(
    pp: PlanProblem,
    chosen: Mapping[str, Signature],
    elements: Sequence[ScheduledElement],
    var_sum_j2: float,
) -> float:
    """σ of one run's energy, in J, under the uncertainty model every prediction uses.

    The placed cells are composed as ``eopt compose`` composes them
    (:func:`eopt.calculus.schedule.compose_schedule`): idle gaps and tails inherit the
    elements' time noise, so the makespan's spread is priced at the idle draw, which a
    plain sum of the elements' variances (``var_sum_j2``, J²) leaves out. Elements that
    co-run on one device at different static powers cannot be composed; the sum is the
    answer there.
    """
    from eopt.calculus.operators import CompositionError
    from eopt.calculus.schedule import Placement, compose_schedule

    if var_sum_j2 == 0 and all(
        chosen[e.name].var_time == 0 and chosen[e.name].var_energy == 0 for e in elements
    ):
        # No spread recorded anywhere: the composition's σ is 0 too, and composing
        # 8 192 placements only to find that costs most of a second.
        return 0.0
    placements = [Placement(chosen[e.name].on(e.device), e.device, e.start) for e in elements]
    if not placements:
        return 0.0
    try:
        composed = compose_schedule(placements, idle_power=pp.plan.idle_power())
    except (CompositionError, ValueError):
        return math.sqrt(max(0.0, var_sum_j2))
    return float(composed.std_energy)


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
            energy_std=schedule_energy_std(pp, *_placed_cells(pp, s), float(s.var_energy)),
        )
        for s in sols
    ]
    return sorted(points, key=lambda p: p.makespan), pp
