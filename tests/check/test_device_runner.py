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
from eopt.sim.gpu import SimulatedGPU


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


class _WallGpu:
    """A stand-in GPU on wall time: draws ``busy_w`` while a job runs, ``idle_w`` else."""

    def __init__(self, name: str, idle_w: float = 50.0, busy_w: float = 250.0) -> None:
        from eopt.devices.base import WallClock

        self.name, self.clock = name, WallClock()
        self.idle_w, self.busy_w = idle_w, busy_w
        self._t, self._e, self._busy = self.clock.now(), 0.0, False

    def _advance(self) -> None:
        now = self.clock.now()
        self._e += (self.busy_w if self._busy else self.idle_w) * (now - self._t)
        self._t = now

    def work(self, seconds: float) -> None:
        self._advance()
        self._busy = True
        self.clock.sleep(seconds)
        self._advance()
        self._busy = False

    def energy_counter_j(self) -> float:
        self._advance()
        return self._e

    def temperature_c(self) -> float:
        return 40.0

    def synchronize(self) -> None:
        """The work above is synchronous."""

    def power(self) -> object:
        from eopt.devices.base import PowerReading

        return PowerReading(self.clock.now(), self.idle_w, "instant")

    def current_operating_point(self) -> object:
        from eopt.model.operating_point import OperatingPoint

        return OperatingPoint()


def test_two_gpus_run_in_threads_and_see_each_other_as_co_runners() -> None:
    a, b = _WallGpu("gpu0"), _WallGpu("gpu1")
    els = {
        "left": CallableElement(lambda: a.work(0.2)),
        "right": CallableElement(lambda: b.work(0.2)),
    }
    runner = DeviceRunner(els, {"gpu0": a, "gpu1": b}, cooldown_s=0.0)
    rs = runner.run([Job("left", "gpu0", 0.0, 0.2), Job("right", "gpu1", 0.0, 0.2)], 2)
    for run in rs.jobs:
        left, right = run
        # Started together on two threads: each ran while the other did.
        assert left.co_runners == ("right",) and right.co_runners == ("left",)
        assert left.device == "gpu0" and right.device == "gpu1"
        # A job's energy is its GPU's counter across it: busy power over its time.
        assert left.energy_j == pytest.approx(250.0 * left.time_s, rel=0.05)
    # The run's energy is both GPUs' counters over the run.
    assert np.all(rs.energy_j >= rs.device_energy_j["gpu0"] + rs.device_energy_j["gpu1"] - 1e-9)
    assert np.all(rs.device_energy_j["gpu0"] > 0) and np.all(rs.device_energy_j["gpu1"] > 0)
