"""The simulated GPU (``eopt sim``): a physical GPU model that runs on virtual time.

:class:`VirtualClock` satisfies the :class:`~eopt.devices.base.Clock` protocol: ``sleep``
advances virtual time (the simulated GPUs idle or finish queued work meanwhile) and
``every`` callbacks fire synchronously at each period boundary the time crosses, so the
measurement layer's power sampler runs unchanged on the simulator.

:class:`SimulatedGPU` implements :class:`~eopt.devices.base.Device` with the physics of
:mod:`eopt.devices.sim_physics`, the kernels of :mod:`eopt.devices.sim_kernels` and
NVML-like sensors: a cumulative energy counter with mJ resolution (can be disabled), and a
power sensor that updates every 100 ms with seeded noise. Its ``average`` field is the mean
over only the last ``power_average_window_s`` before each update (25 ms on the shipped
profiles, as Yang, Adamek and Armour (SC24) found for NVML on A100 and H100), so a kernel
that falls entirely in the other 75 ms leaves no trace in it; ``instant`` is the draw at
the update. Ground truth for tests: :meth:`SimulatedGPU.true_energy_j`,
:meth:`SimulatedGPU.power_trace` and :attr:`SimulatedGPU.last_power_update_s`.

Example::

    gpu = SimulatedGPU("A100-SXM4-40GB", seed=0)
    gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200))
    seconds = gpu.launch("gemm", "cublas", {"m": 8192, "n": 8192, "k": 8192})
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eopt.devices.base import DeviceError, MeasureOnlyError, PowerReading
from eopt.devices.operating_point import OperatingPoint
from eopt.devices.sim_kernels import get_kernel
from eopt.devices.sim_physics import (
    KernelDemand,
    KernelRun,
    kernel_run,
    leak_factor,
    static_power_w,
    thermal_step_c,
)
from eopt.devices.sim_profiles import SENSOR_PERIOD_S, GpuProfile, load_profile

__all__ = ["MAX_SLEEP_S", "SENSOR_PERIOD_S", "KernelRecord", "SimulatedGPU", "VirtualClock"]

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
        """Advance virtual time to ``t_s``, running devices and timers in time order."""
        if self._in_callback:
            raise RuntimeError(
                "a virtual-clock timer callback tried to advance time; callbacks may only "
                "read devices"
            )
        while True:
            while self._timers and self._timers[0][2].cancelled:
                heapq.heappop(self._timers)
            next_timer = self._timers[0][0] if self._timers else math.inf
            target = min(t_s, next_timer)
            if target > self._now:
                for device in self._devices:
                    device._advance_to(target)
                self._now = target
            if next_timer <= t_s:
                _, _, timer = heapq.heappop(self._timers)
                self._fire(timer)
            else:
                return

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
        duration_s: Duration, in s.
        sm_clock_mhz: Average effective SM clock, in MHz.
        throttled: Whether the power limit lowered the clock.
        power_w: Average power at the start temperature, in W.
    """

    kernel: str
    impl: str
    start_s: float
    duration_s: float
    sm_clock_mhz: float
    throttled: bool
    power_w: float

    @property
    def end_s(self) -> float:
        """Virtual end time, in s."""
        return self.start_s + self.duration_s


@dataclass
class _Running:
    record: KernelRecord
    base_power_w: float  # the part of the power that does not follow temperature
    leak_coeff_w: float


