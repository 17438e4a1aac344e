"""A cell is its kernel, κ, θ, ω and GPU model — never one GPU — and records where it ran;
a simulated cell's numbers depend only on the seed and the cell."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from eopt.model.library import cell_key, read_library
from eopt.runs.gpus import GpuSpec, place_of, seed_for
from eopt.runs.sweep import Grid, SweepError, sweep


def test_a_cell_measured_on_one_gpu_counts_for_every_gpu_of_its_model(tmp_path, gemm, fast):
    kernel = gemm(impls=("cublas", "cutlass"))
    first, second = GpuSpec("sim", 0, "A100-SXM4-40GB", 3), GpuSpec("sim", 1, "A100-SXM4-40GB", 3)
    grid = Grid.build(kernel, first.open(), clocks="1410,1005")
    lib = tmp_path / "lib.jsonl"
    sweep(kernel, grid, first, lib, policy=fast)
    with pytest.raises(SweepError, match="already holds 4 of this sweep's 4 cells"):
        sweep(kernel, grid, second, lib, policy=fast)
    again = sweep(kernel, grid, second, lib, policy=fast, resume=True)
    assert again.measured == () and again.skipped == 4
    cells = read_library(lib)
    assert len(cells) == 4
    for sig in cells:
        assert sig.meta["measured_on"] == {"host": socket.gethostname(), "gpu": "sim0", "index": 0}
        assert sig.devices == ("sim0",)


def test_a_gpu_of_another_model_measures_its_own_cells(tmp_path, gemm, fast):
    kernel = gemm(impls=("cublas",))
    a100, h100 = GpuSpec("sim", 0, "A100-SXM4-40GB", 3), GpuSpec("sim", 0, "H100-SXM5-80GB", 3)
    lib = tmp_path / "lib.jsonl"
    sweep(kernel, Grid.build(kernel, a100.open(), clocks="1410"), a100, lib, policy=fast)
    other = sweep(
        kernel, Grid.build(kernel, h100.open(), clocks="1410"), h100, lib, policy=fast, resume=True
    )
    assert other.skipped == 0 and len(other.measured) == 1
    models = sorted(s.meta["device_model"] for s in read_library(lib))
    assert models == ["A100-SXM4-40GB", "H100-SXM5-80GB"]
    assert len({cell_key(s) for s in read_library(lib)}) == 2


def test_a_cell_is_the_same_swept_alone_on_another_gpu(
    tmp_path, gemm, fast, serial_library, by_cell
):
    # One cell of the acceptance grid, swept alone, on GPU 2 instead of GPU 0, after
    # nothing else ran: the numbers of the full serial sweep, window for window.
    kernel = gemm(impls=("cutlass",))
    spec = GpuSpec("sim", 2, "A100-SXM4-40GB", 3)
    alone = sweep(kernel, Grid.build(kernel, spec.open(), clocks="1005"), spec,
                  tmp_path / "alone.jsonl", policy=fast)  # fmt: skip
    (sig,) = alone.measured
    assert sig.devices == ("sim2",) and sig.meta["measured_on"]["index"] == 2
    reference = by_cell(read_library(serial_library))
    assert by_cell([sig])[cell_key(sig)] == reference[cell_key(sig)]
    # …and the seed matters: another seed measures other numbers.
    reseeded = GpuSpec("sim", 2, "A100-SXM4-40GB", 4)
    other = sweep(kernel, Grid.build(kernel, spec.open(), clocks="1005"), reseeded,
                  tmp_path / "other.jsonl", policy=fast)  # fmt: skip
    assert by_cell(other.measured)[cell_key(sig)] != reference[cell_key(sig)]


def test_cell_seeds_are_stable_and_distinct():
    assert seed_for(3, "a") == seed_for(3, "a")
    assert len({seed_for(3, "a"), seed_for(3, "b"), seed_for(4, "a")}) == 3
    assert 0 <= seed_for(3, "a") < 2**64


def test_a_real_gpu_is_recorded_by_uuid():
    gpu = SimpleNamespace(name="gpu1", index=1, uuid="GPU-8f2c-0001")
    assert place_of(gpu) == {  # type: ignore[arg-type]
        "host": socket.gethostname(),
        "gpu": "gpu1",
        "index": 1,
        "uuid": "GPU-8f2c-0001",
    }
