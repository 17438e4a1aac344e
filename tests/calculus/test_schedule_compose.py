"""compose_schedule against brute-force accounting, and its structure and errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eopt.calculus import CompositionError, Library, Placement, Signature, read_placements
from eopt.calculus.schedule import compose_schedule
from eopt.model.operating_point import OperatingPoint


def el(name: str, t: float, d: float = 1.0, s: float = 50.0, dev: str = "g0") -> Signature:
    return Signature(name, static_power=s, time=t, dynamic_energy=d, devices=(dev,))


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Length of a union of intervals: the independent truth for busy time."""
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


@st.composite
def schedules(draw: st.DrawFn) -> tuple[list[tuple[Signature, str, float]], dict[str, float]]:
    devices = draw(st.lists(st.sampled_from(["g0", "g1", "g2"]), min_size=1, max_size=3,
                            unique=True))  # fmt: skip
    powers = {d: float(draw(st.integers(0, 300))) for d in devices}
    items = []
    for i in range(draw(st.integers(1, 7))):
        dev = draw(st.sampled_from(devices))
        # A quarter-second grid makes touching and co-starting elements likely.
        start = draw(st.integers(0, 40)) * 0.25
        time = draw(st.integers(0, 24)) * 0.25
        d = float(draw(st.integers(0, 100)))
        items.append((el(f"e{i}", time, d, powers[dev], dev), dev, start))
    return items, powers


@given(schedules(), st.sampled_from([None, 0.0, 17.5]))
def test_energy_equals_brute_force_accounting(sched, idle_power) -> None:
    items, powers = sched
    result = compose_schedule(items, idle_power=idle_power)
    origin = min(start for _, _, start in items)
    horizon = max(start + sig.time for sig, _, start in items)
    expected = sum(sig.dynamic_energy for sig, _, _ in items)
    for dev in {dev for _, dev, _ in items}:
        busy = union_length([(st_, st_ + s.time) for s, d, st_ in items if d == dev])
        idle_draw = powers[dev] if idle_power is None else idle_power
        expected += powers[dev] * busy + idle_draw * (horizon - origin - busy)
    assert result.energy == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert result.time == pytest.approx(horizon - origin, abs=1e-12)
    assert result.dynamic_energy == pytest.approx(sum(s.dynamic_energy for s, _, _ in items))
    # Every element appears once in the term, in addition to idle elements.
    names = [t for t in result.term.replace("(", " ").replace(")", " ").split() if t[0] == "e"]
    assert sorted(names) == sorted(sig.name for sig, _, _ in items)


def test_chain_overlap_forms_one_par_group() -> None:
    a, b, c = el("A", 5.0), el("B", 6.0), el("C", 3.0)
    result = compose_schedule([(a, "g0", 0.0), (b, "g0", 4.0), (c, "g0", 9.0)])
    assert result.term == "(A ⊕ (ι ⊗ B) ⊕ (ι ⊗ C))"
    assert result.time == 12.0
    assert result.energy == pytest.approx(50.0 * 12.0 + 3.0)


def test_nested_and_costarting_and_touching_elements() -> None:
    a, b = el("A", 10.0), el("B", 2.0)
    assert compose_schedule([(a, "g0", 0.0), (b, "g0", 2.0)]).term == "(A ⊕ (ι ⊗ B))"
    assert compose_schedule([(a, "g0", 0.0), (b, "g0", 0.0)]).term == "(A ⊕ B)"
    touching = compose_schedule([(b, "g0", 0.0), (a, "g0", 2.0)])
    assert touching.term == "B ⊗ A"
    assert touching.time == 12.0


def test_origin_is_the_earliest_start() -> None:
    result = compose_schedule([(el("A", 1.0), "g0", 5.0), (el("B", 1.0, dev="g1"), "g1", 6.0)])
    assert result.term == "((A ⊗ ι) ⊕multi (ι ⊗ B))"
    assert result.time == 2.0


