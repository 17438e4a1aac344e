"""A stateful fake of the ``pynvml`` module, patched in at eopt's NVML boundary.

The fake keeps each GPU's settings (locked clocks, power limit in mW, energy counter in
mJ) so tests can check what eopt changed and restored. Every call is logged, and its
arguments are bound against the real ``pynvml`` function's signature, so a call with the
wrong arity fails here as it would on a real GPU.

It behaves like NVML where NVML is unkind:

- **Time.** Give the fake a :class:`FakeTime` and a GPU with ``energy=None``: its energy
  counter integrates the true draw (``power_mw``) over that time and refreshes only every
  ``energy_period_s``; the power sensors refresh every ``power_period_s``: ``instant``
  holds the draw at the last refresh, ``average_1s`` the mean over the second before it,
  and ``nvmlDeviceGetPowerUsage`` is one or the other by architecture (a 1 s average on
  Ampere and newer except GA100, compute capability 8.0). ``FakeTime`` is also a
  ``Clock``: pass it to ``NvmlGPU(clock=…)`` and meters poll on it. Without a time
  source the counter moves per call (``energy``, an iterator of mJ) and the fields read
  ``power_mw`` plus the field id (so a test can tell which field was read).
- **Errors.** ``errors`` maps a function name (or ``"field:<id>"`` for one power field)
  to an NVML error code raised on every call, or to a list consumed one call at a time
  (``None`` = succeed). NO_PERMISSION on reads, FUNCTION_NOT_FOUND (old drivers) and
  NOT_SUPPORTED are all just codes here. ``can_set=False`` refuses every setter.
- **Clocks.** One graphics-clock table per memory clock (``sm_clocks_by_mem``); a lock
  runs at the highest supported clock at or below it, and only after ``lock_settle_s``;
  a lock holding the clock down shows as the ``applications clocks setting``
  clocks-event reason; ``setter_delay_s`` makes setters slow.
- **State.** Persistence mode, MIG mode (with MIG instances that have UUIDs), power
  management present or not, an enforced limit below the requested one
  (``enforced_cap_mw``), PCI bus ids, architecture and compute capability, a module-scope
  counter (GH200).
"""

from __future__ import annotations

import heapq
import inspect
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pynvml as real_pynvml
import pytest

_APP_CLOCKS_REASON = 0x2  # nvmlClocksEventReasonApplicationsClocksSetting


class _FakeTimer:
    def __init__(self, period: float, callback: Callable[[float], None]) -> None:
        self.period, self.callback, self.cancelled = period, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTime:
    """Time the test controls (a ``Clock``): NVML's sensors and eopt's timers move with it.

    ``advance``/``sleep`` move time, firing timers at their instants and letting every
    attached GPU integrate its draw piecewise between them.
    """

    def __init__(self, start_s: float = 0.0) -> None:
        self.t = start_s
        self.gpus: list[FakeGpu] = []
        self._queue: list[tuple[float, int, _FakeTimer]] = []
        self._ids = itertools.count()

    def now(self) -> float:
        return self.t

    def _run_to(self, t1: float) -> None:
        if t1 > self.t:
            for gpu in self.gpus:
                gpu.advance(self.t, t1)
            self.t = t1

    def advance(self, dt: float) -> None:
        end = self.t + max(dt, 0.0)
        while self._queue and self._queue[0][0] <= end:
            when, _, timer = heapq.heappop(self._queue)
            if timer.cancelled:
                continue
            self._run_to(when)  # a callback may itself have moved time on: never back
            timer.callback(self.t)
            heapq.heappush(self._queue, (when + timer.period, next(self._ids), timer))
        self._run_to(end)

    def sleep(self, dt: float) -> None:
        self.advance(dt)

    def every(self, period: float, callback: Callable[[float], None]) -> _FakeTimer:
        if period <= 0:
            raise ValueError(f"timer period must be positive, got {period}")
        timer = _FakeTimer(period, callback)
        heapq.heappush(self._queue, (self.t + period, next(self._ids), timer))
        return timer


