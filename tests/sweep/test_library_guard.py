"""Two sweeps on one library, libraries cut off by a crash, and a meter that fails mid-cell."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.cli import cli
from eopt.devices.base import DeviceError
from eopt.measure.meter import Meter, MeterError
from eopt.model.library import read_library
from eopt.runs.repeat import RepeatPolicy
from eopt.runs.sweep import Grid, LibraryInUseError, parse_kernel, repair_library_tail, sweep
from eopt.sim.gpu import SimulatedGPU

QUICK = ["--min-runs", "3", "--min-time", "0", "--warmup", "1"]
LAYERNORM = ["sweep", "sim:layernorm", "--impls", "apex", *QUICK]
TINY = RepeatPolicy(
    warmup=1, min_runs=3, min_time_s=0.0, min_window_s=0.01, static_idle_s=0.02, settle_s=0.0,
    n_boot=100,
)  # fmt: skip

# A sweep in a second process that stops before its first cell until told to go on.
_WRITER = """
import sys
from eopt.sim.gpu import SimulatedGPU
from eopt.runs.repeat import RepeatPolicy
from eopt.runs.sweep import Grid, parse_kernel, sweep

gpu = SimulatedGPU()
kernel = parse_kernel("sim:layernorm", impls=["apex"])
grid = Grid.build(kernel, gpu, clocks="1410,1200,1005")
policy = RepeatPolicy(warmup=1, min_runs=3, min_time_s=0.0)
first = []

def hold(cell):
    if not first:
        first.append(cell)
        print("writing", flush=True)
        sys.stdin.readline()

