"""Frontier construction and composition against brute-force enumeration.

The independent truth is the calculus itself: every combination of cells is composed with
the operators of ``eopt.calculus.operators`` and the Pareto-minimal points of the result
are computed by a quadratic scan; the frontier code must find exactly those points.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from eopt.calculus.frontier import Frontier, FrontierError, FrontierPoint, pareto_mask
from eopt.calculus.operators import par, par_multi, seq
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature


def _cells(
    rng: random.Random, name: str, device: str, n_clocks: int, n_impls: int
) -> list[Signature]:
    """Random cells: one static power per clock (device-wide), random T and d per cell."""
    out = []
    for k in range(n_clocks):
        clock = 900.0 + 100.0 * k
        static = rng.uniform(40.0, 90.0)
        for impl in range(n_impls):
            out.append(
                Signature(
                    name,
                    static_power=static,
                    time=rng.uniform(0.5, 3.0),
                    dynamic_energy=rng.uniform(0.0, 150.0),
                    var_time=rng.uniform(0.0, 0.01),
                    var_energy=rng.uniform(0.0, 4.0),
                    devices=(device,),
                    impl=f"k{impl}",
                    op_point=OperatingPoint(sm_clock_mhz=clock),
                )
            )
    return out


def _pareto_brute(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Pareto-minimal (T, E) points by an O(n²) scan, duplicates collapsed."""
    uniq = sorted(set(points))
    keep = []
    for p in uniq:
        dominated = any(
            q != p and q[0] <= p[0] and q[1] <= p[1] and (q[0] < p[0] or q[1] < p[1]) for q in uniq
        )
        if not dominated:
            keep.append(p)
    return keep


def _assert_same_points(front: Frontier, expected: list[tuple[float, float]]) -> None:
    got = sorted((p.time, p.energy) for p in front.points)
    assert len(got) == len(expected), (got, expected)
    np.testing.assert_allclose(np.array(got), np.array(sorted(expected)), rtol=1e-9, atol=1e-9)


def _recompose(point: FrontierPoint, op: str, **kw: object) -> Signature:
    """Rebuild a composite point from its leaf cells with the calculus operators."""
    a, b = (_leaf_sig(part) for part in point.parts)
    if op == "seq":
        return seq(a, b)
    if op == "par":
        return par(a, b)
    return par_multi(a, b, **kw)  # type: ignore[arg-type]


def _leaf_sig(point: FrontierPoint) -> Signature:
    if point.signature is not None:
        return point.signature
    a, b = (_leaf_sig(part) for part in point.parts)
    return seq(a, b)


SEEDS = range(25)


def test_single_element_frontier_is_the_pareto_set() -> None:
    rng = random.Random(7)
    for _ in range(20):
        cells = _cells(rng, "x", "g0", n_clocks=5, n_impls=3)
        front = Frontier.from_signatures(cells, dominance="point")
        _assert_same_points(front, _pareto_brute([(c.time, c.energy) for c in cells]))
        times = [p.time for p in front.points]
        energies = [p.energy for p in front.points]
        assert times == sorted(times)
        assert all(e1 > e2 for e1, e2 in itertools.pairwise(energies))
        assert front.fastest.time == min(c.time for c in cells)
        assert front.min_energy.energy == pytest.approx(min(c.energy for c in cells))


@pytest.mark.parametrize("seed", SEEDS)
def test_seq_is_pareto_min_of_minkowski_sum(seed: int) -> None:
    rng = random.Random(seed)
    a = _cells(rng, "a", "g0", 4, 2)
    b = _cells(rng, "b", "g0", 3, 2)
    brute = [(x.time + y.time, x.energy + y.energy) for x, y in itertools.product(a, b)]
    fa = Frontier.from_signatures(a, dominance="point")
    fb = Frontier.from_signatures(b, dominance="point")
    composite = fa.seq(fb)
    _assert_same_points(composite, _pareto_brute(brute))
    for p in composite.points:
        truth = _recompose(p, "seq")
        assert p.var_energy == pytest.approx(truth.var_energy)
        assert p.var_time == pytest.approx(truth.var_time)
        assert p.dynamic_energy == pytest.approx(truth.dynamic_energy)


