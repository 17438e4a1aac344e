"""Bad input to `eopt sweep` and `eopt frontier`, and what a stray file can (not) do.

Every refusal here happens before anything is measured: the bad-argument tables run with
the measuring function replaced by one that fails the test at once, so a guard that
regressed fails quickly instead of looping; the cases that would allocate without bound
run in a child process under a memory and CPU limit.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.cli import cli, main
from eopt.model.library import read_library
from eopt.runs import user_code
from eopt.runs.sweep import MAX_GRID_CELLS, coarse_clocks, parse_values
from eopt.sim.gpu import MAX_SLEEP_S, SimulatedGPU, VirtualClock
from eopt.sim.kernels import MAX_INVOCATION_S, get_kernel, kernel_names
from eopt.sim.profiles import available_profiles, load_profile

QUICK = ["--min-runs", "3", "--min-time", "0", "--warmup", "1"]
SWEEP_CONFTEST = Path(__file__).resolve().parents[1] / "sweep" / "conftest.py"


def _wall_gpu_class() -> type:
    """The wall-clock fake GPU of tests/sweep (one definition for both folders)."""
    spec = importlib.util.spec_from_file_location("_sweep_conftest", SWEEP_CONFTEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WallGPU


@pytest.fixture
def never_measure(monkeypatch):
    """Replace the sweep's measuring entry point: reaching it fails the test at once."""

    def refuse(*args, **kwargs):
        raise AssertionError("the sweep started measuring; the bad input was not refused")

    monkeypatch.setattr("eopt.cli.sweep.sweep", refuse)


def _eopt(args: list[str], capsys) -> tuple[int, str]:
    """``eopt ARGS`` through the console script's entry point: (exit status, all output)."""
    capsys.readouterr()
    try:
        main(args)
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def _one_line_error(status: int, output: str, message: str) -> None:
    assert status == 1, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("error:"), output
    assert message in lines[0], output
    assert "Traceback" not in output and "internal error" not in output


# Bad sweep arguments ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--param", "m=1e30"], "more than the simulator's limit of 60 s"),
        (["--param", "m=1e300", "--param", "k=1e300", "--param", "n=0"], "limit of 60 s"),
        (["--param", "m=nan"], "m=nan must be a finite non-negative number"),
        (["--param", "k=inf"], "k=inf must be a finite non-negative number"),
        (["--param", "m=-1"], "finite non-negative"),
        (["--cooldown", "nan"], "--cooldown nan: expected a number ≥ 0 and ≤ 600 s"),
        (["--cooldown", "1e9"], "--cooldown 1e9: expected a number ≥ 0 and ≤ 600 s"),
        (["--cooldown", "3m"], "--cooldown '3m': expected a number"),
        (["--cooldown", "5mW"], "--cooldown '5mW': expected a number"),
        (["--min-window", "-1"], "--min-window -1: expected a number > 0 and ≤ 60 s"),
        (["--min-window", "0"], "--min-window 0: expected a number > 0"),
        (["--min-time", "nan"], "--min-time nan: expected a number ≥ 0 and ≤ 300 s"),
        (["--min-time", "inf"], "--min-time inf"),
        (["--warmup", "1.5"], "--warmup 1.5: expected a whole number ≥ 0 and ≤ 1000"),
        (["--min-runs", "0"], "--min-runs 0: expected a whole number ≥ 1"),
        (["--max-runs", "1e9"], "--max-runs 1e9: expected a whole number ≥ 1 and ≤ 10000"),
        (["--seed", "-1"], "--seed -1: expected a whole number ≥ 0 and ≤ 4294967295"),
        (["--gpu", "x"], "--gpu x: the simulated GPU takes an index (0, cuda:1)"),
        (["--gpu", "GPU-8f2c"], "--gpu GPU-8f2c: the simulated GPU takes an index"),
        (["--gpu", "-1"], "--gpu -1: the simulated GPU takes an index"),
        (["--clocks", "nan"], "values must be finite numbers"),
        (["--clocks", "1410:inf:15"], "values must be finite numbers"),
        (["--clocks", "1415"], "does not support SM clock 1415 MHz (nearest 1410)"),
        (["--clocks", "1415,5000", "--snap"], "5000 MHz is outside sim0's SM clock range"),
        (["--mem-clocks", "coarse"], "only --clocks has a coarse grid"),
        (["--mem-clocks", "999"], "does not support memory clock 999 MHz"),
        (["--power-limits", "nan"], "values must be finite numbers"),
        (["--clocks", "all", "--power-limits", "100:400:0.1"], "the grid holds 729243 cells"),
        (["--cmd-argv", "x=true"], "give either a KERNEL or --cmd commands, not both"),
    ],
)
def test_bad_sweep_arguments_are_one_line_errors(tmp_path, capsys, never_measure, args, message):
    out = tmp_path / "x.jsonl"
    _one_line_error(*_eopt(["sweep", "sim:gemm", *args, "-o", str(out)], capsys), message)
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cmd-argv", "x=no_such_program_xyz --fast"], "no program 'no_such_program_xyz'"),
        (["--cmd-argv", "x='unclosed"], "No closing quotation"),
        (["--cmd-argv", "x="], "expected NAME='program args'"),
        (["--cmd-argv", "a=true", "--cmd", "a=true"], "implementation 'a' given twice"),
        (["./no_such_file.py:f"], "no file no_such_file.py"),
        (["no_such_module_xyz:f"], "cannot import module 'no_such_module_xyz'"),
        (["math:nope"], "module 'math' has no 'nope'"),
        (["math"], "expected module:function"),
    ],
)
def test_bad_kernels_are_one_line_errors(tmp_path, capsys, never_measure, args, message):
    out = tmp_path / "x.jsonl"
    _one_line_error(*_eopt(["sweep", *args, "-o", str(out)], capsys), message)


