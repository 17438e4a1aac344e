"""NVIDIA GPUs through NVML (``pynvml`` from ``nvidia-ml-py``): the only module that calls NVML.

Every NVML call goes through :func:`_call`, which turns ``NVMLError`` into
:class:`~eopt.devices.base.DeviceError` (or :class:`~eopt.devices.base.DevicePermissionError`)
with a message that says what to do. NVML speaks milliwatts and millijoules; this module
converts to W and J at the boundary, and nothing else in eopt sees mW.

Control (locked SM / memory clocks, power limit) remembers the state found before the
first change; :meth:`NvmlGPU.restore` puts it back — the ORIGINAL power limit, not the
maximum — and touches only what eopt changed. NVML cannot read back whether clocks were
locked before eopt started, so restoring a clock eopt locked means resetting the lock to
the driver's default (what ``nvidia-smi -rgc`` does); ``eopt reset`` after a killed run
resets both locks and the limit.

Example::

    gpu = NvmlGPU(0)
    gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200, power_limit_w=300))
    ...
    gpu.restore()
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import pynvml

from eopt.devices.base import (
    DeviceError,
    DevicePermissionError,
    MeasureOnlyError,
    PowerReading,
    WallClock,
)
from eopt.devices.operating_point import OperatingPoint

__all__ = [
    "NvmlGPU",
    "NvmlNotSupportedError",
    "device_count",
    "find_index_by_uuid",
]

T = TypeVar("T")

STATE_BACKEND = "nvml"
_LIMIT_TOLERANCE_W = 1.0  # boards round limits to whole watts
_CLOCK_TOLERANCE_MHZ = 0.5
_CLOCK_STEP_MHZ = 15.0  # clock tables step by 15 MHz on recent data-centre GPUs
_CLOCK_CHECKS = 5
_CLOCK_CHECK_INTERVAL_S = 0.02
_NO_RIGHTS_HINT = "run with sudo (or grant CAP_SYS_ADMIN), or use --no-control to measure only"
#: Assumed refresh period of NVML's power readings, in s: an assumption, not a documented
#: value (NVML does not state a refresh period per board or field);
#: ``eopt.measure.sensor_period.estimate_power_update_period`` measures it on a given GPU.
DEFAULT_POWER_UPDATE_PERIOD_S = 0.1


class NvmlNotSupportedError(DeviceError):
    """The GPU or driver does not support the requested NVML feature."""


def _translate(exc: pynvml.NVMLError, action: str) -> DeviceError:
    code = getattr(exc, "value", None)
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return DevicePermissionError(f"{action} needs root or CAP_SYS_ADMIN: {_NO_RIGHTS_HINT}")
    if code == pynvml.NVML_ERROR_NOT_SUPPORTED:
        return NvmlNotSupportedError(f"{action}: not supported by this GPU or driver")
    if code == pynvml.NVML_ERROR_INVALID_ARGUMENT:
        return DeviceError(f"{action}: the GPU rejected the value (invalid argument)")
    if code == pynvml.NVML_ERROR_GPU_IS_LOST:
        return DeviceError(f"{action}: the GPU has fallen off the bus; check dmesg and reboot")
    if code in (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_LIBRARY_NOT_FOUND):
        return DeviceError(
            f"{action}: the NVIDIA driver is not loaded; install it, or use --backend sim"
        )
    if code == pynvml.NVML_ERROR_UNINITIALIZED:
        return DeviceError(f"{action}: NVML is not initialised (internal error in eopt)")
    return DeviceError(f"{action} failed: {exc}")


def _call(action: str, fn: Callable[..., T], *args: Any) -> T:
    """Call an NVML function; NVML errors become eopt device errors naming ``action``."""
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        raise _translate(exc, action) from exc


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _init() -> None:
    _call("initialising NVML", pynvml.nvmlInit)


def device_count(raise_errors: bool = False) -> int:
    """Number of NVIDIA GPUs NVML sees; 0 when NVML is unavailable (unless ``raise_errors``).

    Raises:
        DeviceError: when ``raise_errors`` and NVML cannot start.
    """
    try:
        _init()
        return int(_call("counting GPUs", pynvml.nvmlDeviceGetCount))
    except DeviceError as exc:
        if raise_errors:
            if "--backend sim" in str(exc):
                raise
            raise DeviceError(f"{exc}; use --backend sim to run on the simulated GPU") from exc
        return 0


def find_index_by_uuid(uuid: str) -> int | None:
    """The NVML index of the GPU with ``uuid``, or None if no such GPU is present."""
    for index in range(device_count(raise_errors=True)):
        handle = _call(f"opening GPU {index}", pynvml.nvmlDeviceGetHandleByIndex, index)
        if _text(_call(f"reading GPU {index}'s UUID", pynvml.nvmlDeviceGetUUID, handle)) == uuid:
            return index
    return None


def _field_value(value: Any) -> float:
    kind = value.valueType
    v = value.value
    if kind == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return float(v.dVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return float(v.ulVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return float(v.ullVal)
    if kind == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return float(v.sllVal)
    if kind == pynvml.NVML_VALUE_TYPE_SIGNED_INT:
        return float(v.siVal)
    return float(v.uiVal)


class NvmlGPU:
    """One NVIDIA GPU (implements the ``Device`` protocol).

    Args:
        index: NVML device index.
        control: False opens the GPU measure-only: every setter raises
            :class:`~eopt.devices.base.MeasureOnlyError` and nothing is ever changed.

    Attributes:
        notes: Things eopt skipped or noticed (e.g. memory-clock locking unsupported).
        power_update_period_s: How often the power reading refreshes, in s. An assumption
            (:data:`DEFAULT_POWER_UPDATE_PERIOD_S`) until set from a measurement, e.g.
            ``gpu.power_update_period_s = estimate_power_update_period(gpu).period_s``
            (``eopt.measure.sensor_period``); meters poll at a fraction of it.
    """

    backend = STATE_BACKEND
    power_update_period_s: float = DEFAULT_POWER_UPDATE_PERIOD_S

    def __init__(self, index: int, control: bool = True) -> None:
        _init()
        count = int(_call("counting GPUs", pynvml.nvmlDeviceGetCount))
        if not 0 <= index < count:
            raise DeviceError(f"there is no GPU {index}: NVML sees {count} (indices 0–{count - 1})")
        self.index = index
        self.name = f"gpu{index}"
        self.control = control
        self.clock = WallClock()
        self.notes: list[str] = []
        self._handle = _call(f"opening GPU {index}", pynvml.nvmlDeviceGetHandleByIndex, index)
        self.model = _text(self._nvml("reading the name", pynvml.nvmlDeviceGetName))
        self.uuid = _text(self._nvml("reading the UUID", pynvml.nvmlDeviceGetUUID))
        self._original: dict[str, Any] | None = None
        self._changed: set[str] = set()  # what eopt touched: "sm", "mem", "limit"
        self._locked_sm: float | None = None
        self._locked_mem: float | None = None
        self._energy_supported: bool | None = None
        self._power_source: str | None = None

    def __repr__(self) -> str:
        return f"NvmlGPU({self.index}, model={self.model!r})"

    def _nvml(self, action: str, fn: Callable[..., T], *args: Any) -> T:
        model = getattr(self, "model", "")
        where = f"{self.name} ({model})" if model else self.name
        return _call(f"{action} on {where}", fn, self._handle, *args)

    # ------------------------------------------------------------------ identity
    @functools.cached_property
    def _mem_clocks(self) -> list[float]:
        clocks = self._nvml("reading the memory clocks", pynvml.nvmlDeviceGetSupportedMemoryClocks)
        return sorted((float(c) for c in clocks), reverse=True)

    def supported_mem_clocks_mhz(self) -> Sequence[float]:
        """Supported memory clocks, descending, in MHz."""
        return list(self._mem_clocks)

    @functools.cached_property
    def _sm_clocks(self) -> list[float]:
        mem = self._mem_clocks[0] if self._mem_clocks else 0
        clocks = self._nvml(
            "reading the SM clocks", pynvml.nvmlDeviceGetSupportedGraphicsClocks, int(mem)
        )
        return sorted((float(c) for c in clocks), reverse=True)

    def supported_sm_clocks_mhz(self) -> Sequence[float]:
        """SM clocks the GPU can be locked to (at the top memory clock), descending, in MHz."""
        return list(self._sm_clocks)

    def power_limit_range_w(self) -> tuple[float, float]:
        """(min, max) settable power limit, in W."""
        lo, hi = self._nvml(
            "reading the power-limit range", pynvml.nvmlDeviceGetPowerManagementLimitConstraints
        )
        return (lo / 1000.0, hi / 1000.0)

    def default_power_limit_w(self) -> float:
        """The board's default power limit, in W."""
        return (
            self._nvml(
                "reading the default power limit", pynvml.nvmlDeviceGetPowerManagementDefaultLimit
            )
            / 1000.0
        )

    def power_limit_w(self) -> float:
        """The current power-management limit, in W."""
        return (
            self._nvml("reading the power limit", pynvml.nvmlDeviceGetPowerManagementLimit) / 1000.0
        )

    # ------------------------------------------------------------------ control
    def current_operating_point(self) -> OperatingPoint:
        """Clocks locked by eopt (None where not locked by it) and the current power limit."""
        return OperatingPoint(self._locked_sm, self._locked_mem, self.power_limit_w())

    def snapshot_state(self) -> dict[str, Any]:
        """The state to restore (found before eopt's first change), JSON-ready."""
        if self._original is not None:
            return dict(self._original)
        return {
            "backend": STATE_BACKEND,
            "index": self.index,
            "uuid": self.uuid,
            "model": self.model,
            "host": socket.gethostname(),
            "power_limit_w": self.power_limit_w(),
        }

    def _require_control(self, what: str) -> None:
        if not self.control:
            raise MeasureOnlyError(
                f"{self.name} was opened measure-only (--no-control): not {what}; "
                "nothing was changed"
            )

    def set_operating_point(self, point: OperatingPoint) -> None:
        """Lock clocks and set the power limit of ``point`` (None fields are left alone).

        The limit is read back and must match; a locked SM clock is checked against the
        clock the GPU reports (it may run lower when idle or throttled, never higher).

        Raises:
            MeasureOnlyError: when opened with ``control=False``.
            DevicePermissionError: without root / CAP_SYS_ADMIN.
            DeviceError: for an unsupported value, or a setting that did not take.
        """
        self._require_control(f"setting {point.label()}")
        if point.sm_clock_mhz is not None:
            self._check_supported(point.sm_clock_mhz, self._sm_clocks, "SM")
        if point.mem_clock_mhz is not None:
            self._check_supported(point.mem_clock_mhz, self._mem_clocks, "memory")
        if point.power_limit_w is not None:
            lo, hi = self.power_limit_range_w()
            if not lo - 1e-6 <= point.power_limit_w <= hi + 1e-6:
                raise DeviceError(
                    f"{self.name} ({self.model}): power limit {point.power_limit_w:g} W is "
                    f"outside the settable range {lo:g}–{hi:g} W"
                )
        if self._original is None:
            self._original = self.snapshot_state()
        if point.sm_clock_mhz is not None:
            self._lock_sm(point.sm_clock_mhz)
        if point.mem_clock_mhz is not None:
            self._lock_mem(point.mem_clock_mhz)
        if point.power_limit_w is not None:
            self._set_limit(point.power_limit_w)

    def _check_supported(self, value: float, table: Sequence[float], what: str) -> None:
        if not table:
            return
        nearest = min(table, key=lambda c: abs(c - value))
        if abs(nearest - value) > _CLOCK_TOLERANCE_MHZ:
            raise DeviceError(
                f"{self.name} ({self.model}) does not support {what} clock {value:g} MHz "
                f"(supported: {min(table):g}–{max(table):g} MHz; nearest: {nearest:g} MHz)"
            )

    def _lock_sm(self, mhz: float) -> None:
        f = round(mhz)
        self._changed.add("sm")
        self._nvml(f"locking the SM clock at {f} MHz", pynvml.nvmlDeviceSetGpuLockedClocks, f, f)
        self._locked_sm = float(f)
        # An idle or throttled GPU may run below the lock; above it means it did not take.
        # The clock settles within milliseconds, so look a few times before concluding.
        for attempt in range(_CLOCK_CHECKS):
            current = self._nvml(
                "reading the SM clock", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM
            )
            if float(current) <= f + _CLOCK_STEP_MHZ:
                return
            if attempt + 1 < _CLOCK_CHECKS:
                time.sleep(_CLOCK_CHECK_INTERVAL_S)
        raise DeviceError(
            f"{self.name} ({self.model}): locked the SM clock at {f} MHz but it runs at "
            f"{current} MHz; the lock did not take (another tool may manage clocks)"
        )

    def _lock_mem(self, mhz: float) -> None:
        f = round(mhz)
        self._changed.add("mem")
        try:
            self._nvml(
                f"locking the memory clock at {f} MHz", pynvml.nvmlDeviceSetMemoryLockedClocks, f, f
            )
        except NvmlNotSupportedError:
            self.notes.append(
                f"{self.name}: memory-clock locking is not supported; memory clock left "
                "to the driver"
            )
            return
        self._locked_mem = float(f)

    def _set_limit(self, watts: float) -> None:
        self._changed.add("limit")
        milliwatts = round(watts * 1000.0)
        self._nvml(
            f"setting the power limit to {watts:g} W",
            pynvml.nvmlDeviceSetPowerManagementLimit,
            milliwatts,
        )
        actual = self.power_limit_w()
        if abs(actual - watts) > _LIMIT_TOLERANCE_W:
            raise DeviceError(
                f"{self.name} ({self.model}): set the power limit to {watts:g} W but the GPU "
                f"reports {actual:g} W; the limit did not take (is another tool managing it?)"
            )

    def restore(self) -> None:
        """Put back the state found before the first change (no-op if nothing changed).

        Raises:
            DeviceError: listing every step that failed; run ``eopt reset`` then.
        """
        if self._original is None:
            return
        self.restore_from_state(self._original, parts=tuple(sorted(self._changed)))
        self._original = None
        self._changed.clear()
        self._locked_sm = None
        self._locked_mem = None

    def restore_from_state(
        self, state: Mapping[str, Any], parts: Sequence[str] = ("limit", "mem", "sm")
    ) -> list[str]:
        """Apply a saved state (see :meth:`snapshot_state`): reset clock locks, set the limit.

        Used by :meth:`restore` (only the ``parts`` eopt changed) and by ``eopt reset``
        (everything: a killed run cannot say what it had changed).

        Args:
            state: A :meth:`snapshot_state` mapping (``power_limit_w`` is used).
            parts: Which of ``"sm"``, ``"mem"`` (clock locks) and ``"limit"`` to restore.

        Returns:
            What was done, one line each.

        Raises:
            DeviceError: listing every step that failed.
        """
        self._require_control("restoring saved settings")
        done: list[str] = []
        failures: list[str] = []
        if "sm" in parts:
            try:
                self._nvml("resetting the locked SM clock", pynvml.nvmlDeviceResetGpuLockedClocks)
                done.append(f"{self.name}: SM clock lock reset")
            except DeviceError as exc:
                failures.append(str(exc))
        if "mem" in parts:
            try:
                self._nvml(
                    "resetting the locked memory clock", pynvml.nvmlDeviceResetMemoryLockedClocks
                )
                done.append(f"{self.name}: memory clock lock reset")
            except NvmlNotSupportedError:
                pass  # nothing can have been locked
            except DeviceError as exc:
                failures.append(str(exc))
        limit = state.get("power_limit_w")
        if "limit" in parts and limit is not None:
            try:
                self._set_limit(float(limit))
                done.append(f"{self.name}: power limit back to {float(limit):g} W")
            except DeviceError as exc:
                failures.append(str(exc))
        if failures:
            raise DeviceError(
                f"restoring {self.name} failed: " + "; ".join(failures) + " — run `eopt reset`"
            )
        return done

    # ------------------------------------------------------------------ sensors
    def energy_counter_j(self) -> float | None:
        """Total energy since the driver loaded (mJ → J); None where unsupported (pre-Volta)."""
        if self._energy_supported is False:
            return None
        try:
            mj = self._nvml(
                "reading the energy counter", pynvml.nvmlDeviceGetTotalEnergyConsumption
            )
        except NvmlNotSupportedError:
            self._energy_supported = False
            return None
        self._energy_supported = True
        return mj / 1000.0

    def _field_w(self, field_id: int) -> float | None:
        try:
            values = pynvml.nvmlDeviceGetFieldValues(self._handle, [field_id])
        except pynvml.NVMLError:
            return None
        value = values[0]
        if value.nvmlReturn != pynvml.NVML_SUCCESS:
            return None
        return _field_value(value) / 1000.0

    def power(self) -> PowerReading:
        """Board power: the instant field where offered, else the 1 s average, else the
        legacy ``nvmlDeviceGetPowerUsage`` (which of them is recorded in ``field``)."""
        now = self.clock.now()
        if self._power_source in (None, "instant"):
            watts = self._field_w(pynvml.NVML_FI_DEV_POWER_INSTANT)
            if watts is not None:
                self._power_source = "instant"
                return PowerReading(now, watts, "instant")
        if self._power_source in (None, "average_1s"):
            watts = self._field_w(pynvml.NVML_FI_DEV_POWER_AVERAGE)
            if watts is not None:
                self._power_source = "average_1s"
                return PowerReading(now, watts, "average_1s")
        self._power_source = "usage"
        mw = self._nvml("reading the power", pynvml.nvmlDeviceGetPowerUsage)
        return PowerReading(now, mw / 1000.0, "usage")

    def power_fields(self) -> dict[str, PowerReading]:
        """Every power field this GPU offers: ``instant``, ``average_1s`` and ``usage``."""
        now = self.clock.now()
        out: dict[str, PowerReading] = {}
        for name, field_id in (
            ("instant", pynvml.NVML_FI_DEV_POWER_INSTANT),
            ("average_1s", pynvml.NVML_FI_DEV_POWER_AVERAGE),
        ):
            watts = self._field_w(field_id)
            if watts is not None:
                out[name] = PowerReading(now, watts, name)
        mw = self._nvml("reading the power", pynvml.nvmlDeviceGetPowerUsage)
        out["usage"] = PowerReading(now, mw / 1000.0, "usage")
        return out

    def synchronize(self) -> None:
        """No-op: the user's callable synchronises its own framework (CUDA, PyTorch …)."""
