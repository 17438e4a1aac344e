"""NvmlGPU, resolve_gpu and the meter against what NVML really does.

Each test names the defect it pins down; on the code before the fix it failed (or could
not run: the API did not exist). The fake (tests/devices/conftest.py) behaves like NVML:
counters on a clock with a refresh period, fields that fail, per-memory-clock tables,
permissions, MIG, persistence, enforced limits and clocks-event reasons.
"""

from __future__ import annotations

import pynvml
import pytest

from eopt.devices import OperatingPoint, open_devices
from eopt.devices.base import DeviceError, DevicePermissionError, SensorReadError
from eopt.devices.gpu_select import GpuInfo, GpuSelectError, resolve_gpu, resolve_gpu_in
from eopt.devices.guard import restoring_on_exit
from eopt.devices.nvml import (
    AdminClockSettingError,
    MigModeError,
    NvmlGPU,
    NvmlNotSupportedError,
    persistence_explanation,
)
from eopt.measure.meter import Meter, MeterError

UNKNOWN = pynvml.NVML_ERROR_UNKNOWN
H200 = {
    "name": "NVIDIA H200",
    "architecture": pynvml.NVML_DEVICE_ARCH_HOPPER,
    "compute_capability": (9, 0),
    "mem_clocks": (3201,),
    "sm_clocks": tuple(range(1980, 344, -15)),
    "current_sm_mhz": 1980,
    "limit_min_mw": 200_000,
    "limit_max_mw": 700_000,
    "default_limit_mw": 700_000,
    "limit_mw": 700_000,
}


def timed(make_fake_nvml, **gpu):
    """One fake GPU on a FakeTime (counter and sensors move with it), opened by eopt."""
    fake = make_fake_nvml([{"energy": None, "power_mw": 60_000, **gpu}], time=True)
    return fake.gpus[0], NvmlGPU(0, clock=fake.time), fake.time


# --- the fake itself -----------------------------------------------------------------------
def test_every_function_of_the_fake_exists_in_the_real_pynvml_with_its_signature(nvml_fakes):
    FakeGpu, FakePynvml = nvml_fakes.FakeGpu, nvml_fakes.FakePynvml
    names = [n for n in dir(FakePynvml) if n.startswith("nvml")]
    assert len(names) >= 30
    for name in names:
        assert hasattr(pynvml, name), name  # calls are bound against it in FakePynvml._log
    fake = FakePynvml([FakeGpu()])
    with pytest.raises(TypeError):  # a wrong arity fails as it would on a real GPU
        fake.nvmlDeviceGetClockInfo(fake.gpus[0])  # type: ignore[call-arg]


def test_the_fakes_counter_moves_with_time_in_refresh_steps_and_locks_round_down(nvml_fakes):
    FakeGpu, FakePynvml = nvml_fakes.FakeGpu, nvml_fakes.FakePynvml
    clock = nvml_fakes.FakeTime()
    gpu = FakeGpu(energy=None, power_mw=100_000, energy_period_s=0.05)
    fake = FakePynvml([gpu], time=clock)
    first = fake.nvmlDeviceGetTotalEnergyConsumption(gpu)
    clock.advance(0.049)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(gpu) == first  # no refresh yet
    clock.advance(0.002)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(gpu) == first + 5_000  # 100 W × 50 ms
    gpu.locked_sm = (1000, 1000)  # between the 1005 and 990 MHz entries
    assert fake.nvmlDeviceGetClockInfo(gpu, pynvml.NVML_CLOCK_SM) == 990


# --- the wrong physical GPU ---------------------------------------------------------------
NODE = [
    GpuInfo(0, "GPU-aaaa-0000", "00000000:41:00.0", "NVIDIA H200"),
    GpuInfo(1, "GPU-bbbb-1111", "00000000:07:00.0", "NVIDIA H200"),
    GpuInfo(2, "GPU-cccc-2222", "00000000:81:00.0", "NVIDIA H200"),
    GpuInfo(3, "GPU-dddd-3333", "00000000:3B:00.0", "NVIDIA H200"),
]


