"""Variance propagation (Property 5.6, Appendix F) against Monte Carlo simulation.

Times and dynamic energies are drawn as independent Gaussians; each composite's energy is
computed sample by sample with the operator's accounting, and the sample variance is
compared with the propagated one. Tolerances are 5 standard errors of the sample variance,
estimated from the samples themselves: SE(s²) = √((m₄ − s⁴)/n).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eopt.calculus import Signature, max_moments, par, par_multi, seq

N = 200_000
Z = 5.0  # tolerance in standard errors: a false alarm is a < 1e-6 event per check


def _element(name: str, s: float, t: float, sd_t: float, d: float, sd_d: float, dev: str):
    return Signature(
        name, static_power=s, time=t, dynamic_energy=d, var_time=sd_t**2,
        var_energy=s * s * sd_t**2 + sd_d**2, devices=(dev,),
    )  # fmt: skip


def _draw(rng: np.random.Generator, e: Signature) -> tuple[np.ndarray, np.ndarray]:
    times = rng.normal(e.time, math.sqrt(e.var_time), N)
    dyn = rng.normal(e.dynamic_energy, math.sqrt(e.var_dynamic), N)
    return times, dyn


def _assert_variance(samples: np.ndarray, predicted: float) -> None:
    centered = samples - samples.mean()
    var = float(np.mean(centered**2))
    se = math.sqrt(max(float(np.mean(centered**4)) - var * var, 0.0) / N)
    assert abs(predicted - var) <= Z * se, f"predicted {predicted:.6g}, MC {var:.6g} ± {se:.2g}"


def test_seq_variance_matches_monte_carlo() -> None:
    rng = np.random.default_rng(11)
    a = _element("a", 60.0, 2.0, 0.05, 30.0, 2.0, "gpu0")
    b = _element("b", 80.0, 1.0, 0.10, 10.0, 1.0, "gpu0")
    (ta, da), (tb, db) = _draw(rng, a), _draw(rng, b)
    samples = a.static_power * ta + da + b.static_power * tb + db
    composite = seq(a, b)
    _assert_variance(samples, composite.var_energy)
    _assert_variance(ta + tb, composite.var_time)


@pytest.mark.parametrize(
    ("t_b", "sd_b"),
    [(2.0, 0.05), (2.0, 0.2), (2.1, 0.1), (3.0, 0.1)],
    ids=["equal-means-equal-sd", "equal-means-unequal-sd", "close-means", "separated"],
)
def test_par_variance_matches_monte_carlo(t_b: float, sd_b: float) -> None:
    rng = np.random.default_rng(12)
    s = 70.0
    a = _element("a", s, 2.0, 0.05, 30.0, 2.0, "gpu0")
    b = _element("b", s, t_b, sd_b, 5.0, 0.5, "gpu0")
    (ta, da), (tb, db) = _draw(rng, a), _draw(rng, b)
    tmax = np.maximum(ta, tb)
    composite = par(a, b)
    _assert_variance(tmax, composite.var_time)  # Clark, exact for two
    _assert_variance(s * tmax + da + db, composite.var_energy)


def test_par_multi_variance_matches_monte_carlo() -> None:
    rng = np.random.default_rng(13)
    a = _element("a", 60.0, 2.0, 0.1, 30.0, 2.0, "gpu0")
    b = _element("b", 90.0, 2.05, 0.1, 20.0, 1.0, "gpu1")
    (ta, da), (tb, db) = _draw(rng, a), _draw(rng, b)
    tmax = np.maximum(ta, tb)
    # Each device is held to the makespan at its own static draw (idle padding).
    samples = (a.static_power + b.static_power) * tmax + da + db
    composite = par_multi(a, b)
    _assert_variance(samples, composite.var_energy)
    assert composite.energy == pytest.approx(150.0 * 2.05 + 50.0)


@pytest.mark.parametrize(
    ("means", "sds"),
    [
        ([1.0, 1.0, 1.0], [0.1, 0.1, 0.1]),
        ([1.0, 1.05, 0.95], [0.1, 0.2, 0.05]),
        ([1.0, 1.5, 1.2], [0.3, 0.2, 0.4]),
        ([0.0] * 8, [1.0] * 8),
    ],
    ids=["equal", "close-unequal-sd", "spread", "eight-equal"],
)
def test_var_max_of_several_matches_monte_carlo(means: list[float], sds: list[float]) -> None:
    rng = np.random.default_rng(14)
    samples = np.max([rng.normal(m, s, N) for m, s in zip(means, sds, strict=True)], axis=0)
    mean, var = max_moments(means, [s * s for s in sds])
    se_mean = float(samples.std()) / math.sqrt(N)
    assert abs(mean - samples.mean()) <= Z * se_mean
    _assert_variance(samples, var)
    # Clark's recursion treats each partial maximum as Gaussian; stated tolerance: within
    # 5 % of the exact variance for three operands (2 % for equal ones, measured) ...
    _, clark = max_moments(means, [s * s for s in sds], method="clark")
    if len(means) == 3:
        assert clark == pytest.approx(var, rel=0.05)
    else:  # ... and it underestimates as operands multiply (about 10 % for eight).
        assert clark < var * 0.95


def test_var_max_of_equal_standard_normals_is_one_minus_one_over_pi() -> None:
    mean, var = max_moments([0.0, 0.0], [1.0, 1.0])
    assert mean == pytest.approx(1 / math.sqrt(math.pi), rel=1e-12)
    assert var == pytest.approx(1 - 1 / math.pi, rel=1e-12)


@given(
    st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=2),
    st.lists(st.one_of(st.just(0.0), st.floats(1e-8, 10.0)), min_size=2, max_size=2),
)
def test_var_max_quadrature_matches_clark_exactly_for_two(
    means: list[float], sds: list[float]
) -> None:
    # Clark's formulas are exact for two, so they check the quadrature over wide ranges
    # (time scales 1e3 apart, spreads 1e9 apart, deterministic operands).
    variances = [s * s for s in sds]
    exact = max_moments(means, variances, method="exact")
    clark = max_moments(means, variances, method="clark")
    scale = max(sds)
    assert exact[0] == pytest.approx(clark[0], abs=1e-9 * scale + 1e-12 * abs(clark[0]))
    assert exact[1] == pytest.approx(clark[1], abs=1e-9 * scale * scale)


def test_var_max_of_three_standard_normals_known_values() -> None:
    mean, var = max_moments([0.0] * 3, [1.0] * 3)
    assert mean == pytest.approx(3 / (2 * math.sqrt(math.pi)), rel=1e-12)
    # E[M²] = 1 + √3/(2π) for the maximum of three standard normals.
    assert var == pytest.approx(1 + math.sqrt(3) / (2 * math.pi) - mean**2, rel=1e-10)


def test_clark_pair_keeps_tiny_spreads_of_long_times() -> None:
    # 175 s ± 100 ns against a clearly shorter 162 s: Var(max) is the longer one's σ².
    mean, var = max_moments([175.0, 162.0], [1e-14, 1e-15])
    assert mean == 175.0
    assert var == pytest.approx(1e-14, rel=1e-9)


def test_var_max_with_deterministic_operands() -> None:
    assert max_moments([1.0, 2.0, 0.5], [0.0, 0.0, 0.0]) == (2.0, 0.0)
    # A deterministic 5 s dominates Gaussians that never get near it.
    assert max_moments([5.0, 1.0, 1.0], [0.0, 0.01, 0.01]) == (5.0, 0.0)
    # A far longer Gaussian dominates: Var(max) ≈ its own variance (Appendix F.3).
    mean, var = max_moments([5.0, 1.0, 1.0], [0.01, 0.01, 0.01])
    assert mean == pytest.approx(5.0, rel=1e-9) and var == pytest.approx(0.01, rel=1e-6)


def test_par_of_three_variance_matches_monte_carlo() -> None:
    rng = np.random.default_rng(15)
    s = 50.0
    els = [
        _element("a", s, 1.0, 0.1, 10.0, 1.0, "gpu0"),
        _element("b", s, 1.05, 0.2, 12.0, 0.5, "gpu0"),
        _element("c", s, 0.95, 0.05, 8.0, 0.8, "gpu0"),
    ]
    draws = [_draw(rng, e) for e in els]
    tmax = np.max([t for t, _ in draws], axis=0)
    samples = s * tmax + sum(d for _, d in draws)
    _assert_variance(samples, par(els).var_energy)
