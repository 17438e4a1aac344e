"""The runtime controller against NVML as it behaves on real GPUs, and real GPU identities:
signals during switches, preemption handlers, ``None`` fields, GPU resolution per rank."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from eopt.apply import ApplyError, RuntimeController
from eopt.devices.guard import state_dir
from eopt.devices.nvml import NvmlGPU
from eopt.model.operating_point import OperatingPoint

pytestmark = pytest.mark.filterwarnings("ignore::eopt.apply.drift.PlanDriftWarning")


def _wait_until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.002)


def _state_files() -> list:
    return sorted(state_dir().glob("gpu-state-*.json"))


def _schedule(build, devices=("stage0",)):
    e = build.element
    elements = []
    for d in devices:
        elements += [
            e(f"A[{d}]", d, 0.00, 0.01, sm=1410),
            e(f"C[{d}]", d, 0.01, 0.01, sm=1200, limit=250),
            e(f"E[{d}]", d, 0.02, 0.01, sm=1410),
        ]
    return build.schedule(elements, list(devices))


def _original(fake, i: int = 0) -> bool:
    gpu = fake.gpus[i]
    return gpu.locked_sm is None and gpu.locked_mem is None and gpu.limit_mw == 400_000


@pytest.mark.parametrize("previous", ["default", "raising"])
def test_a_signal_during_a_switch_leaves_the_gpu_restored(build, make_fake_nvml, previous):
    """Old code: the handler restored while the worker's lock call was in flight; the
    lock and the limit landed after it, the final restore did nothing, and the state file
    was gone — GPU left at 1200 MHz / 250 W that `eopt reset` could not undo."""
    fake = make_fake_nvml([{"setter_delay_s": 0.2}])
    ctl = RuntimeController(_schedule(build), {"stage0": NvmlGPU(0)})

    class StopError(Exception):
        pass

    def raising(signum, frame):
        raise StopError

    old = signal.signal(signal.SIGTERM, raising if previous == "raising" else signal.SIG_DFL)
    try:
        with pytest.raises(StopError if previous == "raising" else SystemExit), ctl:
            ctl.enter("C[stage0]")
            _wait_until(lambda: fake.setter_calls())  # the SM lock is in flight
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted by the handler long before this ends
    finally:
        signal.signal(signal.SIGTERM, old)
    assert _original(fake), (fake.gpus[0].locked_sm, fake.gpus[0].limit_mw)
    assert _state_files() == []
    assert not any(t.name.startswith("eopt-switch-") for t in threading.enumerate())


def test_a_flag_setting_preemption_handler_never_relocks_without_a_state_file(
    build, make_fake_nvml
):
    """Slurm/Kubernetes: the program's SIGTERM handler sets a flag, the loop finishes its
    step. Old code: the guard restored and deleted its state file while the controller
    kept switching, so the next element re-locked the GPU with nothing to restore it."""
    fake = make_fake_nvml([{}])
    stop: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    try:
        with RuntimeController(_schedule(build), {"stage0": NvmlGPU(0)}) as ctl:
            ctl.enter("C[stage0]")
            assert ctl.wait_idle(5.0)
            assert fake.gpus[0].locked_sm == (1200, 1200) and len(_state_files()) == 1
            os.kill(os.getpid(), signal.SIGTERM)
            _wait_until(lambda: bool(stop))
            _wait_until(lambda: _state_files() == [])  # restored by the watchdog
            # The loop finishes its step: every later element runs at the original state.
            for name in ("E[stage0]", "A[stage0]", "C[stage0]"):
                ctl.enter(name)
                ctl.wait_idle(5.0)
                # The invariant: a GPU away from its original state has a state file.
                assert _original(fake) or _state_files(), name
            assert _original(fake)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert _original(fake) and _state_files() == []


def test_a_none_field_puts_the_setting_back_to_the_driver_default(build, fake_gpu):
    """`None` means the driver's default; old code kept the previous element's lock."""
    e = build.element
    sch = build.schedule(
        [
            e("A", "stage0", 0.00, 0.01, sm=1200),
            e("B", "stage0", 0.01, 0.01, limit=250),  # SM clock: driver default
            e("C", "stage0", 0.02, 0.01),  # everything: default
            e("D", "stage0", 0.03, 0.01, sm=1005),
        ],
        ["stage0"],
    )
    gpu = fake_gpu(0)
    with RuntimeController(sch, {"stage0": gpu}) as ctl:
        ctl.enter("A")
        assert ctl.wait_idle(5.0)
        assert gpu.state.sm_clock_mhz == 1200
        ctl.enter("B")
        assert ctl.wait_idle(5.0)
        assert gpu.state == OperatingPoint(None, None, 250.0)  # unlocked, limit set
        ctl.enter("C")
        assert ctl.wait_idle(5.0)
        assert gpu.state == gpu.original
        ctl.enter("D")
        assert ctl.wait_idle(5.0)
        assert gpu.state.sm_clock_mhz == 1005
    assert gpu.state == gpu.original


def test_a_none_field_resets_through_nvml(build, make_fake_nvml):
    fake = make_fake_nvml([{}])
    e = build.element
    sch = build.schedule(
        [e("A", "stage0", 0.0, 0.01, sm=1200), e("B", "stage0", 0.01, 0.01, limit=250)],
        ["stage0"],
    )
    with RuntimeController(sch, {"stage0": NvmlGPU(0)}) as ctl:
        for name in ("A", "B"):
            ctl.enter(name)
            assert ctl.wait_idle(5.0)
        assert fake.gpus[0].locked_sm is None and fake.gpus[0].limit_mw == 250_000
        assert len(_state_files()) == 1  # still describes the original state
    assert _original(fake) and _state_files() == []


# GPU identities --------------------------------------------------------------------------
def test_from_schedule_on_rank_one_maps_only_its_own_device(build, make_fake_nvml, monkeypatch):
    """Rank 1 sees one GPU (CUDA_VISIBLE_DEVICES=1): torch.cuda.current_device() is 0 there.
    Old code: took 0 as NVML's GPU 0 (rank 0's) and refused anyway, because stage0's
    default also mapped to GPU 0 — "both map to GPU 0", with a CLI flag as the fix."""
    fake = make_fake_nvml([{}, {}])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    sch = _schedule(build, ("stage0", "stage1"))
    ctl = RuntimeController.from_schedule(
        sch, only=["stage1"], gpu_map={"stage1": 0}, backend="nvml"
    )
    assert ctl.devices["stage1"].index == 1  # the physical GPU this rank uses
    with ctl:
        ctl.enter("C[stage1]")
        assert ctl.wait_idle(5.0)
        assert fake.gpus[1].locked_sm == (1200, 1200)
        assert fake.gpus[0].locked_sm is None  # rank 0's GPU untouched
    assert _original(fake, 1)


@pytest.mark.parametrize("spec", ["GPU-1-fake", "00000000:08:00.0", "nvml:1", "cuda:1"])
def test_gpu_map_accepts_uuids_pci_ids_and_ordinals(build, make_fake_nvml, spec):
    make_fake_nvml([{}, {}])
    sch = _schedule(build, ("stage0", "stage1"))
    ctl = RuntimeController.from_schedule(
        sch, only=["stage0"], gpu_map={"stage0": spec}, backend="nvml"
    )
    assert ctl.devices["stage0"].index == 1


def test_two_controlled_devices_on_one_gpu_name_the_python_fix(build, make_fake_nvml):
    make_fake_nvml([{}, {}])
    sch = _schedule(build, ("stage0", "stage1"))
    with pytest.raises(ApplyError, match=r"both map to GPU 1; pass gpu_map=") as info:
        RuntimeController.from_schedule(sch, gpu_map={"stage0": 1}, backend="nvml")
    assert "--gpu" not in str(info.value)


def test_from_schedule_takes_the_simulated_model(build):
    ctl = RuntimeController.from_schedule(
        _schedule(build), backend="sim", sim_model="H100-SXM5-80GB", check=False
    )
    assert "H100" in ctl.devices["stage0"].model


def test_auto_says_loudly_that_it_controls_no_real_gpu(build, capsys):
    # No NVIDIA driver here: auto falls back to the simulator, which must not pass quietly.
    with pytest.warns(RuntimeWarning, match="SIMULATED"):
        RuntimeController.from_schedule(_schedule(build), backend="auto", check=False)
    assert "backend='nvml'" in capsys.readouterr().err


def test_unknown_element_hint_names_this_ranks_elements_and_the_near_miss(build, fake_gpu):
    sch = _schedule(build, ("stage0", "stage1"))
    ctl = RuntimeController(sch, {"stage1": fake_gpu(1)}, warn_drift=False)
    with ctl, pytest.raises(KeyError) as info:
        ctl.enter("C[stage1")
    message = str(info.value)
    assert "did you mean C[stage1]" in message
    assert "A[stage1]" in message and "A[stage0]" not in message


def test_contains_and_order(build, fake_gpu):
    sch = _schedule(build, ("stage0", "stage1"))
    ctl = RuntimeController(sch, {"stage1": fake_gpu(1)}, warn_drift=False)
    assert "E[stage0]" in ctl and "AR[s1]" not in ctl
    assert ctl.order("stage1") == ["A[stage1]", "C[stage1]", "E[stage1]"]
    with pytest.raises(ApplyError, match="not controlled"):
        ctl.order("stage0")
