"""A wall-clock fake GPU: real time, scripted power, an exact energy counter; and the
stateful fake ``pynvml`` of the device tests, for sweeps through eopt's own NVML layer."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eopt.devices.base import PowerReading, WallClock
from eopt.model.operating_point import OperatingPoint


class WallGPU:
    """Draws ``idle_w``, or ``busy_w`` while code runs inside :meth:`busy`."""

    index = 0
    name = "wall0"
    model = "Wall Fake GPU"
    backend = "fake"

    def __init__(self, idle_w: float = 50.0, busy_w: float = 200.0) -> None:
        self.clock = WallClock()
        self.idle_w, self.busy_w = idle_w, busy_w
        self._lock = threading.Lock()
        self._energy = 0.0
        self._t = time.perf_counter()
        self._power = idle_w
        self.op = OperatingPoint(1410.0, None, 300.0)
        self.original = self.op
        self.sets: list[OperatingPoint] = []
        self.syncs = 0

    def _advance(self) -> float:
        now = time.perf_counter()
        self._energy += self._power * (now - self._t)
        self._t = now
        return now

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        with self._lock:
            self._advance()
            self._power = self.busy_w
        try:
            yield
        finally:
            with self._lock:
                self._advance()
                self._power = self.idle_w

    def energy_counter_j(self) -> float:
        with self._lock:
            self._advance()
            return self._energy

    def power(self) -> PowerReading:
        with self._lock:
            return PowerReading(self._advance(), self._power, "instant")

    def synchronize(self) -> None:
        self.syncs += 1

    def supported_sm_clocks_mhz(self) -> list[float]:
        return [1410.0, 1200.0]

    def supported_mem_clocks_mhz(self) -> list[float]:
        return [1593.0]

    def power_limit_range_w(self) -> tuple[float, float]:
        return (100.0, 400.0)

    def default_power_limit_w(self) -> float:
        return 300.0

    def current_operating_point(self) -> OperatingPoint:
        return self.op

    def set_operating_point(self, point: OperatingPoint) -> None:
        self.sets.append(point)
        self.op = OperatingPoint(
            point.sm_clock_mhz or self.op.sm_clock_mhz, None, point.power_limit_w or 300.0
        )

    def restore(self) -> None:
        self.op = self.original


@pytest.fixture
def wall_gpu() -> WallGPU:
    return WallGPU()


@pytest.fixture(scope="session")
def nvml_fake_module() -> Any:
    """The stateful ``pynvml`` fake of tests/devices/conftest.py (``FakeGpu``,
    ``FakePynvml``, ``FakeTime``), to patch in as ``eopt.devices.nvml.pynvml``."""
    path = Path(__file__).resolve().parents[1] / "devices" / "conftest.py"
    spec = importlib.util.spec_from_file_location("sweep_devices_fake_nvml", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module