def test_cuda_ordinals_follow_cuda_visible_devices_and_pci_order():
    # Old code used the number as NVML index 0: another job's GPU under a mask.
    pci = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert [resolve_gpu_in(k, NODE, pci) for k in range(4)] == [1, 3, 0, 2]
    masked = {**pci, "CUDA_VISIBLE_DEVICES": "2,3"}
    assert resolve_gpu_in(0, NODE, masked) == 0  # CUDA's third GPU by bus: 41:00.0
    assert resolve_gpu_in("cuda:1", NODE, masked) == 2
    # One model everywhere: FASTEST_FIRST is taken as PCI order (said in the docstring).
    assert resolve_gpu_in("cuda:1", NODE, {"CUDA_VISIBLE_DEVICES": "2,3"}) == 2
    with pytest.raises(GpuSelectError, match=r"sees 2 \(cuda:0–cuda:1\)"):
        resolve_gpu_in(2, NODE, masked)


def test_uuids_pci_ids_and_mig_names_resolve_to_nvml_indices():
    env = {"CUDA_VISIBLE_DEVICES": "GPU-dddd,MIG-GPU-aaaa-0000/1/0"}
    assert resolve_gpu_in(0, NODE, env) == 3  # a unique UUID prefix, as CUDA accepts
    assert resolve_gpu_in(1, NODE, env) == 0  # the legacy MIG form names its parent
    assert resolve_gpu_in("0000:3b:00.0", NODE, env) == 3
    assert resolve_gpu_in("GPU-aaaa-0000", NODE, env) == 0
    # Named GPUs the mask withholds belong to someone else: refused, naming the mask.
    for withheld in ("GPU-cccc-2222", "07:00.0", "nvml:2"):
        with pytest.raises(GpuSelectError, match=r"not given: CUDA_VISIBLE_DEVICES="):
            resolve_gpu_in(withheld, NODE, env)
    with pytest.raises(GpuSelectError, match="gives it nvml:3, nvml:0"):
        resolve_gpu_in("MIG-9f", NODE, env, mig_parent=lambda u: 2)
    # Without a mask every GPU NVML lists is this process's.
    assert resolve_gpu_in("GPU-cccc-2222", NODE, {}) == 2
    assert resolve_gpu_in("07:00.0", NODE, {}) == 1
    assert resolve_gpu_in("nvml:2", NODE, {}) == 2
    assert resolve_gpu_in("MIG-9f", NODE, {}, mig_parent=lambda u: 2) == 2
    with pytest.raises(GpuSelectError, match="no GPU has that UUID"):
        resolve_gpu_in("GPU-", NODE, env)  # the prefix of all four
    with pytest.raises(GpuSelectError, match="PCI bus id"):
        resolve_gpu_in("0000:99:00.0", NODE, env)


def test_invalid_entries_end_the_mask_and_an_empty_mask_hides_every_gpu():
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,7,2"}
    assert resolve_gpu_in(0, NODE, env) == 3
    with pytest.raises(GpuSelectError, match="ignores '7,2'"):
        resolve_gpu_in(1, NODE, env)
    with pytest.raises(GpuSelectError, match="sees no GPU"):
        resolve_gpu_in(0, NODE, {"CUDA_VISIBLE_DEVICES": ""})
    with pytest.raises(GpuSelectError, match="gives it no GPU"):
        resolve_gpu_in("GPU-aaaa-0000", NODE, {"CUDA_VISIBLE_DEVICES": ""})