@dataclass
class FakeGpu:
    """One fake GPU's state; powers in mW, energy in mJ, clocks in MHz, times in s."""

    name: str = "NVIDIA A100-SXM4-40GB"
    uuid: str = "GPU-0000-fake"
    mem_clocks: tuple[int, ...] = (1215,)
    sm_clocks: tuple[int, ...] = tuple(range(1410, 209, -15))
    limit_min_mw: int = 100_000
    limit_max_mw: int = 400_000
    default_limit_mw: int = 400_000
    limit_mw: int = 400_000
    locked_sm: tuple[int, int] | None = None
    locked_mem: tuple[int, int] | None = None
    current_sm_mhz: int = 1410  # what the load asks for, before any lock
    power_mw: int = 61_234  # the reading without a time source; the true draw with one
    energy_supported: bool = True
    fields: dict[int, bool] = field(
        default_factory=lambda: {
            real_pynvml.NVML_FI_DEV_POWER_INSTANT: True,
            real_pynvml.NVML_FI_DEV_POWER_AVERAGE: True,
        }
    )
    can_set: bool = True  # False: setters fail with NVML_ERROR_NO_PERMISSION
    limit_sticks: bool = True  # False: the limit silently stays as it was
    mem_lock_supported: bool = True
    # mJ per read, without a time source; None: integrate the draw over FakeTime (or, with
    # no time source, the default +2.5 J a read).
    energy: Any = None
    # --- identity
    pci_bus_id: str = "00000000:07:00.0"
    architecture: int = real_pynvml.NVML_DEVICE_ARCH_AMPERE
    compute_capability: tuple[int, int] = (8, 0)  # GA100
    # --- modes
    persistence: int = real_pynvml.NVML_FEATURE_ENABLED
    mig_mode: tuple[int, int] | None = (0, 0)  # (current, pending); None: no MIG at all
    mig_devices: tuple[str, ...] = ()  # UUIDs of this GPU's MIG instances
    power_management: bool = True  # False: no limit to read or set, no power usage
    enforced_cap_mw: int | None = None  # a limit set elsewhere: enforced = min(limit, cap)
    # --- clocks
    sm_clocks_by_mem: dict[int, tuple[int, ...]] | None = None  # None: sm_clocks at all
    current_mem_mhz: int | None = None  # None: the top memory clock
    app_clocks: tuple[int, int] | None = None  # (SM, mem); None: the defaults
    default_app_clocks: tuple[int, int] | None = None  # None: (top SM, top mem)
    event_reasons: int = 0  # clocks-event reasons on top of the lock's
    lock_settle_s: float = 0.0  # how long after a lock the clock still runs unlocked
    setter_delay_s: float = 0.0  # how long every setter takes
    # --- sensors on FakeTime
    energy_period_s: float = 0.1
    power_period_s: float = 0.1
    energy_offset_mj: int = 1_000_000
    counter_scope: str = "gpu"  # "module": the counter also counts module_extra_mw (GH200)
    module_extra_mw: int = 0
    # --- faults: function name or "field:<id>" → code, or [code | None, …] one per call
    errors: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._legacy_energy = itertools.count(1_000_000, 2_500)
        self._time: FakeTime | None = None
        self._lock_at = -float("inf")
        self._true_mj = 0.0  # energy integrated since attach (GPU + module extra), mJ
        self._gpu_mj = 0.0  # the GPU's own share, mJ
        self._counter_mj = 0.0  # the counter's value at its last refresh, mJ
        self._instant_mw = float(self.power_mw)
        self._average_mw = float(self.power_mw)
        self._history: list[tuple[float, float]] = []

    # -- time ---------------------------------------------------------------------------
    def attach(self, clock: FakeTime) -> None:
        self._time = clock
        self._instant_mw = self._average_mw = float(self.power_mw)
        self._history = [(clock.t, 0.0)]

    def now(self) -> float:
        return self._time.t if self._time is not None else time.perf_counter()

    def advance(self, t0: float, t1: float) -> None:
        """Integrate the draw over [t0, t1], refreshing sensors at multiples of periods."""
        t = t0
        while t < t1:
            next_e = (int(t / self.energy_period_s + 1e-9) + 1) * self.energy_period_s
            next_p = (int(t / self.power_period_s + 1e-9) + 1) * self.power_period_s
            step = min(t1, next_e, next_p)
            counted = self.power_mw + (
                self.module_extra_mw if self.counter_scope == "module" else 0
            )
            self._true_mj += counted * (step - t)
            self._gpu_mj += self.power_mw * (step - t)
            t = step
            if abs(t - next_e) < 1e-12:
                self._counter_mj = self._true_mj
            if abs(t - next_p) < 1e-12:
                self._instant_mw = float(self.power_mw)
                self._history.append((t, self._gpu_mj))
                while len(self._history) > 1 and self._history[1][0] <= t - 1.0 + 1e-9:
                    self._history.pop(0)
                t_old, e_old = self._history[0]
                if t > t_old:
                    self._average_mw = (self._gpu_mj - e_old) / (t - t_old)

    def true_energy_j(self) -> float:
        """What the counter would read with no refresh lag, in J (from the attach)."""
        return self._true_mj / 1000.0

    # -- readings -----------------------------------------------------------------------
    def counter_mj(self) -> int:
        if self.energy is not None:
            return next(self.energy)
        if self._time is None:
            return next(self._legacy_energy)
        return int(self.energy_offset_mj + round(self._counter_mj))

    def field_mw(self, fid: int) -> int:
        if self._time is None:
            return self.power_mw + fid  # fid tags the field
        if fid == real_pynvml.NVML_FI_DEV_POWER_AVERAGE:
            return round(self._average_mw)
        return round(self._instant_mw)

    def usage_mw(self) -> int:
        if self._time is None:
            return self.power_mw
        average = self.compute_capability[0] >= 8 and self.compute_capability != (8, 0)
        return round(self._average_mw if average else self._instant_mw)

    # -- clocks -------------------------------------------------------------------------
    def top_mem(self) -> int:
        return max(self.mem_clocks)

    def table(self, mem: int) -> tuple[int, ...]:
        if self.sm_clocks_by_mem is not None:
            return self.sm_clocks_by_mem[mem]
        return self.sm_clocks

    def mem_mhz(self) -> int:
        if self.locked_mem is not None:
            return self.locked_mem[1]
        return self.current_mem_mhz if self.current_mem_mhz is not None else self.top_mem()

    def sm_mhz(self) -> int:
        settled = self.now() >= self._lock_at + self.lock_settle_s
        if self.locked_sm is None or not settled:
            return self.current_sm_mhz
        # A lock between table entries runs at the highest supported clock below it.
        below = [c for c in self.table(self.mem_mhz()) if c <= self.locked_sm[1]]
        cap = max(below) if below else min(self.table(self.mem_mhz()))
        return min(self.current_sm_mhz, cap)

    def reasons(self) -> int:
        held = self.locked_sm is not None and self.sm_mhz() < self.current_sm_mhz
        return self.event_reasons | (_APP_CLOCKS_REASON if held else 0)


