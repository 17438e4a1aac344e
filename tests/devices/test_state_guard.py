"""restoring_on_exit and `eopt reset`: every exit path puts the GPUs back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.devices import OperatingPoint
from eopt.devices.base import DeviceError
from eopt.devices.guard import (
    STATE_SCHEMA,
    find_state_files,
    restoring_on_exit,
    state_dir,
    warn_if_stale,
)
from eopt.devices.nvml import NvmlGPU
from eopt.devices.sim import SimulatedGPU

CHANGE = OperatingPoint(sm_clock_mhz=1005, power_limit_w=210)


class _ChainedError(Exception):
    """Raised by the test's own (previous) signal handler."""


def _assert_original(fake) -> None:
    gpu = fake.gpus[0]
    assert gpu.locked_sm is None
    assert gpu.locked_mem is None
    assert gpu.limit_mw == 350_000


@pytest.fixture
def gpu(fake_nvml):
    fake_nvml.gpus[0].limit_mw = 350_000  # original limit: not the 400 W maximum
    return NvmlGPU(0)


def _state_files() -> list[Path]:
    return sorted(state_dir().glob("gpu-state-*.json"))


def test_normal_exit_restores_and_removes_the_state_file(gpu, fake_nvml):
    with restoring_on_exit([gpu]):
        files = _state_files()
        assert len(files) == 1
        saved = json.loads(files[0].read_text())
        assert saved["schema"] == STATE_SCHEMA
        assert saved["devices"][0]["power_limit_w"] == 350.0
        assert saved["devices"][0]["uuid"] == "GPU-0000-fake"
        gpu.set_operating_point(CHANGE)
        assert fake_nvml.gpus[0].limit_mw == 210_000
        assert fake_nvml.gpus[0].locked_sm == (1005, 1005)
    _assert_original(fake_nvml)
    assert _state_files() == []


def test_an_exception_in_the_block_restores_and_propagates(gpu, fake_nvml):
    with pytest.raises(ZeroDivisionError), restoring_on_exit([gpu]):
        gpu.set_operating_point(CHANGE)
        _ = 1 / 0
    _assert_original(fake_nvml)
    assert _state_files() == []


def test_sigterm_restores_then_chains_to_the_previous_handler(gpu, fake_nvml):
    seen_inside_previous = {}

    def previous(signum, frame):
        # By the time the program's own handler runs, the GPU is already restored.
        seen_inside_previous["limit_mw"] = fake_nvml.gpus[0].limit_mw
        seen_inside_previous["locked"] = fake_nvml.gpus[0].locked_sm
        raise _ChainedError

    old = signal.signal(signal.SIGTERM, previous)
    try:
        with pytest.raises(_ChainedError), restoring_on_exit([gpu]):
            gpu.set_operating_point(CHANGE)
            os.kill(os.getpid(), signal.SIGTERM)
        assert seen_inside_previous == {"limit_mw": 350_000, "locked": None}
        assert signal.getsignal(signal.SIGTERM) is previous  # our handler is gone again
    finally:
        signal.signal(signal.SIGTERM, old)
    _assert_original(fake_nvml)
    assert _state_files() == []


def test_sigterm_with_the_default_action_restores_and_exits_143(gpu, fake_nvml):
    old = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with pytest.raises(SystemExit) as info, restoring_on_exit([gpu]):
            gpu.set_operating_point(CHANGE)
            os.kill(os.getpid(), signal.SIGTERM)
        assert info.value.code == 143
    finally:
        signal.signal(signal.SIGTERM, old)
    _assert_original(fake_nvml)


def test_sigint_restores_and_raises_keyboard_interrupt(gpu, fake_nvml):
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), restoring_on_exit([gpu]):
            gpu.set_operating_point(CHANGE)
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, old)
    _assert_original(fake_nvml)
    assert _state_files() == []


