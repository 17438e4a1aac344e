"""Energy meters: a device's cumulative energy counter, or a background power sampler.

A :class:`Meter` watches one device for as long as it is open. Code marks window edges
with :meth:`Meter.mark` (a timestamp on the device's clock) and later asks for the energy of
any window with :meth:`Meter.energy`. The counter path reads the counter at every mark and
also polls it on a timer, so windows recorded by another process (whose edges this process
never saw) can still be charged. The sampler path polls the power sensor on the clock's
schedule, never on the kernels' (the note in ``reference/kokkos-energy-note.txt`` explains
why), and integrates the trace with the trapezoidal rule. The counter path also reads the
power sensor once a sensor period, so a run's power trace can be shown (never integrated).
For the attribution engine, :meth:`Meter.attribution_series` turns either trace into
power samples whose trapezoid is the meter's own energy at every window edge.

The counter itself moves in steps (NVML's every few tens of ms; the device's
``energy_counter_period_s``): a reading at a mark is the value of the last step, so each
edge of a counter window may miss up to the power there times that period. The error
estimate says so, and windows shorter than ten periods are flagged ``short``.

The timer's readings run in a background thread (on the wall clock). A read that fails
with :class:`~eopt.devices.base.SensorReadError` (a transient error, already retried by
the device) leaves a gap: the next poll tries again, the gap is recorded in
:attr:`Meter.gaps`, and windows across it carry its uncertainty in ``error_j``. One source
of power per trace: a reading from another field is an error, never mixed in. Any other
error, or readings failing for longer than :data:`MAX_GAP_S`, cannot be raised where it
happens, and a trace that silently stops growing would leave windows measured on stale
data: the meter keeps the error, stops polling, and raises it as a :class:`MeterError` in
the measuring thread at the next :meth:`Meter.mark`, :meth:`Meter.energy` or
:meth:`Meter.check`.
"""

from __future__ import annotations

import bisect
import math
import statistics
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

import numpy as np

from eopt.devices.base import Device, DeviceError, SensorReadError, Timer
from eopt.measure.integrate import CounterTrace, SensorTrace
from eopt.measure.rapl import conservative_power

__all__ = [
    "DEFAULT_SENSOR_PERIOD_S",
    "MAX_GAP_S",
    "Meter",
    "MeterError",
    "WindowEnergy",
    "average_window_s",
    "counter_period_s",
    "sensor_period_s",
]

#: NVML refreshes its power reading every 100 ms; assumed when a device does not say.
DEFAULT_SENSOR_PERIOD_S = 0.1
#: Readings that keep failing for longer than this (in s; or ten sensor periods, if that
#: is longer) mean the sensor stopped answering: the meter fails instead of leaving a gap.
MAX_GAP_S = 1.0

MeterMethod = Literal["auto", "counter", "sampler"]


class MeterError(RuntimeError):
    """The meter cannot measure as asked (no counter, trace never covered a window …)."""


@dataclass(frozen=True)
class WindowEnergy:
    """The energy of one window and how well it is known.

    Attributes:
        energy_j: Energy over the window, in J.
        duration_s: Window length, in s.
        method: ``counter`` or ``sampler``.
        field: The sensor field used (``energy_counter`` or a power field name).
        error_j: An estimate of the integration error, in J: the power change seen around
            each edge over the time the sensor may have missed there, plus, for point
            readings, the sampling error of the readings inside, plus what gaps in the
            readings hid. On the counter path: the power at each edge times the counter's
            refresh period (0 only for a counter that moves continuously, read at both
            edges by :meth:`Meter.mark`).
        n_samples: Samples (or counter readings) strictly inside the window.
        short: True when the window is shorter than ten update periods of what it was
            measured with (the counter's refresh period on the counter path, the power
            sensor's otherwise), where the readings cannot resolve it and ``error_j``
            matters.
        gap_s: How much of the window fell in gaps where readings failed, in s.
    """

    energy_j: float
    duration_s: float
    method: str
    field: str
    error_j: float
    n_samples: int
    short: bool
    gap_s: float = 0.0

    @property
    def mean_power_w(self) -> float:
        """E / T, in W (0 for an empty window)."""
        return self.energy_j / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def relative_error(self) -> float:
        """``error_j / energy_j`` (inf for a zero-energy window with nonzero error)."""
        if self.energy_j > 0:
            return self.error_j / self.energy_j
        return 0.0 if self.error_j == 0 else math.inf


