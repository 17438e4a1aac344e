"""The files of the README's tour (examples/) exist, are what they claim, and run here."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from eopt.cli import main
from eopt.model.schedule import read_schedule

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPT3_SHA256 = "362bb134259443524cb6617bdb9f5309cf9952076670765e3c39e0bb12c456a7"


def test_the_profile_is_the_perseus_file_byte_for_byte(data_file: Callable[[str], Path]) -> None:
    ours = (EXAMPLES / "gpt3-a100.csv").read_bytes()
    assert hashlib.sha256(ours).hexdigest() == GPT3_SHA256
    assert GPT3_SHA256 in (EXAMPLES / "README.md").read_text(encoding="utf-8")
    reference = data_file("perseus_sosp24/stage_profile/gpt3-175b+a100_sxm_bf16.csv")
    assert reference.read_bytes() == ours


def test_train_runs_without_a_gpu_and_reports_each_epoch(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(EXAMPLES / "train.py"), "--cpu",
         "--epochs", "2", "--steps", "3", "--width", "16", "--batch", "8"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "EOPT_REGIONS_FILE": str(tmp_path / "regions.jsonl")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "epoch 1: loss" in done.stdout and "epoch 2: loss" in done.stdout
    # Every step's phases and each epoch were reported as regions.
    text = (tmp_path / "regions.jsonl").read_text(encoding="utf-8")
    for name in ("epoch", "forward", "backward", "optimizer"):
        assert f'"{name}"' in text


def test_train_refuses_sizes_out_of_range() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "train.py"), "--width", "100000"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "--width must be in 1 … 16384" in done.stderr


def test_kernel_module_runs_its_cpu_implementation_and_checks_arguments() -> None:
    spec = importlib.util.spec_from_file_location("tour_mykernels", EXAMPLES / "mykernels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.matmul(impl="numpy", n=8)  # the sweep calls it as matmul(impl=…, **params)
    with pytest.raises(ValueError, match="unknown impl 'triton'"):
        module.matmul(impl="triton", n=8)
    with pytest.raises(ValueError, match="n must be in 1"):
        module.matmul(impl="numpy", n=0)


def test_tour_optimize_and_act_steps_run_on_the_example_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step 3 and the dry run of step 4, as the README writes them (a shorter limit)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(EXAMPLES)
    main(["plan", "pipeline", "--profile", "examples/gpt3-a100.csv", "--stages", "8",
          "--microbatches", "12", "--idle-power", "83.64W", "-o", "plan.yaml", "-q"])  # fmt: skip
    main(["solve", "plan.yaml", "--slowdown", "5%", "--time-limit", "4s", "--static",
          "-o", "static.json"])  # fmt: skip
    out = capsys.readouterr().out
    assert out.lstrip().startswith("Saves") or out.lstrip().startswith("Uses")
    assert "One setting per GPU (--static) costs" in out
    static = read_schedule("static.json")
    for device in static.devices:  # one clock per GPU: eopt apply can lock it
        assert len({e.op_point.device_key for e in static.elements_on(device.name)}) == 1
    main(["apply", "static.json", "--dry-run", "--backend", "sim"])
    assert "8 of 8 GPUs would change" in capsys.readouterr().out