def test_gap_draws_the_previous_elements_static_power() -> None:
    # The device stays at the operating point the previous element left it in.
    a, b = el("A", 1.0, d=0.0, s=40.0), el("B", 1.0, d=0.0, s=100.0)
    result = compose_schedule([(a, "g0", 0.0), (b, "g0", 3.0)])
    assert result.energy == pytest.approx(40.0 * 1 + 40.0 * 2 + 100.0 * 1)
    given_power = compose_schedule([(a, "g0", 0.0), (b, "g0", 3.0)], idle_power={"g0": 10.0})
    assert given_power.energy == pytest.approx(40.0 + 20.0 + 100.0)


def test_overlapping_elements_with_different_static_powers_are_refused() -> None:
    a, b = el("gemm", 2.0, s=60.0), el("allreduce", 2.0, s=65.0)
    with pytest.raises(CompositionError) as info:
        compose_schedule([(a, "g0", 0.0), (b, "g0", 1.0)])
    message = str(info.value)
    assert "'g0'" in message and "'gemm'" in message and "'allreduce'" in message
    assert "60 W" in message and "65 W" in message and "same static power" in message


def test_placement_forms_and_errors() -> None:
    a = el("A", 1.0, dev="g3")
    forms = [
        [Placement(a, "g3", 0.0)],
        [(a, "g3", 0.0)],
        [{"signature": a, "device": "g3", "start": 0.0}],
        [{"signature": a, "start": 0.0}],  # the signature's own device
    ]
    for placements in forms:
        assert compose_schedule(placements).devices == ("g3",)
    # Placing moves the element to the given device.
    assert compose_schedule([(a, "g7", 0.0)]).devices == ("g7",)
    with pytest.raises(ValueError, match="at least one"):
        compose_schedule([])
    with pytest.raises(ValueError, match="missing key"):
        compose_schedule([{"signature": a}])
    with pytest.raises(ValueError, match="start must be a finite number"):
        compose_schedule([(a, "g3", float("nan"))])
    with pytest.raises(ValueError, match="no device given"):
        compose_schedule([{"signature": el("A", 1.0).on(()), "start": 0.0}])
    with pytest.raises(ValueError, match="idle_power has no entry for device 'g1'"):
        compose_schedule(
            [(el("A", 1.0), "g0", 0.0), (el("B", 2.0), "g1", 0.0)], idle_power={"g0": 5.0}
        )


# Placement files ----------------------------------------------------------------------------
@pytest.fixture
def library() -> Library:
    return Library(
        [
            el("F", 1e-3, s=60.0, dev="gpu0"),
            el("F", 1e-3, s=60.0, dev="gpu1"),
            Signature("gemm", 60.0, 2e-3, 0.5, impl="cutlass"),
            Signature("gemm", 60.0, 3e-3, 0.5, impl="cublas"),
        ]
    )


def _write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_read_placements_yaml_and_json(tmp_path: Path, library: Library) -> None:
    yaml_file = _write(
        tmp_path,
        "idle_power: {gpu0: 30W, gpu1: 40}\nplacements:\n"
        "  - {element: F, device: gpu0, start: 0}\n"
        "  - {element: 'gemm[impl=cutlass]', device: gpu1, start: 1ms}\n",
    )
    spec = read_placements(yaml_file, library)
    assert spec.idle_power == {"gpu0": 30.0, "gpu1": 40.0}
    assert [p.start for p in spec.placements] == [0.0, 1e-3]
    assert spec.placements[1].signature.impl == "cutlass"
    assert spec.placements[1].device == "gpu1"
    json_file = _write(
        tmp_path, '[{"element": "F", "device": "gpu1", "start": 0.5}]', name="s.json"
    )
    (only,) = read_placements(json_file, library).placements
    assert only.signature.devices == ("gpu1",) and only.start == 0.5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("placements:\n  - {element: F, device: gpu0}\n", ":2: placement 1 (F): missing"),
        ("- {element: F, device: gpu0, start: 0}\n- {element: F, device: gpu0, start: 1, x: 2}\n",
         ":2: placement 2 (F): unknown key(s) ['x']"),
        ("- {element: G, device: gpu0, start: 0}\n", "no element named 'G'"),
        ("- {element: gemm, device: gpu0, start: 0}\n", "matches 2 signatures"),
        ("- {element: F, device: gpu0, start: soon}\n", "start: cannot read 'soon'"),
        ("- {element: F, device: gpu0, start: -1}\n", "must be a finite number ≥ 0"),
        ("- [F, gpu0, 0]\n", "expected a mapping"),
        ("placements: []\n", "non-empty list"),
        ("{placements: [], idle: 3}\n", "unknown key(s) ['idle']"),
        ("- {element: F\n", "not valid YAML/JSON"),
        ("idle_power: lots\nplacements:\n  - {element: F, device: gpu0, start: 0}\n",
         "idle_power: cannot read 'lots'"),
    ],
)  # fmt: skip
def test_read_placements_errors_name_file_and_place(
    tmp_path: Path, library: Library, text: str, expected: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ValueError) as info:
        read_placements(path, library)
    assert str(path) in str(info.value)
    assert expected in str(info.value)


