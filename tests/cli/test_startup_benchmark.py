"""benchmarks/startup.py --smoke: one round of a few commands, no targets, exit 0."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "startup.py"
RESULTS = ROOT / "benchmarks" / "results" / "startup.json"


def test_smoke_run_times_each_command_against_the_reference() -> None:
    before = RESULTS.stat().st_mtime_ns if RESULTS.exists() else None
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = dict(
        re.findall(
            r"^\s*(\S.*?--help|python -c 'import click, rich')\s+[\d.]+\s+([\d.]+)",
            done.stdout,
            re.M,
        )
    )
    assert set(rows) == {
        "python -c 'import click, rich'",
        "eopt --help",
        "eopt attribute --help",
        "eopt compare --help",
    }, done.stdout
    assert float(rows["python -c 'import click, rich'"]) == 1.0
    assert all(float(ratio) > 0 for ratio in rows.values())
    assert "not judged" in done.stdout and "PASS" not in done.stdout
    after = RESULTS.stat().st_mtime_ns if RESULTS.exists() else None
    assert after == before, "a smoke run writes no results"


def test_too_few_runs_for_the_target_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "2", "--no-save"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --runs 2: the target needs at least 5 runs"
