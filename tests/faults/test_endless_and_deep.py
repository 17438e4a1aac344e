"""Endless, deep and newer input: every reader bounds what it reads and says so in one line.

* A device (``/dev/zero``) given as a plan, a library or a trace is refused before a
  byte is read; a run in a child process with a timeout, so a regressed guard fails
  instead of hanging the suite.
* 100 000-deep JSON in a trace's ``metadata.json`` or a run set's ``index.json``, and a
  1000-deep ``compose`` expression, are one-line errors naming the file or the column.
* ``report --check`` refuses results whose numbers are not numbers ≥ 0.
* A trace or run set in a newer version of its format is refused, not read as version 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from eopt.cli import main
from eopt.model.trace_io import read_runs, read_trace

ROOT = Path(__file__).resolve().parents[2]
DEEP = "[" * 100_000 + "]" * 100_000


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, err = _run(argv, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code in (1, 2) and len(lines) == 1, (code, err)
    assert lines[0].startswith("error: ") and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["solve", "/dev/zero"],
        ["compose", "/dev/zero", "a"],
        ["attribute", "/dev/zero"],
        ["frontier", "/dev/zero"],
    ],
)
def test_a_device_is_refused_before_it_is_read(argv):
    done = subprocess.run(
        [sys.executable, "-c", "from eopt.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode in (1, 2), done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: /dev/zero"), done.stderr


def _dashboard(folder: Path) -> Path:
    folder.mkdir()
    (folder / "events.csv").write_text("id,parent_id,name,category,start_ns,end_ns\n")
    (folder / "power_samples.csv").write_text(
        "timestamp_ns,domain,device_id,power_watts\n0,GPU,0,100\n1000000000,GPU,0,100\n"
    )
    return folder


def test_deep_metadata_is_one_line_naming_the_file(tmp_path, capsys):
    trace = _dashboard(tmp_path / "t")
    (trace / "metadata.json").write_text(DEEP)
    line = _one_line_error(["attribute", str(trace)], capsys)
    assert "metadata.json" in line and "nested too deeply" in line


def test_deep_run_set_index_is_one_line_naming_the_file(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "index.json").write_text(DEEP)
    with pytest.raises(ValueError, match=r"index\.json: .*nested too deeply"):
        read_runs(runs)


def test_a_1000_deep_expression_is_refused_with_its_caret(capsys):
    """The expression's error line, then the expression and a caret (as for every typo)."""
    expression = "seq(" * 1000 + "prefix" + ")" * 1000
    code, err = _run(["compose", "examples/attention.jsonl", expression], capsys)
    first = err.splitlines()[0]
    assert code in (1, 2) and "Traceback" not in err and "internal error" not in err
    assert first.startswith("error: nested more than 100 levels") and "--schedule" in first
    shallow = "seq(" * 50 + "prefix" + ")" * 50
    code, err = _run(["compose", "examples/attention.jsonl", shallow], capsys)
    assert code == 0, err


def _check_result() -> dict:
    return {
        "schema": "eopt.check/1",
        "deviation": False,
        "found": [],
        "predicted": {"energy_j": 10.0, "time_s": 0.1, "std_energy_j": 0.1, "bias_bound_j": 0.0},
        "measured": {"energy_j": 10.1, "time_s": 0.1, "std_energy_j": 0.1, "runs": 30},
        "test": {"passed": True},
    }


@pytest.mark.parametrize(
    ("block", "value", "said"),
    [
        ("predicted", [1, 2], "predicted: expected an object"),
        ("predicted", {"energy_j": "lots", "time_s": 1}, "predicted.energy_j: expected a number"),
        ("predicted", {"energy_j": -5, "time_s": 1}, "predicted.energy_j: expected a number ≥ 0"),
        ("measured", {"energy_j": 1, "time_s": True}, "measured.time_s: expected a number"),
        ("measured", {"energy_j": 1}, "measured.time_s: expected a number"),
        ("deviation", "no", "deviation: expected true or false"),
        ("test", {"passed": "yes"}, "test: expected an object with 'passed'"),
    ],
)
def test_report_check_refuses_results_that_are_not_numbers(tmp_path, capsys, block, value, said):
    data = _check_result()
    data[block] = value
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    line = _one_line_error(["report", "--check", str(path), "-o", str(tmp_path / "r.html")], capsys)
    assert said in line and "c.json" in line
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_check_result()))
    code, err = _run(["report", "--check", str(good), "-o", str(tmp_path / "g.html")], capsys)
    assert code == 0, err