def test_mixed_models_under_fastest_first_refuse_integers_but_not_uuids():
    mixed = [*NODE[:3], GpuInfo(3, "GPU-dddd-3333", "00000000:3B:00.0", "NVIDIA A100")]
    with pytest.raises(GpuSelectError, match="CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        resolve_gpu_in(0, mixed, {})
    with pytest.raises(GpuSelectError, match="mixes GPU models"):
        resolve_gpu_in(0, mixed, {"CUDA_VISIBLE_DEVICES": "1"})
    assert resolve_gpu_in(0, mixed, {"CUDA_VISIBLE_DEVICES": "GPU-dddd-3333"}) == 3
    assert resolve_gpu_in(0, mixed, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == 1


def test_resolve_gpu_asks_nvml_and_reads_the_environment(make_fake_nvml, monkeypatch):
    make_fake_nvml(
        [
            {"pci_bus_id": "00000000:81:00.0"},
            {"pci_bus_id": "00000000:07:00.0", "mig_devices": ("MIG-77",)},
        ]
    )
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert resolve_gpu(0) == 0  # CUDA's second GPU by bus is NVML's first
    assert resolve_gpu("GPU-0-fake") == 0
    for withheld in ("MIG-77", "GPU-1-fake"):  # on NVML's GPU 1, outside the mask
        with pytest.raises(GpuSelectError, match="CUDA_VISIBLE_DEVICES='1' gives it nvml:0"):
            resolve_gpu(withheld)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert resolve_gpu("MIG-77") == 1
    assert resolve_gpu("GPU-1-fake") == 1


# --- administrators' settings, MIG, persistence -------------------------------------------
def test_locking_over_an_administrators_lock_is_refused_and_it_survives(fake_nvml):
    # Old code locked anyway, and its restore reset the administrator's lock to default.
    fake = fake_nvml.gpus[0]
    fake.locked_sm = (900, 900)  # nvidia-smi -lgc 900: the load wants 1410 MHz
    gpu = NvmlGPU(0)
    with pytest.raises(AdminClockSettingError, match="nvidia-smi -rgc"):
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200))
    assert fake_nvml.setter_calls() == [] and fake.locked_sm == (900, 900)
    found = gpu.preexisting_clock_settings()
    assert found.lock_suspected and "applications_clocks_setting" in found.reasons
    gpu.set_operating_point(OperatingPoint(power_limit_w=300))  # no lock: no conflict
    gpu.restore()
    assert fake.locked_sm == (900, 900)

    forced = NvmlGPU(0, override_admin_locks=True)
    forced.set_operating_point(OperatingPoint(sm_clock_mhz=1200))
    assert any("override_admin_locks" in note for note in forced.notes)


def test_application_clocks_explain_the_reason_without_a_suspected_lock(make_fake_nvml):
    # A V100-like board: default applications clocks below the top hold the clocks too.
    make_fake_nvml(
        [
            {"default_app_clocks": (1305, 1215), "event_reasons": 0x2},
            {"app_clocks": (1200, 1215)},
        ]
    )
    v100, ac_set = NvmlGPU(0), NvmlGPU(1)
    assert not v100.preexisting_clock_settings().lock_suspected
    v100.set_operating_point(OperatingPoint(sm_clock_mhz=1200))
    found = ac_set.preexisting_clock_settings()
    assert not found.lock_suspected and found.applications_clocks_mhz == (1200.0, 1215.0)
    assert "nvidia-smi -ac" in found.findings[0]


def test_clocks_event_reasons_fall_back_to_the_throttle_function_of_old_drivers(make_fake_nvml):
    make_fake_nvml(
        [
            {
                "event_reasons": 0x4 | 0x1,
                "errors": {
                    "nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
                },
            }
        ]
    )
    assert NvmlGPU(0).clocks_event_reasons() == {"sw_power_cap", "gpu_idle"}


