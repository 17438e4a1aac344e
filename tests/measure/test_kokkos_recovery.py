"""eopt reads what a dead program's connector left: its records after a SIGKILL, and a
trace with a few bytes that are not UTF-8 (as the 1.0 connector wrote them)."""

from __future__ import annotations

import importlib.util
import json
import signal
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.cli import attribute as attribute_cli
from eopt.cli import measure as measure_cli
from eopt.model.trace import TraceError, TraceWarning
from eopt.model.trace_io import read_events

_spec = importlib.util.spec_from_file_location(
    "_kokkos_programs", Path(__file__).with_name("test_kokkos_programs.py")
)
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)
connector, cases, reference = helpers.connector, helpers.cases, helpers.reference

STEPS = 1000
DIED_INSIDE_RUN = {
    ("run", "USER_REGION", None): 1,
    ("step", "USER_REGION", "run"): STEPS,
    ("work", "PARALLEL_FOR", "step"): STEPS,
}


@pytest.fixture
def killed(cases, connector, tmp_path) -> Path:
    """The trace folder of a program killed by SIGKILL inside its `run` region."""
    folder = tmp_path / "killed"
    proc = helpers.run_program(cases, connector, folder, "kill", str(STEPS))
    assert proc.returncode == -signal.SIGKILL
    return folder


def test_after_sigkill_the_events_come_from_the_records(killed) -> None:
    with pytest.warns(TraceWarning, match=r"killed by SIGKILL\?\); 2001 events .* 1 of them"):
        events = read_events(killed / "events.csv")
    assert helpers.structure(events) == DIED_INSIDE_RUN
    assert len({e.id for e in events}) == len(events)
    run = next(e for e in events if e.name == "run")
    assert run.where.endswith("open event 1")
    assert run.end_ns >= max(e.end_ns for e in events if e is not run)


def test_a_records_file_cut_anywhere_reads_up_to_its_last_whole_block(
    cases, connector, tmp_path
) -> None:
    """20 000 steps: 40 000 records, in blocks of at most one ring (16 384) each, then the
    stack. Cut short anywhere (a disk that filled up), the file reads up to the cut."""
    folder = tmp_path / "t"
    proc = helpers.run_program(cases, connector, folder, "kill", "20000")
    assert proc.returncode == -signal.SIGKILL
    records = folder / "events.records"
    whole = records.read_bytes()
    counts = []
    for cut in (64, 100, len(whole) // 2, len(whole) - 1, len(whole)):
        records.write_bytes(whole[:cut])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TraceWarning)
            counts.append(len(read_events(folder / "events.csv")))
    assert counts[:2] == [0, 0]
    # the last stack is cut, but an earlier one (written with earlier records) has `run`
    assert 0 < counts[2] < counts[3] == counts[4] == 40_001


def test_eopt_measure_attributes_a_program_killed_by_sigkill(
    cases, tmp_path, monkeypatch, wall_gpu
) -> None:
    monkeypatch.setattr(
        measure_cli, "open_measure_gpus", lambda selection, backend: [wall_gpu(100.0)]
    )
    monkeypatch.setattr(measure_cli, "open_rapl_source", lambda backend: None)
    folder = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        result = CliRunner().invoke(
            measure_cli.command,
            ["--kokkos", "--trace-dir", str(folder), "--json", "--", str(cases), "kill", "1000"],
        )
    assert result.exit_code == -signal.SIGKILL, result.output
    assert "built with Kokkos" not in result.output
    regions = {r["name"]: r for r in json.loads(result.stdout)["regions"]}
    assert regions["step"]["calls"] == STEPS
    assert regions["run"]["inclusive_energy_j"] == pytest.approx(
        100.0 * regions["run"]["time_s"], rel=1e-3
    )


def test_records_that_hold_no_more_than_events_csv_are_left_alone(
    cases, connector, tmp_path
) -> None:
    """The program's own handler took over and called _exit: events.csv (as of the
    signal) and the records hold the same events; events.csv is read, without a word."""
    folder = tmp_path / "t"
    proc = helpers.run_program(cases, connector, folder, "handled_exit", str(STEPS))
    assert proc.returncode == 7 and (folder / "events.records").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        events = read_events(folder / "events.csv")
    assert helpers.structure(events) == DIED_INSIDE_RUN
    assert all(e.where.startswith(str(folder / "events.csv")) for e in events)


def test_a_trace_with_a_few_bytes_that_are_not_utf8_is_read_saying_where(
    cases, reference, tmp_path
) -> None:
    """The 1.0 connector wrote names byte for byte; eopt now reads such a trace, each bad
    sequence as U+FFFD, and names the first place."""
    folder = tmp_path / "old"
    assert helpers.run_program(cases, reference, folder, "names").returncode == 0
    raw = (folder / "events.csv").read_bytes()
    with pytest.raises(UnicodeDecodeError) as strict:
        raw.decode("utf-8")
    first = strict.value.start
    line = raw.count(b"\n", 0, first) + 1
    with pytest.warns(TraceWarning, match=rf"events\.csv:{line}: \d+ byte\(s\).*byte {first}\)"):
        events = read_events(folder / "events.csv")
    lines = raw.split(b"\n")[1:-1]
    assert [e.name for e in events] == [
        ln.split(b",")[2].decode("utf-8", "replace") for ln in lines
    ]
    t0, t1 = min(e.start_ns for e in events), max(e.end_ns for e in events)
    power = tmp_path / "power.csv"
    power.write_text(f"time_ns,power_w\n{t0 - 10**9},100\n{t1 + 10**9},100\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        out = CliRunner().invoke(
            attribute_cli.command, [str(power), "--events", str(folder / "events.csv")]
        )
    assert out.exit_code == 0, out.output
    assert "not UTF-8" not in out.output


def test_a_binary_file_is_still_refused(tmp_path) -> None:
    events = tmp_path / "events.csv"
    events.write_bytes(helpers.EVENTS_COLUMNS.encode() + b"\n" + bytes(range(128, 256)) * 40)
    with pytest.raises(TraceError, match=r"events\.csv:2: not UTF-8 text"):
        read_events(events)
