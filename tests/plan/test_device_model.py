"""Plans and schedules record the GPU model their signatures came from, and the
plan-level σ_E is the composition's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from eopt.calculus.schedule import Placement, compose_schedule
from eopt.model.library import read_library
from eopt.model.operating_point import OperatingPoint
from eopt.model.planfile import read_plan
from eopt.model.schedule import read_schedule
from eopt.model.signature import Signature
from eopt.plan.perseus import profile_device_model
from tests.handoff.runner import run_eopt

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("gpt3-175b+a40_bf16.csv", "A40"),
        ("bloom-176b+a100_fp16.csv", "A100-SXM4-80GB"),
        ("gpt3-a100.csv", "A100-SXM4-80GB"),
        ("run-on-H100-SXM5-80GB.csv", "H100-SXM5-80GB"),
        ("stages.csv", None),
    ],
)
def test_model_from_profile_name(name: str, model: str | None) -> None:
    assert profile_device_model(name) == model


def test_a40_profile_carries_its_model_into_the_schedule(here: Path) -> None:
    rows = (EXAMPLES / "gpt3-a100.csv").read_text().splitlines()
    (here / "gpt3-175b+a40_bf16.csv").write_text("\n".join(rows[:200]) + "\n")
    assert run_eopt(
        "plan", "pipeline", "--profile", "gpt3-175b+a40_bf16.csv", "-S", "2", "-M", "2",
        "--idle-power", "80W", "-o", "plan.yaml", "-q",
    ) == 0  # fmt: skip
    assert read_plan(here / "plan.yaml").device_model == "A40"
    assert run_eopt("solve", "plan.yaml", "--static", "-o", "s.json", "-q") == 0
    assert read_schedule(here / "s.json").device_model == "A40"
    assert json.loads((here / "s.json").read_text())["device_model"] == "A40"


def test_files_without_a_model_stay_readable(here: Path) -> None:
    assert run_eopt("demo", "--out", "d", "--stages", "2", "--microbatches", "1", "-q") == 0
    for name, reader in (("plan.yaml", read_plan), ("schedule.json", read_schedule)):
        path = here / "d" / name
        if name.endswith(".json"):
            data = json.loads(path.read_text())
            data.pop("device_model", None)
            path.write_text(json.dumps(data))
        else:
            path.write_text(
                "\n".join(x for x in path.read_text().splitlines() if "device_model" not in x)
            )
        assert reader(path).device_model is None


def test_library_model_reaches_the_schedule(here: Path) -> None:
    """The demo's sweep records the simulated GPU in each signature's meta."""
    assert run_eopt("demo", "--out", "d", "--stages", "2", "--microbatches", "2", "-q") == 0
    models = {s.meta.get("device_model") for s in read_library(here / "d/signatures.jsonl")}
    assert models == {"A100-SXM4-40GB"}
    assert run_eopt(
        "plan", "pipeline", "--library", "d/signatures.jsonl", "-S", "2", "-M", "2",
        "--idle-power", "60W", "-o", "p.yaml", "-q",
    ) == 0  # fmt: skip
    assert read_plan(here / "p.yaml").device_model == "A100-SXM4-40GB"
    assert run_eopt("solve", "p.yaml", "-o", "s.json", "-q") == 0
    assert read_schedule(here / "s.json").device_model == "A100-SXM4-40GB"


def test_plan_sigma_is_the_compositions(here: Path) -> None:
    """σ_E of a solved pipeline is compose_schedule's of its placed cells: a stage
    waiting for its neighbour idles for as long as the neighbour runs, so that idle
    time inherits the neighbour's time noise, which a plain sum of the elements'
    variances leaves out."""
    sigs = [
        Signature(
            f"stage{s}.{kind}", static_power=100.0, time=1.0 + s, dynamic_energy=50.0,
            var_time=0.01, var_energy=100.0, meta={"n": 30},
        )
        for s in range(2)
        for kind in ("forward", "backward")
    ]  # fmt: skip
    (here / "lib.jsonl").write_text("".join(json.dumps(s.to_dict()) + "\n" for s in sigs))
    assert run_eopt(
        "plan", "pipeline", "--library", "lib.jsonl", "-S", "2", "-M", "1",
        "--idle-power", "60W", "-o", "p.yaml", "-q",
    ) == 0  # fmt: skip
    assert run_eopt("solve", "p.yaml", "-o", "s.json", "-q") == 0
    schedule = read_schedule(here / "s.json")
    by_name = {s.name: s for s in sigs}
    placements = [
        Placement(by_name[e.type].on(e.device), e.device, e.start) for e in schedule.elements
    ]
    expected = compose_schedule(placements, idle_power=60.0).std_energy
    plain = math.sqrt(sum(e.var_energy for e in schedule.elements))
    assert schedule.energy_std == pytest.approx(expected, rel=1e-9)
    assert schedule.energy_std > plain * 1.05
    low, high = json.loads((here / "s.json").read_text())["energy"]["interval"]
    assert high - low == pytest.approx(2 * 1.959964 * expected, rel=1e-4)


def test_any_library_maps_to_stage_kinds(here: Path, capsys) -> None:
    """A library of other names: --type maps the stage kinds, and an unmapped kind is
    named with the fix."""
    assert run_eopt("demo", "--out", "d", "--stages", "2", "--microbatches", "1", "-q") == 0
    lib = read_library(here / "d" / "signatures.jsonl")
    renamed = [
        s.with_(name={"stage0.forward": "fwd", "stage0.backward": "bwd"}[s.name], term="")
        for s in lib
        if s.name in ("stage0.forward", "stage0.backward")
    ]
    (here / "mine.jsonl").write_text("".join(json.dumps(s.to_dict()) + "\n" for s in renamed))
    capsys.readouterr()
    assert run_eopt(
        "plan", "pipeline", "--library", "mine.jsonl", "-S", "2", "-M", "2",
        "--type", "forward=fwd", "--idle-power", "60W", "-o", "p.yaml",
    ) != 0  # fmt: skip
    err = capsys.readouterr().err
    assert "stage0.backward" in err and "stage1.backward" in err and "--type" in err
    assert run_eopt(
        "plan", "pipeline", "--library", "mine.jsonl", "-S", "2", "-M", "2",
        "--type", "forward=fwd", "--type", "backward=bwd", "--idle-power", "60W",
        "-o", "p.yaml", "-q",
    ) == 0  # fmt: skip
    plan = read_plan(here / "p.yaml")
    assert set(plan.types()) == {"fwd", "bwd"} and len(plan.devices) == 2


def test_frontier_sigma_is_the_compositions_too(here: Path) -> None:
    """Every frontier point's σ_E comes from the same model as a schedule's."""
    from eopt.plan.solve import plan_frontier

    sigs = [
        Signature(
            f"stage{s}.{kind}", static_power=100.0, time=1.0 + s, dynamic_energy=50.0,
            var_time=0.01, var_energy=100.0, meta={"n": 30}, op_point=OperatingPoint(clock),
        ).with_(static_power=100.0 * (clock / 1410.0) ** 2, time=(1.0 + s) * 1410.0 / clock)
        for s in range(2)
        for kind in ("forward", "backward")
        for clock in (1410.0, 1005.0)
    ]  # fmt: skip
    (here / "lib.jsonl").write_text("".join(json.dumps(s.to_dict()) + "\n" for s in sigs))
    assert run_eopt(
        "plan", "pipeline", "--library", "lib.jsonl", "-S", "2", "-M", "1",
        "--idle-power", "60W", "-o", "p.yaml", "-q",
    ) == 0  # fmt: skip
    points, _ = plan_frontier(read_plan(here / "p.yaml"), num_points=4)
    assert len(points) >= 2
    for point in points:
        plain = math.sqrt(point.solution.var_energy)
        assert point.energy_std > plain * 1.01
