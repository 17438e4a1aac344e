"""From a plan and its signature libraries to a `solvers.Problem`.

Tasks. Each element that is in no group becomes a task on its device whose modes are the
measured (κ, ω) cells of its type: duration T, energy E = s·T + d, their variances,
``label`` = the signature and ``setting`` = the cell's device-wide operating point
(``op_point.device_key``). Each same-device parallel group becomes ONE task whose modes
are the group's joint choices at one shared setting, priced by the calculus as ``par`` of
the members' cells: T = max T_i, E = s·max T_i + Σ d_i, σ² per ``par`` (the ``solvers``
accounting of separate tasks would draw the static power once per member). The
composite task carries the dependencies of all its members.

Order on a device. Units (a group or a lone element) on one device run one at a time in
:meth:`~eopt.model.planfile.Plan.device_order`; the edges between consecutive units are
added to the plan's own, so the solver's schedule never overlaps what it prices as
sequential.

Pruning. Cells that can never help are dropped before solving, by point dominance in
(T, E − s̄·T) with s̄ the device's idle power. Why not in (T, E): the plan's energy is
Σ_i E_i + Σ_dev s̄·(H − busy_dev) = Σ_i (E_i − s̄·T_i) + Σ_dev s̄·H, so a task enters
through its duration (via H) and its energy *above idling* over its own run. A slower cell
with more total energy can still be the cheaper choice in a task's slack when it draws
less than the idle device would (paper Property 6.2, condition (iii)); dominance in
(T, E − s̄·T) keeps exactly those. When the device pays for setting changes, pruning runs
within each setting only (a setting can matter on its own).

Inside a group, at one setting (one static power s), a group task costs
(s − s̄)·max T_i + Σ d_i above idle. Replacing one member's cell b by a cell a with
T_a ≤ T_b and d_a + min(0, s − s̄)·T_a ≤ d_b + min(0, s − s̄)·T_b shortens the group or
leaves it as long, and never raises that cost (max is 1-Lipschitz in each T_i); so the
joint choices are built member by member, keeping only partial choices undominated in
(max T, Σ d + min(0, s − s̄)·max T). The group tasks' modes are then pruned like any
task's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eopt.calculus.frontier import pareto_mask
from eopt.calculus.operators import par
from eopt.model.library import Library
from eopt.model.planfile import Plan, PlanError
from eopt.model.signature import Signature

__all__ = [
    "PlanProblem",
    "PlanTask",
    "build_problem",
    "group_choices",
    "load_plan_library",
    "useful_cells",
]

# Static powers that par accepts as one (the calculus' own tolerance).
_STATIC_REL_TOL = 1e-9


@dataclass(frozen=True)
class PlanTask:
    """One solver task: a lone element, or a same-device parallel group run as one ⊕.

    Attributes:
        name: The solver task's name (the element's name, or the members joined by ⊕).
        device: The plan device it runs on.
        members: The plan elements it runs (one, or the group's members in group order).
        choices: Per mode, the members' cells (in member order).
        signatures: Per mode, the task's own signature: the cell, or ``par`` of the cells.
        group: Index of the group in ``plan.groups``, or ``None`` for a lone element.
    """

    name: str
    device: str
    members: tuple[str, ...]
    choices: tuple[tuple[Signature, ...], ...]
    signatures: tuple[Signature, ...]
    group: int | None = None

    def member_signature(self, element: str, mode: int) -> Signature:
        """The cell ``element`` runs at when the task runs in mode ``mode``."""
        return self.choices[mode][self.members.index(element)]


@dataclass(frozen=True)
class PlanProblem:
    """A plan turned into a solver problem, with the way back.

    Attributes:
        plan: The plan.
        problem: The ``solvers.Problem``.
        cells: Element name → the cells it may run at. For a lone element, mode ``k`` of
            its task (named like the element) is ``cells[name][k]``; for a group member,
            the distinct cells its group's modes use.
        available: Element type → how many cells the libraries held for it.
        tasks: Solver task name → :class:`PlanTask`.
        task_of: Element name → the name of the solver task that runs it.
    """

    plan: Plan
    problem: object  # solvers.Problem (imported lazily: solvers is heavy to import)
    cells: dict[str, tuple[Signature, ...]] = field(default_factory=dict)
    available: dict[str, int] = field(default_factory=dict)
    tasks: dict[str, PlanTask] = field(default_factory=dict)
    task_of: dict[str, str] = field(default_factory=dict)

    def mode_signature(self, element: str, mode: int) -> Signature:
        """The cell of ``element`` when its task runs in mode ``mode``."""
        return self.tasks[self.task_of[element]].member_signature(element, mode)

    def element_signatures(self, modes: Mapping[str, int]) -> dict[str, Signature]:
        """Every element's cell under a solver assignment (task name → mode index)."""
        return {
            e.name: self.mode_signature(e.name, int(modes[self.task_of[e.name]]))
            for e in self.plan.elements
        }


def load_plan_library(plan: Plan, extra: Sequence[str | Path] = (), own: bool = True) -> Library:
    """The signatures of the plan's libraries (and any ``extra`` library files).

    Args:
        plan: The plan.
        extra: More library files.
        own: Whether to read the plan's own libraries too.

    Raises:
        PlanError: naming the plan file and the library that cannot be read.
    """
    mine = plan.library_paths() if own else []
    paths = [*mine, *map(Path, extra)]
    where = plan.source or "<plan>"
    if not paths:
        raise PlanError(
            f"{where}: the plan names no signature libraries; add 'libraries: [file.jsonl]' "
            "or pass --library"
        )
    sigs: list[Signature] = []
    for i, path in enumerate(paths):
        try:
            sigs.extend(Library.load(path))
        except ValueError as exc:
            place = f"libraries[{i}]" if i < len(mine) else "library"
            raise PlanError(f"{where}: {place}: {exc}") from None
    return Library(sigs)


def _undominated(time_s: Sequence[float], cost: Sequence[float]) -> list[int]:
    """Indices of the points undominated in (time, cost), in input order."""
    return [int(i) for i in np.flatnonzero(pareto_mask(np.asarray(time_s), np.asarray(cost)))]


def useful_cells(
    cells: Sequence[Signature], idle_power_w: float, by_setting: bool = False
) -> list[Signature]:
    """The cells a minimum-energy plan may use (see the module docstring).

    Args:
        cells: All measured cells of one element type (or a group task's composites).
        idle_power_w: s̄ of the device the element runs on, in W.
        by_setting: Prune only among cells of the same device-wide setting.

    Returns:
        The surviving cells, sorted by time ascending.
    """
    settings = [_setting(s) for s in cells]
    return [cells[i] for i in _useful(cells, settings, idle_power_w, by_setting)]


def _useful(
    sigs: Sequence[Signature], settings: Sequence[Hashable], idle_power_w: float, by_setting: bool
) -> list[int]:
    """Indices of :func:`useful_cells`, sorted by (time, energy)."""
    buckets: dict[Hashable, list[int]] = {}
    for i, setting in enumerate(settings):
        buckets.setdefault(setting if by_setting else None, []).append(i)
    kept: list[int] = []
    for members in buckets.values():
        t = [sigs[i].time for i in members]
        above_idle = [sigs[i].energy - idle_power_w * sigs[i].time for i in members]
        kept.extend(members[k] for k in _undominated(t, above_idle))
    return sorted(kept, key=lambda i: (sigs[i].time, sigs[i].energy))


def _setting(sig: Signature) -> Hashable:
    return sig.op_point.device_key


def group_choices(
    member_cells: Sequence[Sequence[Signature]],
    idle_power_w: float,
    prune: bool = True,
    where: str = "group",
) -> list[tuple[Hashable, tuple[Signature, ...], Signature]]:
    """The joint choices of a same-device parallel group, each priced as ``par``.

    Args:
        member_cells: Per member (in group order), the cells of its element type.
        idle_power_w: s̄ of the group's device, in W.
        prune: Keep only partial choices that can be optimal (module docstring); with
            ``False`` every combination at every shared setting.
        where: How error messages name the group.

    Returns:
        ``(setting, member cells, par of them)`` per choice, settings in first-seen order.

    Raises:
        PlanError: the members share no device-wide setting, or at one setting their
            cells differ in static power (co-running elements draw the device's static
            power once, so it must be one number).

    Assumptions:
        Cells at one device-wide setting share the device's static power s.
    """
    by_member: list[dict[Hashable, list[Signature]]] = []
    for cells in member_cells:
        per_setting: dict[Hashable, list[Signature]] = {}
        for sig in cells:
            per_setting.setdefault(_setting(sig), []).append(sig)
        by_member.append(per_setting)
    shared = [s for s in by_member[0] if all(s in m for m in by_member[1:])]
    if not shared:
        seen = "; ".join(
            f"{cells[0].name}: {', '.join(_label(c) for c in _distinct_points(cells))}"
            for cells in member_cells
        )
        raise PlanError(
            f"{where}: its elements share no device-wide setting in the libraries ({seen}); "
            "a group runs at one setting, so measure its elements at a common one"
        )
    out: list[tuple[Hashable, tuple[Signature, ...], Signature]] = []
    for setting in shared:
        columns = [m[setting] for m in by_member]
        static_w = columns[0][0].static_power
        for sig in (s for col in columns for s in col):
            if not math.isclose(sig.static_power, static_w, rel_tol=_STATIC_REL_TOL):
                raise PlanError(
                    f"{where}: at {_label(sig)}, {columns[0][0].name!r} has static power "
                    f"{static_w:g} W but {sig.name!r} ({sig.impl}) has {sig.static_power:g} W; "
                    "co-running elements draw the device's static power once, so their "
                    "cells at one setting need one static power (characterize them in one "
                    "sweep, or edit the libraries)"
                )
        # Below idle a longer group is cheaper; above idle only Σd counts at equal length.
        below_idle = min(0.0, static_w - idle_power_w)
        partial: list[tuple[tuple[Signature, ...], float, float]] = [((), 0.0, 0.0)]
        for column in columns:
            partial = [
                ((*picks, sig), max(t, sig.time), d + sig.dynamic_energy)
                for picks, t, d in partial
                for sig in column
            ]
            if prune:
                keep = _undominated(
                    [t for _, t, _ in partial], [d + below_idle * t for _, t, d in partial]
                )
                partial = [partial[i] for i in keep]
        out.extend((setting, picks, par(picks)) for picks, _, _ in partial)
    return out


def _distinct_points(cells: Sequence[Signature]) -> list[Signature]:
    return list({_setting(c): c for c in cells}.values())


def _label(sig: Signature) -> str:
    return sig.op_point.label() or "the default operating point"


def _group_task_name(group: Sequence[str], taken: set[str]) -> str:
    name = " ⊕ ".join(group)
    k = 1
    while name in taken:  # an element is literally called like the group
        k += 1
        name = f"{' ⊕ '.join(group)} #{k}"
    return name


def build_problem(plan: Plan, library: Library | None = None, prune: bool = True) -> PlanProblem:
    """The ``solvers.Problem`` of a plan.

    Args:
        plan: The plan.
        library: Signatures to use; default: the plan's own libraries.
        prune: Drop cells (and group choices) that no minimum-energy plan uses (module
            docstring).

    Raises:
        PlanError: naming the element whose type has no signature, or the group whose
            elements cannot run at one setting.
    """
    from solvers import Mode, Problem, Task

    lib = library if library is not None else load_plan_library(plan)
    where = plan.source or "<plan>"
    by_type: dict[str, list[Signature]] = {}
    for sig in lib:
        # Modes are context-independent values; characterized ones (a consumer after its
        # producer, a co-run pair) enter through an interaction graph (`solve --graph`).
        if sig.context is None:
            by_type.setdefault(sig.name, []).append(sig)
    available: dict[str, int] = {}
    found: dict[str, list[Signature]] = {}
    for i, elem in enumerate(plan.elements):
        cells = by_type.get(elem.type)
        if not cells:
            known = ", ".join(sorted(by_type)[:12]) or "none"
            raise PlanError(
                f"{where}: elements[{i}] ({elem.name}): no signature of type {elem.type!r} in "
                f"the libraries (types there: {known})"
            )
        available[elem.type] = len(cells)
        found[elem.name] = cells

    group_index = {group: gi for gi, group in enumerate(plan.groups)}
    taken = {e.name for e in plan.elements}
    plan_tasks: dict[str, PlanTask] = {}
    task_of: dict[str, str] = {}
    cache: dict[tuple[object, ...], PlanTask] = {}
    elements = {e.name: e for e in plan.elements}
    devices = {d.name: d for d in plan.devices}
    for unit in plan.units():
        device = devices[elements[unit[0]].device]
        gi = group_index.get(unit)
        # Units of the same types on alike devices share their modes (pipelines repeat).
        key = (tuple(elements[n].type for n in unit), device.idle_power_w, device.has_transition)
        key += (gi is None,)
        if key not in cache:
            by_setting = device.has_transition
            cache[key] = _unit_task(unit, gi, found, device.idle_power_w, by_setting, prune, where)
        template = cache[key]
        name = unit[0] if gi is None else _group_task_name(unit, taken)
        taken.add(name)
        plan_tasks[name] = PlanTask(
            name, device.name, unit, template.choices, template.signatures, gi
        )
        for member in unit:
            task_of[member] = name

    cells: dict[str, tuple[Signature, ...]] = {}
    for task in plan_tasks.values():
        for j, member in enumerate(task.members):
            # Signatures hold dicts (unhashable): distinct by identity, in mode order.
            distinct = {id(choice[j]): choice[j] for choice in task.choices}
            cells[member] = tuple(distinct.values())

    # Tasks from one template share its modes (immutable): a pipeline's thousands of
    # elements then cost one tuple of modes per element type and device, not each.
    modes_of: dict[int, tuple[Mode, ...]] = {}

    def modes(task: PlanTask) -> tuple[Mode, ...]:
        key = id(task.signatures)
        if key not in modes_of:
            modes_of[key] = tuple(
                Mode(
                    duration=sig.time,
                    energy=sig.energy,
                    var_duration=sig.var_time,
                    var_energy=sig.var_energy,
                    label=sig,
                    setting=_setting(choice[0]),
                )
                for choice, sig in zip(task.choices, task.signatures, strict=True)
            )
        return modes_of[key]

    tasks = [
        Task(name=task.name, device=task.device, modes=modes(task)) for task in plan_tasks.values()
    ]
    transition = {
        d.name: (d.transition_time_s, d.transition_energy_j)
        for d in plan.devices
        if d.has_transition
    }
    problem = Problem(
        tasks=tuple(tasks),
        edges=tuple(_task_edges(plan, task_of)),
        idle_power=plan.idle_power(),
        transition=transition,
    )
    return PlanProblem(
        plan=plan,
        problem=problem,
        cells=cells,
        available=available,
        tasks=plan_tasks,
        task_of=task_of,
    )


def _unit_task(
    unit: tuple[str, ...],
    group: int | None,
    found: Mapping[str, Sequence[Signature]],
    idle_power_w: float,
    by_setting: bool,
    prune: bool,
    where: str,
) -> PlanTask:
    """The modes of one unit (names filled in by the caller)."""
    if group is None:
        cells = list(found[unit[0]])
        chosen = useful_cells(cells, idle_power_w, by_setting) if prune else cells
        return PlanTask(unit[0], "", unit, tuple((c,) for c in chosen), tuple(chosen))
    label = f"{where}: groups[{group}] ({', '.join(unit)})"
    options = group_choices([found[n] for n in unit], idle_power_w, prune, label)
    composites = [sig for _, _, sig in options]
    settings = [setting for setting, _, _ in options]
    if prune:
        order = _useful(composites, settings, idle_power_w, by_setting)
    else:
        order = sorted(
            range(len(options)), key=lambda i: (composites[i].time, composites[i].energy)
        )
    return PlanTask(
        " ⊕ ".join(unit),
        "",
        unit,
        tuple(options[i][1] for i in order),
        tuple(composites[i] for i in order),
        group,
    )


def _task_edges(plan: Plan, task_of: Mapping[str, str]) -> list[tuple[str, str]]:
    """The plan's dependencies between tasks, then each device's implied chain."""
    edges = [(task_of[a], task_of[b]) for a, b in plan.edges()]
    for units in plan.device_order().values():
        names = [task_of[u[0]] for u in units]
        edges.extend(itertools.pairwise(names))
    return list(dict.fromkeys(edges))
