"""`eopt measure --trace-dir` and `--repeat`: eopt's recordings as traces and run sets."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from click.testing import CliRunner

from eopt.attribute.engine import attribute
from eopt.cli import compare as compare_cli
from eopt.cli import measure as measure_cli
from eopt.cli import report as report_cli
from eopt.cli import trace as trace_cli
from eopt.model.trace_io import read_runs, read_trace
from eopt.runs.runset import phase_delay_s

CHILD = textwrap.dedent(
    """
    import time
    from eopt.measure import regions

    with regions.region("train"):
        with regions.region("fwd"):
            time.sleep(0.12)
        time.sleep(0.04)
    """
)


def test_trace_dir_holds_the_same_run_as_the_json(tmp_path, monkeypatch, wall_gpu) -> None:
    monkeypatch.setattr(measure_cli, "open_measure_device", lambda backend, index: wall_gpu(150.0))
    out, folder = tmp_path / "run.json", tmp_path / "run-trace"
    result = CliRunner().invoke(
        measure_cli.command,
        ["-o", str(out), "--trace-dir", str(folder), "--", sys.executable, "-c", CHILD],
    )
    assert result.exit_code == 0, result.output
    measured = json.loads(out.read_text())
    trace = read_trace(folder)
    assert {e.name for e in trace.events} == {"train", "fwd"}
    (fwd,) = [e for e in trace.events if e.name == "fwd"]
    (train,) = [e for e in trace.events if e.name == "train"]
    assert fwd.parent_id == train.id and fwd.category == "USER_REGION"
    # Epoch time: the run started a moment ago, not at 0.
    assert abs(trace.start_ns - measured["start_unix_ns"]) < 1_000_000
    att = attribute(trace)
    assert att.total_energy_j == pytest.approx(measured["total_energy_j"], rel=1e-3)
    assert att.region("fwd").inclusive_energy_j == pytest.approx(
        150.0 * att.region("fwd").time_s, rel=1e-3
    )
    assert trace.metadata["version"] == 1 and trace.metadata["recorded_by"] == "eopt measure"
    # The measurement JSON is a trace too.
    again = attribute(read_trace(out))
    assert again.region("train").inclusive_energy_j == pytest.approx(
        att.region("train").inclusive_energy_j, rel=1e-3
    )


def test_phase_delays_wrap_at_the_sensor_period() -> None:
    delays = [phase_delay_s(k, 30.0, 0.1) for k in range(5)]
    assert delays == pytest.approx([0.0, 0.03, 0.06, 0.09, 0.02])
    assert phase_delay_s(3, 0.0, 0.1) == 0.0


def record(tmp_path, monkeypatch, wall_gpu, name: str, watts: float, *extra: str):
    monkeypatch.setattr(measure_cli, "open_measure_device", lambda backend, index: wall_gpu(watts))
    folder = tmp_path / name
    result = CliRunner().invoke(
        measure_cli.command,
        ["--repeat", "3", "-o", str(folder), *extra, "--", sys.executable, "-c", CHILD],
    )
    assert result.exit_code == 0, result.output
    return folder


def test_repeat_writes_a_run_set_that_compare_reads(tmp_path, monkeypatch, wall_gpu) -> None:
    a = record(tmp_path, monkeypatch, wall_gpu, "a", 150.0, "--shift", "30", "--cooldown", "0.01")
    b = record(tmp_path, monkeypatch, wall_gpu, "b", 100.0)
    index = json.loads((a / "index.json").read_text())
    assert index["schema"] == "eopt.runset/1"
    assert [r["index"] for r in index["runs"]] == [1, 2, 3]
    assert [r["delay_s"] for r in index["runs"]] == pytest.approx([0.0, 0.03, 0.06])
    runs = read_runs(a)
    assert len(runs) == 3
    assert [t.start_ns for t in runs] == sorted(t.start_ns for t in runs)
    result = CliRunner().invoke(compare_cli.command, [str(a), str(b), "--region", "fwd", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    # Same work at 100 W instead of 150 W: a third less power and energy, no time saved.
    assert data["reduction"]["power"]["value"] == pytest.approx(1 / 3, abs=0.01)
    assert data["reduction"]["energy"]["value"] == pytest.approx(1 / 3, abs=0.05)
    assert data["a"]["n"] == data["b"]["n"] == 3


def test_repeat_refuses_a_folder_in_use_and_odd_values(tmp_path, monkeypatch, wall_gpu) -> None:
    folder = record(tmp_path, monkeypatch, wall_gpu, "a", 150.0)
    again = CliRunner().invoke(
        measure_cli.command, ["--repeat", "2", "-o", str(folder), "--", "true"]
    )
    assert again.exit_code != 0 and "not empty" in again.output
    no_out = CliRunner().invoke(measure_cli.command, ["--repeat", "2", "--", "true"])
    assert no_out.exit_code != 0 and "-o RUNSET" in no_out.output
    shift = CliRunner().invoke(measure_cli.command, ["--shift", "5", "--", "true"])
    assert shift.exit_code != 0 and "--repeat" in shift.output
    bad = CliRunner().invoke(
        measure_cli.command, ["--repeat", "2", "--shift", "nan", "-o", "x", "--", "true"]
    )
    assert bad.exit_code != 0


def test_report_and_perfetto_accept_a_trace_folder(tmp_path, data_file) -> None:
    run = data_file("kokkos_dbscan_h100/fdbscan") / "illyad-2495425"
    html, perfetto = tmp_path / "r.html", tmp_path / "p.json"
    result = CliRunner().invoke(
        report_cli.command,
        ["--measurement", str(run), "-o", str(html), "--perfetto", str(perfetto)],
    )
    assert result.exit_code == 0, result.output
    page = html.read_text()
    assert "DBSCANCalculation" in page and "exclusive" in page and "<svg" in page
    events = json.loads(perfetto.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    counters = [e for e in events if e["ph"] == "C"]
    assert "DBSCANCalculation" in {e["name"] for e in slices}
    assert {e["name"] for e in counters} == {"GPU 0 power (W)"}
    assert len(counters) == len(read_trace(run).series[0].times_ns)
    out = tmp_path / "t.json"
    result = CliRunner().invoke(trace_cli.command, [str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["traceEvents"] == events
