"""``eopt plan``, ``eopt solve`` and ``eopt frontier`` from the command line."""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.cli import cli, main
from eopt.model.library import read_library
from eopt.model.planfile import read_plan
from eopt.model.schedule import read_schedule


@pytest.fixture
def gpt3_a100(data_file: Callable[[str], Path]) -> Path:
    """Perseus's GPT-3 stage profile on the A100-SXM4-80GB (tests/data/perseus_sosp24)."""
    return data_file("perseus_sosp24/stage_profile/gpt3-175b+a100_sxm_bf16.csv")


def _run(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _fail(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run through the real entry point; return the one-line error it prints."""
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err
    return " ".join(err.split())


@pytest.fixture()
def small_plan(tmp_path: Path, gpt3_a100: Path) -> Path:
    out = tmp_path / "plan.yaml"
    _run(
        [
            "plan", "pipeline", "--profile", str(gpt3_a100), "--stages", "4",
            "--microbatches", "3", "--idle-power", "83.64W", "-o", str(out),
        ]
    )  # fmt: skip
    return out


def test_plan_pipeline_writes_plan_and_library(small_plan: Path) -> None:
    plan = read_plan(small_plan)
    assert len(plan.devices) == 4 and len(plan.elements) == 4 * 3 * 2
    assert plan.libraries == ("plan.signatures.jsonl",)
    lib = read_library(small_plan.with_name("plan.signatures.jsonl"))
    assert len(lib) == 4 * 2 * 38  # stages 0–3 only, every clock
    assert {d.idle_power_w for d in plan.devices} == {83.64}


def test_plan_pipeline_with_existing_library(small_plan: Path, tmp_path: Path) -> None:
    out = tmp_path / "sub" / "gpipe.json"
    out.parent.mkdir()
    lib = small_plan.with_name("plan.signatures.jsonl")
    text = _run(
        [
            "plan", "pipeline", "--library", str(lib), "-M", "2", "--schedule", "gpipe",
            "--idle-power", "80", "-o", str(out),
        ]
    )  # fmt: skip
    assert "4 stages" in text
    plan = read_plan(out)
    assert plan.meta["schedule"] == "gpipe"
    assert plan.library_paths()[0].resolve() == lib.resolve()  # relative to the plan file


def test_solve_writes_schedule_and_reports_savings(small_plan: Path, tmp_path: Path) -> None:
    out = tmp_path / "schedule.json"
    text = _run(["solve", str(small_plan), "--slowdown", "5%", "--method", "relax", "-o", str(out)])
    schedule = read_schedule(out)
    base = schedule.baseline
    assert base is not None
    assert schedule.deadline == pytest.approx(base["makespan"] * 1.05)
    assert schedule.makespan <= schedule.deadline
    saved = base["energy"] - schedule.energy
    assert saved > 0
    assert f"({saved / base['energy'] * 100:.1f} %)" in text
    assert "stage0.forward" in text and "MHz×" in text
    assert "lower bound" in text
    # The headline comes first and matches the numbers stored for the report.
    gains = base["savings"]
    assert text.lstrip().startswith(f"Saves {gains['at_fastest'] * 100:.1f} % at no slowdown")
    assert gains["at_deadline"] == pytest.approx(saved / base["energy"])


def test_solve_json_output(small_plan: Path) -> None:
    text = _run(["solve", str(small_plan), "--deadline", "1.0", "--method", "relax", "--json"])
    data = json.loads(text)
    assert data["schema"] == "eopt.schedule/1"
    assert data["makespan"] <= 1.0


def test_solve_frontier_csv(small_plan: Path, tmp_path: Path) -> None:
    out = tmp_path / "frontier.csv"
    text = _run(["solve", str(small_plan), "--frontier", "--points", "5", "-o", str(out)])
    rows = list(csv.DictReader(out.open()))
    assert len(rows) >= 2 and "Plan frontier" in text
    makespans = [float(r["makespan_s"]) for r in rows]
    energies = [float(r["energy_j"]) for r in rows]
    assert makespans == sorted(makespans)
    assert all(a > b for a, b in itertools.pairwise(energies))
    assert all(float(r["lower_bound_j"]) <= float(r["energy_j"]) + 1e-6 for r in rows)


def test_infeasible_deadline_names_fastest_makespan(
    small_plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _fail(["solve", str(small_plan), "--deadline", "0.01"], capsys)
    assert "fastest achievable makespan" in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("devices: []\nelements: []\n", "bad.yaml: field 'devices' must be a non-empty list"),
        (
            "devices: [{name: g0, idle_power_w: 50}]\n"
            "elements: [{name: A, device: g0, type: x, after: [F9]}]\n",
            "bad.yaml: elements[0].after: unknown element 'F9'",
        ),
        (
            "libraries: [missing.jsonl]\ndevices: [{name: g0, idle_power_w: 50}]\n"
            "elements: [{name: A, device: g0, type: x}]\n",
            "bad.yaml: libraries[0]:",
        ),
        ("devices: [\n", "bad.yaml:2: not valid YAML"),
    ],
)
def test_bad_plan_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    assert expected in _fail(["solve", str(path), "--slowdown", "5%"], capsys)


def test_unknown_element_type(small_plan: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = small_plan.read_text().replace("type: stage1.forward", "type: stage9.forward", 1)
    small_plan.write_text(text)
    err = _fail(["solve", str(small_plan)], capsys)
    assert "no signature of type 'stage9.forward'" in err and "plan.yaml: elements[" in err


def test_plan_pipeline_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gpt3_a100: Path
) -> None:
    bad = tmp_path / "p.csv"
    bad.write_text("stage,instruction,frequency,time,energy\n0,forward,1410,x,1\n")
    err = _fail(
        ["plan", "pipeline", "--profile", str(bad), "-M", "2", "--idle-power", "80",
         "-o", str(tmp_path / "x.yaml")],
        capsys,
    )  # fmt: skip
    assert "p.csv:2: time (s) must be a number" in err
    err = _fail(
        ["plan", "pipeline", "--profile", str(gpt3_a100), "-S", "9", "-M", "2",
         "--idle-power", "80", "-o", str(tmp_path / "x.yaml")],
        capsys,
    )  # fmt: skip
    assert "stage8.forward" in err


def test_frontier_command(small_plan: Path, tmp_path: Path) -> None:
    lib = small_plan.with_name("plan.signatures.jsonl")
    png, out = tmp_path / "f.png", tmp_path / "f.csv"
    text = _run(
        ["frontier", str(lib), "--element", "stage0.forward", "--plot", str(png),
         "--csv", str(out), "--dominance", "point"]
    )  # fmt: skip
    assert "stage0.forward" in text and "1410MHz" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader(out.open()))
    # The published A100 profile: 20 of 38 clocks are on the forward's (T, E) frontier,
    # from 1410 MHz down to the energy minimum near 1080 MHz (data README).
    assert len(rows) == 20
    assert float(rows[0]["sm_clock_mhz"]) == 1410.0
    assert float(rows[-1]["sm_clock_mhz"]) == 1080.0
    data = json.loads(_run(["frontier", str(lib), "--json"]))
    assert {r["element"] for r in data} == {
        f"stage{s}.{k}" for s in range(4) for k in ("forward", "backward")
    }


def test_frontier_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lib = tmp_path / "lib.jsonl"
    lib.write_text('{"schema": "eopt.signature/1", "name": "a"}\n')
    assert "lib.jsonl:1:" in _fail(["frontier", str(lib)], capsys)


def test_every_command_help_has_an_example() -> None:
    for args in (["plan"], ["plan", "pipeline"], ["solve"], ["frontier"]):
        text = _run([*args, "--help"]).split("Options:")[0]
        assert "Example" in text and f"eopt {args[0]} " in text.split("Example", 1)[1]


def test_solve_grouped_example_and_refused_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The two-GPU example solves from the command line and its schedule names its groups;
    a group whose members depend on each other is a one-line error naming the place."""
    example = Path(__file__).resolve().parents[2] / "examples" / "plans" / "dag_two_gpus.yaml"
    out = tmp_path / "s.json"
    _run(["solve", str(example), "--method", "milp", "-o", str(out)])
    schedule = read_schedule(out)
    assert schedule.meta["groups"] == [["mlp0", "ar0"], ["mlp1", "ar1"]]
    starts = {e.name: e.start for e in schedule.elements}
    assert starts["mlp0"] == starts["ar0"] and starts["mlp1"] == starts["ar1"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        example.read_text(encoding="utf-8").replace("  - [mlp0, ar0]", "  - [ar0, head]")
    )
    err = _fail(["solve", str(bad)], capsys)
    assert "bad.yaml: elements[7].after: 'head' depends on 'ar0', but both are in groups[0]" in err