def test_a_gpu_in_mig_mode_is_refused_for_control_and_measured_whole(make_fake_nvml):
    make_fake_nvml(
        [
            {"mig_mode": (1, 1)},
            {"mig_mode": None},  # no MIG on this GPU: NOT_SUPPORTED
            {"errors": {"nvmlDeviceGetMigMode": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}},
        ]
    )
    with pytest.raises(MigModeError, match="whole physical GPU"):
        NvmlGPU(0)
    with pytest.raises(MigModeError):
        open_devices("nvml", [0])
    watched = NvmlGPU(0, control=False)
    assert watched.mig_enabled() is True and watched.energy_counter_j() is not None
    assert NvmlGPU(1).mig_enabled() is False  # pre-Ampere GPUs have no MIG
    assert NvmlGPU(2).mig_enabled() is False  # nor do drivers too old to ask


def test_persistence_mode_and_what_it_means(make_fake_nvml):
    make_fake_nvml(
        [
            {"persistence": pynvml.NVML_FEATURE_ENABLED},
            {"persistence": pynvml.NVML_FEATURE_DISABLED},
            {"errors": {"nvmlDeviceGetPersistenceMode": pynvml.NVML_ERROR_NOT_SUPPORTED}},
        ]
    )
    on, off, unknown = NvmlGPU(0), NvmlGPU(1), NvmlGPU(2)
    assert (on.persistence_mode(), off.persistence_mode(), unknown.persistence_mode()) == (
        True,
        False,
        None,
    )
    assert "nvidia-smi -pm 1" in off.persistence_note() and off.persistence_note().startswith(
        "gpu1"
    )
    for mode in (True, False, None):
        assert "\n" not in persistence_explanation(mode)


# --- settings that never took effect -----------------------------------------------------
def test_sm_clocks_are_checked_against_the_table_of_their_memory_clock(make_fake_nvml):
    # Old code checked every SM clock against the top memory clock's table.
    low = (1000, 900, 800)
    fake = make_fake_nvml(
        [
            {
                "mem_clocks": (1593, 810),
                "sm_clocks_by_mem": {1593: tuple(range(1410, 209, -15)), 810: low},
            }
        ]
    )
    gpu = NvmlGPU(0)
    with pytest.raises(DeviceError, match="1200 MHz at memory clock 810 MHz"):
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200, mem_clock_mhz=810))
    assert fake.setter_calls() == []
    assert gpu.supported_sm_clocks_mhz(810) == [1000.0, 900.0, 800.0]
    assert gpu.supported_clocks_mhz()[1593.0][0] == 1410.0
    gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1000, mem_clock_mhz=810))
    assert fake.gpus[0].locked_sm == (1000, 1000) and fake.gpus[0].locked_mem == (810, 810)
    gpu.set_operating_point(OperatingPoint(sm_clock_mhz=900))  # memory stays locked at 810
    with pytest.raises(DeviceError, match="nearest: 1000 MHz"):
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1410))


def test_a_limit_the_gpu_does_not_enforce_is_an_error_and_restore_still_works(make_fake_nvml):
    # Old code read back the requested limit only: 300 W "applied" while 250 W ruled.
    fake = make_fake_nvml([{"enforced_cap_mw": 250_000}])
    gpu = NvmlGPU(0)
    with pytest.raises(DeviceError, match="enforces 250 W"):
        gpu.set_operating_point(OperatingPoint(power_limit_w=300))
    assert gpu.enforced_power_limit_w() == 250.0
    gpu.restore()  # back to the requested original; the cap is not eopt's
    assert fake.gpus[0].limit_mw == 400_000


def test_slow_locks_are_waited_for_on_the_devices_clock_and_a_lock_that_never_lands_fails(
    make_fake_nvml,
):
    # Old code slept on the wall clock for 80 ms: a lock that shows after 100 ms failed.
    g, gpu, clock = timed(make_fake_nvml, setter_delay_s=0.05, lock_settle_s=0.1)
    gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200))
    assert clock.now() >= 0.15 and g.locked_sm == (1200, 1200)
    gpu.restore()
    g.lock_settle_s = 5.0
    with pytest.raises(DeviceError, match=r"did not take") as info:
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1005))
    assert "clocks-event reasons" in str(info.value)
    gpu.restore()
    assert g.locked_sm is None


