"""Properties of the simulator's physics that must hold for any kernel and setting."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eopt.sim.physics import (
    GpuPhysics,
    KernelDemand,
    kernel_run,
    kernel_run_arrays,
    static_power_w,
    steady_state_run,
    thermal_step_c,
    voltage_rel,
)
from eopt.sim.profiles import load_profile

A100 = load_profile("A100-SXM4-40GB")
PHYS = A100.physics
F_MAX, F_MIN = A100.max_sm_clock_mhz, A100.min_sm_clock_mhz

demands = st.builds(
    KernelDemand,
    compute_s=st.floats(1e-5, 1.0),
    memory_s=st.floats(0.0, 1.0),
    activity=st.floats(0.05, 1.2),
    mem_activity=st.floats(0.0, 1.2),
    overlap_p=st.floats(1.0, 8.0),
    launch_s=st.floats(0.0, 1e-4),
)
clocks = st.sampled_from(A100.sm_clocks_mhz)
temps = st.floats(25.0, 90.0)


@given(demands, clocks, st.floats(100.0, 400.0), temps)
def test_power_never_exceeds_the_limit_unless_the_clock_is_at_its_floor(d, f, limit, temp):
    run = kernel_run(PHYS, d, f, limit, temp, F_MAX, F_MIN)
    assert run.duration_s > 0 and run.power_w > 0
    assert run.sm_clock_mhz <= f + 1e-9
    # The busiest activity slice at the lowest clock: if even it fits, every slice can.
    busiest = replace(d, activity=d.activity * (1 + PHYS.throttle_spread))
    uniform = replace(PHYS, throttle_spread=0.0)
    floor_power = kernel_run(uniform, busiest, F_MIN, 1e9, temp, F_MAX, F_MIN).power_w
    if floor_power <= limit:
        assert run.power_w <= limit * (1 + 1e-6)
    if not run.throttled:
        assert run.sm_clock_mhz == pytest.approx(f)


@given(demands, temps)
def test_unthrottled_time_falls_and_power_rises_with_the_clock(d, temp):
    f = np.array(A100.sm_clocks_mhz[::-1])
    out = kernel_run_arrays(PHYS, d, f, 1e9, temp, F_MAX, F_MIN)
    assert np.all(np.diff(out["duration_s"]) <= 1e-15)
    assert np.all(np.diff(out["power_w"]) >= -1e-9)
    # Compute-bound limit: time × clock is constant; memory-bound limit: time constant.
    busy = out["duration_s"] - d.launch_s
    assert np.all(busy >= max(d.compute_s * F_MAX / f.max(), d.memory_s) * (1 - 1e-9))


@given(demands, clocks, temps)
def test_a_lower_limit_never_makes_a_kernel_faster_or_hungrier(d, f, temp):
    high = kernel_run(PHYS, d, f, 400.0, temp, F_MAX, F_MIN)
    low = kernel_run(PHYS, d, f, 200.0, temp, F_MAX, F_MIN)
    assert low.duration_s >= high.duration_s * (1 - 1e-9)
    assert low.power_w <= high.power_w * (1 + 1e-9)


def test_voltage_is_flat_below_the_knee_and_rises_to_one():
    below = voltage_rel(PHYS, np.array([210.0, 600.0, PHYS.knee_mhz]), F_MAX)
    assert np.allclose(below, PHYS.v_min)
    above = voltage_rel(PHYS, np.array([PHYS.knee_mhz + 30, 1300.0, F_MAX]), F_MAX)
    assert np.all(np.diff(above) > 0) and above[-1] == pytest.approx(1.0)


def test_static_energy_per_cycle_makes_low_clocks_dominated():
    # Below the knee dynamic energy per cycle is constant, so energy per unit of work
    # rises as the clock falls: static power is paid for longer.
    d = KernelDemand(compute_s=0.05, memory_s=0.0, activity=1.0)
    f = np.array([400.0, 600.0, 800.0, 1000.0])
    out = steady_state_run(PHYS, d, f, 1e9, F_MAX, F_MIN)
    assert np.all(np.diff(out["energy_j"]) < 0)


@given(st.floats(20.0, 90.0), st.floats(0.0, 600.0), st.floats(0.0, 100.0))
def test_thermal_step_is_the_exact_rc_solution(t0, power, dt):
    t1 = thermal_step_c(PHYS, t0, power, dt)
    half = thermal_step_c(PHYS, thermal_step_c(PHYS, t0, power, dt / 2), power, dt / 2)
    assert t1 == pytest.approx(half, abs=1e-9)  # composing two half steps = one step
    t_eq = PHYS.t_ambient_c + PHYS.r_thermal_k_per_w * power
    tau = PHYS.r_thermal_k_per_w * PHYS.c_thermal_j_per_k
    assert t1 - t_eq == pytest.approx((t0 - t_eq) * math.exp(-dt / tau), abs=1e-9)


def test_steady_state_temperature_is_consistent_with_its_power():
    d = KernelDemand(compute_s=0.05, memory_s=0.01, activity=1.0)
    out = steady_state_run(PHYS, d, np.array([900.0, 1410.0]), 400.0, F_MAX, F_MIN)
    expected = PHYS.t_ambient_c + PHYS.r_thermal_k_per_w * out["power_w"]
    assert np.allclose(out["temp_c"], expected, atol=0.05)
    assert static_power_w(PHYS, 1410.0, F_MAX, out["temp_c"][1]) > static_power_w(
        PHYS, 1410.0, F_MAX, out["temp_c"][0]
    )


@given(st.floats(0.0, 1.0), st.floats(1.0, 8.0), st.sampled_from(A100.sm_clocks_mhz))
def test_memory_bound_slowdown_is_bounded_by_the_clock_ratio(share, p, f):
    # A kernel that only moves memory: its slowdown at a lower SM clock is the core side's
    # roofline term, never more than the clock ratio and never a speed-up.
    phys = replace(PHYS, mem_core_share=share, mem_core_p=p)
    d = KernelDemand(compute_s=1e-9, memory_s=0.01, activity=0.5, launch_s=0.0)
    top = kernel_run(phys, d, F_MAX, 1e9, 60.0, F_MAX, F_MIN).duration_s
    low = kernel_run(phys, d, f, 1e9, 60.0, F_MAX, F_MIN).duration_s
    ratio = F_MAX / f
    assert 1.0 - 1e-9 <= low / top <= ratio * (1 + 1e-9)
    expected = ((1 + (share * ratio) ** p) / (1 + share**p)) ** (1 / p)
    assert low / top == pytest.approx(expected, rel=1e-6)


def test_without_a_core_share_memory_time_ignores_the_sm_clock_as_before():
    d = KernelDemand(compute_s=1e-9, memory_s=0.01, activity=0.5, launch_s=0.0)
    out = kernel_run_arrays(PHYS, d, np.array([F_MIN, 900.0, F_MAX]), 1e9, 60.0, F_MAX, F_MIN)
    assert PHYS.mem_core_share == 0.0  # the A100 profile predates the share
    assert np.allclose(out["duration_s"], out["duration_s"][-1], rtol=1e-6)


@given(demands, st.floats(0.3, 1.0))
def test_a_slower_memory_clock_never_speeds_a_kernel_up(d, mem_rel):
    fast = kernel_run(PHYS, d, F_MAX, 1e9, 60.0, F_MAX, F_MIN)
    slow = kernel_run(PHYS, d, F_MAX, 1e9, 60.0, F_MAX, F_MIN, mem_rel=mem_rel)
    assert slow.duration_s >= fast.duration_s * (1 - 1e-12)
    if d.compute_s < 1e-3 * d.memory_s:  # memory-only: DRAM time scales as 1/clock
        assert slow.duration_s - d.launch_s == pytest.approx(
            (fast.duration_s - d.launch_s) / mem_rel, rel=1e-2
        )


def test_old_profile_dicts_still_load_with_the_memory_share_off():
    old = {k: v for k, v in PHYS.to_dict().items() if k != "mem_core_share"}
    assert GpuPhysics.from_dict(old).mem_core_share == 0.0
