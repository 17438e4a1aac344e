"""restoring_on_exit and `eopt reset`: every exit path puts the GPUs back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.devices import OperatingPoint
from eopt.devices.base import DeviceError
from eopt.devices.guard import (
    STATE_SCHEMA,
    ControlEndedError,
    find_state_files,
    restoring_on_exit,
    state_dir,
    warn_if_stale,
)
from eopt.devices.nvml import NvmlGPU
from eopt.sim.gpu import SimulatedGPU

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


def _wait_until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.002)


def test_sigterm_chains_to_the_previous_handler_and_the_block_restores(gpu, fake_nvml):
    called = []

    def previous(signum, frame):
        called.append(signum)
        raise _ChainedError

    old = signal.signal(signal.SIGTERM, previous)
    try:
        with pytest.raises(_ChainedError), restoring_on_exit([gpu]):
            gpu.set_operating_point(CHANGE)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted by the handler long before this ends
        assert called == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is previous  # our handler is gone again
    finally:
        signal.signal(signal.SIGTERM, old)
    _assert_original(fake_nvml)
    assert _state_files() == []


def test_a_flag_setting_handler_keeps_state_file_and_gpu_consistent(gpu, fake_nvml):
    """The Slurm/Kubernetes pattern: the program's SIGTERM handler sets a flag and the
    loop carries on to a checkpoint. Old code restored and deleted the state file in the
    handler, and the next change re-locked the GPU with no state file behind it."""
    stop = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    try:
        with restoring_on_exit([gpu]):
            gpu.set_operating_point(CHANGE)
            os.kill(os.getpid(), signal.SIGTERM)
            _wait_until(lambda: bool(stop))
            _wait_until(lambda: fake_nvml.gpus[0].limit_mw == 350_000)
            _wait_until(lambda: _state_files() == [])  # restored: nothing left to describe
            # The loop goes on and asks for another setting: refused, GPU untouched.
            with pytest.raises(ControlEndedError, match="restored"):
                gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200))
            _assert_original(fake_nvml)
            assert _state_files() == []
        # A later block may change the GPU again.
        with restoring_on_exit([gpu]):
            gpu.set_operating_point(CHANGE)
            assert len(_state_files()) == 1
    finally:
        signal.signal(signal.SIGTERM, old)
    _assert_original(fake_nvml)
    assert _state_files() == []


_BLOCKED_MAIN = """
import ctypes, os, signal, sys, threading, time
from unittest import mock
from eopt.devices import OperatingPoint
from eopt.devices.guard import restoring_on_exit
from eopt.devices.nvml import NvmlGPU

state = {"limit": 650_000}
with mock.patch("eopt.devices.nvml.pynvml", autospec=True) as nv:
    nv.nvmlDeviceGetCount.return_value = 1
    nv.nvmlDeviceGetName.return_value = "NVIDIA H200"
    nv.nvmlDeviceGetUUID.return_value = "GPU-blocked"
    nv.nvmlDeviceGetMigMode.return_value = [0, 0]
    nv.nvmlDeviceGetPowerManagementLimit.side_effect = lambda h: state["limit"]
    nv.nvmlDeviceGetEnforcedPowerLimit.side_effect = lambda h: state["limit"]
    nv.nvmlDeviceSetPowerManagementLimit.side_effect = lambda h, mw: state.update(limit=mw)
    nv.nvmlDeviceGetPowerManagementLimitConstraints.return_value = [200_000, 700_000]
    gpu = NvmlGPU(0)
    libc = ctypes.CDLL(None, use_errno=True)
    read_fd, write_fd = os.pipe()
    try:
        with restoring_on_exit([gpu]):
            gpu.set_operating_point(OperatingPoint(power_limit_w=300))
            # Like gloo's recv: a C call that retries on EINTR and never returns to Python.
            signal.siginterrupt(signal.SIGTERM, False)

            def watch() -> None:
                time.sleep(0.3)  # let the main thread enter read()
                os.kill(os.getpid(), signal.SIGTERM)
                deadline = time.monotonic() + 5
                while state["limit"] != 650_000 and time.monotonic() < deadline:
                    time.sleep(0.005)
                print("restored while blocked:", state["limit"] == 650_000, flush=True)
                os.write(write_fd, b"x")  # now let the main thread go

            threading.Thread(target=watch).start()
            buf = ctypes.create_string_buffer(1)
            libc.read(read_fd, buf, 1)
            time.sleep(5)  # the pending SIGTERM handler interrupts this at once
    except SystemExit as exc:
        print("exit", exc.code, flush=True)