@pytest.mark.parametrize("seed", SEEDS)
def test_par_same_device_matches_brute_force(seed: int) -> None:
    rng = random.Random(100 + seed)
    a = _cells(rng, "a", "g0", 3, 3)
    # b shares the device: its cells at a clock must carry the same static power as a's.
    static = {c.op_point.device_key: c.static_power for c in a}
    b = [
        c.with_(name="b", static_power=static[c.op_point.device_key])
        for c in _cells(rng, "b", "g0", 3, 3)
    ]
    brute = []
    for x, y in itertools.product(a, b):
        if x.op_point.device_key != y.op_point.device_key:
            continue
        brute.append((par(x, y).time, par(x, y).energy))
    composite = Frontier.from_signatures(a, dominance="point").par(
        Frontier.from_signatures(b, dominance="point")
    )
    _assert_same_points(composite, _pareto_brute(brute))
    for p in composite.points:
        truth = _recompose(p, "par")
        assert p.var_energy == pytest.approx(truth.var_energy, rel=1e-9, abs=1e-12)
        assert p.var_time == pytest.approx(truth.var_time, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_par_multi_matches_brute_force(seed: int) -> None:
    rng = random.Random(200 + seed)
    a = _cells(rng, "a", "g0", 3, 2)
    b = _cells(rng, "b", "g1", 4, 2)
    fa = Frontier.from_signatures(a, dominance="point")
    fb = Frontier.from_signatures(b, dominance="point")
    # Default padding: each side idles at its own static power.
    brute = [(par_multi(x, y).time, par_multi(x, y).energy) for x, y in itertools.product(a, b)]
    composite = fa.par_multi(fb)
    _assert_same_points(composite, _pareto_brute(brute))
    for p in composite.points:
        truth = _recompose(p, "par_multi")
        assert p.var_energy == pytest.approx(truth.var_energy, rel=1e-9, abs=1e-12)
    # Explicit idle draws below every active static power (condition (iii) regime).
    idle = {"g0": 30.0, "g1": 25.0}
    brute = [
        (par_multi(x, y, idle_power=idle).time, par_multi(x, y, idle_power=idle).energy)
        for x, y in itertools.product(a, b)
    ]
    composite = fa.par_multi(fb, idle_power=30.0, other_idle_power=25.0)
    _assert_same_points(composite, _pareto_brute(brute))


@pytest.mark.parametrize("seed", range(10))
def test_nested_seq_then_par_matches_brute_force(seed: int) -> None:
    """(a ⊗ b) ⊕ c on one device: the coupling candidates must survive the seq step."""
    rng = random.Random(300 + seed)
    a = _cells(rng, "a", "g0", 2, 2)
    static = {c.op_point.device_key: c.static_power for c in a}

    def same_static(cells: list[Signature]) -> list[Signature]:
        return [c.with_(static_power=static[c.op_point.device_key]) for c in cells]

    b = same_static(_cells(rng, "b", "g0", 2, 2))
    c = same_static(_cells(rng, "c", "g0", 2, 3))
    brute = []
    for x, y, z in itertools.product(a, b, c):
        keys = {x.op_point.device_key, y.op_point.device_key, z.op_point.device_key}
        if len(keys) != 1:
            continue
        composite = par(seq(x, y), z)
        brute.append((composite.time, composite.energy))
    fa, fb, fc = (Frontier.from_signatures(s, dominance="point") for s in (a, b, c))
    _assert_same_points(fa.seq(fb).par(fc), _pareto_brute(brute))


def test_slack_to_energy_needs_a_dominated_cell() -> None:
    """Property 6.2: a (T, E)-dominated cell of the short element wins under ⊕."""
    clock = OperatingPoint(sm_clock_mhz=1200.0)
    long = Signature("long", 50.0, 10.0, 100.0, devices=("g0",), op_point=clock)
    fast = Signature("short", 50.0, 1.0, 20.0, devices=("g0",), impl="fast", op_point=clock)
    slow = Signature("short", 50.0, 3.0, 5.0, devices=("g0",), impl="slow", op_point=clock)
    short = Frontier.from_signatures([fast, slow], dominance="point")
    assert [p.signature for p in short.points] == [fast]  # slow: 155 J vs 70 J, dominated
    composite = Frontier.from_signatures([long], dominance="point").par(short)
    assert len(composite.points) == 1
    best = composite.points[0]
    assert best.energy == pytest.approx(50.0 * 10.0 + 100.0 + 5.0)
    assert [s.impl for s in best.cells()] == ["default", "slow"]
    # The same on two devices, with the idle draw above the slowed element's static power
    # excluded: here both draw 50 W, so filling the slack with the slow cell still wins.
    other = Frontier.from_signatures([fast.on("g1"), slow.on("g1")], dominance="point")
    multi = Frontier.from_signatures([long], dominance="point").par_multi(other)
    assert multi.min_energy.energy == pytest.approx(500.0 + 100.0 + 50.0 * 10.0 + 5.0)


def test_interval_dominance_keeps_overlapping_points() -> None:
    clock = OperatingPoint(sm_clock_mhz=1000.0)
    a = Signature("x", 50.0, 1.0, 10.0, var_time=1e-6, var_energy=4.0, op_point=clock)
    # Worse by 1 J in energy, same time: point-dominated, but the 95 % intervals overlap.
    b = Signature("x", 50.0, 1.0, 11.0, var_time=1e-6, var_energy=4.0, impl="b", op_point=clock)
    # Worse by 40 J: intervals separate.
    c = Signature("x", 50.0, 1.5, 50.0, var_time=1e-6, var_energy=4.0, impl="c", op_point=clock)
    by_interval = Frontier.from_signatures([a, b, c], dominance="interval", confidence=0.95)
    by_point = Frontier.from_signatures([a, b, c], dominance="point")
    assert {p.signature.impl for p in by_interval.points} == {"default", "b"}  # type: ignore[union-attr]
    assert [p.signature for p in by_point.points] == [a]
    assert {s.impl for s in (p.signature for p in by_interval.dominated) if s} == {"c"}


def test_interval_dominance_brute_force() -> None:
    rng = np.random.default_rng(5)
    c = 1.96
    for _ in range(30):
        n = 25
        t, e = rng.uniform(1, 3, n), rng.uniform(10, 30, n)
        st, se = rng.uniform(0, 0.2, n), rng.uniform(0, 2, n)
        mask = pareto_mask(t, e, st, se, c)
        for i in range(n):
            dominated = any(
                t[j] + c * st[j] <= t[i] - c * st[i]
                and e[j] + c * se[j] <= e[i] - c * se[i]
                and (t[j] + c * st[j] < t[i] - c * st[i] or e[j] + c * se[j] < e[i] - c * se[i])
                for j in range(n)
                if j != i
            )
            assert mask[i] == (not dominated)


def test_errors_are_clear() -> None:
    with pytest.raises(FrontierError, match="needs its cells"):
        Frontier.from_signatures([])
    with pytest.raises(FrontierError, match="dominance"):
        Frontier.from_signatures([Signature("x", 1.0, 1.0, 1.0)], dominance="strict")
    a = Frontier.from_signatures(
        [Signature("a", 50.0, 1.0, 1.0, op_point=OperatingPoint(sm_clock_mhz=900.0))]
    )
    b = Frontier.from_signatures(
        [Signature("b", 60.0, 1.0, 1.0, op_point=OperatingPoint(sm_clock_mhz=1000.0))]
    )
    with pytest.raises(FrontierError, match="share the device-wide operating point"):
        a.par(b)


def test_rows_carry_units_and_labels() -> None:
    cell = Signature(
        "x", 50.0, 2.0, 10.0, var_energy=1.0, op_point=OperatingPoint(sm_clock_mhz=1410.0)
    )
    (row,) = Frontier.from_signatures([cell]).to_rows()
    assert row["time_s"] == 2.0
    assert row["energy_j"] == 110.0
    assert row["energy_low_j"] == pytest.approx(110.0 - 1.959964, rel=1e-6)
    assert row["sm_clock_mhz"] == 1410.0
    assert math.isclose(row["static_power_w"], 50.0)


@pytest.mark.parametrize("seed", range(15))
def test_par_multi_with_idle_draw_above_some_static_powers(seed: int) -> None:
    """s̄ between the cells' static powers: slower, lower-draw cells fill slack (6.2 iii)."""
    rng = random.Random(400 + seed)
    a = _cells(rng, "a", "g0", 4, 2)
    b = _cells(rng, "b", "g1", 3, 2)
    fa = Frontier.from_signatures(a, dominance="point")
    fb = Frontier.from_signatures(b, dominance="point")
    idle_a = rng.uniform(min(c.static_power for c in a), fa.idle_cap_w)
    idle_b = rng.uniform(min(c.static_power for c in b), fb.idle_cap_w)
    idle = {"g0": idle_a, "g1": idle_b}
    brute = [
        (par_multi(x, y, idle_power=idle).time, par_multi(x, y, idle_power=idle).energy)
        for x, y in itertools.product(a, b)
    ]
    composite = fa.par_multi(fb, idle_power=idle_a, other_idle_power=idle_b)
    _assert_same_points(composite, _pareto_brute(brute))


@pytest.mark.parametrize("seed", range(10))
def test_nested_seq_then_par_multi_matches_brute_force(seed: int) -> None:
    """(a ⊗ b) ⊕multi c, padded at a device idle draw: candidates survive the ⊗ step."""
    rng = random.Random(500 + seed)
    a = _cells(rng, "a", "g0", 3, 2)
    b = _cells(rng, "b", "g0", 2, 2)
    c = _cells(rng, "c", "g1", 3, 2)
    fa, fb, fc = (Frontier.from_signatures(s, dominance="point") for s in (a, b, c))
    left = fa.seq(fb)
    idle_l = rng.uniform(30.0, left.idle_cap_w)
    idle_c = rng.uniform(30.0, fc.idle_cap_w)
    brute = []
    for x, y, z in itertools.product(a, b, c):
        composite = par_multi(seq(x, y), z, idle_power={"g0": idle_l, "g1": idle_c})
        brute.append((composite.time, composite.energy))
    got = left.par_multi(fc, idle_power=idle_l, other_idle_power=idle_c)
    _assert_same_points(got, _pareto_brute(brute))


@pytest.mark.parametrize("seed", range(8))
def test_two_sequences_in_parallel_on_one_device(seed: int) -> None:
    """(a ⊗ b) ⊕ (c ⊗ d) on one device, every operand free to pick its clock."""
    rng = random.Random(600 + seed)
    a = _cells(rng, "a", "g0", 2, 2)
    static = {x.op_point.device_key: x.static_power for x in a}

    def same_static(cells: list[Signature]) -> list[Signature]:
        return [x.with_(static_power=static[x.op_point.device_key]) for x in cells]

    b, c, d = (same_static(_cells(rng, n, "g0", 2, 2)) for n in "bcd")
    brute = []
    for w, x, y, z in itertools.product(a, b, c, d):
        if len({v.op_point.device_key for v in (w, x, y, z)}) != 1:
            continue
        composite = par(seq(w, x), seq(y, z))
        brute.append((composite.time, composite.energy))
    fronts = [Frontier.from_signatures(s, dominance="point") for s in (a, b, c, d)]
    got = fronts[0].seq(fronts[1]).par(fronts[2].seq(fronts[3]))
    _assert_same_points(got, _pareto_brute(brute))


def test_slower_cell_of_the_same_clock_fills_slack_when_idle_draws_more() -> None:
    """Property 6.2 (iii) on two devices: with s̄ above the element's static power, a
    slower implementation at the same clock wins although it is dominated in T, d and s·T.
    """
    clock, hot = OperatingPoint(sm_clock_mhz=900.0), OperatingPoint(sm_clock_mhz=1400.0)
    fast = Signature("short", 40.0, 1.0, 20.0, devices=("g0",), impl="fast", op_point=clock)
    slow = Signature("short", 40.0, 3.0, 25.0, devices=("g0",), impl="slow", op_point=clock)
    turbo = Signature("short", 80.0, 0.9, 40.0, devices=("g0",), impl="fast", op_point=hot)
    long = Signature("long", 50.0, 10.0, 100.0, devices=("g1",))
    short = Frontier.from_signatures([fast, slow, turbo], dominance="point")
    assert short.idle_cap_w == 80.0
    got = short.par_multi(Frontier.from_signatures([long], dominance="point"), idle_power=60.0)
    brute = [
        (par_multi(x, long, idle_power={"g0": 60.0}).time,
         par_multi(x, long, idle_power={"g0": 60.0}).energy)
        for x in (fast, slow, turbo)
    ]  # fmt: skip
    _assert_same_points(got, _pareto_brute(brute))
    assert [s.impl for s in got.min_energy.cells()] == ["slow", "default"]


@pytest.mark.parametrize("seed", range(30))
def test_par_multi_with_per_cell_static_power(seed: int) -> None:
    """Cells of one clock measured with different static powers (default padding)."""
    rng = random.Random(700 + seed)
    a = [c.with_(static_power=rng.uniform(30.0, 90.0)) for c in _cells(rng, "a", "g0", 2, 4)]
    b = [c.with_(static_power=rng.uniform(30.0, 90.0)) for c in _cells(rng, "b", "g1", 2, 3)]
    c = [c.with_(static_power=rng.uniform(30.0, 90.0)) for c in _cells(rng, "c", "g0", 1, 3)]
    fa, fb, fc = (Frontier.from_signatures(s, dominance="point") for s in (a, b, c))
    brute = [(par_multi(x, y).time, par_multi(x, y).energy) for x, y in itertools.product(a, b)]
    _assert_same_points(fa.par_multi(fb), _pareto_brute(brute))
    # After a sequential step, pad at a device draw (the composite's s is a mean).
    left = fa.seq(fc)
    idle = rng.uniform(30.0, left.idle_cap_w)
    idle_b = min(idle, fb.idle_cap_w)
    brute = [
        (
            par_multi(seq(x, z), y, idle_power={"g0": idle, "g1": idle_b}).time,
            par_multi(seq(x, z), y, idle_power={"g0": idle, "g1": idle_b}).energy,
        )
        for x, y, z in itertools.product(a, b, c)
    ]
    got = left.par_multi(fb, idle_power=idle, other_idle_power=idle_b)
    _assert_same_points(got, _pareto_brute(brute))


def test_default_padding_needs_the_static_power_coordinate() -> None:
    """Padding each side at its own static power: a cell with less static power wins over
    one that is no worse in T, d, s·T and E − S·T (same clock, different impls)."""
    clock = OperatingPoint(sm_clock_mhz=1000.0)
    q = Signature("x", 60.0, 1.0, 0.0, devices=("g0",), impl="q", op_point=clock)
    p = Signature("x", 30.0, 2.0, 60.0, devices=("g0",), impl="p", op_point=clock)
    long = Signature("long", 50.0, 10.0, 0.0, devices=("g1",))
    short = Frontier.from_signatures([q, p], dominance="point")
    got = short.par_multi(Frontier.from_signatures([long], dominance="point"))
    brute = [(par_multi(x, long).time, par_multi(x, long).energy) for x in (q, p)]
    _assert_same_points(got, _pareto_brute(brute))
    assert got.min_energy.energy == pytest.approx((30.0 + 50.0) * 10.0 + 60.0)
