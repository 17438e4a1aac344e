"""The interaction graph: ``eopt.interactions/1`` files and composition with the graph."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.calculus import (
    Signature,
    compose_schedule,
    compose_with_interactions,
    par,
    write_library,
)
from eopt.calculus.contextual import ContextOutsideError, ContextWarning
from eopt.calculus.interactions import (
    EntryEdge,
    InteractionGraph,
    InteractionsError,
    RuntimeEdge,
    read_interactions,
    write_interactions,
)
from eopt.calculus.schedule import schedule_bias
from eopt.calculus.uncertainty import c_alpha
from eopt.cli import cli, main
from eopt.model.context import Context, EntryContext, RuntimeContext

C95 = c_alpha(0.95)


def _sig(name: str, time: float, d: float, var_e: float = 1e-4, **kw: object) -> Signature:
    return Signature(
        name, static_power=120.0, time=time, dynamic_energy=d, var_time=1e-10,
        var_energy=var_e, devices=("gpu0",), **kw,  # type: ignore[arg-type]
    )  # fmt: skip


# The paper's §2.4 attention layer: prefix 1.55 ms, then compute ∥ AllReduce 2.77 ms each,
# 120 W over the pair of GPUs, 3.32 J measured in all.
PREFIX = _sig("prefix", 1.55e-3, 0.9)
COMPUTE = _sig("compute", 2.77e-3, 1.5)
ALLREDUCE = _sig("allreduce", 2.77e-3, 0.4016)
PLACEMENTS = [(PREFIX, "gpu0", 0.0), (COMPUTE, "gpu0", 1.55e-3), (ALLREDUCE, "gpu0", 1.55e-3)]


def _graph() -> InteractionGraph:
    return InteractionGraph(
        entry=(
            EntryEdge(
                "prefix", "compute", ("thermal", "cache"), (EntryContext(after="prefix"),),
                deviation={"energy_rel": 0.012, "z": 4.2},
            ),
        ),
        runtime=(RuntimeEdge(("compute", "allreduce"), ("memory bandwidth",), signature="pair"),),
    )  # fmt: skip


# File format ---------------------------------------------------------------------------------
def test_graph_round_trips_through_its_file(tmp_path: Path) -> None:
    graph = InteractionGraph(
        entry=_graph().entry,
        runtime=(
            *_graph().runtime,
            RuntimeEdge(("gemm", "nccl"), offsets_s=(0.0, 1e-4), signatures={"gemm": "g2",
                        "nccl": "n2"}, workload={"m": 4096}),
        ),
        nodes=("idle_kernel",),
    )  # fmt: skip
    path = tmp_path / "g.json"
    write_interactions(path, graph)
    back = read_interactions(path)
    assert back == graph
    data = json.loads(path.read_text())
    assert data["schema"] == "eopt.interactions/1"
    assert data["edges"][0] == {
        "kind": "entry", "from": "prefix", "to": "compute", "mechanisms": ["thermal", "cache"],
        "characterized": [{"after": "prefix"}], "signature": "compute",
        "deviation": {"energy_rel": 0.012, "z": 4.2},
    }  # fmt: skip
    assert back.nodes[0] == "idle_kernel" and "nccl" in back.nodes
    assert back.entry_edge("prefix", "compute") is not None
    assert back.entry_edge("compute", "prefix") is None  # directed
    assert back.runtime_edge("allreduce", "compute") is back.runtime_edge("compute", "allreduce")


def _edge_file(tmp_path: Path, edge: object, **top: object) -> Path:
    path = tmp_path / "g.json"
    data = {"schema": "eopt.interactions/1", "edges": [edge], **top}
    path.write_text(json.dumps(data))
    return path


ENTRY = {"kind": "entry", "from": "a", "to": "b", "characterized": [{"after": "a"}]}


@pytest.mark.parametrize(
    ("edge", "message"),
    [
        ({**ENTRY, "kind": "later"}, r"edges\[0\]\.kind: expected \"entry\" .* got 'later'"),
        ({k: v for k, v in ENTRY.items() if k != "characterized"},
         r"edges\[0\] \(a → b\): field 'characterized' is missing \(the entry contexts"),
        ({**ENTRY, "characterized": [{"temperature_c": "hot"}]},
         r"edges\[0\] \(a → b\)\.characterized\[0\]\.temperature_c: expected a number"),
        ({**ENTRY, "mechanism": ["thermal"]}, r"unknown field\(s\) \['mechanism'\]"),
        ({"kind": "runtime", "between": ["a"]}, r"between: expected two element types, got 1"),
        ({"kind": "runtime", "between": ["a", "b"]}, r"\(a ↔ b\): give either 'signature'"),
        ({"kind": "runtime", "between": ["a", "b"], "signature": "ab",
          "signatures": {"a": "a", "b": "b"}}, r"give either 'signature'"),
        ({"kind": "runtime", "between": ["a", "b"], "signatures": {"a": "a"}},
         r"signatures: expected an entry for each of 'a' and 'b'"),
        ({"kind": "runtime", "between": ["a", "b"], "signature": "ab",
          "characterized": [{"offset_s": -1}]}, r"characterized\[0\]\.offset_s: expected a finite"),
    ],
)  # fmt: skip
def test_bad_edges_name_the_file_the_edge_and_the_fix(
    tmp_path: Path, edge: object, message: str
) -> None:
    path = _edge_file(tmp_path, edge)
    with pytest.raises(InteractionsError, match=message) as info:
        read_interactions(path)
    assert str(info.value).startswith(str(path))


def test_bad_graph_files(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text('{"edges": []}')
    with pytest.raises(
        InteractionsError, match=r"field 'schema' is missing .*eopt\.interactions/1"
    ):
        read_interactions(path)
    path.write_text('{"schema": "eopt.interactions/1", "edges": [')
    with pytest.raises(InteractionsError, match="not valid JSON"):
        read_interactions(path)
    with pytest.raises(InteractionsError, match="no such interaction graph file"):
        read_interactions(tmp_path / "missing.json")
    duplicate = _edge_file(tmp_path, ENTRY)
    data = json.loads(duplicate.read_text())
    data["edges"].append(ENTRY)
    duplicate.write_text(json.dumps(data))
    with pytest.raises(InteractionsError, match=r"entry edge a → b appears twice"):
        read_interactions(duplicate)
    library = tmp_path / "lib.jsonl"
    write_library(library, [PREFIX])
    with pytest.raises(InteractionsError, match=r"is a signature library .*not an interaction"):
        read_interactions(library)


# Composition -------------------------------------------------------------------------------
def test_an_empty_graph_composes_exactly_as_compose_schedule() -> None:
    figure = [
        (PREFIX, "gpu0", 0.0), (COMPUTE, "gpu0", 2e-3), (ALLREDUCE, "gpu0", 3e-3),
        (_sig("other", 1e-3, 0.2), "gpu1", 0.5e-3),
    ]  # fmt: skip
    for placements, idle in ((PLACEMENTS, None), (figure, 60.0), (figure, None)):
        result = compose_with_interactions(placements, [], InteractionGraph(), idle)
        assert result.signature == compose_schedule(placements, idle)
        assert result.bias == schedule_bias(placements, idle_power=idle)
        assert result.substitutions == ()


def test_paper_attention_layer_static_energy_is_unchanged_by_an_empty_graph() -> None:
    result = compose_with_interactions(PLACEMENTS, [], InteractionGraph())
    assert result.signature.time == pytest.approx(4.32e-3)
    assert result.signature.static_energy == pytest.approx(0.5184)  # 120 W x 4.32 ms
    assert result.signature.energy == pytest.approx(3.32)


def _characterized() -> list[Signature]:
    hot = Context(EntryContext(after="prefix"))
    pair = Context(runtime=RuntimeContext(("allreduce", "compute")))
    return [
        _sig("compute", 2.9e-3, 1.56, var_e=4e-4, context=hot),
        _sig("pair", 3.0e-3, 1.95, var_e=9e-4, context=pair),
    ]


def test_entry_edge_uses_the_consumers_values_after_its_producer() -> None:
    graph = InteractionGraph(entry=_graph().entry)
    alone = [(PREFIX, "gpu0", 0.0), (COMPUTE, "gpu0", 1.55e-3)]
    result = compose_with_interactions(alone, _characterized(), graph)
    hot = _characterized()[0]
    expected = PREFIX.energy + hot.energy  # a chain: energies add
    assert result.signature.energy == pytest.approx(expected, rel=1e-12)
    assert result.signature.term == "prefix ⊗ compute⟨after prefix⟩"
    (sub,) = result.substitutions
    assert sub.edge == "prefix → compute" and sub.energy_shift_j == pytest.approx(
        hot.energy - COMPUTE.energy
    )
    # Eq. (36): the chain's bias is c_α·σ of every element but the first; the characterized
    # consumer no longer contributes.
    assert schedule_bias(alone).bias == pytest.approx(C95 * COMPUTE.std_energy)
    assert result.bias.bias == 0.0


def test_entry_edge_needs_adjacency() -> None:
    graph = InteractionGraph(entry=_graph().entry)
    apart = [(PREFIX, "gpu0", 0.0), (COMPUTE, "gpu0", 2e-3)]
    result = compose_with_interactions(apart, _characterized(), graph)
    assert result.substitutions == () and result.signature == compose_schedule(apart)
    near = compose_with_interactions(apart, _characterized(), graph, adjacency_s=0.5e-3)
    assert len(near.substitutions) == 1


def test_runtime_edge_replaces_the_par_of_the_pair_with_its_co_run_signature() -> None:
    graph = InteractionGraph(runtime=_graph().runtime)
    result = compose_with_interactions(PLACEMENTS, _characterized(), graph)
    pair = _characterized()[1]
    assert result.signature.energy == pytest.approx(PREFIX.energy + pair.energy, rel=1e-12)
    assert result.signature.term == "prefix ⊗ pair"
    (sub,) = result.substitutions
    null = par([COMPUTE, ALLREDUCE]).energy
    assert sub.energy_shift_j == pytest.approx(pair.energy - null, rel=1e-9)
    # Only the entry substitutions stay: the pair's (as one element) after the prefix.
    assert result.bias.bias == pytest.approx(C95 * pair.std_energy)
    assert schedule_bias(PLACEMENTS).bias == pytest.approx(
        C95 * (2 * COMPUTE.std_energy + 2 * ALLREDUCE.std_energy)
    )


def test_runtime_edge_with_each_endpoints_co_run_values() -> None:
    with_ar = Context(runtime=RuntimeContext(("allreduce",)))
    with_c = Context(runtime=RuntimeContext(("compute",)))
    lib = [_sig("compute", 2.9e-3, 1.6, context=with_ar), _sig("allreduce", 3.1e-3, 0.45,
           context=with_c)]  # fmt: skip
    graph = InteractionGraph(
        runtime=(RuntimeEdge(("compute", "allreduce"), signatures={"compute": "compute",
                 "allreduce": "allreduce"}),)
    )  # fmt: skip
    result = compose_with_interactions(PLACEMENTS, lib, graph)
    expected = PREFIX.energy + 120.0 * 3.1e-3 + 1.6 + 0.45  # s·max(T) + d₁ + d₂
    assert result.signature.energy == pytest.approx(expected, rel=1e-12)
    assert "compute⟨with allreduce⟩" in result.signature.term
    # each keeps its entry substitution (one tolerance), none for the covered co-run
    assert result.bias.bias == pytest.approx(C95 * (lib[0].std_energy + lib[1].std_energy))


def test_a_pair_outside_its_characterized_offsets_is_an_error_or_a_warning() -> None:
    graph = InteractionGraph(runtime=_graph().runtime)
    shifted = [*PLACEMENTS[:2], (ALLREDUCE, "gpu0", 2e-3)]
    with pytest.raises(ContextOutsideError, match=r"starts 0.00045 s after compute"):
        compose_with_interactions(shifted, _characterized(), graph)
    with pytest.warns(ContextWarning, match="characterized at offsets 0 s"):
        result = compose_with_interactions(shifted, _characterized(), graph, outside="warn")
    assert result.substitutions == () and len(result.notes) == 1
    assert result.signature == compose_schedule(shifted)
    assert result.bias == schedule_bias(shifted)


def test_an_edge_whose_signatures_are_missing_is_a_clear_error() -> None:
    with pytest.raises(
        ValueError, match=r"interaction allreduce ↔ compute: .* no signature 'pair'"
    ):
        compose_with_interactions(PLACEMENTS, [], InteractionGraph(runtime=_graph().runtime))


def test_both_edges_together() -> None:
    graph = _graph()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = compose_with_interactions(PLACEMENTS, _characterized(), graph)
    # the pair takes the co-run values; the entry edge prefix → compute does not apply to
    # an element already given co-run values (its bias stays counted)
    assert [s.edge for s in result.substitutions] == ["allreduce ↔ compute"]


# The command line ---------------------------------------------------------------------------
def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    lib = tmp_path / "lib.jsonl"
    write_library(lib, [PREFIX, COMPUTE, ALLREDUCE, *_characterized()])
    schedule = tmp_path / "s.yaml"
    schedule.write_text(
        "placements:\n"
        "  - {element: prefix, device: gpu0, start: 0}\n"
        "  - {element: 'compute', device: gpu0, start: 1.55ms}\n"
        "  - {element: allreduce, device: gpu0, start: 1.55ms}\n"
    )
    graph = tmp_path / "g.json"
    write_interactions(graph, InteractionGraph(runtime=_graph().runtime))
    return lib, schedule, graph


def test_cli_compose_with_graph_reports_the_bias_bound(tmp_path: Path) -> None:
    lib, schedule, graph = _files(tmp_path)
    # the library holds compute twice (null and after prefix): names pick the null one
    args = ["compose", str(lib), "--schedule", str(schedule), "--graph", str(graph), "--json"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    pair = _characterized()[1]
    assert data["energy_j"] == pytest.approx(PREFIX.energy + pair.energy)
    assert data["reduction_bias_j"] == pytest.approx(C95 * pair.std_energy)
    assert data["interactions"][0]["edge"] == "allreduce ↔ compute"
    text = CliRunner().invoke(cli, args[:-1], catch_exceptions=False).output
    assert "bias bound" in text and "1 characterized use(s) of 1 edge(s)" in text


def test_cli_bad_graph_is_one_line_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lib, schedule, _ = _files(tmp_path)
    bad = _edge_file(tmp_path, {"kind": "runtime", "between": ["a", "b"]})
    with pytest.raises(SystemExit):
        main(["compose", str(lib), "--schedule", str(schedule), "--graph", str(bad)])
    err = " ".join(capsys.readouterr().err.split())
    assert "Traceback" not in err
    assert "g.json: edges[0] (a ↔ b): give either 'signature'" in err
    with pytest.raises(SystemExit):
        main(["compose", str(lib), "prefix", "--graph", str(bad)])
    assert "--graph applies to a placed schedule" in capsys.readouterr().err
