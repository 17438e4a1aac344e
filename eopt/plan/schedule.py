"""Schedule files (``eopt.schedule/1``): what `eopt solve` writes and `eopt apply` reads.

A schedule places every element of a plan on its device with a start time, the chosen
implementation κ and operating point ω, and carries the predicted energy with its
interval, the certified lower bound and the optimality gap.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eopt.devices.operating_point import OperatingPoint

__all__ = [
    "SCHEMA",
    "DeviceInfo",
    "Schedule",
    "ScheduleError",
    "ScheduledElement",
    "read_schedule",
    "write_schedule",
]

SCHEMA = "eopt.schedule/1"


class ScheduleError(ValueError):
    """A schedule file that cannot be read; the message names the file and the place."""


@dataclass(frozen=True)
class ScheduledElement:
    """One element placed in time.

    Attributes:
        name: Unique element name in the plan (e.g. ``F[s0,m3]``).
        type: The element type looked up in signature libraries (e.g. ``stage0.forward``).
        device: The plan device it runs on.
        start: Start time, in s from the schedule's origin.
        duration: Predicted duration at the chosen (κ, ω), in s.
        energy: Predicted energy of the element alone (s·T + d), in J.
        impl: The chosen implementation κ.
        op_point: The chosen operating point ω.
        dynamic_energy: Its dynamic part d, in J, when known.
        var_energy: σ_E² of one run, in J².
    """

    name: str
    type: str
    device: str
    start: float
    duration: float
    energy: float
    impl: str = "default"
    op_point: OperatingPoint = field(default_factory=OperatingPoint)
    dynamic_energy: float | None = None
    var_energy: float = 0.0

    @property
    def end(self) -> float:
        """End time, in s."""
        return self.start + self.duration


@dataclass(frozen=True)
class DeviceInfo:
    """A plan device.

    Attributes:
        name: The plan's device name (e.g. ``stage0``).
        idle_power_w: s̄, its draw while idle/blocked, in W.
        gpu: The physical GPU index it maps to, when known.
        transition_time_s: Time paid each time its device-wide setting changes, in s.
        transition_energy_j: Energy paid each time its device-wide setting changes, in J.
    """

    name: str
    idle_power_w: float
    gpu: int | None = None
    transition_time_s: float = 0.0
    transition_energy_j: float = 0.0


@dataclass(frozen=True)
class Schedule:
    """A solved plan: placements plus the prediction and its certificate.

    Attributes:
        elements: Placed elements.
        devices: Plan devices with their idle power.
        makespan: Predicted makespan H, in s.
        energy: Predicted total energy (elements + idle), in J.
        energy_std: σ of the prediction, in J.
        deadline: The makespan bound it was solved for, in s (None: unconstrained).
        lower_bound: Certified lower bound on the optimum, in J.
        gap: (energy − lower_bound) / energy.
        solver: name, method, status, wall_time_s.
        baseline: The all-fastest reference (energy J, makespan s, label).
        plan: Path or name of the plan it was solved from.
        confidence: Confidence of the reported interval.
        meta: Anything else (created, eopt version …).
    """

    elements: tuple[ScheduledElement, ...]
    devices: tuple[DeviceInfo, ...]
    makespan: float
    energy: float
    energy_std: float = 0.0
    deadline: float | None = None
    lower_bound: float | None = None
    gap: float | None = None
    solver: Mapping[str, Any] = field(default_factory=dict)
    baseline: Mapping[str, Any] | None = None
    plan: str | None = None
    confidence: float = 0.95
    meta: Mapping[str, Any] = field(default_factory=dict)

    # Derived ------------------------------------------------------------------------------
    @property
    def interval(self) -> tuple[float, float]:
        """The prediction interval (E − c·σ, E + c·σ) at :attr:`confidence`, in J."""
        from eopt.calculus.uncertainty import c_alpha

        c = c_alpha(self.confidence)
        return (self.energy - c * self.energy_std, self.energy + c * self.energy_std)

    def device(self, name: str) -> DeviceInfo:
        """The device called ``name``."""
        for d in self.devices:
            if d.name == name:
                return d
        raise KeyError(f"schedule has no device {name!r}")

    def elements_on(self, device: str) -> list[ScheduledElement]:
        """Elements on ``device`` ordered by start time."""
        return sorted((e for e in self.elements if e.device == device), key=lambda e: e.start)

    def transitions(self, device: str) -> int:
        """How often the device-wide setting changes between consecutive elements on it."""
        keys = [e.op_point.device_key for e in self.elements_on(device)]
        return sum(1 for a, b in itertools.pairwise(keys) if a != b)

    def clusters(self, device: str) -> list[list[ScheduledElement]]:
        """Elements on ``device`` grouped into runs of overlapping intervals (⊕ clusters)."""
        out: list[list[ScheduledElement]] = []
        end = -math.inf
        for e in self.elements_on(device):
            # Touching intervals (end == start) run one after the other, not together.
            if out and e.start < end - 1e-12 * max(1.0, abs(end)):
                out[-1].append(e)
                end = max(end, e.end)
            else:
                out.append([e])
                end = e.end
        return out

    def busy_time(self, device: str) -> float:
        """Time ``device`` is busy: the union of its element intervals plus its
        setting-change times, in s."""
        info = self.device(device)
        work = sum(max(e.end for e in c) - min(e.start for e in c) for c in self.clusters(device))
        return work + self.transitions(device) * info.transition_time_s

    def idle_energy(self) -> float:
        """Σ_dev s̄·(H − busy), in J (devices are held to the makespan)."""
        return sum(
            d.idle_power_w * max(0.0, self.makespan - self.busy_time(d.name)) for d in self.devices
        )

    def transition_energy(self) -> float:
        """Energy paid for setting changes, Σ_dev changes·ε_dev, in J."""
        return sum(self.transitions(d.name) * d.transition_energy_j for d in self.devices)

    def element_energy(self) -> float:
        """Energy of the elements as they run, in J.

        Elements that overlap on one device share its static power (⊕): a cluster costs
        s·span + Σd. Elements without a known dynamic part count their whole energy.
        """
        total = 0.0
        for d in self.devices:
            for cluster in self.clusters(d.name):
                split = [e for e in cluster if e.dynamic_energy is not None]
                total += sum(e.energy for e in cluster if e.dynamic_energy is None)
                if not split:
                    continue
                if len(split) == 1:
                    total += split[0].energy
                    continue
                longest = max(split, key=lambda e: e.duration)
                static_w = (longest.energy - (longest.dynamic_energy or 0.0)) / longest.duration
                span = max(e.end for e in split) - min(e.start for e in split)
                total += static_w * span + sum(e.dynamic_energy or 0.0 for e in split)
        return total

    def device_settings(self) -> dict[str, list[OperatingPoint]]:
        """Distinct device-wide operating points per device, in order of first use."""
        out: dict[str, list[OperatingPoint]] = {d.name: [] for d in self.devices}
        for e in sorted(self.elements, key=lambda e: e.start):
            point = e.op_point.device_wide()
            bucket = out.setdefault(e.device, [])
            if point not in bucket:
                bucket.append(point)
        return out

    # Serialisation ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping in the ``eopt.schedule/1`` layout."""
        low, high = self.interval
        return {
            "schema": SCHEMA,
            "plan": self.plan,
            "deadline": self.deadline,
            "makespan": self.makespan,
            "energy": {
                "predicted": self.energy,
                "std": self.energy_std,
                "interval": [low, high],
                "confidence": self.confidence,
                "elements": self.element_energy(),
                "idle": self.idle_energy(),
                "transitions": self.transition_energy(),
            },
            "lower_bound": self.lower_bound,
            "gap": self.gap,
            "baseline": dict(self.baseline) if self.baseline is not None else None,
            "solver": dict(self.solver),
            "devices": [
                {"name": d.name, "idle_power_w": d.idle_power_w, "gpu": d.gpu} for d in self.devices
            ],
            "elements": [
                {
                    "name": e.name,
                    "type": e.type,
                    "device": e.device,
                    "start": e.start,
                    "duration": e.duration,
                    "energy": e.energy,
                    "dynamic_energy": e.dynamic_energy,
                    "var_energy": e.var_energy,
                    "impl": e.impl,
                    "op_point": e.op_point.to_dict(),
                }
                for e in self.elements
            ],
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<schedule>") -> Schedule:
        """Inverse of :meth:`to_dict`.

        Raises:
            ScheduleError: naming ``source`` and the offending field.
        """
        if not isinstance(data, Mapping):
            raise ScheduleError(f"{source}: expected a JSON object at the top level")
        if data.get("schema") != SCHEMA:
            raise ScheduleError(
                f"{source}: field 'schema' is {data.get('schema')!r}, expected {SCHEMA!r} "
                "(is this a schedule written by `eopt solve`?)"
            )
        devices = tuple(
            DeviceInfo(
                name=str(_req(d, "name", f"{source}: devices[{i}]")),
                idle_power_w=_num(d, "idle_power_w", f"{source}: devices[{i}]"),
                gpu=_opt_int(d.get("gpu"), f"{source}: devices[{i}].gpu"),
                transition_time_s=_num(d, "transition_time_s", f"{source}: devices[{i}]")
                if "transition_time_s" in d
                else 0.0,
                transition_energy_j=_num(d, "transition_energy_j", f"{source}: devices[{i}]")
                if "transition_energy_j" in d
                else 0.0,
            )
            for i, d in enumerate(_list(data, "devices", source))
        )
        names = {d.name for d in devices}
        elements = []
        for i, e in enumerate(_list(data, "elements", source)):
            where = f"{source}: elements[{i}]"
            if not isinstance(e, Mapping):
                raise ScheduleError(f"{where}: expected an object")
            device = str(_req(e, "device", where))
            if device not in names:
                raise ScheduleError(
                    f"{where}: device {device!r} is not among the schedule's devices "
                    f"{sorted(names)}"
                )
            try:
                op_point = OperatingPoint.from_dict(e.get("op_point"))
            except ValueError as exc:
                raise ScheduleError(f"{where}.op_point: {exc}") from None
            dyn = e.get("dynamic_energy")
            elements.append(
                ScheduledElement(
                    name=str(_req(e, "name", where)),
                    type=str(e.get("type", e.get("name"))),
                    device=device,
                    start=_num(e, "start", where),
                    duration=_num(e, "duration", where),
                    energy=_num(e, "energy", where),
                    impl=str(e.get("impl", "default")),
                    op_point=op_point,
                    dynamic_energy=None if dyn is None else _num(e, "dynamic_energy", where),
                    var_energy=_num(e, "var_energy", where) if "var_energy" in e else 0.0,
                )
            )
        energy = data.get("energy")
        if not isinstance(energy, Mapping):
            raise ScheduleError(f"{source}: field 'energy' must be an object with 'predicted'")
        return cls(
            elements=tuple(elements),
            devices=devices,
            makespan=_num(data, "makespan", source),
            energy=_num(energy, "predicted", f"{source}: energy"),
            energy_std=_num(energy, "std", f"{source}: energy") if "std" in energy else 0.0,
            deadline=_opt_num(data.get("deadline"), f"{source}: deadline"),
            lower_bound=_opt_num(data.get("lower_bound"), f"{source}: lower_bound"),
            gap=_opt_num(data.get("gap"), f"{source}: gap"),
            solver=dict(data.get("solver") or {}),
            baseline=dict(data["baseline"]) if data.get("baseline") else None,
            plan=data.get("plan"),
            confidence=float(energy.get("confidence", 0.95)),
            meta=dict(data.get("meta") or {}),
        )


def _device_dict(d: DeviceInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"name": d.name, "idle_power_w": d.idle_power_w, "gpu": d.gpu}
    if d.transition_time_s or d.transition_energy_j:
        out["transition_time_s"] = d.transition_time_s
        out["transition_energy_j"] = d.transition_energy_j
    return out


def _list(data: Mapping[str, Any], key: str, where: str) -> Sequence[Any]:
    value = data.get(key)
    if not isinstance(value, list):
        raise ScheduleError(f"{where}: field {key!r} must be a list")
    return value


def _req(data: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise ScheduleError(f"{where}: field {key!r} is missing")
    return data[key]


def _num(data: Mapping[str, Any], key: str, where: str) -> float:
    value = _req(data, key, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ScheduleError(f"{where}: field {key!r} must be a number, got {value!r}")
    if value < 0:
        raise ScheduleError(f"{where}: field {key!r} must be ≥ 0, got {value}")
    return float(value)


def _opt_num(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScheduleError(f"{where}: must be a number or null, got {value!r}")
    return float(value)


def _opt_int(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ScheduleError(f"{where}: must be a GPU index (integer ≥ 0) or null, got {value!r}")
    return value


def read_schedule(path: str | os.PathLike[str]) -> Schedule:
    """Read a schedule file.

    Raises:
        ScheduleError: with the file name and the offending field.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScheduleError(f"{p}: no such schedule file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScheduleError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    return Schedule.from_dict(data, source=str(p))


def write_schedule(path: str | os.PathLike[str], schedule: Schedule) -> None:
    """Write ``schedule`` as indented JSON."""
    Path(path).write_text(json.dumps(schedule.to_dict(), indent=2) + "\n", encoding="utf-8")
