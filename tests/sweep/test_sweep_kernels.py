"""Kernel and grid specs; Python callables and shell commands on a wall-clock GPU."""

from __future__ import annotations

import sys
import textwrap

import pytest

from eopt.measure.command import MeasureError
from eopt.runs.repeat import RepeatPolicy
from eopt.runs.sweep import (
    CommandKernel,
    Grid,
    KernelError,
    PythonKernel,
    SweepError,
    parse_kernel,
    parse_params,
    parse_values,
    sweep,
)
from eopt.sim.gpu import SimulatedGPU

# Wall-clock runs: tiny windows (the fake's counter is exact) keep the tests short.
TINY = RepeatPolicy(
    warmup=1, min_runs=3, min_time_s=0.0, min_window_s=0.01, static_idle_s=0.02, settle_s=0.0,
    n_boot=100,
)  # fmt: skip


def test_parse_values_lists_and_inclusive_ranges():
    assert parse_values("1410,1200", "--clocks", "MHz") == [1410.0, 1200.0]
    got = parse_values("900:1410:30", "--clocks", "MHz")
    assert got[0] == 1410.0 and got[-1] == 900.0 and len(got) == 18
    assert parse_values("1200,1410,1200", "--clocks", "MHz") == [1410.0, 1200.0]
    for bad, msg in (("", "empty"), ("a,b", "not a list"), ("1:2", "START:STOP:STEP"),
                     ("1410:900:30", "START ≤ STOP"), ("0,100", "positive")):  # fmt: skip
        with pytest.raises(SweepError, match=msg):
            parse_values(bad, "--clocks", "MHz")


def test_grid_checks_values_against_the_device():
    gpu = SimulatedGPU()
    kernel = parse_kernel("sim:gemm", impls=["cublas"])
    grid = Grid.build(kernel, gpu, clocks="all")
    assert list(grid.sm_clocks_mhz) == list(gpu.supported_sm_clocks_mhz())
    with pytest.raises(SweepError, match="nearest 1410"):
        Grid.build(kernel, gpu, clocks="1415")
    with pytest.raises(SweepError, match="settable range 100–400 W"):
        Grid.build(kernel, gpu, power_limits="50,300")
    grid = Grid.build(kernel, gpu, clocks="1410,1200", power_limits="250,300")
    assert len(grid) == 4 and grid.controls
    assert not Grid.build(kernel, gpu).controls


def test_parse_params_and_kernel_errors():
    assert parse_params(["m=8192", "scale=0.5", "dtype=bf16"]) == {
        "m": 8192, "scale": 0.5, "dtype": "bf16"
    }  # fmt: skip
    with pytest.raises(SweepError, match="KEY=VALUE"):
        parse_params(["m"])
    with pytest.raises(SweepError, match="no kernel given"):
        parse_kernel(None)
    with pytest.raises(SweepError, match="not both"):
        parse_kernel("sim:gemm", commands={"a": "true"})
    with pytest.raises(SweepError, match="known: gemm"):
        parse_kernel("sim:nope")
    with pytest.raises(SweepError, match="cannot import module"):
        parse_kernel("no_such_module_xyz:fn")
    with pytest.raises(SweepError, match="has no 'nope'"):
        parse_kernel("math:nope")
    with pytest.raises(SweepError, match="not callable"):
        parse_kernel("math:pi")
    with pytest.raises(SweepError, match="module:function"):
        parse_kernel("math")


