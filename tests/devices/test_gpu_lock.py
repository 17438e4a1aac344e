"""One controller per GPU, across processes; the first saved original state wins.

The holder runs in a second process (its own NVML fake) and locks the GPU through the
same state directory; the test process, with the stateful fake NVML, plays the second
eopt run and must be refused before it changes anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.devices import OperatingPoint
from eopt.devices.guard import (
    GpuInUseError,
    find_state_files,
    restoring_on_exit,
    state_dir,
)
from eopt.devices.nvml import NvmlGPU
from eopt.model.schedule import DeviceInfo, Schedule, ScheduledElement, write_schedule

CHANGE = OperatingPoint(sm_clock_mhz=1005, power_limit_w=210)

_HOLDER = """
import signal, sys
from unittest import mock
from eopt.devices import OperatingPoint
from eopt.devices.guard import restoring_on_exit
from eopt.devices.nvml import NvmlGPU

with mock.patch("eopt.devices.nvml.pynvml", autospec=True) as nv:
    nv.nvmlDeviceGetCount.return_value = 1
    nv.nvmlDeviceGetName.return_value = "NVIDIA A100-SXM4-40GB"
    nv.nvmlDeviceGetUUID.return_value = sys.argv[1]
    nv.nvmlDeviceGetPowerManagementLimit.return_value = 350_000
    nv.nvmlDeviceGetPowerManagementLimitConstraints.return_value = [100_000, 400_000]
    gpu = NvmlGPU(0)
    with restoring_on_exit([gpu]):
        nv.nvmlDeviceGetPowerManagementLimit.return_value = 250_000
        gpu.set_operating_point(OperatingPoint(power_limit_w=250))
        print("controlling", flush=True)
        sys.stdin.readline()  # hold the GPU until the test lets go