class SimulatedGPU:
    """A simulated GPU implementing the ``Device`` protocol on virtual time.

    Args:
        model: Profile name (see :func:`eopt.devices.sim_profiles.available_profiles`).
        index: Device index; the name is ``sim<index>``.
        clock: Virtual clock to run on (shared by GPUs that run side by side); a new one
            by default.
        seed: Seed of the run-to-run jitter and sensor noise.
        energy_counter: Offer the cumulative energy counter (False exercises the power
            sampler path of the measurement layer).
        power_field: What :meth:`power` returns: ``"instant"`` or ``"average"``.
        noise: Apply launch jitter and sensor noise (False gives exact, noise-free runs).
        control: Allow changing the operating point (False: measure-only).
        record_trace: Keep the exact power trace (see :meth:`power_trace`).

    Attributes:
        power_update_period_s: How often the power sensor refreshes, in s (the meter polls
            it faster and integrates its refreshes).
        power_average_window_s: The span the ``average`` field averages, in s: the last
            window before each refresh (the profile's ``power_average_window_s``; set it
            to ``power_update_period_s`` for a mean over the whole interval).
    """

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
    ) -> None:
        if power_field not in ("instant", "average"):
            raise ValueError(f"power_field must be 'instant' or 'average', got {power_field!r}")
        self.profile: GpuProfile = load_profile(model)
        self.power_average_window_s: float = self.profile.power_average_window_s
        self.index = index
        self.name = f"sim{index}"
        self.model = self.profile.model
        self.clock: VirtualClock = clock if clock is not None else VirtualClock()
        self.clock.attach(self)
        self.control = control
        self._phys = self.profile.physics
        # Separate streams: how often the sensor updates never shifts the launch jitter.
        work_seed, sensor_seed = np.random.SeedSequence([seed, index]).spawn(2)
        self._rng = np.random.default_rng(work_seed)
        self._sensor_rng = np.random.default_rng(sensor_seed)
        self._noise = noise
        self._has_counter = energy_counter
        self._power_field = power_field
        self._record_trace = record_trace

        self._t = self.clock.now()
        self._locked_sm: float | None = None
        self._locked_mem: float | None = None
        self._limit_w = self.profile.power_limit_default_w
        self._original: tuple[float | None, float | None, float] | None = None

        self._queue: deque[tuple[str, str, dict[str, float], KernelDemand]] = deque()
        self._running: _Running | None = None
        self._records: list[KernelRecord] = []
        self._run_cache: dict[tuple[Any, ...], KernelRun] = {}
        self._demand_cache: dict[tuple[Any, ...], KernelDemand] = {}

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
        if sm is not None:
            self._locked_sm = float(sm)
        if mem is not None:
            self._locked_mem = float(mem)
        if limit is not None:
            self._limit_w = float(limit)

    def restore(self) -> None:
        """Put back the clocks and limit found before the first change (no-op if none)."""
        if self._original is None:
            return
        self._locked_sm, self._locked_mem, self._limit_w = self._original
        self._original = None

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

    def synchronize(self) -> None:
        """Advance virtual time until every queued kernel on this GPU has finished."""
        while self._running is not None or self._queue:
            if self._running is None:
                self._start_next()
            running = self._running
            assert running is not None
            self.clock.advance_to(max(running.record.end_s, self.clock.now()))
            if self._running is running:  # ended within rounding of the current time
                self._records.append(running.record)
                self._running = None

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
        """Every kernel invocation started so far, in order."""
        records = list(self._records)
        if self._running is not None:
            records.append(self._running.record)
        return records

    def static_power_w(self) -> float:
        """Exact idle draw at the current setting and temperature, in W."""
        return self._idle_power_w()

    # ------------------------------------------------------------------ work
    def enqueue(
        self, kernel: str, impl: str | None = None, workload: Mapping[str, Any] | None = None
    ) -> None:
        """Queue one kernel invocation without waiting (like a CUDA launch).

        Raises:
            ValueError: for an unknown kernel, implementation or workload key.
        """
        spec = get_kernel(kernel)
        impl_name = spec.implementation(impl).name
        theta = spec.workload(workload)
        demand = self.kernel_demand(spec.name, impl_name, theta)
        self._queue.append((spec.name, impl_name, theta, demand))
        if self._running is None and len(self._queue) == 1:
            self._start_next()

    def kernel_demand(
        self, kernel: str, impl: str | None = None, workload: Mapping[str, Any] | None = None
    ) -> KernelDemand:
        """What one invocation of ``kernel`` asks of this GPU; checks it without running it.

        Raises:
            ValueError: for an unknown kernel, implementation or workload key, or a
                workload whose invocation would run longer than the simulator allows
                (:data:`eopt.devices.sim_kernels.MAX_INVOCATION_S` at the lowest clock).
        """
        spec = get_kernel(kernel)
        impl_name = spec.implementation(impl).name
        theta = spec.workload(workload)
        key = (spec.name, impl_name, tuple(sorted(theta.items())))
        demand = self._demand_cache.get(key)
        if demand is None:
            demand = spec.demand(self.profile, impl_name, theta)
            self._demand_cache[key] = demand
        return demand

    def launch(
        self, kernel: str, impl: str | None = None, workload: Mapping[str, Any] | None = None
    ) -> float:
        """Run one kernel invocation to completion, advancing virtual time.

        Args:
            kernel: Catalog name (``gemm``, ``attention``, …; ``sim:`` prefix accepted).
            impl: Implementation name; the kernel's default when None.
            workload: θ (sizes), completed with the kernel's defaults.

        Returns:
            The invocation's duration, in s.
        """
        self.enqueue(kernel, impl, workload)
        self.synchronize()
        return self._records[-1].duration_s

    def idle(self, duration_s: float) -> None:
        """Let ``duration_s`` of virtual time pass (the GPU finishes queued work, then idles)."""
        self.clock.sleep(duration_s)

    # ------------------------------------------------------------------ internals
    def _sm_clock_set_mhz(self) -> float:
        return self._locked_sm if self._locked_sm is not None else self.profile.max_sm_clock_mhz

    def _idle_power_w(self) -> float:
        f = self._locked_sm if self._locked_sm is not None else self.profile.idle_sm_clock_mhz
        return float(static_power_w(self._phys, f, self.profile.max_sm_clock_mhz, self._temp_c))

    def _power_now_w(self) -> float:
        if self._running is None:
            return self._idle_power_w()
        g = float(leak_factor(self._phys, self._temp_c))
        return self._running.base_power_w + self._running.leak_coeff_w * g

    def _start_next(self) -> None:
        name, impl, _theta, demand = self._queue.popleft()
        f_set = self._sm_clock_set_mhz()
        key = (demand, f_set, self._limit_w, round(self._temp_c, 1))
        run = self._run_cache.get(key)
        if run is None:
            run = kernel_run(
                self._phys,
                demand,
                f_set,
                self._limit_w,
                round(self._temp_c, 1),
                self.profile.max_sm_clock_mhz,
                self.profile.min_sm_clock_mhz,
            )
            if len(self._run_cache) > 4096:
                self._run_cache.clear()
            self._run_cache[key] = run
        time_scale, power_scale = 1.0, 1.0
        if self._noise:
            time_scale = max(0.5, 1.0 + self._phys.time_jitter * self._rng.standard_normal())
            power_scale = max(0.5, 1.0 + self._phys.activity_jitter * self._rng.standard_normal())
        g0 = float(leak_factor(self._phys, round(self._temp_c, 1)))
        base = (run.power_w - run.leak_coeff_w * g0) * power_scale
        record = KernelRecord(
            kernel=name,
            impl=impl,
            start_s=self._t,
            duration_s=run.duration_s * time_scale,
            sm_clock_mhz=run.sm_clock_mhz,
            throttled=run.throttled,
            power_w=base + run.leak_coeff_w * g0,
        )
        self._running = _Running(record, base, run.leak_coeff_w)

    def _advance_to(self, t_s: float) -> None:
        while self._t < t_s - _EPS_S:
            if self._running is None and self._queue:
                self._start_next()
            running = self._running
            step = _STEP_BUSY_S if running is not None else _STEP_IDLE_S
            seg_end = min(t_s, self._t + step, self._next_sensor_s)
            if running is not None:
                seg_end = min(seg_end, running.record.end_s)
            self._integrate(seg_end)
            if self._t >= self._next_sensor_s - _EPS_S:
                self._update_sensor()
            if running is not None and self._t >= running.record.end_s - _EPS_S:
                self._records.append(running.record)
                self._running = None
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