def test_a_newer_dashboard_version_is_refused(tmp_path):
    trace = _dashboard(tmp_path / "t")
    (trace / "metadata.json").write_text(
        json.dumps({"format": "energy-dashboard-for-kokkos", "version": 2})
    )
    with pytest.raises(ValueError, match=r"version 2 of its format .* reads version 1"):
        read_trace(trace)
    (trace / "metadata.json").write_text(
        json.dumps({"format": "energy-dashboard-for-kokkos", "version": 1})
    )
    assert read_trace(trace).series[0].power_w[0] == 100.0


def test_a_newer_run_set_is_refused(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    _dashboard(runs / "run_001")
    (runs / "index.json").write_text(
        json.dumps({"schema": "eopt.runset/2", "runs": [{"trace": "run_001"}]})
    )
    with pytest.raises(ValueError, match=r"eopt\.runset/2.* reads version 1"):
        read_runs(runs)
    (runs / "index.json").write_text(
        json.dumps({"schema": "eopt.runset/1", "runs": [{"trace": "run_001"}]})
    )
    assert len(read_runs(runs)) == 1


def test_a_library_whose_sums_would_overflow_is_refused_at_its_line(tmp_path, capsys):
    """1e300 W over 1e10 s made every frontier energy infinite, and the table came out empty."""
    sig = {
        "schema": "eopt.signature/1",
        "name": "k",
        "impl": "a",
        "static_power": 120.0,
        "time": 0.01,
        "dynamic_energy": 1.0,
    }
    path = tmp_path / "lib.jsonl"
    path.write_text(
        json.dumps(sig) + "\n" + json.dumps({**sig, "impl": "b", "static_power": 1e300})
    )
    line = _one_line_error(["frontier", str(path)], capsys)
    assert "lib.jsonl:2: static_power" in line and "≤ 1e+08" in line
    path.write_text(json.dumps(sig) + "\n" + json.dumps({**sig, "impl": "b", "time": 0.005}))
    code, err = _run(["frontier", str(path)], capsys)
    assert code == 0, err


def _measurement(times: list[float]) -> dict:
    return {
        "schema": "eopt.regions-report/1",
        "total_energy_j": 97.4,
        "total_time_s": 0.6,
        "regions": [],
        "samples": {"time_s": times, "power_w": [80.0, 450.0, 460.0, 80.0]},
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "--measurement", "{m}", "-o", "{out}/r.html"],
        ["trace", "--measurement", "{m}", "-o", "{out}/t.json"],
        ["attribute", "{m}"],
    ],
)
def test_backwards_sample_times_are_refused_not_dropped(tmp_path, capsys, argv):
    """A sample earlier than the one before it was silently dropped by attribute, and
    drawn as a loop by report and trace."""
    bad = tmp_path / "back.json"
    bad.write_text(json.dumps(_measurement([0.0, 0.4, 0.2, 0.6])))
    line = _one_line_error([a.format(m=bad, out=tmp_path) for a in argv], capsys)
    assert "back.json" in line and "in time order" in line and "0.2 s" in line
    good = tmp_path / "ok.json"
    good.write_text(json.dumps(_measurement([0.0, 0.2, 0.4, 0.6])))
    code, err = _run([a.format(m=good, out=tmp_path) for a in argv], capsys)
    assert code == 0, err


def test_a_tables_field_limit_does_not_depend_on_what_was_read_before(tmp_path):
    """Trace readers raise the csv module's process-wide field limit; a frontier table
    read after a trace must still refuse an oversized field (it passed before)."""
    import csv

    from eopt.report.inputs import ReportInputError, read_frontier_csv

    read_trace(_dashboard(tmp_path / "t"))
    before = csv.field_size_limit(10**9)  # what any earlier reader may have left
    try:
        table = tmp_path / "f.csv"
        table.write_text("makespan_s,energy_j\n1," + "9" * 200_000 + "\n")
        with pytest.raises(ReportInputError, match=r"f\.csv:2: a field is longer than 131072"):
            read_frontier_csv(table)
    finally:
        csv.field_size_limit(before)
