"""A scripted fake GPU on a virtual clock, for testing meters and repeats exactly."""

from __future__ import annotations

import collections
import heapq
import importlib.util
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from eopt.devices.base import PowerReading, WallClock
from eopt.model.operating_point import OperatingPoint


class VirtualTimer:
    def __init__(self, clock: VirtualClock, period: float, cb: Callable[[float], None]):
        self.clock, self.period, self.cb, self.cancelled = clock, period, cb, False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualClock:
    """Time moves only through ``advance`` / ``sleep``; timers fire at their instants."""

    def __init__(self, on_advance: Callable[[float, float], None]) -> None:
        self.t = 0.0
        self._queue: list[tuple[float, int, VirtualTimer]] = []
        self._ids = itertools.count()
        self._on_advance = on_advance  # (t0, t1): the device integrates its true power

    def now(self) -> float:
        return self.t

    def every(self, period: float, cb: Callable[[float], None]) -> VirtualTimer:
        timer = VirtualTimer(self, period, cb)
        heapq.heappush(self._queue, (self.t + period, next(self._ids), timer))
        return timer

    def advance(self, dt: float) -> None:
        end = self.t + dt
        while self._queue and self._queue[0][0] <= end:
            when, _, timer = heapq.heappop(self._queue)
            if timer.cancelled:
                continue
            self._on_advance(self.t, when)
            self.t = when
            timer.cb(when)
            heapq.heappush(self._queue, (when + timer.period, next(self._ids), timer))
        self._on_advance(self.t, end)
        self.t = end

    def sleep(self, dt: float) -> None:
        if dt > 0:
            self.advance(dt)


class FakeGPU:
    """Piecewise-constant true power; a sensor refreshed every ``period`` that reads the
    power at the refresh (``sensor="instant"``), the mean over the last period
    (``sensor="average"``) or over the last second (``sensor="average_1s"``, as NVML),
    held until the next refresh.

    ``busy(duration, power)`` runs a "kernel" drawing ``power`` W (total) for ``duration``.
    """

    index = 0
    name = "fake0"
    model = "Fake GPU"
    backend = "fake"

    def __init__(
        self,
        idle_w: float = 60.0,
        sensor: str = "average",
        period: float = 0.1,
        counter: bool = True,
        noise_w: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.idle_w = idle_w
        self.sensor = sensor
        self.power_update_period_s = period
        self.has_counter = counter
        self.noise_w = noise_w
        self.rng = np.random.default_rng(seed)
        self.power_now = idle_w
        self.energy = 0.0  # true cumulative energy, J
        self._box_energy = 0.0  # energy at the last sensor update
        self._box_t = 0.0
        self._reading = idle_w
        self._instant = idle_w
        self._average_1s = idle_w
        self._history: collections.deque[tuple[float, float]] = collections.deque([(0.0, 0.0)])
        self.clock = VirtualClock(self._integrate)
        self.op = OperatingPoint(1410.0, None, 300.0)
        self.original = self.op
        self.restored = 0
        self.sync_calls = 0

    # true power --------------------------------------------------------------------------
    def _integrate(self, t0: float, t1: float) -> None:
        # Sensor updates happen at multiples of the period; integrate piecewise.
        t = t0
        while t < t1:
            next_update = (np.floor(t / self.power_update_period_s + 1e-9) + 1) * (
                self.power_update_period_s
            )
            step_end = min(t1, next_update)
            self.energy += self.power_now * (step_end - t)
            t = step_end
            if abs(t - next_update) < 1e-12:
                self._reading = (self.energy - self._box_energy) / (t - self._box_t)
                self._instant = self.power_now
                self._box_energy, self._box_t = self.energy, t
                # NVML's average_1s: the mean over the last second, refreshed each period
                self._history.append((t, self.energy))
                while len(self._history) > 1 and self._history[1][0] <= t - 1.0 + 1e-9:
                    self._history.popleft()
                t_old, e_old = self._history[0]
                if t > t_old:
                    self._average_1s = (self.energy - e_old) / (t - t_old)

    def busy(self, duration: float, power_w: float) -> None:
        self.power_now = power_w
        self.clock.advance(duration)
        self.power_now = self.idle_w

    def true_energy_j(self) -> float:
        return self.energy

    # Device protocol ---------------------------------------------------------------------
    def supported_sm_clocks_mhz(self) -> list[float]:
        return [1410.0, 1200.0, 1000.0]

    def supported_mem_clocks_mhz(self) -> list[float]:
        return [1593.0]

    def power_limit_range_w(self) -> tuple[float, float]:
        return (100.0, 400.0)

    def default_power_limit_w(self) -> float:
        return 300.0

    def current_operating_point(self) -> OperatingPoint:
        return self.op

    def set_operating_point(self, point: OperatingPoint) -> None:
        self.op = OperatingPoint(
            point.sm_clock_mhz or self.op.sm_clock_mhz,
            point.mem_clock_mhz or self.op.mem_clock_mhz,
            point.power_limit_w or self.op.power_limit_w,
        )

    def restore(self) -> None:
        self.op = self.original
        self.restored += 1

    def energy_counter_j(self) -> float | None:
        return self.energy if self.has_counter else None

    def power(self) -> PowerReading:
        value = {"instant": self._instant, "average_1s": self._average_1s}.get(
            self.sensor, self._reading
        )
        if self.noise_w:
            value += float(self.rng.normal(0.0, self.noise_w))
        return PowerReading(self.clock.now(), value, self.sensor)

    def synchronize(self) -> None:
        self.sync_calls += 1


@pytest.fixture
def fake_gpu() -> Callable[..., FakeGPU]:
    """Factory: ``fake_gpu(idle_w=60, sensor="average", counter=True, ...)``."""
    return FakeGPU


class WallFake:
    """A GPU on the wall clock drawing a constant power, with an exact energy counter
    (what ``eopt measure -- CMD`` needs: real commands are refused on virtual time)."""

    index = 0
    name = "wall0"
    model = "Wall Fake"

    def __init__(self, power_w: float = 150.0) -> None:
        self.clock = WallClock()
        self.power_w = power_w
        self.t0 = time.perf_counter()

    def energy_counter_j(self) -> float:
        return self.power_w * (time.perf_counter() - self.t0)

    def power(self) -> PowerReading:
        return PowerReading(time.perf_counter(), self.power_w, "instant")

    def synchronize(self) -> None:
        pass

    def current_operating_point(self) -> OperatingPoint:
        return OperatingPoint()

    def power_limit_range_w(self) -> tuple[float, float]:
        return (100.0, 400.0)


@pytest.fixture
def wall_gpu() -> Callable[..., WallFake]:
    """Factory: ``wall_gpu(power_w=150.0)``, a constant-power GPU on the wall clock."""
    return WallFake


@pytest.fixture(scope="session")
def nvml_fake_module() -> Any:
    """The stateful ``pynvml`` fake of the device tests (tests/devices/conftest.py): its
    ``FakeGpu`` and ``FakePynvml``, to patch in as ``eopt.devices.nvml.pynvml``."""
    path = Path(__file__).resolve().parents[1] / "devices" / "conftest.py"
    spec = importlib.util.spec_from_file_location("devices_fake_nvml", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module