def test_a_failed_restore_keeps_the_state_file_and_says_eopt_reset(gpu, fake_nvml):
    with pytest.raises(DeviceError, match="eopt reset"), restoring_on_exit([gpu]):
        gpu.set_operating_point(CHANGE)
        fake_nvml.gpus[0].can_set = False  # e.g. rights dropped meanwhile
    assert len(_state_files()) == 1


def test_measure_only_and_simulated_devices_write_no_state_file(fake_nvml):
    devices = [NvmlGPU(0, control=False), SimulatedGPU()]
    with restoring_on_exit(devices):
        devices[1].set_operating_point(OperatingPoint(sm_clock_mhz=1005))
        assert _state_files() == []
    assert devices[1].current_operating_point().sm_clock_mhz is None  # sim restored too
    assert fake_nvml.setter_calls() == []


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _leave_stale_state(fake, which: int = 0) -> Path:
    """What a run killed with SIGKILL leaves: changed GPU, state file of a dead process."""
    gpu = fake.gpus[which]
    gpu.locked_sm = (1005, 1005)
    gpu.limit_mw = 210_000
    path = state_dir() / "gpu-state-1-dead.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {
        "backend": "nvml",
        "index": 0,
        "uuid": gpu.uuid,
        "model": gpu.name,
        "power_limit_w": 350.0,
    }
    payload = {
        "schema": STATE_SCHEMA,
        "pid": _dead_pid(),
        "host": os.uname().nodename,
        "created": "2026-01-01T00:00:00Z",
        "devices": [entry],
    }
    path.write_text(json.dumps(payload))
    return path


