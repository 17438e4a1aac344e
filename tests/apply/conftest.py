"""Fixtures for the apply tests: a fake GPU that records every call, hand-made schedules,
and the fake NVML of tests/devices (``fake_nvml``, ``make_fake_nvml``, ``nvml_fakes``)."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from eopt.devices.base import DeviceError, PowerReading, WallClock
from eopt.model.operating_point import OperatingPoint
from eopt.model.schedule import DeviceInfo, Schedule, ScheduledElement
from eopt.plan.pipeline import one_f_one_b_order


def _devices_conftest():
    # Conftest modules cannot be imported by name under --import-mode=importlib: load the
    # fake NVML's module from its file, so these tests drive NvmlGPU exactly as there.
    path = Path(__file__).resolve().parent.parent / "devices" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_eopt_tests_fake_nvml", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


_fake_nvml_module = _devices_conftest()
fake_nvml = _fake_nvml_module.fake_nvml
make_fake_nvml = _fake_nvml_module.make_fake_nvml
nvml_fakes = _fake_nvml_module.nvml_fakes


class FakeGPU:
    """A Device that records calls (with the calling thread) instead of touching hardware.

    ``set_delay_s`` makes each set call block like an NVML call; ``gate`` (an Event), when
    given, blocks set calls until it is set; ``fail_on`` makes setting that SM clock raise.
    """

    model = "Fake-GPU"

    def __init__(
        self,
        index: int = 0,
        *,
        sm_clocks: Sequence[float] = (1410, 1200, 1005, 810),
        limit_range: tuple[float, float] = (100.0, 400.0),
    ) -> None:
        self.index = index
        self.name = f"gpu{index}"
        self.clock = WallClock()
        self._sm = list(sm_clocks)
        self._range = limit_range
        self.calls: list[tuple[str, object, str]] = []  # (method, arg, thread name)
        self.state = OperatingPoint(None, None, 300.0)
        self.original = self.state
        self.set_delay_s = 0.0
        self.gate: threading.Event | None = None
        self.fail_on: float | None = None
        self._lock = threading.Lock()

    def supported_sm_clocks_mhz(self) -> list[float]:
        return list(self._sm)

    def supported_mem_clocks_mhz(self) -> list[float]:
        return [1593.0]

    def power_limit_range_w(self) -> tuple[float, float]:
        return self._range

    def default_power_limit_w(self) -> float:
        return 300.0

    def current_operating_point(self) -> OperatingPoint:
        return self.state

    def set_operating_point(self, point: OperatingPoint) -> None:
        with self._lock:
            self.calls.append(("set", point, threading.current_thread().name))
        if self.gate is not None:
            self.gate.wait(5.0)
        if self.set_delay_s:
            time.sleep(self.set_delay_s)
        if self.fail_on is not None and point.sm_clock_mhz == self.fail_on:
            raise DeviceError(f"{self.name}: injected failure at {point.label()}")
        self.state = OperatingPoint(
            point.sm_clock_mhz if point.sm_clock_mhz is not None else self.state.sm_clock_mhz,
            point.mem_clock_mhz if point.mem_clock_mhz is not None else self.state.mem_clock_mhz,
            point.power_limit_w if point.power_limit_w is not None else self.state.power_limit_w,
        )

    control = True

    def snapshot_state(self) -> dict[str, object]:
        """What the devices guard saves for `eopt reset` (the NVML GPU's layout)."""
        return {
            "backend": "fake",
            "index": self.index,
            "model": self.model,
            "power_limit_w": self.original.power_limit_w,
        }

    def restore(self) -> None:
        with self._lock:
            self.calls.append(("restore", None, threading.current_thread().name))
        self.state = self.original

    def energy_counter_j(self) -> float | None:
        return None

    def power(self) -> PowerReading:
        return PowerReading(time.perf_counter(), 100.0, "instant")

    def synchronize(self) -> None:
        return None

    def setters(self) -> list[OperatingPoint]:
        return [arg for name, arg, _ in self.calls if name == "set"]  # type: ignore[misc]


def element(
    name: str,
    device: str,
    start: float,
    duration: float,
    sm: float | None = None,
    limit: float | None = None,
    etype: str | None = None,
) -> ScheduledElement:
    """A scheduled element at ``sm`` MHz / ``limit`` W with 250 W mean power, 180 W dynamic."""
    return ScheduledElement(
        name=name,
        type=etype or name.split("[")[0],
        device=device,
        start=start,
        duration=duration,
        energy=250.0 * duration,
        dynamic_energy=180.0 * duration,
        op_point=OperatingPoint(sm_clock_mhz=sm, power_limit_w=limit),
        var_energy=0.01,
    )


def make_schedule(
    elements: Sequence[ScheduledElement],
    devices: Sequence[str],
    gpus: Sequence[int | None] | None = None,
) -> Schedule:
    infos = tuple(
        DeviceInfo(d, 70.0, None if gpus is None else gpus[i]) for i, d in enumerate(devices)
    )
    makespan = max(e.end for e in elements)
    sch = Schedule(elements=tuple(elements), devices=infos, makespan=makespan, energy=0.0)
    energy = sch.element_energy() + sch.idle_energy()
    return Schedule(elements=tuple(elements), devices=infos, makespan=makespan, energy=energy)


def one_f_one_b(stages: int, micro: int, clock_of: Callable[[str, int, int], float]) -> Schedule:
    """A 1F1B pipeline schedule (design.md order), each op 10 ms forward / 20 ms backward,
    at ``clock_of(kind, stage, microbatch)`` MHz; starts from the dependencies."""
    order = {
        s: [(kind[0].upper(), m) for kind, m in one_f_one_b_order(stages, micro, s)]
        for s in range(stages)
    }
    end: dict[tuple[str, int, int], float] = {}
    placed: list[ScheduledElement] = []
    cursor = dict.fromkeys(range(stages), 0)
    free = dict.fromkeys(range(stages), 0.0)
    while any(cursor[s] < len(order[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if cursor[s] >= len(order[s]):
                continue
            kind, m = order[s][cursor[s]]
            deps = []
            if kind == "F" and s > 0:
                deps.append(("F", s - 1, m))
            if kind == "B":
                deps.append(("B", s + 1, m) if s < stages - 1 else ("F", s, m))
            if any(d not in end for d in deps):
                continue
            start = max([free[s], *(end[d] for d in deps)])
            duration = 0.010 if kind == "F" else 0.020
            placed.append(
                element(
                    f"{kind}[{s},{m}]",
                    f"stage{s}",
                    start,
                    duration,
                    sm=clock_of(kind, s, m),
                    etype=f"stage{s}.{'forward' if kind == 'F' else 'backward'}",
                )
            )
            end[(kind, s, m)] = start + duration
            free[s] = start + duration
            cursor[s] += 1
            progressed = True
        assert progressed, "1F1B order deadlocked"
    return make_schedule(placed, [f"stage{s}" for s in range(stages)])


@pytest.fixture
def fake_gpu() -> Callable[..., FakeGPU]:
    return FakeGPU


class Builders:
    """Schedule builders handed to tests (conftest modules cannot be imported by name)."""

    element = staticmethod(element)
    schedule = staticmethod(make_schedule)
    pipeline = staticmethod(one_f_one_b)


@pytest.fixture
def build() -> Builders:
    return Builders()