@dataclass
class FakeMigDevice:
    """A MIG instance's handle: a UUID and the GPU it lives on."""

    uuid: str
    parent: FakeGpu


def _err(code: int) -> real_pynvml.NVMLError:
    return real_pynvml.NVMLError(code)


class FakePynvml:
    """Module-like fake: NVML constants and errors from the real module, state in ``gpus``.

    Args:
        gpus: The GPUs, in NVML index order.
        init_error: An NVML error code ``nvmlInit`` raises.
        time: A :class:`FakeTime` driving the GPUs' sensors (None: per-call counters).
    """

    SETTERS = (
        "nvmlDeviceSetGpuLockedClocks",
        "nvmlDeviceSetMemoryLockedClocks",
        "nvmlDeviceSetPowerManagementLimit",
        "nvmlDeviceResetGpuLockedClocks",
        "nvmlDeviceResetMemoryLockedClocks",
    )

    def __init__(
        self, gpus: list[FakeGpu], init_error: int | None = None, time: FakeTime | None = None
    ) -> None:
        self.gpus = gpus
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.init_error = init_error
        self.time = time
        if time is not None:
            for gpu in gpus:
                gpu.attach(time)
                time.gpus.append(gpu)

    def __getattr__(self, name: str) -> Any:
        # Constants and error classes come from the real module.
        if name.startswith(("NVML_", "NVMLError")):
            return getattr(real_pynvml, name)
        raise AttributeError(name)

    def _log(self, name: str, *args: Any) -> None:
        inspect.signature(getattr(real_pynvml, name)).bind(*args)
        self.calls.append((name, args))
        handle = args[0] if args else None
        gpu = handle.parent if isinstance(handle, FakeMigDevice) else handle
        if isinstance(gpu, FakeGpu):
            self._inject(gpu, name)

    @staticmethod
    def _inject(gpu: FakeGpu, key: str) -> None:
        spec = gpu.errors.get(key)
        if spec is None:
            return
        if isinstance(spec, list):
            if not spec:
                return
            code = spec.pop(0)
            if code is None:
                return
        else:
            code = spec
        raise _err(code)

    def _pass(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self.time is not None:
            self.time.advance(seconds)
        else:
            time.sleep(seconds)

    def setter_calls(self) -> list[str]:
        """Names of the setting-changing functions called so far."""
        return [n for n, _ in self.calls if n in self.SETTERS]

    def called(self, name: str) -> int:
        """How often ``name`` was called."""
        return sum(1 for n, _ in self.calls if n == name)

    # -- init / discovery
    def nvmlInit(self) -> None:
        self._log("nvmlInit")
        if self.init_error is not None:
            raise _err(self.init_error)

    def nvmlDeviceGetCount(self) -> int:
        self._log("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._log("nvmlDeviceGetHandleByIndex", index)
        if not 0 <= index < len(self.gpus):
            raise _err(real_pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeGpu | FakeMigDevice:
        self._log("nvmlDeviceGetHandleByUUID", uuid)
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
            if uuid in gpu.mig_devices:
                return FakeMigDevice(uuid, gpu)
        raise _err(real_pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h: Any) -> FakeGpu:
        self._log("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", h)
        if not isinstance(h, FakeMigDevice):
            raise _err(real_pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return h.parent

    def nvmlDeviceGetIndex(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetIndex", h)
        return self.gpus.index(h)

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        self._log("nvmlDeviceGetName", h)
        return h.name

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        self._log("nvmlDeviceGetUUID", h)
        return h.uuid

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> SimpleNamespace:
        self._log("nvmlDeviceGetPciInfo", h)
        domain, bus, rest = h.pci_bus_id.split(":")
        return SimpleNamespace(
            busId=h.pci_bus_id.encode(),  # bytes, as the real ctypes structure gives it
            domain=int(domain, 16),
            bus=int(bus, 16),
            device=int(rest.split(".")[0], 16),
        )

    def nvmlDeviceGetArchitecture(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetArchitecture", h)
        return h.architecture

    def nvmlDeviceGetCudaComputeCapability(self, h: FakeGpu) -> tuple[int, int]:
        self._log("nvmlDeviceGetCudaComputeCapability", h)
        return h.compute_capability

    # -- modes
    def nvmlDeviceGetPersistenceMode(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetPersistenceMode", h)
        return h.persistence

    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        self._log("nvmlDeviceGetMigMode", h)
        if h.mig_mode is None:
            raise _err(real_pynvml.NVML_ERROR_NOT_SUPPORTED)
        return list(h.mig_mode)

    # -- capabilities
    def nvmlDeviceGetSupportedMemoryClocks(self, h: FakeGpu) -> list[int]:
        self._log("nvmlDeviceGetSupportedMemoryClocks", h)
        return list(h.mem_clocks)

    def nvmlDeviceGetSupportedGraphicsClocks(self, h: FakeGpu, mem: int) -> list[int]:
        self._log("nvmlDeviceGetSupportedGraphicsClocks", h, mem)
        if mem not in h.mem_clocks:
            raise _err(real_pynvml.NVML_ERROR_NOT_FOUND)
        return list(h.table(mem))

    def _check_pm(self, h: FakeGpu) -> None:
        if not h.power_management:
            raise _err(real_pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h: FakeGpu) -> list[int]:
        self._log("nvmlDeviceGetPowerManagementLimitConstraints", h)
        self._check_pm(h)
        return [h.limit_min_mw, h.limit_max_mw]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetPowerManagementDefaultLimit", h)
        self._check_pm(h)
        return h.default_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetPowerManagementLimit", h)
        self._check_pm(h)
        return h.limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetEnforcedPowerLimit", h)
        self._check_pm(h)
        return h.limit_mw if h.enforced_cap_mw is None else min(h.limit_mw, h.enforced_cap_mw)

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, kind: int) -> int:
        self._log("nvmlDeviceGetClockInfo", h, kind)
        if kind == real_pynvml.NVML_CLOCK_MEM:
            return h.mem_mhz()
        return h.sm_mhz()

    def nvmlDeviceGetMaxClockInfo(self, h: FakeGpu, kind: int) -> int:
        self._log("nvmlDeviceGetMaxClockInfo", h, kind)
        if kind == real_pynvml.NVML_CLOCK_MEM:
            return h.top_mem()
        return max(h.table(h.top_mem()))

    def _app(self, h: FakeGpu, pair: tuple[int, int] | None, kind: int) -> int:
        sm, mem = pair if pair is not None else (max(h.table(h.top_mem())), h.top_mem())
        return mem if kind == real_pynvml.NVML_CLOCK_MEM else sm

    def nvmlDeviceGetApplicationsClock(self, h: FakeGpu, kind: int) -> int:
        self._log("nvmlDeviceGetApplicationsClock", h, kind)
        return self._app(h, h.app_clocks or h.default_app_clocks, kind)

    def nvmlDeviceGetDefaultApplicationsClock(self, h: FakeGpu, kind: int) -> int:
        self._log("nvmlDeviceGetDefaultApplicationsClock", h, kind)
        return self._app(h, h.default_app_clocks, kind)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetCurrentClocksEventReasons", h)
        return h.reasons()

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return h.reasons()

    # -- setters
    def _check_rights(self, h: FakeGpu) -> None:
        if not h.can_set:
            raise _err(real_pynvml.NVML_ERROR_NO_PERMISSION)
        self._pass(h.setter_delay_s)

    def nvmlDeviceSetGpuLockedClocks(self, h: FakeGpu, lo: int, hi: int) -> None:
        self._log("nvmlDeviceSetGpuLockedClocks", h, lo, hi)
        self._check_rights(h)
        h.locked_sm = (lo, hi)
        h._lock_at = h.now()

    def nvmlDeviceResetGpuLockedClocks(self, h: FakeGpu) -> None:
        self._log("nvmlDeviceResetGpuLockedClocks", h)
        self._check_rights(h)
        h.locked_sm = None

    def nvmlDeviceSetMemoryLockedClocks(self, h: FakeGpu, lo: int, hi: int) -> None:
        self._log("nvmlDeviceSetMemoryLockedClocks", h, lo, hi)
        self._check_rights(h)
        if not h.mem_lock_supported:
            raise _err(real_pynvml.NVML_ERROR_NOT_SUPPORTED)
        h.locked_mem = (lo, hi)

    def nvmlDeviceResetMemoryLockedClocks(self, h: FakeGpu) -> None:
        self._log("nvmlDeviceResetMemoryLockedClocks", h)
        self._check_rights(h)
        if not h.mem_lock_supported:
            raise _err(real_pynvml.NVML_ERROR_NOT_SUPPORTED)
        h.locked_mem = None

    def nvmlDeviceSetPowerManagementLimit(self, h: FakeGpu, mw: int) -> None:
        self._log("nvmlDeviceSetPowerManagementLimit", h, mw)
        self._check_pm(h)
        self._check_rights(h)
        if not h.limit_min_mw <= mw <= h.limit_max_mw:
            raise _err(real_pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if h.limit_sticks:
            h.limit_mw = mw

    # -- sensors
    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetTotalEnergyConsumption", h)
        if not h.energy_supported:
            raise _err(real_pynvml.NVML_ERROR_NOT_SUPPORTED)
        return h.counter_mj()

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetPowerUsage", h)
        self._check_pm(h)
        return h.usage_mw()

    def nvmlDeviceGetFieldValues(self, h: FakeGpu, ids: list[Any]) -> list[SimpleNamespace]:
        self._log("nvmlDeviceGetFieldValues", h, ids)
        out = []
        for entry in ids:
            fid = entry[0] if isinstance(entry, tuple) else entry  # (field id, scope id)
            code = real_pynvml.NVML_SUCCESS
            if not h.fields.get(fid, False):
                code = real_pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                try:
                    self._inject(h, f"field:{fid}")
                except real_pynvml.NVMLError as exc:
                    code = exc.value
            out.append(
                SimpleNamespace(
                    fieldId=fid,
                    nvmlReturn=code,
                    valueType=real_pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                    value=SimpleNamespace(uiVal=h.field_mw(fid)),
                )
            )
        return out


@pytest.fixture
def nvml_fakes() -> SimpleNamespace:
    """The fake's classes for tests that build their own: ``FakeGpu``, ``FakePynvml``,
    ``FakeTime`` (test modules cannot import a conftest under importlib mode)."""
    return SimpleNamespace(FakeGpu=FakeGpu, FakePynvml=FakePynvml, FakeTime=FakeTime)


@pytest.fixture
def fake_nvml() -> Any:
    """One fake A100 (400 W default limit) patched in as ``eopt.devices.nvml.pynvml``."""
    fake = FakePynvml([FakeGpu()])
    with mock.patch("eopt.devices.nvml.pynvml", fake):
        yield fake


@pytest.fixture
def make_fake_nvml() -> Any:
    """Factory: ``make_fake_nvml([{FakeGpu field: value}, …], init_error=None, time=None)``.

    Patches a fake with one GPU per mapping in and returns it. GPU ``i`` gets the UUID
    ``GPU-i-fake`` and the PCI bus id ``00000000:<07+i>:00.0`` unless the mapping says.
    ``time=True`` gives the fake a new :class:`FakeTime` (``fake.time``).
    """
    patches = []

    def make(
        gpus: list[dict[str, Any]],
        init_error: int | None = None,
        time: FakeTime | bool | None = None,
    ) -> FakePynvml:
        if time is True:
            time = FakeTime()
        made = [
            FakeGpu(**{"uuid": f"GPU-{i}-fake", "pci_bus_id": f"00000000:{7 + i:02X}:00.0", **g})
            for i, g in enumerate(gpus)
        ]
        fake = FakePynvml(made, init_error, time or None)
        patcher = mock.patch("eopt.devices.nvml.pynvml", fake)
        patcher.start()
        patches.append(patcher)
        return fake

    yield make
    for patcher in patches:
        patcher.stop()
