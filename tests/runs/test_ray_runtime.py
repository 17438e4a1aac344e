"""What a Ray sweep refuses before it starts, and how a worker finds its GPU and kernel."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from eopt.runs.gpus import GpuSpec
from eopt.runs.ray_runtime import RayMissingError, RaySweepError, import_ray, ray_runtime
from eopt.runs.ray_sweep import ray_sweep
from eopt.runs.ray_worker import PortableKernel, portable_kernel, worker_gpu
from eopt.runs.sweep import Grid, SweepError, parse_kernel


def test_without_ray_the_message_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an environment without Ray sees
    with pytest.raises(RayMissingError, match=r"pip install 'eopt\[ray\]'") as info:
        import_ray(local=True)
    assert "\n" not in str(info.value)


def test_a_measure_only_sweep_is_not_spread(tmp_path, gemm, sim_spec):
    kernel = gemm()
    grid = Grid.build(kernel, sim_spec.open())  # sets nothing: one point
    with pytest.raises(SweepError, match="nothing to spread"):
        ray_sweep(kernel, grid, sim_spec.open(), sim_spec, tmp_path / "l.jsonl")
    assert not (tmp_path / "l.jsonl").exists()


def test_no_runtime_to_use_is_said():
    not_connected: Any = SimpleNamespace(is_initialized=lambda: False)
    nowhere = ray_runtime(not_connected, None, None)
    with pytest.raises(RaySweepError, match="no Ray runtime to use"), nowhere:
        pass
    no_gpus = ray_runtime(not_connected, "local", None)
    with pytest.raises(RaySweepError, match="--gpus 0,1,2,3"), no_gpus:
        pass


def test_a_simulated_worker_takes_the_index_ray_gave_it():
    template = GpuSpec("sim", 0, "A100-SXM4-40GB", 3)
    assert worker_gpu(template, [2], simulated=True) == template.at(2)
    assert worker_gpu(template, ["3"], simulated=True).index == 3
    with pytest.raises(RaySweepError, match="simulated GPUs take indices"):
        worker_gpu(template, ["GPU-8f2c"], simulated=True)
    with pytest.raises(RaySweepError, match="without a GPU"):
        worker_gpu(template, [], simulated=True)


def test_a_python_kernel_travels_as_its_spec_and_is_imported_again(tmp_path):
    source = tmp_path / "kernels.py"
    source.write_text("def work(impl, n):\n    return f'{impl}:{n * 2}'\n")
    spec = f"{source}:work"
    kernel = parse_kernel(spec, params={"n": 21}, impls=["a", "b"], sync="none")
    shipped = portable_kernel(kernel)
    assert isinstance(shipped, PortableKernel) and shipped.spec == spec
    rebuilt = shipped.build()
    assert rebuilt.implementations() == ["a", "b"] and rebuilt.workload == {"n": 21}
    assert rebuilt.runner("b", None)() == "b:42"  # type: ignore[arg-type]
    assert rebuilt.sync_spec == "none" and rebuilt.name == kernel.name
    sim = parse_kernel("sim:gemm")
    assert portable_kernel(sim) is sim  # plain data travels as it is
