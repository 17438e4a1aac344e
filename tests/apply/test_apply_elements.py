"""eopt apply and the GPU model a schedule records; a command after `--` needs a reason."""

from __future__ import annotations

import json

from click.testing import CliRunner

from eopt.cli import cli


def _schedule(path, model=None, clock=1425.0):
    data = {
        "schema": "eopt.schedule/1",
        "deadline": 0.01,
        "makespan": 0.002,
        "energy": {"predicted": 0.2},
        "devices": [{"name": "stage0", "idle_power_w": 60.0, "gpu": None}],
        "elements": [
            {
                "name": "F[s0,m0]",
                "type": "stage0.forward",
                "device": "stage0",
                "start": 0.0,
                "duration": 0.001,
                "energy": 0.2,
                "op_point": {"sm_clock_mhz": clock},
            }
        ],
    }
    if model is not None:
        data["device_model"] = model
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_an_a40_schedule_dry_runs_on_the_simulated_a40_without_sim_model(tmp_path):
    s = _schedule(tmp_path / "s.json", model="A40")
    runner = CliRunner()
    ok = runner.invoke(cli, ["apply", s, "--dry-run", "--backend", "sim"])
    assert ok.exit_code == 0, ok.output
    assert "A40" in ok.output
    # The A100 it would default to does not have the clock: the model came from the file.
    bad = runner.invoke(
        cli, ["apply", s, "--dry-run", "--backend", "sim", "--sim-model", "A100-SXM4-40GB"]
    )
    assert bad.exit_code != 0
    assert "1425" in bad.output


def test_sim_and_output_need_a_command(tmp_path):
    s = _schedule(tmp_path / "s.json", clock=1410.0)
    result = CliRunner().invoke(cli, ["apply", s, "-o", str(tmp_path / "run.json")])
    assert result.exit_code != 0
    assert "give it after `--`" in result.output
    assert "Traceback" not in result.output


PROGRAM = """\
import time
import eopt
for name, kind in [("A[0]", "a"), ("B[0]", "b"), ("A[1]", "a"), ("extra", "x")]:
    with eopt.element(name, kind=kind):
        time.sleep(0.01)
"""


def test_a_program_switched_per_element_is_measured_per_element_call(
    build, make_fake_nvml, tmp_path, monkeypatch
):
    """The parent guards and measures the GPU (the fake NVML); the program's process runs
    the controller from the environment (simulated here: the fake lives in the parent)."""
    import os
    import sys
    from pathlib import Path

    from eopt.apply.run import run_on_devices
    from eopt.devices import open_devices
    from eopt.model.schedule import write_schedule

    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    e = build.element
    sch = build.schedule(
        [
            e("A[0]", "s0", 0.0, 0.01, sm=1200, etype="a"),
            e("B[0]", "s0", 0.01, 0.01, sm=1005, etype="b"),
            e("A[1]", "s0", 0.02, 0.01, sm=1200, etype="a"),
        ],
        ["s0"],
    )
    path = tmp_path / "s.json"
    write_schedule(path, sch)
    fake = make_fake_nvml([{}])
    gpu = open_devices("nvml", [0], control=True)[0]
    code, data = run_on_devices(
        str(path), [sys.executable, "-c", PROGRAM], {"s0": gpu}, {"s0": 0}, backend="sim",
        measure=True,
    )  # fmt: skip
    assert code == 0
    assert data["schema"] == "eopt.regions-report/1"
    assert [(ev["name"], ev["kind"]) for ev in data["events"]] == [
        ("A[0]", "a"),
        ("B[0]", "b"),
        ("A[1]", "a"),
        ("extra", "x"),
    ]
    assert all(ev["end_s"] - ev["start_s"] >= 0.009 for ev in data["events"])
    assert fake.gpus[0].locked_sm is None  # the parent's guard restored the GPU


def test_a_real_gpu_of_another_model_is_refused_naming_both(make_fake_nvml, tmp_path):
    s = _schedule(tmp_path / "s.json", model="A40", clock=1410.0)
    make_fake_nvml([{}])  # an A100
    result = CliRunner().invoke(cli, ["apply", s, "--dry-run", "--backend", "nvml"])
    assert result.exit_code == 1
    line = result.output.strip().splitlines()[-1]
    assert "A40" in line and "A100-SXM4-40GB" in line and "--sim-model" in line
    same = _schedule(tmp_path / "same.json", model="A100-SXM4-40GB", clock=1410.0)
    ok = CliRunner().invoke(cli, ["apply", same, "--dry-run", "--backend", "nvml"])
    assert ok.exit_code == 0, ok.output