"""


@pytest.fixture
def holder(tmp_path):
    """Start a second process that controls the GPU with the given UUID until released."""
    script = tmp_path / "holder_run.py"
    script.write_text(textwrap.dedent(_HOLDER))
    procs: list[subprocess.Popen] = []

    def start(uuid: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, str(script), uuid],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        line = proc.stdout.readline()
        assert line.strip() == "controlling", proc.stderr.read()
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.stdin.close()
            proc.wait(timeout=30)


def _release(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0, proc.stderr.read()


def _state_files() -> list[Path]:
    return sorted(state_dir().glob("gpu-state-*.json"))


def test_a_second_controller_is_refused_naming_the_holder(fake_nvml, holder):
    proc = holder("GPU-0000-fake")  # the fake NVML's GPU
    theirs = _state_files()
    assert len(theirs) == 1
    gpu = NvmlGPU(0)
    with pytest.raises(GpuInUseError) as info, restoring_on_exit([gpu]):
        gpu.set_operating_point(CHANGE)  # never reached
    message = str(info.value)
    assert f"pid {proc.pid}" in message and "holder_run.py GPU-0000-fake" in message
    assert "--no-control" in message and "\n" not in message
    assert fake_nvml.setter_calls() == []  # refused before any change
    assert _state_files() == theirs  # and nothing saved that would "restore" it later

    _release(proc)
    assert _state_files() == []  # the holder restored and cleaned up
    with restoring_on_exit([gpu]):  # free now
        gpu.set_operating_point(CHANGE)
        assert fake_nvml.gpus[0].limit_mw == 210_000
    assert fake_nvml.gpus[0].limit_mw == 400_000


def test_the_lock_is_per_gpu(fake_nvml, holder):
    proc = holder("GPU-someone-elses")
    gpu = NvmlGPU(0)
    with restoring_on_exit([gpu]):
        gpu.set_operating_point(CHANGE)
        assert fake_nvml.gpus[0].limit_mw == 210_000
    assert fake_nvml.gpus[0].limit_mw == 400_000
    assert proc.poll() is None  # the other run goes on undisturbed


def test_measure_only_runs_take_no_lock(fake_nvml, holder):
    holder("GPU-0000-fake")
    with restoring_on_exit([NvmlGPU(0, control=False)]):
        pass  # no error: reading a GPU someone else controls is fine
    assert fake_nvml.setter_calls() == []


def test_a_killed_holder_leaves_no_lock_behind(fake_nvml, holder, capsys):
    proc = holder("GPU-0000-fake")
    proc.kill()
    proc.wait(timeout=30)
    gpu = NvmlGPU(0)
    with restoring_on_exit([gpu]):  # the kernel dropped the dead run's lock
        gpu.set_operating_point(CHANGE)
    assert "eopt reset" in capsys.readouterr().err  # its state file is still announced
    assert fake_nvml.gpus[0].limit_mw == 400_000


def test_nested_guards_of_one_process_share_the_lock(fake_nvml):
    gpu = NvmlGPU(0)
    with restoring_on_exit([gpu]):
        with restoring_on_exit([gpu]):  # e.g. a controller inside a script's own guard
            gpu.set_operating_point(CHANGE)
        assert list(state_dir().glob("gpu-*.lock"))  # still held by the outer guard
    assert list(state_dir().glob("gpu-*.lock")) == []


def test_reset_leaves_a_gpu_another_run_controls_alone(fake_nvml, holder):
    from eopt.cli.reset import command

    proc = holder("GPU-0000-fake")
    stale = state_dir() / "gpu-state-1-dead.json"
    stale.write_text(
        json.dumps(
            {
                "schema": "eopt.gpu-state/1",
                "pid": _dead_pid(),
                "host": os.uname().nodename,
                "created": "2026-01-01T00:00:00Z",
                "devices": [_entry(fake_nvml.gpus[0], 300.0)],
            }
        )
    )
    result = CliRunner().invoke(command, [])
    assert result.exit_code != 0
    assert f"pid {proc.pid}" in result.output
    assert fake_nvml.setter_calls() == []
    assert stale.exists()  # kept for a later eopt reset


# Stacked saved states --------------------------------------------------------------------
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _entry(gpu, limit_w: float) -> dict:
    return {
        "backend": "nvml",
        "index": 0,
        "uuid": gpu.uuid,
        "model": gpu.name,
        "power_limit_w": limit_w,
    }


def _schedule(path: Path, limit_w: float) -> Path:
    element = ScheduledElement(
        name="F0",
        type="stage0.forward",
        device="stage0",
        start=0.0,
        duration=0.01,
        energy=2.5,
        op_point=OperatingPoint(power_limit_w=limit_w),
    )
    sch = Schedule(
        elements=(element,), devices=(DeviceInfo("stage0", 70.0, 0),), makespan=0.01, energy=2.5
    )
    write_schedule(path, sch)
    return path


def _apply(path: Path, capsys) -> int:
    from eopt.cli import main

    try:
        main(["apply", str(path)])
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        capsys.readouterr()
    return 0


def _as_if_exited(state) -> None:
    data = json.loads(state.path.read_text())
    data["pid"] = _dead_pid()
    state.path.write_text(json.dumps(data))


def test_apply_twice_then_reset_restores_the_first_original(fake_nvml, tmp_path, capsys):
    from eopt.cli.reset import command

    fake_nvml.gpus[0].limit_mw = 350_000  # the original: neither a's nor the maximum
    assert _apply(_schedule(tmp_path / "a.json", 250), capsys) == 0
    assert fake_nvml.gpus[0].limit_mw == 250_000
    assert _apply(_schedule(tmp_path / "b.json", 200), capsys) == 0
    assert fake_nvml.gpus[0].limit_mw == 200_000
    (state,) = find_state_files()  # b's run left no second record on top of a's
    assert state.devices[0]["power_limit_w"] == 350.0
    _as_if_exited(state)
    result = CliRunner().invoke(command, [])
    assert result.exit_code == 0, result.output
    assert "Restored 1 GPU(s)" in result.output
    assert fake_nvml.gpus[0].limit_mw == 350_000
    assert fake_nvml.gpus[0].locked_sm is None
    assert find_state_files() == []


def test_a_state_file_name_is_never_one_that_exists(tmp_path, monkeypatch):
    """A new run's state file never replaces another's (the name once carried an object's
    address, which repeats within a process: a second `apply` then overwrote the first
    one's kept original)."""
    from eopt.devices import guard

    taken = tmp_path / "gpu-state-7-aaaa.json"
    taken.write_text("kept")
    tokens = iter(["aaaa", "bbbb"])
    monkeypatch.setattr(guard.secrets, "token_hex", lambda n: next(tokens))
    assert guard.fresh_state_path(tmp_path, 7) == tmp_path / "gpu-state-7-bbbb.json"
    assert taken.read_text() == "kept"
    monkeypatch.undo()
    names = {guard.fresh_state_path(tmp_path, 7).name for _ in range(200)}
    assert len(names) == 200 and all(n.startswith("gpu-state-7-") for n in names)


def test_reset_restores_the_oldest_of_several_saved_states(fake_nvml, tmp_path, capsys):
    """Kept settings of an apply, then a run killed on top of them: the apply's original."""
    from eopt.cli.reset import command

    fake_nvml.gpus[0].limit_mw = 350_000
    assert _apply(_schedule(tmp_path / "a.json", 250), capsys) == 0
    (kept,) = find_state_files()
    _as_if_exited(kept)
    killed = state_dir() / "gpu-state-2-killed.json"
    killed.write_text(
        json.dumps(
            {
                "schema": "eopt.gpu-state/1",
                "pid": _dead_pid(),
                "host": os.uname().nodename,
                "created": "2999-01-01T00:00:00.000000Z",  # later than the apply's
                "devices": [_entry(fake_nvml.gpus[0], 250.0)],  # it found a's setting
            }
        )
    )
    fake_nvml.gpus[0].limit_mw = 150_000  # where the killed run left it
    dry = CliRunner().invoke(command, ["--dry-run"])
    assert "350 W" in dry.output and "250 W" not in dry.output.split("would")[-1]
    result = CliRunner().invoke(command, [])
    assert result.exit_code == 0, result.output
    assert "2 saved states; restoring the oldest" in " ".join(result.output.split())
    assert fake_nvml.gpus[0].limit_mw == 350_000
    assert find_state_files() == []  # both records are settled


def test_eopt_apply_is_refused_with_one_line_while_another_run_controls_the_gpu(
    fake_nvml, holder, tmp_path, capsys
):
    from eopt.cli import main

    proc = holder("GPU-0000-fake")
    with pytest.raises(SystemExit) as info:
        main(["apply", str(_schedule(tmp_path / "a.json", 250))])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    message = " ".join(err.split())
    assert message.startswith("error: gpu0 (NVIDIA A100-SXM4-40GB, GPU-0000-fake)")
    assert f"pid {proc.pid}" in message and "holder_run.py" in message
    assert fake_nvml.setter_calls() == []
    assert len(find_state_files()) == 1  # only the holder's
