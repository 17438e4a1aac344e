"""The composition expression parser: notations, selectors, and errors with carets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eopt.calculus import (
    ExpressionError,
    Signature,
    compose_expression,
    par,
    par_multi,
    parse_expression,
    resolve_element,
    seq,
)
from eopt.model.operating_point import OperatingPoint


def _lib() -> list[Signature]:
    return [
        Signature("a", 60.0, 1.0, 1.0, var_time=0.01, var_energy=1.0),
        Signature("b", 60.0, 2.0, 2.0, var_time=0.02, var_energy=2.0),
        Signature("c", 60.0, 3.0, 3.0),
        Signature("stage0.fwd-1", 60.0, 0.5, 0.5, devices=("gpu0",)),
        Signature("stage1:fwd/x@2", 70.0, 0.7, 0.7, devices=("gpu1",)),
        Signature("with space", 60.0, 1.0, 1.0),
        Signature("gemm", 60.0, 1.0, 0.4, impl="cutlass", op_point=OperatingPoint(1200.0),
                  workload={"m": 1024}),
        Signature("gemm", 60.0, 0.8, 0.5, impl="cutlass", op_point=OperatingPoint(1410.0),
                  workload={"m": 1024}),
        Signature("gemm", 60.0, 1.1, 0.3, impl="cublas", op_point=OperatingPoint(1200.0),
                  workload={"m": 1024}),
    ]  # fmt: skip


def _by(name: str) -> Signature:
    return next(s for s in _lib() if s.name == name)


@pytest.mark.parametrize(
    "text",
    [
        "seq(a, par(b, c))",
        "a ⊗ (b ⊕ c)",
        "a >> (b | c)",
        "a * (b | c)",
        "seq(a, b ⊕ c)",
        "a ⊗ par(b, c)",
        "((a)) ⊗ ((b ⊕ c))",
        "  a⊗(b⊕c)  ",
    ],
)
def test_notations_agree(text: str) -> None:
    expected = seq(_by("a"), par(_by("b"), _by("c")))
    result = compose_expression(text, _lib())
    assert result.energy == pytest.approx(expected.energy)
    assert result.var_energy == pytest.approx(expected.var_energy)
    assert result.term == "a ⊗ (b ⊕ c)"


def test_chains_and_par_multi() -> None:
    chain = compose_expression("a ⊗ b ⊗ c", _lib())
    assert chain.energy == pytest.approx(seq(_by("a"), _by("b"), _by("c")).energy)
    multi = compose_expression("stage0.fwd-1 || stage1:fwd/x@2", _lib())
    expected = par_multi(_by("stage0.fwd-1"), _by("stage1:fwd/x@2"))
    assert multi.energy == pytest.approx(expected.energy)
    assert multi.term == "((stage0.fwd-1 ⊗ ι) ⊕multi stage1:fwd/x@2)"
    assert compose_expression("par_multi(stage0.fwd-1, stage1:fwd/x@2)", _lib()).energy == (
        pytest.approx(expected.energy)
    )
    assert compose_expression("stage0.fwd-1 ⊕multi stage1:fwd/x@2", _lib()).term == multi.term


def test_idle_and_quoted_names() -> None:
    result = compose_expression("seq(a, idle(500ms, 40W), 'with space')", _lib())
    assert result.energy == pytest.approx(61.0 + 40.0 * 0.5 + 61.0)
    assert result.term == "a ⊗ ι ⊗ with space"
    assert compose_expression('"with space"', _lib()).name == "with space"


def test_selectors_pick_one_signature() -> None:
    lib = _lib()
    assert compose_expression("gemm[impl=cublas]", lib).time == 1.1
    assert compose_expression("gemm[impl=cutlass,sm_clock_mhz=1410]", lib).time == 0.8
    assert compose_expression("gemm[sm_clock_mhz=1410.0]", lib).time == 0.8  # numeric match
    assert compose_expression("gemm[impl='cutlass', sm_clock_mhz=1200]", lib).time == 1.0
    assert resolve_element("gemm[impl=cublas]", lib).impl == "cublas"
    # The schedule reader's device hint narrows same-named per-device signatures.
    per_device = [Signature("F", 60.0, 1.0, 1.0, devices=(d,)) for d in ("gpu0", "gpu1")]
    assert resolve_element("F", per_device, device="gpu1").devices == ("gpu1",)


def _error(text: str) -> ExpressionError:
    with pytest.raises(ExpressionError) as info:
        compose_expression(text, _lib())
    return info.value


def test_ambiguous_name_lists_the_choices() -> None:
    err = _error("seq(a, gemm)")
    assert "'gemm' matches 3 signatures" in err.reason
    for choice in ("gemm[impl=cutlass,sm_clock_mhz=1200]", "gemm[impl=cutlass,sm_clock_mhz=1410]",
                   "gemm[impl=cublas,sm_clock_mhz=1200]"):  # fmt: skip
        assert choice in err.reason
    assert (err.position, err.end) == (7, 11)
    assert str(err).endswith("\n  seq(a, gemm)\n         ^^^^")


@pytest.mark.parametrize(
    ("text", "reason", "column"),
    [
        ("seq(a, bb)", "no element named 'bb' in the library; did you mean 'b'", 8),
        ("a ⊗ b ⊕ c", "'⊕' after '⊗' at one level is ambiguous", 7),
        ("a | b >> c", "'>>' after '⊕'", 7),
        ("seq(a, b", "expected ',' or ')' in seq(…), found the end", 9),
        ("(a ⊗ b", "expected ')' to close the '(' at column 1", 7),
        ("a ⊗", "'⊗' needs an operand after it", 3),
        ("a b", "unexpected 'b' after a complete expression", 3),
        ("", "empty expression", 1),
        ("()", "empty parentheses", 2),
        ("seq()", "seq() needs at least one argument", 5),
        ("a ~ b", "unexpected character '~'", 3),
        ("'unclosed", "unclosed quote", 1),
        ("gemm[impl=none]", "no signature of 'gemm' matches the selector", 1),
        ("gemm[color=red]", "selector key 'color' does not apply to 'gemm'", 1),
        ("gemm[impl=cutlass,impl=x]", "selector key 'impl' given twice", 19),
        ("gemm[impl]", "expected '=' after selector key 'impl'", 10),
        ("idle(1s)", "idle takes a duration and a static power", 1),
        ("idle(1parsec, 60W)", "idle duration: cannot read '1parsec'", 6),
        ("idle(1s, -3W)", "idle power: must be a finite number ≥ 0", 10),
        ("par(stage0.fwd-1, stage1:fwd/x@2)", "par needs operands on the same device", 1),
        ("stage0.fwd-1 || stage0.fwd-1", "par_multi needs disjoint devices", 1),
    ],
)
def test_errors_point_at_the_place(text: str, reason: str, column: int) -> None:
    err = _error(text)
    assert reason in err.reason
    assert err.position + 1 == column
    lines = str(err).split("\n")
    assert lines[1] == f"  {text}"
    assert lines[2].index("^") == column + 1  # two spaces of indent


def test_parse_tree() -> None:
    tree = parse_expression("seq(a, b[impl=x] ⊕ (c))")
    assert tree.kind == "seq"
    assert [leaf.name for leaf in tree.leaves()] == ["a", "b", "c"]
    assert tree.children[1].kind == "par"
    assert tree.children[1].children[0].selector == (("impl", "x"),)
    with pytest.raises(TypeError):
        parse_expression(3)  # type: ignore[arg-type]


# Random expressions: every notation evaluates to the operators applied directly ----------
_SYMBOLS = {
    "unicode": {"seq": " ⊗ ", "par": " ⊕ "},
    "ascii": {"seq": " >> ", "par": " | "},
    "star": {"seq": "*", "par": "|"},
}
_trees = st.recursive(
    st.sampled_from(["a", "b", "c"]),
    lambda sub: st.tuples(st.sampled_from(["seq", "par"]), st.lists(sub, min_size=2, max_size=3)),
    max_leaves=8,
)


def _render(tree: object, style: str) -> str:
    if isinstance(tree, str):
        return tree
    kind, children = tree  # type: ignore[misc]
    parts = [_render(c, style) for c in children]
    if style == "function":
        return f"{kind}({', '.join(parts)})"
    return "(" + _SYMBOLS[style][kind].join(parts) + ")"


def _direct(tree: object) -> Signature:
    if isinstance(tree, str):
        return _by(tree)
    kind, children = tree  # type: ignore[misc]
    operands = [_direct(c) for c in children]
    return seq(operands) if kind == "seq" else par(operands)


@given(_trees, st.sampled_from(["function", "unicode", "ascii", "star"]))
def test_random_expressions_in_every_notation(tree: object, style: str) -> None:
    text = _render(tree, style)
    expected = _direct(tree)
    result = compose_expression(text, _lib())
    assert result.energy == pytest.approx(expected.energy, rel=1e-12)
    assert result.time == pytest.approx(expected.time, rel=1e-12)
    assert result.var_energy == pytest.approx(expected.var_energy, rel=1e-9)
    assert result.term == expected.term
