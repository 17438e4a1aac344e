"""One device class, one schedule parser, one frontier-table writer on the plan side.

The plan's devices are the schedule's devices; ``eopt apply``/``report`` (read_schedule)
and ``eopt compose`` (read_placements) read a solved schedule through the same parser, so
they accept and refuse the same files with the same words; ``eopt solve --frontier``
writes its table through the writer ``read_frontier_csv`` reads back exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import eopt.model.frontier_table
from eopt.calculus.schedule import PlacementsError, compose_schedule, read_placements
from eopt.cli import cli
from eopt.model.library import Library
from eopt.model.planfile import read_plan
from eopt.model.schedule import DeviceInfo, Schedule, ScheduleError, read_schedule, write_schedule
from eopt.plan import PlanDevice
from eopt.plan.problem import load_plan_library
from eopt.plan.solve import solve_plan
from eopt.report import read_frontier_csv

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plans"
PLAN = EXAMPLES / "dag_two_gpus.yaml"


@pytest.fixture(scope="module")
def solved() -> tuple[Schedule, Library]:
    plan = read_plan(PLAN)
    return solve_plan(plan, method="milp"), load_plan_library(plan)


def test_the_schedule_carries_the_plans_devices(solved: tuple[Schedule, Library]) -> None:
    schedule, _ = solved
    assert DeviceInfo is PlanDevice
    assert schedule.devices == read_plan(PLAN).devices
    gpu0 = schedule.device("gpu0")
    assert gpu0.has_transition and (gpu0.transition_time_s, gpu0.transition_energy_j) == (
        0.0005,
        0.05,
    )


def _written(schedule: Schedule, path: Path, **extra: Any) -> dict[str, Any]:
    write_schedule(path, schedule)
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(extra)
    path.write_text(json.dumps(data), encoding="utf-8")
    return data


def test_both_readers_accept_unknown_top_level_blocks(
    solved: tuple[Schedule, Library], tmp_path: Path
) -> None:
    schedule, library = solved
    path = tmp_path / "s.json"
    confidence = {"probability": 0.95, "samples": 4000, "on_time": 0.953}
    _written(schedule, path, confidence=confidence, provenance={"host": "x"})
    back = read_schedule(path)
    assert back.energy == schedule.energy and back.devices == schedule.devices
    placed = read_placements(path, library)
    assert placed.idle_power == {d.name: d.idle_power_w for d in schedule.devices}
    work = [p for p in placed.placements if p.signature.name != "setting change"]
    assert sorted((p.signature.name, p.device, p.start) for p in work) == sorted(
        (e.type, e.device, e.start) for e in schedule.elements
    )
    composed = compose_schedule(placed.placements, placed.idle_power)
    assert composed.energy == pytest.approx(schedule.energy, rel=1e-9)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["elements"][0].update(duration=-1.0), r"elements\[0\] \(.*\)\.duration"),
        (lambda d: d["elements"][1].update(device="gpu7"), r"device 'gpu7' is not among"),
        (lambda d: d["devices"][0].update(idle_power_w=-5), r"devices\[0\]\.idle_power_w"),
        (lambda d: d.update(lower_bound=1e9), r"lower_bound: .* is above the predicted"),
        (lambda d: d.pop("makespan"), r"field 'makespan' is missing"),
    ],
    ids=["negative-duration", "unknown-device", "negative-idle", "bound-above", "no-makespan"],
)
def test_both_readers_refuse_with_the_same_words(
    solved: tuple[Schedule, Library], tmp_path: Path, edit: Any, message: str
) -> None:
    schedule, library = solved
    path = tmp_path / "bad.json"
    data = _written(schedule, path)
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ScheduleError, match=message) as as_schedule:
        read_schedule(path)
    with pytest.raises(PlacementsError, match=message) as as_placements:
        read_placements(path, library)
    assert str(as_schedule.value) == str(as_placements.value)
    assert str(path) in str(as_placements.value)


def test_eopt_solve_frontier_writes_through_the_one_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[list[dict[str, Any]]] = []
    real = eopt.model.frontier_table.write_frontier_csv

    def recording(path: Path, rows: list[dict[str, Any]]) -> Path:
        written.append([dict(r) for r in rows])
        return real(path, rows)

    monkeypatch.setattr(eopt.model.frontier_table, "write_frontier_csv", recording)
    out = tmp_path / "frontier.csv"
    result = CliRunner().invoke(
        cli, ["solve", str(PLAN), "--frontier", "--points", "4", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    (rows,) = written
    back = read_frontier_csv(out)
    assert [(r.time_s, r.energy_j, r.lower_bound_j, r.label) for r in back] == [
        (r["makespan_s"], r["energy_j"], r["lower_bound_j"], r["status"]) for r in rows
    ]
