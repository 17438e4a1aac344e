"""The repeat protocol on a scripted fake GPU: exact values, flags on injected faults."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eopt.measure.meter import Meter
from eopt.model.operating_point import OperatingPoint
from eopt.runs.repeat import RepeatPolicy, measure_signature, measure_static_power

FAST = RepeatPolicy(warmup=1, min_runs=8, min_time_s=0.0, settle_s=0.2, n_boot=300)


def _codes(sig) -> set[str]:
    return {f["code"] for f in sig.meta["flags"]}


@pytest.mark.parametrize("method", ["counter", "sampler"])
def test_signature_of_a_steady_kernel_matches_the_script(fake_gpu, method):
    gpu = fake_gpu(idle_w=60.0, counter=True)
    with Meter(gpu, method=method) as meter:
        sig = measure_signature(
            "gemm",
            lambda: gpu.busy(0.004, 250.0),
            gpu,
            meter,
            impl="cublas",
            workload={"m": 1024},
            policy=FAST,
        )
    rel = 1e-6 if method == "counter" else 0.01
    assert sig.static_power == pytest.approx(60.0, rel=rel)
    assert sig.time == pytest.approx(0.004, rel=1e-9)
    assert sig.dynamic_energy == pytest.approx((250.0 - 60.0) * 0.004, rel=rel * 5)
    assert sig.energy == pytest.approx(250.0 * 0.004, rel=rel)
    # Each window lasts at least ten sensor periods: ceil(1 s / 4 ms) invocations.
    assert sig.meta["inner_repeats"] == math.ceil(1.0 / 0.004)
    assert sig.meta["n"] == 8
    assert sig.meta["method"] == method
    assert sig.devices == ("fake0",) and sig.impl == "cublas" and sig.workload == {"m": 1024}
    assert sig.op_point == gpu.current_operating_point()
    assert sig.meta["flags"] == []
    lo, hi = sig.meta["ci_energy_j"]
    assert lo <= sig.meta["energy"]["mean"] <= hi


def test_sync_hook_is_called_around_every_window(fake_gpu):
    gpu = fake_gpu()
    calls = []
    with Meter(gpu) as meter:
        sig = measure_signature(
            "k", lambda: gpu.busy(0.5, 200.0), gpu, meter, policy=FAST,
            sync=lambda: calls.append(gpu.clock.now()),
        )  # fmt: skip
    k = sig.meta["inner_repeats"]
    assert k == 2
    # calibration (2) + the timed warm-up window (2 per invocation) + measured windows (2)
    assert len(calls) == 2 + 2 * k + 2 * FAST.min_runs


def test_min_time_extends_the_run_count(fake_gpu):
    gpu = fake_gpu()
    policy = RepeatPolicy(warmup=0, min_runs=2, min_time_s=6.0, settle_s=0.1, n_boot=100)
    with Meter(gpu) as meter:
        sig = measure_signature("k", lambda: gpu.busy(0.25, 200.0), gpu, meter, policy=policy)
    # windows of 1 s (4 × 0.25 s) until 6 s are measured
    assert sig.meta["n"] == 6
    assert sig.meta["inner_repeats"] == 4


def test_state_change_in_the_middle_of_a_cell_is_flagged_not_averaged_away(fake_gpu):
    gpu = fake_gpu()
    calls = {"n": 0}

    def kernel() -> None:
        calls["n"] += 1
        # windows of 100 invocations; windows ~9–16 run in a different state: 20 % slower
        # at lower power
        slow = 1000 <= calls["n"] < 1800
        gpu.busy(0.012 if slow else 0.01, 180.0 if slow else 220.0)

    policy = RepeatPolicy(warmup=1, min_runs=24, min_time_s=0.0, settle_s=0.1, n_boot=200)
    with Meter(gpu) as meter:
        sig = measure_signature("k", kernel, gpu, meter, policy=policy)
    flags = [f for f in sig.meta["flags"] if f["code"] == "state_change"]
    assert {f["quantity"] for f in flags} == {"time", "energy"}
    runs = sig.meta["runs"]["time_s"]
    assert sig.time == pytest.approx(sum(runs) / len(runs))  # every run kept in the mean
    assert max(runs) > 1.1 * min(runs)


def test_warmup_drift_is_flagged(fake_gpu):
    gpu = fake_gpu()
    calls = {"n": 0}

    def kernel() -> None:
        calls["n"] += 1
        # power settles over the first ~20 windows (a device heating up)
        gpu.busy(0.01, 200.0 * (1 + 0.1 * math.exp(-calls["n"] / 600.0)))

    policy = RepeatPolicy(warmup=0, min_runs=20, min_time_s=0.0, settle_s=0.1, n_boot=200)
    with Meter(gpu) as meter:
        sig = measure_signature("k", kernel, gpu, meter, policy=policy)
    assert "warmup_drift" in _codes(sig)
    assert all(f["quantity"] == "energy" for f in sig.meta["flags"] if f["code"] == "warmup_drift")


def test_negative_dynamic_energy_is_clamped_and_flagged(fake_gpu):
    gpu = fake_gpu(idle_w=60.0)
    with Meter(gpu) as meter:
        sig = measure_signature("k", lambda: gpu.busy(0.1, 55.0), gpu, meter, policy=FAST)
    assert sig.dynamic_energy == 0.0
    assert "negative_dynamic_energy" in _codes(sig)
    assert sig.meta["raw_dynamic_energy_j"] == pytest.approx((55.0 - 60.0) * 0.1, rel=1e-6)


def test_budget_reached_is_flagged(fake_gpu):
    gpu = fake_gpu()
    policy = RepeatPolicy(warmup=0, min_runs=3, max_runs=4, min_time_s=100.0, settle_s=0.1)
    with Meter(gpu) as meter:
        sig = measure_signature("k", lambda: gpu.busy(1.0, 200.0), gpu, meter, policy=policy)
    assert sig.meta["n"] == 4
    assert "budget_reached" in _codes(sig)


def test_short_windows_carry_their_error(fake_gpu):
    gpu = fake_gpu(counter=False, sensor="instant")
    policy = RepeatPolicy(warmup=1, min_runs=5, min_time_s=0.0, min_window_s=0.02, settle_s=0.1)
    with Meter(gpu) as meter:
        sig = measure_signature("k", lambda: gpu.busy(0.02, 300.0), gpu, meter, policy=policy)
    flag = next(f for f in sig.meta["flags"] if f["code"] == "short_window")
    assert flag["relative_error"] > 0.01
    assert sig.meta["energy_error_j"] > 0


def test_static_power_tracks_the_operating_point(fake_gpu):
    gpu = fake_gpu(idle_w=75.0)
    gpu.set_operating_point(OperatingPoint(1200.0))
    with Meter(gpu) as meter:
        static = measure_static_power(gpu, meter)
    assert static.power_w == pytest.approx(75.0)
    assert static.window.duration_s == pytest.approx(1.0)  # ten sensor periods


def test_bad_policies_are_rejected():
    with pytest.raises(ValueError, match="max_runs"):
        RepeatPolicy(min_runs=10, max_runs=5)
    with pytest.raises(ValueError, match="confidence"):
        RepeatPolicy(confidence=1.5)


def test_single_run_variance_separates_run_jitter_from_slow_drift(fake_gpu):
    # Each run jitters (σ = 0.5 ms, independent) and the machine drifts slowly across
    # windows (a sine of amplitude 0.5 ms over ~40 windows). A single run varies by both:
    # σ² + A²/2. Scaling the variance of window means by k would count the drift k times.
    rng = np.random.default_rng(0)
    sigma, amp, k = 5e-4, 5e-4, 100
    calls = {"n": 0}

    def kernel() -> None:
        calls["n"] += 1
        drift = amp * math.sin(2 * math.pi * calls["n"] / (40 * k))
        gpu.busy(0.01 + drift + rng.normal(0.0, sigma), 200.0)

    gpu = fake_gpu()
    policy = RepeatPolicy(warmup=1, min_runs=40, min_time_s=0.0, settle_s=0.1, n_boot=100,
                          min_effect=1.0)  # fmt: skip
    with Meter(gpu) as meter:
        sig = measure_signature("k", kernel, gpu, meter, policy=policy)
    assert sig.meta["inner_repeats"] == k
    truth = sigma**2 + amp**2 / 2
    assert sig.var_time == pytest.approx(truth, rel=0.35)
    assert sig.meta["variance"]["model"] == "within + between windows"
    naive = k * float(np.var(sig.meta["runs"]["time_s"], ddof=1))
    assert naive > 10 * truth  # what the independence assumption would have claimed
    # energy at constant power: σ_E = P · σ_T
    assert sig.var_energy == pytest.approx(200.0**2 * truth, rel=0.35)


def test_a_tiny_kernel_is_capped_at_max_inner_repeats_and_flagged() -> None:
    """One 5-µs simulated gemm would need 200 000 invocations per 1-s window; the window
    holds at most ``max_inner_repeats`` and the cell says so."""
    from eopt.measure.meter import Meter
    from eopt.runs.repeat import RepeatPolicy, measure_signature
    from eopt.sim.gpu import SimulatedGPU

    gpu = SimulatedGPU(seed=1)
    policy = RepeatPolicy(warmup=1, min_runs=3, min_time_s=0.0, max_inner_repeats=500)
    with Meter(gpu) as meter:
        sig = measure_signature(
            "gemm",
            lambda: gpu.launch("gemm", "cublas", {"m": 1, "n": 1, "k": 1}),
            gpu,
            meter,
            policy=policy,
        )
    assert sig.meta["inner_repeats"] == 500
    assert "inner_repeats_capped" in [f["code"] for f in sig.meta["flags"]]
    assert sig.time == pytest.approx(5e-6, rel=0.05)


# --- what the device ran at, per window (the "Ready for real GPUs" readback) ---------------
def _reporting(gpu, state: dict) -> None:
    """Give a fake GPU the readings an NVML GPU offers, read from ``state`` at call time."""
    gpu.sm_clock_mhz = lambda: state["sm"]
    gpu.clocks_event_reasons = lambda: frozenset(state["reasons"])
    gpu.enforced_power_limit_w = lambda: state["limit"]


def test_what_the_gpu_ran_at_is_recorded_per_window_and_compared_with_the_request(fake_gpu):
    """The cell asks for 1410 MHz at 300 W. Another limit caps the GPU at 250 W all along,
    and from the 800th call the clock falls to 1200 MHz under it. Before the fix the cell
    recorded eopt's own request as its "readback" and flagged neither."""
    gpu = fake_gpu()  # current operating point: 1410 MHz, 300 W
    state = {"sm": 1410.0, "reasons": set(), "limit": 250.0}
    _reporting(gpu, state)
    calls = {"n": 0}

    def kernel() -> None:
        calls["n"] += 1
        if calls["n"] >= 800:
            state["sm"], state["reasons"] = 1200.0, {"sw_power_cap"}
        gpu.busy(0.01, 200.0)

    policy = RepeatPolicy(warmup=1, min_runs=10, min_time_s=0.0, settle_s=0.1, n_boot=100)
    with Meter(gpu) as meter:
        sig = measure_signature("k", kernel, gpu, meter, policy=policy)
    runs = sig.meta["runs"]
    n = sig.meta["n"]
    assert len(runs["sm_clock_mhz"]) == len(runs["enforced_power_limit_w"]) == n
    # 100 calls a window, after 101 of calibration and warm-up: windows 0–5 at 1410 MHz,
    # window 6 straddles the change, 7–9 at 1200 MHz.
    assert runs["sm_clock_mhz"][:6] == [1410.0] * 6
    assert runs["sm_clock_mhz"][7:] == [1200.0] * 3
    assert runs["clocks_event_reasons"][0] == [] and runs["clocks_event_reasons"][-1] == [
        "sw_power_cap"
    ]
    assert runs["enforced_power_limit_w"] == [250.0] * n
    flags = {f["code"]: f for f in sig.meta["flags"]}
    clock = flags["sm_clock_off_request"]
    assert clock["requested_mhz"] == 1410.0 and clock["windows"][-3:] == [7, 8, 9]
    assert 0 not in clock["windows"] and clock["reasons"] == ["sw_power_cap"]
    limit = flags["power_limit_not_enforced"]
    assert limit["requested_w"] == 300.0 and limit["enforced_w"] == [250.0]
    assert "throttled" not in flags  # a power cap is the limit at work, not a slowdown
    state_meta = sig.meta["device_state"]
    assert state_meta["enforced_power_limit_w"] == 250.0
    assert state_meta["sm_clock_mhz_range"] == [1200.0, 1410.0]
    assert "op_point_readback" not in sig.meta


