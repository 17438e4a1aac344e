"""Fitting the simulated GPU: known parameters back from its own physics, held-out error
on real measurements, and `eopt sim fit` (its output, its refusals)."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from eopt.cli.sim import command as sim_command
from eopt.devices import OperatingPoint
from eopt.model.library import write_library
from eopt.model.signature import Signature
from eopt.sim.fit import (
    MeasuredTable,
    SimFit,
    SimFitError,
    fit_sim,
    holdout_error,
    read_library_table,
)
from eopt.sim.gpu import SimulatedGPU
from eopt.sim.physics import KernelDemand
from eopt.sim.profiles import load_profile

BASE = load_profile("V100-PCIE-16GB")
F_MAX = BASE.max_sm_clock_mhz
# A GPU unlike the base profile's physics: the fit has to move every shared parameter.
TRUTH = replace(
    BASE.physics,
    v_min=0.70,
    knee_mhz=0.62 * F_MAX,
    v_gamma=1.8,
    p_const_w=38.0,
    p_leak_w=30.0,
    mem_core_share=0.55,
)
KERNELS = {
    "gemm": KernelDemand(2e-3, 2e-4, 0.95, 0.4, 4.0, 0.0),
    "stream": KernelDemand(1e-4, 1.5e-3, 0.25, 1.0, 4.0, 0.0),
    "stencil": KernelDemand(8e-4, 7e-4, 0.6, 0.8, 4.0, 0.0),
    "reduce": KernelDemand(3e-4, 9e-4, 0.4, 0.9, 4.0, 0.0),
}
CLOCKS = np.array([405.0, 502.0, 600.0, 705.0, 802.0, 945.0, 1087.0, 1237.0, 1380.0])


def _truth_fit() -> SimFit:
    return SimFit(TRUTH, KERNELS, F_MAX, BASE.min_sm_clock_mhz, float("nan"), 250.0)


def _synthetic_library(
    path: Path, kernels: tuple[str, ...] = tuple(KERNELS), clocks: np.ndarray = CLOCKS
) -> Path:
    """A library as a sweep of the true GPU would record it (no noise)."""
    rows = [
        {"kernel": k, "sm_clock_mhz": f, "time_s": 1.0, "power_w": 1.0}
        for k in kernels
        for f in clocks
    ]
    table = MeasuredTable.from_rows(rows)
    out = _truth_fit().predict(table)
    sigs = [
        Signature(
            name=k,
            static_power=float(out["static_power_w"][i]),
            time=float(out["time_s"][i]),
            dynamic_energy=float((out["power_w"][i] - out["static_power_w"][i]) * out["time_s"][i]),
            devices=("gpu0",),
            op_point=OperatingPoint(sm_clock_mhz=float(table.sm_clock_mhz[i])),
            meta={"device_model": "V100-PCIE-16GB"},
        )
        for i, k in enumerate(table.kernel)
    ]
    write_library(path, sigs)
    return path


def test_fit_recovers_the_physics_that_generated_a_library(tmp_path: Path):
    table, model = read_library_table(_synthetic_library(tmp_path / "lib.jsonl"))
    assert model == "V100-PCIE-16GB" and len(table) == len(KERNELS) * len(CLOCKS)
    start = replace(
        TRUTH, v_min=0.85, knee_mhz=0.8 * F_MAX, p_const_w=20.0, p_leak_w=60.0, mem_core_share=0.2
    )
    fit = fit_sim(table, BASE, start=start)
    got = fit.physics
    assert got.v_min == pytest.approx(TRUTH.v_min, abs=0.02)
    assert got.knee_mhz == pytest.approx(TRUTH.knee_mhz, rel=0.05)
    assert got.p_const_w == pytest.approx(TRUTH.p_const_w, rel=0.1)
    assert got.p_leak_w == pytest.approx(TRUTH.p_leak_w, rel=0.15)
    assert got.mem_core_share == pytest.approx(TRUTH.mem_core_share, abs=0.05)
    for name, true in KERNELS.items():
        assert fit.demands[name].compute_s == pytest.approx(true.compute_s, rel=0.1)
        assert fit.demands[name].memory_s == pytest.approx(true.memory_s, rel=0.1)
    out = fit.predict(table)
    assert np.allclose(out["time_s"], table.time_s, rtol=0.01)
    assert np.allclose(out["power_w"], table.power_w, rtol=0.01)


def _nv_dvfs(path: Path, kernels: int | None = None) -> MeasuredTable:
    """NV-DVFS per-kernel profile (time in ms) as a table; memory-bound by DRAM activity."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    names = list(dict.fromkeys(r["benchmark"] for r in rows))[:kernels]
    picked = [r for r in rows if r["benchmark"] in names]
    return MeasuredTable.from_rows(
        (
            {
                "kernel": r["benchmark"],
                "sm_clock_mhz": float(r["core_frequency"]),
                "time_s": float(r["time"]) * 1e-3,
                "power_w": float(r["average_power"]),
            }
            for r in picked
        ),
        source=str(path),
    )


