"""Bad values for the plan/solve/apply/compose side of the CLI, and the rules every one of
those commands follows.

* Tables of bad option values (NaN, negative, zero, a bare ``5`` for a percent, GPU
  lists with repeats or negatives, sizes past the documented limits): each is refused
  with one line that starts ``error:``, names the option and never shows a traceback.
* ``--debug`` after the subcommand; arguments after ``--`` belong to the user's command.
* The overwrite rule: an existing output file is kept unless ``--force``.
* ``--quiet`` and ``--json``.
* ``eopt apply`` says in one line what it changed, against the patched NVML of the
  device tests; a per-element schedule with ``--until-exit`` is refused before anything
  changes or runs.
* A profile row of stage 100000000 is refused before eopt builds per-stage lists; that
  case runs in a child process with a timeout, so a regressed guard fails instead of
  hanging the suite.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from eopt.cli import hoist_debug, main
from eopt.model.operating_point import OperatingPoint
from eopt.model.planfile import PlanError
from eopt.model.schedule import DeviceInfo, Schedule, ScheduledElement, write_schedule
from eopt.plan.pipeline import MAX_ELEMENTS, MAX_MICROBATCHES, MAX_STAGES

DEVICES_CONFTEST = Path(__file__).resolve().parents[1] / "devices" / "conftest.py"
CLOCKS = (1410, 1200, 1005, 810)  # all supported by the fake NVML GPU (1410 … 210 by 15)
IDLE_W = 100.0


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``argv``; assert a refusal in exactly one line; return that line."""
    code, out, err = _run(argv, capsys)
    assert code in (1, 2), (argv, code, out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: "), lines
    assert "Traceback" not in err and "internal error" not in err
    return lines[0]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-stage profile, its plan (2 × 2 1F1B) and a solved schedule."""
    folder = tmp_path_factory.mktemp("cli_faults")
    rows = ["stage,instruction,frequency,time,energy"]
    for s in range(2):
        for kind, t0, d0 in (("forward", 0.05, 20.0), ("backward", 0.1, 45.0)):
            for f in CLOCKS:
                t = t0 * (1410.0 / f) ** 0.9
                d = d0 * (0.55 + 0.45 * (f / 1410.0) ** 2)
                rows.append(f"{s},{kind},{f},{t!r},{IDLE_W * t + d!r}")
    (folder / "profile.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    plan, profile = str(folder / "plan.yaml"), str(folder / "profile.csv")
    main(["plan", "pipeline", "--profile", profile, "-M", "2", "--idle-power", "100W",
          "-o", plan, "-q"])  # fmt: skip
    for name, extra in (("schedule.json", []), ("static.json", ["--static"])):
        main(["solve", plan, "--slowdown", "5%", "--method", "milp", *extra,
              "-o", str(folder / name), "-q"])  # fmt: skip
    return folder


# -- bad values ------------------------------------------------------------------------
SOLVE_CASES = [
    (["--deadline", "nan"], "--deadline: must be a finite number"),
    (["--deadline", "inf"], "--deadline: must be a finite number"),
    (["--deadline", "-1"], "--deadline: must be a finite number ≥ 0 s"),
    (["--deadline", "0"], "--deadline: must be > 0 s"),
    (["--deadline", "3 parsecs"], "'parsecs' is not a unit of time"),
    (["--deadline", "3m"], "m is ambiguous; write ms for milliseconds"),
    (["--slowdown", "5"], "--slowdown: 5 would mean 500%; did you mean 5%?"),
    (["--slowdown", "nan"], "--slowdown: must be a finite percent"),
    (["--slowdown", "-5%"], "--slowdown: must be a finite percent ≥ 0"),
    (["--slowdown", "fast"], "--slowdown: cannot read 'fast'"),
    (["--time-limit", "nan"], "--time-limit: must be a finite number"),
    (["--time-limit", "0"], "--time-limit: must be > 0 s"),
    (["--time-limit", "-3"], "--time-limit: must be a finite number ≥ 0 s"),
    (["--gap", "nan"], "--gap: must be a finite percent"),
    (["--gap", "5"], "--gap: 5 would mean 500%; did you mean 5%?"),
    (["--frontier", "--points", "0"], "--points"),
    (["--frontier", "--points", "100000"], "100000"),
    (["--deadline", "1s", "--slowdown", "5%"], "give either --deadline or --slowdown"),
    (["--static", "--frontier"], "--static solves one deadline"),
    (["--deadline", "1ms"], "below the fastest achievable makespan"),
    (["--method", "magic"], "magic"),
]


@pytest.mark.parametrize(
    ("args", "expected"), SOLVE_CASES, ids=[" ".join(a) for a, _ in SOLVE_CASES]
)
def test_solve_refuses_bad_values_in_one_line(
    workdir: Path, args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_line_error(["solve", str(workdir / "plan.yaml"), *args], capsys)
    assert expected in line


# Cases refused by click itself (ranges, choices, unknown options) name the option and
# the value; its wording is click's and may change with its version, so only those are
# asserted (the one-line rule is asserted for every case).
PIPELINE_CASES = [
    (["-M", "1000000"], "1000000"),
    (["-M", "0"], "-M"),
    (["-M", "-1"], "-1"),
    (["-M", "2", "-S", "100000"], "100000"),
    (["-M", str(MAX_MICROBATCHES), "-S", "8"], f"above the limit of {MAX_ELEMENTS}"),
    (["-M", "2", "--gpus", "0,0"], "--gpus '0,0': GPU 0 is given twice"),
    (["-M", "2", "--gpus", "-1"], "--gpus '-1': expected GPU indices (integers ≥ 0)"),
    (["-M", "2", "--gpus", "0,1,2"], "--gpus: expected 2 GPU indices (one per stage), got 3"),
    (["-M", "2", "--deadline", "nan"], "--deadline: must be a finite number"),
    (["-M", "2", "--deadline", "3 h"], "'h' is not a unit of time"),
]


@pytest.mark.parametrize(
    ("args", "expected"), PIPELINE_CASES, ids=[" ".join(a) for a, _ in PIPELINE_CASES]
)
def test_plan_pipeline_refuses_bad_values_before_allocating(
    workdir: Path,
    tmp_path: Path,
    args: list[str],
    expected: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "p.yaml"
    base = ["plan", "pipeline", "--profile", str(workdir / "profile.csv"), "--idle-power", "100W"]
    line = _one_line_error([*base, *args, "-o", str(out)], capsys)
    assert expected in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("power", "expected"),
    [
        ("nan", "--idle-power: must be a finite number"),
        ("-5W", "--idle-power: must be a finite number ≥ 0 W"),
        ("83MW", "MW is megawatts; write mW for milliwatts or W for watts"),
        ("83 volts", "'volts' is not a unit of power"),
    ],
)
def test_idle_power_with_units_is_read_or_refused(
    workdir: Path,
    tmp_path: Path,
    power: str,
    expected: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["plan", "pipeline", "--profile", str(workdir / "profile.csv"), "-M", "2"]
    line = _one_line_error([*base, "--idle-power", power, "-o", str(tmp_path / "p.yaml")], capsys)
    assert expected in line


def test_milliwatts_are_milliwatts(workdir: Path, tmp_path: Path) -> None:
    from eopt.model.planfile import read_plan

    base = ["plan", "pipeline", "--profile", str(workdir / "profile.csv"), "-M", "2", "-q"]
    main([*base, "--idle-power", "83640mW", "-o", str(tmp_path / "p.yaml")])
    assert {d.idle_power_w for d in read_plan(tmp_path / "p.yaml").devices} == {83.64}


def test_a_profile_stage_of_a_hundred_million_is_refused_at_once(tmp_path: Path) -> None:
    profile = tmp_path / "huge.csv"
    profile.write_text(
        "stage,instruction,frequency,time,energy\n"
        "0,forward,1410,0.05,20\n0,backward,1410,0.1,40\n"
        "100000000,forward,1410,0.05,20\n",
        encoding="utf-8",
    )
    argv = ["plan", "pipeline", "--profile", str(profile), "-M", "2", "--idle-power", "80W",
            "-o", str(tmp_path / "p.yaml")]  # fmt: skip
    code = f"from eopt.cli import main; main({argv!r})"
    # A regressed guard would loop over 10^8 stages: the timeout turns that into a failure.
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert f"stage index 100000000 is above the limit of {MAX_STAGES - 1}" in lines[0]


COMPOSE_CASES = [
    (["--measured", "-5"], "--measured: must be a finite number ≥ 0 J, got '-5'"),
    (["--measured", "nan"], "--measured: must be a finite number"),
    (["--measured", "3.4±-1"], "--measured σ: must be a finite number ≥ 0 J"),
    (["--measured", "3.4±inf"], "--measured σ: must be a finite number"),
    (["--measured", "lots"], "--measured: cannot read 'lots'"),
    (["--idle-power", "nan"], "--idle-power: must be a finite number"),
    (["--idle-power", "-60W"], "--idle-power: must be a finite number ≥ 0 W"),
    (["--idle-power", "gpu0="], "--idle-power gpu0: cannot read ''"),
    (["--idle-power", "=60W"], "expected DEVICE=WATTS"),
    (["--confidence", "nan"], "--confidence: must be a finite percent"),
    (["--confidence", "1.5"], "--confidence: 1.5 would mean 150%; did you mean 1.5%?"),
]


@pytest.mark.parametrize(
    ("args", "expected"), COMPOSE_CASES, ids=[" ".join(a) for a, _ in COMPOSE_CASES]
)
def test_compose_refuses_bad_values_in_one_line(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_line_error(["compose", "examples/attention.jsonl", "prefix", *args], capsys)
    assert expected in line


OTHER_CASES = [
    (["reset", "--gpu", "-1"], "--gpu"),
    (["demo", "--slowdown", "5"], "--slowdown: 5 would mean 500%; did you mean 5%?"),
    (["demo", "--stages", "100"], "--stages"),
    (["demo", "--microbatches", "0"], "--microbatches"),
    (["report"], "nothing to report"),
    (["trace"], "give a SCHEDULE.json or a trace folder"),
    (["solve"], "(see eopt solve --help)"),
    (["solve", "x.yaml", "--bogus"], "--bogus"),
]


@pytest.mark.parametrize(
    ("argv", "expected"), OTHER_CASES, ids=[" ".join(a) for a, _ in OTHER_CASES]
)
def test_other_commands_refuse_in_one_line(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert expected in _one_line_error(argv, capsys)


def test_units_are_accepted_where_numbers_are(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from eopt.model.schedule import read_schedule

    fastest = read_schedule(workdir / "schedule.json").baseline["makespan"]  # type: ignore[index]
    deadline_ms = f"{fastest * 1.2 * 1000:.3f}ms"
    code, out, _ = _run(
        ["solve", str(workdir / "plan.yaml"), "--deadline", deadline_ms, "--json", "-q"], capsys
    )
    assert code == 0
    assert json.loads(out)["deadline"] == pytest.approx(fastest * 1.2, rel=1e-5)


# -- --debug, --force, --quiet, --json -------------------------------------------------
def test_debug_after_the_subcommand_shows_the_traceback(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="no such plan file"):
        main(["solve", str(tmp_path / "missing.yaml"), "--debug"])


def test_without_debug_the_same_error_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_line_error(["solve", str(tmp_path / "missing.yaml")], capsys)
    assert "no such plan file" in line


def test_debug_after_double_dash_belongs_to_the_users_command() -> None:
    argv = ["apply", "s.json", "--until-exit", "--", "python", "train.py", "--debug"]
    assert hoist_debug(argv) == (argv, False)
    assert hoist_debug(["solve", "p.yaml", "--debug", "-q"]) == (
        ["--debug", "solve", "p.yaml", "-q"],
        True,
    )


def _overwrite_cases(workdir: Path, out: Path) -> list[list[str]]:
    plan, schedule = str(workdir / "plan.yaml"), str(workdir / "schedule.json")
    return [
        ["solve", plan, "--slowdown", "5%", "--method", "milp", "-o", str(out)],
        ["solve", plan, "--frontier", "--points", "3", "-o", str(out)],
        ["plan", "pipeline", "--profile", str(workdir / "profile.csv"), "-M", "2",
         "--idle-power", "100W", "-o", str(out)],
        ["report", "--schedule", schedule, "-o", str(out)],
        ["trace", schedule, "-o", str(out)],
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(5), ids=["solve", "frontier", "plan", "report", "trace"])
def test_one_overwrite_rule_for_every_command_that_writes(
    workdir: Path, tmp_path: Path, case: int, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "existing.out"
    out.write_text("keep me\n", encoding="utf-8")
    argv = _overwrite_cases(workdir, out)[case]
    line = _one_line_error(argv, capsys)
    assert f"{out}: the file exists; pass --force to overwrite it" in line
    assert out.read_text(encoding="utf-8") == "keep me\n"  # untouched
    code, _, err = _run([*argv, "--force", "-q"], capsys)
    assert code == 0, err
    assert out.read_text(encoding="utf-8") != "keep me\n"


def test_plan_pipeline_keeps_an_existing_library_next_to_the_plan(
    workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lib = tmp_path / "p.signatures.jsonl"
    lib.write_text("", encoding="utf-8")
    argv = ["plan", "pipeline", "--profile", str(workdir / "profile.csv"), "-M", "2",
            "--idle-power", "100W", "-o", str(tmp_path / "p.yaml")]  # fmt: skip
    assert "the file exists; pass --force" in _one_line_error(argv, capsys)
    assert not (tmp_path / "p.yaml").exists()


def test_quiet_prints_nothing_and_json_prints_only_json(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = str(workdir / "plan.yaml")
    code, out, _ = _run(["solve", plan, "--slowdown", "5%", "--method", "milp", "-q"], capsys)
    assert code == 0 and out == ""
    code, out, _ = _run(["solve", plan, "--slowdown", "5%", "--method", "milp", "--json"], capsys)
    assert code == 0
    data = json.loads(out)  # nothing but the JSON on stdout
    assert data["baseline"]["savings"]["vs"] == "all-fastest"
    # The next command in the same process is not quiet any more.
    code, out, _ = _run(["solve", plan, "--slowdown", "5%", "--method", "milp"], capsys)
    assert code == 0 and out.lstrip().startswith("Saves ")


# -- eopt apply against the patched NVML -----------------------------------------------
def _fake_nvml_module() -> Any:
    spec = importlib.util.spec_from_file_location("_cli_faults_fake_nvml", DEVICES_CONFTEST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def nvml() -> Iterator[Any]:
    """Two fake A100s patched in as eopt's pynvml (the device tests' fake)."""
    fake_module = _fake_nvml_module()
    fake = fake_module.FakePynvml(
        [fake_module.FakeGpu(uuid="GPU-0-fake"), fake_module.FakeGpu(uuid="GPU-1-fake")]
    )
    with mock.patch("eopt.devices.nvml.pynvml", fake):
        yield fake


def _per_element_schedule(path: Path) -> Path:
    """Two GPUs, each switching between two clocks."""
    elements = []
    for d in range(2):
        for i, clock in enumerate((1410, 1200, 1410)):
            elements.append(
                ScheduledElement(f"e{d}{i}", "op", f"stage{d}", 0.1 * i, 0.1, 25.0,
                                 op_point=OperatingPoint(clock), dynamic_energy=15.0)
            )  # fmt: skip
    devices = (DeviceInfo("stage0", IDLE_W, 0), DeviceInfo("stage1", IDLE_W, 1))
    write_schedule(path, Schedule(tuple(elements), devices, makespan=0.3, energy=200.0))
    return path


def test_apply_until_exit_refuses_a_per_element_schedule_in_one_line(
    nvml: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    schedule = _per_element_schedule(tmp_path / "s.json")
    argv = ["apply", str(schedule), "--until-exit", "--",
            sys.executable, "-c", f"open({str(marker)!r}, 'w')"]  # fmt: skip
    line = _one_line_error(argv, capsys)
    assert line.startswith("error: 0 of 2 GPUs would change: the schedule switches settings")
    assert "docs/pytorch.md" in line and "--static" in line
    assert nvml.setter_calls() == []  # nothing changed …
    assert not marker.exists()  # … and the command did not run at default settings


def test_apply_until_exit_locks_a_static_schedule_and_says_so(
    nvml: Any, workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from eopt.model.schedule import read_schedule

    static = read_schedule(workdir / "static.json")
    clocks = [static.elements_on(d.name)[0].op_point.sm_clock_mhz for d in static.devices]
    marker = tmp_path / "ran"
    argv = ["apply", str(workdir / "static.json"), "--until-exit", "--",
            sys.executable, "-c", f"open({str(marker)!r}, 'w')"]  # fmt: skip
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    summary = [line for line in out.splitlines() if "GPUs changed" in line]
    expected = ", ".join(f"gpu{i} locked at {c:g}MHz" for i, c in enumerate(clocks))
    assert summary == [f"2 of 2 GPUs changed ({expected})"]
    assert marker.exists()
    locks = [args[1:] for name, args in nvml.calls if name == "nvmlDeviceSetGpuLockedClocks"]
    assert sorted(locks) == sorted((int(c), int(c)) for c in clocks)
    assert all(g.locked_sm is None for g in nvml.gpus)  # restored after the command


def test_apply_json_says_what_each_gpu_needs(
    nvml: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schedule = _per_element_schedule(tmp_path / "s.json")
    code, out, _ = _run(["apply", str(schedule), "--dry-run", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert [g["action"] for g in data["gpus"]] == ["runtime-controller"] * 2
    assert data["changed"] == 0 and data["total"] == 2 and data["dry_run"] is True
    assert data["gpus"][0]["calls"][0] == ["nvmlDeviceSetGpuLockedClocks(gpu0, 1410, 1410)"]
    assert nvml.setter_calls() == []
