"""`eopt check` on the files other commands write: schedules from `eopt solve`, and its
own --write-graph / --write-library outputs read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eopt.model.schedule import read_schedule
from tests.handoff.runner import run_eopt

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KERNELS = "fwd: {kernel: gemm, workload: {m: 1024, n: 1024, k: 1024}}\n" \
    "bwd: {kernel: gemm, workload: {m: 1024, n: 2048, k: 1024}}\n"  # fmt: skip
PLACEMENTS = (
    "placements:\n"
    "  - {element: fwd, device: gpu0, start: 0ms}\n"
    "  - {element: bwd, device: gpu0, start: 1ms}\n"
)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


def test_demo_schedule_is_checked_per_setting(here: Path) -> None:
    """The demo's schedule runs each element type at several clocks: every (type, clock)
    becomes its own check element, run at its own clock."""
    assert run_eopt("demo", "--out", "d", "--stages", "2", "--microbatches", "2", "-q") == 0
    schedule = read_schedule(here / "d" / "schedule.json")
    rc = run_eopt(
        "check", "d/schedule.json", "--library", "d/signatures.jsonl", "--sim",
        "--mechanisms", "none", "--runs", "4", "--max-rounds", "0", "-o", "c.json",
    )  # fmt: skip
    assert rc == 0
    data = json.loads((here / "c.json").read_text())
    # A world without interactions: the demo's own library predicts its schedule.
    assert data["deviation"] is False, data["test"]
    term = data["predicted"]["term"]
    settings = {(e.type, e.op_point.sm_clock_mhz) for e in schedule.elements}
    types = {e.type for e in schedule.elements}
    assert len(settings) > len(types), "the demo should use several clocks of one type"
    for kind, clock in settings:
        several = sum(1 for k, _ in settings if k == kind) > 1
        assert (f"{kind}@{clock:g}MHz" if several else kind) in term
    # Every scheduled element is one operand of the composed term (plus idle ones).
    operands = [p.strip("() ") for p in term.replace("⊕multi", "⊗").split("⊗")]
    assert len([p for p in operands if p and p != "ι"]) == len(schedule.elements)
    # The composed energy is the schedule's own prediction (the same signatures), up
    # to the makespan's noise the check prices at E[max] and the runner's idle draw.
    assert data["predicted"]["energy_j"] == pytest.approx(
        json.loads((here / "d" / "schedule.json").read_text())["energy"]["predicted"], rel=0.05
    )


def test_perseus_schedule_runs_on_the_gpu_it_was_planned_for(here: Path) -> None:
    """A schedule from a Perseus profile: its stage types mapped to simulated kernels,
    run on the simulated model the profile's name gives (A100-SXM4-80GB here)."""
    assert run_eopt(
        "plan", "pipeline", "--profile", EXAMPLES / "gpt3-a100.csv", "-S", "2", "-M", "1",
        "--idle-power", "80W", "-o", "plan.yaml", "-q",
    ) == 0  # fmt: skip
    assert run_eopt("solve", "plan.yaml", "--static", "-o", "s.json", "-q") == 0
    (here / "k.yaml").write_text(
        "".join(
            f"stage{s}.{k}: {{kernel: gemm}}\n" for s in (0, 1) for k in ("forward", "backward")
        )
    )
    rc = run_eopt(
        "check", "s.json", "--library", "plan.signatures.jsonl", "--sim", "--kernels", "k.yaml",
        "--runs", "3", "--max-rounds", "0", "-o", "c.json", "-q",
    )  # fmt: skip
    assert rc == 0
    data = json.loads((here / "c.json").read_text())
    assert data["model"] == read_schedule(here / "s.json").device_model == "A100-SXM4-80GB"
    assert data["predicted"]["term"].count("stage1.backward") == 1
    # --model still wins.
    rc = run_eopt(
        "check", "s.json", "--library", "plan.signatures.jsonl", "--sim", "--kernels", "k.yaml",
        "--model", "A40", "--runs", "3", "--max-rounds", "0", "-o", "c2.json", "-q",
    )  # fmt: skip
    assert rc == 0 and json.loads((here / "c2.json").read_text())["model"] == "A40"


def test_schedule_needs_its_library(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_eopt("demo", "--out", "d", "--stages", "2", "--microbatches", "1", "-q") == 0
    capsys.readouterr()
    assert run_eopt("check", "d/schedule.json", "--sim") != 0
    err = capsys.readouterr().err
    assert "d/schedule.json" in err and "--library" in err and "Traceback" not in err


def test_null_world_schedule_from_solve_shows_no_deviation(here: Path) -> None:
    """check --write-library → plan pipeline --library --type → solve → check: in a
    world without interactions the solved schedule costs what it predicts."""
    (here / "k.yaml").write_text(KERNELS)
    (here / "p.yaml").write_text(PLACEMENTS)
    common = ("--sim", "--kernels", "k.yaml", "--mechanisms", "none")
    assert run_eopt("check", "p.yaml", *common, "--runs", "12", "--write-library", "l.jsonl") == 0
    assert run_eopt(
        "plan", "pipeline", "--library", "l.jsonl", "-S", "1", "-M", "3", "--type",
        "forward=fwd", "--type", "backward=bwd", "--idle-power", "40W", "-o", "plan.yaml",
    ) == 0  # fmt: skip
    assert run_eopt("solve", "plan.yaml", "-o", "s.json", "-q") == 0
    rc = run_eopt(
        "check", "s.json", "--library", "l.jsonl", *common, "--runs", "12", "-o", "c.json"
    )
    assert rc == 0
    data = json.loads((here / "c.json").read_text())
    assert data["deviation"] is False
    assert data["test"]["energy"]["min_detectable"] > 0
    # Six elements, forwards and backwards alike, all of them run.
    assert data["predicted"]["term"].count("fwd") == 3
    assert data["predicted"]["term"].count("bwd") == 3


def test_graph_and_library_read_back(here: Path) -> None:
    """What `eopt check --write-graph/--write-library` wrote on the README's example is
    read back, and with it the prediction agrees with fresh runs."""
    sched, kernels = EXAMPLES / "check_schedule.yaml", EXAMPLES / "check_kernels.yaml"
    first = (
        "check", sched, "--sim", "--kernels", kernels, "-o", "c1.json",
        "--write-graph", "g.json", "--write-library", "l.jsonl",
    )  # fmt: skip
    assert run_eopt(*first) == 0
    c1 = json.loads((here / "c1.json").read_text())
    assert c1["found"], "the README's example has an interaction to write into the graph"
    rc = run_eopt(
        "check", sched, "--sim", "--kernels", kernels, "--graph", "g.json",
        "--library", "l.jsonl", "--seed", "7", "-o", "c2.json",
    )  # fmt: skip
    assert rc == 0
    c2 = json.loads((here / "c2.json").read_text())
    assert c2["deviation"] is False
    # The graph's composite is what the prediction composes now.
    composite = next(f for f in c1["found"] if f["kind"] == "runtime")["signatures"][0]
    assert composite in c2["predicted"]["term"]
    # Without the graph the same runs deviate: the graph is what makes them agree.
    rc = run_eopt(
        "check", sched, "--sim", "--kernels", kernels, "--library", "l.jsonl",
        "--seed", "7", "--max-rounds", "0", "-o", "c3.json",
    )  # fmt: skip
    assert rc == 0
    assert json.loads((here / "c3.json").read_text())["deviation"] is True
