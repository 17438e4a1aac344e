"""Pipeline generators (1F1B, GPipe) and the Perseus profile import."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import networkx as nx
import pytest

from eopt.model.planfile import PlanError
from eopt.plan.perseus import ProfileError, read_perseus_profile, stage_count
from eopt.plan.pipeline import gpipe_order, one_f_one_b_order, pipeline_plan, task_name


@pytest.fixture
def lowtime_dag(data_file: Callable[[str], Path]) -> dict:
    """lowtime's 4-stage × 8-microbatch 1F1B DAG (tests/data/lowtime_bench)."""
    return json.loads(data_file("lowtime_bench/s4_m8_u1ms/dag.json").read_text())


@pytest.fixture
def gpt3_a100(data_file: Callable[[str], Path]) -> Path:
    """Perseus's GPT-3 stage profile on the A100-SXM4-80GB (tests/data/perseus_sosp24)."""
    return data_file("perseus_sosp24/stage_profile/gpt3-175b+a100_sxm_bf16.csv")


def test_1f1b_edges_match_lowtime_dag(lowtime_dag: dict) -> None:
    dag = lowtime_dag
    nodes = {n["id"]: n for n in dag["nodes"]}
    reference = {
        (
            task_name(nodes[a]["kind"], nodes[a]["stage"], nodes[a]["microbatch"]),
            task_name(nodes[b]["kind"], nodes[b]["stage"], nodes[b]["microbatch"]),
        )
        for a, b in dag["edges"]
        if a in nodes and b in nodes  # drop the dummy source/sink edges
    }
    plan = pipeline_plan(dag["num_stages"], dag["num_microbatches"], dag["p2p_power_w"])
    assert set(plan.edges()) == reference
    assert len(plan.edges()) == len(reference)


def test_1f1b_order_in_dag_node_listing(lowtime_dag: dict) -> None:
    """The dag lists each stage's nodes in execution order; ours must agree."""
    dag = lowtime_dag
    S, M = dag["num_stages"], dag["num_microbatches"]
    for s in range(S):
        listed = [(n["kind"], n["microbatch"]) for n in dag["nodes"] if n["stage"] == s]
        assert one_f_one_b_order(S, M, s) == listed


def _brute_1f1b(S: int, M: int, s: int) -> list[tuple[str, int]]:  # noqa: N803
    """1F1B by its textbook description: warm-up forwards, steady 1F1B, cool-down."""
    warm = min(S - s - 1, M)
    ops = [("forward", m) for m in range(warm)]
    f, b = warm, 0
    while f < M or b < M:
        if f < M:
            ops.append(("forward", f))
            f += 1
        if b < M and (f == M or b < f):
            ops.append(("backward", b))
            b += 1
    return ops


@pytest.mark.parametrize(("S", "M"), [(1, 1), (1, 3), (2, 1), (3, 2), (4, 4), (8, 3), (5, 12)])
def test_1f1b_properties(S: int, M: int) -> None:  # noqa: N803
    for s in range(S):
        order = one_f_one_b_order(S, M, s)
        assert sorted(order) == sorted(
            [("forward", m) for m in range(M)] + [("backward", m) for m in range(M)]
        )
        assert order == _brute_1f1b(S, M, s)
        # In-flight microbatches never exceed S − s (the 1F1B memory bound).
        inflight = peak = 0
        for kind, _ in order:
            inflight += 1 if kind == "forward" else -1
            peak = max(peak, inflight)
        assert peak <= max(1, min(S - s, M))
    plan = pipeline_plan(S, M, 50.0)
    graph = nx.DiGraph(plan.edges())
    assert nx.is_directed_acyclic_graph(graph)
    # Every backward of the first stage follows every forward of its microbatch downstream.
    for m in range(M):
        assert (
            nx.has_path(graph, task_name("forward", S - 1, m), task_name("backward", 0, m))
            or S == 1
        )