def test_a_gpu_that_holds_its_setting_is_not_flagged_and_a_thermal_slowdown_is(fake_gpu):
    gpu = fake_gpu()
    state = {"sm": 1410.0, "reasons": {"applications_clocks_setting"}, "limit": 300.0}
    _reporting(gpu, state)
    policy = RepeatPolicy(warmup=1, min_runs=4, min_time_s=0.0, settle_s=0.1, n_boot=100)
    with Meter(gpu) as meter:
        steady = measure_signature("k", lambda: gpu.busy(0.01, 200.0), gpu, meter, policy=policy)
        state["reasons"] = {"hw_thermal_slowdown", "gpu_idle"}
        hot = measure_signature("k", lambda: gpu.busy(0.01, 200.0), gpu, meter, policy=policy)
    assert steady.meta["flags"] == []
    assert steady.meta["device_state"]["sm_clock_mhz"] == 1410.0
    throttled = next(f for f in hot.meta["flags"] if f["code"] == "throttled")
    assert throttled["reasons"] == ["hw_thermal_slowdown"]
    assert throttled["windows"] == [0, 1, 2, 3]


def test_readings_that_fail_never_fail_the_measurement(fake_gpu):
    from eopt.devices.base import DeviceError, SensorReadError

    gpu = fake_gpu()
    reads = {"n": 0}

    def flaky_reasons() -> frozenset[str]:
        reads["n"] += 1
        if reads["n"] % 2:
            raise SensorReadError("busy driver")
        return frozenset()

    def refused() -> float:
        raise DeviceError("reading the SM clock: no permission")

    gpu.clocks_event_reasons = flaky_reasons
    gpu.sm_clock_mhz = refused
    with Meter(gpu) as meter:
        sig = measure_signature("k", lambda: gpu.busy(0.01, 200.0), gpu, meter, policy=FAST)
    state = sig.meta["device_state"]
    assert state["read"] == ["sm_clock_mhz", "clocks_event_reasons"]
    assert "no permission" in state["read_errors"]["sm_clock_mhz"]
    assert state["sm_clock_mhz"] is None and state["clocks_event_reasons"] == []
    assert sig.meta["flags"] == []


