"""`eopt sweep` and `eopt measure` through click's CliRunner."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from click.testing import CliRunner

from eopt.cli import cli
from eopt.model.library import read_library
from eopt.sim.gpu import SimulatedGPU

QUICK = ["--min-runs", "3", "--min-time", "0", "--warmup", "1"]


def _run(args: list[str]):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_sweep_sim_gemm_over_two_clocks(tmp_path):
    out = tmp_path / "lib.jsonl"
    result = _run(["sweep", "sim:gemm", "--clocks", "1410,1200", "-o", str(out)])
    assert result.exit_code == 0, result.output
    sigs = read_library(out)
    assert len(sigs) == 6  # 3 implementations × 2 clocks
    assert {s.op_point.sm_clock_mhz for s in sigs} == {1410.0, 1200.0}
    assert "Pareto frontier" in result.output and "cublas" in result.output
    assert all(s.meta["n"] >= 10 for s in sigs)  # the default policy


def test_sweep_resume_through_the_cli(tmp_path):
    out = tmp_path / "lib.jsonl"
    args = ["sweep", "sim:layernorm", "--impls", "apex", "--clocks", "1410,1200", *QUICK]
    assert _run([*args, "-o", str(out)]).exit_code == 0
    again = _run([*args, "--clocks", "1410,1200,1005", "-o", str(out), "--resume"])
    assert again.exit_code == 0, again.output
    assert "2 of 3 cells were already" in again.output
    assert len(read_library(out)) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--clocks", "14x0"], "not a list or range"),
        (["--clocks", "1415"], "does not support SM clock 1415"),
        (["--clocks", "1410:900:30"], "START ≤ STOP"),
        (["--power-limits", "1000"], "outside sim0's settable range"),
        (["--param", "m"], "KEY=VALUE"),
        (["--param", "q=1"], "unknown workload key 'q'"),
        (["--impls", "magic"], "unknown implementation(s) magic"),
        (["--no-control", "--clocks", "1200"], "drop --clocks"),
        (["--backend", "nvml"], "runs only with --backend sim"),
    ],
)
def test_bad_specs_give_one_line_errors(tmp_path, args, message):
    result = _run(["sweep", "sim:gemm", *args, "-o", str(tmp_path / "x.jsonl")])
    assert result.exit_code != 0
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not (tmp_path / "x.jsonl").exists()


def test_bad_cmd_spec_and_missing_kernel(tmp_path):
    result = _run(["sweep", "--cmd", "oops", "-o", str(tmp_path / "x.jsonl")])
    assert result.exit_code != 0 and "NAME='shell command'" in result.output
    result = _run(["sweep", "-o", str(tmp_path / "x.jsonl")])
    assert result.exit_code != 0 and "no kernel given" in result.output


def test_help_has_examples():
    for name in ("sweep", "measure"):
        result = _run([name, "--help"])
        assert (
            result.exit_code == 0
            and "Examples:" in result.output
            and "eopt " + name in result.output
        )


@pytest.fixture
def child_script(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            from eopt.measure import regions

            with regions.region("load[0]"):  # brackets are not rich markup
                time.sleep(0.03)
            with regions.region("train"):
                with regions.region("fwd"):
                    time.sleep(0.03)
            sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
            """
        )
    )
    return script


def test_measure_prints_regions_and_json(monkeypatch, wall_gpu, child_script, tmp_path):
    monkeypatch.setattr("eopt.cli.measure.open_measure_device", lambda backend, index: wall_gpu)
    result = _run(["measure", "--", sys.executable, str(child_script)])
    assert result.exit_code == 0, result.output
    for word in ("load[0]", "train", "fwd", "outside regions", "total", "counter"):
        assert word in result.output
    out = tmp_path / "run.json"
    result = _run(["measure", "--json", "-o", str(out), "--", sys.executable, str(child_script)])
    data = json.loads(result.output)
    assert data == json.loads(out.read_text())
    names = [r["name"] for r in data["regions"]]
    assert names == ["load[0]", "train", "train/fwd"]  # outer regions first
    assert data["total_energy_j"] > sum(r["energy_j"] for r in data["regions"] if r["depth"] == 0)
    assert data["outside_energy_j"] > 0


def test_measure_passes_on_the_exit_status(monkeypatch, wall_gpu, child_script):
    monkeypatch.setattr("eopt.cli.measure.open_measure_device", lambda backend, index: wall_gpu)
    result = CliRunner().invoke(cli, ["measure", "--", sys.executable, str(child_script), "4"])
    assert result.exit_code == 4
    assert "exited with status 4" in result.output


def test_measure_refuses_the_simulated_gpu(monkeypatch):
    monkeypatch.setattr(
        "eopt.cli.measure.open_measure_device", lambda backend, index: SimulatedGPU()
    )
    result = _run(["measure", "--", "true"])
    assert result.exit_code == 1
    assert "simulated" in result.output and "Traceback" not in result.output


def test_sweep_json_matches_the_library_and_quiet_prints_nothing(tmp_path):
    out = tmp_path / "lib.jsonl"
    args = ["sweep", "sim:layernorm", "--clocks", "1410,1005", *QUICK, "-o", str(out)]
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # stdout holds the JSON and nothing else
    sigs = read_library(out)
    assert data["measured"] == len(sigs) == 6 and data["resumed"] == 0
    assert [(c["impl"], c["sm_clock_mhz"]) for c in data["cells"]] == [
        (s.impl, s.op_point.sm_clock_mhz) for s in sigs
    ]
    assert data["cells"][0]["time_s"] == sigs[0].time
    assert {r["impl"] for r in data["frontier"]} <= {"apex", "triton", "naive"}
    again = CliRunner().invoke(cli, [*args, "--resume", "-q"])
    assert again.exit_code == 0 and again.output == ""
    resumed = CliRunner().invoke(cli, [*args, "--resume", "--json", "-q"])
    assert json.loads(resumed.stdout)["resumed"] == 6


def test_sweep_tables_give_times_in_seconds(tmp_path):
    out = tmp_path / "lib.jsonl"
    result = _run(["sweep", "sim:gemm", "--impls", "cublas", "--clocks", "1410", *QUICK,
                   "-o", str(out)])  # fmt: skip
    assert result.exit_code == 0
    assert "time s" in result.output and "time ms" not in result.output
    time_s = read_library(out)[0].time
    assert f"{time_s:.4g}" in result.output  # 4.64 ms shown as 0.00464 s
