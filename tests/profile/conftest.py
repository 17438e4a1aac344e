"""The fake NVML of tests/devices for the profile tests (``make_fake_nvml``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _devices_conftest():
    # Conftest modules cannot be imported by name under --import-mode=importlib.
    path = Path(__file__).resolve().parent.parent / "devices" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_eopt_tests_fake_nvml_profile", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


make_fake_nvml = _devices_conftest().make_fake_nvml
