"""The shipped simulator parameters against measured data: the Perseus A100 stage profiles,
and the profiles fitted per GPU (NV-DVFS V100 and RTX 8000 kernels).

Independent truth: ``perseus_sosp24/stage_profile/{gpt3-175b,bloom}+a100_sxm_bf16.csv``,
one microbatch's forward/backward time and energy on an A100-SXM4-80GB at 38 locked clocks.
Targets: time within 3 %, energy within 5 % at every clock of every stage.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from eopt.devices import OperatingPoint
from eopt.sim.gpu import SimulatedGPU
from eopt.sim.kernels import get_kernel
from eopt.sim.physics import KernelDemand, steady_state_run
from eopt.sim.profiles import load_profile

CURVES = {
    "perseus_gpt3_fwd": ("gpt3-175b+a100_sxm_bf16.csv", "forward"),
    "perseus_gpt3_bwd": ("gpt3-175b+a100_sxm_bf16.csv", "backward"),
    "perseus_bloom_fwd": ("bloom+a100_sxm_bf16.csv", "forward"),
    "perseus_bloom_bwd": ("bloom+a100_sxm_bf16.csv", "backward"),
}


Measured = Callable[[str, int], dict[str, np.ndarray]]


@pytest.fixture
def measured(data_file: Callable[[str], Path]) -> Measured:
    """``measured(kernel, stage)``: Perseus's measured curve (clock MHz, time s, energy J)."""

    def read(kernel: str, stage: int) -> dict[str, np.ndarray]:
        filename, instruction = CURVES[kernel]
        path = data_file(f"perseus_sosp24/stage_profile/{filename}")
        with open(path, newline="") as handle:
            rows = sorted(
                (float(r["frequency"]), float(r["time"]), float(r["energy"]))
                for r in csv.DictReader(handle)
                if int(r["stage"]) == stage and r["instruction"] == instruction
            )
        arr = np.array(rows)
        return {"clock": arr[:, 0], "time": arr[:, 1], "energy": arr[:, 2]}

    return read


def _model(kernel: str, stage: int, clocks: np.ndarray) -> dict[str, np.ndarray]:
    profile = load_profile("A100-SXM4-80GB")
    demand = get_kernel(kernel).demand(profile, None, {"stage": stage})
    return steady_state_run(
        profile.physics,
        demand,
        clocks,
        profile.power_limit_default_w,
        profile.max_sm_clock_mhz,
        profile.min_sm_clock_mhz,
    )


@pytest.mark.parametrize("kernel", sorted(CURVES))
@pytest.mark.parametrize("stage", range(8))
def test_shipped_parameters_reproduce_every_measured_clock(
    kernel: str, stage: int, measured: Measured
):
    data = measured(kernel, stage)
    assert len(data["clock"]) == 38
    model = _model(kernel, stage, data["clock"])
    time_err = np.abs(model["duration_s"] / data["time"] - 1.0)
    energy_err = np.abs(model["energy_j"] / data["energy"] - 1.0)
    worst = int(np.argmax(energy_err))
    assert time_err.max() <= 0.03, f"time off by {time_err.max():.1%}"
    assert energy_err.max() <= 0.05, (
        f"energy off by {energy_err.max():.1%} at {data['clock'][worst]:g} MHz"
    )


@pytest.mark.parametrize("kernel", sorted(CURVES))
def test_energy_is_u_shaped_with_the_measured_minimum(kernel: str, measured: Measured):
    data = measured(kernel, 0)
    clocks = np.array(load_profile("A100-SXM4-80GB").sm_clocks_mhz[::-1])
    clocks = clocks[clocks >= 855]
    model = _model(kernel, 0, clocks)
    f_model = clocks[int(np.argmin(model["energy_j"]))]
    f_data = data["clock"][int(np.argmin(data["energy"]))]
    assert abs(f_model - f_data) <= 45  # within three 15 MHz steps of the measured minimum
    # Both ends cost more than the minimum: lowest clocks are dominated (slower and costlier).
    assert model["energy_j"][0] > model["energy_j"].min() * 1.02
    assert model["energy_j"][-1] > model["energy_j"].min() * 1.2
    assert np.all(np.diff(model["duration_s"]) < 0)  # time keeps rising as the clock drops


def test_the_simulated_gpu_itself_reproduces_measured_points_once_warm(measured: Measured):
    gpu = SimulatedGPU("A100-SXM4-80GB", noise=False)
    data = measured("perseus_gpt3_fwd", 0)
    for mhz in (1410.0, 1080.0, 855.0):
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=mhz))
        for _ in range(1200):  # ~70 s of virtual time: the thermal state settles
            gpu.launch("perseus_gpt3_fwd", workload={"stage": 0})
        e0 = gpu.true_energy_j()
        seconds = gpu.launch("perseus_gpt3_fwd", workload={"stage": 0})
        joules = gpu.true_energy_j() - e0
        i = int(np.flatnonzero(data["clock"] == mhz)[0])
        assert seconds == pytest.approx(data["time"][i], rel=0.03)
        assert joules == pytest.approx(data["energy"][i], rel=0.05)


# --- Profiles beyond the A100: fitted per GPU by benchmarks/sim_calibration.py --gpus ---

FITTED = (
    "A40",
    "V100-PCIE-16GB",
    "Quadro-RTX-8000",
    "GTX-1080-Ti",
    "RTX-2070-SUPER",
    "P100-PCIE-16GB",
    "Quadro-RTX-6000",
)


@pytest.mark.parametrize("model", FITTED)
def test_every_fitted_profile_says_what_it_was_fitted_to_and_how_well(model: str):
    profile = load_profile(model)
    assert not profile.extrapolated
    assert "Held-out" in profile.provenance and "unified_modes.csv" in profile.provenance
    gpu = SimulatedGPU(model, noise=False)
    seconds = gpu.launch("gemm")  # the simulator runs on it
    assert seconds > 0 and gpu.true_energy_j() > 0


