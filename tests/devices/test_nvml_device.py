"""NvmlGPU against a stateful fake pynvml: set, read back, restore, errors, sensors."""

from __future__ import annotations

from unittest import mock

import pynvml
import pytest

from eopt.devices import OperatingPoint, open_devices
from eopt.devices.base import DeviceError, DevicePermissionError, MeasureOnlyError
from eopt.devices.nvml import NvmlGPU, NvmlNotSupportedError


def test_set_reads_back_and_restore_returns_the_original_state(fake_nvml):
    gpu = NvmlGPU(0)
    fake = fake_nvml.gpus[0]
    fake.limit_mw = 300_000  # the user's own limit, below the 400 W maximum
    gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200, power_limit_w=250))
    assert fake.locked_sm == (1200, 1200)
    assert fake.limit_mw == 250_000
    assert gpu.current_operating_point() == OperatingPoint(1200.0, None, 250.0)

    gpu.set_operating_point(OperatingPoint(power_limit_w=200))  # a second change
    gpu.restore()
    assert fake.locked_sm is None
    assert fake.limit_mw == 300_000  # the original, not the maximum, not the first change
    assert gpu.current_operating_point() == OperatingPoint(None, None, 300.0)


def test_restore_without_a_change_touches_nothing(fake_nvml):
    gpu = NvmlGPU(0)
    gpu.restore()
    assert fake_nvml.setter_calls() == []


def test_memory_clock_lock_and_an_unsupported_one_fails_before_it_is_recorded(make_fake_nvml):
    # Old code noted the unsupported lock in `notes` and went on: the operating point then
    # claimed a memory clock the GPU never ran at.
    fake = make_fake_nvml([{"mem_lock_supported": True}, {"mem_lock_supported": False}])
    ok, unsupported = NvmlGPU(0), NvmlGPU(1)
    ok.set_operating_point(OperatingPoint(mem_clock_mhz=1215))
    assert fake.gpus[0].locked_mem == (1215, 1215)
    ok.restore()
    assert fake.gpus[0].locked_mem is None

    with pytest.raises(NvmlNotSupportedError, match="memory-clock locking is not supported"):
        unsupported.set_operating_point(OperatingPoint(sm_clock_mhz=1410, mem_clock_mhz=1215))
    assert fake.gpus[1].locked_mem is None
    assert unsupported.current_operating_point().mem_clock_mhz is None
    unsupported.restore()  # nothing was changed: nothing to reset
    assert fake.setter_calls()[-1] == "nvmlDeviceSetMemoryLockedClocks"


def test_permission_error_tells_the_user_what_to_do(make_fake_nvml):
    make_fake_nvml([{"can_set": False}])
    gpu = NvmlGPU(0)
    with pytest.raises(DevicePermissionError) as info:
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200))
    message = str(info.value)
    assert "root or CAP_SYS_ADMIN" in message
    assert "--no-control" in message
    assert "gpu0" in message


def test_a_limit_that_silently_did_not_take_is_detected(make_fake_nvml):
    make_fake_nvml([{"limit_sticks": False}])
    gpu = NvmlGPU(0)
    with pytest.raises(DeviceError, match="did not take"):
        gpu.set_operating_point(OperatingPoint(power_limit_w=250))


def test_unsupported_clock_and_out_of_range_limit_are_refused_before_any_change(fake_nvml):
    gpu = NvmlGPU(0)
    with pytest.raises(DeviceError, match="nearest: 1200 MHz"):
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1203))
    with pytest.raises(DeviceError, match="100–400 W"):
        gpu.set_operating_point(OperatingPoint(power_limit_w=450))
    assert fake_nvml.setter_calls() == []


def test_a_clock_lock_that_did_not_take_is_detected(fake_nvml):
    gpu = NvmlGPU(0)
    fake = fake_nvml.gpus[0]
    # The GPU keeps running at its old clock above the requested lock.
    ignore = mock.patch.object(fake_nvml, "nvmlDeviceSetGpuLockedClocks", lambda h, lo, hi: None)
    with ignore, pytest.raises(DeviceError, match="lock did not take"):
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=900))
    assert fake.locked_sm is None


def test_measure_only_never_calls_a_setter(fake_nvml):
    gpu = NvmlGPU(0, control=False)
    with pytest.raises(MeasureOnlyError, match="measure-only"):
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200))
    with pytest.raises(MeasureOnlyError):
        gpu.restore_from_state({"power_limit_w": 300})
    gpu.restore()
    assert gpu.energy_counter_j() is not None
    assert gpu.power().power_w > 0
    assert fake_nvml.setter_calls() == []


