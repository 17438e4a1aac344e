"""Schedule files (``eopt.schedule/1``): what `eopt solve` writes and `eopt apply` reads.

A schedule places every element of a plan on its device with a start time, the chosen
implementation κ and operating point ω, and carries the predicted energy with its
interval, the certified lower bound and the optimality gap.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from eopt.model.confidence import c_alpha
from eopt.model.fileformats import (
    FileFormatError,
    Where,
    atomic_write_text,
    dumps_json,
    guard,
    json_ready,
    mapping,
    number,
    optional_number,
    parse_json,
    read_text,
    refuse_other_kind,
    required,
    sequence,
    string,
    within_run,
)
from eopt.model.operating_point import OperatingPoint
from eopt.model.planfile import PlanDevice, idle_power, read_gpu

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


class ScheduleError(FileFormatError):
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


DeviceInfo = PlanDevice
"""A schedule's device is the plan's device (:class:`eopt.model.planfile.PlanDevice`);
the name stays for importers."""


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
        device_model: The GPU model its signatures were measured on (a simulator profile
            name such as ``"A40"``), carried from the plan; None: not recorded.
    """

    elements: tuple[ScheduledElement, ...]
    devices: tuple[PlanDevice, ...]
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
    device_model: str | None = None

    # Derived ------------------------------------------------------------------------------
    @property
    def interval(self) -> tuple[float, float]:
        """The prediction interval (E − c·σ, E + c·σ) at :attr:`confidence`, in J."""
        c = c_alpha(self.confidence)
        return (self.energy - c * self.energy_std, self.energy + c * self.energy_std)

    def device(self, name: str) -> PlanDevice:
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
            **({"device_model": self.device_model} if self.device_model is not None else {}),
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
            # Free-form: a NaN there means "unknown", which JSON writes as null.
            "baseline": json_ready(dict(self.baseline)) if self.baseline is not None else None,
            "solver": json_ready(dict(self.solver)),
            "devices": [_device_dict(d) for d in self.devices],
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
            "meta": json_ready(dict(self.meta)),
        }

    @classmethod
    def from_dict(
        cls, data: Any, source: str = "<schedule>", error: type[ValueError] = ScheduleError
    ) -> Schedule:
        """Inverse of :meth:`to_dict`, validating every field: the one parser of
        ``eopt.schedule/1`` (``eopt compose`` reads solved schedules through it too).

        Beyond types: the makespan and every duration are > 0; energies, powers and
        variances ≥ 0; every element lies inside [0, makespan] (up to rounding); an
        element's dynamic part is at most its energy; the lower bound is at most the
        predicted energy and the gap lies in [0, 1]. Top-level keys it does not know
        (blocks later versions add) are accepted and ignored.

        Args:
            data: The parsed JSON.
            source: The file's name, for messages.
            error: The error type to raise (a reader embedding schedules passes its own).

        Raises:
            ScheduleError: (or ``error``) naming ``source`` and the offending field.
        """
        at = Where(source, error=error)
        data = mapping(data, at, what="a JSON object at the top level")
        if data.get("schema") != SCHEMA:
            (at / "schema").fail(
                f"is {data.get('schema')!r}, expected {SCHEMA!r} "
                "(is this a schedule written by `eopt solve`?)"
            )
        makespan = number(required(data, "makespan", at), at / "makespan", unit="s", positive=True)
        devices = tuple(
            _device(d, at / "devices" / i)
            for i, d in enumerate(sequence(required(data, "devices", at), at / "devices"))
        )
        names = [d.name for d in devices]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            (at / "devices").fail(f"device {dup!r} is listed twice")
        elements = tuple(
            _element(e, at / "elements" / i, set(names), makespan)
            for i, e in enumerate(sequence(required(data, "elements", at), at / "elements"))
        )
        energy = mapping(
            required(data, "energy", at), at / "energy", what="an object with 'predicted'"
        )
        predicted = number(
            required(energy, "predicted", at / "energy"), at / "energy" / "predicted",
            unit="J", min=0,
        )  # fmt: skip
        std = number(energy.get("std", 0.0), at / "energy" / "std", unit="J", min=0)
        confidence = number(energy.get("confidence", 0.95), at / "energy" / "confidence")
        if not 0 < confidence < 1:
            (at / "energy" / "confidence").fail(f"expected a fraction in (0, 1), got {confidence}")
        deadline = optional_number(data.get("deadline"), at / "deadline", unit="s", positive=True)
        lower_bound = optional_number(data.get("lower_bound"), at / "lower_bound", unit="J", min=0)
        if lower_bound is not None and lower_bound > predicted * (1 + _REL_TOL) + _ABS_TOL_J:
            (at / "lower_bound").fail(
                f"{lower_bound:g} J is above the predicted energy {predicted:g} J; a lower "
                "bound on the optimum cannot exceed a feasible schedule's energy"
            )
        gap = optional_number(data.get("gap"), at / "gap", min=-_REL_TOL, max=1 + _REL_TOL)
        solver = data.get("solver")
        solver = {} if solver is None else mapping(solver, at / "solver")
        baseline = data.get("baseline")
        if baseline is not None:
            baseline = _baseline(baseline, at / "baseline")
        plan = data.get("plan")
        if plan is not None:
            plan = string(plan, at / "plan", what="the plan's path or name")
        meta = data.get("meta")
        meta = {} if meta is None else mapping(meta, at / "meta")
        device_model = data.get("device_model")
        if device_model is not None:
            device_model = string(device_model, at / "device_model", what="a GPU model name")
        return cls(
            elements=elements,
            devices=devices,
            makespan=makespan,
            energy=predicted,
            energy_std=std,
            deadline=deadline,
            lower_bound=lower_bound,
            gap=None if gap is None else min(1.0, max(0.0, gap)),
            solver=dict(solver),
            baseline=baseline,
            plan=plan,
            confidence=confidence,
            meta=dict(meta),
            device_model=device_model,
        )


