"""What a schedule asks of each GPU: device-wide settings, their NVML calls, their checks.

Pure functions over a :class:`~eopt.plan.schedule.Schedule` and the capability queries
of :class:`~eopt.devices.base.Device`; nothing here changes hardware.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from eopt.devices.base import Device
from eopt.devices.operating_point import OperatingPoint
from eopt.plan.schedule import Schedule

__all__ = [
    "ApplyError",
    "DevicePlan",
    "check_setting",
    "device_plans",
    "nvml_calls",
    "parse_gpu_map",
    "resolve_gpu_map",
]

# A supported clock matches a requested one within this tolerance: NVML reports integer
# MHz while schedules carry floats that went through JSON.
_CLOCK_TOLERANCE_MHZ = 0.5


class ApplyError(ValueError):
    """A schedule that cannot be applied as asked; the message names the fix."""


@dataclass(frozen=True)
class DevicePlan:
    """The settings one plan device needs, in order of first use.

    Attributes:
        device: The plan's device name (e.g. ``stage0``).
        gpu: The GPU index it maps to.
        settings: Distinct device-wide operating points, in order of first use.
        users: For each setting, the names of the elements that run at it.
    """

    device: str
    gpu: int
    settings: tuple[OperatingPoint, ...]
    users: tuple[tuple[str, ...], ...]

    @property
    def is_static(self) -> bool:
        """True when one setting serves the whole schedule (a lock suffices)."""
        return len(self.settings) <= 1

    def changes_anything(self) -> bool:
        """True when some setting names a clock or a power limit."""
        return any(p.device_key != (None, None, None) for p in self.settings)


def parse_gpu_map(pairs: Sequence[str]) -> dict[str, int]:
    """Parse ``--gpu PLANDEV=INDEX`` options.

    Raises:
        ApplyError: for anything but ``name=integer ≥ 0``, or a device given twice.
    """
    out: dict[str, int] = {}
    for raw in pairs:
        name, sep, index = raw.partition("=")
        name, index = name.strip(), index.strip()
        if not sep or not name or not index.isdigit():
            raise ApplyError(
                f"--gpu {raw!r}: expected PLANDEV=INDEX, e.g. --gpu stage0=0 --gpu stage1=1"
            )
        if name in out:
            raise ApplyError(f"--gpu: device {name!r} is given twice")
        out[name] = int(index)
    return out


def resolve_gpu_map(
    schedule: Schedule, overrides: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Map every plan device of ``schedule`` to a GPU index.

    Precedence: ``overrides`` (``--gpu``), then the schedule's own ``gpu`` field, then the
    device's position in the schedule (first device → GPU 0 …).

    Raises:
        ApplyError: when an override names an unknown device, or two plan devices land on
            one GPU (their settings would fight).
    """
    overrides = dict(overrides or {})
    names = [d.name for d in schedule.devices]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise ApplyError(f"--gpu names unknown plan device(s) {unknown}; the schedule has {names}")
    mapping: dict[str, int] = {}
    for position, info in enumerate(schedule.devices):
        if info.name in overrides:
            mapping[info.name] = overrides[info.name]
        elif info.gpu is not None:
            mapping[info.name] = info.gpu
        else:
            mapping[info.name] = position
    seen: dict[int, str] = {}
    for name, gpu in mapping.items():
        if gpu in seen:
            raise ApplyError(
                f"plan devices {seen[gpu]!r} and {name!r} both map to GPU {gpu}; "
                f"give each its own GPU with --gpu {name}=INDEX"
            )
        seen[gpu] = name
    return mapping


def device_plans(schedule: Schedule, gpu_map: Mapping[str, int]) -> list[DevicePlan]:
    """The settings each plan device needs, from the schedule's elements in start order."""
    plans = []
    for info in schedule.devices:
        settings: list[OperatingPoint] = []
        users: list[list[str]] = []
        for element in schedule.elements_on(info.name):
            point = element.op_point.device_wide()
            if point not in settings:
                settings.append(point)
                users.append([])
            users[settings.index(point)].append(element.name)
        plans.append(
            DevicePlan(
                device=info.name,
                gpu=gpu_map[info.name],
                settings=tuple(settings),
                users=tuple(tuple(u) for u in users),
            )
        )
    return plans


