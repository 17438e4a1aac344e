"""Plan files (``eopt.plan/1``, YAML or JSON): a DAG of elements on devices.

A plan names its devices (with their idle power s̄), its elements (name, device, the
element type looked up in signature libraries, dependencies), optional same-device
parallel groups, an optional deadline, and the signature libraries it uses::

    schema: eopt.plan/1
    name: gpt3-1f1b
    libraries: [gpt3.signatures.jsonl]     # relative to the plan file
    deadline: 3.0                          # s, optional
    device_model: A40                      # the GPU its signatures came from, optional
    devices:
      - {name: stage0, idle_power_w: 83.64, gpu: 0}
      - {name: stage1, idle_power_w: 83.64, gpu: 1,
         transition: {time_s: 0.0001, energy_j: 0.02}}   # optional clock-change cost
    elements:
      - {name: "F[s0,m0]", device: stage0, type: stage0.forward}
      - {name: "F[s1,m0]", device: stage1, type: stage1.forward, after: ["F[s0,m0]"]}
      - {name: "AR[s1,m0]", device: stage1, type: stage1.allreduce, after: ["F[s0,m0]"]}
    groups:                                # same-device elements that co-run
      - ["F[s1,m0]", "AR[s1,m0]"]

How a plan runs (and is priced):

* **Groups** are same-device *parallel* groups: their elements co-start on their device,
  run side by side (a compute kernel and an all-reduce overlapping) and share one
  device-wide setting (clock, power limit). A group is priced by the calculus as one
  element, ``par`` (⊕) of its members' cells: static power drawn once over the longest
  member, dynamic energies added, E = s·max T_i + Σ d_i. A group waits for every
  dependency of any member, and whatever depends on a member waits for the whole group.
  No member may depend on another member, directly or through other elements, and two
  groups may not wait for each other (they would have to start before each other).
* **Everything else on a device runs one at a time.** Taking a group as one unit, each
  device runs its units in a topological order of the dependencies, ties broken by the
  order of the file (a group sits at its first member's place). The solver adds the
  implied edges between consecutive units of a device, so two elements of one device
  never overlap unless they share a group — they are priced as sequential, so they
  must run so. To overlap two elements, group them; to run them in another order,
  reorder the file or add an ``after``.

Every validation error names the file and the place (``plan.yaml: elements[3].after:
unknown element 'F9'``) and, for a cycle, the elements on it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import yaml

from eopt.model.fileformats import (
    SAFE_DUMPER,
    FileFormatError,
    Where,
    atomic_write_text,
    check_finite,
    dumps_json,
    guard,
    integer,
    mapping,
    no_unknown,
    number,
    parse_json,
    parse_yaml,
    read_text,
    refuse_other_kind,
    required,
    sequence,
    string,
)

__all__ = [
    "MAX_IDLE_POWER_W",
    "SCHEMA",
    "Plan",
    "PlanDevice",
    "PlanElement",
    "PlanError",
    "read_plan",
    "write_plan",
]

SCHEMA = "eopt.plan/1"


class PlanError(FileFormatError):
    """A plan that cannot be read or is inconsistent; names the file and the place."""


#: No GPU idles above this; a larger idle power is a unit slip (mW as W), in W.
MAX_IDLE_POWER_W = 5000.0


def idle_power(value: Any, at: Where) -> float:
    """A device's idle draw s̄: a finite number of watts in [0, :data:`MAX_IDLE_POWER_W`]."""
    return number(value, at, unit="W", min=0, max=MAX_IDLE_POWER_W)


