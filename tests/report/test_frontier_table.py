"""The one frontier-table writer against its reader, and the commands that use it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from eopt.calculus import Signature
from eopt.calculus.frontier import Frontier
from eopt.cli import cli
from eopt.model.frontier_table import write_frontier_csv
from eopt.model.library import write_library
from eopt.model.operating_point import OperatingPoint
from eopt.report import read_frontier_csv


def _cells() -> list[Signature]:
    # Three clocks of one kernel: 1410 and 1200 MHz on the frontier, 1300 MHz dominated.
    points = [(1410.0, 0.010, 3.1), (1300.0, 0.0115, 3.3), (1200.0, 0.0121, 2.9)]
    return [
        Signature(
            "gemm",
            static_power=80.0,
            time=t,
            dynamic_energy=d - 80.0 * t,
            var_time=(0.01 * t) ** 2,
            var_energy=(0.02 * d) ** 2,
            op_point=OperatingPoint(clock),
        )
        for clock, t, d in points
    ]


def _element_rows(front: Frontier) -> list[dict[str, object]]:
    return [{"element": "gemm", **row} for row in front.to_rows()]


def test_element_frontier_round_trips_exactly(tmp_path: Path) -> None:
    front = Frontier.from_signatures(_cells(), dominance="point")
    path = write_frontier_csv(tmp_path / "f.csv", _element_rows(front))
    back = read_frontier_csv(path)
    assert [(r.time_s, r.energy_j, r.low_j, r.high_j) for r in back] == [
        (p["time_s"], p["energy_j"], p["energy_low_j"], p["energy_high_j"]) for p in front.to_rows()
    ]
    assert [r.element for r in back] == ["gemm", "gemm"]
    assert [r.label for r in back] == ["1410MHz", "1200MHz"]


def test_plan_frontier_round_trips_with_unknowns(tmp_path: Path) -> None:
    rows = [
        {"makespan_s": np.float64(1.25), "energy_j": 1234.5678901234567, "energy_std_j": 2.0,
         "lower_bound_j": None, "gap": math.nan, "status": "time limit"},
        {"makespan_s": 1.5, "energy_j": np.float64(1200.0), "energy_std_j": 0.0,
         "lower_bound_j": 1190.0, "gap": 0.0083, "status": "optimal"},
    ]  # fmt: skip
    path = tmp_path / "plan-frontier.csv"
    write_frontier_csv(path, rows)
    text = path.read_text(encoding="utf-8")
    assert "np." not in text and text.splitlines()[0] == (
        "makespan_s,energy_j,energy_std_j,lower_bound_j,gap,status"
    )
    first, second = read_frontier_csv(path, confidence_c=2.0)
    assert (first.time_s, first.energy_j, first.lower_bound_j) == (1.25, 1234.5678901234567, None)
    assert (first.low_j, first.high_j) == (1234.5678901234567 - 4.0, 1234.5678901234567 + 4.0)
    assert (second.lower_bound_j, second.label, second.element) == (1190.0, "optimal", None)


def test_writer_refuses_what_the_reader_would_refuse(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs at least one point"):
        write_frontier_csv(tmp_path / "a.csv", [])
    with pytest.raises(ValueError, match=r"lack a time .* or an energy"):
        write_frontier_csv(tmp_path / "b.csv", [{"makespan_s": 1.0, "cost": 2.0}])
    with pytest.raises(ValueError, match=r"row 2, column 'energy_j' is nan; expected a finite"):
        write_frontier_csv(
            tmp_path / "c.csv",
            [{"time_s": 1.0, "energy_j": 5.0}, {"time_s": 2.0, "energy_j": math.nan}],
        )
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_eopt_frontier_csv_writes_through_the_one_writer(tmp_path: Path) -> None:
    lib = tmp_path / "gemm.jsonl"
    write_library(lib, _cells())
    out = tmp_path / "cli.csv"
    result = CliRunner().invoke(
        cli, ["frontier", str(lib), "--dominance", "point", "--csv", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    reference = write_frontier_csv(
        tmp_path / "lib.csv",
        _element_rows(Frontier.from_signatures(_cells(), dominance="point")),
    )
    assert out.read_bytes() == reference.read_bytes()
