"""Clark's E[max] and Var[max] of two Gaussians, at every time scale.

Truth is independent of Clark's closed form: 25-digit quadrature of the density of the
maximum, f(x) = φ₁(x)Φ₂(x) + φ₂(x)Φ₁(x), centred on the larger mean so that the moments
of hour-long times with microsecond spreads keep their digits; and Monte Carlo.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from eopt.calculus import Signature, max_moments, par
from eopt.calculus.frontier import Frontier, FrontierPoint
from eopt.calculus.operators import clark_max

mpmath.mp.dps = 25


def _quadrature(mu1: float, var1: float, mu2: float, var2: float) -> tuple[float, float]:
    """E[max], Var[max] by 25-digit quadrature of the density of the maximum."""
    centre = mpmath.mpf(max(mu1, mu2))
    m1, m2 = mpmath.mpf(mu1) - centre, mpmath.mpf(mu2) - centre
    s1, s2 = mpmath.sqrt(mpmath.mpf(var1)), mpmath.sqrt(mpmath.mpf(var2))

    def pdf(x: mpmath.mpf, m: mpmath.mpf, s: mpmath.mpf) -> mpmath.mpf:
        return mpmath.npdf(x, m, s) if s > 0 else mpmath.mpf(0)

    def cdf(x: mpmath.mpf, m: mpmath.mpf, s: mpmath.mpf) -> mpmath.mpf:
        return mpmath.ncdf(x, m, s) if s > 0 else mpmath.mpf(x >= m)

    def density(x: mpmath.mpf) -> mpmath.mpf:
        return pdf(x, m1, s1) * cdf(x, m2, s2) + pdf(x, m2, s2) * cdf(x, m1, s1)

    # Break points at every operand's mean ± k σ (a fixed operand's value, where the
    # density jumps): the integrand is smooth between them; beyond ±14 σ it is < 1e-43.
    cuts = sorted({m + k * s for m, s in ((m1, s1), (m2, s2)) for k in range(-14, 15, 4)})
    mass = mpmath.quad(density, cuts)
    first = mpmath.quad(lambda x: x * density(x), cuts)
    second = mpmath.quad(lambda x: x * x * density(x), cuts)
    # One operand fixed: the maximum sits on it with probability Φ((fixed − μ)/σ).
    for m, s, mo, so in ((m1, s1, m2, s2), (m2, s2, m1, s1)):
        if s == 0 and so > 0:
            atom = mpmath.ncdf(m, mo, so)
            mass, first, second = mass + atom, first + atom * m, second + atom * m * m
    assert abs(mass - 1) < mpmath.mpf("1e-20")
    return float(centre + first), float(second - first * first)


CASES = [
    # (μ₁, σ₁, μ₂, σ₂): microseconds to hours, tight and loose, every separation.
    (5e-6, 1e-8, 5e-6, 1e-8),
    (5e-6, 2e-6, 4e-6, 1e-6),
    (5e-6, 1e-9, 4.99e-6, 3e-9),
    (0.012, 3e-4, 0.0119, 2e-4),
    (1.0, 1.0, 1.0, 1.0),
    (2.0, 0.1, 1.7, 0.2),
    (2.0, 0.1, 1.2, 0.2),
    (3600.0, 1e-4, 3600.0, 1e-4),  # the case the frontier's copy returned 0 for
    (3600.0, 1e-4, 3599.99995, 2e-4),
    (3600.0, 60.0, 3550.0, 30.0),
    (7200.0, 1e-6, 7199.9999999, 1e-6),
    (1.0, 0.0, 1.0, 0.1),  # one fixed operand
    (1.0, 0.1, 1.15, 0.0),
]


@pytest.mark.parametrize(("mu1", "sd1", "mu2", "sd2"), CASES)
def test_clark_max_matches_exact_quadrature(mu1: float, sd1: float, mu2: float, sd2: float) -> None:
    mean, var = clark_max(mu1, sd1**2, mu2, sd2**2)
    true_mean, true_var = _quadrature(mu1, sd1**2, mu2, sd2**2)
    theta = math.hypot(sd1, sd2)
    # Mean: to rounding of the mean itself; variance: relative, at every scale.
    assert abs(mean - true_mean) <= 4e-16 * abs(true_mean) + 1e-12 * theta
    assert var == pytest.approx(true_var, rel=1e-9, abs=1e-300)
    assert var > 0.0


@pytest.mark.parametrize(("mu1", "sd1", "mu2", "sd2"), CASES)
def test_vectorised_form_equals_the_scalar_one(
    mu1: float, sd1: float, mu2: float, sd2: float
) -> None:
    arr_mean, arr_var = clark_max(np.array([mu1, mu2]), np.array([sd1**2, sd2**2]),
                                  np.array([mu2, mu1]), np.array([sd2**2, sd1**2]))  # fmt: skip
    mean, var = clark_max(mu1, sd1**2, mu2, sd2**2)
    assert arr_mean.tolist() == pytest.approx([mean, mean], rel=1e-15)
    assert arr_var.tolist() == pytest.approx([var, var], rel=1e-12)


@pytest.mark.parametrize(
    ("mu1", "sd1", "mu2", "sd2"),
    [(1.0, 1.0, 1.0, 1.0), (2.0, 0.3, 1.8, 0.1), (3600.0, 60.0, 3620.0, 20.0)],
)
def test_clark_max_matches_monte_carlo(mu1: float, sd1: float, mu2: float, sd2: float) -> None:
    rng = np.random.default_rng(7)
    n = 400_000
    m = np.maximum(rng.normal(mu1, sd1, n), rng.normal(mu2, sd2, n))
    mean, var = clark_max(mu1, sd1**2, mu2, sd2**2)
    centred = m - m.mean()
    mc_var = float(np.mean(centred**2))
    se_var = math.sqrt((float(np.mean(centred**4)) - mc_var**2) / n)
    assert abs(mean - m.mean()) <= 5 * math.sqrt(mc_var / n)
    assert abs(var - mc_var) <= 5 * se_var


def test_zero_spread_is_exact() -> None:
    assert clark_max(5.0, 0.0, 3.0, 0.0) == (5.0, 0.0)
    assert clark_max(3.0, 0.0, 5.0, 0.0) == (5.0, 0.0)
    assert clark_max(2.0, 0.0, 2.0, 0.0) == (2.0, 0.0)
    mean, var = clark_max(np.array([5.0, 2.0]), 0.0, np.array([3.0, 2.0]), 0.0)
    assert mean.tolist() == [5.0, 2.0] and var.tolist() == [0.0, 0.0]


def test_far_apart_operands_give_the_larger_one_exactly() -> None:
    # 100 σ apart: the lower operand cannot be the maximum.
    assert clark_max(10.0, 0.01, 0.0, 0.0) == (10.0, 0.01)
    assert clark_max(0.0, 0.0, 10.0, 0.01) == (10.0, 0.01)
    mean, var = clark_max(np.array([10.0]), np.array([0.01]), np.array([0.0]), np.array([0.0]))
    assert (mean[0], var[0]) == (10.0, 0.01)


def test_the_frontier_and_the_calculus_agree_on_long_tight_times() -> None:
    # 1 h ± 0.1 ms on both sides: Var(max) = σ²(1 − 1/π) ≈ 6.8e-9 s², not 0.
    cells = [Signature("a", 50.0, 3600.0, 1000.0, var_time=1e-8, var_energy=1.0)]
    front = Frontier.from_signatures(cells, dominance="point")
    other = Frontier.from_signatures([cells[0].with_(name="b")], dominance="point")
    (point,) = front.par(other).points
    expected = 1e-8 * (1.0 - 1.0 / math.pi)
    assert point.var_time == pytest.approx(expected, rel=1e-9)
    composite = par(cells[0], cells[0].with_(name="b"))
    assert composite.var_time == pytest.approx(point.var_time, rel=1e-12)
    assert composite.var_energy == pytest.approx(point.var_energy, rel=1e-12)
    assert isinstance(point, FrontierPoint)


def test_max_moments_of_two_is_clark() -> None:
    assert max_moments([3600.0, 3600.0], [1e-8, 1e-8]) == clark_max(3600.0, 1e-8, 3600.0, 1e-8)
