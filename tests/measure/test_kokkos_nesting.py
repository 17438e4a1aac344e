"""Nesting of any depth: the 1.0 connector closed regions early past 512 levels."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eopt.model.trace_io import read_events

_spec = importlib.util.spec_from_file_location(
    "_kokkos_programs", Path(__file__).with_name("test_kokkos_programs.py")
)
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)
connector, cases = helpers.connector, helpers.cases  # the fixtures, built once per session


def assert_a_chain(events, depth: int, innermost: str) -> None:
    """Region i holds region i+1 (parent and times), the innermost holds the kernel."""
    by_name = {e.name: e for e in events}
    assert len(events) == depth + 1
    for i in range(depth):
        level = by_name[f"level {i}"]
        assert level.category == "USER_REGION"
        assert level.parent_id == (by_name[f"level {i - 1}"].id if i else 0)
        inner = by_name[f"level {i + 1}"] if i + 1 < depth else by_name[innermost]
        assert level.start_ns <= inner.start_ns <= inner.end_ns <= level.end_ns
    assert by_name[innermost].parent_id == by_name[f"level {depth - 1}"].id


def test_600_nested_regions_of_a_kokkos_program_close_in_order(cases, connector, tmp_path) -> None:
    proc = helpers.run_program(cases, connector, tmp_path / "t", "nest", "600")
    assert proc.returncode == 0, proc.stderr
    assert_a_chain(read_events(tmp_path / "t" / "events.csv"), 600, "innermost")
    counts = json.loads((tmp_path / "t" / "metadata.json").read_text())["counts"]
    assert counts["too_deep"] == counts["pop_without_push"] == counts["unclosed"] == 0


DRIVER = textwrap.dedent(
    """
    import ctypes, sys

    lib = ctypes.CDLL(sys.argv[1])
    depth = int(sys.argv[2])
    kid = ctypes.c_uint64()
    lib.kokkosp_init_library(0, ctypes.c_uint64(20210225), 0, None)
    for i in range(depth):
        lib.kokkosp_push_profile_region(f"level {i}".encode())
    lib.kokkosp_begin_parallel_for(b"inside", 0, ctypes.byref(kid))
    lib.kokkosp_end_parallel_for(kid)
    for i in range(depth):
        lib.kokkosp_pop_profile_region()
    lib.kokkosp_finalize_library()
    """
)


@pytest.mark.parametrize("depth", [513, 20000])
def test_nesting_has_no_limit(connector, tmp_path, depth) -> None:
    """20 000 levels: the stack of open events grows (from 64, doubling) as deep as the
    program goes."""
    folder = tmp_path / "t"
    env = {**os.environ, "EOPT_KOKKOS_TRACE_DIR": str(folder)}
    subprocess.run(
        [sys.executable, "-c", DRIVER, str(connector), str(depth)], env=env, check=True, timeout=120
    )
    assert_a_chain(read_events(folder / "events.csv"), depth, "inside")
    counts = json.loads((folder / "metadata.json").read_text())["counts"]
    assert counts["too_deep"] == counts["pop_without_push"] == 0
