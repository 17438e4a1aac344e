"""The DAG time–energy problem: tasks with modes on devices, precedence, idle power.

A `Problem` is a plain value. `Problem.validate` checks it and raises `ProblemError`
(or `CycleError`) naming the offending task, edge, group or device.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from solvers.exceptions import CycleError, ProblemError

HOLD_MODES = ("makespan", "deadline")


@dataclass(frozen=True)
class Mode:
    """One way to run a task: an (implementation, operating point) choice.

    Attributes:
        duration: execution time, s (>= 0).
        energy: total energy of the task in this mode, J (>= 0), static part included.
        var_duration: variance of the duration of a single run, s².
        var_energy: variance of the energy of a single run, J².
        label: opaque value the caller uses to map the mode back (e.g. (impl, op point)).
        setting: device-wide setting key (e.g. the SM clock); tasks in one group must
            share it, and changing it between consecutive tasks on a device with a
            transition cost pays that cost.
    """

    duration: float
    energy: float
    var_duration: float = 0.0
    var_energy: float = 0.0
    label: Any = None
    setting: Hashable | None = None


@dataclass(frozen=True)
class Task:
    """A unit of work placed on one device, with its alternative modes.

    Attributes:
        name: unique task name.
        device: name of the device that runs the task (a key of `Problem.idle_power`).
        modes: the alternatives; at least one.
    """

    name: str
    device: str
    modes: tuple[Mode, ...]


@dataclass(frozen=True)
class Problem:
    """Minimum-energy mode assignment of a task DAG under a makespan bound.

    Energy of an assignment (devices are held until the horizon H):

        E = Σ_i E_i(m_i) + Σ_dev s̄_dev · (H − busy_dev)

    where H is the makespan (``hold="makespan"``) or the deadline
    (``hold="deadline"``; the makespan when no deadline is given), busy_dev the summed
    task durations (and transition times) on the device, and the sum over devices runs
    over every key of `idle_power` (a listed device without tasks idles throughout).
    Same-device tasks may overlap; busy_dev then exceeds their span and the idle term
    takes back the static power counted twice (⊕ draws it once).

    Attributes:
        tasks: the tasks.
        edges: precedence pairs (before, after) by task name.
        idle_power: s̄ per device, W; every task's device must be present.
        groups: tuples of same-device task names that must all run at one `setting`.
        transition: per device, (time s, energy J) paid each time the setting changes
            between consecutive tasks on that device. The device's tasks must be totally
            ordered by precedence.
        hold: ``"makespan"`` or ``"deadline"`` (devices held, paying s̄, to the deadline).
    """

    tasks: tuple[Task, ...]
    edges: tuple[tuple[str, str], ...]
    idle_power: Mapping[str, float]
    groups: tuple[tuple[str, ...], ...] = ()
    transition: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    hold: str = "makespan"

    def validate(self) -> None:
        """Check the problem; raise on the first defect.

        Raises:
            CycleError: the precedence edges contain a cycle (named).
            ProblemError: anything else malformed, naming the task, edge, group or device.
        """
        _validate(self)

    def graph(self) -> nx.DiGraph:
        """The precedence DAG over task names (validation not implied)."""
        g = nx.DiGraph()
        g.add_nodes_from(t.name for t in self.tasks)
        g.add_edges_from(self.edges)
        return g


def _check_number(value: object, what: str, *, allow_zero: bool = True) -> float:
    """Return `value` as a float, or raise ProblemError if it is not finite and >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProblemError(f"{what} must be a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x) or x < 0 or (not allow_zero and x == 0):
        raise ProblemError(f"{what} must be a finite number >= 0, got {value!r}")
    return x


def _validate(p: Problem) -> None:
    if p.hold not in HOLD_MODES:
        raise ProblemError(f"hold must be one of {HOLD_MODES}, got {p.hold!r}")
    for dev, power in p.idle_power.items():
        _check_number(power, f"idle power of device {dev!r} (W)")
    if not p.tasks:
        raise ProblemError("the problem has no tasks; add at least one task")
    seen: dict[str, Task] = {}
    # Tasks of a repeated DAG share one modes tuple (immutable): each is checked once.
    checked: set[int] = set()
    for t in p.tasks:
        if not isinstance(t.name, str) or not t.name:
            raise ProblemError(f"task name must be a non-empty string, got {t.name!r}")
        if t.name in seen:
            raise ProblemError(f"task {t.name!r} appears twice; task names must be unique")
        seen[t.name] = t
        if t.device not in p.idle_power:
            raise ProblemError(
                f"task {t.name!r}: device {t.device!r} has no idle power; "
                f"add it to idle_power (known devices: {sorted(p.idle_power)})"
            )
        if not t.modes:
            raise ProblemError(f"task {t.name!r} has no modes; give it at least one")
        if id(t.modes) in checked:
            continue
        checked.add(id(t.modes))
        for k, m in enumerate(t.modes):
            where = f"task {t.name!r} mode {k}"
            _check_number(m.duration, f"{where}: duration (s)")
            _check_number(m.energy, f"{where}: energy (J)")
            _check_number(m.var_duration, f"{where}: var_duration (s²)")
            _check_number(m.var_energy, f"{where}: var_energy (J²)")
    for e in p.edges:
        if len(e) != 2:
            raise ProblemError(f"edge {e!r} must be a pair (before, after)")
        a, b = e
        for end in (a, b):
            if end not in seen:
                raise ProblemError(f"edge ({a!r}, {b!r}) names unknown task {end!r}")
        if a == b:
            raise ProblemError(f"edge ({a!r}, {b!r}) is a self-loop; remove it")
    g = p.graph()
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        names = [u for u, _ in cycle] + [cycle[0][0]]
        raise CycleError(names)
    grouped: dict[str, int] = {}
    for gi, group in enumerate(p.groups):
        if not group:
            raise ProblemError(f"group {gi} is empty; remove it")
        devices = set()
        common: set[Hashable] | None = None
        for name in group:
            if name not in seen:
                raise ProblemError(f"group {gi} {tuple(group)!r} names unknown task {name!r}")
            if name in grouped:
                raise ProblemError(
                    f"task {name!r} is in groups {grouped[name]} and {gi}; "
                    "a task may belong to one group only (merge the groups)"
                )
            grouped[name] = gi
            task = seen[name]
            devices.add(task.device)
            settings = set()
            for k, m in enumerate(task.modes):
                if m.setting is None:
                    raise ProblemError(
                        f"group {gi}: task {name!r} mode {k} has no setting; "
                        "every mode of a grouped task needs a setting"
                    )
                settings.add(m.setting)
            common = settings if common is None else common & settings
        if len(devices) > 1:
            raise ProblemError(
                f"group {gi} {tuple(group)!r} spans devices {sorted(devices)}; "
                "a group's tasks must share one device"
            )
        if not common:
            raise ProblemError(
                f"group {gi} {tuple(group)!r}: its tasks share no setting; "
                "give them at least one common setting"
            )
    for dev, cost in p.transition.items():
        if dev not in p.idle_power:
            raise ProblemError(f"transition cost for unknown device {dev!r}; add it to idle_power")
        if len(cost) != 2:
            raise ProblemError(f"transition cost of device {dev!r} must be (time s, energy J)")
        _check_number(cost[0], f"transition time of device {dev!r} (s)")
        _check_number(cost[1], f"transition energy of device {dev!r} (J)")
        device_chain(p, g, dev)


def device_chain(p: Problem, g: nx.DiGraph, device: str) -> list[str]:
    """The tasks of `device` in precedence order, checked to be totally ordered.

    Args:
        p: the problem.
        g: its precedence DAG (`Problem.graph`).
        device: a device name.

    Returns:
        Task names on the device, each one a predecessor (transitively) of the next.

    Raises:
        ProblemError: two consecutive tasks are not ordered by precedence.
    """
    on_device = {t.name for t in p.tasks if t.device == device}
    order = [v for v in nx.topological_sort(g) if v in on_device]
    for a, b in itertools.pairwise(order):
        if not g.has_edge(a, b) and not nx.has_path(g, a, b):
            raise ProblemError(
                f"device {device!r} has a transition cost but its tasks {a!r} and {b!r} "
                "are not ordered by precedence; add an edge between them or drop the "
                "transition cost"
            )
    return order
