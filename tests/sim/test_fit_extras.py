"""The fit's optional kernel physics: memory steps, voltage exposure, stall power, and
fitting clock sweeps that ran into the board's power limit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from eopt.sim.fit import (
    MeasuredTable,
    SimFit,
    find_mem_steps,
    fit_sim,
    reaches_board_limit,
)
from eopt.sim.physics import KernelDemand, steady_state_run
from eopt.sim.profiles import load_profile

PROFILE = load_profile("A40")
F_MAX, F_MIN = PROFILE.max_sm_clock_mhz, PROFILE.min_sm_clock_mhz
CLOCKS = np.arange(855.0, 1741.0, 45.0)


def _run(demand: KernelDemand, clocks: np.ndarray, limit: float = np.inf) -> dict:
    return steady_state_run(PROFILE.physics, demand, clocks, limit, F_MAX, F_MIN)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_extra_at_its_default_changes_nothing(seed: int):
    rng = np.random.default_rng(seed)
    base = KernelDemand(
        compute_s=rng.uniform(1e-3, 1e-2),
        memory_s=rng.uniform(1e-3, 1e-2),
        activity=rng.uniform(0.3, 1.2),
        mem_activity=rng.uniform(0.3, 1.0),
    )
    clocks = rng.uniform(F_MIN, F_MAX, 12)
    ref = _run(base, clocks, 250.0)
    # A step above every clock, an exposure below the knee: no row may move.
    below = clocks[clocks < PROFILE.physics.knee_mhz]
    for extra, where in (
        ({"mem_step_mhz": F_MAX + 100.0, "mem_step_slowdown": 0.5}, clocks),
        ({"v_exposure": 0.3}, below),
    ):
        out = _run(replace(base, **extra), where)
        same = _run(base, where)
        for key in ("duration_s", "power_w"):
            np.testing.assert_allclose(out[key], same[key], rtol=1e-12)
    assert np.all(np.isfinite(ref["energy_j"]))


@pytest.mark.parametrize("seed", [3, 4])
def test_a_memory_step_slows_the_clocks_above_it_and_only_those(seed: int):
    rng = np.random.default_rng(seed)
    base = KernelDemand(rng.uniform(2e-3, 5e-3), rng.uniform(2e-3, 5e-3), 0.8, 0.8)
    centre = float(rng.uniform(1000.0, 1400.0))
    stepped = replace(base, mem_step_mhz=centre, mem_step_width_mhz=30.0, mem_step_slowdown=0.4)
    a, b = _run(base, CLOCKS), _run(stepped, CLOCKS)
    below, above = centre - 15.0 > CLOCKS, centre + 15.0 < CLOCKS
    np.testing.assert_allclose(a["duration_s"][below], b["duration_s"][below], rtol=1e-12)
    assert np.all(b["duration_s"][above] > a["duration_s"][above] * 1.01)


def test_stall_power_costs_energy_and_no_time():
    base = KernelDemand(2e-3, 6e-3, 0.8, 0.8)
    stalled = replace(base, stall_activity=0.3)
    a, b = _run(base, CLOCKS), _run(stalled, CLOCKS)
    np.testing.assert_allclose(a["duration_s"], b["duration_s"], rtol=1e-9)
    assert np.all(b["power_w"] > a["power_w"])
    # It grows with the clock: the energy-optimal clock can only move down.
    assert CLOCKS[np.argmin(b["energy_j"])] <= CLOCKS[np.argmin(a["energy_j"])]


def _table(
    truth: dict[str, KernelDemand], limit: float = np.inf, noise: float = 0.0, seed: int = 0
):
    rng = np.random.default_rng(seed)
    rows = []
    for name, demand in truth.items():
        out = _run(demand, CLOCKS, limit)
        for f, t, p in zip(CLOCKS, out["duration_s"], out["power_w"], strict=True):
            rows.append(
                {
                    "kernel": name,
                    "sm_clock_mhz": f,
                    "time_s": t * (1 + noise * rng.standard_normal()),
                    "power_w": p * (1 + noise * rng.standard_normal()),
                }
            )
    return MeasuredTable.from_rows(rows, source="synthetic")


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_the_step_found_is_where_time_rises(seed: int):
    rng = np.random.default_rng(seed)
    centre = float(CLOCKS[int(rng.integers(3, 10))]) + 22.5  # between two measured clocks
    truth = {
        "flat": KernelDemand(4e-3, 2e-3, 0.7, 0.6),
        "stepped": KernelDemand(
            3e-3,
            4e-3,
            0.7,
            0.6,
            mem_step_mhz=centre,
            mem_step_width_mhz=1.0,
            mem_step_slowdown=0.3,
        ),
    }
    steps = find_mem_steps(_table(truth, noise=0.002, seed=seed), PROFILE)
    assert set(steps) == {"stepped"}
    step = steps["stepped"]
    assert step.centre_mhz == pytest.approx(centre, abs=1e-9)
    assert step.width_mhz == pytest.approx(45.0)
    assert step.rise > 0.03


def test_rows_at_the_board_limit_are_no_step():
    truth = {"hot": KernelDemand(8e-3, 1e-3, 1.4, 0.8)}
    table = _table(truth, limit=PROFILE.power_limit_default_w, noise=0.004, seed=1)
    assert reaches_board_limit(table, PROFILE)
    assert find_mem_steps(table, PROFILE) == {}


def test_a_fit_with_a_step_recovers_the_optimum_clock():
    centre = 1057.5
    truth = {
        "a": KernelDemand(4e-3, 3e-3, 0.9, 0.7, overlap_p=3.0, launch_s=0.0),
        "b": KernelDemand(
            3e-3,
            4e-3,
            0.8,
            0.8,
            overlap_p=3.0,
            launch_s=0.0,
            mem_step_mhz=centre,
            mem_step_width_mhz=1.0,
            mem_step_slowdown=0.4,
        ),
    }
    table = _table(truth)
    fit = fit_sim(table, PROFILE, start=PROFILE.physics, max_nfev=60)
    assert fit.demands["b"].mem_step_slowdown > 0.1
    assert fit.demands["a"].mem_step_slowdown == 0.0
    out = fit.predict(table)
    names = np.array(table.kernel)
    rows = np.flatnonzero(names == "b")
    e_data = table.time_s[rows] * table.power_w[rows]
    chosen = int(np.argmin(out["energy_j"][rows]))
    assert e_data[chosen] <= e_data.min() * 1.01


def test_a_board_limit_fit_throttles_rows_without_a_limit():
    truth = {"hot": KernelDemand(8e-3, 1e-3, 1.4, 0.8, overlap_p=3.0, launch_s=0.0)}
    limit = PROFILE.power_limit_default_w
    table = _table(truth, limit=limit)
    plain = SimFit(PROFILE.physics, truth, F_MAX, F_MIN, float("nan"), limit)
    capped = replace(plain, board_limit=True)
    assert np.max(plain.predict(table)["power_w"]) > limit  # no limit: runs over it
    np.testing.assert_allclose(
        capped.predict(table)["power_w"], table.power_w, rtol=1e-6
    )  # 2 vs 8 thermal steps


def test_the_fit_says_where_it_guesses_a_step_and_where_it_throttles():
    from eopt.sim.fit import cannot_serve

    truth = {
        "hot": KernelDemand(8e-3, 1e-3, 1.4, 0.8),
        "stepped": KernelDemand(
            3e-3,
            4e-3,
            0.7,
            0.6,
            mem_step_mhz=1057.5,
            mem_step_width_mhz=1.0,
            mem_step_slowdown=0.3,
        ),
    }
    text = " ".join(cannot_serve(_table(truth, limit=PROFILE.power_limit_default_w), PROFILE))
    assert "300 W limit" in text
    assert "stepped: its time rises" in text and "1035 and 1080 MHz" in text
