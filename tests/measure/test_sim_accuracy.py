"""Integration accuracy on the simulated GPU against its ground truth (true_energy_j)."""

from __future__ import annotations

import pytest

from eopt.measure.meter import Meter
from eopt.runs.repeat import RepeatPolicy, measure_signature, measure_static_power
from eopt.sim.gpu import SimulatedGPU


def _region(gpu: SimulatedGPU, meter: Meter, duration_s: float):
    e0, t0 = gpu.true_energy_j(), meter.mark()
    while gpu.clock.now() - t0 < duration_s:
        gpu.launch("gemm", "cublas", {})
    t1, e1 = meter.mark(), gpu.true_energy_j()
    return meter.energy(t0, t1), e1 - e0


@pytest.mark.parametrize("field", ["instant", "average"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampler_is_within_one_percent_for_regions_of_ten_sensor_periods(field, seed):
    gpu = SimulatedGPU(seed=seed, energy_counter=False, power_field=field)
    with Meter(gpu) as meter:
        assert meter.method == "sampler"
        for idle_s, duration_s in ((0.37, 1.0), (0.21, 2.0), (0.5, 1.5)):
            gpu.idle(idle_s)  # isolated regions: the power steps up and down at the edges
            got, truth = _region(gpu, meter, duration_s)
            assert not got.short
            assert got.energy_j == pytest.approx(truth, rel=0.01)
            assert abs(got.energy_j - truth) <= got.error_j


@pytest.mark.parametrize("field", ["instant", "average"])
def test_short_regions_report_an_error_that_covers_the_truth(field):
    gpu = SimulatedGPU(seed=4, energy_counter=False, power_field=field)
    with Meter(gpu) as meter:
        for idle_s in (0.13, 0.29, 0.41):
            gpu.idle(idle_s)
            got, truth = _region(gpu, meter, 0.05)
            assert got.short
            assert abs(got.energy_j - truth) <= got.error_j


def test_counter_and_sampler_paths_agree_on_the_sim():
    gpu = SimulatedGPU(seed=5, energy_counter=True, power_field="average")
    counter = Meter(gpu, method="counter").start()
    sampler = Meter(gpu, method="sampler").start()
    gpu.idle(0.3)
    t0 = counter.mark()
    for impl in ("cublas", "cutlass", "naive"):
        gpu.launch("gemm", impl, {})
        gpu.launch("attention", "flash", {})
        gpu.idle(0.05)
    while gpu.clock.now() - t0 < 2.0:
        gpu.launch("layernorm", "apex", {})
    t1 = counter.mark()
    c, s = counter.energy(t0, t1), sampler.energy(t0, t1)
    counter.stop()
    sampler.stop()
    assert c.energy_j == pytest.approx(s.energy_j, rel=0.01)


def test_signature_on_the_sim_is_consistent_across_meters():
    policy = RepeatPolicy(warmup=1, min_runs=5, min_time_s=0.0, n_boot=200)
    sigs = {}
    for method in ("counter", "sampler"):
        gpu = SimulatedGPU(seed=6, energy_counter=True, power_field="average")
        with Meter(gpu, method=method) as meter:
            static = measure_static_power(gpu, meter)
            # the ready device's draw at this setting and temperature (ground truth)
            assert static.power_w == pytest.approx(gpu.static_power_w(), rel=0.01)
            sigs[method] = measure_signature(
                "gemm", lambda g=gpu: g.launch("gemm", "cublas", {}), gpu, meter,
                impl="cublas", policy=policy, backend="sim", static=static,
            )  # fmt: skip
    c, s = sigs["counter"], sigs["sampler"]
    assert c.time == pytest.approx(s.time, rel=0.01)
    assert c.energy == pytest.approx(s.energy, rel=0.01)
    assert c.dynamic_energy == pytest.approx(s.dynamic_energy, rel=0.02)
    assert c.meta["backend"] == "sim" and c.meta["device_model"] == "A100-SXM4-40GB"


@pytest.mark.parametrize(
    ("field", "window_s", "flagged"),
    [("instant", 0.025, True), ("average", 0.025, True), ("average", 0.1, False)],
)
def test_a_load_faster_than_the_sensor_is_flagged_on_point_readings(field, window_s, flagged):
    # ~35 ms GEMM, an idle gap, a burst of copies: the draw changes several times per
    # 100 ms refresh. Point readings only sample it (and alias), and so does an average
    # over 25 ms of each 100 ms (the profiles' NVML-like window); an average over the
    # whole interval does not.
    gpu = SimulatedGPU(seed=8, energy_counter=False, power_field=field)
    assert gpu.power_average_window_s == 0.025  # from the profile
    gpu.power_average_window_s = window_s

    def mixed() -> None:
        gpu.launch("gemm", "naive", {})
        gpu.idle(0.02)
        for _ in range(20):
            gpu.launch("memcpy", "cuda_memcpy", {"bytes": 2e7})

    policy = RepeatPolicy(warmup=1, min_runs=4, min_time_s=0.0, n_boot=100)
    with Meter(gpu) as meter:
        sig = measure_signature("mixed", mixed, gpu, meter, policy=policy)
    codes = {f["code"] for f in sig.meta["flags"]}
    assert ("large_energy_error" in codes) is flagged
    assert (sig.meta["energy_error_j"] / sig.energy > 0.02) is flagged
