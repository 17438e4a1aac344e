"""NVIDIA GPUs through NVML (``pynvml`` from ``nvidia-ml-py``): the only module that calls NVML.

Every NVML call goes through :func:`_call`, which turns ``NVMLError`` into
:class:`~eopt.devices.base.DeviceError` (or a subclass) with a message that says what to
do. NVML speaks milliwatts and millijoules; this module converts to W and J at the
boundary, and nothing else in eopt sees mW.

Control (locked SM / memory clocks, power limit) remembers the state found before the
first change; :meth:`NvmlGPU.restore` puts it back — the ORIGINAL power limit, not the
maximum — and touches only what eopt changed (a change counts once NVML accepted it).
NVML cannot read back whether clocks were locked before eopt started, so restoring a clock
eopt locked means resetting the lock to the driver's default (what ``nvidia-smi -rgc``
does). So that this never wipes an administrator's lock, eopt looks for one first
(:meth:`NvmlGPU.preexisting_clock_settings`, from the clocks-event reasons) and refuses to
lock clocks over it. ``eopt reset`` after a killed run resets both locks and the limit.

What NVML really does, and what eopt does about it:

- Some GPUs (laptops, some vGPUs) have no power management: no limit to read or set.
  Snapshots and operating points then carry no limit; only asking for one fails.
- A GPU in MIG mode is shared by its instances: eopt refuses to change its settings
  (:class:`MigModeError`) and measures the whole GPU.
- Old drivers lack newer functions (``FUNCTION_NOT_FOUND``): treated as unsupported.
- The power limit NVML accepted is not always the one it enforces (another limit may
  win): the enforced one is checked after every change.
- ``nvmlDeviceGetPowerUsage`` is a 1 s average on Ampere and newer except GA100 and a
  point reading before: its readings are labelled ``usage_average_1s`` or
  ``usage_instant`` accordingly. :meth:`NvmlGPU.power` picks one source once and keeps
  it, retrying a failed read and raising :class:`~eopt.devices.base.SensorReadError`
  (a gap, to a meter) rather than switching source mid-trace.
- The energy counter refreshes on its own period (:attr:`NvmlGPU.energy_counter_period_s`),
  and on GH200 it counts the whole module while the power fields count the GPU
  (:attr:`NvmlGPU.energy_counter_scope`).

Example::

    gpu = NvmlGPU(resolve_gpu("cuda:0"))      # eopt.devices.gpu_select.resolve_gpu
    print(gpu.persistence_note())
    gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200, power_limit_w=300))
    ...
    gpu.restore()
"""

from __future__ import annotations

import functools
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from eopt.devices.base import (
    BackendUnavailableError,
    Clock,
    DeviceError,
    DevicePermissionError,
    GpuInfo,
    MeasureOnlyError,
    PowerReading,
    SensorReadError,
    WallClock,
)
from eopt.model.operating_point import OperatingPoint

__all__ = [
    "DEFAULT_ENERGY_COUNTER_PERIOD_S",
    "DEFAULT_POWER_UPDATE_PERIOD_S",
    "AdminClockSettingError",
    "ClockSettingsFound",
    "MigModeError",
    "NvmlGPU",
    "NvmlNotSupportedError",
    "NvmlStartError",
    "device_count",
    "find_index_by_uuid",
    "list_gpus",
    "mig_parent_index",
    "persistence_explanation",
]

T = TypeVar("T")

STATE_BACKEND = "nvml"
_LIMIT_TOLERANCE_W = 1.0  # boards round limits to whole watts
_CLOCK_TOLERANCE_MHZ = 0.5
_CLOCK_STEP_MHZ = 15.0  # clock tables step by 15 MHz on recent data-centre GPUs
_MEM_TOLERANCE = 0.01  # memory clocks read back within 1 % of the table's value
_SETTLE_S = 0.25  # how long a clock lock may take to show in the clock reading, s
_SETTLE_POLL_S = 0.01
_READ_ATTEMPTS = 3  # a sensor read is tried this often before it counts as failed
_RETRY_PAUSE_S = 0.002
_NO_RIGHTS_HINT = (
    "run eopt with sudo (or grant CAP_SYS_ADMIN); a sweep can instead measure without "
    "changing settings (eopt sweep --no-control)"
)
_NO_READ_HINT = (
    "NVML refused this process permission to read it. This is not about root: even "
    "measure-only use needs this read. Containers, vGPUs and MIG instances often hide "
    "these sensors: measure on the host (or a whole GPU), or use --backend sim"
)
#: Assumed refresh period of NVML's power readings, in s: an assumption, not a documented
#: value (NVML does not state a refresh period per board or field);
#: ``eopt.measure.sensor_period.estimate_power_update_period`` measures it on a given GPU.
DEFAULT_POWER_UPDATE_PERIOD_S = 0.1
#: Assumed refresh period of the energy counter, in s. The counter moves in steps tens of
#: milliseconds apart (windows shorter than a step can read 0 J); NVML does not state the
#: period, so eopt assumes the longer 100 ms until measured
#: (``estimate_power_update_period(gpu, read=gpu.energy_counter_j)``).
DEFAULT_ENERGY_COUNTER_PERIOD_S = 0.1

# NVML errors that retrying will not cure: the sensor is missing, refused or gone.
_PERMANENT = frozenset(
    {
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_INVALID_ARGUMENT,
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    }
)

# Clocks-event ("throttle") reason bits, as nvml.h defines them (stable across versions;
# pynvml renamed the constants from ClocksThrottleReason* to ClocksEventReason*).
_REASONS = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}


