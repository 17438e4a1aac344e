"""``eopt solve --graph``: the solved schedule priced with its characterized pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.calculus.interactions import EntryEdge, InteractionGraph, write_interactions
from eopt.cli import cli, main
from eopt.model.context import Context, EntryContext
from eopt.model.signature import Signature

PLAN = """schema: eopt.plan/1
name: two
libraries: [lib.jsonl]
devices:
  - {name: gpu0, idle_power_w: 50}
elements:
  - {name: p, device: gpu0, type: produce}
  - {name: c, device: gpu0, type: consume, after: [p]}
"""


def _files(tmp_path: Path) -> dict[str, Path]:
    produce = Signature("produce", 60.0, 0.01, 1.0, var_energy=1e-4, meta={"n": 30})
    consume = Signature("consume", 60.0, 0.02, 2.0, var_energy=1e-4, meta={"n": 30})
    warm = Signature(
        "consume", 60.0, 0.018, 1.8, var_energy=1e-4, meta={"n": 30},
        context=Context(entry=EntryContext(after="produce")),
    )  # fmt: skip
    (tmp_path / "plan.yaml").write_text(PLAN)
    lines = [json.dumps(s.to_dict()) for s in (produce, consume)]
    (tmp_path / "lib.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "all.jsonl").write_text("\n".join([*lines, json.dumps(warm.to_dict())]) + "\n")
    edge = EntryEdge("produce", "consume", ("cache",), (EntryContext(after="produce"),))
    write_interactions(tmp_path / "g.json", InteractionGraph(entry=(edge,)))
    return {n: tmp_path / n for n in ("plan.yaml", "lib.jsonl", "all.jsonl", "g.json")}


def _solve(args: list[str]) -> dict[str, object]:
    result = CliRunner().invoke(cli, ["solve", *args, "--json", "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_graph_prices_the_consumer_after_its_producer(tmp_path: Path) -> None:
    f = _files(tmp_path)
    plain = _solve([str(f["plan.yaml"])])
    graph = _solve(
        [str(f["plan.yaml"]), "--library", str(f["all.jsonl"]), "--graph", str(f["g.json"])]
    )
    # Characterized values are not modes: the solve itself is the same.
    assert graph["energy"]["predicted"] == pytest.approx(plain["energy"]["predicted"])
    info = graph["meta"]["interactions"]
    assert len(info["substitutions"]) == 1
    # consume after produce: 60 W·18 ms + 1.8 J instead of 60 W·20 ms + 2 J.
    assert info["substitutions"][0]["energy_shift_j"] == pytest.approx(-0.32)
    assert info["bias_bound_j"] == pytest.approx(0.0)  # nothing left context-independent


def test_a_graph_whose_values_the_libraries_lack_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _files(tmp_path)
    with pytest.raises(SystemExit):
        main(["solve", str(f["plan.yaml"]), "--graph", str(f["g.json"])])
    err = " ".join(capsys.readouterr().err.split())
    assert "--graph" in err and "consume" in err and "Traceback" not in err
