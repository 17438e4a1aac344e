"""What a schedule asks of each GPU: device-wide settings, their NVML calls, their checks.

Pure functions over a :class:`~eopt.model.schedule.Schedule` and the capability queries
of :class:`~eopt.devices.base.Device`; nothing here changes hardware.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from eopt.devices.base import Device
from eopt.model.operating_point import OperatingPoint
from eopt.model.schedule import Schedule

__all__ = [
    "ApplyError",
    "DevicePlan",
    "check_setting",
    "device_plans",
    "gpu_resolver",
    "nvml_calls",
    "parse_gpu_map",
    "plain_index",
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


GpuSpec = int | str  # what names a GPU: see eopt.devices.gpu_select.resolve_gpu
Resolver = Callable[[GpuSpec], int]


def parse_gpu_map(pairs: Sequence[str]) -> dict[str, str]:
    """Parse ``--gpu PLANDEV=GPU`` options (GPU: anything :func:`gpu_resolver` accepts).

    Raises:
        ApplyError: for anything but ``name=value``, or a device given twice.
    """
    out: dict[str, str] = {}
    for raw in pairs:
        name, sep, spec = raw.partition("=")
        name, spec = name.strip(), spec.strip()
        if not sep or not name or not spec:
            raise ApplyError(
                f"--gpu {raw!r}: expected PLANDEV=GPU, e.g. --gpu stage0=0 or "
                "--gpu stage1=GPU-8f2c… (a UUID from nvidia-smi -L)"
            )
        if name in out:
            raise ApplyError(f"--gpu: device {name!r} is given twice")
        out[name] = spec
    return out


def plain_index(spec: GpuSpec) -> int:
    """A GPU number written out: ``3``, ``"3"``, ``"cuda:3"`` or ``"nvml:3"`` → 3.

    What simulated GPUs (numbered 0, 1, … in this process) and pure planning accept.

    Raises:
        ApplyError: for a UUID, a PCI bus id or anything else only real GPUs can resolve.
    """
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return spec
    text = str(spec).strip().lower()
    for prefix in ("cuda:", "nvml:"):
        text = text.removeprefix(prefix)
    if text.isdigit():
        return int(text)
    raise ApplyError(
        f"GPU {spec!r}: UUIDs and PCI bus ids name real GPUs (NVML resolves them); "
        "simulated GPUs are numbered 0, 1, …"
    )


def gpu_resolver(backend: str = "auto", env: Mapping[str, str] | None = None) -> Resolver:
    """How GPU specifications become NVML indices for ``backend``.

    With NVML (``nvml``, or ``auto`` where NVML sees a GPU) a spec is a CUDA ordinal as
    this process sees it (``0``, ``"cuda:1"``; ``CUDA_VISIBLE_DEVICES`` honoured), a UUID
    (``GPU-…``, ``MIG-…``), a PCI bus id, or ``nvml:N`` (see
    :func:`eopt.devices.gpu_select.resolve_gpu`). The simulator numbers its GPUs 0, 1, …
    (:func:`plain_index`).

    Args:
        backend: ``auto`` | ``nvml`` | ``sim``.
        env: Environment for ``CUDA_VISIBLE_DEVICES`` (default ``os.environ``).
    """
    from eopt.devices.backends import AUTO, real_gpus_present
    from eopt.devices.backends import backend as named

    if backend == AUTO:
        if not real_gpus_present():
            return plain_index
    elif not named(backend).real:
        return plain_index

    def resolve(spec: GpuSpec) -> int:
        from eopt.devices.base import DeviceError
        from eopt.devices.gpu_select import resolve_gpu

        try:
            return resolve_gpu(spec, env)
        except DeviceError as exc:
            raise ApplyError(str(exc)) from None

    return resolve


def resolve_gpu_map(
    schedule: Schedule,
    overrides: Mapping[str, GpuSpec] | None = None,
    *,
    resolve: Resolver = plain_index,
    among: Sequence[str] | None = None,
    python_api: bool = False,
) -> dict[str, int]:
    """Map every plan device of ``schedule`` to an NVML GPU index.

    Precedence: ``overrides`` (``--gpu``, ``gpu_map=``), then the schedule's own ``gpu``
    field, then the device's position in the schedule (first device → GPU 0 …). Each is
    read the way the user names GPUs, through ``resolve``: a CUDA ordinal as this process
    sees it (``CUDA_VISIBLE_DEVICES`` honoured), a UUID or a PCI bus id, so a schedule
    that says ``gpu: 0`` under ``CUDA_VISIBLE_DEVICES=1`` means physical GPU 1, and a GPU
    the mask withholds is refused.

    Args:
        schedule: The solved schedule.
        overrides: Plan device → GPU specification.
        resolve: Turns a specification into an NVML index (:func:`gpu_resolver`).
        among: The plan devices that will be controlled (default: all). Only they must
            land on distinct GPUs: another rank's stage may share this rank's GPU number.
        python_api: Word errors for ``gpu_map=`` instead of ``--gpu``.

    Raises:
        ApplyError: when an override names an unknown device or a GPU that is not there,
            or two controlled plan devices land on one GPU (their settings would fight).
    """
    option = "gpu_map" if python_api else "--gpu"
    overrides = dict(overrides or {})
    names = [d.name for d in schedule.devices]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise ApplyError(
            f"{option} names unknown plan device(s) {unknown}; the schedule has {names}"
        )
    mapping: dict[str, int] = {}
    for position, info in enumerate(schedule.devices):
        if info.name in overrides:
            spec, source = overrides[info.name], f"{option} {info.name}"
        elif info.gpu is not None:
            spec, source = info.gpu, f"the schedule's device {info.name!r} (gpu: {info.gpu})"
        else:
            spec, source = position, f"the schedule's device {info.name!r} (its position)"
        try:
            mapping[info.name] = resolve(spec)
        except ApplyError as exc:
            raise ApplyError(f"{source}: {exc}") from None
    checked = names if among is None else [n for n in names if n in set(among)]
    seen: dict[int, str] = {}
    for name in checked:
        gpu = mapping[name]
        if gpu in seen:
            fix = (
                f"pass gpu_map={{{name!r}: ...}} (a CUDA ordinal, UUID or PCI bus id)"
                if python_api
                else f"give each its own GPU with --gpu {name}=GPU"
            )
            raise ApplyError(
                f"plan devices {seen[gpu]!r} and {name!r} both map to GPU {gpu}; {fix}"
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