@pytest.mark.parametrize("model", ["H100-SXM5-80GB", "H200-SXM-141GB"])
def test_h100_and_h200_are_marked_as_extrapolations(model: str):
    profile = load_profile(model)
    assert profile.extrapolated
    assert profile.provenance.startswith("EXTRAPOLATION")


def _nv_dvfs_times(path: Path) -> dict[str, dict[float, float]]:
    """kernel → {core clock MHz: time} of an NV-DVFS real-kernel profile."""
    out: dict[str, dict[float, float]] = {}
    with open(path, newline="") as handle:
        for r in csv.DictReader(handle):
            out.setdefault(r["benchmark"], {})[float(r["core_frequency"])] = float(r["time"])
    return out


def _memory_only_slowdown(model: str, clock_mhz: float) -> float:
    profile = load_profile(model)
    demand = KernelDemand(compute_s=1e-6, memory_s=1e-3, activity=0.3, mem_activity=1.0)
    f_max = profile.max_sm_clock_mhz
    out = steady_state_run(
        profile.physics, demand, np.array([clock_mhz, f_max]), 1e9, f_max, profile.min_sm_clock_mhz
    )
    return float(out["duration_s"][0] / out["duration_s"][1])


@pytest.mark.parametrize(
    ("model", "filename", "low_mhz"),
    [
        # 502 MHz: the V100's lowest clock the fit used (at 405 MHz the board ran slower
        # than its set clock; see the profile's provenance).
        ("V100-PCIE-16GB", "v100-dvfs-real-profile.csv", 502.0),
        ("Quadro-RTX-8000", "rtx8000-dvfs-real-profile.csv", 705.0),
    ],
)
def test_memory_bound_kernels_slow_down_at_low_clocks_as_measured(
    model: str, filename: str, low_mhz: float, data_file: Callable[[str], Path]
):
    times = _nv_dvfs_times(data_file(f"dvfs/nv_dvfs_benchmark/{filename}"))
    top = max(next(iter(times.values())))
    # Memory-bound in the data: time nearly flat from the top clock down to ~0.7 of it.
    slowdowns = []
    for t in times.values():
        mid = min(t, key=lambda f: abs(f - 0.7 * top))
        if t[mid] / t[top] - 1 < (top / mid - 1) / 3:
            slowdowns.append(t[low_mhz] / t[top])
    assert len(slowdowns) >= 4
    sim = _memory_only_slowdown(model, low_mhz)
    assert min(slowdowns) * 0.95 <= sim <= max(slowdowns) * 1.05
    assert sim > 1.0 + 0.1 * (model == "V100-PCIE-16GB")  # no longer blind to the clock


def _median_energy_optimal_fraction(curves: dict[str, dict[float, tuple[float, float]]]) -> float:
    """Median over kernels of (clock of least time × power) / highest clock."""
    fractions = []
    for points in curves.values():
        best = min(points, key=lambda f: points[f][0] * points[f][1])
        fractions.append(best / max(points))
    return float(np.median(fractions))


def _sim_energy_optimal_fraction(model: str, clocks: list[float], demand: KernelDemand) -> float:
    profile = load_profile(model)
    c = np.array(clocks)
    out = steady_state_run(
        profile.physics, demand, c, 1e9, profile.max_sm_clock_mhz, profile.min_sm_clock_mhz
    )
    return float(c[int(np.argmin(out["energy_j"]))] / c.max())


def test_the_energy_optimal_clock_differs_across_profiles_as_in_the_data(
    data_file: Callable[[str], Path],
):
    v100: dict[str, dict[float, tuple[float, float]]] = {}
    with open(data_file("dvfs/nv_dvfs_benchmark/v100-dvfs-real-profile.csv"), newline="") as h:
        for r in csv.DictReader(h):
            if float(r["core_frequency"]) > 450:  # the clocks the V100 fit used
                v100.setdefault(r["benchmark"], {})[float(r["core_frequency"])] = (
                    float(r["time"]),
                    float(r["average_power"]),
                )
    rtx2070: dict[str, dict[float, tuple[float, float]]] = {}
    path = data_file("dvfs/hkbu_gpu_dvfs_job_schedule/gtx2070s-dvfs-real-Performance-Power.csv")
    with open(path, newline="") as h:
        rows = list(csv.DictReader(h))
    top_mem = max(float(r["memF"]) for r in rows)
    for r in rows:
        if float(r["memF"]) == top_mem:
            rtx2070.setdefault(r["appName"], {})[float(r["coreF"])] = (
                float(r["time/ms"]),
                float(r["power/W"]),
            )
    data_v100 = _median_energy_optimal_fraction(v100)
    data_2070 = _median_energy_optimal_fraction(rtx2070)
    assert data_2070 > data_v100 + 0.1  # the data: the RTX 2070S saves energy near its top
    v100_clocks = sorted({f for points in v100.values() for f in points})
    clocks_2070 = sorted({f for points in rtx2070.values() for f in points})
    for demand in (
        KernelDemand(1e-3, 1e-5, 1.0, 0.3),  # compute-bound
        KernelDemand(1e-3, 2e-4, 0.7, 0.5),
        KernelDemand(1e-3, 1e-3, 0.5, 0.8),  # balanced
    ):
        sim_v100 = _sim_energy_optimal_fraction("V100-PCIE-16GB", v100_clocks, demand)
        sim_2070 = _sim_energy_optimal_fraction("RTX-2070-SUPER", clocks_2070, demand)
        assert sim_2070 > sim_v100 + 0.1
        assert abs(sim_v100 - data_v100) <= 0.15
