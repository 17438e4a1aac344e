"""Meters and traces against exact truth (scripted fake GPU, brute-force integrals)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from eopt.measure.integrate import CounterTrace, SensorTrace, TraceCoverageError
from eopt.measure.meter import Meter, MeterError

P = 0.1  # sensor refresh period, s
POLL = P / 10


def _true_energy(breaks: list[float], powers: list[float], a: float, b: float) -> float:
    """Exact integral of a piecewise-constant power (powers[i] on [breaks[i], breaks[i+1]))."""
    total = 0.0
    for t0, t1, p in zip(breaks[:-1], breaks[1:], powers, strict=True):
        lo, hi = max(t0, a), min(t1, b)
        if hi > lo:
            total += p * (hi - lo)
    return total


def _sensor_trace(kind: str, breaks: list[float], powers: list[float], phase: float):
    """Poll a simulated sensor (refresh every P at ``phase``) every POLL over the signal."""
    trace = SensorTrace(kind, P)
    end = breaks[-1]
    reading = powers[0]
    next_refresh = phase
    t = 0.0
    while t <= end:
        while next_refresh <= t:
            u = next_refresh
            if kind == "point":  # the draw just before the refresh (as NVML and the sim)
                idx = max(0, np.searchsorted(breaks, u, side="left") - 1)
                reading = powers[min(idx, len(powers) - 1)]
            else:
                reading = _true_energy(breaks, powers, u - P, u) / P if u >= P else powers[0]
            next_refresh += P
        trace.append(t, reading)
        t += POLL
    return trace


@given(
    st.sampled_from(["point", "interval_mean"]),
    st.lists(st.tuples(st.floats(0.35, 2.0), st.floats(20.0, 500.0)), min_size=3, max_size=6),
    st.floats(0.0, P),
    st.data(),
)
def test_sensor_trace_is_exact_for_loads_that_step_at_window_edges(kind, pieces, phase, data):
    breaks = [0.0]
    for length, _ in pieces:
        breaks.append(breaks[-1] + length)
    powers = [p for _, p in pieces]
    trace = _sensor_trace(kind, breaks, powers, phase)
    i = data.draw(st.integers(1, len(breaks) - 3))
    j = data.draw(st.integers(i + 1, len(breaks) - 2))
    a, b = breaks[i], breaks[j]
    # An edge exactly on a refresh instant is ambiguous to within float rounding of the
    # refresh grid (a point reading there is both "before" and "after" the step).
    for edge in (a, b):
        offset = (edge - phase) % P
        assume(min(offset, P - offset) > 1e-6)
    truth = _true_energy(breaks, powers, a, b)
    # Refreshes are placed to within one poll: each edge may be off by the power step
    # times a poll period.
    jump = max(powers) - min(powers)
    tol = 2 * jump * POLL + 1e-6
    if kind == "point":
        # A point reading cannot place a step between two refreshes: the trapezoid across
        # an interior step may be off by half the step times the refresh interval.
        tol += sum(abs(powers[k] - powers[k - 1]) for k in range(i + 1, j)) * (P / 2 + POLL)
    assert trace.integrate(a, b).energy_j == pytest.approx(truth, abs=tol)


def test_sensor_trace_rejects_uncovered_windows_and_bad_kinds():
    trace = SensorTrace("point")
    for i, p in enumerate([100.0, 300.0, 200.0, 50.0]):
        trace.append(float(i), p)
    with pytest.raises(TraceCoverageError):
        trace.integrate(0.5, 3.5)
    with pytest.raises(ValueError, match="sensor kind"):
        SensorTrace("boxcar")


def test_counter_trace_interpolates_between_readings():
    trace = CounterTrace()
    trace.append(0.0, 1000.0)
    trace.append(2.0, 1400.0)
    assert trace.integrate(0.5, 1.5).energy_j == pytest.approx(200.0)
    assert trace.integrate(0.0, 2.0).energy_j == pytest.approx(400.0)


@pytest.mark.parametrize("sensor", ["instant", "average"])
def test_sampler_within_one_percent_for_long_regions(fake_gpu, sensor):
    gpu = fake_gpu(idle_w=60.0, sensor=sensor, counter=False)
    with Meter(gpu) as meter:
        assert meter.method == "sampler"
        gpu.clock.sleep(0.3)
        for duration in (1.0, 2.5, 4.0):  # ≥ 10 sensor periods
            e0, t0 = gpu.true_energy_j(), meter.mark()
            gpu.busy(duration, 320.0)
            t1, e1 = meter.mark(), gpu.true_energy_j()
            got = meter.energy(t0, t1)
            gpu.clock.sleep(0.5)
            assert not got.short
            assert got.field == sensor
            assert got.energy_j == pytest.approx(e1 - e0, rel=0.01)


def test_short_regions_report_their_error_honestly(fake_gpu):
    gpu = fake_gpu(idle_w=60.0, sensor="average", counter=False)
    with Meter(gpu) as meter:
        gpu.clock.sleep(0.3)
        for duration in (0.013, 0.05, 0.2):  # far below 10 sensor periods
            gpu.clock.sleep(0.037)  # land the edges off the sensor's update instants
            e0, t0 = gpu.true_energy_j(), meter.mark()
            gpu.busy(duration, 400.0)
            t1, e1 = meter.mark(), gpu.true_energy_j()
            got = meter.energy(t0, t1)
            assert got.short
            assert abs(got.energy_j - (e1 - e0)) <= got.error_j + 1e-9
            assert got.error_j > 0


def test_counter_and_sampler_agree(fake_gpu):
    gpu = fake_gpu(idle_w=70.0, sensor="average", counter=True)
    counter = Meter(gpu, method="counter").start()
    sampler = Meter(gpu, method="sampler").start()
    gpu.clock.sleep(0.2)
    t0 = counter.mark()
    for i in range(20):  # a varying load, 3 s in all
        gpu.busy(0.15, 150.0 + 10 * i)
    t1 = counter.mark()
    c, s = counter.energy(t0, t1), sampler.energy(t0, t1)
    counter.stop()
    sampler.stop()
    assert c.method == "counter" and s.method == "sampler"
    assert s.energy_j == pytest.approx(c.energy_j, rel=0.01)


def test_counter_method_without_counter_is_a_clear_error(fake_gpu):
    with pytest.raises(MeterError, match="no energy counter"):
        Meter(fake_gpu(counter=False), method="counter")
    assert Meter(fake_gpu(counter=True)).method == "counter"


def test_stopped_meter_cannot_wait_for_future_samples(fake_gpu):
    gpu = fake_gpu(counter=False)
    meter = Meter(gpu).start()
    t0 = meter.mark()
    gpu.clock.sleep(0.055)
    assert meter.energy(t0, meter.mark()).energy_j > 0  # the mark itself polled the sensor
    meter.stop()
    gpu.clock.sleep(0.05)
    with pytest.raises(MeterError, match="stopped"):
        meter.energy(t0, gpu.clock.now())


def test_counter_windows_with_unmarked_edges_carry_an_honest_error(fake_gpu):
    # A child process's regions: the meter never read the counter at their edges.
    gpu = fake_gpu(idle_w=60.0, counter=True)
    with Meter(gpu, method="counter") as meter:
        start = meter.mark()
        gpu.clock.sleep(0.013)
        e0, t0 = gpu.true_energy_j(), gpu.clock.now()
        gpu.busy(0.25, 400.0)
        t1, e1 = gpu.clock.now(), gpu.true_energy_j()
        gpu.clock.sleep(0.1)
        got = meter.energy(t0, t1)
        assert got.error_j > 0
        assert abs(got.energy_j - (e1 - e0)) <= got.error_j
        marked = meter.energy(start, meter.mark())
        assert marked.error_j == 0.0


def test_one_second_moving_average_field_is_read_at_its_centre(fake_gpu):
    gpu = fake_gpu(idle_w=60.0, sensor="average_1s", counter=False)
    with Meter(gpu) as meter:
        gpu.clock.sleep(2.0)
        e0, t0 = gpu.true_energy_j(), meter.mark()
        gpu.busy(12.0, 360.0)
        t1, e1 = meter.mark(), gpu.true_energy_j()
        got = meter.energy(t0, t1)
        assert meter.averaging_s == 1.0
        assert not got.short  # ten averaging windows
        # Read as a centred moving mean: each edge is smoothed over ±0.5 s, losing about
        # ΔP·W/8; unshifted it would lose ΔP·W/2 at the start edge alone.
        assert got.energy_j == pytest.approx(e1 - e0, rel=0.02)
        assert abs(got.energy_j - (e1 - e0)) <= got.error_j
