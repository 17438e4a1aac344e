"""The uncertainty tools of §5.2 and Appendices B, D, G on cases with known answers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from eopt.calculus import Library, Signature, compose_expression, parse_expression, seq
from eopt.calculus.expression import expression_bias
from eopt.calculus.uncertainty import (
    accumulated_bias,
    c_alpha,
    chain_bias,
    compare,
    deviation_test,
    history_insensitivity,
    interference_insensitivity,
    padded_pair_bias,
    prediction_interval,
    reduction_bias,
    reduction_multipliers,
    refinement_check,
)

C95 = 1.959963984540054


def test_c_alpha_is_the_two_sided_gaussian_quantile() -> None:
    assert c_alpha() == pytest.approx(C95, rel=1e-12)
    assert c_alpha(0.99) == pytest.approx(2.5758293035489, rel=1e-12)
    assert c_alpha(0.6826894921370859) == pytest.approx(1.0, rel=1e-9)  # ±1σ
    for bad in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            c_alpha(bad)


def test_prediction_interval() -> None:
    iv = prediction_interval((10.0, 1.0))
    assert (iv.low, iv.high) == pytest.approx((10 - C95, 10 + C95), rel=1e-12)
    assert prediction_interval((10.0, 1.0), n_runs=4).half_width == pytest.approx(C95 / 2)
    sig = Signature("x", 100.0, 1.0, 5.0, var_time=0.0, var_energy=4.0)
    assert prediction_interval(sig, 0.99).half_width == pytest.approx(2 * 2.5758293035489)
    assert iv.contains(10.0) and not iv.contains(12.0)
    with pytest.raises(ValueError, match="n_runs"):
        prediction_interval((10.0, 1.0), n_runs=0)
    with pytest.raises(ValueError, match="std ≥ 0"):
        prediction_interval((10.0, -1.0))


def test_prediction_interval_covers_95_percent_of_runs() -> None:
    rng = np.random.default_rng(21)
    n = 100_000
    runs = rng.normal(10.0, 0.3, n)
    iv = prediction_interval((10.0, 0.3))
    coverage = float(np.mean((runs >= iv.low) & (runs <= iv.high)))
    se = math.sqrt(0.95 * 0.05 / n)
    assert abs(coverage - 0.95) <= 5 * se


def test_compare_needs_separated_intervals() -> None:
    cheaper = compare((10.0, 0.5), (13.0, 0.5))
    assert cheaper.verdict == "cheaper" and cheaper.separated
    assert cheaper.gap == pytest.approx(3.0 - 2 * C95 * 0.5)
    assert compare((13.0, 0.5), (10.0, 0.5)).verdict == "costlier"
    # 2 J apart but each ±1.96 J: overlapping intervals decide nothing.
    tie = compare((10.0, 1.0), (12.0, 1.0))
    assert tie.verdict == "indistinguishable" and not tie.separated
    assert tie.gap == pytest.approx(-(2 * C95 - 2.0))
    assert tie.difference == pytest.approx(-2.0)
    # Averaging 16 runs narrows the intervals by 4 and separates them.
    assert compare((10.0, 1.0), (12.0, 1.0), n_runs=16).verdict == "cheaper"


def test_deviation_test_eq_23() -> None:
    threshold = C95 * math.sqrt(2.0)
    flagged = deviation_test((10.0, 1.0), (13.0, 1.0))
    assert not flagged.passed and not flagged
    assert flagged.threshold == pytest.approx(threshold)
    assert flagged.z == pytest.approx(3.0 / math.sqrt(2.0))
    assert deviation_test((10.0, 1.0), (12.0, 1.0)).passed
    assert deviation_test((5.0, 0.0), (5.0, 0.0)).z == 0.0
    exact_but_wrong = deviation_test((5.0, 0.0), (5.1, 0.0))
    assert not exact_but_wrong.passed and math.isinf(exact_but_wrong.z)


def test_deviation_test_false_alarm_rate_is_alpha() -> None:
    rng = np.random.default_rng(22)
    n = 20_000
    predicted = rng.normal(100.0, 2.0, n)  # prediction error from characterization
    measured = rng.normal(100.0, 1.0, n)  # a fresh run
    alarms = sum(
        not deviation_test((p, 2.0), (m, 1.0)).passed
        for p, m in zip(predicted, measured, strict=True)
    )
    rate = alarms / n
    assert abs(rate - 0.05) <= 5 * math.sqrt(0.05 * 0.95 / n)


def _sig(s: float, t: float, d: float, sigma_e: float = 1.0) -> Signature:
    return Signature("k", static_power=s, time=t, dynamic_energy=d, var_energy=sigma_e**2)


def test_history_insensitivity_eq_11() -> None:
    ref, hot = _sig(60.0, 1.0, 10.0), _sig(60.5, 1.01, 10.2)
    result = history_insensitivity(ref, hot)
    # Worst ordered pair: multipliers from the hot context (T = 1.01 s, s = 60.5 W).
    assert result.worst == (0, 1)
    assert result.terms == pytest.approx(
        {"ds_T": 0.5 * 1.01, "dT_s": 0.01 * 60.5, "ds_dT": 0.5 * 0.01, "dd": 0.2}
    )
    assert result.bound == pytest.approx(1.315)
    assert result.threshold == pytest.approx(C95)
    assert result.passed
    assert not history_insensitivity(ref, hot, sigma_energy=0.5).passed
    assert len(history_insensitivity(ref, [hot, _sig(59.0, 0.99, 9.9)]).bounds) == 6


def test_history_insensitivity_catches_compensating_shifts() -> None:
    # Footnote 8: same total energy (60 J) but longer and with less dynamic energy. A
    # total-energy test would pass; the component-wise bound does not.
    ref, slow = _sig(50.0, 1.0, 10.0), _sig(50.0, 1.2, 0.0)
    assert ref.energy == pytest.approx(slow.energy)
    result = history_insensitivity(ref, slow)
    assert not result.passed
    assert result.bound == pytest.approx(0.2 * 50.0 + 10.0)


def test_interference_insensitivity_eq_12() -> None:
    alone = _sig(60.0, 1.0, 10.0, sigma_e=0.5)
    with_light = _sig(60.0, 1.001, 10.05)
    with_heavy = _sig(60.0, 1.2, 14.0)
    result = interference_insensitivity(alone, [with_light, with_heavy])
    assert result.worst == 1
    assert result.bounds[0] == pytest.approx(0.001 * 60.0 + 0.05)
    assert result.bound == pytest.approx(0.2 * 60.0 + 4.0)
    assert result.threshold == pytest.approx(C95 * 0.5)
    assert not result.passed
    assert interference_insensitivity(alone, with_light).passed
    with pytest.raises(ValueError, match="at least one"):
        interference_insensitivity(alone, [])


def test_reduction_multipliers_eq_13() -> None:
    assert reduction_multipliers("seq") == (1, 1)
    assert reduction_multipliers("⊕") == (2, 2)
    assert reduction_multipliers("par_multi") == (2, 2)
    assert reduction_multipliers("⊗", starts_at_null=True) == (0, 1)
    assert reduction_multipliers("par", starts_at_null=True) == (1, 1)
    with pytest.raises(ValueError, match="unknown operator"):
        reduction_multipliers("+")
    bound = reduction_bias("par", (1.0, 0.1), (2.0, 0.2))
    assert bound.bias == pytest.approx(2 * C95 * 0.1 + 2 * C95 * 0.2)


def test_chain_bias_eq_36_and_total_interval_eq_39() -> None:
    sigmas = [0.3, 0.1, 0.2, 0.4]
    chain = [_sig(50.0, 1.0, 1.0, sigma_e=s) for s in sigmas]
    bound = chain_bias(chain)
    assert bound.bias == pytest.approx(C95 * (0.1 + 0.2 + 0.4))  # element 1 carries none
    assert chain_bias(chain, starts_at_null=False).bias == pytest.approx(C95 * sum(sigmas))
    composed = seq(chain)
    total = bound.total_interval(composed)
    # Eq. (39): accumulated bias + c_α·σ_E of the composition, σ_E² = Σσ².
    noise = C95 * math.sqrt(sum(s * s for s in sigmas))
    assert total.half_width == pytest.approx(bound.bias + noise)
    # Bias grows linearly, noise as √n (Cauchy–Schwarz): Σσ ≤ √n·√Σσ².
    assert sum(sigmas) <= math.sqrt(len(sigmas)) * math.sqrt(sum(s * s for s in sigmas))


def test_padded_pair_bias_appendix_d() -> None:
    e1 = Signature("e1", 40.0, 1.0, 5.0, var_time=0.01, var_energy=0.25)
    e2 = Signature("e2", 80.0, 2.0, 9.0, var_time=0.04, var_energy=1.0)
    bound = padded_pair_bias(e1, e2)
    sigma_idle = 40.0 * math.sqrt(0.01 + 0.04)
    expected = 2 * C95 * 0.5 + 2 * (1 + 40.0 / 80.0) * C95 * 1.0 + 2 * C95 * sigma_idle
    assert bound.bias == pytest.approx(expected)
    with pytest.raises(ValueError, match="must be the shorter element"):
        padded_pair_bias(e2, e1)


def test_accumulated_bias_rejects_negative_inputs() -> None:
    assert accumulated_bias([("a", 2, 0.5)]).bias == pytest.approx(C95)
    with pytest.raises(ValueError, match="'a'"):
        accumulated_bias([("a", -1, 0.5)])


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_refinement_check_eq_24_on_the_attention_prefix() -> None:
    lib = Library.load(EXAMPLES / "attention.jsonl")
    measured = lib.by_name("prefix")[0]
    refined = compose_expression("rmsnorm ⊗ linear1", lib)
    assert refinement_check(measured, refined).passed
    assert refinement_check(measured, refined).deviation == pytest.approx(0.0, abs=1e-12)
    off = measured.with_(dynamic_energy=measured.dynamic_energy + 0.04)
    plain = refinement_check(off, refined)
    noise = C95 * math.hypot(off.std_energy, refined.std_energy)
    assert plain.noise == pytest.approx(noise)
    assert not plain.passed  # 40 mJ off, noise band ≈ 30 mJ, bias bound ≈ 19 mJ
    tree = parse_expression("rmsnorm ⊗ linear1")
    bias = expression_bias(tree, lib)
    assert bias.bias == pytest.approx(C95 * lib.by_name("linear1")[0].std_energy)
    assert refinement_check(off, refined, bias=bias).passed


def test_expression_bias_multipliers() -> None:
    lib = Library.load(EXAMPLES / "attention.jsonl")
    bound = expression_bias(parse_expression("prefix ⊗ (compute ⊕ allreduce)"), lib)
    assert [(n, m) for n, m, _ in bound.contributions] == [
        ("prefix", 0.0), ("compute", 2.0), ("allreduce", 2.0)
    ]  # fmt: skip
    started = expression_bias(parse_expression("compute ⊕ allreduce"), lib)
    assert [m for _, m, _ in started.contributions] == [1.0, 1.0]  # Eq. 13 at null start
    anywhere = expression_bias(parse_expression("compute ⊕ allreduce"), lib, starts_at_null=False)
    assert [m for _, m, _ in anywhere.contributions] == [2.0, 2.0]