def test_gpipe_order_and_edges() -> None:
    S, M = 3, 4
    for s in range(S):
        assert gpipe_order(S, M, s) == [("forward", m) for m in range(M)] + [
            ("backward", m) for m in range(M)
        ]
    plan = pipeline_plan(S, M, 50.0, schedule="gpipe")
    edges = set(plan.edges())
    assert ("F[s0,m3]", "B[s0,m0]") in edges  # same-stage order: last forward, first backward
    assert ("B[s1,m2]", "B[s0,m2]") in edges
    assert ("F[s2,m1]", "B[s2,m1]") in edges
    assert nx.is_directed_acyclic_graph(nx.DiGraph(list(edges)))


def test_generator_errors() -> None:
    with pytest.raises(PlanError, match="unknown pipeline schedule"):
        pipeline_plan(2, 2, 50.0, schedule="zb-h1")
    with pytest.raises(PlanError, match="expected 1 or 3 values"):
        pipeline_plan(3, 2, [50.0, 60.0])
    with pytest.raises(PlanError, match="≥ 1 microbatch"):
        pipeline_plan(2, 0, 50.0)


def test_perseus_profile_loads(gpt3_a100: Path) -> None:
    sigs = read_perseus_profile(gpt3_a100, 83.64)
    assert len(sigs) == 608
    types = {s.name for s in sigs}
    assert types == {f"stage{s}.{k}" for s in range(8) for k in ("forward", "backward")}
    for t in types:
        assert len({s.op_point.sm_clock_mhz for s in sigs if s.name == t}) == 38
    assert stage_count(sigs) == 8
    first = sigs[0]  # 0,forward,1410,0.0501616…,23.805472
    assert first.name == "stage0.forward"
    assert first.op_point.sm_clock_mhz == 1410
    assert first.static_power == 83.64
    # s·t + d reproduces the measured energy (Perseus's accounting); never clamped here.
    for s in sigs:
        assert s.energy == pytest.approx(s.meta["measured_energy_j"], rel=1e-12)
        assert not s.meta["clamped"]
    assert first.energy == pytest.approx(23.80547200000007)


def _csv(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "prof.csv"
    path.write_text("stage,instruction,frequency,time,energy\n" + body, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "0,forward,1410,0.05,23.8\n0,sideways,1410,0.05,23.8\n",
            r"prof.csv:3: instruction 'sideways'",
        ),
        ("0,forward,1410,abc,23.8\n", r"prof.csv:2: time \(s\) must be a number, got 'abc'"),
        ("0,forward,1410,0.05,-1\n", r"prof.csv:2: energy \(J\) must be a finite number ≥ 0"),
        ("x,forward,1410,0.05,1\n", r"prof.csv:2: stage must be an integer"),
        ("0,forward,0,0.05,1\n", r"prof.csv:2: frequency \(MHz\) must be a finite number > 0"),
        ("0,forward,1410,0.05\n", r"prof.csv:2: expected 5 fields, found 4"),
        (
            "0,forward,1410,0.05,1\n\n0,forward,1410,0.06,1\n",
            r"prof.csv:4: duplicate row .* \(first at line 2\)",
        ),
        ("", r"no data rows"),
    ],
)
def test_bad_profile_rows(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        read_perseus_profile(_csv(tmp_path, body), 80.0)


def test_bad_profile_header(tmp_path: Path) -> None:
    path = tmp_path / "prof.csv"
    path.write_text("stage,kind,frequency,time,energy\n0,forward,1410,0.05,1\n", encoding="utf-8")
    with pytest.raises(ProfileError, match=r"prof.csv:1: missing column\(s\) \['instruction'\]"):
        read_perseus_profile(path, 80.0)


def test_clamped_rows_are_marked(tmp_path: Path) -> None:
    # 0.5 s at 80 W idle is 40 J, more than the 30 J measured: d clamps at 0, flagged.
    sigs = read_perseus_profile(
        _csv(tmp_path, "0,forward,1000,0.5,30\n0,backward,1000,0.5,50\n"), 80.0
    )
    assert sigs[0].dynamic_energy == 0.0 and sigs[0].meta["clamped"]
    assert sigs[1].dynamic_energy == pytest.approx(10.0) and not sigs[1].meta["clamped"]
