"""Repeated measurement of one (κ, ω) cell into an energy signature.

The protocol, in order:

1. **Static power** (:func:`measure_static_power`): after the operating point is set, the
   ready device idles for a settling time, then its draw is measured over an idle window
   of at least ten sensor periods. It is the ``s`` of the signature, so that
   ``d = E − s·T`` is the energy the kernel adds.
2. **Calibration and warm-up**: one invocation is timed; invocations are then grouped into
   windows of ``k`` back-to-back calls so that each window lasts at least ``min_window_s``
   (ten sensor periods by default: a power sensor that refreshes every 100 ms cannot
   resolve anything shorter). ``warmup`` windows are run and discarded; in the last one
   each invocation is synchronised and timed on its own (for the single-run variance).
3. **Measured windows**, back to back (or separated by ``cooldown_s``), until both
   ``min_runs`` windows and ``min_time_s`` of measured time are reached (or a budget runs
   out, which is flagged). Window energies are read off the meter's trace only after the
   last window, so the device never idles between windows while the meter waits for a
   sample.
4. **Statistics** on the per-invocation values of each window: mean, single-run variance,
   medians, bootstrap CIs, warm-up drift and state-change tests. Anything suspicious is
   recorded in ``meta["flags"]``; no run is ever dropped.

What the device really ran at is read, never assumed (:class:`DeviceStateProbe`): where a
device offers them, its SM and memory clocks, clocks-event ("throttle") reasons and the
power limit it enforces are read once a sensor period during the cell and at each
window's edges, recorded per window (``meta["runs"]``) and compared with the operating
point the cell asked for: a clock that did not hold, a limit another one overrides, a
thermal or power-brake slowdown, and windows that fell in gaps of the meter's readings are
flagged (:data:`STATE_FLAGS`).
"""

from __future__ import annotations

import datetime as _dt
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eopt.devices.base import Device, SensorReadError, Timer
from eopt.measure.meter import Meter, WindowEnergy
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature
from eopt.runs.stats import Summary, detect_state_change, detect_warmup_drift, summarize

__all__ = [
    "SLOWDOWN_REASONS",
    "STATE_FLAGS",
    "CellRuns",
    "DeviceStateProbe",
    "RepeatPolicy",
    "StaticPower",
    "WindowState",
    "measure_signature",
    "measure_static_power",
    "run_repeats",
    "signature_from_runs",
]


# Single runs timed one by one in the last warm-up window (enough for their variance).
_MAX_TIMED_RUNS = 2000


