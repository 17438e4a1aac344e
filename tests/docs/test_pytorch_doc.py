"""docs/pytorch.md runs as written: its script is docs/pytorch_1f1b.py, verbatim, names
only what eopt has, and runs unchanged through the guide's loop (profile → plan → solve →
apply -o) on two ranks with simulated GPUs, PyTorch and torchrun replaced by the stand-ins
of tests/docs/fake_torch (the script's control flow and markers are what is tested).
`python3 benchmarks/pytorch_guide_check.py` runs it under the real torchrun with gloo on
the CPU where PyTorch is installed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "pytorch.md"
SCRIPT = ROOT / "docs" / "pytorch_1f1b.py"


def _embedded() -> str:
    text = DOC.read_text(encoding="utf-8")
    begin = r"<!-- begin docs/pytorch_1f1b\.py[^>]*-->\n```python\n"
    end = r"```\n<!-- end docs/pytorch_1f1b\.py -->"
    match = re.search(begin + "(.*?)" + end, text, re.S)
    assert match, "docs/pytorch.md lost its embedded script block"
    return match.group(1)


def test_the_guide_embeds_the_script_verbatim():
    assert _embedded() == SCRIPT.read_text(encoding="utf-8")


def test_the_guide_names_only_things_eopt_has():
    """Names the guide tells users to call exist with those signatures."""
    import inspect

    import eopt
    from eopt.apply import PlanDriftWarning, RuntimeController  # noqa: F401
    from eopt.plan.pipeline import stage_steps

    params = inspect.signature(RuntimeController.from_schedule).parameters
    assert {"gpu_map", "only", "backend", "sim_model"} <= set(params)
    assert {"slow_factor", "warn_drift"} <= set(inspect.signature(RuntimeController).parameters)
    assert stage_steps(0, 2, 1)[0]._fields == ("kind", "microbatch", "name")
    assert list(inspect.signature(eopt.element).parameters) == ["name", "kind"]
    assert callable(eopt.step) and callable(eopt.begin_element) and callable(eopt.end_element)


def test_the_script_is_valid_python_for_the_declared_versions():
    """The script compiles (it runs under torchrun in benchmarks/pytorch_guide_check.py,
    which needs PyTorch: a multi-GB dependency the test suite does not install)."""
    compile(SCRIPT.read_text(encoding="utf-8"), str(SCRIPT), "exec")


def test_the_script_is_marked_and_has_no_code_against_the_controller():
    text = SCRIPT.read_text(encoding="utf-8")
    assert "eopt.element(name, kind=" in text and "eopt.step()" in text
    for name in ("RuntimeController", "read_schedule", 'schedule.json")'):
        assert name not in text


FAKE_TORCH = Path(__file__).resolve().parent / "fake_torch"
KERNELS = "\n".join(
    f"stage{s}.{kind}: {{kernel: gemm, workload: {{m: 2048, n: {n}, k: 2048}}}}"
    for s in (0, 1)
    for kind, n in (("forward", 2048), ("backward", 4096))
)


def test_the_guides_loop_runs_the_script_unchanged(tmp_path, monkeypatch):
    """profile → plan → solve → apply -o on the guide's script, two ranks, simulated GPUs
    (a stand-in for PyTorch and torchrun keeps the script's control flow and markers)."""
    import json
    import os
    import sys

    from click.testing import CliRunner

    from eopt.cli import cli
    from eopt.cli.profile import command as profile

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE_TORCH), str(ROOT)]))
    (tmp_path / "k.yaml").write_text(KERNELS + "\n", encoding="utf-8")
    ranks = [sys.executable, str(FAKE_TORCH / "ranks.py"), "2", str(SCRIPT)]
    runner = CliRunner()

    def argv(text):
        return text.split()

    def ok(result):
        assert result.exit_code == 0, (result.output, result.exception)

    ok(
        runner.invoke(
            profile,
            [*argv("--sim --kernels k.yaml --clocks 1410,1200,1005 -o lib.jsonl --"), *ranks],
        )
    )
    lib = [json.loads(x) for x in (tmp_path / "lib.jsonl").read_text().splitlines()]
    cells = {(s["name"], s["op_point"]["sm_clock_mhz"]): s for s in lib}
    kinds = [f"stage{s}.{k}" for s in (0, 1) for k in ("forward", "backward")]
    assert set(cells) == {(k, c) for k in kinds for c in (1410.0, 1200.0, 1005.0)}
    assert all(s["meta"]["n"] == 12 and s["var_time"] > 0 for s in lib)  # 3 steps × 4

    ok(
        runner.invoke(
            cli,
            argv(
                "plan pipeline --library lib.jsonl --stages 2 --microbatches 4 "
                "--idle-power 60W -o plan.yaml"
            ),
        )
    )
    ok(runner.invoke(cli, argv("solve plan.yaml --slowdown 5% -o schedule.json")))
    ok(
        runner.invoke(
            cli,
            [
                *argv("apply schedule.json --sim --kernels k.yaml -o run.json --"),
                *ranks,
                "--steps",
                "1",
            ],
        )
    )
    run = json.loads((tmp_path / "run.json").read_text())
    schedule = json.loads((tmp_path / "schedule.json").read_text())
    planned = {e["name"]: e["type"] for e in schedule["elements"]}
    assert sorted(e["name"] for e in run["events"]) == sorted(planned)  # 2 ranks × 8
    assert all(e["kind"] == planned[e["name"]] for e in run["events"])
    assert len({e["pid"] for e in run["events"]}) == 2  # one simulated GPU per rank
