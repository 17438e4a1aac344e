"""Shared by the benchmark tests: a script of ``benchmarks/`` loaded as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(monkeypatch: pytest.MonkeyPatch, script: str) -> ModuleType:
    """``benchmarks/<script>.py`` as a fresh module, its folder on ``sys.path`` (scripts
    import ``_common``) for the test's duration."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"{script}_under_test", BENCH / f"{script}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
