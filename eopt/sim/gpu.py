"""The simulated GPU (``eopt sim``): a physical GPU model that runs on virtual time.

:class:`VirtualClock` satisfies the :class:`~eopt.devices.base.Clock` protocol: ``sleep``
advances virtual time (the simulated GPUs idle or finish queued work meanwhile) and
``every`` callbacks fire synchronously at each period boundary the time crosses, so the
measurement layer's power sampler runs unchanged on the simulator.

:class:`SimulatedGPU` implements :class:`~eopt.devices.base.Device` with the physics of
:mod:`eopt.sim.physics`, the kernels of :mod:`eopt.sim.kernels` and
NVML-like sensors: a cumulative energy counter with mJ resolution (can be disabled), and a
power sensor that updates every 100 ms with seeded noise. Its ``average`` field is the mean
over only the last ``power_average_window_s`` before each update (25 ms on the shipped
profiles, as Yang, Adamek and Armour (SC24) found for NVML on A100 and H100), so a kernel
that falls entirely in the other 75 ms leaves no trace in it; ``instant`` is the draw at
the update. Ground truth for tests: :meth:`SimulatedGPU.true_energy_j`,
:meth:`SimulatedGPU.power_trace` and :attr:`SimulatedGPU.last_power_update_s`.

Kernels run on streams: one stream runs its kernels one after the other, different
streams co-run. The interaction mechanisms of :mod:`eopt.sim.mechanisms` (thermal,
SM and bandwidth contention, power-limit coupling, cache warmth, clock settling, and on a
:class:`~eopt.sim.node.SimulatedNode` the fabric and the power budget) are applied
event by event: whenever a running set changes, every running kernel's rate and the
device's power are recomputed, and energy is integrated exactly over the constant-rate
segments in between. Every :class:`KernelRecord` carries its entry context φ and runtime
context ρ; :meth:`SimulatedGPU.entry_context` gives the device's current one.

Example::

    gpu = SimulatedGPU("A100-SXM4-40GB", seed=0)
    gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200))
    seconds = gpu.launch("gemm", "cublas", {"m": 8192, "n": 8192, "k": 8192})
    gemm, copy = gpu.co_run([Launch("gemm"), Launch("memcpy")])  # two streams
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from eopt.devices.base import DeviceError, MeasureOnlyError, PowerReading
from eopt.model.operating_point import OperatingPoint
from eopt.sim.kernels import SimKernel, get_kernel
from eopt.sim.mechanisms import (
    CoRunKernel,
    MechanismParams,
    Mechanisms,
    NoiseModel,
    co_run,
    l2_bytes,
    link_demand,
    warmth_after_idle,
    warmth_after_traffic,
)
from eopt.sim.physics import (
    KernelDemand,
    KernelRun,
    kernel_run,
    leak_factor,
    static_power_w,
    thermal_step_c,
)
from eopt.sim.profiles import SENSOR_PERIOD_S, GpuProfile, load_profile

__all__ = [
    "DEFAULT_STREAM",
    "MAX_SLEEP_S",
    "SENSOR_PERIOD_S",
    "KernelRecord",
    "Launch",
    "MechanismParams",
    "Mechanisms",
    "NoiseModel",
    "SimulatedGPU",
    "VirtualClock",
    "open_backend",
]

#: The stream plain ``launch``/``enqueue`` calls use.
DEFAULT_STREAM = "0"

#: The longest single sleep of virtual time, in s: about 40 000 steps of the idle model,
#: a fraction of a second of real time.
MAX_SLEEP_S = 3600.0

_STEP_BUSY_S = 0.01  # integration step while a kernel runs (thermal model, sensor)
_STEP_IDLE_S = 0.1
_EPS_S = 1e-12


class _VirtualTimer:
    def __init__(self, clock: VirtualClock, period_s: float, callback: Callable[[float], None]):
        self.period_s = period_s
        self.callback = callback
        self.start_s = clock.now()
        self.ticks = 0
        self.cancelled = False
        self._clock = clock

    def next_time(self) -> float:
        return self.start_s + self.ticks * self.period_s

    def cancel(self) -> None:
        """Stop calling back."""
        self.cancelled = True


class VirtualClock:
    """Virtual time shared by simulated GPUs (implements the ``Clock`` protocol).

    Attributes are private; use :meth:`now`, :meth:`sleep`, :meth:`advance_to`, :meth:`every`.
    """

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = float(start_s)
        self._devices: list[SimulatedGPU] = []
        self._timers: list[tuple[float, int, _VirtualTimer]] = []
        self._seq = itertools.count()
        self._in_callback = False

    def now(self) -> float:
        """Current virtual time, in s."""
        return self._now

    def sleep(self, duration_s: float) -> None:
        """Let ``duration_s`` of virtual time pass; attached GPUs run their queues or idle.

        Raises:
            ValueError: for a negative or non-finite duration, or one over
                :data:`MAX_SLEEP_S` (virtual time costs real time: every 0.1 s is a step).
        """
        if not 0 <= duration_s <= MAX_SLEEP_S:
            raise ValueError(
                f"a simulated GPU can idle 0–{MAX_SLEEP_S:g} s at a time, not {duration_s} s"
            )
        self.advance_to(self._now + duration_s)

    def every(self, period_s: float, callback: Callable[[float], None]) -> _VirtualTimer:
        """Call ``callback(now)`` now and at every ``period_s`` boundary time crosses.

        Like :class:`~eopt.devices.base.WallClock`, the first call happens at once.
        Callbacks run synchronously inside :meth:`advance_to`; they may read devices but
        must not advance time.
        """
        if not period_s > 0:
            raise ValueError(f"timer period must be positive, got {period_s}")
        timer = _VirtualTimer(self, float(period_s), callback)
        self._fire(timer)
        return timer

    def attach(self, device: SimulatedGPU) -> None:
        """Make ``device`` advance with this clock (done by :class:`SimulatedGPU`)."""
        if device not in self._devices:
            self._devices.append(device)

    def advance_to(self, t_s: float) -> None:
        """Advance virtual time to ``t_s``, running devices and timers in time order.

        Time moves from event to event (a kernel ending, a clock settling, a timer), so
        every attached GPU sees the same instants and the rates of co-running kernels are
        recomputed whenever a running set changes.
        """
        if self._in_callback:
            raise RuntimeError(
                "a virtual-clock timer callback tried to advance time; callbacks may only "
                "read devices"
            )
        while True:
            self._process_events()
            while self._timers and self._timers[0][2].cancelled:
                heapq.heappop(self._timers)
            next_timer = self._timers[0][0] if self._timers else math.inf
            target = min(t_s, next_timer, self.next_device_event_s())
            if target > self._now:
                for device in self._devices:
                    device._advance_to(target)
                self._now = target
                self._process_events()
            if next_timer <= t_s and next_timer <= self._now:
                _, _, timer = heapq.heappop(self._timers)
                self._fire(timer)
            elif target >= t_s:
                return

    def next_device_event_s(self) -> float:
        """The earliest event on any attached GPU (a kernel ending, a clock settling), in s.

        A GPU's own next event can move when another GPU's event re-solves a shared
        budget or fabric, so waiting steps to this one, never past it.
        """
        return min((d._next_event_s() for d in self._devices), default=math.inf)

    def _process_events(self) -> None:
        """Finish due kernels, start queued ones, settle clocks; re-solve changed devices."""
        changed = [d for d in self._devices if d._handle_due_events(self._now)]
        resolved: set[int] = set()
        for device in changed:
            group = device._resolver()
            if id(group) not in resolved:
                resolved.add(id(group))
                group._resolve_all()

    def _fire(self, timer: _VirtualTimer) -> None:
        self._in_callback = True
        try:
            timer.callback(self._now)
        finally:
            self._in_callback = False
        timer.ticks += 1
        if not timer.cancelled:
            heapq.heappush(self._timers, (timer.next_time(), next(self._seq), timer))


@dataclass(frozen=True)
class KernelRecord:
    """One finished (or running) kernel invocation on a simulated GPU.

    Attributes:
        kernel: Catalog name.
        impl: Implementation name.
        start_s: Virtual start time, in s.
        duration_s: Duration, in s (for a running kernel: the prediction at its current
            rates).
        sm_clock_mhz: Average effective SM clock, in MHz.
        throttled: Whether the power limit (or a node budget) lowered the clock.
        power_w: Average device power while it ran, each stretch of constant rates taken
            at its starting temperature, in W (the whole device: co-runners' dynamic
            power and the one static draw included).
        stream: The stream it ran on.
        temperature_start_c: Entry context: die temperature at its start, in °C.
        cache_warm_fraction: Entry context: mean L2 warmth of the buffers it reads at its
            start (0 cold – 1 fully resident).
        clock_settling_s: Entry context: how long the SM clock still needed to reach its
            target at its start, in s (0: settled).
        machine_state: Entry context: ``"normal"`` or ``"degraded"`` (a machine-state
            block of the noise model).
        co_runners: Runtime context: names of the kernels it overlapped with (sorted,
            each once; empty when it ran alone).
    """

    kernel: str
    impl: str
    start_s: float
    duration_s: float
    sm_clock_mhz: float
    throttled: bool
    power_w: float
    stream: str = DEFAULT_STREAM
    temperature_start_c: float = math.nan
    cache_warm_fraction: float = 0.0
    clock_settling_s: float = 0.0
    machine_state: str = "normal"
    co_runners: tuple[str, ...] = ()

    @property
    def end_s(self) -> float:
        """Virtual end time, in s."""
        return self.start_s + self.duration_s

    @property
    def entry_context(self) -> dict[str, Any]:
        """φ at its start: ``temperature_c`` (°C), ``cache_warm_fraction`` (0–1),
        ``clock_settling_s`` (s), ``machine_state``."""
        return {
            "temperature_c": self.temperature_start_c,
            "cache_warm_fraction": self.cache_warm_fraction,
            "clock_settling_s": self.clock_settling_s,
            "machine_state": self.machine_state,
        }

    @property
    def runtime_context(self) -> tuple[str, ...]:
        """ρ without itself: the names of the kernels it co-ran with."""
        return self.co_runners


@dataclass(frozen=True)
class Launch:
    """One kernel invocation to start (for :meth:`SimulatedGPU.co_run`).

    Attributes:
        kernel: Catalog name.
        impl: Implementation name (the kernel's default when None).
        workload: θ, completed with the kernel's defaults.
        reads: Names of the buffers it reads (cache mechanism).
        writes: Names of the buffers it writes.
        sm_share: ω_elem: the fraction of SMs it is confined to (0–1]; None: shared by
            demand with whatever co-runs.
    """

    kernel: str
    impl: str | None = None
    workload: Mapping[str, Any] | None = None
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    sm_share: float | None = None


@dataclass
class _Pending:
    seq: int
    name: str
    impl: str
    demand: KernelDemand
    stream: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    sm_share: float | None
    memory_eff: float
    over_link: bool


@dataclass
class _Active:
    job: _Pending
    start_s: float
    demand: KernelDemand  # after the cache's saving
    temp_key_c: float  # start temperature, rounded as the run cache keys it
    time_scale: float
    power_scale: float
    temperature_start_c: float
    cache_warm: float
    settling_s: float
    machine_state: str
    co_runners: set[str] = field(default_factory=set)
    progress: float = 0.0  # fraction of the work done at t_regime
    t_regime: float = 0.0
    duration_s: float = math.inf  # time for the whole work at the current rates
    end_s: float = math.inf
    clock_mhz: float = 0.0
    power_ref_w: float = 0.0
    throttled_now: bool = False
    busy_s: float = 0.0
    power_time_j: float = 0.0
    clock_time: float = 0.0
    throttled: bool = False

    def record(self, running: bool = False) -> KernelRecord:
        if not running:  # finished: its own span
            duration = self.busy_s
            power = self.power_time_j / duration if duration > 0 else self.power_ref_w
            clock = self.clock_time / duration if duration > 0 else self.clock_mhz
        else:  # running: what is known, plus the rest at the current rates
            duration = self.end_s - self.start_s
            power, clock = self.power_ref_w, self.clock_mhz
        return KernelRecord(
            kernel=self.job.name,
            impl=self.job.impl,
            start_s=self.start_s,
            duration_s=duration,
            sm_clock_mhz=clock,
            throttled=self.throttled or self.throttled_now,
            power_w=power,
            stream=self.job.stream,
            temperature_start_c=self.temperature_start_c,
            cache_warm_fraction=self.cache_warm,
            clock_settling_s=self.settling_s,
            machine_state=self.machine_state,
            co_runners=tuple(sorted(self.co_runners)),
        )


class SimulatedGPU:
    """A simulated GPU implementing the ``Device`` protocol on virtual time.

    Kernels on one stream run one after the other; kernels on different streams co-run
    and interact through the mechanisms switched on (:class:`Mechanisms`). Plain
    ``launch``/``enqueue`` calls use the default stream, so they never overlap.

    Args:
        model: Profile name (see :func:`eopt.sim.profiles.available_profiles`).
        index: Device index; the name is ``sim<index>``.
        clock: Virtual clock to run on (shared by GPUs that run side by side); a new one
            by default.
        seed: Seed of the run-to-run jitter and sensor noise.
        energy_counter: Offer the cumulative energy counter (False exercises the power
            sampler path of the measurement layer).
        power_field: What :meth:`power` returns: ``"instant"`` or ``"average"``.
        noise: Apply launch jitter and sensor noise (False gives exact, noise-free runs;
            the same as leaving ``noise`` out of ``mechanisms``).
        control: Allow changing the operating point (False: measure-only).
        record_trace: Keep the exact power trace (see :meth:`power_trace`).
        mechanisms: Interaction mechanisms on: a :class:`Mechanisms`, ``"all"`` (the
            default), ``"none"`` or a comma list such as ``"thermal,contention"``.
            All on by default: the mechanisms beyond thermal act only when kernels
            co-run, share buffers, change clocks or share a node, so single-kernel runs
            behave as without them.
        params: The mechanisms' parameters (:class:`MechanismParams`).
        noise_model: Variation beyond the profile's jitter (:class:`NoiseModel`;
            machine-state blocks are off unless its ``state_block_rate`` says).

    Attributes:
        power_update_period_s: How often the power sensor refreshes, in s (the meter polls
            it faster and integrates its refreshes).
        power_average_window_s: The span the ``average`` field averages, in s: the last
            window before each refresh (the profile's ``power_average_window_s``; set it
            to ``power_update_period_s`` for a mean over the whole interval).
        mechanisms: The mechanisms on.
    """

    #: The registry name of this backend (:mod:`eopt.devices.backends`).
    backend = "sim"

    power_update_period_s: float = SENSOR_PERIOD_S

    def __init__(
        self,
        model: str = "A100-SXM4-40GB",
        index: int = 0,
        clock: VirtualClock | None = None,
        seed: int = 0,
        energy_counter: bool = True,
        power_field: str = "instant",
        noise: bool = True,
        control: bool = True,
        record_trace: bool = False,
        mechanisms: Mechanisms | str | None = None,
        params: MechanismParams | None = None,
        noise_model: NoiseModel | None = None,
    ) -> None:
        if power_field not in ("instant", "average"):
            raise ValueError(f"power_field must be 'instant' or 'average', got {power_field!r}")
        self.mechanisms: Mechanisms = Mechanisms.parse(mechanisms)
        self.params: MechanismParams = params if params is not None else MechanismParams()
        self.noise_model: NoiseModel = noise_model if noise_model is not None else NoiseModel()
        self.profile: GpuProfile = load_profile(model)
        self.power_average_window_s: float = self.profile.power_average_window_s
        self.index = index
        self.name = f"sim{index}"
        self.model = self.profile.model
        self.clock: VirtualClock = clock if clock is not None else VirtualClock()
        self.control = control
        self._phys = self.profile.physics
        # Separate streams: how often the sensor updates never shifts the launch jitter,
        # and the mechanisms' noise never shifts either.
        work_seed, sensor_seed, extra_seed = np.random.SeedSequence([seed, index]).spawn(3)
        self._rng = np.random.default_rng(work_seed)
        self._sensor_rng = np.random.default_rng(sensor_seed)
        self._extra_rng = np.random.default_rng(extra_seed)
        self._noise = noise and self.mechanisms.noise
        self._has_counter = energy_counter
        self._power_field = power_field
        self._record_trace = record_trace
        self._node: Any = None  # a SimulatedNode that re-solves this GPU with its peers

        self._t = self.clock.now()
        self._locked_sm: float | None = None
        self._locked_mem: float | None = None
        self._limit_w = self.profile.power_limit_default_w
        self._original: tuple[float | None, float | None, float] | None = None
        # Clock state: the lock in force until the last change settles.
        self._settling_from: float | None = None
        self._settle_until_s = -math.inf

        self._seq = itertools.count()
        self._queues: dict[str, deque[_Pending]] = {}
        self._active: dict[str, _Active] = {}
        self._finished_by_seq: dict[int, KernelRecord] = {}
        self._run_cache: dict[tuple[Any, ...], KernelRun] = {}
        # θ key → (demand, memory efficiency): both fixed by kernel, impl and θ.
        self._demand_cache: dict[tuple[Any, ...], tuple[KernelDemand, float]] = {}
        # Device-wide rates of the current regime: lone kernel, co-run, or idle.
        self._mode = "idle"
        self._lone_base_w = 0.0
        self._lone_leak_w = 0.0
        self._corun_clock_mhz = 0.0
        self._corun_dynamic_w = 0.0
        self._limit_override_w: float | None = None
        self._fabric_stretch = 1.0
        # Cache: buffer → L2 warmth (0–1); idle since when (for its decay).
        self._warmth: dict[str, float] = {}
        self._idle_since_s = self._t
        self._state_block_left = 0
        # Slow noise (NoiseModel): wander states in units of their stationary SD, which
        # start at the nominal state, and warmth 1 (a warm device) at construction.
        self._wander_z = np.zeros(2)  # power, time
        self._ready_warmth = 1.0
        self._noise_at_s = self._t

        # Start at the idle steady state, as a GPU that has sat idle for a while.
        self._temp_c = self._phys.t_ambient_c
        for _ in range(20):
            self._temp_c = self._phys.t_ambient_c + self._phys.r_thermal_k_per_w * (
                self._idle_power_w()
            )
        self._energy_j = 0.0
        self._counter_origin_j = float(self._rng.uniform(1e5, 1e7))
        self._trace: list[tuple[float, float, float]] = []
        self._window: deque[tuple[float, float, float]] = deque()
        idle = self._idle_power_w()
        self._readings = {"instant": idle, "average": idle}
        self._reading_time = self._t
        self._next_sensor_s = self._t + float(self._sensor_rng.uniform(0.0, SENSOR_PERIOD_S))
        self.clock.attach(self)

    # ------------------------------------------------------------------ identity
    def __repr__(self) -> str:
        return f"SimulatedGPU({self.model!r}, index={self.index})"

    def supported_sm_clocks_mhz(self) -> Sequence[float]:
        """SM clocks the simulated GPU can be locked to, descending, in MHz."""
        return list(self.profile.sm_clocks_mhz)

    def supported_mem_clocks_mhz(self) -> Sequence[float]:
        """Memory clocks, descending, in MHz."""
        return list(self.profile.mem_clocks_mhz)

    def power_limit_range_w(self) -> tuple[float, float]:
        """(min, max) settable power limit, in W."""
        return (self.profile.power_limit_min_w, self.profile.power_limit_max_w)

    def default_power_limit_w(self) -> float:
        """The board's default power limit, in W."""
        return self.profile.power_limit_default_w

    # ------------------------------------------------------------------ control
    def current_operating_point(self) -> OperatingPoint:
        """The current locked clocks (None where unlocked) and power limit."""
        return OperatingPoint(self._locked_sm, self._locked_mem, self._limit_w)

    def set_operating_point(self, point: OperatingPoint) -> None:
        """Lock clocks / set the power limit given in ``point`` (None fields unchanged).

        A new limit acts at once, on running kernels too. With the ``clock_state``
        mechanism a new SM clock takes ``params.clock_settle_s`` to reach its target.

        Raises:
            MeasureOnlyError: in measure-only mode.
            DeviceError: for an unsupported clock or a limit outside the range.
        """
        if not self.control:
            raise MeasureOnlyError(
                f"{self.name} was opened measure-only (control=False / --no-control): "
                f"not setting {point.label()}"
            )
        sm = point.sm_clock_mhz
        mem = point.mem_clock_mhz
        limit = point.power_limit_w
        if sm is not None:
            self._check_clock(sm, self.profile.sm_clocks_mhz, "SM")
        if mem is not None:
            self._check_clock(mem, self.profile.mem_clocks_mhz, "memory")
        if limit is not None:
            lo, hi = self.power_limit_range_w()
            if not lo - 1e-9 <= limit <= hi + 1e-9:
                raise DeviceError(
                    f"{self.name} ({self.model}): power limit {limit:g} W is outside the "
                    f"settable range {lo:g}–{hi:g} W"
                )
        if self._original is None:
            self._original = (self._locked_sm, self._locked_mem, self._limit_w)
        new_sm = float(sm) if sm is not None else self._locked_sm
        self._change_sm_lock(new_sm)
        if mem is not None:
            self._locked_mem = float(mem)
        if limit is not None:
            self._limit_w = float(limit)
        self._resolver()._resolve_all()

    def restore(self) -> None:
        """Put back the clocks and limit found before the first change (no-op if none)."""
        if self._original is None:
            return
        sm, self._locked_mem, self._limit_w = self._original
        self._change_sm_lock(sm)
        self._original = None
        self._resolver()._resolve_all()

    def _change_sm_lock(self, new_sm: float | None) -> None:
        if new_sm == self._locked_sm:
            return
        settle_s = self.params.clock_settle_s
        if self.mechanisms.clock_state and settle_s > 0:
            # The clock in force now (an unfinished earlier change included) stays until
            # the new one settles.
            self._settling_from = self._effective_lock()
            self._settle_until_s = self._t + settle_s
        self._locked_sm = new_sm

    def _check_clock(self, value: float, table: Sequence[float], what: str) -> None:
        nearest = min(table, key=lambda c: abs(c - value))
        if abs(nearest - value) > 0.5:
            raise DeviceError(
                f"{self.name} ({self.model}) does not support {what} clock {value:g} MHz "
                f"(supported: {min(table):g}–{max(table):g} MHz, {len(table)} values; "
                f"nearest: {nearest:g} MHz)"
            )

    # ------------------------------------------------------------------ sensors
    def energy_counter_j(self) -> float | None:
        """Cumulative energy (mJ resolution, arbitrary origin), in J; None if disabled."""
        if not self._has_counter:
            return None
        return math.floor((self._counter_origin_j + self._energy_j) * 1000.0) / 1000.0

    def power(self) -> PowerReading:
        """The sensor's latest reading (refreshed every 100 ms), field as configured."""
        return PowerReading(self.clock.now(), self._readings[self._power_field], self._power_field)

    def power_fields(self) -> dict[str, PowerReading]:
        """Both sensor fields: ``instant`` (the draw at the last refresh) and ``average``
        (the mean over the ``power_average_window_s`` before it)."""
        now = self.clock.now()
        return {k: PowerReading(now, v, k) for k, v in self._readings.items()}

    def synchronize(self, stream: str | int | None = None) -> None:
        """Advance virtual time until this GPU's queued kernels have finished.

        Args:
            stream: Wait for this stream only; every stream when None.
        """
        key = None if stream is None else str(stream)
        while self._busy(key):
            self.clock.advance_to(max(self.clock.next_device_event_s(), self.clock.now()))

    # ------------------------------------------------------------------ ground truth
    @property
    def temperature_c(self) -> float:
        """Die temperature, in °C."""
        return self._temp_c

    def true_energy_j(self) -> float:
        """Exact energy drawn since the GPU was created, in J."""
        return self._energy_j

    def true_power_w(self) -> float:
        """Exact power right now, in W."""
        return self._power_now_w()

    @property
    def last_power_update_s(self) -> float:
        """When the power sensor last refreshed, in s of virtual time (the GPU's creation
        time before the first refresh)."""
        return self._reading_time

    def power_trace(self) -> list[tuple[float, float, float]]:
        """Exact piecewise-constant power: ``(start_s, end_s, power_w)`` segments.

        Raises:
            DeviceError: unless the GPU was created with ``record_trace=True``.
        """
        if not self._record_trace:
            raise DeviceError(f"{self.name}: created without record_trace=True")
        return list(self._trace)

    def kernel_records(self) -> list[KernelRecord]:
        """Every kernel invocation started so far, in launch order (running ones with
        their predicted duration)."""
        records = list(self._finished_by_seq.items())
        records += [(a.job.seq, a.record(running=True)) for a in self._active.values()]
        return [r for _, r in sorted(records, key=lambda item: item[0])]

    def static_power_w(self) -> float:
        """Exact idle draw at the current setting and temperature, in W."""
        return self._idle_power_w()

    def entry_context(self) -> dict[str, Any]:
        """φ a kernel starting now would inherit (and ρ: what runs now).

        Returns:
            ``temperature_c`` (°C); ``cache_warmth``: buffer name → L2 warmth (0–1) now;
            ``clock_settling_s`` (s until the SM clock reaches its target, 0: settled);
            ``sm_clock_mhz``: the SM clock a kernel would be set to now (MHz);
            ``machine_state``; ``running``: names of the kernels running now.
        """
        idle_s = self._t - self._idle_since_s if not self._active else 0.0
        decay = self.params.cache_idle_decay_s
        return {
            "temperature_c": self._temp_c,
            "cache_warmth": {
                b: warmth_after_idle(w, idle_s, decay) for b, w in self._warmth.items()
            },
            "clock_settling_s": self._settling_left_s(),
            "sm_clock_mhz": self._sm_clock_set_mhz(),
            "machine_state": "degraded" if self._state_block_left > 0 else "normal",
            "running": sorted(a.job.name for a in self._active.values()),
        }

    # ------------------------------------------------------------------ work
    def enqueue(
        self,
        kernel: str,
        impl: str | None = None,
        workload: Mapping[str, Any] | None = None,
        *,
        stream: str | int | None = None,
        reads: Sequence[str] = (),
        writes: Sequence[str] = (),
        sm_share: float | None = None,
    ) -> None:
        """Queue one kernel invocation without waiting (like a CUDA launch).

        Args:
            kernel: Catalog name.
            impl: Implementation name; the kernel's default when None.
            workload: θ (sizes), completed with the kernel's defaults.
            stream: The stream to queue on (default stream when None); kernels on
                different streams co-run.
            reads: Names of buffers it reads (a buffer written just before on this
                device is warm in L2: the cache mechanism).
            writes: Names of buffers it writes.
            sm_share: ω_elem, the fraction (0–1] of the SMs it is confined to; None:
                shared by demand with its co-runners.

        Raises:
            ValueError: for an unknown kernel, implementation or workload key, or an SM
                share outside (0, 1].
        """
        self._enqueue(kernel, impl, workload, stream, reads, writes, sm_share)

    def _enqueue(
        self,
        kernel: str,
        impl: str | None,
        workload: Mapping[str, Any] | None,
        stream: str | int | None,
        reads: Sequence[str],
        writes: Sequence[str],
        sm_share: float | None,
    ) -> int:
        spec, impl_name, demand, memory_eff = self._lookup(kernel, impl, workload)
        if sm_share is not None and not (
            isinstance(sm_share, (int, float)) and 0.0 < sm_share <= 1.0
        ):
            raise ValueError(
                f"{self.name}: sm_share={sm_share!r} for kernel {spec.name!r} must be a "
                f"fraction of the SMs in (0, 1] (e.g. 16/{self.profile.sm_count} for 16 SMs)"
            )
        for what, names in (("reads", reads), ("writes", writes)):
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise ValueError(
                    f"{self.name}: {what} of kernel {spec.name!r} must be a sequence of "
                    f"buffer names, e.g. ('x',), got {names!r}"
                )
        key = DEFAULT_STREAM if stream is None else str(stream)
        job = _Pending(
            seq=next(self._seq),
            name=spec.name,
            impl=impl_name,
            demand=demand,
            stream=key,
            reads=tuple(reads),
            writes=tuple(writes),
            sm_share=None if sm_share is None else float(sm_share),
            memory_eff=memory_eff,
            over_link=spec.over_link,
        )
        self._queues.setdefault(key, deque()).append(job)
        if key not in self._active and self._start_ready():
            self._resolver()._resolve_all()
        return job.seq

    def kernel_demand(
        self, kernel: str, impl: str | None = None, workload: Mapping[str, Any] | None = None
    ) -> KernelDemand:
        """What one invocation of ``kernel`` asks of this GPU; checks it without running it.

        Raises:
            ValueError: for an unknown kernel, implementation or workload key, or a
                workload whose invocation would run longer than the simulator allows
                (:data:`eopt.sim.kernels.MAX_INVOCATION_S` at the lowest clock).
        """
        return self._lookup(kernel, impl, workload)[2]

    def _lookup(
        self, kernel: str, impl: str | None, workload: Mapping[str, Any] | None
    ) -> tuple[SimKernel, str, KernelDemand, float]:
        """The kernel's spec, implementation name, demand and memory efficiency (cached)."""
        spec = get_kernel(kernel)
        impl_name = spec.implementation(impl).name
        theta = spec.workload(workload)
        key = (spec.name, impl_name, tuple(sorted(theta.items())))
        cached = self._demand_cache.get(key)
        if cached is None:
            cached = (
                spec.demand(self.profile, impl_name, theta),
                spec.memory_efficiency(impl_name, theta),
            )
            self._demand_cache[key] = cached
        return (spec, impl_name, *cached)

    def launch(
        self,
        kernel: str,
        impl: str | None = None,
        workload: Mapping[str, Any] | None = None,
        *,
        stream: str | int | None = None,
        reads: Sequence[str] = (),
        writes: Sequence[str] = (),
        sm_share: float | None = None,
    ) -> float:
        """Run one kernel invocation to completion, advancing virtual time.

        Args:
            kernel: Catalog name (``gemm``, ``attention``, …; ``sim:`` prefix accepted).
            impl: Implementation name; the kernel's default when None.
            workload: θ (sizes), completed with the kernel's defaults.
            stream: Stream to run on (see :meth:`enqueue`); waits for that stream only.
            reads: Buffers it reads (cache mechanism).
            writes: Buffers it writes.
            sm_share: ω_elem, fraction of SMs it is confined to.

        Returns:
            The invocation's duration, in s.
        """
        seq = self._enqueue(kernel, impl, workload, stream, reads, writes, sm_share)
        self._wait_for(seq)
        return self._record_of(seq).duration_s

    def co_run(self, launches: Sequence[Launch | str]) -> list[KernelRecord]:
        """Start ``launches`` together, each on a stream of its own, and wait for all.

        Returns:
            Their records, in the order given (each with its co-runners).

        Raises:
            ValueError: for an empty list, or a bad launch (see :meth:`enqueue`).
        """
        if not launches:
            raise ValueError(f"{self.name}: co_run needs at least one launch")
        items = [Launch(x) if isinstance(x, str) else x for x in launches]
        tag = next(self._seq)
        seqs = [
            self._enqueue(
                x.kernel, x.impl, x.workload, f"corun{tag}.{i}", x.reads, x.writes, x.sm_share
            )
            for i, x in enumerate(items)
        ]
        for seq in seqs:
            self._wait_for(seq)
        return [self._record_of(seq) for seq in seqs]

    def idle(self, duration_s: float) -> None:
        """Let ``duration_s`` of virtual time pass (the GPU finishes queued work, then idles)."""
        self.clock.sleep(duration_s)

    # ------------------------------------------------------------------ internals: state
    def _busy(self, stream: str | None = None) -> bool:
        if stream is not None:
            return stream in self._active or bool(self._queues.get(stream))
        return bool(self._active) or any(self._queues.values())

    def _wait_for(self, seq: int) -> None:
        while seq not in self._finished_by_seq:
            self.clock.advance_to(max(self.clock.next_device_event_s(), self.clock.now()))

    def _record_of(self, seq: int) -> KernelRecord:
        return self._finished_by_seq[seq]

    def _resolver(self) -> Any:
        """What re-solves rates when this GPU's running set changes: its node, or itself."""
        return self._node if self._node is not None else self

    def _resolve_all(self) -> None:
        self._resolve()

    def _effective_lock(self) -> float | None:
        if self._settling_left_s() > 0:
            return self._settling_from
        return self._locked_sm

    def _settling_left_s(self) -> float:
        return max(0.0, self._settle_until_s - self._t)

    def _sm_clock_set_mhz(self) -> float:
        lock = self._effective_lock()
        return lock if lock is not None else self.profile.max_sm_clock_mhz

    def _limit_now_w(self) -> float:
        if self._limit_override_w is None:
            return self._limit_w
        return min(self._limit_w, self._limit_override_w)

    def _idle_power_w(self) -> float:
        lock = self._effective_lock()
        f = lock if lock is not None else self.profile.idle_sm_clock_mhz
        return float(static_power_w(self._phys, f, self.profile.max_sm_clock_mhz, self._temp_c))

    def _power_now_w(self) -> float:
        if self._mode == "lone":
            g = float(leak_factor(self._phys, self._temp_c))
            return self._lone_base_w + self._lone_leak_w * g
        if self._mode == "corun":
            static = static_power_w(
                self._phys, self._corun_clock_mhz, self.profile.max_sm_clock_mhz, self._temp_c
            )
            return float(static) + self._corun_dynamic_w
        return self._idle_power_w()

    def _next_event_s(self) -> float:
        ends = [a.end_s for a in self._active.values()]
        if self._settle_until_s > self._t + _EPS_S:
            ends.append(self._settle_until_s)
        return min(ends, default=math.inf)

    # ------------------------------------------------------------------ internals: events
    def _handle_due_events(self, now: float) -> bool:
        changed = False
        for key, active in list(self._active.items()):
            if active.end_s <= now + _EPS_S:
                self._finish(key, active, now)
                changed = True
        if -math.inf < self._settle_until_s <= now + _EPS_S:
            self._settling_from = None
            self._settle_until_s = -math.inf
            changed = True
        return self._start_ready() or changed

    def _finish(self, key: str, active: _Active, now: float) -> None:
        self._account(active, now)
        active.busy_s = now - active.start_s  # exact span, not the sum of slices
        del self._active[key]
        self._finished_by_seq[active.job.seq] = active.record()
        if not self._active:
            self._idle_since_s = now
        if self.mechanisms.cache:
            job = active.job
            l2 = l2_bytes(self.model)
            moved = self._bytes_moved(job)
            for buffer in list(self._warmth):
                self._warmth[buffer] = warmth_after_traffic(self._warmth[buffer], moved, l2)
            # What it wrote is resident as far as L2 holds it (its output: about half of
            # what it moved).
            resident = min(1.0, l2 / max(moved / 2.0, 1.0))
            for buffer in job.writes:
                self._warmth[buffer] = resident

    def _bytes_moved(self, job: _Pending) -> float:
        bandwidth = (
            self.profile.link_bandwidth_bytes_per_s
            if job.over_link
            else self.profile.memory_bandwidth_bytes_per_s
        )
        return job.demand.memory_s * bandwidth * job.memory_eff

    def _start_ready(self) -> bool:
        started = False
        for key, queue in self._queues.items():
            if key not in self._active and queue:
                self._start(queue.popleft())
                started = True
        return started

    def _start(self, job: _Pending) -> None:
        now = self._t
        if not self._active and self.mechanisms.cache:
            idle_s = now - self._idle_since_s
            decay = self.params.cache_idle_decay_s
            self._warmth = {b: warmth_after_idle(w, idle_s, decay) for b, w in self._warmth.items()}
        warm = 0.0
        if job.reads and self.mechanisms.cache:
            warm = sum(self._warmth.get(b, 0.0) for b in job.reads) / len(job.reads)
        demand = job.demand
        if warm > 0.0:
            saved = self.params.cache_reuse_fraction * warm
            demand = replace(demand, memory_s=demand.memory_s * (1.0 - saved))
        time_scale, power_scale = 1.0, 1.0
        state = "normal"
        if self._noise:
            jitter = self.noise_model.time_jitter
            jitter = self._phys.time_jitter if jitter is None else jitter
            time_scale = max(0.5, 1.0 + jitter * self._rng.standard_normal())
            power_scale = max(0.5, 1.0 + self._phys.activity_jitter * self._rng.standard_normal())
            time_scale, power_scale, state = self._extra_noise(time_scale, power_scale)
        temp_key = round(self._temp_c, 1)
        self._active[job.stream] = _Active(
            job=job,
            start_s=now,
            demand=demand,
            temp_key_c=temp_key,
            time_scale=time_scale,
            power_scale=power_scale,
            temperature_start_c=self._temp_c,
            cache_warm=warm,
            settling_s=self._settling_left_s(),
            machine_state=state,
            t_regime=now,
        )

    def _advance_slow_noise(self, now: float) -> None:
        """Move the wander and the warmth from their last update to ``now``."""
        model = self.noise_model
        dt = now - self._noise_at_s
        if dt <= 0.0:
            return
        idle = 0.0 if self._active else min(dt, max(now - self._idle_since_s, 0.0))
        busy = dt - idle
        # The busy part of the interval came before its idle tail.
        warmth = 1.0 - (1.0 - self._ready_warmth) * math.exp(-busy / model.warm_tau_s)
        self._ready_warmth = warmth * math.exp(-idle / model.cool_tau_s)
        decay = math.exp(-dt / model.wander_tau_s)
        shock = self._extra_rng.standard_normal(2)
        self._wander_z = self._wander_z * decay + math.sqrt(1.0 - decay * decay) * shock
        self._noise_at_s = now

    def _slow_noise(self) -> tuple[float, float]:
        """Time and power multipliers of the wander and the warm-up drift now."""
        model = self.noise_model
        self._advance_slow_noise(self._t)
        cold = 1.0 - self._ready_warmth
        z_power, z_time = self._wander_z
        if self._locked_sm is not None:
            power = 1.0 + model.wander_power_locked * z_power - model.warmup_power_locked * cold
            time = 1.0 + model.wander_time_locked * z_time + model.warmup_time_locked * cold
        else:
            power = 1.0 + model.wander_power_unlocked * z_power
            power -= model.warmup_power_unlocked * cold
            time = 1.0 + model.wander_time_unlocked * z_time + model.warmup_time_unlocked * cold
        if model.time_jitter is not None:  # a chosen launch-time jitter is the whole time noise
            time = 1.0
        return max(0.5, time), max(0.5, power)

    def _extra_noise(self, time_scale: float, power_scale: float) -> tuple[float, float, str]:
        model = self.noise_model
        slow_time, slow_power = self._slow_noise()
        time_scale *= slow_time
        power_scale *= slow_power
        if self._locked_sm is None:
            # The boost clock wanders when unlocked (see NoiseModel for the data); a
            # chosen launch-time jitter replaces its share of the time noise.
            extra = model.unlocked_time_jitter if model.time_jitter is None else 0.0
            time_scale *= max(0.5, 1.0 + extra * self._extra_rng.standard_normal())
            power_scale *= max(
                0.5, 1.0 + model.unlocked_power_jitter * self._extra_rng.standard_normal()
            )
        state = "normal"
        if model.state_block_rate > 0:
            if self._state_block_left == 0 and self._extra_rng.random() < model.state_block_rate:
                self._state_block_left = model.state_block_runs
            if self._state_block_left > 0:
                self._state_block_left -= 1
                time_scale *= model.state_time_factor
                power_scale *= model.state_power_factor
                state = "degraded"
        return time_scale, power_scale, state

    # ------------------------------------------------------------------ internals: rates
    def _iso_run(self, active: _Active, f_set: float, limit: float) -> KernelRun:
        key = (active.demand, f_set, limit, active.temp_key_c)
        run = self._run_cache.get(key)
        if run is None:
            run = kernel_run(
                self._phys,
                active.demand,
                f_set,
                limit,
                active.temp_key_c,
                self.profile.max_sm_clock_mhz,
                self.profile.min_sm_clock_mhz,
            )
            if len(self._run_cache) > 4096:
                self._run_cache.clear()
            self._run_cache[key] = run
        return run

    def _co_kernels(
        self, collectives_only: bool = False
    ) -> list[tuple[_Active, KernelRun, CoRunKernel]]:
        f_set = self._sm_clock_set_mhz()
        limit = self._limit_now_w()
        out = []
        dram_per_link = (
            self.profile.link_bandwidth_bytes_per_s / self.profile.memory_bandwidth_bytes_per_s
        )
        f_max = self.profile.max_sm_clock_mhz
        g_now = float(leak_factor(self._phys, self._temp_c))
        ready_w = float(static_power_w(self._phys, f_set, f_max, self._temp_c))
        for active in self._active.values():
            job, d = active.job, active.demand
            if collectives_only and not job.over_link:
                continue
            run = self._iso_run(active, f_set, limit)
            # What it draws alone above the ready device, exactly as the lone regime
            # prices it (its own slice throttling and jitter included).
            g0 = float(leak_factor(self._phys, active.temp_key_c))
            alone_w = (run.power_w - run.leak_coeff_w * g0) * active.power_scale
            alone_w += run.leak_coeff_w * g_now
            out.append(
                (
                    active,
                    run,
                    CoRunKernel(
                        compute_s=d.compute_s,
                        memory_s=d.memory_s,
                        overlap_p=d.overlap_p,
                        launch_s=d.launch_s,
                        activity=d.activity,
                        mem_activity=d.mem_activity,
                        iso_clock_mhz=run.sm_clock_mhz,
                        dram_fraction=job.memory_eff * (dram_per_link if job.over_link else 1.0),
                        link_fraction=job.memory_eff if job.over_link else 0.0,
                        sm_share=job.sm_share,
                        sm_floor=self.params.comm_sm_fraction if job.over_link else 0.0,
                        power_scale=active.power_scale,
                        excess_w=alone_w - ready_w,
                    ),
                )
            )
        return out

    def _link_demands(self) -> list[float]:
        """Per running collective, the share of one link it demands alone."""
        f_max = self.profile.max_sm_clock_mhz
        return [
            link_demand(k, f_max)
            for _, _, k in self._co_kernels(collectives_only=True)
            if k.link_fraction > 0
        ]

    def _account(self, active: _Active, now: float) -> None:
        dt = now - active.t_regime
        if dt > 0:
            active.progress += dt / active.duration_s
            active.busy_s += dt
            active.power_time_j += active.power_ref_w * dt
            active.clock_time += active.clock_mhz * dt
            active.throttled = active.throttled or active.throttled_now
        active.t_regime = now

    def _resolve(self, limit_override_w: float | None = None, fabric_stretch: float = 1.0) -> None:
        """Recompute every running kernel's rate and the device's power from now on."""
        now = self._t
        self._limit_override_w = limit_override_w
        self._fabric_stretch = fabric_stretch
        for active in self._active.values():
            self._account(active, now)
        kernels = self._co_kernels()
        if not kernels:
            self._mode = "idle"
            return
        names = [a.job.name for a, _, _ in kernels]
        for i, (active, _, _) in enumerate(kernels):
            active.co_runners.update(n for j, n in enumerate(names) if j != i)
        lone_active, lone_run, lone_k = kernels[0]
        outside = [fabric_stretch if k.link_fraction > 0 else 1.0 for _, _, k in kernels]
        if len(kernels) == 1 and lone_k.sm_share is None and outside[0] <= 1.0:
            # Alone: the single-kernel physics, exactly (slice throttling, leakage).
            g0 = float(leak_factor(self._phys, lone_active.temp_key_c))
            base = (lone_run.power_w - lone_run.leak_coeff_w * g0) * lone_active.power_scale
            self._mode = "lone"
            self._lone_base_w = base
            self._lone_leak_w = lone_run.leak_coeff_w
            self._set_rate(
                lone_active,
                lone_run.duration_s * lone_active.time_scale,
                lone_run.sm_clock_mhz,
                base + lone_run.leak_coeff_w * g0,
                lone_run.throttled,
                now,
            )
            return
        result = co_run(
            self._phys,
            [k for _, _, k in kernels],
            self.profile.max_sm_clock_mhz,
            self.profile.min_sm_clock_mhz,
            self._limit_now_w(),
            self._temp_c,
            contention=self.mechanisms.contention,
            power_cap=self.mechanisms.power_cap,
            link_stretch=outside,
            set_clock_mhz=self._sm_clock_set_mhz(),
        )
        self._mode = "corun"
        self._corun_clock_mhz = result.static_clock_mhz
        self._corun_dynamic_w = result.dynamic_w
        power_ref = self._power_now_w()
        for i, (active, run, _) in enumerate(kernels):
            self._set_rate(
                active,
                run.duration_s * active.time_scale * result.slowdown[i],
                result.clock_mhz[i],
                power_ref,
                run.throttled or result.throttled[i],
                now,
            )

    @staticmethod
    def _set_rate(
        active: _Active,
        duration_s: float,
        clock_mhz: float,
        power_w: float,
        throttled: bool,
        now: float,
    ) -> None:
        if duration_s != active.duration_s:
            active.duration_s = duration_s
            active.end_s = now + (1.0 - active.progress) * duration_s
        active.clock_mhz = clock_mhz
        active.power_ref_w = power_w
        active.throttled_now = throttled

    # ------------------------------------------------------------------ internals: time
    def _advance_to(self, t_s: float) -> None:
        # Rates are constant up to t_s: the clock stops at every event.
        while self._t < t_s - _EPS_S:
            step = _STEP_BUSY_S if self._active else _STEP_IDLE_S
            seg_end = min(t_s, self._t + step, self._next_sensor_s)
            self._integrate(seg_end)
            if self._t >= self._next_sensor_s - _EPS_S:
                self._update_sensor()
        self._t = max(self._t, t_s)

    def _integrate(self, seg_end: float) -> None:
        dt = seg_end - self._t
        if dt <= 0:
            self._t = seg_end
            return
        power = self._power_now_w()
        self._energy_j += power * dt
        if self._record_trace:
            self._trace.append((self._t, seg_end, power))
        self._window.append((self._t, seg_end, power))
        if self.mechanisms.thermal:
            self._temp_c = thermal_step_c(self._phys, self._temp_c, power, dt)
        self._t = seg_end

    def _update_sensor(self) -> None:
        now = self._next_sensor_s
        # The averaged field sees only the last window of the interval (NVML's 25 ms of
        # 100 ms); what the GPU drew before it is never reported.
        start = now - self.power_average_window_s
        while self._window and self._window[0][1] <= start:
            self._window.popleft()
        energy = 0.0
        covered = 0.0
        for t0, t1, p in self._window:
            lo, hi = max(t0, start), min(t1, now)
            if hi > lo:
                energy += p * (hi - lo)
                covered += hi - lo
        last = self._window[-1][2] if self._window else self._power_now_w()
        average = energy / covered if covered > 0 else last
        for field_name, value in (("instant", last), ("average", average)):
            if self._noise:
                value *= 1.0 + self._phys.sensor_noise * self._sensor_rng.standard_normal()
            self._readings[field_name] = round(max(value, 0.0), 3)  # NVML reports mW
        self._reading_time = now
        self._next_sensor_s = now + SENSOR_PERIOD_S


def open_backend(
    indices: Sequence[int] | None, *, control: bool, sim_model: str, seed: int
) -> list[SimulatedGPU]:
    """Simulated GPUs at ``indices`` (one, GPU 0, when None) on one shared virtual clock:
    the ``sim`` backend's opener. GPU ``i`` draws its noise from ``[seed, i]``."""
    clock = VirtualClock()
    wanted = [0] if indices is None else list(indices)
    return [
        SimulatedGPU(sim_model, index=i, clock=clock, seed=seed, control=control) for i in wanted
    ]
