"""Static application of a schedule: one lock per GPU for the whole run.

Where every element on a device shares one device-wide operating point, locking the
clocks / setting the power limit once realizes the schedule. Devices that need several
settings are reported: they need the runtime controller
(:class:`eopt.apply.controller.RuntimeController`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from eopt.apply.guard import device_guard
from eopt.apply.settings import (
    ApplyError,
    DevicePlan,
    check_setting,
    device_plans,
    nvml_calls,
    resolve_gpu_map,
)
from eopt.devices.base import Device
from eopt.model.schedule import Schedule

__all__ = [
    "ApplyPlan",
    "PersistenceCheck",
    "apply_locked",
    "check_persistence",
    "plan_apply",
    "run_with_settings",
]

GuardFactory = Callable[..., AbstractContextManager[object]]


@dataclass(frozen=True)
class ApplyPlan:
    """What applying a schedule does to each GPU.

    Attributes:
        devices: One entry per plan device, in schedule order.
    """

    devices: tuple[DevicePlan, ...]

    @property
    def static(self) -> list[DevicePlan]:
        """Devices served by one lock (and that change something)."""
        return [p for p in self.devices if p.is_static and p.changes_anything()]

    @property
    def dynamic(self) -> list[DevicePlan]:
        """Devices that need the runtime controller (several settings)."""
        return [p for p in self.devices if not p.is_static]

    @property
    def unchanged(self) -> list[DevicePlan]:
        """Static devices whose schedule names no clock or power limit."""
        return [p for p in self.devices if p.is_static and not p.changes_anything()]

    def summary(self, done: bool = True) -> str:
        """One line: how many GPUs are (or would be) changed, and why the others are not.

        ``"0 of 8 GPUs changed: the schedule switches settings per element …"``

        Args:
            done: Whether the settings were applied (``changed``) or are only planned
                (``would change``, for dry runs and refusals).
        """
        verb = "changed" if done else "would change"
        locked = self.static
        head = f"{len(locked)} of {len(self.devices)} GPUs {verb}"
        if locked:
            head += (
                " ("
                + ", ".join(f"gpu{p.gpu} locked at {p.settings[0].label()}" for p in locked)
                + ")"
            )
        why = []
        if self.dynamic:
            who = (
                "the schedule switches"
                if len(self.dynamic) == len(self.devices)
                else ", ".join(f"gpu{p.gpu}" for p in self.dynamic) + " switch"
            )
            why.append(
                f"{who} settings per element (mark the program's elements with "
                "eopt.element and run `eopt apply SCHEDULE --elements -- CMD`, see "
                "docs/pytorch.md; or solve with --static for one setting per GPU)"
            )
        if self.unchanged:
            names = ", ".join(f"gpu{p.gpu}" for p in self.unchanged)
            why.append(f"the schedule sets no clock or power limit for {names}")
        return head + (": " + "; ".join(why) if why else "")

    def to_dict(self) -> dict[str, Any]:
        """What ``eopt apply --json`` prints: per GPU its action, setting(s) and calls."""
        out = []
        for p in self.devices:
            if not p.changes_anything():
                action = "unchanged"
            elif p.is_static:
                action = "lock"
            else:
                action = "runtime-controller"
            out.append(
                {
                    "device": p.device,
                    "gpu": p.gpu,
                    "action": action,
                    "settings": [point.to_dict() for point in p.settings],
                    "calls": [nvml_calls(p.gpu, point) for point in p.settings],
                }
            )
        return {
            "gpus": out,
            "changed": len(self.static),
            "total": len(self.devices),
            "summary": self.summary(done=False),
        }

    def lines(self) -> list[str]:
        """Human-readable plan: each NVML call with its values, per GPU.

        Static devices list the calls made once; devices with several settings list the
        calls the runtime controller makes on each switch.
        """
        out: list[str] = []
        for plan in self.devices:
            head = f"{plan.device} → gpu{plan.gpu}"
            if not plan.changes_anything():
                out.append(f"{head}: no clock or power-limit setting in the schedule; unchanged")
            elif plan.is_static:
                point = plan.settings[0]
                out.append(f"{head}: lock {point.label()} for the whole run")
                out.extend(f"  {call}" for call in nvml_calls(plan.gpu, point))
            else:
                labels = ", ".join(p.label() for p in plan.settings)
                out.append(
                    f"{head}: {len(plan.settings)} settings ({labels}): the runtime "
                    "controller switches them per element under `eopt apply SCHEDULE "
                    "--elements -- CMD` (a program marked with "
                    "eopt.element, see docs/pytorch.md); without a command `eopt apply` "
                    "leaves this GPU unchanged"
                )
                for point, users in zip(plan.settings, plan.users, strict=True):
                    noun = "element" if len(users) == 1 else "elements"
                    out.append(f"  on switch to {point.label()} ({len(users)} {noun}):")
                    out.extend(f"    {call}" for call in nvml_calls(plan.gpu, point))
        return out


@dataclass(frozen=True)
class PersistenceCheck:
    """Whether a GPU keeps settings that ``eopt apply`` leaves in place after it exits.

    Attributes:
        device: Plan device name.
        gpu: GPU index.
        enabled: Persistence mode (None: the driver cannot say).
        note: One line for the user, saying what will happen.
    """

    device: str
    gpu: int
    enabled: bool | None
    note: str

    @property
    def keeps(self) -> bool:
        """True when the settings stay until ``eopt reset`` (persistence mode on)."""
        return self.enabled is True


def check_persistence(plan: ApplyPlan, devices: Mapping[str, Device]) -> list[PersistenceCheck]:
    """Persistence mode of every GPU that ``eopt apply`` locks (reads only).

    Without persistence mode the driver may tear a GPU down when its last client exits,
    and clock locks and power limits go with it: "kept until ``eopt reset``" then does
    not hold. Devices that cannot say (the simulated GPU) are left out.
    """
    from eopt.devices.base import DeviceError
    from eopt.devices.nvml import persistence_explanation

    out = []
    for p in plan.static:
        query = getattr(devices.get(p.device), "persistence_mode", None)
        if query is None:
            continue
        try:
            enabled = query()
        except DeviceError:
            enabled = None  # unreadable here: say so rather than promise anything
        note = f"gpu{p.gpu}: {persistence_explanation(enabled)}"
        out.append(PersistenceCheck(p.device, p.gpu, enabled, note))
    return out


def plan_apply(
    schedule: Schedule,
    devices: Mapping[str, Device] | None = None,
    gpu_map: Mapping[str, int] | None = None,
) -> ApplyPlan:
    """Work out (and, given ``devices``, check) what applying ``schedule`` changes.

    Args:
        schedule: The solved schedule.
        devices: Plan device → opened GPU; when given, every setting is checked against
            the GPU's supported clocks and power-limit range.
        gpu_map: Plan device → NVML index overrides (resolve ``--gpu`` specifications
            first with :func:`eopt.apply.settings.gpu_resolver`).

    Raises:
        ApplyError: a bad mapping, or a setting a GPU does not support (naming the
            element, the value and the supported range).
    """
    mapping = resolve_gpu_map(schedule, gpu_map)
    plans = device_plans(schedule, mapping)
    if devices is not None:
        for plan in plans:
            device = devices.get(plan.device)
            if device is None:
                raise ApplyError(f"no GPU opened for plan device {plan.device!r}")
            for point, users in zip(plan.settings, plan.users, strict=True):
                check_setting(device, point, plan_device=plan.device, elements=users)
    return ApplyPlan(devices=tuple(plans))


def apply_locked(
    plan: ApplyPlan,
    devices: Mapping[str, Device],
    *,
    guard: GuardFactory = device_guard,
) -> list[str]:
    """Lock the static devices at their setting and keep them until ``eopt reset``.

    The guard saves the original state to disk first (for ``eopt reset``); a failure
    part-way restores what was already changed.

    Returns:
        The plan devices that were changed.
    """
    targets = plan.static
    if not targets:
        return []
    with guard([devices[p.device] for p in targets], keep=True):
        for p in targets:
            devices[p.device].set_operating_point(p.settings[0])
    return [p.device for p in targets]


def run_with_settings(
    plan: ApplyPlan,
    devices: Mapping[str, Device],
    command: Sequence[str],
    *,
    guard: GuardFactory = device_guard,
) -> int:
    """Lock the static devices, run ``command``, restore them however it ends.

    Returns:
        The command's exit status.

    Raises:
        ApplyError: when the command cannot be started.
    """
    if not command:
        raise ApplyError("--until-exit needs a command after `--`, e.g. -- python train.py")
    targets = plan.static
    with guard([devices[p.device] for p in targets], keep=False):
        for p in targets:
            devices[p.device].set_operating_point(p.settings[0])
        try:
            return subprocess.call(list(command))
        except FileNotFoundError:
            raise ApplyError(f"command not found: {command[0]!r}") from None
        except PermissionError:
            raise ApplyError(f"command is not executable: {command[0]!r}") from None
