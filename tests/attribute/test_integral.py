"""The one power integrator, against integrals worked out independently."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eopt.attribute.integral import EnergyCurve


def _knots(draw: st.DrawFn, n_max: int = 30) -> np.ndarray:
    steps = draw(st.lists(st.floats(1e-3, 1.0), min_size=1, max_size=n_max))
    return 100.0 + np.cumsum([0.0, *steps])


@st.composite
def power_samples(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, float, float]:
    t = _knots(draw)
    p = np.array(draw(st.lists(st.floats(0.0, 500.0), min_size=t.size, max_size=t.size)))
    a, b = sorted(draw(st.floats(t[0], t[-1])) for _ in range(2))
    return t, p, a, b


@given(power_samples())
def test_power_samples_integrate_as_the_trapezoid_through_the_edges(case):
    t, p, a, b = case
    # Independent: the trapezoid over the samples inside [a, b] plus the power
    # interpolated linearly at a and b.
    inside = (t > a) & (t < b)
    tt = np.concatenate([[a], t[inside], [b]])
    expected = float(np.trapezoid(np.interp(tt, t, p), tt))
    curve = EnergyCurve.from_power(t, p)
    assert curve.between(a, b) == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert curve.energy_j == pytest.approx(float(np.trapezoid(p, t)), rel=1e-12)
    whole = (t >= a) & (t <= b)
    assert curve.inside(a, b) == pytest.approx(
        float(np.trapezoid(p[whole], t[whole])) if whole.sum() > 1 else 0.0, rel=1e-9, abs=1e-9
    )


@st.composite
def counter_readings(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, list[float]]:
    t = _knots(draw)
    e = 1e7 + np.cumsum(draw(st.lists(st.floats(0.0, 50.0), min_size=t.size, max_size=t.size)))
    x = [draw(st.floats(t[0], t[-1])) for _ in range(5)] + [float(t[len(t) // 2])]
    return t, e, x


@given(counter_readings())
def test_counter_readings_interpolate_the_energy_at_constant_power(case):
    t, e, x = case
    curve = EnergyCurve.from_energy(t, e)
    assert curve.at(x) == pytest.approx(np.interp(x, t, e), rel=1e-12)
    # A reading hit exactly is the reading itself, to the bit.
    assert curve.at(t).tolist() == e.tolist()


def test_interval_means_are_constant_over_the_interval_they_close():
    t = np.array([0.0, 1.0, 3.0, 4.0])
    mean = np.array([99.0, 10.0, 20.0, 40.0])  # the first is not used
    curve = EnergyCurve.from_means(t, mean)
    assert curve.cum.tolist() == [0.0, 10.0, 50.0, 90.0]
    assert curve.between(0.5, 3.5) == pytest.approx(0.5 * 10 + 2 * 20 + 0.5 * 40)


def test_power_samples_may_step_at_an_instant():
    # 100 W up to t = 1, then 300 W: two samples at t = 1.
    curve = EnergyCurve.from_power([0.0, 1.0, 1.0, 2.0], [100.0, 100.0, 300.0, 300.0])
    assert curve.between(0.5, 1.5) == pytest.approx(50.0 + 150.0)
    assert curve.between(1.0, 2.0) == pytest.approx(300.0)
    assert curve.at([-1.0, 3.0]).tolist() == [0.0, 400.0]  # clipped to the samples