@dataclass(frozen=True)
class RepeatPolicy:
    """How often and how long to repeat a cell.

    Attributes:
        warmup: Windows run and discarded before measuring.
        min_runs: Minimum measured windows.
        min_time_s: Minimum total measured time, in s.
        max_runs: Stop after this many windows even if ``min_time_s`` is not reached.
        max_time_s: Stop after this much measured time, in s.
        cooldown_s: Idle time between windows, in s (0: back to back).
        min_window_s: Shortest window, in s; default ten sensor update periods.
        static_idle_s: Length of the idle window that measures static power, in s;
            default ten sensor update periods.
        settle_s: Idle time before the static window (clocks and sensor settle), in s.
        confidence: Level of the bootstrap intervals.
        n_boot: Bootstrap resamples.
        seed: Seed of the bootstrap and permutation tests.
        alpha: Significance level of the drift and state-change tests.
        min_effect: Smallest relative change the tests flag.
        max_inner_repeats: Most invocations in one window. A kernel so short that
            ``min_window_s`` would need more gets shorter windows, flagged as such
            (the simulator spends CPU time on every invocation: 10⁵ of them per window
            would take minutes a cell).
    """

    warmup: int = 2
    min_runs: int = 10
    min_time_s: float = 1.0
    max_runs: int = 200
    max_time_s: float = 300.0
    cooldown_s: float = 0.0
    min_window_s: float | None = None
    static_idle_s: float | None = None
    settle_s: float = 0.5
    confidence: float = 0.95
    n_boot: int = 2000
    seed: int = 0
    alpha: float = 0.01
    min_effect: float = 0.01
    max_inner_repeats: int = 20_000

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError(f"warmup must be ≥ 0, got {self.warmup}")
        if self.min_runs < 1:
            raise ValueError(f"min_runs must be ≥ 1, got {self.min_runs}")
        if self.max_runs < self.min_runs:
            raise ValueError(f"max_runs ({self.max_runs}) < min_runs ({self.min_runs})")
        for name in ("min_time_s", "max_time_s", "cooldown_s", "settle_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.max_inner_repeats < 1:
            raise ValueError(f"max_inner_repeats must be ≥ 1, got {self.max_inner_repeats}")


@dataclass(frozen=True)
class StaticPower:
    """The ready device's draw at the current operating point.

    Attributes:
        power_w: Mean power over the idle window, in W.
        window: The idle window's energy reading.
    """

    power_w: float
    window: WindowEnergy

    def to_meta(self) -> dict[str, Any]:
        """What goes into ``Signature.meta["static"]``."""
        return {
            "power_w": self.power_w,
            "idle_s": self.window.duration_s,
            "error_w": self.window.error_j / self.window.duration_s
            if self.window.duration_s > 0
            else 0.0,
            "gap_s": self.window.gap_s,
        }


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def measure_static_power(
    device: Device, meter: Meter, idle_s: float | None = None, settle_s: float = 0.5
) -> StaticPower:
    """Measure the ready device's draw: idle ``settle_s``, then measure ``idle_s`` of idle.

    Args:
        device: The device, already at the operating point.
        meter: A started meter on it.
        idle_s: Measured idle time, in s; default ten sensor periods.
        settle_s: Idle time before measuring, in s.
    """
    window_s = idle_s if idle_s is not None else 10 * meter.sensor_period_s
    if not window_s > 0:
        raise ValueError(f"static idle window must be positive, got {window_s}")
    device.synchronize()
    device.clock.sleep(settle_s)
    t0 = meter.mark()
    device.clock.sleep(window_s)
    t1 = meter.mark()
    window = meter.energy(t0, t1)
    return StaticPower(window.mean_power_w, window)


#: Clocks-event reasons that mean something other than the cell's request held the clocks
#: down: heat, the board's hardware protection, a power brake. (``sw_power_cap`` is the
#: power limit doing its job, and shows as a clock below a locked one; ``gpu_idle`` and
#: ``applications_clocks_setting`` are what an idle GPU and a clock lock look like.)
SLOWDOWN_REASONS = frozenset(
    {
        "hw_slowdown",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "board_limit",
        "reliability",
    }
)

#: The flags that compare what the device ran at with the request, and meter gaps.
STATE_FLAGS = (
    "sm_clock_off_request",
    "mem_clock_off_request",
    "power_limit_not_enforced",
    "throttled",
    "meter_gap",
)

# A locked clock counts as held within one step of the usual 15 MHz tables, or 1 % of the
# clock where that is more (memory clocks read back within 1 % of the table's value).
_CLOCK_STEP_MHZ = 15.0
_CLOCK_REL = 0.01
# Boards round power limits to whole watts.
_LIMIT_TOLERANCE_W = 1.0


@dataclass(frozen=True)
class WindowState:
    """What the device ran at during one measured window (None: not readable there).

    Attributes:
        sm_clock_mhz: Mean SM clock over the readings inside the window (those at its
            edges when none fell inside), in MHz.
        mem_clock_mhz: Mean memory clock, likewise, in MHz.
        clocks_event_reasons: Every clocks-event reason read in or at the edges of the
            window, sorted (None where the device cannot report them).
        enforced_power_limit_w: The lowest enforced power limit read, in W.
        readings: How many readings (inside the window and at its two edges).
    """

    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    clocks_event_reasons: tuple[str, ...] | None
    enforced_power_limit_w: float | None
    readings: int


class DeviceStateProbe:
    """Reads what a device really runs at, on a timer and on demand, for per-window records.

    It reads those of ``sm_clock_mhz()``, ``mem_clock_mhz()`` (current clocks, MHz),
    ``clocks_event_reasons()`` (a set of names) and ``enforced_power_limit_w()`` (W) that
    the device offers; a device offering none of them (the simulator) gets an inactive
    probe that never starts a timer. What a reading returns, not what eopt asked for, is
    what is recorded.

    A reading that fails is a gap in these diagnostics, never a failed measurement: a
    transient :class:`~eopt.devices.base.SensorReadError` skips that one reading; any other
    error stops reading that quantity and is kept in :attr:`errors`; a reading of None (the
    device cannot say) stops reading it quietly.

    Args:
        device: The device.
        period_s: Timer period, in s (a meter's sensor period is a good one).
    """

    READINGS = ("sm_clock_mhz", "mem_clock_mhz", "clocks_event_reasons", "enforced_power_limit_w")

    def __init__(self, device: Device, period_s: float) -> None:
        if not period_s > 0:
            raise ValueError(f"probe period must be positive, got {period_s}")
        self.device = device
        self.period_s = float(period_s)
        self._readers: dict[str, Callable[[], Any]] = {}
        for name in self.READINGS:
            reader = getattr(device, name, None)
            if callable(reader):
                self._readers[name] = reader
        self._offered = tuple(self._readers)
        #: Quantity → why it stopped being read.
        self.errors: dict[str, str] = {}
        self._samples: list[tuple[float, dict[str, Any]]] = []
        self._lock = threading.Lock()  # the timer's thread and the measuring one both read
        self._timer: Timer | None = None

    @property
    def active(self) -> bool:
        """Whether the device offers anything to read."""
        return bool(self._readers)

    @property
    def readable(self) -> tuple[str, ...]:
        """The quantities this device offers (see :attr:`READINGS`), including any that
        stopped being read (:attr:`errors`)."""
        return self._offered

    def start(self) -> DeviceStateProbe:
        """Read once and start the timer (nothing for an inactive probe); returns ``self``."""
        if self.active and self._timer is None:
            self.sample()
            self._timer = self.device.clock.every(self.period_s, self._on_timer)
        return self

    def stop(self) -> None:
        """Stop the timer (the readings stay)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self, now: float) -> None:
        self.sample(now)

    def sample(self, now: float | None = None) -> dict[str, Any]:
        """Read every quantity once now; returns the readings (absent: not read)."""
        t = self.device.clock.now() if now is None else now
        values: dict[str, Any] = {}
        for name, read in list(self._readers.items()):
            try:
                value = read()
            except SensorReadError:
                continue  # the next reading may succeed
            except Exception as exc:  # diagnostics must never fail the measurement
                self.errors[name] = f"{type(exc).__name__}: {exc}"
                self._readers.pop(name, None)
                continue
            if value is None:
                # The device cannot say here (an old driver, no power management), and
                # will not later: stop asking.
                self._readers.pop(name, None)
                continue
            if name == "clocks_event_reasons":
                values[name] = tuple(sorted(str(r) for r in value))
            else:
                values[name] = float(value)
        with self._lock:
            self._samples.append((t, values))
        return values

    def between(self, start_s: float, end_s: float) -> list[dict[str, Any]]:
        """The timer's readings strictly inside ``(start_s, end_s)``."""
        with self._lock:
            return [v for t, v in self._samples if start_s < t < end_s]

    def window(
        self, start_s: float, end_s: float, edges: Sequence[Mapping[str, Any]] = ()
    ) -> WindowState:
        """Summarize the readings of one window and of its edges.

        Args:
            start_s: Window start on the device's clock, in s.
            end_s: Window end, in s.
            edges: Readings taken just before the window opened and just after it closed.
        """
        inside = self.between(start_s, end_s)
        every = [*inside, *edges]

        def mean(name: str) -> float | None:
            values = [r[name] for r in inside if name in r] or [r[name] for r in edges if name in r]
            return sum(values) / len(values) if values else None

        reasons: tuple[str, ...] | None = None
        seen = [r["clocks_event_reasons"] for r in every if "clocks_event_reasons" in r]
        if seen:
            reasons = tuple(sorted(set().union(*seen)))
        limits = [r["enforced_power_limit_w"] for r in every if "enforced_power_limit_w" in r]
        return WindowState(
            sm_clock_mhz=mean("sm_clock_mhz"),
            mem_clock_mhz=mean("mem_clock_mhz"),
            clocks_event_reasons=reasons,
            enforced_power_limit_w=min(limits) if limits else None,
            readings=len(every),
        )


@dataclass(frozen=True)
class CellRuns:
    """The raw outcome of :func:`run_repeats`: per-invocation values of every window.

    Attributes:
        time_s: Per-invocation time of each measured window (window time / k), in s.
        energy_j: Per-invocation energy of each window (window energy / k), in J.
        inner_repeats: k, invocations per window.
        windows: The windows' energy readings.
        warmup_windows: Windows run and discarded.
        budget_reached: True when ``max_runs`` / ``max_time_s`` stopped the loop before
            ``min_runs`` and ``min_time_s`` were both met.
        started_at: UTC ISO time when the cell started.
        finished_at: UTC ISO time when it finished.
        meter: The meter's description.
        single_times_s: Times of single invocations, each synchronised, from the last
            warm-up window (empty when ``k`` is 1 or there is no warm-up), in s.
        states: What the device ran at in each measured window (empty when the device
            offers no readings; see :class:`DeviceStateProbe`).
        state_readable: The quantities the device offered to read.
        state_errors: Quantity → why it stopped being read during the cell.
    """

    time_s: np.ndarray
    energy_j: np.ndarray
    inner_repeats: int
    windows: tuple[WindowEnergy, ...]
    warmup_windows: int
    budget_reached: bool
    started_at: str
    finished_at: str
    meter: dict[str, Any] = field(default_factory=dict)
    single_times_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    states: tuple[WindowState, ...] = ()
    state_readable: tuple[str, ...] = ()
    state_errors: Mapping[str, str] = field(default_factory=dict)


def run_repeats(
    device: Device,
    meter: Meter,
    run: Callable[[], object],
    policy: RepeatPolicy | None = None,
    sync: Callable[[], object] | None = None,
) -> CellRuns:
    """Warm up, then run windows of ``k`` invocations until the policy is satisfied.

    Args:
        device: The device the invocations run on.
        meter: A started meter on it.
        run: One invocation (returns when its work is queued or done).
        policy: Repeat counts and durations.
        sync: Waits for queued work (default ``device.synchronize``); called before each
            window closes, so asynchronous launches are charged to their window. On an
            NVML GPU ``device.synchronize`` cannot see CUDA work and returns at once:
            asynchronous callables must pass the framework's own (e.g.
            ``torch.cuda.synchronize``), or each window measures only the launches.
    """
    pol = policy or RepeatPolicy()
    probe = DeviceStateProbe(device, meter.sensor_period_s)
    probe.start()
    try:
        return _run_repeats(device, meter, run, pol, sync, probe)
    finally:
        probe.stop()


def _run_repeats(
    device: Device,
    meter: Meter,
    run: Callable[[], object],
    pol: RepeatPolicy,
    sync: Callable[[], object] | None,
    probe: DeviceStateProbe,
) -> CellRuns:
    """:func:`run_repeats` with its device-state probe started."""
    wait = sync if sync is not None else device.synchronize
    started = _utc_now()
    min_window = pol.min_window_s if pol.min_window_s is not None else 10 * meter.sensor_period_s

    # Calibrate: time one invocation (it also counts as warm-up).
    wait()
    t0 = meter.mark()
    run()
    wait()
    single = meter.mark() - t0
    k = max(1, math.ceil(min_window / single)) if single > 0 else 1
    k = min(k, pol.max_inner_repeats)

    def edge() -> dict[str, Any]:
        # Outside the window's marks: the readings cost NVML calls, not window time.
        return probe.sample() if probe.active else {}

    def one_window() -> tuple[float, float, tuple[dict[str, Any], dict[str, Any]]]:
        wait()
        before = edge()
        a = meter.mark()
        for _ in range(k):
            run()
        wait()
        b = meter.mark()
        return a, b, (before, edge())

    for _ in range(pol.warmup - 1):
        one_window()
    singles: list[float] = []
    if pol.warmup >= 1:
        # The last warm-up window times each invocation on its own: the spread of single
        # runs, which windows of k runs average away (see signature_from_runs).
        clock = device.clock
        timed = min(k, _MAX_TIMED_RUNS)
        for _ in range(timed):
            wait()
            a = clock.now()
            run()
            wait()
            singles.append(clock.now() - a)
        for _ in range(k - timed):
            run()

    marks: list[tuple[float, float]] = []
    edges: list[tuple[dict[str, Any], dict[str, Any]]] = []
    measured = 0.0
    budget = False
    while True:
        if pol.cooldown_s > 0 and marks:
            device.clock.sleep(pol.cooldown_s)
        a, b, ends = one_window()
        marks.append((a, b))
        edges.append(ends)
        measured += b - a
        if len(marks) >= pol.min_runs and measured >= pol.min_time_s:
            break
        if len(marks) >= pol.max_runs or measured >= pol.max_time_s:
            budget = True
            break

    windows = tuple(meter.energy(a, b) for a, b in marks)
    states = (
        tuple(probe.window(a, b, ends) for (a, b), ends in zip(marks, edges, strict=True))
        if probe.active
        else ()
    )
    return CellRuns(
        time_s=np.array([w.duration_s / k for w in windows]),
        energy_j=np.array([w.energy_j / k for w in windows]),
        inner_repeats=k,
        windows=windows,
        warmup_windows=pol.warmup,
        budget_reached=budget,
        started_at=started,
        finished_at=_utc_now(),
        meter=meter.describe(),
        single_times_s=np.array(singles if k > 1 else []),
        states=states,
        state_readable=probe.readable,
        state_errors=dict(probe.errors),
    )


def _flag(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"code": code, "message": message, **details}


def _quality_flags(runs: CellRuns, pol: RepeatPolicy, sensor_period_s: float) -> list[dict]:
    """Drift, state change, budget and resolution flags (never drops a run)."""
    flags: list[dict[str, Any]] = []
    for quantity, values in (("time", runs.time_s), ("energy", runs.energy_j)):
        drift = detect_warmup_drift(values, alpha=pol.alpha, min_effect=pol.min_effect)
        if drift.detected:
            flags.append(
                _flag(
                    "warmup_drift",
                    f"{quantity} trends by {drift.relative_change:+.1%} over the first "
                    f"{drift.runs} runs (p={drift.p_value:.2g}); more warm-up may be needed",
                    quantity=quantity,
                    runs=drift.runs,
                    relative_change=drift.relative_change,
                    p_value=drift.p_value,
                )
            )
        change = detect_state_change(
            values, alpha=pol.alpha, min_effect=pol.min_effect, seed=pol.seed
        )
        if change.detected:
            blocks = ", ".join(
                f"runs {s.start}–{s.stop - 1}: {s.mean:.4g}" for s in change.segments
            )
            flags.append(
                _flag(
                    "state_change",
                    f"{quantity} differs between blocks of runs ({blocks}); the machine "
                    "state changed during the cell — all runs are kept in the statistics",
                    quantity=quantity,
                    segments=[s.to_dict() for s in change.segments],
                    p_values=list(change.p_values),
                )
            )
    if runs.budget_reached:
        flags.append(
            _flag(
                "budget_reached",
                f"stopped after {len(runs.windows)} windows: max_runs or max_time_s reached "
                "before min_runs and min_time_s",
            )
        )
    short = sum(1 for w in runs.windows if w.short)
    rel_error = float(np.mean([w.relative_error for w in runs.windows]))
    if not short and rel_error > 0.02:
        flags.append(
            _flag(
                "large_energy_error",
                f"energy error estimated at ±{rel_error:.1%} per window: the load changes "
                f"faster than the {runs.meter.get('power_field')} power field resolves; use "
                "the energy counter or an averaging power field where the GPU has one",
                relative_error=rel_error,
            )
        )
    if short and runs.windows[0].method == "sampler":
        rel = float(np.mean([w.relative_error for w in runs.windows]))
        flags.append(
            _flag(
                "short_window",
                f"{short} of {len(runs.windows)} windows are shorter than ten sensor periods "
                f"({10 * sensor_period_s:.3g} s); energy error up to ±{rel:.1%} per window",
                relative_error=rel,
            )
        )
    if runs.inner_repeats >= pol.max_inner_repeats:
        flags.append(
            _flag(
                "inner_repeats_capped",
                f"one invocation is so short that a window holds the most allowed, "
                f"{pol.max_inner_repeats} invocations ({runs.time_s.mean() * 1e6:.3g} µs "
                "each); windows are shorter than asked; measure a larger workload",
                inner_repeats=runs.inner_repeats,
            )
        )
    return flags


def _clock_tolerance_mhz(requested: float) -> float:
    return max(_CLOCK_STEP_MHZ, _CLOCK_REL * requested)


def _window_list(indices: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:8])
    return shown + (f" … ({len(indices)} in all)" if len(indices) > 8 else "")


