"""The U shape over a power-limit sweep is judged only where the limit throttles."""

from __future__ import annotations

import numpy as np
import pytest

from eopt.sim.fit import LIMIT_REACH, MeasuredTable, limit_bound_kernels, u_shaped

LIMITS = np.array([100.0, 125.0, 150.0, 175.0, 200.0, 225.0, 250.0, 260.0])


def _sweep(powers: dict[str, np.ndarray], times: dict[str, np.ndarray]) -> MeasuredTable:
    return MeasuredTable.from_rows(
        {"kernel": k, "power_limit_w": w, "time_s": t, "power_w": p}
        for k in powers
        for w, t, p in zip(LIMITS, times[k], powers[k], strict=True)
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_only_kernels_whose_power_reaches_the_limit_are_bound(seed: int):
    rng = np.random.default_rng(seed)
    powers, times, expect = {}, {}, []
    for i in range(12):
        name = f"k{i}"
        if rng.random() < 0.5:
            # Flat: stays under the reach at every limit, the lowest one included.
            powers[name] = np.full(LIMITS.size, rng.uniform(0.3, 0.98) * LIMIT_REACH * 100.0)
        else:
            # Throttled at one random setting at least: its power sits at the limit there.
            powers[name] = np.minimum(LIMITS, rng.uniform(60.0, 300.0)) * 0.8
            hit = rng.integers(LIMITS.size)
            powers[name][hit] = LIMITS[hit] * rng.uniform(LIMIT_REACH + 0.001, 1.0)
            expect.append(name)
        times[name] = rng.uniform(0.5, 2.0, LIMITS.size)
    assert limit_bound_kernels(_sweep(powers, times)) == expect


def test_a_clock_sweep_keeps_every_kernel():
    table = MeasuredTable.from_rows(
        {"kernel": k, "sm_clock_mhz": f, "time_s": 1.0, "power_w": 10.0}
        for k in ("a", "b")
        for f in (900.0, 1200.0, 1500.0)
    )
    assert limit_bound_kernels(table) == ["a", "b"]


@pytest.mark.parametrize("seed", [3, 4])
def test_noise_alone_makes_most_flat_kernels_look_u_shaped(seed: int):
    # Why unthrottled kernels are left out: their energy is flat, the data's minimum lands
    # wherever the noise puts it (an interior one with chance 6/8), while a model of the
    # limit predicts the same energy everywhere and calls no U.
    rng = np.random.default_rng(seed)
    calls = [u_shaped(1.0 + 0.03 * rng.standard_normal(LIMITS.size), LIMITS) for _ in range(400)]
    share = float(np.mean(calls))
    assert abs(share - 6 / 8) < 4 * np.sqrt(0.75 * 0.25 / 400)
    assert not u_shaped(np.ones(LIMITS.size), LIMITS)
