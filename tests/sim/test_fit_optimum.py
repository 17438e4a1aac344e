"""Fits that choose the right clock: the optimum check, the U shape, what a fit cannot serve."""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from eopt.sim.fit import (
    MeasuredTable,
    _held_knob_values,
    cannot_serve,
    fit_sim,
    optimum_checks,
    u_shaped,
)
from eopt.sim.profiles import load_profile

PERSEUS = Path(__file__).resolve().parents[1] / "data" / "perseus_sosp24" / "stage_profile"


def _table(clocks: list[float], energy: list[float]) -> MeasuredTable:
    return MeasuredTable.from_rows(
        {"kernel": "k", "sm_clock_mhz": f, "time_s": 1.0, "power_w": e}
        for f, e in zip(clocks, energy, strict=True)
    )


def test_u_shape_needs_an_interior_minimum():
    assert u_shaped(np.array([3.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0]))
    assert not u_shaped(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]))
    # Order of the knob, not of the rows, decides.
    assert not u_shaped(np.array([2.0, 1.0, 3.0]), np.array([2.0, 1.0, 3.0]))


def test_optimum_check_counts_settings_and_the_energy_it_costs():
    clocks = [900.0, 1000.0, 1100.0, 1200.0, 1300.0]
    table = _table(clocks, [10.0, 9.0, 9.5, 9.05, 11.0])  # measured minimum at 1000
    far = SimpleNamespace(predict=lambda t: {"energy_j": np.array([5, 6, 7, 4, 8.0])})
    (check,) = optimum_checks(table, far)
    assert (check.data_setting, check.fit_setting, check.steps) == (1000.0, 1200.0, 2)
    assert check.extra_energy == pytest.approx(9.05 / 9.0 - 1)
    assert check.ok  # two settings away, but within 1 % of the minimum energy
    worse = SimpleNamespace(predict=lambda t: {"energy_j": np.array([5, 6, 7, 8, 4.0])})
    (miss,) = optimum_checks(table, worse)
    assert miss.steps == 3 and not miss.ok
    assert miss.extra_energy == pytest.approx(11.0 / 9.0 - 1)


def _perseus_a100() -> MeasuredTable:
    rows = []
    for model in ("gpt3-175b", "bloom"):
        with (PERSEUS / f"{model}+a100_sxm_bf16.csv").open(newline="") as handle:
            for r in csv.DictReader(handle):
                if r["stage"] not in ("0", "7"):
                    continue  # stages 0–6 carry identical numbers
                t, e = float(r["time"]), float(r["energy"])
                rows.append(
                    {
                        "kernel": f"{model}/{r['stage']}/{r['instruction']}",
                        "sm_clock_mhz": float(r["frequency"]),
                        "time_s": t,
                        "power_w": e / t,
                    }
                )
    return MeasuredTable.from_rows(rows, source="perseus a100")


def test_a_fit_without_every_third_clock_picks_the_a100_optimum():
    table = _perseus_a100()
    profile = load_profile("A100-SXM4-80GB")
    knob = table.knob_values()
    held = np.isin(knob, _held_knob_values(knob))
    fit = fit_sim(table.select(~held), profile)
    checks = optimum_checks(table, fit)
    assert len(checks) == 8
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    # Held-out clocks are still predicted closely.
    out = fit.predict(table.select(held))
    sub = table.select(held)
    assert np.mean(np.abs(out["time_s"] / sub.time_s - 1)) < 0.02
    assert np.mean(np.abs(out["power_w"] / sub.power_w - 1)) < 0.03


def test_the_fit_says_what_it_cannot_serve():
    table = _perseus_a100()
    profile = load_profile("A100-SXM4-80GB")
    lines = cannot_serve(table, profile)
    text = " ".join(lines)
    assert "kernels it never saw" in text and "8 measured" in text
    assert "855–1410 MHz" in text and "extrapolated" in text
    limited = MeasuredTable.from_rows(
        {"kernel": "k", "power_limit_w": w, "time_s": 1.0, "power_w": w * 0.9}
        for w in (150.0, 200.0, 250.0)
    )
    assert any("150–250 W" in line for line in cannot_serve(limited, profile))


def test_a_zero_weight_fit_is_the_time_and_power_fit():
    table = _perseus_a100().of_kernels(["gpt3-175b/0/forward", "bloom/0/forward"])
    profile = load_profile("A100-SXM4-80GB")
    plain = fit_sim(table, profile, optimum_weight=0.0, max_nfev=30)
    again = fit_sim(table, profile, optimum_weight=0.0, max_nfev=30)
    assert plain.rms == pytest.approx(again.rms)
    shaped = fit_sim(table, profile, max_nfev=30)
    assert shaped.physics != plain.physics
