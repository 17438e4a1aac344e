"""The loop on a marked program, on the simulated GPU: profile → plan → solve → apply -o.

Runs the issue's acceptance script (up to and including `eopt apply … -o run.json`), in a
fresh folder, with the CLI's own entry points."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.cli import cli
from eopt.cli.profile import command as profile_command

K_YAML = """\
stage0.forward: {kernel: gemm, workload: {m: 4096, n: 4096, k: 4096}}
stage0.backward: {kernel: gemm, workload: {m: 4096, n: 8192, k: 4096}}
"""

LOOP_PY = """\
import sys
import eopt

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for step in range(steps):
    for m in range(4):
        with eopt.element(f'F[s0,m{m}]', kind='stage0.forward'):
            pass
        with eopt.element(f'B[s0,m{m}]', kind='stage0.backward'):
            pass
    eopt.step()
"""


def _ok(result) -> None:
    assert result.exit_code == 0, (result.output, result.exception)


@pytest.fixture
def loop_dir(tmp_path, monkeypatch):
    (tmp_path / "k.yaml").write_text(K_YAML, encoding="utf-8")
    (tmp_path / "loop.py").write_text(LOOP_PY, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    # The child imports this checkout's eopt, whatever the environment's path says.
    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    return tmp_path


def _library(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_profile_plan_solve_apply_on_a_marked_loop(loop_dir):
    runner = CliRunner()
    py = sys.executable
    _ok(
        runner.invoke(
            profile_command,
            [
                "--sim",
                "--kernels",
                "k.yaml",
                "--clocks",
                "1410,1200,1005",
                "-o",
                "lib.jsonl",
                "--",
                py,
                "loop.py",
            ],
        )
    )
    lib = _library(loop_dir / "lib.jsonl")
    cells = {(s["name"], s["op_point"]["sm_clock_mhz"]): s for s in lib}
    kinds = ("stage0.forward", "stage0.backward")
    assert set(cells) == {(k, c) for k in kinds for c in (1410.0, 1200.0, 1005.0)}
    for (kind, clock), s in cells.items():
        assert s["var_time"] > 0 and s["var_energy"] > 0, (kind, clock)
        assert s["meta"]["n"] == 12  # 3 steps × 4 microbatches
        assert s["meta"]["device_model"] == "A100-SXM4-40GB"
        assert s["static_power"] > 0 and s["dynamic_energy"] > 0
    for kind in kinds:
        # Lower clocks: longer elements, and less static power at the ready GPU.
        times = [cells[(kind, c)]["time"] for c in (1410.0, 1200.0, 1005.0)]
        assert times == sorted(times)
        statics = [cells[(kind, c)]["static_power"] for c in (1410.0, 1200.0, 1005.0)]
        assert statics == sorted(statics, reverse=True)
    # A backward pass does twice a forward's work.
    ratio = cells[("stage0.backward", 1410.0)]["time"] / cells[("stage0.forward", 1410.0)]["time"]
    assert 1.8 < ratio < 2.2

    _ok(
        runner.invoke(
            cli,
            [
                "plan",
                "pipeline",
                "--library",
                "lib.jsonl",
                "--stages",
                "1",
                "--microbatches",
                "4",
                "--idle-power",
                "60W",
                "-o",
                "plan.yaml",
            ],
        )
    )
    _ok(runner.invoke(cli, ["solve", "plan.yaml", "--slowdown", "10%", "-o", "s.json"]))
    _ok(
        runner.invoke(
            cli,
            [
                "apply",
                "s.json",
                "--sim",
                "--kernels",
                "k.yaml",
                "-o",
                "run.json",
                "--",
                py,
                "loop.py",
                "1",
            ],
        )
    )
    run = json.loads((loop_dir / "run.json").read_text(encoding="utf-8"))
    schedule = json.loads((loop_dir / "s.json").read_text(encoding="utf-8"))
    assert run["schema"] == "eopt.regions-report/1"
    assert run["returncode"] == 0
    planned = {e["name"]: e for e in schedule["elements"]}
    assert len(run["events"]) == 8
    assert {e["name"] for e in run["events"]} == set(planned)
    for event in run["events"]:
        assert event["kind"] == planned[event["name"]]["type"]
        assert event["energy_j"] > 0
    # Per-element energies add up to the run's (nothing runs outside the elements here).
    total = sum(e["energy_j"] for e in run["events"])
    assert total + run["outside_energy_j"] == pytest.approx(run["total_energy_j"], rel=1e-6)
    # The forward passes ran at the schedule's clock: their energy is the profile's there,
    # not the top clock's (the two differ by far more than the calls' spread).
    (forward_clock,) = {
        e["op_point"]["sm_clock_mhz"] for e in schedule["elements"] if e["type"] == "stage0.forward"
    }
    at = cells[("stage0.forward", forward_clock)]
    energy_at = at["static_power"] * at["time"] + at["dynamic_energy"]
    forwards = [e["energy_j"] for e in run["events"] if e["kind"] == "stage0.forward"]
    sd = at["var_energy"] ** 0.5
    for f in forwards:
        assert abs(f - energy_at) < 10 * sd + 0.005 * energy_at, (f, energy_at, sd)
    if forward_clock != 1410.0:
        top = cells[("stage0.forward", 1410.0)]
        assert abs(f - (top["static_power"] * top["time"] + top["dynamic_energy"])) > 10 * sd


def test_profile_json_stdout_carries_only_the_json(loop_dir):
    (loop_dir / "noisy.py").write_text(
        "import eopt\nprint('hello from the program')\n"
        "for _ in range(2):\n"
        "    with eopt.element('F[s0,m0]', kind='stage0.forward'):\n"
        "        pass\n",
        encoding="utf-8",
    )
    argv = ["--sim", "--kernels", "k.yaml", "--clocks", "1200", "--json", "-o", "lib.jsonl", "--"]
    result = CliRunner().invoke(profile_command, [*argv, sys.executable, "noisy.py"])
    _ok(result)
    data = json.loads(result.stdout)
    (sig,) = data["signatures"]
    assert sig["name"] == "stage0.forward" and sig["meta"]["n"] == 2
    assert sig == _library(loop_dir / "lib.jsonl")[0]


def test_a_kind_without_a_kernel_is_one_line_naming_the_file(loop_dir):
    (loop_dir / "other.py").write_text(
        "import eopt\nwith eopt.element('X', kind='stage9.forward'):\n    pass\n",
        encoding="utf-8",
    )
    argv = ["--sim", "--kernels", "k.yaml", "--clocks", "1200", "-o", "lib.jsonl", "--"]
    result = CliRunner().invoke(profile_command, [*argv, sys.executable, "other.py"])
    assert result.exit_code == 1
    assert "stage9.forward" in result.output and "k.yaml" in result.output
    assert "Traceback" not in result.output
    assert not (loop_dir / "lib.jsonl").exists()


def test_in_run_switches_within_one_run_on_the_simulator(loop_dir):
    argv = ["--sim", "--kernels", "k.yaml", "--clocks", "1410,1005", "--in-run", "2"]
    result = CliRunner().invoke(
        profile_command, [*argv, "-o", "lib.jsonl", "--", sys.executable, "loop.py", "4"]
    )
    _ok(result)
    lib = _library(loop_dir / "lib.jsonl")
    got = {(s["name"], s["op_point"]["sm_clock_mhz"]): s for s in lib}
    assert {k: s["meta"]["n"] for k, s in got.items()} == {
        (kind, clock): 8  # two steps of four microbatches at each clock
        for kind in ("stage0.forward", "stage0.backward")
        for clock in (1410.0, 1005.0)
    }
    assert all(s["meta"]["profile"]["mode"] == "in-run" for s in lib)
    for kind in ("stage0.forward", "stage0.backward"):
        assert got[(kind, 1005.0)]["time"] > 1.2 * got[(kind, 1410.0)]["time"]
        assert got[(kind, 1005.0)]["static_power"] < got[(kind, 1410.0)]["static_power"]
