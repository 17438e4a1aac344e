"""The deviation test with power, checked by Monte Carlo against its own claims."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eopt.calculus import Signature
from eopt.calculus.deviation import (
    MeanEstimate,
    Runs,
    deviation_report,
    minimum_detectable_deviation,
)
from eopt.calculus.uncertainty import deviation_test

E0, T0, CV = 100.0, 0.5, 0.004  # J, s, a 0.4 % run-to-run spread
N = 30


def _runs(rng: np.random.Generator, bias_e: float = 0.0, bias_t: float = 0.0) -> Runs:
    return Runs(
        rng.normal(E0 * (1 + bias_e), CV * E0, N).tolist(),
        rng.normal(T0 * (1 + bias_t), CV * T0, N).tolist(),
    )


def test_false_positive_rate_is_alpha_without_bias() -> None:
    rng = np.random.default_rng(1)
    trials = 3000
    fired_e = fired_t = 0
    for _ in range(trials):
        r = deviation_report(_runs(rng), _runs(rng))
        fired_e += not r.energy.passed
        fired_t += not r.time.passed  # type: ignore[union-attr]
    # binomial σ of a 5 % rate: 0.40 % per quantity, 0.28 % pooled
    assert fired_e / trials == pytest.approx(0.05, abs=0.02)
    assert fired_t / trials == pytest.approx(0.05, abs=0.02)
    assert (fired_e + fired_t) / (2 * trials) == pytest.approx(0.05, abs=0.01)


def test_detects_a_half_percent_bias_that_equation_23_misses() -> None:
    rng = np.random.default_rng(2)
    trials = 400
    new = old = 0
    for _ in range(trials):
        pred, meas = _runs(rng), _runs(rng, bias_e=0.005)
        new += not deviation_report(pred, meas).energy.passed
        p, m = MeanEstimate.of(pred.energy_j), MeanEstimate.of(meas.energy_j)
        old += not deviation_test((p.mean, p.std), (m.mean, m.std)).passed
    # SE of the difference 0.4 %·√(2/30) = 0.103 %: a 0.5 % bias is 4.8 SE away
    assert new / trials > 0.98
    # Eq. (23) needs 1.96·√2·0.4 % = 1.11 %: the bias hides under single-run spreads
    assert old / trials < 0.02


def test_a_time_bias_is_caught_even_when_energy_agrees() -> None:
    rng = np.random.default_rng(3)
    r = deviation_report(_runs(rng), _runs(rng, bias_t=0.01))
    assert r.time is not None and not r.time.passed
    assert not r.passed
    assert r.time.relative == pytest.approx(0.01, abs=0.003)


def test_minimum_detectable_deviation_has_the_power_it_claims() -> None:
    rng = np.random.default_rng(4)
    p, m = MeanEstimate(E0, CV * E0, N), MeanEstimate(E0, CV * E0, N)
    mdd = minimum_detectable_deviation(p, m, power=0.8)
    se = CV * E0 * math.sqrt(2 / N)
    assert 2.7 * se < mdd < 2.9 * se  # (t_0.975 + t_0.8)·SE with 58 df ≈ 2.85·SE
    trials = 1500
    hits = 0
    for _ in range(trials):
        pred = Runs(rng.normal(E0, CV * E0, N).tolist())
        meas = Runs(rng.normal(E0 + mdd, CV * E0, N).tolist())
        hits += not deviation_report(pred, meas).energy.passed
    assert hits / trials == pytest.approx(0.8, abs=0.035)  # 3σ of a binomial rate


def test_mdd_shrinks_as_one_over_root_n_and_reports_say_which_spread() -> None:
    def mdd(n: int) -> float:
        return minimum_detectable_deviation(MeanEstimate(1.0, 0.01, n), MeanEstimate(1.0, 0.01, n))

    assert mdd(200) / mdd(50) == pytest.approx(0.5, rel=0.02)
    pred = (MeanEstimate(E0, 0.4, N), MeanEstimate(T0, 0.002, N))
    meas = (MeanEstimate(E0 + 0.5, 0.4, N), MeanEstimate(T0, 0.002, N))
    means = deviation_report(pred, meas)
    single = deviation_report(pred, meas, spread="single")
    assert means.energy.spread == "standard errors of the means"
    assert single.energy.spread == "single-run spreads"
    assert not means.passed and single.passed
    # the single-run variant is Eq. (23), with the old test's threshold
    old = deviation_test((E0, 0.4), (E0 + 0.5, 0.4))
    assert single.energy.threshold == pytest.approx(old.threshold, rel=1e-12)
    assert "detects ≥" in str(means.energy) and "%" in str(means.energy)


def test_signature_inputs_need_their_run_counts() -> None:
    sig = Signature("a", static_power=50.0, time=T0, dynamic_energy=E0 - 25.0, var_time=1e-6,
                    var_energy=0.16)  # fmt: skip
    with pytest.raises(ValueError, match=r"pass n_predicted=RUNS"):
        deviation_report(sig, sig)
    same = deviation_report(sig, sig, n_predicted=30, n_measured=30)
    assert same.passed and same.energy.difference == 0.0
    counted = sig.with_(meta={"n": 30})
    assert deviation_report(counted, counted).energy.measured.n == 30


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="at least two runs"):
        MeanEstimate.of([1.0])
    with pytest.raises(ValueError, match="power must be"):
        minimum_detectable_deviation(MeanEstimate(1, 0.1, 5), MeanEstimate(1, 0.1, 5), power=1.0)
    with pytest.raises(ValueError, match="n must be"):
        MeanEstimate(1.0, 0.1, 0)


@pytest.mark.parametrize("name", ["eopt.calculus.deviation", "eopt.calculus.interactions"])
def test_docstring_examples_run(name: str) -> None:
    import doctest
    import importlib

    failures, attempted = doctest.testmod(importlib.import_module(name), verbose=False)
    assert attempted > 0 and failures == 0