def test_a_gpu_uuid_without_nvidia_gpus_is_one_line(tmp_path, capsys, never_measure, monkeypatch):
    """--gpu took only integers; a UUID on a machine without NVIDIA GPUs says why it cannot
    be matched (rather than measuring the simulated GPU 0 in its place)."""
    monkeypatch.setattr("eopt.devices.nvml.device_count", lambda raise_errors=False: 0)
    out = tmp_path / "x.jsonl"
    args = ["sweep", "math:sqrt", "--gpu", "GPU-8f2c", "-o", str(out)]
    _one_line_error(*_eopt(args, capsys), "NVML sees no NVIDIA GPU here")
    assert not out.exists()


# Values that would allocate without bound, under a memory and CPU limit ---------------------
def _limited() -> None:  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (60, 60))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--clocks", "0.001:1e12:0.001"], "the range holds 1e+15 values"),
        (["--power-limits", "1:1e9:1e-3"], "the range holds 1e+12 values"),
        (["--clocks", "1:1e308:1e-300"], "the range holds"),
    ],
)
def test_unbounded_ranges_are_refused_before_they_are_built(tmp_path, args, message):
    code = "import sys; from eopt.cli import main; sys.argv[0] = 'eopt'; main()"
    out = tmp_path / "x.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", code, "sweep", "sim:gemm", *args, "-o", str(out)],
        capture_output=True, text=True, preexec_fn=_limited, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and f"limit of {MAX_GRID_CELLS}" in lines[0]
    assert not out.exists()


def test_ranges_at_the_limit_are_built_and_one_past_is_refused():
    assert len(parse_values(f"1:{MAX_GRID_CELLS}:1", "--clocks", "MHz")) == MAX_GRID_CELLS
    with pytest.raises(ValueError, match=f"holds {MAX_GRID_CELLS + 1} values"):
        parse_values(f"1:{MAX_GRID_CELLS + 1}:1", "--clocks", "MHz")


# The simulator's bounds -----------------------------------------------------------------
def test_every_default_workload_fits_the_simulators_bound_on_every_profile():
    for model in available_profiles():
        gpu = SimulatedGPU(model)
        for name in kernel_names():
            kernel = get_kernel(name)
            for impl in kernel.implementations:
                gpu.kernel_demand(name, impl)  # raises over MAX_INVOCATION_S


def test_a_huge_workload_is_refused_without_running_and_a_large_one_runs():
    gpu = SimulatedGPU()
    with pytest.raises(ValueError, match="more than the simulator's limit of 60 s"):
        gpu.launch("gemm", "cublas", {"m": 1e30})
    assert gpu.clock.now() == 0.0 and gpu.kernel_records() == []  # nothing ran
    # Just inside the bound: 4× the default gemm runs (a few hundred ms at 1410 MHz).
    seconds = gpu.launch("gemm", "naive", {"m": 4 * 8192})
    assert 0 < seconds < MAX_INVOCATION_S


def test_the_bound_is_the_time_at_the_lowest_clock():
    profile = load_profile("A100-SXM4-40GB")
    kernel = get_kernel("gemm")
    demand = kernel.demand(profile, "naive", {"m": 8192.0})
    slowest = demand.compute_s * profile.max_sm_clock_mhz / profile.min_sm_clock_mhz
    # Scale m so the compute time at the lowest clock is 1.5× the limit: refused, though
    # the time at the top clock (÷ 6.7) is well under it.
    m = 8192.0 * 1.5 * MAX_INVOCATION_S / slowest
    with pytest.raises(ValueError, match="at 210 MHz on A100-SXM4-40GB"):
        kernel.demand(profile, "naive", {"m": m})