sweep(kernel, grid, gpu, sys.argv[1], resume=True, policy=policy, before_cell=hold)
"""

_CLI = "import sys; from eopt.cli import main; sys.argv[0] = 'eopt'; main()"


def _eopt(*args: str) -> subprocess.CompletedProcess:
    """`eopt ARGS` in its own process; a second writer that waited would time out here."""
    return subprocess.run(
        [sys.executable, "-c", _CLI, *args], capture_output=True, text=True, timeout=120
    )


def test_a_second_sweep_on_one_library_stops_at_once_naming_the_first(tmp_path):
    out = tmp_path / "lib.jsonl"
    script = tmp_path / "first_writer.py"
    script.write_text(textwrap.dedent(_WRITER))
    first = subprocess.Popen(
        [sys.executable, str(script), str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout.readline().strip() == "writing", first.stderr.read()
        second = _eopt(*LAYERNORM, "--clocks", "1410,1200,1005", "--resume", "-o", str(out))
        assert second.returncode == 1
        err = " ".join(second.stderr.split())
        assert f"pid {first.pid}" in err and "first_writer.py" in err
        assert "another eopt sweep is writing" in err and "Traceback" not in err
    finally:
        first.stdin.close()
        assert first.wait(timeout=120) == 0, first.stderr.read()
    assert len(read_library(out)) == 3  # each cell once, not once per process
    again = _eopt(*LAYERNORM, "--clocks", "1410,1200,1005", "--resume", "-o", str(out))
    assert again.returncode == 0, again.stderr
    assert "wrote 0 new cell(s)" in again.stdout
    assert len(out.read_text().splitlines()) == 3
    assert not (tmp_path / "lib.jsonl.lock").exists()  # released and removed


def test_two_sweeps_started_together_measure_each_cell_once(tmp_path):
    out = tmp_path / "lib.jsonl"
    args = [sys.executable, "-c", _CLI, *LAYERNORM, "--clocks", "1410,1200,1005", "--resume"]
    procs = [
        subprocess.Popen([*args, "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    codes = [p.wait(timeout=120) for p in procs]
    assert sorted(codes) in ([0, 0], [0, 1])  # the second waits for nothing: done or refused
    lines = out.read_text().splitlines()
    keys = [(s.impl, s.op_point.sm_clock_mhz) for s in read_library(out)]
    assert len(lines) == len(set(keys)) == 3


def test_the_library_lock_is_held_for_the_whole_sweep(tmp_path):
    gpu = SimulatedGPU()
    kernel = parse_kernel("sim:layernorm", impls=["apex"])
    grid = Grid.build(kernel, gpu, clocks="1410,1200")
    out = tmp_path / "lib.jsonl"
    refusals: list[str] = []

    def try_again(cell) -> None:
        # Another writer in this process (its own lock file handle) is refused too.
        with pytest.raises(LibraryInUseError) as info:
            sweep(kernel, grid, SimulatedGPU(), out, resume=True, policy=TINY)
        refusals.append(str(info.value))

    sweep(kernel, grid, gpu, out, policy=TINY, before_cell=try_again)
    assert len(refusals) == 2 and all("--resume" in r for r in refusals)
    assert len(read_library(out)) == 2


# Repair on open ---------------------------------------------------------------------------
def _sweep_cli(out: Path, clocks: str, *extra: str):
    return CliRunner().invoke(
        cli, [*LAYERNORM, "--clocks", clocks, "-o", str(out), *extra], catch_exceptions=False
    )


def test_a_missing_final_newline_is_completed_before_appending(tmp_path):
    out = tmp_path / "lib.jsonl"
    assert _sweep_cli(out, "1410").exit_code == 0
    out.write_text(out.read_text().rstrip("\n"))  # e.g. edited by hand
    result = _sweep_cli(out, "1410,1200", "--resume")
    assert result.exit_code == 0, result.output
    assert "added one" in result.output
    lines = out.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)


def test_a_torn_last_line_is_moved_aside_and_its_cell_measured_again(tmp_path):
    out = tmp_path / "lib.jsonl"
    assert _sweep_cli(out, "1410,1200").exit_code == 0
    whole = out.read_text()
    torn = whole.splitlines()[-1][:57]  # a crash in the middle of writing the last cell
    out.write_text(whole[: whole.rindex("\n", 0, len(whole) - 1) + 1] + torn)
    result = _sweep_cli(out, "1410,1200", "--resume")
    assert result.exit_code == 0, result.output
    (aside,) = tmp_path.glob("lib.jsonl.torn-*")
    assert aside.read_text() == torn  # kept, byte for byte
    message = " ".join(result.output.split())
    assert "lib.jsonl:2: the last line was cut off" in message and aside.name in message
    assert "1 of 2 cells were already" in message  # the torn cell is measured again
    sigs = read_library(out)
    assert sorted(s.op_point.sm_clock_mhz for s in sigs) == [1200.0, 1410.0]


@pytest.mark.parametrize(
    ("content", "kept", "warned"),
    [
        (b"", b"", False),
        (b'{"a": 1}\n', b'{"a": 1}\n', False),
        (b'{"a": 1}\n\n', b'{"a": 1}\n\n', False),
        (b'{"a": 1}', b'{"a": 1}\n', True),
        (b'{"a": 1}\n{"b": ', b'{"a": 1}\n', True),
        (b'{"a": 1}\n{"b": \n', b'{"a": 1}\n', True),
        (b'{"b": \xff', b"", True),
    ],
)
def test_repair_touches_only_the_last_line(tmp_path, content, kept, warned):
    lib = tmp_path / "x.jsonl"
    lib.write_bytes(content)
    warnings = repair_library_tail(lib)
    assert lib.read_bytes() == kept
    assert bool(warnings) == warned
    moved = list(tmp_path.glob("x.jsonl.torn-*"))
    if moved:
        assert kept + moved[0].read_bytes() == content  # nothing lost


def test_a_bad_line_before_the_last_is_not_repaired_but_reported(tmp_path):
    lib = tmp_path / "x.jsonl"
    lib.write_bytes(b'{"a": \n{"b": 1}\n')
    assert repair_library_tail(lib) == []
    assert lib.read_bytes() == b'{"a": \n{"b": 1}\n'


# A meter that fails in its background thread ---------------------------------------------
class FailingSensorGPU:
    """Wraps the wall-clock fake: once armed, the timer thread's readings raise."""

    def __init__(self, gpu) -> None:
        self._gpu = gpu
        self.armed = threading.Event()

    def __getattr__(self, name: str):
        return getattr(self._gpu, name)

    def _maybe_fail(self) -> None:
        if self.armed.is_set() and threading.current_thread().name == "eopt-timer":
            raise DeviceError(f"{self._gpu.name}: injected sensor failure")

    def energy_counter_j(self) -> float:
        self._maybe_fail()
        return self._gpu.energy_counter_j()

    def power(self):
        self._maybe_fail()
        return self._gpu.power()


