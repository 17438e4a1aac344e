"""``--ray``: a sweep over four simulated GPUs of one local Ray runtime equals the serial
sweep; failing cells end in LIB.failed.jsonl while the rest completes; Ctrl-C stops cleanly.

One runtime serves the whole module (starting one takes about ten seconds).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from eopt.devices.base import Device
from eopt.model.library import library_lock, read_library
from eopt.runs.failed import failed_path
from eopt.runs.ray_runtime import start_local_runtime
from eopt.runs.ray_sweep import ray_sweep
from eopt.runs.sweep import SimKernel

GPUS = ["0", "1", "2", "3"]


@pytest.fixture(scope="module")
def runtime() -> Iterator[Any]:
    ray = start_local_runtime(GPUS)
    # The broken kernels below live in this test module, which Ray's workers cannot
    # import: send them by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        yield ray
    finally:
        ray.shutdown()


@dataclass(frozen=True)
class BrokenKernel(SimKernel):
    """``sim:gemm`` whose ``always`` implementation raises on every GPU, and whose
    ``on_gpu2`` implementation raises on simulated GPU 2 only."""

    always: str = ""
    on_gpu2: str = ""

    def runner(self, impl: str, device: Device) -> Callable[[], object]:
        broken = impl == self.always or (impl == self.on_gpu2 and device.index == 2)
        if not broken:
            return super().runner(impl, device)

        def fail() -> None:
            raise RuntimeError(f"{impl} is broken on {device.name}")

        return fail


def test_a_ray_sweep_equals_the_serial_one_and_spreads_over_gpus(
    runtime, tmp_path, gemm, fast, sim_spec, acceptance_grid, serial_library, by_cell
):
    kernel = gemm()
    lib = tmp_path / "lib.jsonl"
    seen: list[dict[str, float]] = []
    result = ray_sweep(
        kernel, acceptance_grid(kernel), sim_spec.open(), sim_spec, lib, address=None,
        policy=fast, progress=lambda done, total, rates: seen.append(dict(rates)),
    )  # fmt: skip
    assert result.failed == () and result.duplicates == 0 and len(result.measured) == 18
    cells = read_library(lib)
    assert by_cell(cells) == by_cell(read_library(serial_library))
    gpus = {s.meta["measured_on"]["gpu"] for s in cells}
    assert len(gpus) > 1 and gpus <= {"sim0", "sim1", "sim2", "sim3"}
    assert all(s.devices == (s.meta["measured_on"]["gpu"],) for s in cells)
    assert seen and set(seen[-1]) == {f"{s.meta['measured_on']['host']}/sim{i}"
                                      for s in cells[:1] for i in range(4)}  # fmt: skip
    assert sum(r > 0 for r in seen[-1].values()) == len(gpus)  # a rate per GPU that worked
    assert not failed_path(lib).exists()
    # The runtime eopt started listens on the loopback address only.
    assert {n["NodeManagerAddress"] for n in runtime.nodes()} == {"127.0.0.1"}


def test_failing_cells_go_to_the_failed_file_and_the_rest_completes(
    runtime, tmp_path, fast, sim_spec, acceptance_grid, serial_library, by_cell, gemm
):
    base = gemm()
    kernel = BrokenKernel(**base.__dict__, always="cutlass", on_gpu2="cublas")
    lib = tmp_path / "lib.jsonl"
    warnings: list[str] = []
    result = ray_sweep(kernel, acceptance_grid(kernel), sim_spec.open(), sim_spec, lib,
                       address=None, policy=fast, warn=warnings.append)  # fmt: skip
    # Every cutlass cell failed three times (two retries) and was written off …
    failed = [json.loads(line) for line in failed_path(lib).read_text().splitlines()]
    assert sorted(f["op_point"]["sm_clock_mhz"] for f in failed) == [
        900.0, 1005.0, 1095.0, 1200.0, 1305.0, 1410.0
    ]  # fmt: skip
    for entry in failed:
        assert entry["impl"] == "cutlass" and entry["attempts"] == 3
        assert entry["error"].startswith("KernelError") or "cutlass is broken" in entry["error"]
        assert entry["schema"] == "eopt.failed-cell/1"
        assert entry["device_model"] == sim_spec.sim_model
    assert len(result.failed) == 6 and sum("gave up on" in w for w in warnings) == 6
    # … while cublas, broken on GPU 2 only, was measured elsewhere: the rest completed,
    # with the serial sweep's numbers.
    cells = read_library(lib)
    others = sorted(set(kernel.impls) - {"cutlass"})
    assert len(others) == 2 and sorted(s.impl for s in cells) == sorted(others * 6)
    assert all(s.meta["measured_on"]["gpu"] != "sim2" for s in cells if s.impl == "cublas")
    reference = by_cell(s for s in read_library(serial_library) if s.impl != "cutlass")
    assert by_cell(cells) == reference


def test_ctrl_c_stops_cleanly_and_resume_completes(
    runtime, tmp_path, gemm, fast, sim_spec, acceptance_grid, serial_library, by_cell
):
    kernel = gemm()
    lib = tmp_path / "lib.jsonl"

    def interrupt(done: int, total: int, rates: Any) -> None:
        if done >= 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ray_sweep(kernel, acceptance_grid(kernel), sim_spec.open(), sim_spec, lib,
                  address=None, gpus=2, policy=fast, progress=interrupt)  # fmt: skip
    # Every line written is a whole cell, and the library is free for the next run.
    partial = read_library(lib)
    assert 3 <= len(partial) < 18
    assert lib.read_text().endswith("\n")
    with library_lock(lib):
        pass
    result = ray_sweep(kernel, acceptance_grid(kernel), sim_spec.open(), sim_spec, lib,
                       address=None, gpus=2, policy=fast, resume=True)  # fmt: skip
    assert result.skipped == len(partial) and len(result.measured) == 18 - len(partial)
    assert by_cell(read_library(lib)) == by_cell(read_library(serial_library))