"""


def test_restoring_does_not_wait_for_a_main_thread_blocked_in_c():
    """A rank blocked in dist.recv handled SIGTERM only when its peer sent data: the
    Python handler cannot run until then, so the restore must come from another thread."""
    proc = subprocess.run(
        [sys.executable, "-c", _BLOCKED_MAIN], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "restored while blocked: True" in proc.stdout, proc.stdout + proc.stderr
    assert "exit 143" in proc.stdout
    assert "SIGTERM: GPU settings restored" in proc.stderr


def test_a_signal_waits_for_a_change_in_flight_then_restores(make_fake_nvml):
    """A switch in flight on another thread when the signal arrives lands before the
    restore, never after it (old code: restored first, then the lock landed)."""
    import threading

    fake = make_fake_nvml([{"limit_mw": 350_000, "setter_delay_s": 0.3}])
    gpu = NvmlGPU(0)
    stop = []
    errors = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))

    def switch() -> None:
        try:
            gpu.set_operating_point(CHANGE)
        except Exception as exc:
            errors.append(exc)

    try:
        with restoring_on_exit([gpu]):
            worker = threading.Thread(target=switch)
            worker.start()
            _wait_until(lambda: fake.setter_calls())  # the lock call is sleeping now
            os.kill(os.getpid(), signal.SIGTERM)
            worker.join()
            _wait_until(lambda: fake.gpus[0].locked_sm is None)
            _wait_until(lambda: fake.gpus[0].limit_mw == 350_000)
            _wait_until(lambda: _state_files() == [])  # deleted once the restore is done
        assert errors == []  # the change in flight finished, then was undone
    finally:
        signal.signal(signal.SIGTERM, old)
    assert fake.gpus[0].locked_sm is None and fake.gpus[0].limit_mw == 350_000
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
    result = CliRunner().invoke(command, ["--gpu", "GPU-someone-else"])
    assert "Nothing to restore for GPU(s) GPU-someone-else" in result.output
    assert path.exists()
    assert find_state_files()[0].devices[0]["index"] == 0
    # An ordinal no GPU has is an error that lists the GPUs present, not a silent no-op.
    result = CliRunner().invoke(command, ["--gpu", "5"])
    assert result.exit_code == 1 and "GPU-0000-fake" in result.output
    assert path.exists() and fake_nvml.setter_calls() == []


@pytest.mark.parametrize("spec", ["GPU-saved", "gpu-sav", "00000000:08:00.0", "08:00.0", "1"])
def test_reset_gpu_accepts_uuids_pci_ids_and_ordinals(make_fake_nvml, spec):
    from eopt.cli.reset import command

    fake = make_fake_nvml([{"uuid": "GPU-other"}, {"uuid": "GPU-saved"}])
    path = _leave_stale_state(fake, which=1)
    result = CliRunner().invoke(command, ["--gpu", spec])
    assert result.exit_code == 0, result.output
    assert "Restored 1 GPU(s)" in result.output
    assert fake.gpus[1].limit_mw == 350_000 and fake.gpus[1].locked_sm is None
    assert not path.exists()


def test_sudo_eopt_reset_finds_the_invoking_users_state_file(fake_nvml, tmp_path, monkeypatch):
    """A run without root left its state in the user's home; `sudo eopt reset` runs
    with root's home and used to answer "Nothing to restore"."""
    import pwd
    from types import SimpleNamespace

    from eopt.cli.reset import command

    path = _leave_stale_state(fake_nvml)  # in the test's $EOPT_STATE_DIR for now
    user_home = tmp_path / "alice"
    user_dir = user_home / ".local" / "state" / "eopt"
    user_dir.mkdir(parents=True)
    moved = user_dir / path.name
    path.rename(moved)
    monkeypatch.delenv("EOPT_STATE_DIR")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "root"))  # root's home: nothing there
    monkeypatch.setenv("SUDO_USER", "alice")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    real_getpwnam = pwd.getpwnam
    monkeypatch.setattr(
        pwd,
        "getpwnam",
        lambda name: (
            SimpleNamespace(pw_dir=str(user_home)) if name == "alice" else real_getpwnam(name)
        ),
    )
    dry = CliRunner().invoke(command, ["--dry-run"])
    assert "350 W" in dry.output, dry.output
    result = CliRunner().invoke(command, [])
    assert result.exit_code == 0, result.output
    _assert_original(fake_nvml)
    assert not moved.exists()


def test_reset_state_dir_option_and_the_nothing_message_name_the_directories(fake_nvml, tmp_path):
    from eopt.cli.reset import command

    path = _leave_stale_state(fake_nvml)
    elsewhere = tmp_path / "shared-state"
    elsewhere.mkdir()
    result = CliRunner().invoke(command, ["--state-dir", str(elsewhere)])
    assert "Nothing to restore" in result.output and str(elsewhere) in result.output
    assert path.exists()
    result = CliRunner().invoke(command, ["--state-dir", str(path.parent)])
    assert result.exit_code == 0 and "Restored 1 GPU(s)" in result.output
    _assert_original(fake_nvml)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_a_rewritten_state_file_keeps_its_owner(make_fake_nvml):
    from eopt.cli.reset import command

    fake = make_fake_nvml([{"uuid": "GPU-0"}, {"uuid": "GPU-1"}])
    path = _leave_stale_state(fake)
    data = json.loads(path.read_text())
    data["devices"].append({**data["devices"][0], "uuid": "GPU-1", "index": 1})
    path.write_text(json.dumps(data))
    os.chown(path, 4321, 4321)  # as if the user's run had written it
    result = CliRunner().invoke(command, ["--gpu", "GPU-0"])
    assert result.exit_code == 0, result.output
    assert path.exists() and path.stat().st_uid == 4321  # still the user's file


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


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_neither_watches_nor_restores_the_parents_gpus(gpu, fake_nvml):
    """A DataLoader worker is a fork: a SIGTERM to it must not restore the parent's GPUs
    (the wakeup fd's pipe is shared with the parent's watchdog)."""
    with restoring_on_exit([gpu]):
        gpu.set_operating_point(CHANGE)
        pid = os.fork()
        if pid == 0:  # the child: report through the exit status only
            code = 0
            try:
                if signal.set_wakeup_fd(-1) != -1:
                    code = 1  # still wired to the parent's watchdog
                from eopt.devices import guard as guard_module

                if guard_module._WATCH.guards:
                    code = 2
                os.kill(os.getpid(), signal.SIGTERM)  # eopt's handler: SystemExit
            except SystemExit:
                pass
            except BaseException:
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        time.sleep(0.1)  # a stray byte would have reached the watchdog by now
        assert fake_nvml.gpus[0].limit_mw == 210_000  # the parent's change stands
        assert len(_state_files()) == 1
    _assert_original(fake_nvml)
