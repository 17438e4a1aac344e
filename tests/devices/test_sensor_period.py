"""Devices say how often their power reading refreshes, and meters poll accordingly."""

from __future__ import annotations

import pytest

from eopt.devices import nvml
from eopt.devices.nvml import NvmlGPU
from eopt.measure.meter import DEFAULT_SENSOR_PERIOD_S, Meter
from eopt.measure.sensor_period import estimate_power_update_period
from eopt.sim import gpu as sim
from eopt.sim.gpu import SimulatedGPU


@pytest.mark.parametrize("field", ["instant", "average"])
def test_simulated_gpu_states_the_period_its_sensor_really_has(field):
    gpu = SimulatedGPU("H200-SXM-141GB", seed=4)
    assert gpu.power_update_period_s == sim.SENSOR_PERIOD_S
    for _ in range(60):  # ~2 s of GEMMs: a load whose every refresh reads differently
        gpu.enqueue("gemm", "cublas", {"m": 16384, "n": 16384, "k": 16384})
    found = estimate_power_update_period(gpu, field=field, poll_s=0.002, duration_s=1.5)
    gpu.synchronize()
    assert found.period_s == pytest.approx(gpu.power_update_period_s, rel=0.02)
    assert not found.at_poll_limit


def test_meter_polls_at_a_fraction_of_the_simulated_period():
    gpu = SimulatedGPU(energy_counter=False)
    meter = Meter(gpu)
    assert meter.sensor_period_s == gpu.power_update_period_s
    assert meter.period_s == pytest.approx(gpu.power_update_period_s / 10)


def test_nvml_gpu_assumes_100_ms_until_told_otherwise(fake_nvml):
    gpu = NvmlGPU(0, control=False)
    assert gpu.power_update_period_s == nvml.DEFAULT_POWER_UPDATE_PERIOD_S == 0.1
    counter = Meter(gpu)  # the fake offers the energy counter
    assert counter.method == "counter"
    assert counter.sensor_period_s == 0.1 and counter.period_s == pytest.approx(0.02)
    gpu.power_update_period_s = 0.025  # e.g. from estimate_power_update_period
    sampler = Meter(gpu, method="sampler")
    assert sampler.sensor_period_s == 0.025
    assert sampler.period_s == pytest.approx(0.0025)
    assert sampler.describe()["sensor_period_s"] == 0.025
    other = NvmlGPU(0, control=False)  # setting one GPU's period leaves the others alone
    assert other.power_update_period_s == 0.1
    assert fake_nvml.setter_calls() == []


def test_meter_falls_back_to_100_ms_for_a_device_that_does_not_say(fake_nvml):
    gpu = NvmlGPU(0, control=False)
    gpu.power_update_period_s = None  # type: ignore[assignment]
    assert Meter(gpu).sensor_period_s == DEFAULT_SENSOR_PERIOD_S == 0.1
