"""Algebraic properties of ⊗, ⊕ and ⊕multi in the context-independent algebra (§5.1)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eopt.calculus import CompositionError, Signature, idle, par, par_multi, seq

REL = 1e-9
ABS = 1e-9

powers = st.floats(min_value=0.0, max_value=500.0)
# Zero or at least a nanosecond: subnormal durations (5e-324 s) lose the static power to
# rounding in s = static energy / T and are not physical.
times = st.one_of(st.just(0.0), st.floats(min_value=1e-9, max_value=10.0))
dynamics = st.floats(min_value=0.0, max_value=1000.0)
var_times = st.floats(min_value=0.0, max_value=0.5)
var_dyns = st.floats(min_value=0.0, max_value=50.0)


@st.composite
def signatures(draw: st.DrawFn, static_power: float | None = None, device: str = "gpu0"):
    s = draw(powers) if static_power is None else static_power
    var_t = draw(var_times)
    return Signature(
        name=draw(st.sampled_from(["a", "b", "c", "gemm", "ar"])),
        static_power=s,
        time=draw(times),
        dynamic_energy=draw(dynamics),
        var_time=var_t,
        # σ_E² = s²σ_T² + σ_d² (Eq. 5) so that σ_d² is what was drawn.
        var_energy=s * s * var_t + draw(var_dyns),
        devices=(device,),
    )


def same_device_triple(draw: st.DrawFn) -> tuple[Signature, Signature, Signature]:
    s = draw(powers)
    return tuple(draw(signatures(static_power=s)) for _ in range(3))  # type: ignore[return-value]


def close(x: float, y: float) -> bool:
    return x == pytest.approx(y, rel=REL, abs=ABS)


def assert_same_value(x: Signature, y: Signature, variance: bool = True) -> None:
    assert close(x.energy, y.energy)
    assert close(x.time, y.time)
    assert close(x.dynamic_energy, y.dynamic_energy)
    if variance:
        assert close(x.var_energy, y.var_energy)
        assert close(x.var_time, y.var_time)


# Associativity (Property 5.2) -------------------------------------------------------------
@given(st.data())
def test_seq_is_associative(data: st.DataObject) -> None:
    a, b, c = (data.draw(signatures()) for _ in range(3))
    assert_same_value(seq(seq(a, b), c), seq(a, seq(b, c)))
    assert_same_value(seq(seq(a, b), c), seq(a, b, c))


@given(st.data())
def test_par_is_associative(data: st.DataObject) -> None:
    a, b, c = same_device_triple(data.draw)
    left, right = par(par(a, b), c), par(a, par(b, c))
    # Clark's recursion approximates a partial maximum by a Gaussian, so the grouping can
    # change Var(max) slightly; energy, time and dynamic energy are exact.
    assert_same_value(left, right, variance=False)
    assert close(left.energy, a.static_power * max(a.time, b.time, c.time) + a.dynamic_energy
                 + b.dynamic_energy + c.dynamic_energy)  # fmt: skip


@given(st.data())
def test_par_is_associative_in_variance_without_time_noise(data: st.DataObject) -> None:
    triple = same_device_triple(data.draw)
    a, b, c = (x.with_(var_time=0.0, var_energy=x.var_dynamic) for x in triple)
    assert_same_value(par(par(a, b), c), par(a, par(b, c)))


@given(st.data())
def test_par_multi_is_associative(data: st.DataObject) -> None:
    a, b, c = (data.draw(signatures(device=d)) for d in ("gpu0", "gpu1", "gpu2"))
    left, right = par_multi(par_multi(a, b), c), par_multi(a, par_multi(b, c))
    assert_same_value(left, right, variance=False)
    makespan = max(a.time, b.time, c.time)
    sum_s = a.static_power + b.static_power + c.static_power
    sum_d = a.dynamic_energy + b.dynamic_energy + c.dynamic_energy
    assert close(left.energy, sum_s * makespan + sum_d)


# Commutativity (Property 5.1, Corollary 5.1) ----------------------------------------------
@given(st.data())
def test_par_commutes(data: st.DataObject) -> None:
    a, b, _ = same_device_triple(data.draw)
    assert_same_value(par(a, b), par(b, a))


@given(st.data())
def test_par_multi_commutes(data: st.DataObject) -> None:
    a, b = data.draw(signatures(device="gpu0")), data.draw(signatures(device="gpu1"))
    assert_same_value(par_multi(a, b), par_multi(b, a))


@given(st.data())
def test_seq_commutes_in_the_context_independent_algebra(data: st.DataObject) -> None:
    a, b = data.draw(signatures()), data.draw(signatures())
    assert_same_value(seq(a, b), seq(b, a))
    assert seq(a, b).term == f"{a.name} ⊗ {b.name}"  # the term keeps execution order


# Non-distributivity (Property 5.4) --------------------------------------------------------
@given(st.data())
def test_seq_does_not_distribute_over_par_by_exactly_d1(data: st.DataObject) -> None:
    a, b, c = same_device_triple(data.draw)
    lhs = seq(a, par(b, c))
    rhs = par(seq(a, b), seq(a, c))
    assert close(rhs.energy - lhs.energy, a.dynamic_energy)
    assert close(rhs.static_energy, lhs.static_energy)  # same makespan, same static draw
    assert close(rhs.time, lhs.time)


@given(st.data())
def test_seq_does_not_distribute_over_par_multi_by_exactly_d1(data: st.DataObject) -> None:
    a = data.draw(signatures(device="gpu0"))
    b = data.draw(signatures(device="gpu0"))
    c = data.draw(signatures(device="gpu1")).with_(time=b.time)  # ⊕multi: equal durations
    # e1 ⊗ (e2 ⊕multi e3): gpu1 idles while e1 runs on gpu0 (paper, Appendix E.4).
    lhs = seq(par_multi(a, idle(a.time, c.static_power, "gpu1")), par_multi(b, c))
    rhs = par_multi(seq(a, b), seq(a.on("gpu1").with_(static_power=c.static_power), c))
    assert close(rhs.energy - lhs.energy, a.dynamic_energy)


# Monotonicity (Corollary 5.2) -------------------------------------------------------------
def _bigger(draw: st.DrawFn, x: Signature, keep_power: bool) -> Signature:
    return x.with_(
        static_power=x.static_power if keep_power else x.static_power + draw(powers),
        time=x.time + draw(times),
        dynamic_energy=x.dynamic_energy + draw(dynamics),
    )


def _composite(a: Signature, b: Signature, c: Signature, d: Signature) -> Signature:
    return par_multi(seq(a, par(b, c)), d)


@given(st.data())
def test_monotonicity_in_every_position(data: st.DataObject) -> None:
    # Corollary 5.2 holds with shared operating parameters fixed: every element on gpu0
    # draws the device's one static power s, and padding idles at the device's draw.
    s = data.draw(powers)
    a, b, c = (data.draw(signatures(static_power=s)) for _ in range(3))
    d = data.draw(signatures(device="gpu1"))
    base = _composite(a, b, c, d).energy
    tol = 1e-9 * max(1.0, base)
    assert _composite(_bigger(data.draw, a, True), b, c, d).energy >= base - tol
    assert _composite(a, _bigger(data.draw, b, True), c, d).energy >= base - tol
    assert _composite(a, b, _bigger(data.draw, c, True), d).energy >= base - tol
    # d is alone on gpu1, so its static power may grow too.
    assert _composite(a, b, c, _bigger(data.draw, d, False)).energy >= base - tol
    # A replacement that raises gpu0's shared operating state raises s for all of it.
    hotter = s + data.draw(powers)
    a2, b2, c2 = (x.with_(static_power=hotter) for x in (a, b, c))
    assert _composite(a2, b2, c2, d).energy >= base - tol


# Closure (Property 5.3) and operand checks --------------------------------------------------
@given(st.data())
def test_composites_are_valid_signatures(data: st.DataObject) -> None:
    a, b, c = same_device_triple(data.draw)
    d = data.draw(signatures(device="gpu1"))
    for comp in (seq(a, b), par(a, b, c), par_multi(seq(a, par(b, c)), d)):
        # Axiom P1 holds for the composite: E = s·T + d with non-negative components.
        assert comp.static_power >= 0 and comp.time >= 0 and comp.dynamic_energy >= 0
        assert comp.var_energy >= 0 and comp.var_time >= 0
        assert Signature.from_dict(comp.to_dict()) == comp


def test_par_refuses_different_static_powers() -> None:
    a = Signature("a", 60.0, 1.0, 1.0, devices=("gpu0",))
    b = Signature("b", 70.0, 1.0, 1.0, devices=("gpu0",))
    with pytest.raises(CompositionError, match=r"shared static power.*'a' has 60 W.*'b' has 70"):
        par(a, b)


def test_par_and_seq_refuse_different_devices_par_multi_shared_ones() -> None:
    a = Signature("a", 60.0, 1.0, 1.0, devices=("gpu0",))
    b = Signature("b", 60.0, 1.0, 1.0, devices=("gpu1",))
    with pytest.raises(CompositionError, match=r"same device.*use par_multi"):
        par(a, b)
    with pytest.raises(CompositionError, match="same device"):
        seq(a, b)
    with pytest.raises(CompositionError, match=r"disjoint devices.*'gpu0'"):
        par_multi(a, a.with_(name="a2"))


def test_par_multi_pads_with_given_idle_power() -> None:
    a = Signature("a", 60.0, 2.0, 10.0, devices=("gpu0",))
    b = Signature("b", 80.0, 1.0, 5.0, devices=("gpu1",))
    assert par_multi(a, b).energy == pytest.approx(60 * 2 + 10 + 80 * 2 + 5)
    assert par_multi(a, b, idle_power=30.0).energy == pytest.approx(60 * 2 + 10 + 80 + 30 + 5)
    mapped = par_multi(a, b, idle_power={"gpu0": 1.0, "gpu1": 20.0})
    assert mapped.energy == pytest.approx(60 * 2 + 10 + 80 + 20 + 5)
    assert mapped.term == "(a ⊕multi (b ⊗ ι))"