def read_gpu(value: Any, at: Where) -> int | str | None:
    """A device's ``gpu``: an integer ≥ 0 (a CUDA ordinal), a GPU name, or None.

    Names (``GPU-…`` UUIDs, PCI bus ids, ``cuda:N``, ``nvml:N``) are kept as written and
    resolved where the GPUs are (``eopt apply``), against the process's visible devices.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return string(value.strip(), at, what="a GPU (CUDA ordinal, GPU-… UUID or PCI bus id)")
    return integer(value, at, min=0)


@dataclass(frozen=True)
class PlanDevice:
    """A device of a plan, and of the schedules solved from it.

    One class for both: a schedule carries its plan's devices as they are
    (``eopt.model.schedule.DeviceInfo`` is this class). The two files lay a device out
    differently — a plan nests ``transition: {time_s, energy_j}``, a schedule writes
    ``transition_time_s``/``transition_energy_j`` flat — but read into this one value.

    Attributes:
        name: The plan's name for the device (e.g. ``stage0``).
        idle_power_w: s̄, its draw while it waits (idle/blocked), in W.
        gpu: The GPU it runs on, as the user names GPUs: a CUDA ordinal as the running
            process sees it (``0``; ``CUDA_VISIBLE_DEVICES`` applies), a UUID (``GPU-…``),
            a PCI bus id, or ``nvml:N``; None when unknown (then its position).
        transition_time_s: Time paid each time its device-wide setting changes, in s.
        transition_energy_j: Energy paid each time its device-wide setting changes, in J.
    """

    name: str
    idle_power_w: float
    gpu: int | str | None = None
    transition_time_s: float = 0.0
    transition_energy_j: float = 0.0

    @property
    def has_transition(self) -> bool:
        """Whether changing the device-wide setting costs anything."""
        return self.transition_time_s > 0 or self.transition_energy_j > 0


@dataclass(frozen=True)
class PlanElement:
    """An element of a plan.

    Attributes:
        name: Unique name (e.g. ``F[s0,m3]``).
        device: The device it runs on.
        type: The element type: the signature name looked up in the libraries.
        after: Names of the elements that must finish before it starts.
    """

    name: str
    device: str
    type: str
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """A plan: elements on devices with precedence, ready to be solved.

    Attributes:
        devices: The devices.
        elements: The elements, in the file's order.
        groups: Same-device elements that run in parallel and share one device-wide
            setting.
        deadline: Makespan bound in s, or ``None``.
        libraries: Signature library paths as written in the file.
        name: A name for reports.
        source: The file the plan was read from (libraries resolve relative to it).
        meta: Free-form information (generator, parameters …).
        device_model: The GPU model its signatures were measured on: a simulator profile
            name (``eopt/sim/data`` without ``.yaml``, e.g. ``"A40"``); None: not recorded.
    """

    devices: tuple[PlanDevice, ...]
    elements: tuple[PlanElement, ...]
    groups: tuple[tuple[str, ...], ...] = ()
    deadline: float | None = None
    libraries: tuple[str, ...] = ()
    name: str | None = None
    source: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    device_model: str | None = None

    def __post_init__(self) -> None:
        _validate(self, self.source or "<plan>")

    # Queries ------------------------------------------------------------------------------
    def device(self, name: str) -> PlanDevice:
        """The device called ``name``."""
        for d in self.devices:
            if d.name == name:
                return d
        raise KeyError(f"plan has no device {name!r}")

    def element(self, name: str) -> PlanElement:
        """The element called ``name``."""
        for e in self.elements:
            if e.name == name:
                return e
        raise KeyError(f"plan has no element {name!r}")

    def types(self) -> list[str]:
        """Distinct element types, in first-use order."""
        return list(dict.fromkeys(e.type for e in self.elements))

    def edges(self) -> list[tuple[str, str]]:
        """Precedence pairs (before, after)."""
        return [(dep, e.name) for e in self.elements for dep in e.after]

    def library_paths(self) -> list[Path]:
        """Library paths, relative ones resolved against the plan file's folder."""
        base = Path(self.source).parent if self.source else Path.cwd()
        return [p if p.is_absolute() else base / p for p in map(Path, self.libraries)]

    def idle_power(self) -> dict[str, float]:
        """s̄ per device, in W."""
        return {d.name: d.idle_power_w for d in self.devices}

    def units(self) -> list[tuple[str, ...]]:
        """The scheduling units in file order: each group as one unit (members in the
        group's order, at its first member's place in the file), every other element as a
        unit of its own."""
        return _units(self)

    def device_order(self) -> dict[str, list[tuple[str, ...]]]:
        """The order in which each device runs its units (module docstring): a topological
        order of the dependencies between units, ties broken by file order.

        Returns:
            Device name → its units in execution order (every device, possibly empty).
        """
        units = _units(self)
        rank = {u: i for i, u in enumerate(units)}
        graph = _unit_graph(self, units)
        device_of = {e.name: e.device for e in self.elements}
        out: dict[str, list[tuple[str, ...]]] = {d.name: [] for d in self.devices}
        # One global order, projected onto each device: per-device orders chosen apart
        # could contradict each other through cross-device edges and form a cycle.
        for unit in nx.lexicographical_topological_sort(graph, key=rank.__getitem__):
            out[device_of[unit[0]]].append(unit)
        return out

    # Serialisation ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Mapping in the ``eopt.plan/1`` layout."""
        devices = []
        for d in self.devices:
            entry: dict[str, Any] = {"name": d.name, "idle_power_w": d.idle_power_w}
            if d.gpu is not None:
                entry["gpu"] = d.gpu
            if d.has_transition:
                entry["transition"] = {
                    "time_s": d.transition_time_s,
                    "energy_j": d.transition_energy_j,
                }
            devices.append(entry)
        elements = []
        for e in self.elements:
            item: dict[str, Any] = {"name": e.name, "device": e.device, "type": e.type}
            if e.after:
                item["after"] = list(e.after)
            elements.append(item)
        out: dict[str, Any] = {"schema": SCHEMA}
        if self.name:
            out["name"] = self.name
        if self.libraries:
            out["libraries"] = list(self.libraries)
        if self.deadline is not None:
            out["deadline"] = self.deadline
        if self.device_model is not None:
            out["device_model"] = self.device_model
        out["devices"] = devices
        out["elements"] = elements
        if self.groups:
            out["groups"] = [list(g) for g in self.groups]
        if self.meta:
            out["meta"] = dict(self.meta)
        return out

    @classmethod
    def from_dict(cls, data: Any, source: str = "<plan>") -> Plan:
        """Build and validate a plan from a parsed file.

        Raises:
            PlanError: naming ``source`` and the offending place.
        """
        at = Where(source, error=PlanError)
        data = mapping(data, at, what="a mapping at the top level (devices, elements)")
        known = {
            "schema", "name", "libraries", "deadline", "device_model", "devices", "elements",
            "groups", "meta",
        }  # fmt: skip
        no_unknown(data, known, at)
        schema = data.get("schema", SCHEMA)
        if schema != SCHEMA:
            (at / "schema").fail(f"expected {SCHEMA!r}, got {schema!r}")
        devices = tuple(
            _device(d, at / "devices" / i) for i, d in enumerate(_seq(data, "devices", at))
        )
        elements = tuple(
            _element(e, at / "elements" / i) for i, e in enumerate(_seq(data, "elements", at))
        )
        groups = []
        raw_groups = data.get("groups")
        for i, g in enumerate(sequence([] if raw_groups is None else raw_groups, at / "groups")):
            if not isinstance(g, list) or not all(isinstance(x, str) for x in g):
                (at / "groups" / i).fail("expected a list of element names")
            groups.append(tuple(g))
        libraries = data.get("libraries") or []
        if isinstance(libraries, str):
            libraries = [libraries]
        if not isinstance(libraries, list) or not all(isinstance(x, str) for x in libraries):
            (at / "libraries").fail("expected a list of file paths")
        deadline = data.get("deadline")
        if deadline is not None:
            deadline = number(deadline, at / "deadline", unit="s", positive=True)
        name = data.get("name")
        if name is not None:
            name = string(name, at / "name", what="a plan name")
        meta = data.get("meta")
        meta = {} if meta is None else mapping(meta, at / "meta", what="a mapping")
        device_model = data.get("device_model")
        if device_model is not None:
            device_model = string(device_model, at / "device_model", what="a GPU model name")
        return cls(
            devices=devices,
            elements=elements,
            groups=tuple(groups),
            deadline=deadline,
            libraries=tuple(libraries),
            name=name,
            source=source if source != "<plan>" else None,
            meta=dict(meta),
            device_model=device_model,
        )