def _clock_flag(
    code: str, what: str, requested: float | None, observed: Sequence[float | None],
    reasons: Sequence[tuple[str, ...] | None],
) -> dict[str, Any] | None:  # fmt: skip
    """A flag when a locked clock's mean differs from the lock in any window."""
    if requested is None:
        return None
    tol = _clock_tolerance_mhz(requested)
    off = [i for i, f in enumerate(observed) if f is not None and abs(f - requested) > tol]
    if not off:
        return None
    values = [f for f in observed if f is not None and abs(f - requested) > tol]
    seen = sorted({r for i in off for r in (reasons[i] or ())} - {"gpu_idle"})
    why = f" (clocks-event reasons: {', '.join(seen)})" if seen else ""
    lo, hi = min(values), max(values)
    span = f"{lo:.0f} MHz" if abs(hi - lo) < 0.5 else f"{lo:.0f}–{hi:.0f} MHz"
    return _flag(
        code,
        f"the {what} clock averaged {span} in {len(off)} of {len(observed)} windows "
        f"(windows {_window_list(off)}), not the requested {requested:g} MHz{why}; the "
        "cell's time and energy are those of the clock the GPU ran at, not of the one its "
        "operating point names",
        requested_mhz=requested,
        windows=off,
        observed_mhz=values,
        reasons=seen,
    )


