"""The field note's comparison on its real H100 runs (34 + 34), end to end through the CLI.

Reference figures computed independently by the note's method on these runs: medians
2.686 s / 777.4 J / 289 W (fdbscan) and 2.299 s / 601.5 J / 258 W (fdbscan-dense) with
the partial sample intervals at the region edges dropped, about 2.5 J more per run with
the power interpolated there; 14 % less time, 23 % less energy, 11 % less power; the
first 16 fdbscan-dense runs in another machine state (slower, about 222 W).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from eopt.attribute.engine import attribute
from eopt.cli import attribute as attribute_cli
from eopt.cli import compare as compare_cli
from eopt.model.trace_io import read_runs


def compare(data_file, *extra: str) -> dict:
    a = data_file("kokkos_dbscan_h100/fdbscan")
    b = data_file("kokkos_dbscan_h100/fdbscan-dense")
    result = CliRunner().invoke(
        compare_cli.command,
        [str(a), str(b), "--region", "DBSCANCalculation", "--json", *extra],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_note_convention_reproduces_the_reference_medians(data_file) -> None:
    data = compare(data_file, "--edges", "inside")
    assert data["schema"] == "eopt.comparison/1"
    a, b = data["a"]["median"], data["b"]["median"]
    assert a["time_s"] == pytest.approx(2.686, abs=5e-4)
    assert a["energy_j"] == pytest.approx(777.4, abs=0.05)
    assert a["power_w"] == pytest.approx(289, abs=0.5)
    assert b["time_s"] == pytest.approx(2.299, abs=5e-4)
    assert b["energy_j"] == pytest.approx(601.5, abs=0.05)
    assert b["power_w"] == pytest.approx(258, abs=0.5)


def test_interpolated_edges_reductions_and_the_machine_state_block(data_file) -> None:
    data = compare(data_file)
    inside = compare(data_file, "--edges", "inside")
    assert data["a"]["n"] == data["b"]["n"] == 34
    extra = data["a"]["median"]["energy_j"] - inside["a"]["median"]["energy_j"]
    assert 1.5 < extra < 3.5  # "about 2.5 J more per run"
    red = data["reduction"]
    assert red["time"]["value"] == pytest.approx(0.14, abs=0.01)
    assert red["energy"]["value"] == pytest.approx(0.23, abs=0.01)
    assert red["power"]["value"] == pytest.approx(0.11, abs=0.01)
    lo, hi = red["time"]["ci"]
    assert lo < -0.2 and hi > 0.1  # very wide: the block sits on the median's edge
    (block,) = data["state_blocks"]
    assert block["variant"] == "b" and block["runs"] == list(range(1, 17))
    assert block["mean_power_w"] == pytest.approx(222, abs=3)
    assert 1.4 < block["median_time_s"] / data["b"]["median"]["time_s"] < 1.8
    without = data["without_blocks"]
    assert without["b"]["n"] == 18
    # Without the block the 64-run reference of the note comes back: 19 % and 26 %.
    assert without["reduction"]["time"]["value"] == pytest.approx(0.19, abs=0.01)
    assert without["reduction"]["energy"]["value"] == pytest.approx(0.26, abs=0.01)
    assert any("edge" in w for w in data["warnings"])


def test_the_table_says_so_plainly(data_file) -> None:
    a = data_file("kokkos_dbscan_h100/fdbscan")
    b = data_file("kokkos_dbscan_h100/fdbscan-dense")
    result = CliRunner().invoke(
        compare_cli.command, [str(a), str(b), "--region", "DBSCANCalculation"]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "1–16" in text and "without the blocks" in text


def test_every_real_run_conserves_energy(data_file) -> None:
    for variant in ("fdbscan", "fdbscan-dense"):
        for trace in read_runs(data_file(f"kokkos_dbscan_h100/{variant}")):
            att = attribute(trace)
            known = [r.exclusive_energy_j for r in att.regions]
            # The last kernel outlives the power file in some runs: unknown, not 0.
            assert all(e is not None for e in known) or any(
                "outside the power trace" in w for w in att.warnings
            )
            calls = sum(c.exclusive_energy_j or 0.0 for c in att.calls)
            if all(e is not None for e in known):
                assert calls + att.outside_energy_j == pytest.approx(att.total_energy_j, rel=1e-9)
            else:  # the unknown call's part is missing from the known sum, never invented
                assert calls + att.outside_energy_j < att.total_energy_j
            dbscan = att.region("DBSCANCalculation")
            # Its nested regions and kernels: inclusive = exclusive + the children's.
            children = [c for c in att.calls if c.event.parent_id and c.depth == 1]
            assert dbscan.inclusive_energy_j == pytest.approx(
                dbscan.exclusive_energy_j + sum(c.inclusive_energy_j for c in children)
            )


def test_one_raw_run_attributes_by_its_prefix(data_file) -> None:
    run = data_file("kokkos_dbscan_h100/fdbscan") / "illyad-2495425"
    result = CliRunner().invoke(attribute_cli.command, [str(run), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    names = [r["name"] for r in data["regions"]]
    assert names[0] == "DBSCANCalculation"
    assert "ArborX::Experimental::HalfTraversal" in names  # a kernel, nested by time
    r = data["regions"][0]
    assert r["inclusive_energy_j"] / r["time_s"] == pytest.approx(r["mean_power_w"])