def test_windows_in_a_meter_gap_are_flagged_per_cell(fake_gpu):
    """Counter reads fail for 0.3 s in the first cell: its windows there carry gap_s and
    the cell is flagged. The second cell, on the same meter, had no gap. Before the fix no
    cell was flagged, and every later cell inherited the meter's lifetime gap total."""
    from eopt.devices.base import SensorReadError

    gpu = fake_gpu()
    failing = {"on": False}
    counter = gpu.energy_counter_j

    def energy_counter_j() -> float | None:
        if failing["on"]:
            raise SensorReadError("read timed out")
        return counter()

    gpu.energy_counter_j = energy_counter_j
    calls = {"n": 0}

    def kernel() -> None:
        calls["n"] += 1
        failing["on"] = 500 <= calls["n"] < 530
        gpu.busy(0.01, 200.0)

    with Meter(gpu, method="counter") as meter:
        gapped = measure_signature("k", kernel, gpu, meter, policy=FAST)
        clean = measure_signature("k", lambda: gpu.busy(0.01, 200.0), gpu, meter, policy=FAST)
    flag = next(f for f in gapped.meta["flags"] if f["code"] == "meter_gap")
    assert flag["windows"] and flag["gap_s"] == pytest.approx(0.3, abs=0.05)
    assert gapped.meta["gap_s"] == pytest.approx(flag["gap_s"])
    assert sum(gapped.meta["runs"]["gap_s"]) == pytest.approx(flag["gap_s"])
    assert gapped.meta["gap_windows"] == len(flag["windows"])
    assert "meter_gap" not in {f["code"] for f in clean.meta["flags"]}
    assert clean.meta["gap_s"] == 0.0 and "gaps" not in clean.meta
