"""The real-GPU runner of ``eopt check``, driven here through simulated GPUs.

Its elements are callables that queue work on a device; a simulated GPU stands in for the
NVIDIA one (same ``Device`` protocol: energy counter, clocks, temperature), so the
runner's timing, accounting and protocol hooks run for real.
"""

from __future__ import annotations

import numpy as np
import pytest

from eopt.calculus.schedule import Placement
from eopt.check.device_runner import CallableElement, DeviceRunner
from eopt.check.runner import Job
from eopt.check.workflow import characterize_element, check_schedule
from eopt.devices.sim import SimulatedGPU


def _launcher(gpu: SimulatedGPU, kernel: str, **workload: float) -> CallableElement:
    def run() -> None:
        gpu.launch(kernel, None, workload or None)

    return CallableElement(run, spec=f"sim:{kernel}")


def test_a_chain_runs_back_to_back_and_its_energy_is_the_counters() -> None:
    gpu = SimulatedGPU(mechanisms="none", seed=3)
    els = {
        "mm": _launcher(gpu, "gemm", m=2048.0, n=2048.0, k=2048.0),
        "cp": _launcher(gpu, "memcpy", bytes=64.0 * 2**20),
    }
    runner = DeviceRunner(els, {"gpu0": gpu}, cooldown_s=0.1)
    jobs = [Job("mm", "gpu0", 0.0, 1e-4), Job("cp", "gpu0", 3e-4, 4e-4)]
    before = gpu.true_energy_j()
    rs = runner.run(jobs, 3)
    for run in rs.jobs:
        mm, cp = run
        # The copy follows the GEMM's actual end by the planned 0.2 ms gap.
        assert cp.start_s == pytest.approx(mm.start_s + mm.time_s + 2e-4, abs=1e-9)
        assert mm.energy_j > 0 and cp.energy_j > 0
        assert np.isfinite(mm.entry["temperature_c"])
    # The runs' energy is what the counter saw over each run (cool-downs excluded).
    assert rs.energy_j.sum() < gpu.true_energy_j() - before
    assert np.all(rs.energy_j > rs.jobs[0][0].energy_j)


def test_overlaps_on_one_gpu_and_clocks_without_control_are_refused() -> None:
    gpu = SimulatedGPU(mechanisms="none")
    els = {"a": _launcher(gpu, "layernorm"), "b": _launcher(gpu, "layernorm")}
    runner = DeviceRunner(els, {"gpu0": gpu})
    with pytest.raises(ValueError, match=r"overlap on gpu0.*--sim"):
        runner.run([Job("a", "gpu0", 0.0, 1e-3), Job("b", "gpu0", 5e-4, 1e-3)], 2)
    clocked = {"a": CallableElement(lambda: None, sm_clock_mhz=1200.0)}
    with pytest.raises(ValueError, match="--no-control"):
        DeviceRunner(clocked, {"gpu0": gpu}, control=False)


def test_the_workflow_finds_a_clock_change_through_the_device_runner() -> None:
    gpu = SimulatedGPU(mechanisms="clock_state", seed=5)

    def at(kernel: str, clock: float, **workload: float) -> CallableElement:
        return CallableElement(
            lambda: gpu.launch(kernel, None, workload or None), sm_clock_mhz=clock
        )

    els = {
        "fast": at("memcpy", 1410.0, bytes=256.0 * 2**20),
        "slow": at("gemm", 900.0, m=2048.0, n=2048.0, k=2048.0),
    }
    runner = DeviceRunner(els, {"gpu0": gpu}, cooldown_s=0.1)
    lib = {n: characterize_element(runner, n, "gpu0", 15) for n in els}
    t = lib["fast"].time
    placed = [
        Placement(lib["fast"].on("gpu0"), "gpu0", 0.0),
        Placement(lib["slow"].on("gpu0"), "gpu0", t),
    ]
    res = check_schedule(placed, list(lib.values()), runner, runs=15)
    assert res.deviation
    assert res.found[0].elements == ("fast", "slow")
    assert res.found[0].mechanism == "clock_state"
    gpu.restore()