def test_held_out_clocks_of_a_real_gpu_are_predicted_within_a_few_percent(
    data_file: Callable[[str], Path],
):
    table = _nv_dvfs(data_file("dvfs/nv_dvfs_benchmark/rtx8000-dvfs-real-profile.csv"), 8)
    profile = load_profile("Quadro-RTX-8000")
    held = holdout_error(table, profile, "clocks")
    assert held.n_held >= 8 * 2
    assert held.power_err < 0.03 and held.time_err < 0.03
    assert held.power_err_max < 0.10


def test_held_out_kernels_are_predicted_from_four_clocks(data_file: Callable[[str], Path]):
    table = _nv_dvfs(data_file("dvfs/nv_dvfs_benchmark/rtx8000-dvfs-real-profile.csv"), 6)
    held = holdout_error(table, load_profile("Quadro-RTX-8000"), "kernels", folds=2)
    assert held.n_held == 6 * (10 - 4)
    assert held.power_err < 0.05 and held.time_err < 0.05


def _invoke(*args: str):
    return CliRunner().invoke(sim_command, list(args), catch_exceptions=False)


def test_sim_fit_writes_a_profile_the_simulator_runs(tmp_path: Path):
    lib = _synthetic_library(tmp_path / "lib.jsonl", ("gemm", "stream"))
    out = tmp_path / "my-gpu.json"
    result = _invoke("fit", str(lib), "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["base"] == "V100-PCIE-16GB"
    assert report["heldout"]["power_err"] < 0.02
    profile = load_profile(str(out))
    assert profile.physics.mem_core_share == pytest.approx(TRUTH.mem_core_share, abs=0.1)
    assert "eopt sim fit" in profile.provenance
    gpu = SimulatedGPU(str(out), noise=False)
    assert gpu.profile.max_sm_clock_mhz == F_MAX
    # The table form names the held-out error and where the profile went.
    text = _invoke("fit", str(lib), "--holdout", "kernels", "--base", "V100-PCIE-16GB")
    assert text.exit_code == 0, text.output
    assert "Held-out error (kernels)" in text.output and "memory-bound" in text.output


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such signature library"),
        ("", "no signatures"),
        ("{not json\n", ":1"),
        ("LINE_WITHOUT_CLOCK", "has no op_point.sm_clock_mhz"),
        ("TWO_CLOCKS", "fewer than 3 settings"),
    ],
)
def test_a_bad_library_gets_one_line_naming_the_file_and_the_fix(
    tmp_path: Path, content: str | None, expected: str
):
    lib = tmp_path / "bad.jsonl"
    sig = Signature(name="k", static_power=50.0, time=1e-3, dynamic_energy=0.1)
    if content == "LINE_WITHOUT_CLOCK":
        write_library(lib, [sig] * 3)
    elif content == "TWO_CLOCKS":
        write_library(
            lib, [replace(sig, op_point=OperatingPoint(sm_clock_mhz=f)) for f in (900.0, 1200.0)]
        )
    elif content is not None:
        lib.write_text(content, encoding="utf-8")
    result = _invoke("fit", str(lib))
    assert result.exit_code == 1
    assert expected in result.output and str(lib) in result.output
    assert "Traceback" not in result.output
    with pytest.raises(SimFitError):
        read_library_table(lib)


def test_too_few_clocks_to_hold_out_is_refused_with_the_option_named(tmp_path: Path):
    sig = Signature(name="k", static_power=50.0, time=1e-3, dynamic_energy=0.1)
    lib = tmp_path / "three.jsonl"
    write_library(
        lib,
        [replace(sig, op_point=OperatingPoint(sm_clock_mhz=f)) for f in (900.0, 1000.0, 1200.0)],
    )
    result = _invoke("fit", str(lib))
    assert result.exit_code == 1 and "--holdout clocks" in result.output
    assert "at least 4" in result.output