# --- crashes and misleading messages ------------------------------------------------------
def test_a_refused_change_is_not_restored_so_its_own_error_reaches_the_user(make_fake_nvml):
    # Old code marked the lock as changed before calling NVML; the guard's restore then
    # failed too, and "could not restore GPU settings" replaced the permission error.
    fake = make_fake_nvml([{"can_set": False}])
    gpu = NvmlGPU(0)
    refused = pytest.raises(DevicePermissionError, match="needs root or CAP_SYS_ADMIN")
    with refused, restoring_on_exit([gpu]):
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200))
    assert fake.setter_calls() == ["nvmlDeviceSetGpuLockedClocks"]


def test_a_refused_read_says_even_measure_only_use_needs_it(make_fake_nvml):
    code = pynvml.NVML_ERROR_NO_PERMISSION
    make_fake_nvml([{"errors": {"nvmlDeviceGetTotalEnergyConsumption": code}}])
    gpu = NvmlGPU(0, control=False)
    with pytest.raises(DevicePermissionError) as info:
        gpu.energy_counter_j()
    message = str(info.value)
    assert "measure-only use needs this read" in message and "Containers" in message
    assert "sudo" not in message and "--no-control" not in message  # not the setter's advice


def test_reset_on_a_driver_without_the_lock_functions_succeeds(make_fake_nvml):
    # Old code took FUNCTION_NOT_FOUND for a failure: `eopt reset` failed forever.
    missing = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    fake = make_fake_nvml(
        [
            {
                "limit_mw": 250_000,
                "errors": {
                    "nvmlDeviceResetGpuLockedClocks": missing,
                    "nvmlDeviceResetMemoryLockedClocks": missing,
                },
            }
        ]
    )
    done = NvmlGPU(0).restore_from_state({"power_limit_w": 300.0})
    assert done == ["gpu0: power limit back to 300 W"]
    assert fake.gpus[0].limit_mw == 300_000


def test_when_nvml_cannot_start_auto_mode_says_why(make_fake_nvml, capsys):
    # Old code said "No NVIDIA GPU found" after a driver upgrade broke NVML.
    make_fake_nvml([{}], init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    gpus = open_devices()
    assert type(gpus[0]).__name__ == "SimulatedGPU"
    err = capsys.readouterr().err
    assert "NVML did not start" in err and "different versions" in err and "reboot" in err
    assert "No NVIDIA GPU found" not in err
    with pytest.raises(DeviceError, match="different versions"):
        open_devices("nvml")


def test_a_gpu_without_power_management_is_guarded_and_measured(make_fake_nvml):
    # Old code crashed in snapshot_state, so every sweep failed on such GPUs.
    fake = make_fake_nvml([{"power_management": False}])
    gpu = NvmlGPU(0)
    assert gpu.snapshot_state()["power_limit_w"] is None
    assert gpu.current_operating_point() == OperatingPoint(None, None, None)
    with restoring_on_exit([gpu]):
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200))
    assert fake.gpus[0].locked_sm is None
    with pytest.raises(NvmlNotSupportedError, match="no power management"):
        gpu.set_operating_point(OperatingPoint(power_limit_w=300))
    assert gpu.power().field == "instant"  # the fields still answer


# --- power fields -------------------------------------------------------------------------
def test_usage_is_labelled_by_what_it_is_on_the_architecture(make_fake_nvml):
    no_fields = {"fields": {}}
    make_fake_nvml(
        [
            {**no_fields, **H200},
            {**no_fields},  # A100: GA100 reads a point value
            {**no_fields, "compute_capability": (8, 6)},  # GA102: a 1 s average
            {**no_fields, "compute_capability": (7, 0), "architecture": 5},  # V100
            {
                **no_fields,
                "errors": {"nvmlDeviceGetCudaComputeCapability": UNKNOWN},
            },  # Ampere, but which chip: unknown
        ]
    )
    labels = [NvmlGPU(i).power().field for i in range(5)]
    assert labels == [
        "usage_average_1s",
        "usage_instant",
        "usage_average_1s",
        "usage_instant",
        "usage",
    ]