def test_measure_only_with_an_autospec_module_calls_no_setter():
    with mock.patch("eopt.devices.nvml.pynvml", autospec=True) as nv:
        nv.nvmlDeviceGetCount.return_value = 1
        nv.nvmlDeviceGetName.return_value = "NVIDIA H200"
        nv.nvmlDeviceGetUUID.return_value = "GPU-x"
        nv.nvmlDeviceGetTotalEnergyConsumption.return_value = 123_456
        gpu = NvmlGPU(0, control=False)
        with pytest.raises(MeasureOnlyError):
            gpu.set_operating_point(OperatingPoint(power_limit_w=300))
        assert gpu.energy_counter_j() == pytest.approx(123.456)
        for setter in (
            nv.nvmlDeviceSetGpuLockedClocks,
            nv.nvmlDeviceSetMemoryLockedClocks,
            nv.nvmlDeviceSetPowerManagementLimit,
            nv.nvmlDeviceResetGpuLockedClocks,
        ):
            setter.assert_not_called()


def test_energy_counter_in_joules_and_none_where_unsupported(make_fake_nvml):
    fake = make_fake_nvml([{}, {"energy_supported": False}])
    with_counter, without = NvmlGPU(0), NvmlGPU(1)
    first = with_counter.energy_counter_j()
    second = with_counter.energy_counter_j()
    assert second - first == pytest.approx(2.5)  # the fake adds 2500 mJ a read
    assert without.energy_counter_j() is None
    calls_before = len(fake.calls)
    assert without.energy_counter_j() is None  # remembered: not asked again
    assert len(fake.calls) == calls_before


def test_power_prefers_instant_then_average_then_usage(make_fake_nvml):
    instant = pynvml.NVML_FI_DEV_POWER_INSTANT
    average = pynvml.NVML_FI_DEV_POWER_AVERAGE
    make_fake_nvml(
        [
            {},
            {"fields": {instant: False, average: True}},
            {"fields": {instant: False, average: False}},
        ]
    )
    readings = [NvmlGPU(i).power() for i in range(3)]
    # The A100 (GA100) reads nvmlDeviceGetPowerUsage as a point value: labelled so.
    assert [r.field for r in readings] == ["instant", "average_1s", "usage_instant"]
    # mW → W, and each field's value really came from that field (the fake tags it).
    assert readings[0].power_w == pytest.approx((61_234 + instant) / 1000)
    assert readings[1].power_w == pytest.approx((61_234 + average) / 1000)
    assert readings[2].power_w == pytest.approx(61.234)
    assert set(NvmlGPU(0).power_fields()) == {"instant", "average_1s", "usage_instant"}
    assert set(NvmlGPU(2).power_fields()) == {"usage_instant"}


def test_capabilities_are_converted_to_watts_and_sorted(fake_nvml):
    gpu = NvmlGPU(0)
    assert gpu.power_limit_range_w() == (100.0, 400.0)
    assert gpu.default_power_limit_w() == 400.0
    clocks = gpu.supported_sm_clocks_mhz()
    assert clocks[0] == 1410 and clocks[-1] == 210 and len(clocks) == 81
    assert gpu.supported_mem_clocks_mhz() == [1215.0]
    assert gpu.model == "NVIDIA A100-SXM4-40GB"


def test_open_devices_uses_nvml_when_present_and_the_simulator_otherwise(make_fake_nvml, capsys):
    make_fake_nvml([{}, {}])
    gpus = open_devices()
    assert [type(g).__name__ for g in gpus] == ["NvmlGPU", "NvmlGPU"]
    assert capsys.readouterr().err == ""

    make_fake_nvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    gpus = open_devices()
    assert [type(g).__name__ for g in gpus] == ["SimulatedGPU"]
    assert "No NVIDIA GPU found: using the simulated A100-SXM4-40GB (eopt sim)." in (
        capsys.readouterr().err
    )
    with pytest.raises(DeviceError, match="driver is not loaded"):
        open_devices("nvml")


def test_bad_index_names_the_valid_range(fake_nvml):
    with pytest.raises(DeviceError, match="NVML sees 1"):
        NvmlGPU(3)


def test_restore_touches_only_what_eopt_changed(fake_nvml):
    fake = fake_nvml.gpus[0]
    fake.locked_sm = (900, 900)  # the administrator's own clock lock
    gpu = NvmlGPU(0)
    gpu.set_operating_point(OperatingPoint(power_limit_w=250))
    gpu.restore()
    assert fake.locked_sm == (900, 900)
    assert fake.limit_mw == 400_000
    assert "nvmlDeviceResetGpuLockedClocks" not in fake_nvml.setter_calls()