def _state_flags(
    runs: CellRuns, op_point: OperatingPoint | None, static: StaticPower
) -> list[dict[str, Any]]:
    """What the device ran at against the request, slowdowns, and meter gaps."""
    flags: list[dict[str, Any]] = []
    states = runs.states
    reasons = [s.clocks_event_reasons for s in states]
    if op_point is not None and states:
        for code, what, requested, observed in (
            ("sm_clock_off_request", "SM", op_point.sm_clock_mhz,
             [s.sm_clock_mhz for s in states]),
            ("mem_clock_off_request", "memory", op_point.mem_clock_mhz,
             [s.mem_clock_mhz for s in states]),
        ):  # fmt: skip
            flag = _clock_flag(code, what, requested, observed, reasons)
            if flag is not None:
                flags.append(flag)
        limit = op_point.power_limit_w
        enforced = [s.enforced_power_limit_w for s in states]
        off = [
            i
            for i, e in enumerate(enforced)
            if limit is not None and e is not None and abs(e - limit) > _LIMIT_TOLERANCE_W
        ]
        if off:
            values = sorted({enforced[i] for i in off})  # type: ignore[type-var]
            flags.append(
                _flag(
                    "power_limit_not_enforced",
                    f"the GPU enforced a power limit of "
                    f"{', '.join(f'{v:g}' for v in values)} W in {len(off)} of "
                    f"{len(states)} windows, not the {limit:g} W this cell records: another "
                    "limit (another tool's, the BMC's or a system power cap) won",
                    requested_w=limit,
                    windows=off,
                    enforced_w=values,
                )
            )
    slow = [i for i, r in enumerate(reasons) if r and SLOWDOWN_REASONS.intersection(r)]
    if slow:
        seen = sorted({x for i in slow for x in reasons[i] or ()} & SLOWDOWN_REASONS)
        flags.append(
            _flag(
                "throttled",
                f"the GPU slowed itself down ({', '.join(seen)}) in {len(slow)} of "
                f"{len(states)} windows (windows {_window_list(slow)}): heat or the board's "
                "protection, not the requested setting, shaped these runs",
                windows=slow,
                reasons=seen,
            )
        )
    gapped = [i for i, w in enumerate(runs.windows) if w.gap_s > 0]
    static_gap = static.window.gap_s
    if gapped or static_gap > 0:
        total = sum(runs.windows[i].gap_s for i in gapped)
        parts = []
        if gapped:
            parts.append(
                f"{total:.3g} s of {len(gapped)} of {len(runs.windows)} windows "
                f"(windows {_window_list(gapped)})"
            )
        if static_gap > 0:
            parts.append(f"{static_gap:.3g} s of the static-power window")
        flags.append(
            _flag(
                "meter_gap",
                f"the meter's readings failed for {' and '.join(parts)}; the energy there "
                "is interpolated and its uncertainty is in energy_error_j",
                windows=gapped,
                gap_s=total,
                static_gap_s=static_gap,
            )
        )
    return flags