def test_a_failed_field_read_is_retried_and_the_source_never_changes(make_fake_nvml):
    # Old code switched to nvmlDeviceGetPowerUsage for good after one failed instant read.
    fake = make_fake_nvml([{}])
    g = fake.gpus[0]
    gpu = NvmlGPU(0)
    assert gpu.power().field == "instant"
    g.errors["field:186"] = [UNKNOWN, UNKNOWN]  # two failures, the third attempt answers
    assert gpu.power().field == "instant"
    g.errors["field:186"] = UNKNOWN  # failing for now
    with pytest.raises(SensorReadError, match="3 times in a row"):
        gpu.power()
    del g.errors["field:186"]
    assert gpu.power().field == "instant" and gpu.power_source == "instant"
    assert fake.called("nvmlDeviceGetPowerUsage") == 0


def test_an_h200_power_usage_is_read_as_a_centred_one_second_average(make_fake_nvml):
    # Old code took it for a point reading: every edge was smeared half a second late.
    g, gpu, clock = timed(make_fake_nvml, fields={}, **H200)
    with Meter(gpu, method="sampler") as meter:
        clock.advance(2.0)
        t0, e0 = meter.mark(), g.true_energy_j()
        g.power_mw = 500_000
        clock.advance(12.0)
        g.power_mw = 60_000
        t1, e1 = meter.mark(), g.true_energy_j()
        clock.advance(3.0)
        got = meter.energy(t0, t1)
    assert got.field == "usage_average_1s" and meter.averaging_s == 1.0
    assert got.energy_j == pytest.approx(e1 - e0, rel=0.02)
    assert abs(got.energy_j - (e1 - e0)) <= got.error_j


# --- the meter on a counter with a period, and on failing reads ----------------------------
def test_counter_windows_carry_the_counters_refresh_error_and_short_flag(make_fake_nvml):
    # Old code called a window between two marks exact (error 0) and judged "short" by the
    # power sensor's period, not the counter's.
    g, gpu, clock = timed(make_fake_nvml, energy_period_s=0.2)
    gpu.energy_counter_period_s = 0.2  # as measured (see sensor_period)
    with Meter(gpu) as meter:
        assert meter.method == "counter"
        clock.advance(0.537)
        t0, e0 = meter.mark(), g.true_energy_j()
        g.power_mw = 300_000
        clock.advance(1.53)
        g.power_mw = 60_000
        t1, e1 = meter.mark(), g.true_energy_j()
        got = meter.energy(t0, t1)
        assert got.short  # 1.53 s < ten 0.2 s steps
        assert abs(got.energy_j - (e1 - e0)) > 5.0  # the lag is real
        assert abs(got.energy_j - (e1 - e0)) <= got.error_j
        assert got.error_j < 0.3 * got.energy_j  # and the bound says something

        clock.advance(0.05)  # t = 2.117 s: the next counter step is at 2.2 s
        t0, e0 = meter.mark(), g.true_energy_j()
        g.power_mw = 300_000
        clock.advance(0.03)  # inside one counter step: the counter does not move
        g.power_mw = 60_000
        t1, e1 = meter.mark(), g.true_energy_j()
        tiny = meter.energy(t0, t1)
        assert tiny.energy_j == 0.0 and tiny.short
        assert e1 - e0 <= tiny.error_j
    assert meter.describe()["counter_period_s"] == 0.2


