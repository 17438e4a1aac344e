"""Schedule files keep the devices' transition costs, and every reader prices them.

The example ``dag_two_gpus`` pays 0.5 ms and 0.05 J on gpu0 for each clock change; its
solved schedule changes clock twice. Written and read back, the schedule must still
know those costs; ``eopt compose --schedule`` (which composed the change's gap as idle
time at 60 W: 0.03 J instead of 0.05 J per change), ``eopt report``'s breakdown and
``eopt apply``'s planning must all see the same schedule, and the energies must add up
to the solver's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.apply import plan_apply
from eopt.calculus.schedule import PlacementsError, read_placements
from eopt.cli import cli
from eopt.model.library import Library
from eopt.model.planfile import read_plan
from eopt.model.schedule import Schedule, read_schedule, write_schedule
from eopt.plan.problem import load_plan_library
from eopt.plan.solve import solve_plan
from eopt.report.breakdown import energy_breakdown

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plans"


@pytest.fixture(scope="module")
def solved() -> tuple[Schedule, Library]:
    plan = read_plan(EXAMPLES / "dag_two_gpus.yaml")
    schedule = solve_plan(plan, method="milp")
    assert schedule.transitions("gpu0") == 2  # the example changes clock twice
    return schedule, load_plan_library(plan)


def test_transition_costs_round_trip(solved: tuple[Schedule, Library], tmp_path: Path) -> None:
    schedule, _ = solved
    path = tmp_path / "s.json"
    write_schedule(path, schedule)
    back = read_schedule(path)
    gpu0 = back.device("gpu0")
    assert (gpu0.transition_time_s, gpu0.transition_energy_j) == (0.0005, 0.05)
    assert back.device("gpu1").transition_time_s == 0.0  # written only where paid
    assert back.transition_energy() == pytest.approx(2 * 0.05, rel=1e-12)
    assert back.busy_time("gpu0") == pytest.approx(schedule.busy_time("gpu0"), rel=1e-12)
    parts = back.element_energy() + back.idle_energy() + back.transition_energy()
    assert parts == pytest.approx(back.energy, rel=1e-9)


def test_compose_prices_the_changes_as_the_solver_did(
    solved: tuple[Schedule, Library], tmp_path: Path
) -> None:
    schedule, library = solved
    path = tmp_path / "s.json"
    write_schedule(path, schedule)
    lib = EXAMPLES / "dag_two_gpus.signatures.jsonl"
    result = CliRunner().invoke(cli, ["compose", str(lib), "--schedule", str(path), "--json"])
    assert result.exit_code == 0, result.output
    composed = json.loads(result.output)
    assert composed["energy_j"] == pytest.approx(schedule.energy, rel=1e-9)
    assert composed["time_s"] == pytest.approx(schedule.makespan, rel=1e-12)
    assert composed["term"].count("setting change") == 2
    gpu0 = next(d for d in composed["per_device"] if d["device"] == "gpu0")
    assert gpu0["busy_s"] == pytest.approx(schedule.busy_time("gpu0"), rel=1e-12)
    # The same through the reader, without the command.
    placed = read_placements(path, library)
    changes = [p for p in placed.placements if p.signature.name == "setting change"]
    assert [p.signature.energy for p in changes] == [0.05, 0.05]


def test_report_and_apply_read_the_costs(solved: tuple[Schedule, Library], tmp_path: Path) -> None:
    schedule, _ = solved
    path = tmp_path / "s.json"
    write_schedule(path, schedule)
    back = read_schedule(path)
    parts = energy_breakdown(back)
    # Changes on gpu1 are counted too, but only gpu0's two are paid for.
    assert parts.transitions == sum(back.transitions(d.name) for d in back.devices)
    assert parts.transitions_j == pytest.approx(2 * 0.05, rel=1e-12)
    assert parts.total_j == pytest.approx(schedule.energy, rel=1e-9)
    # apply plans the clock changes of the schedule it read (gpu0 needs two settings).
    applied = plan_apply(back)
    gpu0 = next(d for d in applied.devices if d.device == "gpu0")
    assert len(gpu0.settings) == len(back.device_settings()["gpu0"]) >= 2


def test_a_change_without_room_for_its_time_is_refused(
    solved: tuple[Schedule, Library], tmp_path: Path
) -> None:
    schedule, library = solved
    data = schedule.to_dict()
    for device in data["devices"]:
        if device["name"] == "gpu0":
            device["transition_time_s"] = 1.0  # far longer than any gap in the schedule
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(PlacementsError, match="changing the device's setting takes 1 s"):
        read_placements(path, library)


def test_a_schedule_without_costs_pays_none(
    solved: tuple[Schedule, Library], tmp_path: Path
) -> None:
    schedule, library = solved
    data = schedule.to_dict()
    for device in data["devices"]:
        device.pop("transition_time_s", None)
        device.pop("transition_energy_j", None)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    placed = read_placements(path, library)
    assert not [p for p in placed.placements if p.signature.name == "setting change"]
    assert read_schedule(path).transition_energy() == 0.0