def _wait_for(meter: Meter) -> None:
    deadline = time.monotonic() + 5.0
    while meter.failure is None and time.monotonic() < deadline:
        time.sleep(0.005)


@pytest.mark.parametrize("method", ["counter", "sampler"])
def test_a_failed_background_read_is_raised_in_the_measuring_thread(wall_gpu, method, monkeypatch):
    printed: list[object] = []
    monkeypatch.setattr(threading, "excepthook", printed.append)
    gpu = FailingSensorGPU(wall_gpu)
    with Meter(gpu, method=method) as meter:
        a = meter.mark()
        gpu.armed.set()
        _wait_for(meter)
        with pytest.raises(MeterError, match="DeviceError: wall0: injected sensor failure"):
            meter.energy(a, meter.clock.now())
        with pytest.raises(MeterError, match="background reading failed"):
            meter.mark()
    assert printed == []  # no raw traceback from a dying thread


def test_a_sweep_never_saves_a_cell_measured_after_a_meter_failure(wall_gpu, tmp_path):
    gpu = FailingSensorGPU(wall_gpu)
    kernel = parse_kernel(None, commands={"a": "true", "b": "true"}, name="job")
    out = tmp_path / "job.jsonl"

    def fail_from_the_second_cell(cell) -> None:
        if cell.impl == "b":
            gpu.armed.set()
            time.sleep(0.1)  # several polls: the thread has failed before the cell starts

    with pytest.raises(MeterError, match="injected sensor failure"):
        sweep(kernel, Grid.build(kernel, gpu, clocks="1410"), gpu, out, policy=TINY,
              before_cell=fail_from_the_second_cell)  # fmt: skip
    assert [s.impl for s in read_library(out)] == ["a"]  # b is not saved as good
    assert wall_gpu.op == wall_gpu.original  # and the GPU is restored


def test_the_sweep_command_fails_with_one_line_after_a_meter_failure(
    wall_gpu, tmp_path, monkeypatch
):
    gpu = FailingSensorGPU(wall_gpu)
    module = tmp_path / "eopt_failing_kernels.py"
    module.write_text(
        textwrap.dedent(
            """
            import time
            GPU = None

            def work(impl):
                if impl == "b":
                    GPU.armed.set()  # the sensor dies while this cell runs
                time.sleep(0.002)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import eopt_failing_kernels

    eopt_failing_kernels.GPU = gpu
    monkeypatch.setattr("eopt.devices.open_devices", lambda *a, **k: [gpu])
    out = tmp_path / "w.jsonl"
    try:
        result = CliRunner().invoke(
            cli,
            ["sweep", "eopt_failing_kernels:work", "--impls", "a,b", "--no-control",
             "--min-runs", "3", "--min-time", "0.2", "--warmup", "1", "-o", str(out)],
        )  # fmt: skip
    finally:
        sys.modules.pop("eopt_failing_kernels", None)
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "error:" in text and "injected sensor failure" in text and "--resume" in text
    assert "Traceback" not in result.output
    assert [s.impl for s in read_library(out)] == ["a"]


def test_sweep_help_says_a_second_writer_stops_rather_than_waits():
    result = CliRunner().invoke(cli, ["sweep", "--help"])
    text = " ".join(result.output.split())
    assert "stops at once (it does not wait)" in text and "OUTPUT.lock" in text
