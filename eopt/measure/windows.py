"""Energy of a block of Python code, measured in-process (no ``eopt measure`` around it).

A measurement window brackets code and reports the GPUs' energy over it::

    from eopt.measure import window

    with window("train") as w:
        train_one_epoch()
        torch.cuda.synchronize()  # GPU work is asynchronous: let it finish inside
    print(w.energy_j, w.time_s, w.mean_power_w, w.backend, w.method)
    print(w.per_device[0].energy_j)

For code that is not one block, windows are opened and closed by name::

    begin_window("epoch")
    ...
    result = end_window("epoch")

Windows may nest and overlap; each is measured on its own. Devices are opened once per
process and selection (an :class:`EnergyMonitor`, like Zeus's ``ZeusMonitor``), measure-only:
no window ever changes a clock or a power limit. Meters live while at least one window of
their monitor is open, so a loop of windows neither reopens NVML nor lets traces grow
without bound.

Which backend measures: NVML where a GPU is present (its energy counter where the GPU has
one — exact at the window's edges — else a power sampler, whose window ends wait two sensor
periods for the readings after the edge), otherwise the simulated GPU. The simulated GPU
runs on virtual time and sees only simulated kernels launched on the window's devices
(:attr:`Window.devices`); real Python work inside the window costs it nothing. That is
said once per process on stderr.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from eopt.devices.backends import backend_of
from eopt.devices.base import Device
from eopt.measure.meter import Meter, MeterMethod, WindowEnergy

__all__ = [
    "DeviceEnergy",
    "EnergyMonitor",
    "Window",
    "WindowError",
    "WindowResult",
    "begin_window",
    "end_window",
    "monitor",
    "reset_monitors",
    "window",
]

#: ``"all"`` GPUs, or their indices.
GpuSelection = Literal["all"] | Sequence[int]
SyncFn = Callable[[], object]

SIM_WINDOW_NOTE = (
    "eopt.measure.window: the GPU is simulated ({model}, eopt sim): windows run on its "
    "virtual clock and count only simulated kernels launched on Window.devices, not real "
    "GPU work."
)


class WindowError(RuntimeError):
    """A window was misused: ended twice, never begun, begun twice, read while open."""


@dataclass(frozen=True)
class DeviceEnergy:
    """One device's share of a window.

    Attributes:
        index: The GPU index (NVML index, or the simulated GPU's index).
        name: The device's name (``gpu0``, ``sim0``).
        model: Its model.
        energy_j: Energy over the window, in J.
        time_s: The window's length on this device's clock, in s.
        start_s: Start on the device's clock, in s.
        end_s: End on the device's clock, in s.
        error_j: The meter's integration-error estimate, in J (0 on the counter path).
        method: ``counter`` or ``sampler``.
        field: The sensor field read (``energy_counter`` or a power field name).
        short: True when the window is shorter than ten sensor update periods (on the
            sampler path, ``error_j`` then matters).
    """

    index: int
    name: str
    model: str
    energy_j: float
    time_s: float
    start_s: float
    end_s: float
    error_j: float
    method: str
    field: str
    short: bool

    @property
    def mean_power_w(self) -> float:
        """E / T, in W (0 for an empty window)."""
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "index": self.index,
            "name": self.name,
            "model": self.model,
            "energy_j": self.energy_j,
            "time_s": self.time_s,
            "mean_power_w": self.mean_power_w,
            "error_j": self.error_j,
            "method": self.method,
            "field": self.field,
            "short": self.short,
        }


@dataclass(frozen=True)
class WindowResult:
    """The energy of one closed window.

    Attributes:
        name: The window's name.
        backend: ``nvml`` or ``sim`` (or the class name of a device passed in directly).
        method: ``counter``, ``sampler``, or ``counter+sampler`` when devices differ.
        per_device: Per-device energy, keyed by GPU index (read-only).
    """

    name: str
    backend: str
    method: str
    per_device: Mapping[int, DeviceEnergy]

    @property
    def energy_j(self) -> float:
        """Energy of all the window's devices, in J."""
        return sum(d.energy_j for d in self.per_device.values())

    @property
    def time_s(self) -> float:
        """The window's length, in s (the longest of the per-device spans, which differ only
        by the time it takes to read the devices one after another)."""
        return max(d.time_s for d in self.per_device.values())

    @property
    def error_j(self) -> float:
        """Summed integration-error estimates of the devices, in J."""
        return sum(d.error_j for d in self.per_device.values())

    @property
    def mean_power_w(self) -> float:
        """Total energy over the window's length, in W (0 for an empty window)."""
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (``schema: eopt.window/1``)."""
        return {
            "schema": "eopt.window/1",
            "name": self.name,
            "backend": self.backend,
            "method": self.method,
            "energy_j": self.energy_j,
            "time_s": self.time_s,
            "mean_power_w": self.mean_power_w,
            "error_j": self.error_j,
            "devices": [d.to_dict() for d in self.per_device.values()],
        }


@dataclass(eq=False)
class Window:
    """An open or closed window: what :func:`window` yields and :func:`begin_window`
    returns. Energy and time are readable once it has ended.

    Attributes:
        name: The window's name.
        monitor: The monitor measuring it.
        result: The measurement, once ended (None while open).
    """

    name: str
    monitor: EnergyMonitor
    _starts: dict[int, float] = field(repr=False)
    _sync: SyncFn | None = field(default=None, repr=False)
    result: WindowResult | None = None
    _ended: bool = field(default=False, repr=False)

    @property
    def open(self) -> bool:
        """Whether the window has not ended yet."""
        return self.result is None

    @property
    def devices(self) -> tuple[Device, ...]:
        """The devices measured (on the simulator: launch simulated kernels on these)."""
        return self.monitor.devices

    @property
    def backend(self) -> str:
        """``nvml`` or ``sim``."""
        return self.monitor.backend

    def _closed(self) -> WindowResult:
        if self.result is None:
            raise WindowError(
                f"window {self.name!r} is still open: its energy is known once it ends "
                "(after the with block, or from end_window)"
            )
        return self.result

    @property
    def method(self) -> str:
        """``counter`` or ``sampler`` (see :attr:`WindowResult.method`)."""
        return self._closed().method

    @property
    def energy_j(self) -> float:
        """Energy of all the window's devices, in J."""
        return self._closed().energy_j

    @property
    def time_s(self) -> float:
        """The window's length, in s."""
        return self._closed().time_s

    @property
    def mean_power_w(self) -> float:
        """Total energy over the window's length, in W."""
        return self._closed().mean_power_w

    @property
    def error_j(self) -> float:
        """Summed integration-error estimates, in J."""
        return self._closed().error_j

    @property
    def per_device(self) -> Mapping[int, DeviceEnergy]:
        """Per-device energy, keyed by GPU index."""
        return self._closed().per_device


def _indices(gpus: GpuSelection) -> tuple[int, ...] | None:
    """``None`` for all GPUs, else the indices, checked."""
    if isinstance(gpus, str):
        if gpus != "all":
            raise ValueError(f"gpus must be 'all' or a sequence of GPU indices, got {gpus!r}")
        return None
    try:
        indices = tuple(int(i) for i in gpus)
    except TypeError:
        raise ValueError(f"gpus must be 'all' or a sequence of GPU indices, got {gpus!r}") from None
    if not indices:
        raise ValueError("gpus is empty: name at least one GPU index, or 'all'")
    if len(set(indices)) != len(indices) or min(indices) < 0:
        raise ValueError(f"gpus must be distinct non-negative indices, got {list(indices)}")
    return indices


_announce_lock = threading.Lock()
_announced_sim = False


def _announce_simulated(model: str) -> None:
    """Say once per process, on stderr, that windows measure a simulated GPU."""
    global _announced_sim
    with _announce_lock:
        if _announced_sim:
            return
        _announced_sim = True
    print(SIM_WINDOW_NOTE.format(model=model), file=sys.stderr)


class EnergyMonitor:
    """Opens devices once (measure-only) and measures any number of windows on them.

    Args:
        gpus: ``"all"`` or the GPU indices to measure.
        backend: ``"auto"`` (NVML where a GPU is present, else the simulated GPU),
            ``"nvml"`` or ``"sim"``.
        method: Meter method: ``auto`` (the energy counter where the GPU has one),
            ``counter`` or ``sampler``.
        devices: Devices to measure instead of opening them (``gpus`` and ``backend`` are
            then ignored); the caller keeps them measure-only if it wants that guarantee.

    Raises:
        ValueError: for a bad ``gpus``, ``backend`` or ``method``.
        DeviceError: when NVML was asked for and is unavailable, or an index is out of range.
    """

    def __init__(
        self,
        gpus: GpuSelection = "all",
        *,
        backend: str = "auto",
        method: MeterMethod = "auto",
        devices: Sequence[Device] | None = None,
    ) -> None:
        if method not in ("auto", "counter", "sampler"):
            raise ValueError(f"meter method must be auto, counter or sampler, got {method!r}")
        if devices is None:
            from eopt.devices import open_devices

            indices = _indices(gpus)
            # control=False: every setter raises, so no window can change a GPU's state.
            devices = open_devices(
                backend, indices=list(indices) if indices is not None else None, control=False
            )
        if not devices:
            raise ValueError("no devices to measure")
        self.devices: tuple[Device, ...] = tuple(devices)
        self.backend = backend_of(self.devices[0])
        self.method: MeterMethod = method
        self._lock = threading.Lock()
        self._meters: tuple[Meter, ...] | None = None
        self._open_count = 0
        self._named: dict[str, Window] = {}
        if self.backend == "sim":
            _announce_simulated(self.devices[0].model)

    def __repr__(self) -> str:
        names = ", ".join(d.name for d in self.devices)
        return f"EnergyMonitor([{names}], backend={self.backend!r})"

    # meters ------------------------------------------------------------------------------
    def _acquire_meters(self) -> tuple[Meter, ...]:
        """The live meters (made when the first open window needs them); caller holds the
        lock and counts the window as open."""
        if self._meters is None:
            meters = tuple(Meter(d, method=self.method) for d in self.devices)
            for meter in meters:
                # The counter is read at both edges of every window, which is exact; only
                # the sampler needs a poller between them.
                if meter.method == "sampler":
                    meter.start()
            self._meters = meters
        self._open_count += 1
        return self._meters

    def _release_meters(self) -> None:
        """One window fewer; the last one stops and drops the meters, so their traces
        do not grow across a loop of windows. Caller holds the lock."""
        self._open_count -= 1
        if self._open_count == 0 and self._meters is not None:
            for meter in self._meters:
                meter.stop()
            self._meters = None

    def _synchronize(self, sync: SyncFn | None) -> None:
        if sync is not None:
            sync()  # the framework's queue (CUDA streams …): NVML devices cannot see it
        for device in self.devices:
            device.synchronize()  # the simulator's queue; a no-op on NVML

    # windows -----------------------------------------------------------------------------
    def begin(self, name: str, *, sync: SyncFn | None = None) -> Window:
        """Open an anonymous window (ended by :meth:`end`); names need not be unique.

        Args:
            name: A label for the window.
            sync: Called at both edges before the devices are read, e.g.
                ``torch.cuda.synchronize``, so queued GPU work lands on the right side.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"window name must be a non-empty string, got {name!r}")
        self._synchronize(sync)
        with self._lock:
            meters = self._acquire_meters()
            try:
                starts = {d.index: m.mark() for d, m in zip(self.devices, meters, strict=True)}
            except BaseException:
                self._release_meters()  # a window that never opened holds no meters
                raise
        return Window(name, self, starts, sync)

    def end(self, win: Window) -> WindowResult:
        """Close ``win`` and measure it.

        Raises:
            WindowError: when ``win`` has ended already or belongs to another monitor.
        """
        if win.monitor is not self:
            raise WindowError(f"window {win.name!r} was begun on another monitor")
        with self._lock:
            if win._ended:
                raise WindowError(f"window {win.name!r} has already ended")
            win._ended = True  # under the lock: two threads cannot both end it
            meters = self._meters
            assert meters is not None  # the open window holds them
        try:
            self._synchronize(win._sync)
            with self._lock:
                ends = {d.index: m.mark() for d, m in zip(self.devices, meters, strict=True)}
            # Outside the lock: a sampler waits for the readings after the edge, and other
            # threads' windows need not wait with it. The open count keeps the meters alive.
            per_device = {
                d.index: _device_energy(
                    d, m.energy(win._starts[d.index], ends[d.index]), win._starts[d.index]
                )
                for d, m in zip(self.devices, meters, strict=True)
            }
        finally:
            with self._lock:
                self._release_meters()
        methods = sorted({d.method for d in per_device.values()})
        win.result = WindowResult(
            name=win.name,
            backend=self.backend,
            method="+".join(methods),
            per_device=MappingProxyType(per_device),
        )
        return win.result

    @contextlib.contextmanager
    def window(self, name: str, *, sync: SyncFn | None = None) -> Iterator[Window]:
        """Measure the ``with`` block; the window is measured even when the block raises
        (the work ran, and spent energy)."""
        win = self.begin(name, sync=sync)
        try:
            yield win
        finally:
            self.end(win)

    def begin_window(self, name: str, *, sync: SyncFn | None = None) -> Window:
        """Open the window named ``name`` (ended by :meth:`end_window` with that name).

        Raises:
            WindowError: when a window of that name is open already.
        """
        with self._lock:
            if name in self._named:
                raise WindowError(
                    f"window {name!r} is already open; end it with end_window({name!r}) "
                    "first, or give the new window another name"
                )
            # Reserve the name before marking, so two threads cannot both begin it.
            self._named[name] = _RESERVED
        try:
            win = self.begin(name, sync=sync)
        except BaseException:
            with self._lock:
                del self._named[name]
            raise
        with self._lock:
            self._named[name] = win
        return win

    def end_window(self, name: str) -> WindowResult:
        """Close the window named ``name`` and measure it.

        Raises:
            WindowError: when no window of that name is open.
        """
        with self._lock:
            win = self._named.get(name)
            if win is None or win is _RESERVED:
                open_names = sorted(n for n, w in self._named.items() if w is not _RESERVED)
                raise WindowError(
                    f"no open window named {name!r} (open: {open_names or 'none'}); "
                    f"begin_window({name!r}) first"
                )
            del self._named[name]
        return self.end(win)

    def open_windows(self) -> list[str]:
        """Names of the windows begun with :meth:`begin_window` and not yet ended."""
        with self._lock:
            return sorted(n for n, w in self._named.items() if w is not _RESERVED)


_RESERVED: Any = object()  # a name being begun, not yet a Window


def _device_energy(device: Device, got: WindowEnergy, start_s: float) -> DeviceEnergy:
    return DeviceEnergy(
        index=device.index,
        name=device.name,
        model=device.model,
        energy_j=got.energy_j,
        time_s=got.duration_s,
        start_s=start_s,
        end_s=start_s + got.duration_s,
        error_j=got.error_j,
        method=got.method,
        field=got.field,
        short=got.short,
    )


# The module-level API ---------------------------------------------------------------------
_monitors: dict[tuple[str, tuple[int, ...] | None, str], EnergyMonitor] = {}
_named_monitors: dict[str, EnergyMonitor] = {}  # begin_window's name → its monitor
_module_lock = threading.Lock()


def monitor(
    gpus: GpuSelection = "all", *, backend: str = "auto", method: MeterMethod = "auto"
) -> EnergyMonitor:
    """The process's monitor for this selection, opened on first use and kept.

    Raises:
        ValueError: for a bad ``gpus``, ``backend`` or ``method``.
        DeviceError: when NVML was asked for and is unavailable, or an index is out of range.
    """
    indices = _indices(gpus)
    with _module_lock:
        mon = _monitors.get((backend, indices, method))
        if mon is None:
            mon = EnergyMonitor(gpus, backend=backend, method=method)
            # "auto" resolves to a backend: one set of devices per backend, so that the
            # simulated GPUs of window(...) and window(..., backend="sim") are the same.
            mon = _monitors.setdefault((mon.backend, indices, method), mon)
            _monitors[(backend, indices, method)] = mon
        return mon


def reset_monitors() -> None:
    """Forget every module-level monitor (devices are reopened on next use).

    Raises:
        WindowError: while a window begun with :func:`begin_window` is still open.
    """
    with _module_lock:
        if _named_monitors:
            raise WindowError(f"windows still open: {sorted(_named_monitors)}; end them first")
        _monitors.clear()


@contextlib.contextmanager
def window(
    name: str,
    *,
    gpus: GpuSelection = "all",
    backend: str = "auto",
    sync: SyncFn | None = None,
) -> Iterator[Window]:
    """Measure the GPUs' energy over a ``with`` block.

    Example::

        with window("train") as w:
            train()
        w.energy_j, w.time_s, w.per_device[0].energy_j, w.backend, w.method

    Args:
        name: A label (need not be unique; nested and overlapping windows are independent).
        gpus: ``"all"`` or the GPU indices to measure.
        backend: ``"auto"`` (NVML where a GPU is present, else the simulated GPU),
            ``"nvml"`` or ``"sim"``.
        sync: Called at both edges before the devices are read (e.g.
            ``torch.cuda.synchronize``), so queued GPU work lands inside the window.

    Yields:
        The :class:`Window`; its energy, time and per-device values are set when the block
        ends, also when it raises.
    """
    with monitor(gpus, backend=backend).window(name, sync=sync) as win:
        yield win


def begin_window(
    name: str,
    *,
    gpus: GpuSelection = "all",
    backend: str = "auto",
    sync: SyncFn | None = None,
) -> Window:
    """Open a window named ``name``, to be closed by :func:`end_window`.

    Args:
        name: The window's name, unique among the windows open through this function.
        gpus: ``"all"`` or the GPU indices to measure.
        backend: ``"auto"``, ``"nvml"`` or ``"sim"`` (see :func:`window`).
        sync: Called at both edges before the devices are read (see :func:`window`).

    Returns:
        The open window (its values are set when it ends).

    Raises:
        WindowError: when a window of that name is open already.
    """
    with _module_lock:
        if name in _named_monitors:
            raise WindowError(
                f"window {name!r} is already open; end it with end_window({name!r}) first, "
                "or give the new window another name"
            )
        # Reserve the name before opening devices, so two threads cannot both begin it.
        _named_monitors[name] = _RESERVED
    try:
        mon = monitor(gpus, backend=backend)
        win = mon.begin_window(name, sync=sync)
    except BaseException:
        with _module_lock:
            del _named_monitors[name]
        raise
    with _module_lock:
        _named_monitors[name] = mon
    return win


def end_window(name: str) -> WindowResult:
    """Close the window named ``name`` (opened by :func:`begin_window`) and measure it.

    Raises:
        WindowError: when no window of that name is open.
    """
    with _module_lock:
        mon = _named_monitors.get(name)
        if mon is None or mon is _RESERVED:
            open_names = sorted(n for n, m in _named_monitors.items() if m is not _RESERVED)
            raise WindowError(
                f"no open window named {name!r} (open: {open_names or 'none'}); "
                f"begin_window({name!r}) first"
            )
        del _named_monitors[name]
    return mon.end_window(name)