def test_read_placements_missing_file(tmp_path: Path, library: Library) -> None:
    with pytest.raises(ValueError, match="no such placements file"):
        read_placements(tmp_path / "nope.yaml", library)


def test_read_solved_schedule_matches_the_solver_accounting(tmp_path: Path) -> None:
    lib = Library(
        [
            Signature("fwd", 80.0, 0.05, 20.0, op_point=OperatingPoint(1410.0)),
            Signature("fwd", 70.0, 0.07, 15.0, op_point=OperatingPoint(1200.0)),
            Signature("bwd", 80.0, 0.10, 40.0, op_point=OperatingPoint(1410.0)),
        ]
    )
    elements = [
        ("F0", "fwd", "s0", 0.00, 0.05, 1410.0),
        ("F1", "fwd", "s1", 0.05, 0.07, 1200.0),
        ("B1", "bwd", "s1", 0.12, 0.10, 1410.0),
        ("B0", "bwd", "s0", 0.22, 0.10, 1410.0),
    ]
    # design.md: E = Σ E_i + Σ_dev s̄_dev·(H − busy_dev), H = 0.32 s.
    elements_energy = 80 * 0.05 + 20 + 70 * 0.07 + 15 + 2 * (80 * 0.10 + 40)
    idle_energy = 30.0 * (0.32 - 0.15) + 40.0 * (0.32 - 0.17)
    data = {
        "schema": "eopt.schedule/1",
        "makespan": 0.32,
        "energy": {"predicted": elements_energy + idle_energy},
        "devices": [{"name": "s0", "idle_power_w": 30.0}, {"name": "s1", "idle_power_w": 40.0}],
        "elements": [
            {
                "name": n,
                "type": t,
                "device": d,
                "start": st,
                "duration": du,
                "energy": 0.0,
                "impl": "default",
                "op_point": {"sm_clock_mhz": f},
            }
            for n, t, d, st, du, f in elements
        ],
    }
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    spec = read_placements(path, lib)
    assert spec.idle_power == {"s0": 30.0, "s1": 40.0}
    result = compose_schedule(spec.placements, spec.idle_power)
    assert result.energy == pytest.approx(elements_energy + idle_energy, rel=1e-12)
    assert result.term == "((fwd ⊗ ι ⊗ bwd) ⊕multi (ι ⊗ fwd ⊗ bwd ⊗ ι))"

    data["elements"][1]["op_point"] = {"sm_clock_mhz": 900.0}
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=r"elements\[1\] \(F1\): no signature 'fwd'.*900MHz"):
        read_placements(path, lib)
    data["elements"][1]["op_point"] = {"sm_clock_mhz": 1200.0}
    data["elements"][1]["duration"] = 0.08
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=r"says 0\.08 s but the library's signature takes 0.07 s"):
        read_placements(path, lib)


