"""``eopt apply SCHEDULE --elements -- CMD``: the element hook that switches the GPU per element.

``eopt apply`` configures the program's process through the environment; the program's
first :func:`eopt.element` loads :func:`hook`, which builds the runtime controller
(:class:`eopt.apply.controller.RuntimeController`) over the plan device this process
runs and switches it at every element the schedule names. The program has no code
written against the controller. The parent (``eopt apply``) holds the devices layer's
guard for the whole run and restores the GPU however the program ends, so the
controller here takes no guard of its own.

Environment: ``EOPT_APPLY_SCHEDULE`` (the schedule file), ``EOPT_APPLY_GPUS`` (JSON,
plan device → NVML index), ``EOPT_APPLY_BACKEND`` and ``EOPT_APPLY_DEVICE`` (the plan
device of this process; default: the one of ``$RANK``, else the first). On ``--sim``
:func:`sim_switch` does the same on the child's simulated GPU
(:mod:`eopt.runs.profile_child`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eopt.apply.controller import RuntimeController

__all__ = [
    "APPLY_DEVICE_ENV",
    "APPLY_GPUS_ENV",
    "APPLY_SCHEDULE_ENV",
    "ApplyHook",
    "apply_env",
    "hook",
    "sim_switch",
]

APPLY_SCHEDULE_ENV = "EOPT_APPLY_SCHEDULE"
APPLY_GPUS_ENV = "EOPT_APPLY_GPUS"
APPLY_BACKEND_ENV = "EOPT_APPLY_BACKEND"
APPLY_DEVICE_ENV = "EOPT_APPLY_DEVICE"
HOOK_SPEC = "eopt.apply.element_hook:hook"
SIM_SWITCH_SPEC = "eopt.apply.element_hook:sim_switch"
#: Idle at the first element's setting before a simulated run starts, in s: as long as
#: ``eopt profile --sim`` idles at a point before the program's first element there (its
#: settle and static window), so that both runs start from the same temperature.
PRESETTLE_S = 1.5


def apply_env(schedule_path: str, gpu_map: Mapping[str, int], backend: str) -> dict[str, str]:
    """The environment that makes a program switch per element (real GPUs)."""
    return {
        "EOPT_ELEMENT_HOOK": HOOK_SPEC,
        APPLY_SCHEDULE_ENV: os.path.abspath(schedule_path),
        APPLY_GPUS_ENV: json.dumps(dict(gpu_map)),
        APPLY_BACKEND_ENV: backend,
    }


def _no_guard(devices: Sequence[Any]) -> contextlib.AbstractContextManager[object]:
    # The parent `eopt apply` holds the guard (and the GPU's lock) for the whole run.
    return contextlib.nullcontext()


def _my_device(names: Sequence[str]) -> str:
    wanted = os.environ.get(APPLY_DEVICE_ENV)
    if wanted:
        if wanted not in names:
            raise SystemExit(f"eopt: ${APPLY_DEVICE_ENV}={wanted!r} is not a device of {names}")
        return wanted
    rank = os.environ.get("RANK", "")
    if rank.isdigit() and int(rank) < len(names):
        return names[int(rank)]
    return names[0]


class _Switcher:
    """Switches the controller at each element of the schedule; names the others once."""

    def __init__(self, controller: RuntimeController, device: str) -> None:
        self.controller = controller
        self.device = device
        self.mine = set(controller.order(device))
        self._unknown: set[str] = set()

    def __call__(self, name: str, wait: bool = False) -> None:
        if name not in self.mine:
            if name not in self.controller and name not in self._unknown:
                self._unknown.add(name)
                print(
                    f"eopt apply: element {name!r} is not in the schedule; it runs at the "
                    "setting in force",
                    file=sys.stderr,
                )
            return
        self.controller.enter(name)
        if wait:
            self.controller.wait_idle()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.controller.close()


class ApplyHook:
    """The element hook of ``eopt apply -- CMD`` on real GPUs (see the module docstring).

    Under ``eopt apply -o`` the program also runs under ``eopt measure``'s regions file;
    each element is then recorded as a region too.
    """

    def __init__(self, switch: Callable[[str], None], regions: Any = None) -> None:
        self.switch = switch
        self.regions = regions

    def begin(self, name: str, kind: str) -> None:
        """Switch the GPU to the element's setting, then open its region."""
        self.switch(name)
        if self.regions is not None:
            self.regions.begin(name, kind)

    def end(self, name: str, kind: str) -> None:
        """Close the element's region."""
        if self.regions is not None:
            self.regions.end(name, kind)

    def step(self) -> None:
        """Nothing: the schedule repeats every iteration."""


def _read(path: str) -> Any:
    from eopt.model.schedule import ScheduleError, read_schedule

    try:
        return read_schedule(path)
    except (ScheduleError, ValueError) as exc:
        raise SystemExit(f"eopt apply: {exc}") from None


def hook() -> ApplyHook:
    """``$EOPT_ELEMENT_HOOK`` factory for a program run by ``eopt apply`` on real GPUs."""
    path = os.environ.get(APPLY_SCHEDULE_ENV)
    if not path:
        raise SystemExit(f"eopt: ${APPLY_SCHEDULE_ENV} is unset; run under `eopt apply`")
    schedule = _read(path)
    names = [d.name for d in schedule.devices]
    device = _my_device(names)
    gpus = json.loads(os.environ.get(APPLY_GPUS_ENV) or "{}")
    controller = RuntimeController.from_schedule(
        schedule,
        gpu_map={device: f"nvml:{gpus[device]}"} if device in gpus else None,
        only=[device],
        backend=os.environ.get(APPLY_BACKEND_ENV) or "nvml",
        guard=_no_guard,
        warn_drift=False,
    ).start()
    switcher = _Switcher(controller, device)
    atexit.register(switcher.close)
    regions = None
    if os.environ.get("EOPT_REGIONS_FILE"):
        from eopt.measure.regions import RecorderHook

        regions = RecorderHook()
    return ApplyHook(switcher, regions)


def sim_switch(gpu: Any, config: Mapping[str, Any]) -> Callable[[str], None]:
    """The per-element switcher of ``eopt apply --sim`` (loaded by the simulated child).

    The controller switches the child's simulated GPU; each switch is waited for, and
    the clock's settling too (idle, outside every element), so that the simulated kernel
    runs at the element's setting.
    """
    schedule = _read(str(config["schedule"]))
    names = [d.name for d in schedule.devices]
    device = _my_device(names)
    controller = RuntimeController(
        schedule, {device: gpu}, guard=_no_guard, warn_drift=False
    ).start()
    switcher = _Switcher(controller, device)
    atexit.register(switcher.close)
    # Settled at the first element's setting before the program starts, as the profile
    # found the GPU before its first element: a run begins on a settled clock, warm as
    # the signatures were measured (leakage power follows the temperature).
    order = controller.order(device)
    if order:
        switcher(order[0], wait=True)
        gpu.idle(PRESETTLE_S)

    def switch(name: str) -> None:
        switcher(name, wait=True)
        # The element starts once its clock has settled, as its signature was measured
        # (and as the schedule, which prices no transition, assumes); the wait is idle
        # time outside every element, so the run's total still pays for each switch.
        left = float(gpu.entry_context().get("clock_settling_s", 0.0))
        if left > 0:
            gpu.idle(left)

    return switch
