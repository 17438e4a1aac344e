"""The meter's energies as power samples for the attribution engine: the samples carry
what the meter reports for a window, at every edge they were built for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eopt.attribute.integral import EnergyCurve
from eopt.measure.integrate import SensorTrace
from eopt.measure.meter import Meter


@st.composite
def polled_sensor(draw: st.DrawFn) -> tuple[SensorTrace, float, float]:
    """A sensor of either kind polled every 10 ms, its value changing now and then, and
    one window inside the polls (its edges sometimes on a refresh)."""
    trace = SensorTrace(draw(st.sampled_from(["point", "interval_mean"])), 0.1)
    t, value = 0.0, 100.0
    for change, step, new in draw(
        st.lists(
            st.tuples(st.booleans(), st.floats(0.5, 1.5), st.floats(0.0, 400.0)),
            min_size=2,
            max_size=60,
        )
    ):
        t += 0.01 * step
        value = new if change else value
        trace.append(t, value)
    first, last = trace.span
    refreshes = trace.refreshes()[0]
    edge = st.one_of(st.floats(first, last), st.sampled_from(refreshes))
    a, b = sorted((draw(edge), draw(edge)))
    return trace, max(a, first), min(b, last)


@given(polled_sensor())
def test_the_stepped_curve_gives_a_lone_window_the_sensors_own_energy(case):
    trace, a, b = case
    curve = trace.stepped_curve([a], [b], trace.span[1])
    assert curve.between(a, b) == pytest.approx(trace.integrate(a, b).energy_j, rel=1e-9, abs=1e-9)


def _series_energy(times_ns: np.ndarray, power: np.ndarray, a_ns: int, b_ns: int) -> float:
    return EnergyCurve.from_power(times_ns * 1e-9, power).between(a_ns * 1e-9, b_ns * 1e-9)


@pytest.mark.parametrize("sensor,counter", [("average", True), ("instant", False)])
def test_the_series_carries_the_meters_energy_to_every_edge(fake_gpu, sensor, counter):
    gpu = fake_gpu(idle_w=50.0, sensor=sensor, counter=counter)
    with Meter(gpu) as meter:
        t0 = meter.mark()
        for watts in (200.0, 350.0, 120.0):
            gpu.clock.sleep(0.33)
            gpu.busy(0.41, watts)
        gpu.clock.sleep(0.3)
        t1 = meter.mark()
        # Windows well apart (the sampler's edge rule is for edges in refresh intervals of
        # their own), with edges between readings.
        windows = [(t0 + 0.3371, t0 + 0.7523), (t0 + 1.0877, t0 + 1.3391)]
        times_ns, power = meter.attribution_series(
            t0, t1, [a for a, _ in windows], [b for _, b in windows]
        )
        assert times_ns[0] == 0 and times_ns[-1] == round((t1 - t0) * 1e9)
        assert np.all(np.diff(times_ns) >= 1) and np.all(power >= 0)
        # On the sampler path the span's own energy is not one lone window's: its
        # interior edges step the load too.
        for a, b in [*([(t0, t1)] if counter else []), *windows]:
            a_ns, b_ns = round((a - t0) * 1e9), round((b - t0) * 1e9)
            assert _series_energy(times_ns, power, a_ns, b_ns) == pytest.approx(
                meter.energy(a, b).energy_j, rel=1e-9
            )


def test_constant_power_gives_a_flat_series(fake_gpu):
    gpu = fake_gpu(idle_w=80.0)
    with Meter(gpu) as meter:
        t0 = meter.mark()
        gpu.clock.sleep(1.0)
        t1 = meter.mark()
        _, power = meter.attribution_series(t0, t1, [t0 + 0.2], [t0 + 0.5])
    assert power == pytest.approx(np.full(power.size, 80.0), rel=1e-9)