def sensor_period_s(device: Device) -> float:
    """The device's power-sensor update period in s (``DEFAULT_SENSOR_PERIOD_S`` if unknown)."""
    for attr in ("power_update_period_s", "sensor_period_s", "sensor_update_period_s"):
        value = getattr(device, attr, None)
        if callable(value):
            value = value()
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    return DEFAULT_SENSOR_PERIOD_S


def counter_period_s(device: Device) -> float:
    """How often the device's energy counter refreshes, in s (its
    ``energy_counter_period_s``); 0 for a device that does not declare one, taken as a
    counter that moves continuously (the simulator's)."""
    value = getattr(device, "energy_counter_period_s", None)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return 0.0


def _scope(device: Device, attr: str) -> str:
    value = getattr(device, attr, "gpu")
    return value if isinstance(value, str) else "gpu"


def average_window_s(device: Device) -> float | None:
    """The span the device's ``average`` power field averages, in s (its
    ``power_average_window_s``); None when the device does not say."""
    value = getattr(device, "power_average_window_s", None)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def _field_model(
    field: str, window_s: float | None = None, period_s: float = DEFAULT_SENSOR_PERIOD_S
) -> tuple[str, float]:
    """How to read a power field: (sensor kind, averaging window in s).

    ``average`` (the simulator) is the mean over the last ``window_s`` before each refresh:
    over the whole refresh interval when the window is unknown or spans the period (an
    interval mean); over only part of it (the simulator's 25 ms of 100 ms, as NVML's
    power usage) a point value at the window's centre, since the rest of the interval is
    never seen. NVML's ``average_1s`` and ``usage_average_1s`` (``nvmlDeviceGetPowerUsage``
    on Ampere and newer except GA100) are moving means over the last second, read as point
    values at the window's centre (half a second earlier than they are read); anything
    else (NVML's ``instant``, ``usage_instant``) a point value.
    """
    if field == "average":
        if window_s is None or window_s >= period_s * (1 - 1e-9):
            return "interval_mean", 0.0
        return "point", window_s
    if field.endswith("average_1s"):
        return "point", 1.0
    return "point", 0.0


