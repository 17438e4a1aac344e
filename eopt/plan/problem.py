"""From a plan and its signature libraries to a `solvers.Problem`.

Each element becomes a task on its device whose modes are the measured (κ, ω) cells of
its type: duration T, energy E = s·T + d, their variances, ``label`` = the signature and
``setting`` = the cell's device-wide operating point (``op_point.device_key``).

Cells that can never help are pruned before solving, by point dominance in
(T, E − s̄·T) with s̄ the device's idle power. Why not in (T, E): the plan's energy is
Σ_i E_i + Σ_dev s̄·(H − busy_dev) = Σ_i (E_i − s̄·T_i) + Σ_dev s̄·H, so a task enters
through its duration (via H) and its energy *above idling* over its own run. A slower cell
with more total energy can still be the cheaper choice in a task's slack when it draws
less than the idle device would (paper Property 6.2, condition (iii)); dominance in
(T, E − s̄·T) keeps exactly those. When the device pays for setting changes, or the task
is in a group, pruning runs within each setting only (a setting can matter on its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eopt.calculus.library import Library
from eopt.calculus.signature import Signature
from eopt.frontier import pareto_mask
from eopt.plan.planfile import Plan, PlanError

__all__ = ["PlanProblem", "build_problem", "load_plan_library", "useful_cells"]


@dataclass(frozen=True)
class PlanProblem:
    """A plan turned into a solver problem, with the way back.

    Attributes:
        plan: The plan.
        problem: The ``solvers.Problem``.
        cells: Element name → the signature behind each mode, in mode order.
        available: Element type → how many cells the libraries held for it.
    """

    plan: Plan
    problem: object  # solvers.Problem (imported lazily: solvers is heavy to import)
    cells: dict[str, tuple[Signature, ...]] = field(default_factory=dict)
    available: dict[str, int] = field(default_factory=dict)

    def mode_signature(self, element: str, mode: int) -> Signature:
        """The signature of mode ``mode`` of ``element``."""
        return self.cells[element][mode]


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


def useful_cells(
    cells: Sequence[Signature], idle_power_w: float, by_setting: bool = False
) -> list[Signature]:
    """The cells a minimum-energy plan may use (see the module docstring).

    Args:
        cells: All measured cells of one element type.
        idle_power_w: s̄ of the device the element runs on, in W.
        by_setting: Prune only among cells of the same device-wide setting.

    Returns:
        The surviving cells, sorted by time ascending.
    """
    groups: dict[object, list[Signature]] = {}
    for sig in cells:
        key = sig.op_point.device_key if by_setting else None
        groups.setdefault(key, []).append(sig)
    kept: list[Signature] = []
    for group in groups.values():
        t = np.array([s.time for s in group])
        above_idle = np.array([s.energy for s in group]) - idle_power_w * t
        kept.extend(group[i] for i in np.flatnonzero(pareto_mask(t, above_idle)))
    return sorted(kept, key=lambda s: (s.time, s.energy))


def build_problem(plan: Plan, library: Library | None = None, prune: bool = True) -> PlanProblem:
    """The ``solvers.Problem`` of a plan.

    Args:
        plan: The plan.
        library: Signatures to use; default: the plan's own libraries.
        prune: Drop cells that no minimum-energy plan uses (module docstring).

    Raises:
        PlanError: naming the element whose type has no signature.
    """
    from solvers import Mode, Problem, Task

    lib = library if library is not None else load_plan_library(plan)
    where = plan.source or "<plan>"
    by_type: dict[str, list[Signature]] = {}
    for sig in lib:
        by_type.setdefault(sig.name, []).append(sig)
    grouped = {name for group in plan.groups for name in group}
    tasks = []
    cells: dict[str, tuple[Signature, ...]] = {}
    available: dict[str, int] = {}
    pruned_cache: dict[tuple[str, float, bool], list[Signature]] = {}
    for i, elem in enumerate(plan.elements):
        found = by_type.get(elem.type)
        if not found:
            known = ", ".join(sorted(by_type)[:12]) or "none"
            raise PlanError(
                f"{where}: elements[{i}] ({elem.name}): no signature of type {elem.type!r} in "
                f"the libraries (types there: {known})"
            )
        available[elem.type] = len(found)
        device = plan.device(elem.device)
        by_setting = elem.name in grouped or device.has_transition
        key = (elem.type, device.idle_power_w, by_setting)
        if key not in pruned_cache:
            pruned_cache[key] = (
                useful_cells(found, device.idle_power_w, by_setting) if prune else list(found)
            )
        chosen = pruned_cache[key]
        cells[elem.name] = tuple(chosen)
        modes = tuple(
            Mode(
                duration=s.time,
                energy=s.energy,
                var_duration=s.var_time,
                var_energy=s.var_energy,
                label=s,
                setting=s.op_point.device_key,
            )
            for s in chosen
        )
        tasks.append(Task(name=elem.name, device=elem.device, modes=modes))
    transition = {
        d.name: (d.transition_time_s, d.transition_energy_j)
        for d in plan.devices
        if d.has_transition
    }
    problem = Problem(
        tasks=tuple(tasks),
        edges=tuple(plan.edges()),
        idle_power=plan.idle_power(),
        groups=tuple(plan.groups),
        transition=transition,
    )
    return PlanProblem(plan=plan, problem=problem, cells=cells, available=available)
