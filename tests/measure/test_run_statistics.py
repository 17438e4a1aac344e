"""Bootstrap coverage (Monte Carlo), drift and state-change detection on injected cases."""

from __future__ import annotations

import numpy as np
import pytest

from eopt.runs.stats import (
    bootstrap_ci,
    detect_state_change,
    detect_warmup_drift,
    summarize,
)


def test_bootstrap_ci_covers_the_true_mean_about_95_percent_of_the_time():
    # Skewed (log-normal) runs, as energy often is; the true mean is known in closed form.
    mu, sigma, n, reps = 0.0, 0.25, 40, 400
    true_mean = np.exp(mu + sigma**2 / 2)
    hits = 0
    for rep in range(reps):
        runs = np.random.default_rng(1000 + rep).lognormal(mu, sigma, n)
        lo, hi = bootstrap_ci(runs, "mean", 0.95, n_boot=1000, seed=rep)
        hits += lo <= true_mean <= hi
    coverage = hits / reps
    # Percentile bootstrap slightly under-covers at n = 40; 400 reps → SE ≈ 1.1 %.
    assert 0.90 <= coverage <= 0.98, coverage


def test_summary_matches_numpy_and_is_reproducible():
    runs = np.random.default_rng(3).normal(10.0, 2.0, 25)
    a, b = summarize(runs, seed=7), summarize(runs, seed=7)
    assert a == b
    assert a.mean == pytest.approx(runs.mean())
    assert a.var == pytest.approx(runs.var(ddof=1))
    assert a.median == pytest.approx(np.median(runs))
    assert a.ci_mean[0] < a.mean < a.ci_mean[1]
    assert summarize([5.0]).ci_mean == (5.0, 5.0)
    with pytest.raises(ValueError, match="NaN"):
        summarize([1.0, float("nan")])


def test_drift_fires_on_a_warming_device_and_not_on_stationary_runs():
    fired_injected = fired_stationary = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        k = np.arange(30)
        warming = 100.0 * (1 + 0.06 * np.exp(-k / 5.0)) + rng.normal(0, 0.5, 30)
        fired_injected += detect_warmup_drift(warming).detected
        fired_stationary += detect_warmup_drift(rng.normal(100.0, 0.5, 30)).detected
    assert fired_injected >= 38
    assert fired_stationary <= 1


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_state_change_finds_an_injected_block(where):
    found = 0
    for seed in range(12):
        runs = np.random.default_rng(seed).normal(100.0, 1.0, 48)
        block = {"start": slice(0, 12), "middle": slice(18, 30), "end": slice(36, 48)}[where]
        runs[block] *= 1.05  # a different machine state: 5 % more energy
        result = detect_state_change(runs, seed=seed)
        if result.detected:
            found += 1
            edges = np.array([s.start for s in result.segments] + [result.segments[-1].stop])
            # Noise of 1 σ against a 5 σ shift: the edges land within two runs.
            assert np.min(np.abs(edges - block.start)) <= 2
            assert np.min(np.abs(edges - block.stop)) <= 2
    assert found >= 11


def test_state_change_does_not_fire_on_stationary_runs():
    alarms = sum(
        detect_state_change(np.random.default_rng(s).normal(50.0, 1.0, 40), seed=s).detected
        for s in range(40)
    )
    assert alarms <= 1  # α = 0.01 per test, and the 1 % effect floor


def test_state_change_on_the_kokkos_dbscan_pattern():
    # 64 runs; the first 16 are ~1.5× slower (a different machine state, the field note).
    rng = np.random.default_rng(11)
    times = np.r_[rng.uniform(3.4, 3.9, 16), rng.normal(2.19, 0.03, 48)]
    result = detect_state_change(times)
    assert result.detected
    assert result.segments[0].start == 0 and result.segments[0].stop == 16