def _state_meta(runs: CellRuns) -> dict[str, Any]:
    """``meta["device_state"]``: the cell's readings summarized (None: not readable)."""
    states = runs.states

    def present(values: list[float | None]) -> list[float]:
        return [v for v in values if v is not None]

    sm = present([s.sm_clock_mhz for s in states])
    mem = present([s.mem_clock_mhz for s in states])
    limits = present([s.enforced_power_limit_w for s in states])
    seen = [s.clocks_event_reasons for s in states if s.clocks_event_reasons is not None]
    return {
        "read": list(runs.state_readable),
        "sm_clock_mhz": sum(sm) / len(sm) if sm else None,
        "sm_clock_mhz_range": [min(sm), max(sm)] if sm else None,
        "mem_clock_mhz": sum(mem) / len(mem) if mem else None,
        "enforced_power_limit_w": min(limits) if limits else None,
        "clocks_event_reasons": sorted(set().union(*seen)) if seen else None,
        **({"read_errors": dict(runs.state_errors)} if runs.state_errors else {}),
    }


def _runs_meta(runs: CellRuns) -> dict[str, Any]:
    """``meta["runs"]``: one entry per measured window in every list."""
    out: dict[str, Any] = {
        "time_s": runs.time_s.tolist(),
        "energy_j": runs.energy_j.tolist(),
        "gap_s": [w.gap_s for w in runs.windows],
    }
    if runs.states:
        out["sm_clock_mhz"] = [s.sm_clock_mhz for s in runs.states]
        out["mem_clock_mhz"] = [s.mem_clock_mhz for s in runs.states]
        out["clocks_event_reasons"] = [
            list(s.clocks_event_reasons) if s.clocks_event_reasons is not None else None
            for s in runs.states
        ]
        out["enforced_power_limit_w"] = [s.enforced_power_limit_w for s in runs.states]
    return out


