"""Interrupted sweeps resume to exactly the uninterrupted set of cells; GPUs are restored."""

from __future__ import annotations

import json
import random

import pytest

from eopt.model.library import read_library
from eopt.runs.repeat import RepeatPolicy
from eopt.runs.sweep import Cell, Grid, SweepError, parse_kernel, sweep
from eopt.sim.gpu import SimulatedGPU

# Short windows keep the tests fast; the counter path (the sim has one) resolves them.
FAST = RepeatPolicy(
    warmup=1, min_runs=3, min_time_s=0.0, min_window_s=0.2, settle_s=0.1, n_boot=100
)


def _setup(seed: int = 0):
    gpu = SimulatedGPU(seed=seed)
    kernel = parse_kernel("sim:layernorm", impls=["apex", "naive"])
    grid = Grid.build(kernel, gpu, clocks="1410,1200,1005", power_limits="300,400")
    return gpu, kernel, grid


def _cells(path) -> list[tuple[str, str]]:
    return [(s.impl, json.dumps(s.op_point.to_dict(), sort_keys=True)) for s in read_library(path)]


class CellFailedError(Exception):
    pass


@pytest.mark.parametrize("interrupt", [CellFailedError, KeyboardInterrupt])
def test_interrupted_sweep_resumes_to_the_same_cells(tmp_path, interrupt):
    gpu, kernel, grid = _setup()
    full = tmp_path / "full.jsonl"
    sweep(kernel, grid, gpu, full, policy=FAST)
    assert len(_cells(full)) == len(grid) == 12

    gpu, kernel, grid = _setup(seed=1)
    original = gpu.current_operating_point()
    out = tmp_path / "resumed.jsonl"
    stop_at = random.Random(7).randrange(1, len(grid))
    seen: list[Cell] = []

    def hook(cell: Cell) -> None:
        seen.append(cell)
        if len(seen) == stop_at + 1:
            raise interrupt()

    with pytest.raises(interrupt):
        sweep(kernel, grid, gpu, out, policy=FAST, before_cell=hook)
    # Finished cells are on disk; the device was put back at once.
    assert len(_cells(out)) == stop_at
    assert gpu.current_operating_point() == original

    result = sweep(kernel, grid, gpu, out, policy=FAST, resume=True)
    assert result.skipped == stop_at
    assert len(result.measured) == len(grid) - stop_at
    resumed = _cells(out)
    assert len(resumed) == len(set(resumed)), "duplicate cells after resume"
    assert sorted(resumed) == sorted(_cells(full))
    assert [s.impl for s in result.signatures] == [c.impl for c in grid.cells()]
    assert gpu.current_operating_point() == original


def test_rerunning_without_resume_is_refused_and_resume_measures_nothing(tmp_path):
    gpu, kernel, grid = _setup()
    out = tmp_path / "lib.jsonl"
    sweep(kernel, grid, gpu, out, policy=FAST)
    with pytest.raises(SweepError, match="--resume"):
        sweep(kernel, grid, gpu, out, policy=FAST)
    again = sweep(kernel, grid, gpu, out, policy=FAST, resume=True)
    assert again.measured == () and again.skipped == len(grid)
    assert len(read_library(out)) == len(grid)


def test_other_workloads_are_other_cells(tmp_path):
    gpu = SimulatedGPU()
    out = tmp_path / "lib.jsonl"
    for rows in (4096, 8192):
        kernel = parse_kernel("sim:layernorm", params={"rows": rows}, impls=["apex"])
        sweep(kernel, Grid.build(kernel, gpu, clocks="1410"), gpu, out, policy=FAST)
    sigs = read_library(out)
    assert sorted(s.workload["rows"] for s in sigs) == [4096.0, 8192.0]


def test_no_control_never_touches_the_device(tmp_path):
    gpu = SimulatedGPU(control=False)
    kernel = parse_kernel("sim:gemm", impls=["cublas", "cutlass"])
    result = sweep(kernel, Grid.build(kernel, gpu), gpu, tmp_path / "l.jsonl", policy=FAST,
                   control=False)  # fmt: skip
    assert {s.op_point for s in result.signatures} == {gpu.current_operating_point()}
    with pytest.raises(SweepError, match="no-control"):
        sweep(kernel, Grid.build(kernel, gpu, clocks="1200"), gpu, tmp_path / "m.jsonl",
              policy=FAST, control=False)  # fmt: skip


def test_sweep_signatures_follow_the_physics(tmp_path):
    # A compute-bound GEMM at a lower clock: slower, lower static power, less energy.
    gpu = SimulatedGPU(seed=3)
    kernel = parse_kernel("sim:gemm", impls=["cublas"])
    result = sweep(kernel, Grid.build(kernel, gpu, clocks="1410,1005"), gpu,
                   tmp_path / "g.jsonl", policy=FAST)  # fmt: skip
    fast, slow = result.signatures
    assert fast.op_point.sm_clock_mhz == 1410 and slow.op_point.sm_clock_mhz == 1005
    assert slow.time > fast.time * 1.2
    assert slow.static_power < fast.static_power
    assert slow.energy < fast.energy
    for sig in result.signatures:
        assert sig.meta["backend"] == "sim" and sig.meta["kernel_spec"] == "sim:gemm"
        # eopt's own request is not a readback: the simulator offers no clock readings,
        # so none are claimed.
        assert "op_point_readback" not in sig.meta
        assert sig.meta["op_point_set"] is True and sig.meta["sync"] == "device.synchronize"
        assert sig.meta["device_state"]["read"] == []
        assert sig.meta["device_state"]["sm_clock_mhz"] is None
        assert sig.devices == ("sim0",)
        assert sig.workload["kernel"] == "gemm"
