"""Context variables φ and ρ, signatures that carry them, and contextual signatures."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from eopt.calculus import Library, Signature, read_library, write_library
from eopt.calculus.contextual import (
    ContextOutsideError,
    ContextualSignature,
    ContextWarning,
    contextual_signatures,
)
from eopt.model.context import (
    ISOLATED,
    NULL_ENTRY,
    Context,
    ContextError,
    EntryContext,
    RuntimeContext,
    device_entry_context,
)
from eopt.model.library import LibraryError


def _sig(name: str = "gemm", ctx: Context | None = None, **values: float) -> Signature:
    base = {"static_power": 60.0, "time": 1e-3, "dynamic_energy": 0.1, "var_energy": 1e-6}
    return Signature(name, **{**base, **values}, devices=("gpu0",), context=ctx)


# φ and ρ ------------------------------------------------------------------------------------
def test_null_context_and_isolation_are_the_defaults() -> None:
    assert NULL_ENTRY.is_null and ISOLATED.isolated and Context().is_null
    assert not EntryContext(temperature_c=40.0).is_null
    assert not EntryContext(after="gemm").is_null
    assert not Context(runtime=RuntimeContext(("allreduce",))).is_null
    assert str(NULL_ENTRY) == "φ_null" and str(ISOLATED) == "isolated"


def test_contexts_round_trip_through_json() -> None:
    ctx = Context(
        EntryContext(temperature_c=71.5, cache="warm", after="gemm", state={"pstate": "P0"}),
        RuntimeContext(("b", "a", "b"), offset_s=2e-4),
    )
    assert ctx.runtime.corunners == ("a", "b")  # a set: sorted, no duplicates
    text = json.dumps(ctx.to_dict())
    assert Context.from_dict(json.loads(text)) == ctx
    assert Context.from_dict({}) == Context()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"entry": {"temperature_c": "hot"}}, r"entry\.temperature_c: expected a number"),
        ({"entry": {"temp": 40}}, r"unknown field\(s\) \['temp'\]"),
        ({"runtime": {"corunners": "ab"}}, r"runtime\.corunners: expected a list"),
        ({"runtime": {"offset_s": -1}}, r"runtime\.offset_s: expected a finite number ≥ 0"),
        ({"entry": {"state": {"x": [1]}}}, r"entry\.state\.x"),
    ],
)
def test_bad_contexts_name_the_field(data: dict[str, object], message: str) -> None:
    with pytest.raises(ContextError, match=message):
        Context.from_dict(data)


def test_entry_context_refuses_non_finite_temperature() -> None:
    with pytest.raises(ContextError, match="temperature_c must be finite"):
        EntryContext(temperature_c=float("nan"))


# Signatures and libraries -------------------------------------------------------------------
def test_signature_context_round_trips_through_a_library(tmp_path: Path) -> None:
    ctx = Context(EntryContext(after="gemm", temperature_c=65.0))
    sigs = [_sig("softmax"), _sig("softmax", ctx, time=1.1e-3)]
    path = tmp_path / "lib.jsonl"
    write_library(path, sigs)
    back = read_library(path)
    assert back == sigs
    assert back[0].context is None and back[1].context == ctx
    assert "context" not in json.loads(path.read_text().splitlines()[0])


def test_an_old_library_without_contexts_still_reads(tmp_path: Path) -> None:
    line = {"name": "a", "static_power": 50, "time": 0.002, "dynamic_energy": 0.3}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(line) + "\n")
    (sig,) = read_library(path)
    assert sig.context is None and sig.energy == pytest.approx(0.4)


def test_a_bad_context_in_a_library_names_file_line_and_field(tmp_path: Path) -> None:
    good = _sig().to_dict()
    bad = {**good, "context": {"entry": {"temperature_c": None, "cache": 3.5}}}
    path = tmp_path / "lib.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(LibraryError, match=r"lib\.jsonl:2: context\.entry\.cache: expected"):
        read_library(path)


# Reading the device ---------------------------------------------------------------------------
class _Reports:
    def entry_context(self) -> dict[str, object]:
        return {"temperature_c": 48.0, "cache": "cold", "mem_temp_c": 40, "bad": float("nan")}


class _TemperatureOnly:
    def temperature_c(self) -> float:
        return 55.0


class _Broken:
    def entry_context(self) -> dict[str, object]:
        raise RuntimeError("sensor gone")

    def temperature_c(self) -> float:
        raise OSError("no sensor")


def test_device_entry_context_reads_what_the_device_reports() -> None:
    phi = device_entry_context(_Reports(), after="gemm")
    assert phi == EntryContext(48.0, "cold", "gemm", {"mem_temp_c": 40})
    assert device_entry_context(_TemperatureOnly()) == EntryContext(temperature_c=55.0)
    assert device_entry_context(_Broken()).is_null
    assert device_entry_context(object()).is_null


# Contextual signatures ------------------------------------------------------------------------
def _thermal() -> ContextualSignature:
    """static power linear in the entry temperature, time and d too (interpolation truth)."""
    points = [
        _sig(ctx=Context(EntryContext(temperature_c=t)), static_power=60 + 0.6 * (t - 40),
             time=1e-3 + 1e-6 * (t - 40), dynamic_energy=0.1 + 0.001 * (t - 40))
        for t in (40.0, 60.0, 80.0)
    ]  # fmt: skip
    return ContextualSignature.from_signatures(points)


def test_characterized_sets_are_kept() -> None:
    cs = _thermal()
    assert [e.temperature_c for e in cs.entry_contexts] == [40.0, 60.0, 80.0]
    assert cs.runtime_contexts == (ISOLATED,)


def test_evaluation_inside_the_set_interpolates_linear_dependence_exactly() -> None:
    cs = _thermal()
    for t in (40.0, 47.5, 60.0, 71.0, 80.0):
        sig = cs.at(EntryContext(temperature_c=t))
        assert sig.static_power == pytest.approx(60 + 0.6 * (t - 40), rel=1e-12)
        assert sig.time == pytest.approx(1e-3 + 1e-6 * (t - 40), rel=1e-12)
        assert sig.dynamic_energy == pytest.approx(0.1 + 0.001 * (t - 40), rel=1e-12)
        assert sig.context == Context(EntryContext(temperature_c=t))


def test_evaluation_outside_the_set_is_an_error() -> None:
    cs = _thermal()
    with pytest.raises(ContextOutsideError, match=r"90 °C lies outside .* 40 – 80 °C"):
        cs.at(EntryContext(temperature_c=90.0))
    with pytest.raises(ContextOutsideError, match="no values characterized at"):
        cs.at(EntryContext(temperature_c=50.0, cache="warm"))
    with pytest.raises(ContextOutsideError, match="give the entry temperature"):
        cs.at(NULL_ENTRY)
    assert not cs.covers(EntryContext(temperature_c=30.0))
    assert cs.covers(EntryContext(temperature_c=55.0))


def test_warn_policy_warns_and_never_extrapolates() -> None:
    cs = _thermal()
    with pytest.warns(ContextWarning, match="using the values at 80 °C"):
        hot = cs.at(EntryContext(temperature_c=100.0), outside="warn")
    assert hot.static_power == pytest.approx(60 + 0.6 * 40)  # the 80 °C values, not 72 W
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cs.at(EntryContext(temperature_c=70.0), outside="warn")  # inside: no warning
    with pytest.raises(ContextOutsideError):  # labels never match: nothing to return
        cs.at(EntryContext(temperature_c=70.0, after="x"), outside="warn")


def test_co_run_values_need_the_same_co_runners_and_offset() -> None:
    corun = _sig("compute", Context(runtime=RuntimeContext(("allreduce",))), time=1.2e-3)
    cs = ContextualSignature.from_signatures([_sig("compute"), corun])
    assert cs.at(runtime=RuntimeContext(("allreduce",))).time == 1.2e-3
    assert cs.at().time == 1e-3
    with pytest.raises(ContextOutsideError):
        cs.at(runtime=RuntimeContext(("allreduce",), offset_s=1e-4))
    with pytest.raises(ContextOutsideError):
        cs.at(runtime=RuntimeContext(("gemm",)))


def test_points_must_share_element_impl_and_point() -> None:
    with pytest.raises(ValueError, match="another element"):
        ContextualSignature("a", (_sig("a"), _sig("b")))
    with pytest.raises(ValueError, match="differ in κ or ω"):
        ContextualSignature("a", (_sig("a"), _sig("a").with_(impl="cutlass")))


def test_contextual_signatures_groups_a_library() -> None:
    lib = Library(
        [_sig("a"), _sig("a", Context(EntryContext(after="b"))), _sig("b"),
         _sig("a", Context(EntryContext(after="c"))).with_(impl="other")]
    )  # fmt: skip
    groups = contextual_signatures(lib)
    assert [(g.name, g.points[0].impl, len(g.points)) for g in groups] == [
        ("a", "default", 1),
        ("a", "other", 1),
    ]


# Sweeps record φ and ρ ------------------------------------------------------------------------
def test_a_sweep_records_entry_and_runtime_context_with_every_cell(tmp_path: Path) -> None:
    from eopt.runs.repeat import RepeatPolicy
    from eopt.runs.sweep import Grid, parse_kernel, sweep
    from eopt.sim.gpu import SimulatedGPU

    gpu = SimulatedGPU()
    kernel = parse_kernel("sim:gemm")
    policy = RepeatPolicy(
        warmup=1, min_runs=3, min_time_s=0.0, min_window_s=0.05, static_idle_s=0.1,
        settle_s=0.0, n_boot=50,
    )  # fmt: skip
    grid = Grid.build(kernel, gpu, clocks="1410,1005")
    result = sweep(kernel, grid, gpu, tmp_path / "lib.jsonl", policy=policy)
    sigs = read_library(tmp_path / "lib.jsonl")
    assert len(sigs) == len(result.signatures) >= 2
    contexts = [Context.from_dict(s.meta["context"]) for s in sigs]
    exits = [EntryContext.from_dict(s.meta["exit_context"]) for s in sigs]
    for ctx, sig in zip(contexts, sigs, strict=True):
        assert ctx.runtime == ISOLATED  # a sweep runs each cell alone
        assert ctx.entry.temperature_c is not None
        assert sig.context is None  # the recorded state is metadata, not a context claim
    # cells measured back to back at one point: each inherits what the one before left
    same_point = [
        (i, i + 1) for i in range(len(sigs) - 1) if sigs[i].op_point == sigs[i + 1].op_point
    ]
    assert same_point
    for i, j in same_point:
        assert contexts[j].entry.temperature_c == pytest.approx(exits[i].temperature_c)