# Field parsers ----------------------------------------------------------------------------
def _seq(data: Mapping[str, Any], key: str, at: Where) -> Sequence[Any]:
    value = required(data, key, at)
    if isinstance(value, list) and not value:
        at.fail(f"field {key!r} must be a non-empty list")
    return sequence(value, at / key)


def _device(data: Any, at: Where) -> PlanDevice:
    data = mapping(data, at, what="a mapping with name and idle_power_w")
    no_unknown(data, {"name", "idle_power_w", "gpu", "transition"}, at)
    name = string(required(data, "name", at), at / "name")
    idle = required(data, "idle_power_w", at, hint="the device's draw while it waits, W")
    idle_w = idle_power(idle, at / "idle_power_w")
    gpu = read_gpu(data.get("gpu"), at / "gpu")
    t_s = e_j = 0.0
    transition = data.get("transition")
    if transition is not None:
        where = at / "transition"
        transition = mapping(transition, where, what="a mapping with time_s and energy_j")
        no_unknown(transition, {"time_s", "energy_j"}, where)
        t_s = number(transition.get("time_s", 0.0), where / "time_s", unit="s", min=0)
        e_j = number(transition.get("energy_j", 0.0), where / "energy_j", unit="J", min=0)
    return PlanDevice(name, idle_w, gpu, t_s, e_j)