def nvml_calls(gpu: int, point: OperatingPoint) -> list[str]:
    """The NVML calls that put GPU ``gpu`` at ``point``, rendered with their values.

    Power limits are in W everywhere in eopt; NVML takes mW, so the rendering converts
    here, at the NVML boundary.
    """
    handle = f"gpu{gpu}"
    calls = []
    if point.sm_clock_mhz is not None:
        f = _mhz(point.sm_clock_mhz)
        calls.append(f"nvmlDeviceSetGpuLockedClocks({handle}, {f}, {f})")
    if point.mem_clock_mhz is not None:
        m = _mhz(point.mem_clock_mhz)
        calls.append(f"nvmlDeviceSetMemoryLockedClocks({handle}, {m}, {m})")
    if point.power_limit_w is not None:
        mw = round(point.power_limit_w * 1000.0)
        calls.append(f"nvmlDeviceSetPowerManagementLimit({handle}, {mw} mW)")
    return calls


def nvml_restore_calls(gpu: int) -> list[str]:
    """The NVML calls that undo :func:`nvml_calls` (the original limit is read at start)."""
    handle = f"gpu{gpu}"
    return [
        f"nvmlDeviceResetGpuLockedClocks({handle})",
        f"nvmlDeviceResetMemoryLockedClocks({handle})",
        f"nvmlDeviceSetPowerManagementLimit({handle}, <original limit> mW)",
    ]


def check_setting(
    device: Device, point: OperatingPoint, *, plan_device: str, elements: Sequence[str]
) -> None:
    """Check ``point`` against what ``device`` supports, before anything changes.

    Raises:
        ApplyError: naming the element, the value and the supported range.
    """
    where = _where(plan_device, device, elements)
    if point.sm_clock_mhz is not None:
        _check_clock("SM clock", point.sm_clock_mhz, list(device.supported_sm_clocks_mhz()), where)
    if point.mem_clock_mhz is not None:
        _check_clock(
            "memory clock", point.mem_clock_mhz, list(device.supported_mem_clocks_mhz()), where
        )
    if point.power_limit_w is not None:
        low, high = device.power_limit_range_w()
        if not (low - 1e-6 <= point.power_limit_w <= high + 1e-6):
            raise ApplyError(
                f"{where}: power limit {point.power_limit_w:g} W is outside the supported "
                f"range {low:g}–{high:g} W of {device.model}"
            )


def _where(plan_device: str, device: Device, elements: Sequence[str]) -> str:
    shown = ", ".join(elements[:3])
    if len(elements) > 3:
        shown += f" and {len(elements) - 3} more"
    noun = "element" if len(elements) == 1 else "elements"
    return f"{noun} {shown} (device {plan_device} → {device.name})"


def _check_clock(what: str, value: float, supported: list[float], where: str) -> None:
    if not supported:
        raise ApplyError(
            f"{where}: the GPU reports no supported {what}s; cannot lock {value:g} MHz"
        )
    if any(abs(value - s) <= _CLOCK_TOLERANCE_MHZ for s in supported):
        return
    nearest = min(supported, key=lambda s: abs(s - value))
    raise ApplyError(
        f"{where}: {what} {value:g} MHz is not supported; supported: {_describe(supported)} "
        f"(nearest: {nearest:g} MHz)"
    )


def _describe(clocks: list[float]) -> str:
    """``210–1410 MHz in 15 MHz steps`` for a regular table, else the list."""
    values = sorted(set(clocks))
    if len(values) == 1:
        return f"{values[0]:g} MHz"
    steps = {round(b - a, 6) for a, b in itertools.pairwise(values)}
    if len(steps) == 1:
        return f"{values[0]:g}–{values[-1]:g} MHz in {steps.pop():g} MHz steps"
    if len(values) <= 8:
        return ", ".join(f"{v:g}" for v in values) + " MHz"
    return f"{len(values)} clocks in {values[0]:g}–{values[-1]:g} MHz"


def _mhz(value: float) -> int:
    return round(value)
