"""The device contract: what every GPU backend (NVML, simulated) offers.

Measurement (`eopt.measure`), sweeps and `eopt apply` talk to GPUs only through
:class:`Device` and :class:`Clock`, so the same code runs on a real GPU and on the
simulated one, whose time is virtual.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from eopt.model.operating_point import OperatingPoint

__all__ = [
    "BackendUnavailableError",
    "Clock",
    "Device",
    "DeviceError",
    "DevicePermissionError",
    "GpuInfo",
    "MeasureOnlyError",
    "PowerReading",
    "SensorReadError",
    "Timer",
    "WallClock",
]


class DeviceError(RuntimeError):
    """A device operation failed; the message says what to do."""


class BackendUnavailableError(DeviceError):
    """A backend cannot open any device here (no driver, no GPU, a library that fails).

    ``auto`` then falls back to the simulator; a backend asked for by name raises it.

    Attributes:
        fallback_reason: What ``auto`` says when it falls back: None for plain absence
            ("no GPU here"), else why a backend that is there could not be used.
    """

    def __init__(self, message: str, fallback_reason: str | None = None) -> None:
        super().__init__(message)
        self.fallback_reason = fallback_reason


class DevicePermissionError(DeviceError):
    """The driver refused this process: changing a setting needs root or CAP_SYS_ADMIN;
    a refused read (containers, vGPUs, MIG instances) stops even measure-only use."""


class MeasureOnlyError(DeviceError):
    """A setting was to be changed on a device opened measure-only (``control=False``)."""


class SensorReadError(DeviceError):
    """A sensor read failed, after retries, with an error the next read may not repeat.

    Meters treat it as a gap in the readings (and widen the error of windows across it)
    rather than as the end of the measurement; errors that will not go away (no
    permission, an unsupported sensor, a lost GPU) are other :class:`DeviceError` types.
    """


@dataclass(frozen=True)
class PowerReading:
    """One power sample.

    Attributes:
        time_s: When it was read, on the device's clock, in s.
        power_w: The reading, in W.
        field: Which source produced it, named by what it is: ``instant``, ``average_1s``
            (NVML's fields), ``usage_instant`` / ``usage_average_1s`` (NVML's power usage,
            a point reading or a 1 s average by architecture), the simulator's
            ``average`` …. One meter trace holds one field.
    """

    time_s: float
    power_w: float
    field: str


class Timer(Protocol):
    """A periodic callback started by :meth:`Clock.every`; ``cancel`` stops it."""

    def cancel(self) -> None:
        """Stop calling back; returns once no further call will start."""


class Clock(Protocol):
    """A time source. Real devices use wall time; the simulated GPU uses virtual time."""

    def now(self) -> float:
        """Monotonic time in s."""

    def sleep(self, duration_s: float) -> None:
        """Let ``duration_s`` pass (the simulated GPU idles meanwhile)."""

    def every(self, period_s: float, callback: Callable[[float], None]) -> Timer:
        """Call ``callback(now)`` every ``period_s`` until cancelled."""


@runtime_checkable
class Device(Protocol):
    """One GPU: its identity, operating-point control and sensors.

    Control methods change hardware state; every backend remembers the state it found at
    the first change and :meth:`restore` puts it back.

    Meters also read these attributes where a device has them: ``power_update_period_s``
    and ``energy_counter_period_s`` (refresh periods, s; a counter without one is taken as
    continuous), ``energy_counter_scope`` and ``power_scope`` (``gpu`` unless said, e.g.
    ``module`` for GH200's counter). A sensor read that may succeed next time raises
    :class:`SensorReadError`.
    """

    index: int
    name: str  # e.g. "gpu0" or "sim0"
    model: str  # e.g. "NVIDIA H200"
    clock: Clock

    # identity / capabilities
    def supported_sm_clocks_mhz(self) -> Sequence[float]:
        """SM clocks the device can be locked to, descending, in MHz."""

    def supported_mem_clocks_mhz(self) -> Sequence[float]:
        """Memory clocks, descending, in MHz."""

    def power_limit_range_w(self) -> tuple[float, float]:
        """(min, max) settable power limit, in W."""

    def default_power_limit_w(self) -> float:
        """The board's default power limit, in W."""

    # control
    def current_operating_point(self) -> OperatingPoint:
        """Read back the current device-wide setting."""

    def set_operating_point(self, point: OperatingPoint) -> None:
        """Apply the device-wide part of ``point`` (None fields are left alone).

        Raises:
            DevicePermissionError: without the rights to change settings.
            DeviceError: when a value is unsupported or did not take effect.
        """

    def restore(self) -> None:
        """Put back the state found before the first change (no-op if none)."""

    # sensors
    def energy_counter_j(self) -> float | None:
        """Cumulative energy since an arbitrary origin, in J; None where unsupported."""

    def power(self) -> PowerReading:
        """The current power reading (instantaneous where the device offers it)."""

    def synchronize(self) -> None:
        """Wait until queued work on the device has finished."""


class _ThreadTimer:
    def __init__(self, period_s: float, callback: Callable[[float], None]) -> None:
        self._period = period_s
        self._callback = callback
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="eopt-timer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_t = time.perf_counter()
        while not self._stop.is_set():
            self._callback(time.perf_counter())
            next_t += self._period
            delay = next_t - time.perf_counter()
            if delay < 0:  # fell behind: skip missed ticks rather than burst
                next_t = time.perf_counter()
                delay = 0.0
            self._stop.wait(delay)

    def cancel(self) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()


class WallClock:
    """Wall time (``time.perf_counter``); :meth:`every` runs a background thread."""

    def now(self) -> float:
        return time.perf_counter()

    def sleep(self, duration_s: float) -> None:
        if duration_s > 0:
            time.sleep(duration_s)

    def every(self, period_s: float, callback: Callable[[float], None]) -> Timer:
        if period_s <= 0:
            raise ValueError(f"timer period must be positive, got {period_s}")
        return _ThreadTimer(period_s, callback)


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as NVML lists it.

    Attributes:
        index: NVML index.
        uuid: ``GPU-…`` UUID.
        pci_bus_id: PCI bus id as NVML writes it (``00000000:3B:00.0``); None where NVML
            cannot say.
        name: Model name, e.g. ``NVIDIA H200``.
    """

    index: int
    uuid: str
    pci_bus_id: str | None
    name: str

    def label(self) -> str:
        """``gpu2 (NVIDIA H200, GPU-…, 00000000:3B:00.0)`` for messages."""
        bus = f", {self.pci_bus_id}" if self.pci_bus_id else ""
        return f"gpu{self.index} ({self.name}, {self.uuid}{bus})"
