"""Estimating how often a reading refreshes, against readings with a known schedule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from eopt.measure.sensor_period import estimate_power_update_period, period_from_changes
from eopt.sim.gpu import SimulatedGPU


def _refreshing_reading(clock, period, phase, values):
    """A reading that takes ``values[k]`` at the k-th refresh (``phase + k·period``)."""

    def read() -> float:
        k = math.floor((clock.now() - phase) / period)
        return values[min(max(k, 0), len(values) - 1)]

    return read


@given(
    period=st.floats(0.01, 0.5),
    phase=st.floats(0.0, 1.0),
    changed=st.lists(st.booleans(), min_size=12, max_size=60),
)
def test_period_from_changes_sees_through_hidden_refreshes(period, phase, changed):
    """Refreshes to an unchanged value are invisible; change times come from a poll every
    period / 20. The estimate still finds the period."""
    poll = period / 20
    refreshes = [k for k, c in enumerate(changed) if c]
    gaps = np.diff(refreshes)
    # The method's stated assumption: more than a quarter of the gaps are single periods.
    assume(len(gaps) >= 4 and np.sum(gaps == 1) > len(gaps) // 4 + 1)
    seen = [math.ceil((phase + k * period) / poll) * poll for k in refreshes]
    found = period_from_changes(seen)
    assert found is not None
    # Each change time is late by under one poll, so the span is off by under one poll.
    assert found == pytest.approx(period, abs=poll / (refreshes[-1] - refreshes[0]) + 1e-12)


def test_estimate_on_a_virtual_clock_with_repeated_values(fake_gpu):
    gpu = fake_gpu()
    rng = np.random.default_rng(1)
    # 60 refreshes; each keeps the previous value with probability 0.4.
    values = [100.0]
    for _ in range(59):
        values.append(values[-1] if rng.random() < 0.4 else float(rng.uniform(50, 400)))
    read = _refreshing_reading(gpu.clock, 0.037, 0.011, values)
    found = estimate_power_update_period(gpu, read=read, label="x", poll_s=0.001, duration_s=2.0)
    # Refresh k happens at 0.011 + k·0.037; those after the polling ended are not seen.
    expected_changes = sum(
        1
        for k in range(1, len(values))
        if values[k] != values[k - 1] and 0.011 + k * 0.037 <= found.duration_s
    )
    assert found.field == "x"
    assert found.changes == expected_changes
    assert found.period_s == pytest.approx(0.037, rel=0.01)
    assert found.min_gap_s == pytest.approx(0.037, abs=0.0011)
    assert found.poll_period_s == pytest.approx(0.001, rel=0.01)
    assert not found.at_poll_limit


def test_a_reading_that_changes_at_every_poll_is_at_the_poll_limit(fake_gpu):
    gpu = fake_gpu(sensor="instant", noise_w=1.0)  # noise on every read
    found = estimate_power_update_period(gpu, poll_s=0.002, duration_s=0.2)
    assert found.field == "power"
    assert found.period_s == pytest.approx(0.002, rel=0.01)
    assert found.at_poll_limit


def test_a_steady_reading_gives_no_estimate(fake_gpu):
    gpu = fake_gpu(sensor="instant")  # idle, noise-free: the value never changes
    found = estimate_power_update_period(gpu, poll_s=0.005, duration_s=1.0)
    assert found.period_s is None and found.changes == 0
    assert found.to_dict()["period_s"] is None


def test_bad_arguments_name_the_fix(fake_gpu):
    gpu = SimulatedGPU()
    with pytest.raises(ValueError, match="has no power field 'average_1s'; it offers average, "):
        estimate_power_update_period(gpu, field="average_1s")
    with pytest.raises(ValueError, match="must be positive"):
        estimate_power_update_period(gpu, poll_s=0.0)
    with pytest.raises(ValueError, match=r"only device.power\(\)"):
        estimate_power_update_period(fake_gpu(), field="instant")