def _single_run_variances(
    runs: CellRuns, t_sum: Summary, e_sum: Summary
) -> tuple[float, float, dict[str, Any]]:
    """Single-run variances of time and energy from windows of ``k`` runs.

    A window's per-run mean varies by the within-window spread of single runs over ``k``
    plus any slower, window-level variation (thermal state, clocks):
    ``Var(window mean) = within / k + between``. A single run varies by
    ``within + between``. ``within`` comes from the individually timed runs of the last
    warm-up window; for energy, which a sensor cannot resolve per run, it is taken as the
    time spread at the mean power (``P̄² · within_T``: a run that takes longer at the same
    power spends proportionally more). Without timed runs, runs are assumed independent
    (``k · Var(window mean)``).
    """
    k = runs.inner_repeats
    if k == 1:
        return t_sum.var, e_sum.var, {"model": "single runs", "k": 1}
    singles = runs.single_times_s
    if singles.size < 2:
        return (
            k * t_sum.var,
            k * e_sum.var,
            {"model": "independent runs: k × Var(window mean)", "k": k},
        )
    within_t = float(np.var(singles, ddof=1))
    power = e_sum.mean / t_sum.mean if t_sum.mean > 0 else 0.0
    within_e = power**2 * within_t
    between_t = max(0.0, t_sum.var - within_t / k)
    between_e = max(0.0, e_sum.var - within_e / k)
    return (
        within_t + between_t,
        within_e + between_e,
        {
            "model": "within + between windows",
            "k": k,
            "timed_runs": int(singles.size),
            "within_time_s2": within_t,
            "between_time_s2": between_t,
            "within_energy_j2": within_e,
            "between_energy_j2": between_e,
        },
    )