def test_a_failing_power_field_leaves_a_gap_and_the_trace_keeps_its_field(make_fake_nvml):
    # Old code switched the trace to another field after one failed read.
    g, gpu, clock = timed(make_fake_nvml, power_mw=200_000)
    with Meter(gpu, method="sampler") as meter:
        clock.advance(0.5)
        t0, e0 = meter.mark(), g.true_energy_j()
        clock.advance(0.203)
        g.errors["field:186"] = [UNKNOWN] * 3 * 20  # twenty polls fail, 3 attempts each
        clock.advance(1.0)
        t1, e1 = meter.mark(), g.true_energy_j()
        got = meter.energy(t0, t1)
        assert meter.describe()["fields_read"].keys() == {"instant"}
        assert meter.failure is None and len(meter.gaps) == 1
        assert 0.15 < got.gap_s < 0.3
        assert abs(got.energy_j - (e1 - e0)) <= got.error_j

        g.errors["field:186"] = UNKNOWN  # the sensor stops answering for good
        clock.advance(1.5)
        with pytest.raises(MeterError, match="stopped answering"):
            meter.check()


def test_a_failed_counter_read_at_a_mark_is_interpolated_not_fatal(make_fake_nvml):
    g, gpu, clock = timed(make_fake_nvml)
    with Meter(gpu, method="counter") as meter:
        clock.advance(0.5)
        t0 = meter.mark()
        clock.advance(1.005)  # between the timer's polls (every 20 ms), so the mark's
        g.errors["nvmlDeviceGetTotalEnergyConsumption"] = [UNKNOWN] * 3  # 3 tries all fail
        t1 = meter.mark()  # the read fails: the edge is interpolated later
        clock.advance(0.3)
        got = meter.energy(t0, t1)
    assert got.energy_j == pytest.approx(60.0 * (t1 - t0), rel=0.05)
    assert got.error_j > 0 and meter.gaps


def test_gh200_counts_the_module_so_auto_samples_the_gpus_power(make_fake_nvml):
    # Old code used the module counter and plotted GPU-only power beside it.
    _, gpu, clock = timed(
        make_fake_nvml,
        **{**H200, "name": "NVIDIA GH200 480GB"},
        counter_scope="module",
        module_extra_mw=100_000,
    )
    auto = Meter(gpu).start()
    assert auto.method == "sampler"
    assert gpu.energy_counter_scope == "module"
    counter = Meter(gpu, method="counter").start()
    clock.advance(0.4)
    t0 = counter.mark()
    clock.advance(3.0)
    t1 = counter.mark()
    clock.advance(0.4)
    gpu_only, module = auto.energy(t0, t1), counter.energy(t0, t1)
    auto.stop()
    counter.stop()
    assert auto.method == "sampler" and auto.energy_scope == "gpu"
    assert gpu_only.energy_j == pytest.approx(60.0 * 3.0, rel=0.05)
    assert module.energy_j == pytest.approx(160.0 * 3.0, rel=0.05)
    described = counter.describe()
    assert described["energy_scope"] == "module" and described["trace_field"] is None


def test_reads_that_fail_do_not_stop_the_meter_of_a_device_without_nvml(nvml_fakes):
    """The meter's gap handling is the device contract's, not NVML's: any device that
    raises SensorReadError gets it."""

    class Flaky:
        index, name, model = 0, "flaky0", "Flaky"
        power_update_period_s = 0.1

        def __init__(self) -> None:
            self.clock = nvml_fakes.FakeTime()
            self.fail = 0

        def energy_counter_j(self) -> None:
            return None

        def power(self):
            from eopt.devices.base import PowerReading

            if self.fail:
                self.fail -= 1
                raise SensorReadError("busy")
            return PowerReading(self.clock.now(), 100.0, "instant")

        def power_limit_range_w(self) -> tuple[float, float]:
            return (50.0, 400.0)

    dev = Flaky()
    with Meter(dev) as meter:
        dev.clock.advance(0.3)
        t0 = meter.mark()
        dev.fail = 5
        dev.clock.advance(1.0)
        t1 = meter.mark()
        dev.clock.advance(0.3)
        got = meter.energy(t0, t1)
    assert got.energy_j == pytest.approx(100.0, rel=1e-6) and got.gap_s > 0
    assert meter.failure is None and len(meter.gaps) == 1
