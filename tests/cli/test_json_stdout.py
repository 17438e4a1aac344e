"""With ``--json``, stdout carries only JSON, for every command that takes it.

Each command runs for real (simulated GPU, repository examples); its stdout must parse
as one JSON document with ``json.loads``, so ``eopt … --json | jq`` works, while its
notes and progress go to stderr. A command that gains ``--json`` without a row here
fails ``test_every_json_command_is_covered``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from eopt.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DBSCAN = ROOT / "tests" / "data" / "kokkos_dbscan_h100"
COVERED = (
    "sweep", "frontier", "compose", "plan", "solve", "apply", "check", "reset", "attribute",
    "compare", "library", "profile",
)  # fmt: skip


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A library, a plan, a schedule and a two-variant run-set folder, made by eopt."""
    d = tmp_path_factory.mktemp("json")
    lib = d / "gemm.jsonl"
    main(["sweep", "sim:gemm", "--clocks", "1410,1005", "-q", "-o", str(lib)])
    plan = d / "plan.yaml"
    main(
        ["plan", "pipeline", "--profile", str(EXAMPLES / "gpt3-a100.csv"), "--stages", "2",
         "--microbatches", "2", "--idle-power", "60W", "-q", "-o", str(plan)]
    )  # fmt: skip
    schedule = d / "schedule.json"
    main(["solve", str(plan), "--slowdown", "5%", "-q", "-o", str(schedule)])
    (d / "k.yaml").write_text("fwd: {kernel: gemm}\n", encoding="utf-8")
    (d / "marked.py").write_text(
        "import eopt\nprint('the program talks on stdout')\n"
        "for _ in range(2):\n    with eopt.element('F', kind='fwd'):\n        pass\n",
        encoding="utf-8",
    )
    return {"lib": lib, "plan": plan, "schedule": schedule, "dir": d}


def _commands(f: dict[str, Path]) -> dict[str, list[str]]:
    d = f["dir"]
    return {
        "sweep": ["sweep", "sim:gemm", "--clocks", "1410", "--json", "-o", str(d / "s.jsonl")],
        "frontier": ["frontier", str(f["lib"]), "--json"],
        "compose": ["compose", str(EXAMPLES / "attention.jsonl"), "seq(prefix, compute)", "--json"],
        "plan": [
            "plan", "pipeline", "--profile", str(EXAMPLES / "gpt3-a100.csv"), "--stages", "2",
            "--microbatches", "2", "--idle-power", "60W", "--json", "-o", str(d / "p2.yaml"),
        ],
        "solve": [
            "solve", str(f["plan"]), "--slowdown", "5%", "--json", "-o", str(d / "s2.json"),
        ],
        "apply": ["apply", str(f["schedule"]), "--dry-run", "--json"],
        "check": [
            "check", str(EXAMPLES / "check_schedule.yaml"), "--sim", "--kernels",
            str(EXAMPLES / "check_kernels.yaml"), "--mechanisms", "none", "--runs", "5", "--json",
        ],
        "reset": ["reset", "--json", "--dry-run"],
        "attribute": ["attribute", str(DBSCAN / "fdbscan" / "illyad-2495425"), "--json"],
        "compare": ["compare", str(DBSCAN / "fdbscan"), str(DBSCAN / "fdbscan-dense"), "--json"],
        "profile": [
            "profile", "--sim", "--kernels", str(d / "k.yaml"), "--clocks", "1410", "--json",
            "-o", str(d / "p.jsonl"), "--", sys.executable, str(d / "marked.py"),
        ],
        "library": [
            "library", "merge", str(f["lib"]), str(f["lib"]), "--json", "-o", str(d / "m.jsonl"),
        ],
    }  # fmt: skip


@pytest.mark.parametrize("name", COVERED)
def test_json_stdout_parses(files, capsys, name):
    argv = _commands(files)[name]
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    data = json.loads(out)  # the whole of stdout, nothing before or after
    assert isinstance(data, (dict, list)) and data


def test_every_json_command_is_covered():
    """Commands whose options include ``--json`` (read from the CLI's own modules)."""
    with_json = set()
    for path in (ROOT / "eopt" / "cli").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "json_option(" in text and path.stem not in ("options", "_common"):
            with_json.add(path.stem)
    # measure needs a GPU or an NVML fake (tests/measure feeds its --json to json.loads);
    # sim fit and demo have their own suites doing the same.
    elsewhere = {"measure", "sim", "demo"}
    missing = with_json - set(COVERED) - elsewhere
    assert not missing, f"add a --json row for: {sorted(missing)}"


def test_piped_tables_keep_each_row_on_one_line(tmp_path):
    """Into a pipe, a long name is not split over lines at 80 columns."""
    import subprocess
    import sys

    long_impl = "flash_attention_v2_" + "x" * 140
    sig = {
        "schema": "eopt.signature/1",
        "name": "attn",
        "impl": long_impl,
        "static_power": 120.0,
        "time": 0.01,
        "dynamic_energy": 1.0,
    }
    lib = tmp_path / "lib.jsonl"
    lib.write_text(json.dumps(sig) + "\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}
    done = subprocess.run(
        [sys.executable, "-c", "from eopt.cli import main; main()", "frontier", str(lib)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert any(long_impl in line for line in done.stdout.splitlines()), done.stdout
