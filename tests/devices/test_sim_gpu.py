"""The simulated GPU's physics, sensors, virtual clock and control."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from eopt.devices import OperatingPoint, open_devices
from eopt.devices.base import Clock, Device, DeviceError, MeasureOnlyError
from eopt.sim.gpu import SENSOR_PERIOD_S, SimulatedGPU, VirtualClock
from eopt.sim.kernels import get_kernel, kernel_names
from eopt.sim.physics import static_power_w
from eopt.sim.profiles import available_profiles, load_profile

BIG_GEMM = {"m": 16384, "n": 16384, "k": 16384}


def _quiet(**kwargs) -> SimulatedGPU:
    return SimulatedGPU(noise=False, **kwargs)


def _run_for(gpu: SimulatedGPU, seconds: float, kernel: str = "gemm", impl=None, workload=None):
    """Launch back-to-back until ``seconds`` of virtual time passed; returns (time, energy)."""
    t0, e0 = gpu.clock.now(), gpu.true_energy_j()
    while gpu.clock.now() - t0 < seconds:
        gpu.launch(kernel, impl, workload)
    return gpu.clock.now() - t0, gpu.true_energy_j() - e0


def test_it_satisfies_the_device_and_clock_protocols():
    gpu = SimulatedGPU()
    assert isinstance(gpu, Device)
    assert isinstance(gpu.clock, VirtualClock)
    clock: Clock = gpu.clock  # static check of the protocol's shape
    assert clock.now() == 0.0
    assert gpu.name == "sim0" and gpu.model == "A100-SXM4-40GB"


def test_profiles_carry_the_real_clock_tables_and_limits():
    assert {"A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB"} <= set(
        available_profiles()
    )
    a100 = load_profile("A100-SXM4-40GB")
    assert a100.sm_clocks_mhz[0] == 1410 and a100.sm_clocks_mhz[-1] == 210
    assert len(a100.sm_clocks_mhz) == 81  # 15 MHz steps
    assert np.allclose(np.diff(a100.sm_clocks_mhz), -15)
    assert (a100.power_limit_min_w, a100.power_limit_max_w) == (100, 400)
    for name in ("H100-SXM5-80GB", "H200-SXM-141GB"):
        hopper = load_profile(name)
        assert hopper.sm_clocks_mhz[0] == 1980
        assert (hopper.power_limit_min_w, hopper.power_limit_max_w) == (200, 700)
    # The 40 GB board inherits the calibrated 80 GB physics, with its own memory and limit.
    big = load_profile("A100-SXM4-80GB")
    assert a100.physics.knee_mhz == big.physics.knee_mhz
    assert big.power_limit_default_w == 500
    assert a100.memory_bandwidth_bytes_per_s < big.memory_bandwidth_bytes_per_s


def test_unknown_model_lists_the_available_ones():
    with pytest.raises(ValueError, match="A100-SXM4-40GB"):
        SimulatedGPU("RTX-9999")


def test_energy_counter_equals_the_integral_of_true_power():
    gpu = SimulatedGPU(record_trace=True, seed=3)
    c0 = gpu.energy_counter_j()
    gpu.launch("gemm", "cublas", BIG_GEMM)
    gpu.idle(0.37)
    gpu.set_operating_point(OperatingPoint(sm_clock_mhz=900))
    for _ in range(5):
        gpu.launch("attention", "flash")
    integral = sum((t1 - t0) * p for t0, t1, p in gpu.power_trace())
    assert integral == pytest.approx(gpu.true_energy_j(), rel=1e-12)
    assert gpu.energy_counter_j() - c0 == pytest.approx(integral, abs=2e-3)  # mJ resolution
    # The trace covers the whole virtual time without gaps.
    trace = gpu.power_trace()
    assert trace[0][0] == 0.0 and trace[-1][1] == pytest.approx(gpu.clock.now())
    assert all(a[1] == pytest.approx(b[0]) for a, b in itertools.pairwise(trace))


def test_energy_counter_can_be_disabled():
    assert SimulatedGPU(energy_counter=False).energy_counter_j() is None


def test_compute_bound_time_falls_with_clock_memory_bound_barely_moves():
    gpu = _quiet()
    times = {}
    for kernel, impl, workload in (("gemm", "cublas", BIG_GEMM), ("memcpy", None, None)):
        for mhz in (1410, 1005, 705):
            gpu.set_operating_point(OperatingPoint(sm_clock_mhz=mhz, power_limit_w=400))
            gpu.idle(5.0)  # cool down: no throttling at the top clock either
            times[kernel, mhz] = gpu.launch(kernel, impl, workload)
    # Compute bound: close to 1/clock (within the memory share and throttling at the top).
    assert times["gemm", 705] / times["gemm", 1005] == pytest.approx(1005 / 705, rel=0.05)
    assert times["gemm", 1005] < times["gemm", 705]
    assert times["gemm", 1410] < times["gemm", 1005]
    # Memory bound: a 2x lower clock costs under 3 % time.
    assert times["memcpy", 705] / times["memcpy", 1410] < 1.03


def test_static_power_rises_with_temperature_and_voltage():
    phys = load_profile("A100-SXM4-40GB").physics
    cold = static_power_w(phys, 1410, 1410, 40.0)
    hot = static_power_w(phys, 1410, 1410, 80.0)
    assert hot > cold
    low_v = static_power_w(phys, 900, 1410, 60.0)
    assert low_v < static_power_w(phys, 1410, 1410, 60.0)
    # On the device: the same idle setting draws more once the chip is hot.
    gpu = _quiet()
    gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1410))
    idle_cool = gpu.static_power_w()
    _run_for(gpu, 20.0, workload=BIG_GEMM)
    assert gpu.static_power_w() > idle_cool + 1.0


def test_power_limit_caps_power_by_lowering_the_clock():
    gpu = _quiet()
    gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1410, power_limit_w=400))
    _, energy = _run_for(gpu, 0.5, workload=BIG_GEMM)
    uncapped_w = energy / 0.5
    for limit in (250, 150):
        gpu.set_operating_point(OperatingPoint(power_limit_w=limit))
        seconds, energy = _run_for(gpu, 2.0, workload=BIG_GEMM)
        record = gpu.kernel_records()[-1]
        assert record.throttled
        assert record.sm_clock_mhz < 1410
        assert energy / seconds <= limit * 1.01
        assert energy / seconds < uncapped_w


def test_thermal_state_rises_under_load_and_decays_when_idle():
    gpu = _quiet()
    start = gpu.temperature_c
    _run_for(gpu, 30.0, workload=BIG_GEMM)
    hot = gpu.temperature_c
    assert hot > start + 10.0
    gpu.idle(5.0)
    cooler = gpu.temperature_c
    gpu.idle(120.0)
    assert start - 0.5 < gpu.temperature_c < cooler < hot
    # Exponential decay toward the idle equilibrium: halfway ≈ τ·ln 2.
    phys = gpu.profile.physics
    tau = phys.r_thermal_k_per_w * phys.c_thermal_j_per_k
    expected = start + (hot - start) * math.exp(-5.0 / tau)
    assert cooler == pytest.approx(expected, abs=1.0)


def test_the_100ms_sensor_lags_a_step_in_power():
    gpu = SimulatedGPU(noise=False, power_field="average")
    gpu.idle(1.0)
    idle_reading = gpu.power().power_w
    gpu.enqueue("transformer_fwd")  # a long kernel (hundreds of ms)
    clock = gpu.clock
    clock.sleep(1e-4)
    assert gpu.true_power_w() > 2 * idle_reading
    assert gpu.power().power_w == pytest.approx(idle_reading, rel=1e-9)  # not yet updated
    clock.sleep(2 * SENSOR_PERIOD_S)
    assert gpu.power().power_w == pytest.approx(gpu.true_power_w(), rel=0.02)
    gpu.synchronize()


def test_instant_and_average_fields_differ_inside_a_window():
    gpu = SimulatedGPU(noise=False)
    gpu.idle(1.0)
    idle_w = gpu.true_power_w()
    # Start the burst 20 ms before the next refresh, inside the 25 ms the average covers
    # (a burst in the other 75 ms would leave no trace in either field).
    gpu.idle(gpu.last_power_update_s + SENSOR_PERIOD_S - 0.02 - gpu.clock.now())
    duration = gpu.launch("gemm", "cublas", {"m": 8192, "n": 8192, "k": 16384})
    assert duration < 0.015  # a ~10 ms burst that ends before the refresh
    # At the next update the window holds the burst while the draw at the update instant
    # is idle again: the average shows the burst, the instant field not.
    seen = []
    for _ in range(20):
        gpu.idle(0.01)
        seen.append(gpu.power_fields())
    assert any(
        f["average"].power_w > 1.2 * idle_w
        and f["instant"].power_w == pytest.approx(idle_w, rel=0.01)
        for f in seen
    )
    assert gpu.power().field == "instant"


def test_seeded_runs_are_identical_and_seeds_differ():
    def run(seed: int) -> tuple[list[float], list[float]]:
        gpu = SimulatedGPU(seed=seed)
        durations, readings = [], []
        for _ in range(30):
            durations.append(gpu.launch("attention", "sdpa"))
            readings.append(gpu.power().power_w)
        return durations, readings

    assert run(7) == run(7)
    assert run(7) != run(8)
    durations = np.array(run(7)[0])
    assert durations.std() > 0  # run-to-run jitter exists


def test_virtual_timers_fire_at_every_period_boundary_in_time_order():
    gpu = SimulatedGPU()
    seen: list[tuple[float, float]] = []
    timer = gpu.clock.every(0.02, lambda now: seen.append((now, gpu.true_energy_j())))
    gpu.launch("transformer_fwd")
    gpu.idle(0.1)
    timer.cancel()
    end = gpu.clock.now()
    gpu.idle(0.5)
    times = [t for t, _ in seen]
    assert times[0] == 0.0
    assert np.allclose(np.diff(times), 0.02)
    assert times[-1] <= end < times[-1] + 0.02 + 1e-9
    energies = [e for _, e in seen]
    assert all(b > a for a, b in itertools.pairwise(energies))  # device advanced


def test_a_callback_may_not_advance_time():
    clock = VirtualClock()
    ticks = []

    def bad(now: float) -> None:
        ticks.append(now)
        if len(ticks) > 1:
            clock.sleep(1.0)

    clock.every(0.1, bad)
    with pytest.raises(RuntimeError, match="may only read"):
        clock.sleep(0.5)


def test_gpus_on_one_clock_run_side_by_side():
    a, b = open_devices("sim", indices=[0, 1])
    assert a.clock is b.clock
    a.enqueue("transformer_fwd")
    b.enqueue("transformer_fwd")
    a.synchronize()
    b.synchronize()
    ra, rb = a.kernel_records()[-1], b.kernel_records()[-1]
    assert ra.start_s == rb.start_s == 0.0  # concurrent, not one after the other
    assert a.clock.now() == pytest.approx(max(ra.end_s, rb.end_s))


def test_control_validation_restore_and_measure_only():
    gpu = SimulatedGPU()
    with pytest.raises(DeviceError, match="nearest: 1005 MHz"):
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1000))
    with pytest.raises(DeviceError, match="100–400 W"):
        gpu.set_operating_point(OperatingPoint(power_limit_w=500))
    gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1005, power_limit_w=300))
    gpu.set_operating_point(OperatingPoint(power_limit_w=250))
    assert gpu.current_operating_point() == OperatingPoint(1005.0, None, 250.0)
    gpu.restore()
    assert gpu.current_operating_point() == OperatingPoint(None, None, 400.0)
    locked = SimulatedGPU(control=False)
    with pytest.raises(MeasureOnlyError):
        locked.set_operating_point(OperatingPoint(power_limit_w=300))


def test_every_catalog_kernel_and_implementation_runs_on_every_profile():
    required = {"gemm", "attention", "layernorm", "allreduce", "memcpy"}
    assert required <= set(kernel_names())
    for model in available_profiles():
        gpu = _quiet(model=model)
        for name in kernel_names():
            kernel = get_kernel(name)
            assert len(kernel.implementations) >= (3 if name in required else 1)
            for impl in kernel.implementations:
                assert gpu.launch(name, impl) > 0


def test_kernel_costs_follow_their_formulas_and_bad_workloads_are_named():
    gemm = get_kernel("sim:gemm")
    flops, nbytes = gemm.flops_and_bytes("cublas", {"m": 100, "n": 200, "k": 300})
    assert flops == 2 * 100 * 200 * 300
    assert nbytes == (100 * 300 + 300 * 200 + 100 * 200) * 2
    flash = get_kernel("attention").flops_and_bytes("flash")[1]
    naive = get_kernel("attention").flops_and_bytes("naive")[1]
    assert naive > 10 * flash  # naive attention materialises the score matrix
    with pytest.raises(ValueError, match="unknown workload key 'q'"):
        gemm.workload({"q": 1})
    with pytest.raises(ValueError, match="available: cublas, cutlass, naive"):
        gemm.implementation("magma")
    with pytest.raises(ValueError, match="unknown simulated kernel"):
        get_kernel("fft")


def test_faster_implementations_are_faster_and_hopper_beats_ampere():
    a100, h100 = _quiet(), _quiet(model="H100-SXM5-80GB")
    times = {impl: a100.launch("gemm", impl) for impl in ("cublas", "cutlass", "naive")}
    assert times["cublas"] < times["cutlass"] < times["naive"]
    assert h100.launch("gemm", "cublas") < times["cublas"]
