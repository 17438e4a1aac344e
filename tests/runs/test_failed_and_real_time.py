"""The failed-cells file beside a library, and simulated kernels that take wall time."""

from __future__ import annotations

import json
import time
from pathlib import Path

from eopt.model.operating_point import OperatingPoint
from eopt.runs.failed import FailedCell, append_failed, failed_path
from eopt.runs.gpus import GpuSpec


def test_failed_cells_lie_beside_the_library(tmp_path):
    assert failed_path(tmp_path / "lib.jsonl") == tmp_path / "lib.failed.jsonl"
    assert failed_path(Path("runs/lib")) == Path("runs/lib.failed.jsonl")
    cell = FailedCell("gemm", "cutlass", OperatingPoint(1410.0), {"m": 8192}, "A100",
                      "KernelError: boom", 3, {"host": "n1", "gpu": "sim2"})  # fmt: skip
    path = failed_path(tmp_path / "lib.jsonl")
    append_failed(path, cell)
    append_failed(path, cell)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2 and lines[0] == {
        "schema": "eopt.failed-cell/1", "name": "gemm", "impl": "cutlass",
        "op_point": {"sm_clock_mhz": 1410.0}, "workload": {"m": 8192},
        "device_model": "A100", "error": "KernelError: boom", "attempts": 3,
        "measured_on": {"host": "n1", "gpu": "sim2"},
    }  # fmt: skip


def test_a_real_time_simulated_kernel_takes_wall_time_and_keeps_its_numbers(gemm):
    spec = GpuSpec("sim", 0, "A100-SXM4-40GB", 3)
    plain, slow = gemm(), gemm(wall_s_per_sim_s=20.0)
    first, second = spec.open(), spec.open()
    started = time.perf_counter()
    simulated = slow.runner("cublas", first)
    simulated()
    took = time.perf_counter() - started
    reference = plain.runner("cublas", second)
    reference()
    duration = first.kernel_records()[-1].duration_s
    assert duration == second.kernel_records()[-1].duration_s  # the simulator's numbers
    assert took >= 20.0 * duration > 0.05  # and the wall time it was asked to take
