"""The U-shape measure of `benchmarks/sim_fit_optimum.py` when a model's sweep is measured
once per setting with noise, as the Zeus power-limit data were: checked against what
symmetry and a known noise level say, on random cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.benchmarks.loader import load_benchmark


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    return load_benchmark(monkeypatch, "sim_fit_optimum")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_flat_sweep_bottoms_out_inside_as_often_as_symmetry_says(bench, seed):
    # With independent noise on a flat curve the minimum is equally likely at each of
    # the k settings, so it lies inside with probability (k - 2) / k.
    rng = np.random.default_rng(seed)
    k = int(rng.integers(4, 11))
    level = float(rng.uniform(10.0, 1e4))
    draws = 4000
    shares = bench.measured_u_shares(
        [np.full(k, level)], [rng.permutation(k) * 25.0 + 100], 0.04, draws=draws, seed=seed
    )
    p = (k - 2) / k
    assert abs(shares.mean() - p) <= 4 * math.sqrt(p * (1 - p) / draws)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_clear_shapes_keep_their_call_under_small_noise(bench, seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(5, 10))
    x = np.arange(k, dtype=float)
    bottom = float(rng.integers(1, k - 1))
    u = 100.0 * (1.0 + 0.2 * ((x - bottom) / k) ** 2)  # interior minimum, ≥ 0.2 %·k² apart
    falling = 100.0 * (1.5 - 0.05 * x)  # minimum at the last setting
    order = rng.permutation(k)  # the knob may come in any order
    shares = bench.measured_u_shares(
        [u[order], falling[order]], [x[order], x[order]], 1e-4, draws=200, seed=seed
    )
    assert np.all(shares == 0.5)  # the U is always U, the falling curve never


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_noise_of_flat_kernels_is_recovered(bench, seed):
    rng = np.random.default_rng(seed)
    cv = float(rng.uniform(0.01, 0.08))
    kernels = [
        float(rng.uniform(1.0, 1e3)) * (1.0 + cv * rng.standard_normal(8)) for _ in range(60)
    ]
    kernels.append(np.array([5.0, 1.0]))  # two settings: no spread to learn from, left out
    assert bench.flat_noise_cv(kernels) == pytest.approx(cv, rel=0.1)


def test_the_same_seed_gives_the_same_shares(bench):
    args = ([np.ones(8), np.linspace(2, 1, 8)], [np.arange(8), np.arange(8)], 0.03)
    a = bench.measured_u_shares(*args, draws=100, seed=7)
    b = bench.measured_u_shares(*args, draws=100, seed=7)
    c = bench.measured_u_shares(*args, draws=100, seed=8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