def _element(data: Any, at: Where) -> PlanElement:
    data = mapping(data, at, what="a mapping with name, device, type")
    no_unknown(data, {"name", "device", "type", "after"}, at)
    after = data.get("after") or []
    if isinstance(after, str):
        after = [after]
    if not isinstance(after, list) or not all(
        isinstance(a, (str, int)) and not isinstance(a, bool) for a in after
    ):
        (at / "after").fail("expected a list of element names")
    return PlanElement(
        name=string(required(data, "name", at), at / "name"),
        device=string(required(data, "device", at), at / "device"),
        type=string(required(data, "type", at), at / "type"),
        after=tuple(str(a) for a in after),
    )


# Consistency --------------------------------------------------------------------------------
def _validate(plan: Plan, source: str) -> None:
    devices: dict[str, int] = {}
    for i, d in enumerate(plan.devices):
        if d.name in devices:
            raise PlanError(
                f"{source}: devices[{i}].name: device {d.name!r} is already defined "
                f"at devices[{devices[d.name]}]"
            )
        devices[d.name] = i
    index: dict[str, int] = {}
    for i, e in enumerate(plan.elements):
        if e.name in index:
            raise PlanError(
                f"{source}: elements[{i}].name: element {e.name!r} is already defined at "
                f"elements[{index[e.name]}]; element names must be unique"
            )
        index[e.name] = i
        if e.device not in devices:
            raise PlanError(
                f"{source}: elements[{i}].device: unknown device {e.device!r} "
                f"(devices: {', '.join(devices)})"
            )
    for i, e in enumerate(plan.elements):
        for dep in e.after:
            if dep not in index:
                raise PlanError(f"{source}: elements[{i}].after: unknown element {dep!r}")
            if dep == e.name:
                raise PlanError(f"{source}: elements[{i}].after: {e.name!r} depends on itself")
    graph = nx.DiGraph()
    graph.add_nodes_from(index)
    graph.add_edges_from(plan.edges())
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        cycle = []
    if cycle:
        names = [u for u, _ in cycle] + [cycle[0][0]]
        raise PlanError(
            f"{source}: the elements' dependencies form a cycle: {' → '.join(names)}; "
            "remove one of these 'after' entries"
        )
    grouped: dict[str, int] = {}
    for gi, group in enumerate(plan.groups):
        if len(group) < 2:
            raise PlanError(f"{source}: groups[{gi}]: a group needs at least two elements")
        for name in group:
            if name not in index:
                raise PlanError(f"{source}: groups[{gi}]: unknown element {name!r}")
            if name in grouped:
                raise PlanError(
                    f"{source}: groups[{gi}]: element {name!r} is already in "
                    f"groups[{grouped[name]}]; merge the two groups"
                )
            grouped[name] = gi
        group_devices = {plan.elements[index[n]].device for n in group}
        if len(group_devices) > 1:
            raise PlanError(
                f"{source}: groups[{gi}]: elements on different devices {sorted(group_devices)}; "
                "a group shares one device-wide setting, so all its elements need one device"
            )
    if plan.groups:
        _validate_group_order(plan, source)


