"""Deciding whether a pair may stay context-independent (Eq. 11, 12, 13; App. C.4)."""

from __future__ import annotations

import pytest

from eopt.calculus import ContextualSignature, Signature, par, seq
from eopt.calculus.insensitivity import null_point, pair_insensitivity
from eopt.calculus.interactions import EntryEdge, RuntimeEdge
from eopt.calculus.uncertainty import c_alpha
from eopt.model.context import Context, EntryContext, RuntimeContext

C95 = c_alpha(0.95)
S0, T_B, D_B = 60.0, 10e-3, 0.5  # W, s, J: the thermally sensitive element B
SIGMA_B = 0.011  # J, 1 % of its 1.1 J
BETA = 0.0075  # leakage coefficient, per °C (paper App. C.4: 0.5–1 %/°C)


def _b(ctx: Context | None, rise_c: float = 0.0, time: float = T_B) -> Signature:
    """B with static power s₀·(1 + β·ΔT_dev) (paper Eq. 35)."""
    return Signature(
        "B", static_power=S0 * (1 + BETA * rise_c), time=time, dynamic_energy=D_B,
        var_time=1e-9, var_energy=SIGMA_B**2, devices=("gpu0",), context=ctx,
    )  # fmt: skip


def _a(name: str) -> ContextualSignature:
    sig = Signature(name, static_power=S0, time=5e-3, dynamic_energy=1.0, var_energy=4e-4,
                    devices=("gpu0",))  # fmt: skip
    return ContextualSignature.from_signatures([sig])


def _eq11(at: Signature, ref: Signature) -> float:
    """Δs·T(φ') + ΔT·s(φ') + Δs·ΔT + Δd, the worse of the two orders."""
    ds, dt = abs(at.static_power - ref.static_power), abs(at.time - ref.time)
    dd = abs(at.dynamic_energy - ref.dynamic_energy)
    return max(
        ds * ref.time + dt * ref.static_power + ds * dt + dd,
        ds * at.time + dt * at.static_power + ds * dt + dd,
    )


def test_a_wide_thermal_swing_makes_the_pair_context_dependent() -> None:
    # a hot producer leaves B 25 °C warmer: 18.75 % more static power (App. C.4's 10–30 %)
    after_hot = _b(Context(EntryContext(after="HOT")), rise_c=25.0)
    b = ContextualSignature.from_signatures([_b(None), after_hot])
    decision = pair_insensitivity(_a("HOT"), b, "seq")
    assert not decision.context_independent and not decision
    hist = decision.history[1]
    assert hist is not None and not hist.passed
    assert hist.bound == pytest.approx(_eq11(after_hot, _b(None)), rel=1e-12)
    assert hist.bound == pytest.approx(S0 * BETA * 25.0 * T_B, rel=1e-12)  # only Δs·T
    assert hist.threshold == pytest.approx(C95 * SIGMA_B, rel=1e-12)
    (edge,) = decision.edges
    assert isinstance(edge, EntryEdge) and edge.label == "HOT → B"
    assert edge.characterized == (EntryContext(after="HOT"),)
    assert edge.deviation["bound_j"] == pytest.approx(hist.bound)
    assert "history-sensitive" in str(decision)


def test_a_narrow_band_stays_context_independent_within_the_theorems_bound() -> None:
    after_mild = _b(Context(EntryContext(after="MILD")), rise_c=2.0)  # 1.5 % more draw
    b = ContextualSignature.from_signatures([_b(None), after_mild])
    a = _a("MILD")
    decision = pair_insensitivity(a, b, "seq")
    assert decision.context_independent and decision.edges == ()
    assert decision.multipliers == (1, 1)  # Eq. (13), ⊗
    sigma_a = null_point(a).std_energy
    assert decision.bias.bias == pytest.approx(C95 * (sigma_a + SIGMA_B), rel=1e-12)
    # The Reduction Theorem's claim on these numbers: the realized chain (B after MILD)
    # and the null-context chain agree within the bias bound.
    realized = seq([null_point(a), after_mild.with_(context=None)]).energy
    null = seq([null_point(a), _b(None)]).energy
    assert abs(realized - null) <= decision.bias.bias


def test_multipliers_follow_the_reduction_theorem() -> None:
    b = ContextualSignature.from_signatures([_b(None)])
    a = _a("A")
    for op, starts, expected in (
        ("seq", False, (1, 1)), ("seq", True, (0, 1)), ("par", False, (2, 2)),
        ("par", True, (1, 1)), ("par_multi", False, (2, 2)), ("⊕multi", True, (1, 1)),
    ):  # fmt: skip
        decision = pair_insensitivity(a, b, op, starts_at_null=starts)
        assert decision.multipliers == expected
        m1, m2 = expected
        sigma_a = null_point(a).std_energy
        assert decision.bias.bias == pytest.approx(C95 * (m1 * sigma_a + m2 * SIGMA_B))


def test_an_untested_context_is_not_assumed_harmless() -> None:
    b = ContextualSignature.from_signatures([_b(None)])
    decision = pair_insensitivity(_a("A"), b, "seq")
    assert not decision.context_independent
    assert "never measured after A" in decision.reasons[0]
    par_decision = pair_insensitivity(_a("A"), b, "par", starts_at_null=True)
    assert not par_decision.context_independent
    assert any("never measured co-running" in r for r in par_decision.reasons)


def test_interference_from_contention_asks_for_a_runtime_edge() -> None:
    corun = Context(runtime=RuntimeContext(("A",)))
    slowed = _b(corun, time=T_B * 1.08)  # 8 % slower while A runs
    a_alone = Signature("A", static_power=S0, time=9e-3, dynamic_energy=1.0, var_energy=4e-4,
                        devices=("gpu0",))  # fmt: skip
    a_corun = a_alone.with_(context=Context(runtime=RuntimeContext(("B",))))
    a = ContextualSignature.from_signatures([a_alone, a_corun])
    b = ContextualSignature.from_signatures([_b(None), slowed])
    decision = pair_insensitivity(a, b, "par", starts_at_null=True)
    first, second = decision.interference
    assert first is not None and first.passed and first.bound == 0.0
    assert second is not None and not second.passed
    assert second.bound == pytest.approx(0.08 * T_B * S0, rel=1e-12)  # ΔT·s
    (edge,) = decision.edges
    assert isinstance(edge, RuntimeEdge) and edge.pair == ("A", "B")
    # what the edge would buy: the realized ⊕ energy differs from the null one by more
    # than the bound the theorem allows for an insensitive pair
    realized = par([a_alone, slowed.with_(context=None)]).energy
    null = par([a_alone, _b(None)]).energy
    assert abs(realized - null) > C95 * SIGMA_B


def test_an_element_without_null_values_is_refused() -> None:
    only_hot = ContextualSignature.from_signatures([_b(Context(EntryContext(after="A")), 5.0)])
    with pytest.raises(ValueError, match="no values at the null context"):
        pair_insensitivity(_a("A"), only_hot)
    with pytest.raises(ValueError, match="unknown operator"):
        pair_insensitivity(_a("A"), ContextualSignature.from_signatures([_b(None)]), "then")