class Meter:
    """Measures a device's energy over windows marked on its clock.

    Use as a context manager (or call :meth:`start` / :meth:`stop`)::

        with Meter(device) as meter:
            t0 = meter.mark()
            run_kernel()
            t1 = meter.mark()
            print(meter.energy(t0, t1).energy_j)

    Args:
        device: The device to watch.
        method: ``counter`` (cumulative energy counter; error if the device has none),
            ``sampler`` (power sampling), or ``auto``: the counter where it exists and
            counts what the power readings count (not on GH200, whose counter counts the
            whole module: there the GPU's power is sampled).
        period_s: Polling period in s. Default: a tenth of the sensor update period for the
            sampler (each refresh is placed to within a tenth of a period), a fifth for the
            counter (edges that were not marked are interpolated over short intervals).
        sensor_kind: How to read the power field: ``point`` (the power at each refresh)
            or ``interval_mean`` (the mean over each refresh interval). Default: from the
            field's name (``average`` → ``interval_mean``, or ``point`` at the centre of
            the device's ``power_average_window_s`` when that is shorter than the sensor
            period; anything else → ``point``).
    """

    def __init__(
        self,
        device: Device,
        method: MeterMethod = "auto",
        period_s: float | None = None,
        sensor_kind: str | None = None,
    ) -> None:
        if method not in ("auto", "counter", "sampler"):
            raise ValueError(f"meter method must be auto, counter or sampler, got {method!r}")
        self.device = device
        self.clock = device.clock
        self.sensor_period_s = sensor_period_s(device)
        self.counter_period_s = counter_period_s(device)
        try:
            has_counter = device.energy_counter_j() is not None
        except SensorReadError:
            has_counter = True  # it is there; this read failed (the next polls retry)
        if method == "counter" and not has_counter:
            raise MeterError(
                f"{device.name}: no energy counter on this device; use method='sampler'"
            )
        counter_scope = _scope(device, "energy_counter_scope")
        power_scope = _scope(device, "power_scope")
        same_scope = counter_scope == power_scope
        use_counter = method == "counter" or (method == "auto" and has_counter and same_scope)
        self.method: str = "counter" if use_counter else "sampler"
        #: What the energy counts: ``gpu``, or ``module`` (GH200's counter).
        self.energy_scope = counter_scope if use_counter else power_scope
        # Power of another scope never goes into a counter run's trace (GH200).
        self._display_allowed = same_scope
        default = self.sensor_period_s / (5 if self.method == "counter" else 10)
        self.period_s = float(period_s) if period_s is not None else default
        if not self.period_s > 0:
            raise ValueError(f"meter period must be positive, got {period_s}")
        self.sensor_kind = sensor_kind
        self.averaging_s = 0.0  # window of a moving-average power field, in s
        self.power_trace: SensorTrace | None = None
        self.counter_trace = CounterTrace()
        self.field: str = "energy_counter" if self.method == "counter" else "unknown"
        # Counter path: power readings for display, one a sensor period (a faster poll
        # would only repeat the held reading). Times on the device's clock.
        self._display_power: list[tuple[float, float]] = []
        self._display_field: str | None = None
        self._display_error: str | None = None
        self._last_display_poll = -math.inf
        self._timer: Timer | None = None
        self._failure: BaseException | None = None  # raised by a poll on the timer
        #: Spans (start, end) on the device's clock, in s, between the last reading before
        #: reads failed and the first one after.
        self.gaps: list[tuple[float, float]] = []
        self.max_gap_s = max(MAX_GAP_S, 10 * self.sensor_period_s)
        self._last_ok: float | None = None
        self._gap_start: float | None = None
        self._gap_reason: str | None = None
        self._gap_lock = threading.Lock()  # the timer and a mark() may both read

    # lifecycle ---------------------------------------------------------------------------
    def start(self) -> Meter:
        """Take a first reading and start polling; returns ``self``."""
        if self._timer is not None:
            return self
        self._poll(self.clock.now())
        self._timer = self.clock.every(self.period_s, self._poll_on_timer)
        return self

    def stop(self) -> None:
        """Stop polling (the traces stay readable)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    @property
    def running(self) -> bool:
        """Whether the meter is polling."""
        return self._timer is not None

    def __enter__(self) -> Meter:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the background polling, or None."""
        return self._failure

    def check(self) -> None:
        """Raise, in the calling thread, an error the background polling ran into.

        Raises:
            MeterError: naming the device and the original error (chained); every window
                that is not finished yet must be thrown away.
        """
        exc = self._failure
        if exc is None:
            return
        raise MeterError(
            f"{self.device.name}: the meter's background reading failed "
            f"({type(exc).__name__}: {exc}); windows measured since then cannot be trusted"
        ) from exc

    def _poll_on_timer(self, now: float) -> None:
        """The timer's callback: a poll whose error is kept for :meth:`check`."""
        if self._failure is not None:
            return  # stopped: the measuring thread will raise it
        try:
            self._poll(now)
        except Exception as exc:  # the thread would print it and die unnoticed
            self._failure = exc

    def _read_ok(self, now: float) -> None:
        with self._gap_lock:
            if self._gap_start is not None:
                self.gaps.append((self._gap_start, now))
                self._gap_start = None
            self._last_ok = now

    def _read_failed(self, now: float, exc: SensorReadError) -> None:
        """A transient read failure: a gap, unless reads have failed for too long.

        Raises:
            MeterError: when reads have failed for longer than ``max_gap_s``.
        """
        with self._gap_lock:
            if self._gap_start is None:
                self._gap_start = self._last_ok if self._last_ok is not None else now
            self._gap_reason = str(exc)
            failing_s = now - self._gap_start
        if failing_s > self.max_gap_s:
            raise MeterError(
                f"{self.device.name}: readings failed for {failing_s:.3g} s "
                f"(last: {exc}); the sensor stopped answering"
            ) from exc

    def _poll(self, now: float) -> None:
        if self.method == "counter":
            try:
                self._read_counter()
            except SensorReadError as exc:
                self._read_failed(now, exc)
            else:
                self._read_ok(now)
            if self._display_allowed and (
                now - self._last_display_poll >= self.sensor_period_s * (1 - 1e-6)
            ):
                self._last_display_poll = now
                self._read_display_power()
            return
        try:
            reading = self.device.power()
        except SensorReadError as exc:
            self._read_failed(now, exc)
            return
        self._read_ok(now)
        if self.power_trace is None:
            kind, self.averaging_s = _field_model(
                reading.field, average_window_s(self.device), self.sensor_period_s
            )
            self.power_trace = SensorTrace(self.sensor_kind or kind, self.sensor_period_s)
        elif reading.field != self.field:
            # Fields differ in meaning (instant, 1 s average …): never one trace of both.
            raise MeterError(
                f"{self.device.name}: the power reading switched from {self.field!r} to "
                f"{reading.field!r} mid-trace; readings of different fields cannot be "
                "integrated together"
            )
        # A moving average describes the middle of its window: shift it back by half.
        t = reading.time_s - self.averaging_s / 2
        self.power_trace.append(t, reading.power_w, reading.field)
        self.field = reading.field

    def _read_display_power(self) -> None:
        """Counter path: one power reading for the run's trace (not used for energy)."""
        if self._display_error is not None:
            return  # the sensor failed for good; the energy counter still works
        try:
            reading = self.device.power()
        except SensorReadError:
            return  # a missing point in a trace that is only shown
        except DeviceError as exc:
            self._display_error = str(exc)
            return
        kind, averaging = _field_model(
            reading.field, average_window_s(self.device), self.sensor_period_s
        )
        if kind == "interval_mean":
            averaging = self.sensor_period_s
        # Any averaged reading describes the middle of its averaging window.
        self._display_field = reading.field
        self._display_power.append((reading.time_s - averaging / 2, reading.power_w))

    def _read_counter(self) -> float:
        """Read the counter; returns the instant it refers to (the middle of the read)."""
        before = self.clock.now()
        value = self.device.energy_counter_j()
        now = 0.5 * (before + self.clock.now())
        if value is None:
            raise MeterError(f"{self.device.name}: the energy counter stopped answering")
        self.counter_trace.append(now, value)
        return now

    # windows -----------------------------------------------------------------------------
    def mark(self) -> float:
        """The current time on the device's clock, in s; on the counter path the counter is
        read at this instant too, so windows between marks are exact.

        Raises:
            MeterError: when the background polling failed (see :meth:`check`).
        """
        self.check()
        if self.method == "counter":
            try:
                return self._read_counter()
            except SensorReadError as exc:
                # The edge is then interpolated between readings, and its error says so.
                now = self.clock.now()
                self._read_failed(now, exc)
                return now
        now = self.clock.now()
        if self._timer is not None:
            # Polling at the edge tells whether the sensor refreshed before or after it,
            # which a poll on the timer's schedule leaves open to within a polling period.
            self._poll(now)
        return now

    def wait_until_covered(self, end_s: float, max_wait_s: float | None = None) -> None:
        """Let time pass until the trace has a reading at or after ``end_s``.

        Raises:
            MeterError: when no reading arrives within ``max_wait_s`` (default: ten polling
                periods plus one second), or the background polling failed.
        """
        self.check()
        trace = self.counter_trace if self.method == "counter" else self.power_trace
        if trace is None:
            raise MeterError("the meter was never started; call start() or use `with`")
        if len(trace) and trace.span[1] >= end_s:
            return
        if self._timer is None:
            raise MeterError(
                f"the meter was stopped before a reading after t={end_s:.6g} s; "
                "read window energies before stopping the meter"
            )
        budget = max_wait_s if max_wait_s is not None else 10 * self.period_s + 1.0
        waited = 0.0
        step = self.period_s / 2
        while trace.span[1] < end_s:
            self.check()
            if waited > budget:
                raise MeterError(
                    f"no {self.method} reading after t={end_s:.6g} s within {budget:.3g} s; "
                    "is the device's sensor answering?"
                )
            self.clock.sleep(step)
            waited += step

    def _await_readings(self, end_s: float) -> None:
        """Wait until the trace holds what a window ending at ``end_s`` needs."""
        if self.method == "sampler" and self.running:
            # Two more sensor periods let the integration see the refresh after the edge.
            self.wait_until_covered(end_s + 2 * self.sensor_period_s)
        else:
            self.wait_until_covered(end_s)

    def energy(self, start_s: float, end_s: float) -> WindowEnergy:
        """Energy over ``[start_s, end_s]`` (times from :meth:`mark` or the same clock).

        Waits for the next sample when the window ends after the last one.

        Raises:
            MeterError: when the trace does not cover the window, or the background
                polling failed.
        """
        self.check()
        duration = end_s - start_s
        self._await_readings(end_s)
        resolution = max(self.sensor_period_s, self.averaging_s)
        if self.method == "counter" and self.counter_period_s > 0:
            resolution = self.counter_period_s
        short = bool(duration < 10 * resolution * (1 - 1e-9))  # float slack; never a NumPy bool
        gap_s = self._gap_overlap_s(start_s, end_s)
        if self.method == "counter":
            if not self.counter_trace.covers(start_s, end_s):
                raise MeterError(
                    f"the energy counter was not read before t={start_s:.6g} s; "
                    "start the meter before the window opens"
                )
            got = self.counter_trace.integrate(start_s, end_s)
            # Interpolated (with an error) at edges this process never read, such as a
            # child process's regions or a mark whose read failed.
            error = self.counter_trace.edge_error_j(start_s) + self.counter_trace.edge_error_j(
                end_s
            )
            if self.counter_period_s > 0:
                # Even a reading at the edge holds the counter's last step: up to one
                # period of the edge's power is missed (or gained) at each end.
                mean = got.energy_j / duration if duration > 0 else 0.0
                error += self.counter_period_s * (
                    self._edge_power_w(start_s, mean) + self._edge_power_w(end_s, mean)
                )
            return WindowEnergy(
                got.energy_j, duration, "counter", self.field, error, got.n_samples, short, gap_s
            )
        if self.power_trace is None or not self.power_trace.covers(start_s, end_s):
            raise MeterError(
                f"power was not sampled before t={start_s:.6g} s; "
                "start the meter before the window opens"
            )
        trace = self.power_trace
        got = trace.integrate(start_s, end_s)
        # Edges: the integration assumes the load steps at each edge, and places refreshes
        # to within a poll. Real loads ramp, so allow the power change seen around each
        # edge over a quarter of the field's smearing time P.
        p = max(self.sensor_period_s, self.averaging_s)
        seen = trace.power_range_w(start_s - p, start_s + 2 * p) + trace.power_range_w(
            end_s - p, end_s + 2 * p
        )
        error = 0.25 * p * seen
        if trace.kind == "point":
            # Interior: point readings sample the draw once a period. A load that changes
            # faster is only sampled, and periodic loads alias with the refresh, so the
            # samples are not independent: allow one standard deviation of the readings
            # (not of their mean).
            inside = trace.readings_between(start_s, end_s)
            if len(inside) >= 2:
                error += duration * statistics.stdev(inside)
        if got.n_samples == 0 and trace.kind == "point":
            # No refresh inside: the window's own draw was never read. It can be anything
            # up to the board's maximum power.
            floor = got.energy_j / duration if duration > 0 else 0.0
            error = max(error, (self._max_power_w() - floor) * duration)
        error += self._gap_error_j(start_s, end_s, p)
        return WindowEnergy(
            got.energy_j, duration, "sampler", self.field, error, got.n_samples, short, gap_s
        )

    # gaps and edges ----------------------------------------------------------------------
    def _gap_overlap_s(self, start_s: float, end_s: float) -> float:
        """How much of ``[start_s, end_s]`` closed gaps cover, in s."""
        return sum(max(0.0, min(g1, end_s) - max(g0, start_s)) for g0, g1 in self.gaps)

    def _gap_error_j(self, start_s: float, end_s: float, p: float) -> float:
        """What gaps near the window may hide, in J (sampler path).

        A gap shorter than a sensor period cannot hide a refresh, only blur when it
        happened: the power change there times the gap. A longer one may hide whole
        refreshes: the energy over the part of the window it spans (one period wider each
        side) is unknown, up to the board's maximum power.
        """
        error = 0.0
        trace = self.power_trace
        for g0, g1 in self.gaps:
            if g1 < start_s - p or g0 > end_s + p:
                continue
            if g1 - g0 < p and trace is not None:
                error += trace.power_range_w(g0 - p, g1 + p) * (g1 - g0)
            else:
                hidden = max(0.0, min(g1 + p, end_s) - max(g0 - p, start_s))
                error += self._max_power_w() * hidden
        return error

    def _edge_power_w(self, t: float, window_mean_w: float) -> float:
        """The power around a counter-window edge, in W: the most of the window's mean,
        the counter's mean over two periods either side, and power readings there."""
        powers = [window_mean_w]
        first, last = self.counter_trace.span
        lo = max(first, t - 2 * self.counter_period_s)
        hi = min(last, t + 2 * self.counter_period_s)
        if hi - lo >= self.counter_period_s:  # spans at least one step of the counter
            powers.append(self.counter_trace.integrate(lo, hi).energy_j / (hi - lo))
        reach = 2 * self.sensor_period_s
        powers.extend(p for s, p in self._display_power if abs(s - t) <= reach)
        return max(powers)

    def attribution_series(
        self,
        start_s: float,
        end_s: float,
        starts: Sequence[float] = (),
        ends: Sequence[float] = (),
    ) -> tuple[np.ndarray, np.ndarray]:
        """Power samples over a span that carry the meter's energies to the attribution
        engine (:mod:`eopt.attribute.engine`, which integrates with the trapezoid rule).

        The samples' cumulative energy equals the meter's at every knot: every counter
        reading or sensor refresh in the span, every window edge in ``starts`` and
        ``ends``, and the span's two ends. Counter path: the counter, interpolated at
        constant power between readings, as :meth:`energy` reads it, so any window between
        two knots gets exactly :meth:`energy`'s value. Sampler path: the sensor's
        refreshes with the load stepping at the edges
        (:meth:`~eopt.measure.integrate.SensorTrace.stepped_curve`), which is
        :meth:`energy`'s value for a window whose edges share no refresh interval with
        other edges. Between knots the power is the conservative piecewise-linear curve of
        :func:`eopt.measure.rapl.conservative_power` (a knot at each interval's midpoint
        keeps the interval's energy exact; constant power stays flat). This is a power
        trace for integrating; :meth:`power_samples` is the one for showing.

        Knots closer than 2 ns merge (window edges win over readings), so an edge may
        move by a nanosecond.

        Args:
            start_s: Start of the span, on the device's clock, in s.
            end_s: End of the span (at least 2 ns after the start), in s.
            starts: Window starts inside the span, in s.
            ends: Window ends inside the span, in s.

        Returns:
            (times in ns from ``start_s``, as ``round((t - start_s) * 1e9)``, int64;
            power in W).

        Raises:
            MeterError: when the trace does not cover the span, or the polling failed.
        """
        self.check()
        self._await_readings(end_s)
        end_ns = round((end_s - start_s) * 1e9)
        if end_ns < 2:
            raise MeterError(f"the span [{start_s:.9g}, {end_s:.9g}] s is shorter than 2 ns")
        edge_s = np.concatenate([np.asarray(starts, float), np.asarray(ends, float)])
        edge_s.sort()
        edge_ns = np.rint((edge_s - start_s) * 1e9).astype(np.int64)
        inner = (edge_ns >= 2) & (edge_ns <= end_ns - 2)
        edge_s, edge_ns = edge_s[inner], edge_ns[inner]
        if edge_ns.size:
            keep = np.append(True, np.diff(edge_ns) >= 2)
            edge_s, edge_ns = edge_s[keep], edge_ns[keep]
        edge_s = np.concatenate([[start_s], edge_s, [end_s]])
        edge_ns = np.concatenate([[0], edge_ns, [end_ns]])
        if self.method == "counter":
            if not self.counter_trace.covers(start_s, end_s):
                raise MeterError(
                    f"the energy counter was not read before t={start_s:.6g} s; "
                    "start the meter before the span opens"
                )
            reading_s = np.asarray(self.counter_trace.readings()[0])
            cumulative = self.counter_trace.cumulative
        else:
            trace = self.power_trace
            if trace is None or not trace.covers(start_s, end_s):
                raise MeterError(
                    f"power was not sampled before t={start_s:.6g} s; "
                    "start the meter before the span opens"
                )
            reading_s = np.asarray(trace.refreshes()[0])
            cumulative = trace.stepped_curve(
                np.append(np.asarray(starts, float), start_s),
                np.append(np.asarray(ends, float), end_s),
                end_s,
            ).at
        reading_s = reading_s[(reading_s > start_s) & (reading_s < end_s)]
        reading_ns = np.rint((reading_s - start_s) * 1e9).astype(np.int64)
        # A reading within 2 ns of an edge gives way to the edge (the edges carry windows).
        at = np.searchsorted(edge_ns, reading_ns)
        gap = np.minimum(
            np.abs(reading_ns - edge_ns[np.maximum(at - 1, 0)]),
            np.abs(edge_ns[np.minimum(at, edge_ns.size - 1)] - reading_ns),
        )
        reading_s, reading_ns = reading_s[gap >= 2], reading_ns[gap >= 2]
        if reading_ns.size:
            keep = np.append(True, np.diff(reading_ns) >= 2)
            reading_s, reading_ns = reading_s[keep], reading_ns[keep]
        knot_s = np.concatenate([edge_s, reading_s])
        knot_ns = np.concatenate([edge_ns, reading_ns])
        order = np.argsort(knot_ns, kind="stable")
        knot_s, knot_ns = knot_s[order], knot_ns[order]
        return conservative_power(knot_ns, cumulative(knot_s))

    def power_samples(
        self, start_s: float, end_s: float, *, edges: bool = False
    ) -> list[tuple[float, float]]:
        """(time s, power W) points of the power trace within ``[start_s, end_s]``.

        Sampler path: the sensor's refreshes. Counter path: the power sensor read once a
        sensor period (for display; the energy comes from the counter), or, for a device
        whose sensor did not answer, the mean power between consecutive counter readings.

        Args:
            start_s: Start of the span, on the device's clock, in s.
            end_s: End of the span, in s.
            edges: Also give the power in force at ``start_s`` and at ``end_s`` as points
                at those instants, so a plot of the span starts and ends at its edges.
        """
        points = self._all_power_points()
        inside = [(t, p) for t, p in points if start_s <= t <= end_s]
        if not edges or not points:
            return inside
        times = [t for t, _ in points]
        first = points[max(bisect.bisect_right(times, start_s) - 1, 0)][1]
        last = points[max(bisect.bisect_right(times, end_s) - 1, 0)][1]
        if not inside or inside[0][0] > start_s:
            inside.insert(0, (start_s, first))
        if inside[-1][0] < end_s:
            inside.append((end_s, last))
        return inside

    def _all_power_points(self) -> list[tuple[float, float]]:
        if self.method == "sampler":
            if self.power_trace is None:
                return []
            us, rs = self.power_trace.refreshes()
            # An interval mean describes the middle of the interval it closes.
            shift = self.sensor_period_s / 2 if self.power_trace.kind == "interval_mean" else 0.0
            return [(u - shift, r) for u, r in zip(us, rs, strict=True)]
        if self._display_power:
            return list(self._display_power)
        ts, es = self.counter_trace.readings()
        return [
            (0.5 * (ts[k] + ts[k + 1]), (es[k + 1] - es[k]) / (ts[k + 1] - ts[k]))
            for k in range(len(ts) - 1)
            if ts[k + 1] > ts[k]
        ]

    def _max_power_w(self) -> float:
        """The most the board can draw (its highest settable power limit), in W."""
        try:
            return float(self.device.power_limit_range_w()[1])
        except Exception:  # a device without limits: fall back to the current reading
            return float(self.device.power().power_w)

    def describe(self) -> dict[str, object]:
        """What goes into ``Signature.meta``: method, power field, periods."""
        trace = self.power_trace
        fields = dict(trace.fields) if trace is not None else {}
        return {
            "method": self.method,
            "power_field": self.field,
            "sensor_kind": trace.kind if trace is not None else None,
            "fields_read": fields,
            "poll_period_s": self.period_s,
            "sensor_period_s": self.sensor_period_s,
            "averaging_s": self.averaging_s,
            "counter_period_s": self.counter_period_s if self.method == "counter" else None,
            "energy_scope": self.energy_scope,
            "gaps": len(self.gaps),
            "gap_s": sum(g1 - g0 for g0, g1 in self.gaps),
            **({"last_read_error": self._gap_reason} if self._gap_reason else {}),
            # What the run's power trace shows (the counter path reads it for display only).
            "trace_field": self.field if self.method == "sampler" else self._display_field,
            **({"trace_error": self._display_error} if self._display_error else {}),
        }