def test_stale_state_warns_and_eopt_reset_restores(fake_nvml, capsys):
    from eopt.cli.reset import command

    path = _leave_stale_state(fake_nvml)
    stale = warn_if_stale()
    assert [f.path for f in stale] == [path]
    assert "eopt reset" in capsys.readouterr().err

    runner = CliRunner()
    dry = runner.invoke(command, ["--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "would reset its locked SM and memory clocks" in dry.output
    assert "350 W" in dry.output
    assert fake_nvml.setter_calls() == []  # a dry run changes nothing
    assert path.exists()

    result = runner.invoke(command, [])
    assert result.exit_code == 0, result.output
    _assert_original(fake_nvml)
    assert not path.exists()
    again = runner.invoke(command, [])
    assert "Nothing to restore" in again.output


def test_reset_finds_the_gpu_by_uuid_when_indices_moved(make_fake_nvml):
    from eopt.cli.reset import command

    fake = make_fake_nvml([{"uuid": "GPU-other"}, {"uuid": "GPU-saved"}])
    path = _leave_stale_state(fake, which=1)
    saved = json.loads(path.read_text())
    saved["devices"][0]["index"] = 0  # it was GPU 0 when saved; now it is GPU 1
    path.write_text(json.dumps(saved))
    result = CliRunner().invoke(command, [])
    assert result.exit_code == 0, result.output
    assert fake.gpus[1].limit_mw == 350_000 and fake.gpus[1].locked_sm is None
    assert fake.gpus[0].limit_mw == 400_000  # the GPU now at index 0 is untouched


def test_reset_gpu_filter_keeps_the_other_entries(fake_nvml):
    from eopt.cli.reset import command

    path = _leave_stale_state(fake_nvml)
    result = CliRunner().invoke(command, ["--gpu", "5"])
    assert "Nothing to restore for GPU(s) 5" in result.output
    assert path.exists()
    assert find_state_files()[0].devices[0]["index"] == 0


def test_state_file_of_a_running_process_is_not_stale(gpu, fake_nvml):
    with restoring_on_exit([gpu]):
        files = find_state_files()
        assert len(files) == 1 and not files[0].stale
        assert warn_if_stale() == []


def test_a_malformed_state_file_is_named(tmp_path):
    bad = tmp_path / "gpu-state-9.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"gpu-state-9\.json"):
        find_state_files(tmp_path)


def test_keep_leaves_settings_on_normal_exit_and_reset_undoes_them_later(gpu, fake_nvml, capsys):
    from eopt.cli.reset import command

    with restoring_on_exit([gpu], keep=True):
        gpu.set_operating_point(CHANGE)
    assert fake_nvml.gpus[0].limit_mw == 210_000  # still applied
    (state,) = find_state_files()
    assert state.kept and state.devices[0]["power_limit_w"] == 350.0
    # Once the applying process is gone, the next run notes it (not as an accident).
    data = json.loads(state.path.read_text())
    data["pid"] = _dead_pid()
    state.path.write_text(json.dumps(data))
    warn_if_stale()
    err = capsys.readouterr().err
    assert "still in effect" in err and "WARNING" not in err
    result = CliRunner().invoke(command, [])
    assert result.exit_code == 0, result.output
    _assert_original(fake_nvml)
    assert find_state_files() == []


def test_keep_still_restores_when_the_block_fails(gpu, fake_nvml):
    with pytest.raises(RuntimeError), restoring_on_exit([gpu], keep=True):
        gpu.set_operating_point(CHANGE)
        raise RuntimeError("switch failed")
    _assert_original(fake_nvml)
    assert find_state_files() == []


def test_state_files_of_other_hosts_are_left_alone(fake_nvml):
    from eopt.cli.reset import command

    path = _leave_stale_state(fake_nvml)
    data = json.loads(path.read_text())
    data["host"] = "some-other-node"
    path.write_text(json.dumps(data))
    assert warn_if_stale() == []
    result = CliRunner().invoke(command, [])
    assert "saved on host 'some-other-node'" in result.output
    assert fake_nvml.setter_calls() == [] and path.exists()


_KILLED_RUN = """
import os, signal
from unittest import mock
from eopt.devices import OperatingPoint
from eopt.devices.guard import restoring_on_exit
from eopt.devices.nvml import NvmlGPU

with mock.patch("eopt.devices.nvml.pynvml", autospec=True) as nv:
    nv.nvmlDeviceGetCount.return_value = 1
    nv.nvmlDeviceGetName.return_value = "NVIDIA H200"
    nv.nvmlDeviceGetUUID.return_value = "GPU-killed"
    nv.nvmlDeviceGetPowerManagementLimit.return_value = 650_000
    nv.nvmlDeviceGetPowerManagementLimitConstraints.return_value = [200_000, 700_000]
    gpu = NvmlGPU(0)
    with restoring_on_exit([gpu]):
        nv.nvmlDeviceGetPowerManagementLimit.return_value = 300_000
        gpu.set_operating_point(OperatingPoint(power_limit_w=300))
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_killed_with_sigkill_leaves_a_state_file_the_next_run_warns_about(capsys):
    proc = subprocess.run([sys.executable, "-c", _KILLED_RUN], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    (state,) = find_state_files()
    assert state.stale and not state.kept
    assert state.devices[0]["uuid"] == "GPU-killed"
    assert state.devices[0]["power_limit_w"] == 650.0  # the original, saved before the change
    warn_if_stale()
    err = capsys.readouterr().err
    assert "WARNING" in err and "eopt reset" in err and "650 W" in err


def test_the_guard_works_outside_the_main_thread(gpu, fake_nvml):
    import threading

    errors = []

    def body() -> None:
        try:
            with restoring_on_exit([gpu]):
                gpu.set_operating_point(CHANGE)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    assert errors == []
    _assert_original(fake_nvml)


def test_opening_gpus_for_control_warns_about_a_killed_run(fake_nvml, capsys):
    from eopt.devices import open_devices

    _leave_stale_state(fake_nvml)
    open_devices("nvml", control=False)
    assert "eopt reset" not in capsys.readouterr().err  # measure-only changes nothing
    open_devices("nvml")
    assert "eopt reset" in capsys.readouterr().err