def test_schedule_bias_follows_the_eq9_structure() -> None:
    from eopt.calculus.schedule import schedule_bias
    from eopt.calculus.uncertainty import c_alpha, chain_bias

    def noisy(name: str, t: float, dev: str, sigma: float) -> Signature:
        return Signature(name, 50.0, t, 1.0, var_energy=sigma**2, devices=(dev,))

    a, b, c = noisy("a", 1.0, "g0", 0.1), noisy("b", 1.0, "g0", 0.2), noisy("c", 1.0, "g0", 0.3)
    # One device, back to back from the null context: the chain bound of Eq. (36).
    chain = schedule_bias([(a, "g0", 0.0), (b, "g0", 1.0), (c, "g0", 3.0)])
    assert chain.bias == pytest.approx(chain_bias([a, b, c]).bias)
    # b overlaps c in a ⊕ group: both co-run (+1); a still starts the chain.
    grouped = schedule_bias([(a, "g0", 0.0), (b, "g0", 1.0), (c, "g0", 1.5)])
    assert [m for _, m, _ in grouped.contributions] == [0.0, 2.0, 2.0]
    # Two devices joined by ⊕multi: every element co-runs, and App. D's idle window adds:
    # g1 ends first and waits for g0, so a and b, which set the makespan, carry the
    # waiting device's draw as the power ratio 1 + s₁/s₂ = 2 (its tail has a planned,
    # noise-free length here: no tolerance of its own).
    d = noisy("d", 1.0, "g1", 0.4)
    multi = schedule_bias([(a, "g0", 0.0), (b, "g0", 1.0), (d, "g1", 0.5)])
    assert [m for _, m, _ in multi.contributions] == [2.0, 4.0, 2.0]
    assert multi.bias == pytest.approx(c_alpha() * (2 * 0.1 + 4 * 0.2 + 2 * 0.4))


def test_schedule_bias_of_a_padded_pair_is_app_d_s_formula() -> None:
    from eopt.calculus.expression import expression_bias, parse_expression
    from eopt.calculus.schedule import schedule_bias
    from eopt.calculus.uncertainty import padded_pair_bias

    rng = np.random.default_rng(5)
    for _ in range(5):
        s1, s2 = rng.uniform(40, 90, 2)
        e1 = Signature("e1", s1, 1.0, 5.0, var_time=rng.uniform(1e-4, 1e-2), var_energy=0.3,
                       devices=("g0",))  # fmt: skip
        e2 = Signature("e2", s2, 2.0, 9.0, var_time=rng.uniform(1e-4, 1e-2), var_energy=0.5,
                       devices=("g1",))  # fmt: skip
        # Not at the null context: two substitutions each, as in App. D's derivation; its
        # σ_Eι² = s₁²(σ_T1² + σ_T2²) is the first-order Var(M − T₁) (e₂ all but surely
        # the longer).
        bias = schedule_bias([(e1, "g0", 0.0), (e2, "g1", 0.0)], starts_at_null=False)
        assert bias.bias == pytest.approx(padded_pair_bias(e1, e2).bias, rel=1e-6)
        # The same composition written as an expression.
        expr = expression_bias(parse_expression("e1 || e2"), [e1, e2], starts_at_null=False)
        assert expr.bias == pytest.approx(bias.bias, rel=1e-9)


def test_schedule_breakdown_adds_up_to_the_composition() -> None:
    from eopt.calculus.schedule import schedule_breakdown

    a, b, c = el("A", 2.0, d=3.0, s=50.0), el("B", 1.0, d=1.0, s=50.0), el("C", 1.0, d=2.0)
    placements = [(a, "g0", 0.0), (b, "g0", 1.5), (c.on("g1"), "g1", 3.0)]
    usage = schedule_breakdown(placements, idle_power={"g0": 10.0, "g1": 20.0})
    g0, g1 = usage
    # g0: A ⊕ (ι ⊗ B) busy 0–2.5 s, then idle to 4 s; g1: idle 0–3 s, C 3–4 s.
    assert (g0.device, g0.busy_s, g0.idle_s) == ("g0", 2.5, 1.5)
    assert (g0.busy_static_j, g0.idle_j, g0.dynamic_j) == pytest.approx((125.0, 15.0, 4.0))
    assert (g1.busy_s, g1.idle_s, g1.idle_j) == pytest.approx((1.0, 3.0, 60.0))
    total = compose_schedule(placements, idle_power={"g0": 10.0, "g1": 20.0}).energy
    assert sum(u.energy_j for u in usage) == pytest.approx(total)