@pytest.mark.parametrize("duration", [float("nan"), float("inf"), -1.0, MAX_SLEEP_S * 2])
def test_virtual_time_never_sleeps_without_bound(duration):
    clock = VirtualClock()
    with pytest.raises(ValueError, match="can idle 0–3600 s at a time"):
        clock.sleep(duration)
    assert clock.now() == 0.0


# User kernels never import through the working directory ---------------------------------
_MARKER = "open({path!r}, 'w').write('imported')\n"

_DRIVER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("_wall", {conftest!r})
wall = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wall)
import eopt.devices
eopt.devices.open_devices = lambda *a, **k: [wall.WallGPU()]
assert "pynvml" not in sys.modules, "the test needs pynvml unimported until the kernel loads"
from eopt.cli import main
sys.argv[0] = "eopt"
main()
"""


@pytest.fixture
def stray_folder(tmp_path):
    """A working directory with a kernel, its helper, and stray pynvml.py / numpy.py."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("pynvml", "numpy"):
        (work / f"{name}.py").write_text(_MARKER.format(path=str(tmp_path / f"RAN_{name}")))
    (work / "helpers.py").write_text("DELAY_S = 0.002\n")
    (work / "mykernels.py").write_text(
        textwrap.dedent(
            """
            import time

            import helpers  # a neighbour: found after every installed module
            import numpy    # must be the installed numpy
            import pynvml   # must be the installed nvidia-ml-py, never ./pynvml.py

            def f():
                time.sleep(helpers.DELAY_S)
            """
        )
    )
    return work