@pytest.fixture
def kernels_module(tmp_path, monkeypatch):
    (tmp_path / "eopt_test_kernels.py").write_text(
        textwrap.dedent(
            """
            import time

            CALLS = []
            GPU = None

            def matmul(impl, size):
                CALLS.append((impl, size))
                with GPU.busy():
                    time.sleep(0.002 if impl == "fast" else 0.004)

            def fast():
                with GPU.busy():
                    time.sleep(0.002)

            def slow():
                with GPU.busy():
                    time.sleep(0.004)

            def broken(impl):
                if impl == "bad":
                    raise ValueError("out of memory")

            SYNCS = []

            def sync():
                SYNCS.append(1)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import eopt_test_kernels

    yield eopt_test_kernels
    sys.modules.pop("eopt_test_kernels", None)


def test_one_callable_gets_impl_and_params(kernels_module, wall_gpu, tmp_path):
    kernels_module.GPU = wall_gpu
    kernel = parse_kernel(
        "eopt_test_kernels:matmul", params={"size": 64}, impls=["fast", "slow"],
        sync="eopt_test_kernels:sync",
    )  # fmt: skip
    assert isinstance(kernel, PythonKernel) and kernel.name == "matmul"
    grid = Grid.build(kernel, wall_gpu, clocks="1410,1200")
    result = sweep(kernel, grid, wall_gpu, tmp_path / "m.jsonl", policy=TINY)
    assert {c for c in kernels_module.CALLS} == {("fast", 64), ("slow", 64)}
    assert kernels_module.SYNCS  # the --sync hook, not the device's, closes each window
    by = {(s.impl, s.op_point.sm_clock_mhz): s for s in result.signatures}
    assert set(by) == {("fast", 1410.0), ("slow", 1410.0), ("fast", 1200.0), ("slow", 1200.0)}
    for sig in result.signatures:
        assert sig.static_power == pytest.approx(50.0, rel=0.05)
        assert sig.mean_power < 200.0 * 1.01  # never above the busy draw
        assert sig.meta["method"] == "counter" and sig.meta["kernel_kind"] == "python"
        assert sig.workload == {"size": 64}
    assert by[("slow", 1410.0)].time > by[("fast", 1410.0)].time
    assert wall_gpu.sets and wall_gpu.op == wall_gpu.original  # restored at the end


def test_one_callable_per_implementation(kernels_module, wall_gpu, tmp_path):
    kernels_module.GPU = wall_gpu
    kernel = parse_kernel("eopt_test_kernels:fast,eopt_test_kernels:slow", name="mm")
    assert kernel.implementations() == ["fast", "slow"]
    with pytest.raises(SweepError, match="--impls does not apply"):
        parse_kernel("eopt_test_kernels:fast,eopt_test_kernels:slow", impls=["a"])
    result = sweep(kernel, Grid.build(kernel, wall_gpu), wall_gpu, tmp_path / "m.jsonl",
                   policy=TINY, control=False)  # fmt: skip
    assert [s.impl for s in result.signatures] == ["fast", "slow"]
    assert all(s.name == "mm" for s in result.signatures)
    assert wall_gpu.sets == []  # --no-control: never touched


def test_shell_commands_are_implementations(wall_gpu, tmp_path):
    kernel = parse_kernel(None, commands={"quick": "true", "nap": "sleep 0.02"}, name="job")
    assert isinstance(kernel, CommandKernel)
    result = sweep(kernel, Grid.build(kernel, wall_gpu), wall_gpu, tmp_path / "c.jsonl",
                   policy=TINY, control=False)  # fmt: skip
    by = {s.impl: s for s in result.signatures}
    assert by["nap"].time >= 0.02 and by["nap"].time > by["quick"].time
    failing = parse_kernel(None, commands={"bad": "exit 3"})
    with pytest.raises(MeasureError, match="exited with status 3"):
        sweep(failing, Grid.build(failing, wall_gpu), wall_gpu, tmp_path / "f.jsonl",
              policy=TINY, control=False)  # fmt: skip


def test_real_work_is_refused_on_the_simulated_gpu(kernels_module, tmp_path):
    gpu = SimulatedGPU()
    kernel = parse_kernel("eopt_test_kernels:fast")
    with pytest.raises(MeasureError, match="cannot see a real process"):
        sweep(kernel, Grid.build(kernel, gpu), gpu, tmp_path / "x.jsonl", policy=TINY)
    assert not (tmp_path / "x.jsonl").exists()


def test_sim_kernels_only_run_on_the_simulated_gpu(wall_gpu, tmp_path):
    kernel = parse_kernel("sim:gemm", impls=["cublas"])
    with pytest.raises(SweepError, match="--backend sim"):
        sweep(kernel, Grid.build(kernel, wall_gpu), wall_gpu, tmp_path / "x.jsonl",
              policy=TINY, control=False)  # fmt: skip


def test_a_failing_callable_names_the_cell_and_keeps_finished_ones(
    kernels_module, wall_gpu, tmp_path
):
    kernel = parse_kernel("eopt_test_kernels:broken", impls=["good", "bad"])
    out = tmp_path / "b.jsonl"
    with pytest.raises(KernelError, match="implementation 'bad' raised ValueError: out of memory"):
        sweep(kernel, Grid.build(kernel, wall_gpu, clocks="1410"), wall_gpu, out, policy=TINY)
    from eopt.model.library import read_library

    assert [s.impl for s in read_library(out)] == ["good"]
    assert wall_gpu.op == wall_gpu.original


def test_kernels_given_by_file_path_are_named_after_the_file(tmp_path, monkeypatch):
    from eopt.runs import user_code

    monkeypatch.setattr(user_code._FINDER, "folders", [])  # forget the folder afterwards
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "eopt_path_kernels.py").write_text(
        "def fast():\n    pass\n\ndef slow():\n    pass\n"
    )
    with pytest.raises(SweepError, match="cannot import module 'eopt_path_kernels'"):
        parse_kernel("eopt_path_kernels:fast")  # not in the working directory itself
    try:
        kernel = parse_kernel("sub/eopt_path_kernels.py:fast,./sub/eopt_path_kernels.py:slow")
        assert kernel.name == "eopt_path_kernels" and kernel.implementations() == ["fast", "slow"]
        # One file is one module: both specs share it (e.g. a kernel and its --sync).
        assert kernel.functions["fast"].__module__ == kernel.functions["slow"].__module__
        one = parse_kernel("sub/eopt_path_kernels.py:fast")
        assert one.name == "fast" and one.functions["default"] is kernel.functions["fast"]
    finally:
        sys.modules.pop("eopt_path_kernels", None)