def signature_from_runs(
    name: str,
    runs: CellRuns,
    static: StaticPower,
    *,
    device: Device,
    impl: str = "default",
    workload: Mapping[str, Any] | None = None,
    op_point: OperatingPoint | None = None,
    policy: RepeatPolicy | None = None,
    backend: str | None = None,
    extra_meta: Mapping[str, Any] | None = None,
) -> Signature:
    """Turn repeated runs and a static-power reading into a :class:`Signature`.

    ``time`` and ``dynamic_energy`` are per invocation; single-run variances come from
    :func:`_single_run_variances` (the plain sample variances when ``k = 1``). A negative
    raw ``d`` (static power measured above the kernel's mean power, e.g. sensor noise on a
    tiny kernel) is clamped to 0 and flagged.

    ``meta`` holds the meter's description (method, ``power_field``, ``sensor_period_s``,
    ``counter_period_s`` …; ``gap_s`` and ``gap_windows`` are this cell's: seconds of its
    windows in meter gaps, and how many windows), per-window lists in ``runs`` (time,
    energy, gap, and where the device offers them SM and memory clock, clocks-event
    reasons and enforced power limit), their summary in ``device_state``, and the
    :data:`STATE_FLAGS` comparing them with ``op_point``.
    """
    pol = policy or RepeatPolicy()
    point = op_point if op_point is not None else device.current_operating_point()
    k = runs.inner_repeats
    t_sum: Summary = summarize(runs.time_s, pol.confidence, pol.n_boot, pol.seed)
    e_sum: Summary = summarize(runs.energy_j, pol.confidence, pol.n_boot, pol.seed + 2)
    flags = _quality_flags(runs, pol, runs.meter.get("sensor_period_s", 0.1))
    raw_d = e_sum.mean - static.power_w * t_sum.mean
    if raw_d < 0:
        flags.append(
            _flag(
                "negative_dynamic_energy",
                f"raw dynamic energy {raw_d:.4g} J < 0 (static power {static.power_w:.4g} W "
                f"above the kernel's mean power); clamped to 0",
                raw_dynamic_energy_j=raw_d,
            )
        )
    flags.extend(_state_flags(runs, point, static))
    error_j = float(np.mean([w.error_j for w in runs.windows])) / k
    var_time, var_energy, variance = _single_run_variances(runs, t_sum, e_sum)
    # The meter outlives the cell (a sweep keeps one open): its gap totals are its whole
    # life's, so the cell records its own.
    meter_meta = {k_: v for k_, v in runs.meter.items() if k_ not in ("gaps", "gap_s")}
    meta: dict[str, Any] = {
        **meter_meta,
        "gap_s": sum(w.gap_s for w in runs.windows),
        "gap_windows": sum(1 for w in runs.windows if w.gap_s > 0),
        "backend": backend if backend is not None else getattr(device, "backend", None),
        "device_model": getattr(device, "model", None),
        "n": t_sum.n,
        "inner_repeats": k,
        "warmup_windows": runs.warmup_windows,
        "time": t_sum.to_dict(),
        "energy": e_sum.to_dict(),
        "median_time_s": t_sum.median,
        "median_energy_j": e_sum.median,
        "ci_time_s": list(t_sum.ci_mean),
        "ci_energy_j": list(e_sum.ci_mean),
        "energy_error_j": error_j,
        "static": static.to_meta(),
        "raw_dynamic_energy_j": raw_d,
        "runs": _runs_meta(runs),
        "device_state": _state_meta(runs),
        "variance": variance,
        "flags": flags,
        "started_at": runs.started_at,
        "finished_at": runs.finished_at,
    }
    if meta["backend"] is None:
        del meta["backend"]
    if extra_meta:
        meta.update(extra_meta)
    return Signature(
        name=name,
        static_power=static.power_w,
        time=t_sum.mean,
        dynamic_energy=max(0.0, raw_d),
        var_time=var_time,
        var_energy=var_energy,
        devices=(device.name,),
        workload=dict(workload or {}),
        impl=impl,
        op_point=point,
        meta=meta,
    )