# Rounding allowances: a lower bound from an LP and a predicted energy from a sum agree
# to about 1e-9 relative when they are equal; anything beyond is a wrong file.
_REL_TOL = 1e-6
_ABS_TOL_J = 1e-9


def _device_dict(d: PlanDevice) -> dict[str, Any]:
    out: dict[str, Any] = {"name": d.name, "idle_power_w": d.idle_power_w, "gpu": d.gpu}
    # Written only where a device pays them, so files without them stay as they were.
    if d.transition_time_s or d.transition_energy_j:
        out["transition_time_s"] = d.transition_time_s
        out["transition_energy_j"] = d.transition_energy_j
    return out


def _device(data: Any, at: Where) -> PlanDevice:
    data = mapping(data, at, what="an object with name and idle_power_w")
    gpu = data.get("gpu")
    return PlanDevice(
        name=string(required(data, "name", at), at / "name", what="a device name"),
        idle_power_w=idle_power(required(data, "idle_power_w", at), at / "idle_power_w"),
        gpu=read_gpu(gpu, at / "gpu"),
        transition_time_s=number(
            data.get("transition_time_s", 0.0), at / "transition_time_s", unit="s", min=0
        ),
        transition_energy_j=number(
            data.get("transition_energy_j", 0.0), at / "transition_energy_j", unit="J", min=0
        ),
    )


def _element(data: Any, at: Where, devices: set[str], makespan: float) -> ScheduledElement:
    data = mapping(data, at, what="an object")
    name = string(required(data, "name", at), at / "name", what="an element name")
    at = replace(at, path=f"{at.path} ({name})")
    device = string(required(data, "device", at), at / "device", what="a device name")
    if device not in devices:
        (at / "device").fail(
            f"device {device!r} is not among the schedule's devices {sorted(devices)}"
        )
    try:
        op_point = OperatingPoint.from_dict(data.get("op_point"))
    except ValueError as exc:
        at.fail(str(exc))
    start = number(required(data, "start", at), at / "start", unit="s")
    duration = number(required(data, "duration", at), at / "duration", unit="s", positive=True)
    start = within_run(start, start + duration, makespan, at, run_name="makespan")
    energy = number(required(data, "energy", at), at / "energy", unit="J", min=0)
    dyn = optional_number(data.get("dynamic_energy"), at / "dynamic_energy", unit="J", min=0)
    if dyn is not None and dyn > energy * (1 + _REL_TOL) + _ABS_TOL_J:
        (at / "dynamic_energy").fail(
            f"{dyn:g} J is more than the element's energy {energy:g} J (E = s·T + d ≥ d)"
        )
    return ScheduledElement(
        name=name,
        type=string(data.get("type", name), at / "type", what="an element type"),
        device=device,
        start=start,
        duration=duration,
        energy=energy,
        impl=string(data.get("impl", "default"), at / "impl", what="an implementation name"),
        op_point=op_point,
        dynamic_energy=dyn,
        var_energy=number(data.get("var_energy", 0.0), at / "var_energy", unit="J²", min=0),
    )


def _baseline(data: Any, at: Where) -> dict[str, Any]:
    """The all-fastest reference: its numbers, where given, are an energy and a time."""
    data = dict(mapping(data, at, what="an object (energy, makespan, label)"))
    for key, unit in (("energy", "J"), ("energy_j", "J"), ("makespan", "s"), ("makespan_s", "s")):
        if data.get(key) is not None:
            number(data[key], at / key, unit=unit, min=0, positive=unit == "s")
    return data


def read_schedule(path: str | os.PathLike[str]) -> Schedule:
    """Read a schedule file (``eopt.schedule/1``), validating it (:meth:`Schedule.from_dict`).

    Raises:
        ScheduleError: with the file name and the offending field; a file of another
            eopt kind (a plan, a library …) is named for what it is.
    """
    p = Path(path)
    at = Where(str(p), error=ScheduleError)
    try:
        with guard(at, what="a schedule"):
            return Schedule.from_dict(parse_json(read_text(p, at, what="a schedule"), at), str(p))
    except ScheduleError:
        refuse_other_kind(p, ("schedule",), at)
        raise


def write_schedule(path: str | os.PathLike[str], schedule: Schedule) -> None:
    """Write ``schedule`` as indented strict JSON, atomically.

    Raises:
        ValueError: when a number of the schedule is not finite.
    """
    text = dumps_json(schedule.to_dict(), str(path), indent=2) + "\n"
    atomic_write_text(path, text)