def _units(plan: Plan) -> list[tuple[str, ...]]:
    group_of = {name: group for group in plan.groups for name in group}
    units = [group_of.get(e.name, (e.name,)) for e in plan.elements]
    return list(dict.fromkeys(units))


def _unit_graph(plan: Plan, units: Sequence[tuple[str, ...]]) -> nx.DiGraph:
    """Dependencies between units (edges inside one group dropped: validation refuses
    them)."""
    unit_of = {name: unit for unit in units for name in unit}
    graph = nx.DiGraph()
    graph.add_nodes_from(units)
    graph.add_edges_from(
        (unit_of[a], unit_of[b]) for a, b in plan.edges() if unit_of[a] != unit_of[b]
    )
    return graph


def _validate_group_order(plan: Plan, source: str) -> None:
    """A group co-starts: no member may wait for another, nor two groups for each other."""
    group_index = {group: gi for gi, group in enumerate(plan.groups)}
    unit_of = {name: group for group in plan.groups for name in group}
    for i, e in enumerate(plan.elements):
        for dep in e.after:
            if e.name in unit_of and unit_of.get(dep) == unit_of[e.name]:
                raise PlanError(
                    f"{source}: elements[{i}].after: {e.name!r} depends on {dep!r}, but both "
                    f"are in groups[{group_index[unit_of[dep]]}] and a group's elements "
                    "co-start; drop the dependency or take one of them out of the group"
                )
    units = _units(plan)
    try:
        cycle = nx.find_cycle(_unit_graph(plan, units))
    except nx.NetworkXNoCycle:
        return

    def label(unit: tuple[str, ...]) -> str:
        if unit in group_index:
            return f"groups[{group_index[unit]}] [{', '.join(unit)}]"
        return unit[0]

    names = [label(u) for u, _ in cycle] + [label(cycle[0][0])]
    raise PlanError(
        f"{source}: a group waits for itself: {' → '.join(names)}; a group's elements "
        "co-start, so no member may depend on another member through other elements, and "
        "two groups may not wait for each other; drop one of these 'after' entries or "
        "split the group"
    )


# Files ------------------------------------------------------------------------------------
def read_plan(path: str | os.PathLike[str]) -> Plan:
    """Read a plan file (``.yaml``/``.yml`` or ``.json``).

    Raises:
        PlanError: naming the file and the place (line for syntax errors, the field's
            path otherwise); a file of another eopt kind is named for what it is.
    """
    p = Path(path)
    at = Where(str(p), error=PlanError)
    try:
        with guard(at, what="a plan"):
            text = read_text(p, at, what="a plan")
            data = parse_json(text, at) if p.suffix.lower() == ".json" else parse_yaml(text, at)
            return Plan.from_dict(data, source=str(p))
    except PlanError:
        refuse_other_kind(p, ("plan",), at)
        raise


def write_plan(path: str | os.PathLike[str], plan: Plan) -> None:
    """Write ``plan`` as YAML (``.yaml``/``.yml``) or JSON (anything else), atomically.

    Raises:
        ValueError: when a number of the plan is not finite (no eopt file carries one).
    """
    p = Path(path)
    data = plan.to_dict()
    if p.suffix.lower() in (".yaml", ".yml"):
        check_finite(data, Where(f"cannot write {p}", error=ValueError))
        text = _to_yaml(data)
    else:
        text = dumps_json(data, str(p), indent=2) + "\n"
    atomic_write_text(p, text)


def _to_yaml(data: Mapping[str, Any]) -> str:
    """YAML with one line per device, element and group (readable and diff-friendly)."""
    lines = []
    for key, value in data.items():
        if key in ("devices", "elements", "groups") and isinstance(value, list):
            lines.append(f"{key}:")
            lines.extend(f"  - {_flow(item)}" for item in value)
        else:
            text = yaml.dump({key: value}, Dumper=SAFE_DUMPER, sort_keys=False, width=1000)
            lines.append(text.rstrip("\n"))
    return "\n".join(lines) + "\n"


def _flow(item: Any) -> str:
    return yaml.dump(
        item, Dumper=SAFE_DUMPER, default_flow_style=True, sort_keys=False, width=10**6
    ).strip()