def measure_signature(
    name: str,
    run: Callable[[], object],
    device: Device,
    meter: Meter,
    *,
    impl: str = "default",
    workload: Mapping[str, Any] | None = None,
    op_point: OperatingPoint | None = None,
    policy: RepeatPolicy | None = None,
    sync: Callable[[], object] | None = None,
    static: StaticPower | None = None,
    backend: str | None = None,
    extra_meta: Mapping[str, Any] | None = None,
) -> Signature:
    """Measure one cell: static power (unless given), repeats, statistics → Signature.

    The device must already be at the operating point; ``op_point`` is what the signature
    records (default: the device's current point).

    Example:
        >>> with Meter(device) as meter:  # doctest: +SKIP
        ...     sig = measure_signature("gemm", lambda: device.launch(k, "cublas", {}),
        ...                             device, meter, impl="cublas")
    """
    pol = policy or RepeatPolicy()
    if static is None:
        static = measure_static_power(device, meter, pol.static_idle_s, pol.settle_s)
    runs = run_repeats(device, meter, run, pol, sync)
    return signature_from_runs(
        name,
        runs,
        static,
        device=device,
        impl=impl,
        workload=workload,
        op_point=op_point,
        policy=pol,
        backend=backend,
        extra_meta=extra_meta,
    )
