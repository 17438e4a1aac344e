"""docs/pytorch.md runs as written: its script is docs/pytorch_1f1b.py, verbatim, and names
only what eopt has. `python3 benchmarks/pytorch_guide_check.py` runs the script under
torchrun (gloo on the CPU, simulated GPUs) where PyTorch is installed."""

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

    from eopt.apply import PlanDriftWarning, RuntimeController  # noqa: F401
    from eopt.plan.pipeline import stage_steps

    params = inspect.signature(RuntimeController.from_schedule).parameters
    assert {"gpu_map", "only", "backend", "sim_model"} <= set(params)
    assert {"slow_factor", "warn_drift"} <= set(inspect.signature(RuntimeController).parameters)
    assert stage_steps(0, 2, 1)[0]._fields == ("kind", "microbatch", "name")


def test_the_script_is_valid_python_for_the_declared_versions():
    """The script compiles (it runs under torchrun in benchmarks/pytorch_guide_check.py,
    which needs PyTorch: a multi-GB dependency the test suite does not install)."""
    compile(SCRIPT.read_text(encoding="utf-8"), str(SCRIPT), "exec")