class NvmlNotSupportedError(DeviceError):
    """The GPU or driver does not support the requested NVML feature (or an old driver
    lacks the function for it)."""


class NvmlStartError(BackendUnavailableError):
    """NVML cannot start or talk to the driver.

    Attributes:
        driver_missing: True when there is no NVIDIA driver or NVML library at all (no
            NVIDIA GPU here); False when they are there but broken (e.g. a version
            mismatch after a driver upgrade).
    """

    def __init__(self, message: str, driver_missing: bool = False) -> None:
        # A broken driver is worth saying when `auto` falls back; a missing one is not.
        reason = None if driver_missing else message.split("; use --backend sim")[0]
        super().__init__(message, fallback_reason=reason)
        self.driver_missing = driver_missing


class MigModeError(DeviceError):
    """Settings of a GPU in MIG mode were to be changed (eopt refuses)."""


class AdminClockSettingError(DeviceError):
    """Clocks were to be locked over a lock someone else set, which restoring would wipe."""


def _translate(exc: pynvml.NVMLError, action: str, write: bool = False) -> DeviceError:
    code = getattr(exc, "value", None)
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        if write:
            return DevicePermissionError(f"{action} needs root or CAP_SYS_ADMIN: {_NO_RIGHTS_HINT}")
        return DevicePermissionError(f"{action}: {_NO_READ_HINT}")
    if code == pynvml.NVML_ERROR_NOT_SUPPORTED:
        return NvmlNotSupportedError(f"{action}: not supported by this GPU or driver")
    if code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
        return NvmlNotSupportedError(
            f"{action}: this NVIDIA driver is too old to have the NVML function for it "
            "(treated as unsupported; a newer driver may offer it)"
        )
    if code == pynvml.NVML_ERROR_INVALID_ARGUMENT:
        return DeviceError(f"{action}: the GPU rejected the value (invalid argument)")
    if code == pynvml.NVML_ERROR_GPU_IS_LOST:
        return DeviceError(f"{action}: the GPU has fallen off the bus; check dmesg and reboot")
    if code in (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_LIBRARY_NOT_FOUND):
        return NvmlStartError(
            f"{action}: the NVIDIA driver is not loaded; install it, or use --backend sim",
            driver_missing=True,
        )
    if code == pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return NvmlStartError(
            f"{action}: the NVML library and the loaded NVIDIA kernel driver are different "
            "versions (usually a driver upgrade without a reboot); reboot, or reload the "
            "nvidia kernel modules"
        )
    if code == pynvml.NVML_ERROR_UNINITIALIZED:
        return DeviceError(f"{action}: NVML is not initialised (internal error in eopt)")
    return DeviceError(f"{action} failed: {exc}")