@pytest.mark.parametrize("spec", ["./mykernels.py:f", "mykernels:f"])
def test_a_stray_pynvml_or_numpy_in_the_working_directory_never_runs(tmp_path, stray_folder, spec):
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER.format(conftest=str(SWEEP_CONFTEST)))
    out = tmp_path / "lib.jsonl"
    done = subprocess.run(
        [sys.executable, str(driver), "sweep", spec, "--no-control", "--min-runs", "2",
         "--min-time", "0", "--warmup", "0", "--min-window", "0.01", "--json", "-q",
         "-o", str(out)],
        cwd=stray_folder, capture_output=True, text=True, preexec_fn=_limited, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["measured"] == 1 and data["cells"][0]["name"] == "f"
    assert [s.name for s in read_library(out)] == ["f"]
    assert not (tmp_path / "RAN_pynvml").exists()
    assert not (tmp_path / "RAN_numpy").exists()


@pytest.fixture
def clean_imports(monkeypatch):
    """Forget modules and kernel folders a test loaded (they are per process)."""
    before = set(sys.modules)
    monkeypatch.setattr(user_code._FINDER, "folders", [])
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_a_local_file_named_like_an_installed_module_is_refused(
    tmp_path, monkeypatch, clean_imports
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "json.py").write_text(_MARKER.format(path=str(tmp_path / "RAN_json")))
    with pytest.raises(user_code.UserCodeError, match=r"json\.py in the working directory has"):
        user_code.import_callable("json:dumps")
    assert not (tmp_path / "RAN_json").exists()


def test_a_neighbour_never_stands_in_for_a_protected_module(tmp_path, monkeypatch, clean_imports):
    # A dependency of eopt that is not installed here (as nvidia-ml-py may not be): a
    # file of its name beside the kernel must not be imported in its place.
    monkeypatch.setattr(
        user_code, "PROTECTED_MODULES", user_code.PROTECTED_MODULES | {"eopt_fake_dep"}
    )
    monkeypatch.chdir(tmp_path)
    (tmp_path / "eopt_fake_dep.py").write_text(_MARKER.format(path=str(tmp_path / "RAN_dep")))
    (tmp_path / "side.py").write_text("VALUE = 7\n")
    (tmp_path / "kern.py").write_text(
        textwrap.dedent(
            """
            import side
            try:
                import eopt_fake_dep
                FOUND = True
            except ImportError:
                FOUND = False

            def f():
                return side.VALUE, FOUND
            """
        )
    )
    assert user_code.import_callable("./kern.py:f")() == (7, False)
    assert not (tmp_path / "RAN_dep").exists()
    with pytest.raises(user_code.UserCodeError, match="name of a module eopt uses"):
        user_code.import_callable("eopt_fake_dep:f")


# --cmd-argv ----------------------------------------------------------------------------------
def test_cmd_argv_runs_without_a_shell_and_cmd_with_one(tmp_path, monkeypatch):
    monkeypatch.setattr("eopt.devices.open_devices", lambda *a, **k: [_wall_gpu_class()()])
    monkeypatch.setenv("EOPT_TEST_WORD", "expanded")
    script = tmp_path / "record.py"
    script.write_text("import sys\nopen(sys.argv[1], 'w').write(sys.argv[2])\n")
    plain, shell = tmp_path / "argv.txt", tmp_path / "shell.txt"
    out = tmp_path / "c.jsonl"
    result = CliRunner().invoke(
        cli,
        ["sweep", "--name", "rec", "--no-control", "--min-runs", "2", "--min-time", "0",
         "--warmup", "0", "--min-window", "0.01", "-q", "-o", str(out),
         "--cmd-argv", f"argv={sys.executable} {script} {plain} '$EOPT_TEST_WORD;*'",
         "--cmd", f"shell={sys.executable} {script} {shell} $EOPT_TEST_WORD"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert plain.read_text() == "$EOPT_TEST_WORD;*"  # literal: no shell saw it
    assert shell.read_text() == "expanded"
    sigs = {s.impl: s for s in read_library(out)}
    assert set(sigs) == {"argv", "shell"}
    assert "argv=argv:" in sigs["argv"].meta["kernel_spec"]


# Default clock grid, unsupported clocks, --snap -------------------------------------------
def _sweep_json(tmp_path: Path, *args: str) -> tuple[dict, str]:
    result = CliRunner().invoke(
        cli,
        ["sweep", "sim:layernorm", "--impls", "apex", *QUICK, "--json", "-o",
         str(tmp_path / "l.jsonl"), *args],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def test_a_sweep_without_clocks_sweeps_a_coarse_grid_from_top_to_bottom(tmp_path):
    data, err = _sweep_json(tmp_path)
    supported = SimulatedGPU().supported_sm_clocks_mhz()
    clocks = [c["sm_clock_mhz"] for c in data["cells"]]
    assert clocks == coarse_clocks(supported)
    assert len(clocks) == 21 and clocks[0] == max(supported) and clocks[-1] == min(supported)
    assert {a - b for a, b in itertools.pairwise(clocks)} == {60.0}
    assert "sweeping 21 of sim0's 81 SM clocks" in err and "--clocks all" in err


@pytest.mark.parametrize(
    "args", [["--power-limits", "250"], ["--clocks", "current"], ["--no-control"]]
)
def test_other_axes_or_no_control_keep_the_clock(tmp_path, args):
    data, err = _sweep_json(tmp_path, *args)
    assert len(data["cells"]) == 1 and data["cells"][0]["sm_clock_mhz"] is None
    assert "sweeping" not in err


def test_coarse_clocks_keep_small_tables_whole_and_always_end_at_the_lowest():
    assert coarse_clocks([1410, 1200, 900]) == [1410.0, 1200.0, 900.0]
    many = [float(c) for c in range(2000, 199, -7)]  # 258 clocks, 7 MHz apart
    picked = coarse_clocks(many)
    assert len(picked) == 21 and picked[0] == 2000.0 and picked[-1] == min(many)
    assert picked == sorted(set(picked), reverse=True)


def test_unsupported_clocks_are_listed_at_once_with_range_and_step(tmp_path, capsys, never_measure):
    status, output = _eopt(
        ["sweep", "sim:gemm", "--clocks", "1415,1410,1000,333", "-o", str(tmp_path / "x")], capsys
    )
    _one_line_error(
        status, output, "does not support SM clocks 1415, 1000, 333 MHz (nearest 1410, 1005, 330)"
    )
    assert "supported: 210–1410 MHz, every 15 MHz (81 values)" in output
    assert "pass --snap to use the nearest" in output


def test_snap_moves_clocks_to_the_nearest_supported_and_says_which(tmp_path):
    data, err = _sweep_json(tmp_path, "--clocks", "1415,1410,1000", "--snap")
    assert [c["sm_clock_mhz"] for c in data["cells"]] == [1410.0, 1005.0]
    note = "snapped to the nearest supported SM clocks: 1415→1410, 1000→1005 MHz"
    assert note in err and note in data["notes"][0]


# Bad frontier arguments ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_library(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lib") / "gemm.jsonl"
    result = CliRunner().invoke(
        cli, ["sweep", "sim:gemm", "--clocks", "1410,1005", *QUICK, "-q", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--confidence", "nan"], "--confidence nan: expected a number > 0 and < 1"),
        (["--confidence", "1"], "--confidence 1: expected a number > 0 and < 1"),
        (["--confidence", "95%"], "--confidence '95%': expected a number"),
        (["--plot", "f.txt"], "--plot f.txt: use a file name ending in .png, .svg or .pdf"),
        (["--element", "nope"], "no signature named 'nope'"),
    ],
)
def test_bad_frontier_arguments_are_one_line_errors(small_library, capsys, args, message):
    _one_line_error(*_eopt(["frontier", str(small_library), *args], capsys), message)


def test_frontier_of_a_missing_library_is_one_line(tmp_path, capsys):
    _one_line_error(*_eopt(["frontier", str(tmp_path / "none.jsonl")], capsys), "none.jsonl")