def _call(action: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
    """Call an NVML function; NVML errors become eopt device errors naming ``action``.

    ``write`` marks calls that change a setting: a permission error then means "needs
    root", while on a read it means the sensor is hidden from this process.
    """
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        raise _translate(exc, action, write) from exc


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _init() -> None:
    try:
        _call("initialising NVML", pynvml.nvmlInit)
    except NvmlStartError:
        raise
    except DeviceError as exc:  # anything else that stops NVML starting is a start error
        raise NvmlStartError(str(exc)) from exc.__cause__


def device_count(raise_errors: bool = False) -> int:
    """Number of NVIDIA GPUs NVML sees; 0 when NVML is unavailable (unless ``raise_errors``).

    Raises:
        NvmlStartError: when ``raise_errors`` and NVML cannot start (its ``driver_missing``
            tells "no NVIDIA driver here" from "a driver that is broken").
    """
    try:
        _init()
        return int(_call("counting GPUs", pynvml.nvmlDeviceGetCount))
    except DeviceError as exc:
        if not raise_errors:
            return 0
        missing = getattr(exc, "driver_missing", False)
        if "--backend sim" in str(exc):
            raise NvmlStartError(str(exc), missing) from exc
        raise NvmlStartError(
            f"{exc}; use --backend sim to run on the simulated GPU", missing
        ) from exc


def open_backend(
    indices: Sequence[int] | None, *, control: bool, sim_model: str, seed: int
) -> list[NvmlGPU]:
    """The NVML GPUs at ``indices`` (all when None): the ``nvml`` backend's opener.

    ``sim_model`` and ``seed`` are the simulator's and unused here.

    Raises:
        NvmlStartError: when NVML cannot start.
        BackendUnavailableError: when NVML works but sees no GPU.
    """
    del sim_model, seed
    count = device_count(raise_errors=True)
    if count == 0:
        raise BackendUnavailableError(
            "NVML works but reports no GPU; use --backend sim to simulate one"
        )
    wanted = list(range(count)) if indices is None else list(indices)
    if control:
        from eopt.devices.guard import warn_if_stale

        warn_if_stale()  # a killed run may have left these GPUs changed
    return [NvmlGPU(i, control=control) for i in wanted]


def find_index_by_uuid(uuid: str) -> int | None:
    """The NVML index of the GPU with ``uuid``, or None if no such GPU is present."""
    for index in range(device_count(raise_errors=True)):
        handle = _call(f"opening GPU {index}", pynvml.nvmlDeviceGetHandleByIndex, index)
        if _text(_call(f"reading GPU {index}'s UUID", pynvml.nvmlDeviceGetUUID, handle)) == uuid:
            return index
    return None


def list_gpus() -> list[GpuInfo]:
    """Every GPU NVML lists: index, UUID, PCI bus id and name (for ``resolve_gpu``).

    Raises:
        NvmlStartError: when NVML cannot start.
    """
    out = []
    for index in range(device_count(raise_errors=True)):
        handle = _call(f"opening GPU {index}", pynvml.nvmlDeviceGetHandleByIndex, index)
        uuid = _text(_call(f"reading GPU {index}'s UUID", pynvml.nvmlDeviceGetUUID, handle))
        name = _text(_call(f"reading GPU {index}'s name", pynvml.nvmlDeviceGetName, handle))
        try:
            info = _call(f"reading GPU {index}'s PCI info", pynvml.nvmlDeviceGetPciInfo, handle)
            bus: str | None = _text(info.busId) or None
        except NvmlNotSupportedError:
            bus = None
        out.append(GpuInfo(index, uuid, bus, name))
    return out


def mig_parent_index(mig_uuid: str) -> int | None:
    """The NVML index of the GPU that holds MIG instance ``mig_uuid``; None if none does."""
    device_count(raise_errors=True)
    try:
        handle = _call(f"finding {mig_uuid}", pynvml.nvmlDeviceGetHandleByUUID, mig_uuid)
        parent = _call(
            f"finding {mig_uuid}'s GPU",
            pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle,
            handle,
        )
        return int(_call(f"reading {mig_uuid}'s GPU index", pynvml.nvmlDeviceGetIndex, parent))
    except DeviceError:
        return None  # not found, or not a MIG instance: the caller names what is there


def persistence_explanation(enabled: bool | None) -> str:
    """One line saying what persistence mode means for settings eopt leaves in place.

    Args:
        enabled: :meth:`NvmlGPU.persistence_mode`'s answer (None: unknown).
    """
    if enabled is True:
        return (
            "persistence mode is on: the driver keeps the GPU initialised, so settings "
            "left in place stay until `eopt reset`, a reboot or a driver reload"
        )
    if enabled is False:
        return (
            "persistence mode is off: when the last process using the GPU exits, the driver "
            "may tear the GPU down and lose clock locks and power limits, so settings left "
            "in place after eopt exits can vanish before the job starts; enable it "
            "(`sudo nvidia-smi -pm 1` or the nvidia-persistenced daemon), or keep eopt "
            "running for the job (eopt apply --until-exit)"
        )
    return (
        "persistence mode is unknown (NVML cannot report it here): settings left in place "
        "after eopt exits may be lost whenever no process holds the GPU"
    )


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


@dataclass(frozen=True)
class ClockSettingsFound:
    """Clock settings in force that someone other than this eopt process made.

    NVML cannot read a locked clock range back; what it offers are the clocks-event
    reasons (why the clocks are where they are) and the applications clocks. This is
    what they show, best effort: a lock holding an idle GPU shows no reason at all.

    Attributes:
        reasons: Active clocks-event reasons (``applications_clocks_setting``,
            ``sw_power_cap``, ``gpu_idle`` …), or None when NVML cannot report them.
        applications_clocks_mhz: (SM, memory) applications clocks when they differ from
            the defaults (``nvidia-smi -ac``; eopt never resets them), else None.
        lock_suspected: NVML reports the clocks held by a clock setting while the
            applications clocks allow more: most likely a locked range (``nvidia-smi
            -lgc`` / ``-lmc``), which restoring eopt's own lock would reset.
        findings: One line per finding, for messages.
    """

    reasons: frozenset[str] | None
    applications_clocks_mhz: tuple[float, float] | None
    lock_suspected: bool
    findings: tuple[str, ...]


class NvmlGPU:
    """One NVIDIA GPU (implements the ``Device`` protocol).

    Args:
        index: NVML index (see :func:`eopt.devices.gpu_select.resolve_gpu` to find the GPU
            a CUDA process uses).
        control: False opens the GPU measure-only: every setter raises
            :class:`~eopt.devices.base.MeasureOnlyError` and nothing is ever changed.
        clock: Time source (default: wall time; tests pass a controlled one).
        override_admin_locks: Lock clocks even where a lock set by someone else is
            suspected (:meth:`preexisting_clock_settings`); restoring then resets it to
            the driver default.

    Raises:
        MigModeError: opening a GPU in MIG mode with ``control=True``.
        DeviceError: for an index NVML does not have.

    Attributes:
        notes: Things eopt noticed (e.g. a suspected administrator's lock it overrode).
        power_update_period_s: How often the power reading refreshes, in s. An assumption
            (:data:`DEFAULT_POWER_UPDATE_PERIOD_S`) until set from a measurement, e.g.
            ``gpu.power_update_period_s = estimate_power_update_period(gpu).period_s``
            (``eopt.measure.sensor_period``); meters poll at a fraction of it.
        energy_counter_period_s: How often the energy counter refreshes, in s (an
            assumption, :data:`DEFAULT_ENERGY_COUNTER_PERIOD_S`, until measured the same
            way with ``read=gpu.energy_counter_j``). Meters charge each window edge
            power × this period of uncertainty.
        energy_counter_scope: What the energy counter counts: ``gpu``, or ``module`` on
            GH200 (the whole superchip module, not just the GPU). Power readings are ``gpu``
            (:attr:`power_scope`); meters do not mix the two.
    """

    backend = STATE_BACKEND
    #: NVML cannot see CUDA streams: ``synchronize`` returns at once (see ``--sync``).
    synchronize_waits = False
    power_update_period_s: float = DEFAULT_POWER_UPDATE_PERIOD_S
    energy_counter_period_s: float = DEFAULT_ENERGY_COUNTER_PERIOD_S
    power_scope = "gpu"

    def __init__(
        self,
        index: int,
        control: bool = True,
        *,
        clock: Clock | None = None,
        override_admin_locks: bool = False,
    ) -> None:
        _init()
        count = int(_call("counting GPUs", pynvml.nvmlDeviceGetCount))
        if not 0 <= index < count:
            raise DeviceError(f"there is no GPU {index}: NVML sees {count} (indices 0–{count - 1})")
        self.index = index
        self.name = f"gpu{index}"
        self.control = control
        self.override_admin_locks = override_admin_locks
        self.clock: Clock = clock if clock is not None else WallClock()
        self.notes: list[str] = []
        self._handle = _call(f"opening GPU {index}", pynvml.nvmlDeviceGetHandleByIndex, index)
        self.model = _text(self._nvml("reading the name", pynvml.nvmlDeviceGetName))
        self.uuid = _text(self._nvml("reading the UUID", pynvml.nvmlDeviceGetUUID))
        # GH200's counter counts the superchip module; its power fields only the GPU.
        self.energy_counter_scope = "module" if "GH200" in self.model.upper() else "gpu"
        self._original: dict[str, Any] | None = None
        self._changed: set[str] = set()  # what eopt changed: "sm", "mem", "limit"
        self._locked_sm: float | None = None
        self._locked_mem: float | None = None
        self._energy_supported: bool | None = None
        self._power_source: tuple[str, Callable[[], float]] | None = None
        self._source_lock = threading.Lock()
        self._sm_tables: dict[float, list[float]] = {}
        if control and self.mig_enabled():
            raise MigModeError(
                f"{self.name} ({self.model}) is in MIG mode: eopt does not change its "
                "settings, because clock locks and power limits act on the whole physical "
                "GPU, under every MIG instance (other users' work too). Open it "
                "measure-only (control=False; eopt sweep --no-control); energy and power "
                "are then the whole GPU's, not one instance's"
            )

    def __repr__(self) -> str:
        return f"NvmlGPU({self.index}, model={self.model!r})"

    def _where(self) -> str:
        model = getattr(self, "model", "")
        return f"{self.name} ({model})" if model else self.name

    def _nvml(self, action: str, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        return _call(f"{action} on {self._where()}", fn, self._handle, *args, write=write)

    def _read(self, action: str, fn: Callable[..., T], *args: Any) -> T:
        """A sensor read, retried on errors that may pass (a busy driver, a timeout).

        Raises:
            SensorReadError: when every attempt failed with such an error.
            DeviceError: at once, for an error retrying cannot cure (no permission,
                unsupported, GPU lost …).
        """
        last: pynvml.NVMLError | None = None
        for attempt in range(_READ_ATTEMPTS):
            try:
                return fn(self._handle, *args)
            except pynvml.NVMLError as exc:
                if getattr(exc, "value", None) in _PERMANENT:
                    raise _translate(exc, f"{action} on {self._where()}") from exc
                last = exc
            if attempt + 1 < _READ_ATTEMPTS:
                self.clock.sleep(_RETRY_PAUSE_S)
        raise SensorReadError(
            f"{action} on {self._where()} failed {_READ_ATTEMPTS} times in a row ({last}); "
            "the next reading may succeed"
        ) from last

    # ------------------------------------------------------------------ identity
    @functools.cached_property
    def _mem_clocks(self) -> list[float]:
        try:
            clocks = self._nvml(
                "reading the memory clocks", pynvml.nvmlDeviceGetSupportedMemoryClocks
            )
        except NvmlNotSupportedError:
            return []  # no clock tables: nothing to check against, nothing to lock
        return sorted((float(c) for c in clocks), reverse=True)

    def supported_mem_clocks_mhz(self) -> Sequence[float]:
        """Supported memory clocks, descending, in MHz."""
        return list(self._mem_clocks)

    def _sm_table(self, mem_mhz: float) -> list[float]:
        if mem_mhz not in self._sm_tables:
            try:
                clocks = self._nvml(
                    f"reading the SM clocks at memory clock {mem_mhz:g} MHz",
                    pynvml.nvmlDeviceGetSupportedGraphicsClocks,
                    int(mem_mhz),
                )
            except NvmlNotSupportedError:
                clocks = []
            self._sm_tables[mem_mhz] = sorted((float(c) for c in clocks), reverse=True)
        return list(self._sm_tables[mem_mhz])

    def supported_sm_clocks_mhz(self, mem_clock_mhz: float | None = None) -> Sequence[float]:
        """SM clocks the GPU can be locked to, descending, in MHz.

        Args:
            mem_clock_mhz: At this memory clock (the valid SM clocks differ by memory
                clock); default the top one, where the driver runs memory under load.
        """
        if mem_clock_mhz is None:
            mem_clock_mhz = self._mem_clocks[0] if self._mem_clocks else 0.0
        return self._sm_table(float(mem_clock_mhz))

    def supported_clocks_mhz(self) -> dict[float, list[float]]:
        """Every memory clock (MHz) with the SM clocks (MHz, descending) valid at it."""
        return {mem: self._sm_table(mem) for mem in self._mem_clocks}

    def power_limit_range_w(self) -> tuple[float, float]:
        """(min, max) settable power limit, in W.

        Raises:
            NvmlNotSupportedError: on a GPU without power management.
        """
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
        """The requested power-management limit, in W (see :meth:`enforced_power_limit_w`).

        Raises:
            NvmlNotSupportedError: on a GPU without power management.
        """
        return (
            self._nvml("reading the power limit", pynvml.nvmlDeviceGetPowerManagementLimit) / 1000.0
        )

    def _power_limit_or_none(self) -> float | None:
        try:
            return self.power_limit_w()
        except NvmlNotSupportedError:
            return None  # no power management (laptops, some vGPUs): no limit to keep

    def sm_clock_mhz(self) -> float | None:
        """The SM clock the GPU runs at now, in MHz (None where the driver cannot say)."""
        return self._clock_now("reading the SM clock", pynvml.NVML_CLOCK_SM)

    def mem_clock_mhz(self) -> float | None:
        """The memory clock the GPU runs at now, in MHz (None where the driver cannot say)."""
        return self._clock_now("reading the memory clock", pynvml.NVML_CLOCK_MEM)

    def _clock_now(self, action: str, kind: int) -> float | None:
        try:
            value = self._nvml(action, pynvml.nvmlDeviceGetClockInfo, kind)
        except NvmlNotSupportedError:
            return None
        return float(value) if isinstance(value, (int, float)) else None

    def enforced_power_limit_w(self) -> float | None:
        """The limit the GPU enforces, in W: the lowest of every limit set on it (this
        one, another tool's, a system cap); None where the driver cannot say."""
        try:
            mw = self._nvml(
                "reading the enforced power limit", pynvml.nvmlDeviceGetEnforcedPowerLimit
            )
        except NvmlNotSupportedError:
            return None
        # Anything but a number (a stand-in module, a future binding's structure) is not
        # an answer: unknown, rather than a limit that fails every check.
        return mw / 1000.0 if isinstance(mw, (int, float)) else None

    def persistence_mode(self) -> bool | None:
        """Whether persistence mode is on; None where NVML cannot tell (e.g. Windows).

        :func:`persistence_explanation` says what it means for settings left in place.
        """
        try:
            mode = self._nvml("reading the persistence mode", pynvml.nvmlDeviceGetPersistenceMode)
        except NvmlNotSupportedError:
            return None
        return mode == pynvml.NVML_FEATURE_ENABLED

    def persistence_note(self) -> str:
        """``gpu0: persistence mode is off: …`` — one line for the user."""
        return f"{self.name}: {persistence_explanation(self.persistence_mode())}"

    def mig_enabled(self) -> bool | None:
        """Whether the GPU is in MIG mode now; False for GPUs (or drivers) without MIG,
        None when NVML refuses to say."""
        try:
            modes = self._nvml("reading the MIG mode", pynvml.nvmlDeviceGetMigMode)
        except NvmlNotSupportedError:
            return False
        except DevicePermissionError:
            return None
        return modes[0] == pynvml.NVML_DEVICE_MIG_ENABLE  # (current, pending after reset)

    def clocks_event_reasons(self) -> frozenset[str] | None:
        """Why the clocks are where they are now (``gpu_idle``, ``sw_power_cap``,
        ``applications_clocks_setting`` …); None where the driver cannot say."""
        # The newer name first; drivers before it only have the "throttle" one.
        for name in (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        ):
            fn = getattr(pynvml, name, None)
            if fn is None:
                continue
            try:
                mask = int(self._nvml("reading the clocks-event reasons", fn))
            except NvmlNotSupportedError:
                continue
            return frozenset(label for bit, label in _REASONS.items() if mask & bit)
        return None

    def _clock_pair(self, fn: Callable[..., Any]) -> tuple[float, float] | None:
        try:
            return (
                float(self._nvml("reading a clock", fn, pynvml.NVML_CLOCK_SM)),
                float(self._nvml("reading a clock", fn, pynvml.NVML_CLOCK_MEM)),
            )
        except DeviceError:
            return None  # removed from newer drivers, or refused: nothing to compare

    def preexisting_clock_settings(self) -> ClockSettingsFound:
        """What NVML shows of clock settings made before eopt (best effort; see
        :class:`ClockSettingsFound`). Reads only."""
        try:
            reasons = self.clocks_event_reasons()
        except DeviceError:
            reasons = None
        app = self._clock_pair(pynvml.nvmlDeviceGetApplicationsClock)
        default = self._clock_pair(pynvml.nvmlDeviceGetDefaultApplicationsClock)
        findings: list[str] = []
        app_changed = None
        if app is not None and default is not None and app != default:
            app_changed = app
            findings.append(
                f"applications clocks are {app[0]:g}/{app[1]:g} MHz (SM/memory), not the "
                f"default {default[0]:g}/{default[1]:g} MHz (nvidia-smi -ac); eopt leaves them"
            )
        suspected = False
        if reasons is not None and "applications_clocks_setting" in reasons:
            try:
                top = float(
                    self._nvml(
                        "reading the top SM clock",
                        pynvml.nvmlDeviceGetMaxClockInfo,
                        pynvml.NVML_CLOCK_SM,
                    )
                )
            except DeviceError:
                top = None
            # Applications clocks below the top explain the reason by themselves (V100's
            # defaults do); at the top, only a locked range is left to hold the clocks.
            if app is None or top is None or app[0] >= top:
                suspected = True
                findings.append(
                    "NVML reports the clocks held down by a clock setting while the "
                    "applications clocks allow the top clock: most likely a locked clock "
                    "range (nvidia-smi -lgc or -lmc), which NVML cannot read back"
                )
        return ClockSettingsFound(reasons, app_changed, suspected, tuple(findings))

    # ------------------------------------------------------------------ control
    def current_operating_point(self) -> OperatingPoint:
        """Clocks locked by eopt (None where not locked by it) and the current power limit
        (None on a GPU without power management)."""
        return OperatingPoint(self._locked_sm, self._locked_mem, self._power_limit_or_none())

    def snapshot_state(self) -> dict[str, Any]:
        """The state to restore (found before eopt's first change), JSON-ready.

        ``power_limit_w`` is None on a GPU without power management.
        """
        if self._original is not None:
            return dict(self._original)
        return {
            "backend": STATE_BACKEND,
            "index": self.index,
            "uuid": self.uuid,
            "model": self.model,
            "host": socket.gethostname(),
            "power_limit_w": self._power_limit_or_none(),
        }

    def _require_control(self, what: str) -> None:
        if not self.control:
            raise MeasureOnlyError(
                f"{self.name} was opened measure-only (--no-control): not {what}; "
                "nothing was changed"
            )

    def _mem_for(self, point: OperatingPoint) -> float:
        """The memory clock the SM clock of ``point`` will run with: the one asked for,
        else eopt's lock, else the top one (where the driver runs memory under load)."""
        if point.mem_clock_mhz is not None:
            return float(point.mem_clock_mhz)
        if self._locked_mem is not None:
            return self._locked_mem
        return self._mem_clocks[0] if self._mem_clocks else 0.0

    def set_operating_point(self, point: OperatingPoint) -> None:
        """Lock clocks and set the power limit of ``point`` (None fields are left alone).

        Everything is checked before anything changes: the SM clock against the table of
        the memory clock it will run with, the memory clock, the limit's range, and
        whether someone else's clock lock would be wiped. After each change the GPU is
        read back: the locked clocks (an idle or throttled GPU may run lower, never
        higher) and the power limit, both as requested and as enforced.

        Raises:
            MeasureOnlyError: when opened with ``control=False``.
            DevicePermissionError: without root / CAP_SYS_ADMIN.
            NvmlNotSupportedError: when the GPU cannot do what was asked (memory-clock
                locking, power limits without power management).
            AdminClockSettingError: when clocks would be locked over a lock someone else
                set (see ``override_admin_locks``).
            DeviceError: for an unsupported value, or a setting that did not take.
        """
        self._require_control(f"setting {point.label()}")
        if point.mem_clock_mhz is not None:
            self._check_supported(point.mem_clock_mhz, self._mem_clocks, "memory")
        if point.sm_clock_mhz is not None:
            mem = self._mem_for(point)
            self._check_supported(
                point.sm_clock_mhz, self._sm_table(mem), "SM", f" at memory clock {mem:g} MHz"
            )
        if point.power_limit_w is not None:
            try:
                lo, hi = self.power_limit_range_w()
            except NvmlNotSupportedError as exc:
                raise NvmlNotSupportedError(
                    f"{self._where()} has no power management: its power limit cannot be "
                    f"set; leave the power limit out ({exc})"
                ) from exc
            if not lo - 1e-6 <= point.power_limit_w <= hi + 1e-6:
                raise DeviceError(
                    f"{self._where()}: power limit {point.power_limit_w:g} W is "
                    f"outside the settable range {lo:g}–{hi:g} W"
                )
        locking = (point.sm_clock_mhz is not None and "sm" not in self._changed) or (
            point.mem_clock_mhz is not None and "mem" not in self._changed
        )
        if locking:
            self._check_admin_locks()
        if self._original is None:
            self._original = self.snapshot_state()
        # Memory first: the SM clock was checked against the new memory clock's table.
        if point.mem_clock_mhz is not None:
            self._lock_mem(point.mem_clock_mhz)
        if point.sm_clock_mhz is not None:
            self._lock_sm(point.sm_clock_mhz)
        if point.power_limit_w is not None:
            self._set_limit(point.power_limit_w)

    def _check_admin_locks(self) -> None:
        found = self.preexisting_clock_settings()
        if not found.lock_suspected:
            return
        detail = "; ".join(found.findings)
        if self.override_admin_locks:
            self.notes.append(
                f"{self.name}: {detail}; locking anyway (override_admin_locks): restoring "
                "resets the clocks to the driver default"
            )
            return
        raise AdminClockSettingError(
            f"{self._where()}: not locking clocks: {detail}. eopt cannot read a locked "
            "range back, so restoring its own lock would reset the clocks to the driver "
            "default and wipe that setting. Ask whoever set it, or clear it yourself "
            "(sudo nvidia-smi -rgc / -rmc) first; or measure without changing settings "
            "(eopt sweep --no-control)"
        )

    def _check_supported(
        self, value: float, table: Sequence[float], what: str, where: str = ""
    ) -> None:
        if not table:
            return
        nearest = min(table, key=lambda c: abs(c - value))
        if abs(nearest - value) > _CLOCK_TOLERANCE_MHZ:
            raise DeviceError(
                f"{self._where()} does not support {what} clock {value:g} MHz{where} "
                f"(supported: {min(table):g}–{max(table):g} MHz; nearest: {nearest:g} MHz)"
            )

    def _settle(self, read: Callable[[], float], ok: Callable[[float], bool]) -> float | None:
        """Read a clock until ``ok`` holds (None then) or the settle time ran out (the
        last reading then). A lock can take a moment to show."""
        deadline = self.clock.now() + _SETTLE_S
        while True:
            current = read()
            if ok(current):
                return None
            if self.clock.now() >= deadline:
                return current
            self.clock.sleep(_SETTLE_POLL_S)

    def _reasons_text(self) -> str:
        try:
            reasons = self.clocks_event_reasons()
        except DeviceError:
            reasons = None
        return (
            f" (clocks-event reasons: {', '.join(sorted(reasons)) or 'none'})"
            if reasons is not None
            else ""
        )

    def _lock_sm(self, mhz: float) -> None:
        f = round(mhz)
        self._nvml(
            f"locking the SM clock at {f} MHz",
            pynvml.nvmlDeviceSetGpuLockedClocks,
            f,
            f,
            write=True,
        )
        # Only now is there something to restore: marking it before the call made a
        # refused lock "restore" too, and that restore's error replaced the real one.
        self._changed.add("sm")
        self._locked_sm = float(f)

        def read() -> float:
            return float(
                self._nvml(
                    "reading the SM clock", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM
                )
            )

        # An idle or throttled GPU may run below the lock; above it means it did not take.
        above = self._settle(read, lambda c: c <= f + _CLOCK_STEP_MHZ)
        if above is not None:
            raise DeviceError(
                f"{self._where()}: locked the SM clock at {f} MHz but it runs at "
                f"{above:g} MHz after {_SETTLE_S:g} s{self._reasons_text()}; the lock did "
                "not take (another tool may manage clocks)"
            )

    def _lock_mem(self, mhz: float) -> None:
        f = round(mhz)
        try:
            self._nvml(
                f"locking the memory clock at {f} MHz",
                pynvml.nvmlDeviceSetMemoryLockedClocks,
                f,
                f,
                write=True,
            )
        except NvmlNotSupportedError as exc:
            raise NvmlNotSupportedError(
                f"{self._where()}: memory-clock locking is not supported by this GPU or "
                "driver; leave the memory clock out of the operating point (the driver then "
                "manages it)"
            ) from exc
        self._changed.add("mem")
        self._locked_mem = float(f)

        def read() -> float:
            return float(
                self._nvml(
                    "reading the memory clock", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM
                )
            )

        above = self._settle(read, lambda c: c <= f * (1 + _MEM_TOLERANCE))
        if above is not None:
            raise DeviceError(
                f"{self._where()}: locked the memory clock at {f} MHz but it runs at "
                f"{above:g} MHz after {_SETTLE_S:g} s; the lock did not take"
            )

    def _set_limit(self, watts: float, check_enforced: bool = True) -> None:
        milliwatts = round(watts * 1000.0)
        self._nvml(
            f"setting the power limit to {watts:g} W",
            pynvml.nvmlDeviceSetPowerManagementLimit,
            milliwatts,
            write=True,
        )
        self._changed.add("limit")  # accepted: from here on there is a limit to restore
        actual = self.power_limit_w()
        if abs(actual - watts) > _LIMIT_TOLERANCE_W:
            raise DeviceError(
                f"{self._where()}: set the power limit to {watts:g} W but the GPU "
                f"reports {actual:g} W; the limit did not take (is another tool managing it?)"
            )
        if not check_enforced:
            return
        enforced = self.enforced_power_limit_w()
        if enforced is not None and abs(enforced - watts) > _LIMIT_TOLERANCE_W:
            raise DeviceError(
                f"{self._where()}: the GPU accepted a power limit of {watts:g} W but "
                f"enforces {enforced:g} W: another limit (another tool's, the BMC's or a "
                "system power cap) wins, so this setting has no effect here"
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
        (everything: a killed run cannot say what it had changed). A lock the GPU or
        driver cannot reset (unsupported, or a driver too old for the function) cannot
        have been set either, and is skipped.

        Args:
            state: A :meth:`snapshot_state` mapping (``power_limit_w`` is used; None for
                a GPU without power management).
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
                self._nvml(
                    "resetting the locked SM clock",
                    pynvml.nvmlDeviceResetGpuLockedClocks,
                    write=True,
                )
                done.append(f"{self.name}: SM clock lock reset")
            except NvmlNotSupportedError:
                pass  # nothing can have been locked
            except DeviceError as exc:
                failures.append(str(exc))
        if "mem" in parts:
            try:
                self._nvml(
                    "resetting the locked memory clock",
                    pynvml.nvmlDeviceResetMemoryLockedClocks,
                    write=True,
                )
                done.append(f"{self.name}: memory clock lock reset")
            except NvmlNotSupportedError:
                pass  # nothing can have been locked
            except DeviceError as exc:
                failures.append(str(exc))
        limit = state.get("power_limit_w")
        if "limit" in parts and limit is not None:
            try:
                # The saved limit is what was requested before; another limit may be the
                # enforced one, and that is not eopt's to change.
                self._set_limit(float(limit), check_enforced=False)
                done.append(f"{self.name}: power limit back to {float(limit):g} W")
            except DeviceError as exc:
                failures.append(str(exc))
        if failures:
            raise DeviceError(
                f"restoring {self.name} failed: " + "; ".join(failures) + " — run `eopt reset`"
            )
        return done

    # ------------------------------------------------------------------ sensors
    def temperature_c(self) -> float | None:
        """The GPU die temperature, in °C; None where the driver does not report it.

        The entry context (paper §3.1) a measurement records: heat left by earlier work.
        """
        try:
            return float(
                self._nvml(
                    "reading the temperature",
                    pynvml.nvmlDeviceGetTemperature,
                    pynvml.NVML_TEMPERATURE_GPU,
                )
            )
        except (NvmlNotSupportedError, AttributeError):
            return None

    def energy_counter_j(self) -> float | None:
        """Total energy since the driver loaded (mJ → J); None where unsupported (pre-Volta).

        The value moves in steps :attr:`energy_counter_period_s` apart and, on GH200,
        counts the module (:attr:`energy_counter_scope`).

        Raises:
            SensorReadError: when a counter that worked fails several reads in a row.
            DevicePermissionError: when NVML refuses the read.
        """
        if self._energy_supported is False:
            return None
        try:
            mj = self._read(
                "reading the energy counter", pynvml.nvmlDeviceGetTotalEnergyConsumption
            )
        except NvmlNotSupportedError as exc:
            if self._energy_supported:
                # It worked before: a counter does not go away, so this read failed.
                raise SensorReadError(f"{exc} (it answered before)") from exc
            self._energy_supported = False
            return None
        self._energy_supported = True
        return mj / 1000.0

    def _read_field(self, field_id: int, label: str) -> float:
        """One power field, in W (retried; see :meth:`_read`)."""

        def get(handle: Any) -> float:
            value = pynvml.nvmlDeviceGetFieldValues(handle, [field_id])[0]
            if value.nvmlReturn != pynvml.NVML_SUCCESS:
                # A per-field failure: the same classes of error as a failed call.
                raise pynvml.NVMLError(value.nvmlReturn)
            return _field_value(value)

        return self._read(f"reading the {label} power field", get) / 1000.0

    def _read_usage(self) -> float:
        return self._read("reading the power", pynvml.nvmlDeviceGetPowerUsage) / 1000.0

    @functools.cached_property
    def _usage_label(self) -> str:
        """What ``nvmlDeviceGetPowerUsage`` is on this GPU: NVML documents a 1 s average
        on Ampere and newer except GA100 (compute capability 8.0), a point reading before."""
        try:
            major, minor = self._nvml(
                "reading the compute capability", pynvml.nvmlDeviceGetCudaComputeCapability
            )
            average = int(major) >= 8 and (int(major), int(minor)) != (8, 0)
            return "usage_average_1s" if average else "usage_instant"
        except DeviceError:
            pass
        try:
            arch = int(self._nvml("reading the architecture", pynvml.nvmlDeviceGetArchitecture))
        except DeviceError:
            return "usage"
        if arch in (pynvml.NVML_DEVICE_ARCH_AMPERE, pynvml.NVML_DEVICE_ARCH_UNKNOWN):
            return "usage"  # GA100 or not: unknown, and labelled so
        return "usage_average_1s" if arch > pynvml.NVML_DEVICE_ARCH_AMPERE else "usage_instant"

    def _sources(self) -> list[tuple[str, Callable[[], float]]]:
        """Power sources, best first: the instant field, the 1 s average field, usage."""
        return [
            ("instant", lambda: self._read_field(pynvml.NVML_FI_DEV_POWER_INSTANT, "instant")),
            (
                "average_1s",
                lambda: self._read_field(pynvml.NVML_FI_DEV_POWER_AVERAGE, "1 s average"),
            ),
            (self._usage_label, self._read_usage),
        ]

    def _choose_power_source(self) -> tuple[tuple[str, Callable[[], float]], float]:
        """The first source that answers, and its reading; kept for the GPU's lifetime,
        so one trace never mixes fields that mean different things."""
        reasons = []
        for label, read in self._sources():
            try:
                return (label, read), read()
            except (NvmlNotSupportedError, SensorReadError) as exc:
                reasons.append(str(exc))
        raise NvmlNotSupportedError(
            f"{self._where()}: no power reading answers: " + "; ".join(reasons)
        )

    @property
    def power_source(self) -> str | None:
        """The label of the source :meth:`power` reads (None before its first call)."""
        return self._power_source[0] if self._power_source is not None else None

    def power(self) -> PowerReading:
        """Board power (GPU scope) from one source chosen at the first call: the instant
        field where offered, else the 1 s average field, else ``nvmlDeviceGetPowerUsage``
        (labelled by what it is on this GPU). ``field`` names the source.

        Raises:
            SensorReadError: when the chosen source fails several reads in a row (it is
                not swapped for another: the next call tries it again).
        """
        now = self.clock.now()
        with self._source_lock:
            if self._power_source is None:
                self._power_source, watts = self._choose_power_source()
                return PowerReading(now, watts, self._power_source[0])
            label, read = self._power_source
        try:
            watts = read()
        except NvmlNotSupportedError as exc:
            # It answered before: this read failed (a field does not go away).
            raise SensorReadError(f"{exc} (it answered before)") from exc
        return PowerReading(now, watts, label)

    def power_fields(self) -> dict[str, PowerReading]:
        """Every power source this GPU answers now, keyed by label: ``instant``,
        ``average_1s`` and ``usage_instant`` / ``usage_average_1s`` (``usage`` where the
        architecture is unknown)."""
        now = self.clock.now()
        out: dict[str, PowerReading] = {}
        for label, read in self._sources():
            try:
                out[label] = PowerReading(now, read(), label)
            except (NvmlNotSupportedError, SensorReadError):
                continue
        return out

    def synchronize(self) -> None:
        """No-op: the user's callable synchronises its own framework (CUDA, PyTorch …)."""
