"""When a Kokkos program dies, the connector keeps its events and says what happened.

The test program (tests/data/kokkos/cases.cpp) runs ``run { 1000 × step { work } }`` and
ends inside ``run``: by a crash, a signal, an exit, or its own handler. What it recorded
is known from its structure: 1000 steps, 1000 kernels, and ``run`` still open.
"""

from __future__ import annotations

import importlib.util
import json
import re
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.cli import measure as measure_cli
from eopt.model.trace_io import read_events

_spec = importlib.util.spec_from_file_location(
    "_kokkos_programs", Path(__file__).with_name("test_kokkos_programs.py")
)
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)
connector, cases = helpers.connector, helpers.cases  # the fixtures, built once per session

STEPS = 1000


def died_inside_run(steps: int = STEPS) -> dict:
    """What the program recorded when it ended inside ``run``."""
    return {
        ("run", "USER_REGION", None): 1,
        ("step", "USER_REGION", "run"): steps,
        ("work", "PARALLEL_FOR", "step"): steps,
    }


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize(
    "mode,sig", [("abort", "SIGABRT"), ("segv", "SIGSEGV"), ("term", "SIGTERM")]
)
def test_a_program_killed_by_a_signal_leaves_its_events(
    mode, sig, cases, connector, tmp_path
) -> None:
    folder = tmp_path / "t"
    proc = helpers.run_program(cases, connector, folder, mode, str(STEPS))
    # the default action ran after the connector: the exit status is the signal's
    assert proc.returncode == -getattr(signal, sig)
    events = read_events(folder / "events.csv")
    assert helpers.structure(events) == died_inside_run()
    run = next(e for e in events if e.name == "run")
    assert run.end_ns >= max(e.end_ns for e in events)  # still open: ended at the signal
    meta = json.loads((folder / "metadata.json").read_text())
    kept = 2 * STEPS + 1
    assert meta["ended"] == "killed" and meta["signal"] == sig
    assert meta["message"] == (
        f"the program was killed by {sig}; {kept} events kept (1 still open, ended at the signal)"
    )
    assert meta["counts"]["events"] == kept and meta["counts"]["unclosed"] == 1
    assert f"the program was killed by {sig}; {kept} events kept in {folder}/events.csv" in (
        proc.stderr
    )
    assert files(folder) == ["events.csv", "metadata.json"]  # the records are converted


def test_an_exit_without_kokkos_finalize_keeps_the_events(cases, connector, tmp_path) -> None:
    proc = helpers.run_program(cases, connector, tmp_path / "t", "exit", str(STEPS))
    assert proc.returncode == 3
    events = read_events(tmp_path / "t" / "events.csv")
    assert helpers.structure(events) == died_inside_run()
    meta = json.loads((tmp_path / "t" / "metadata.json").read_text())
    assert meta["ended"] == "exit" and meta["counts"]["unclosed"] == 1
    assert meta["message"].startswith("the program exited without calling Kokkos::finalize")


def test_the_programs_own_handler_still_runs_and_the_program_goes_on(
    cases, connector, tmp_path
) -> None:
    """The program set its SIGTERM handler before Kokkos started: the connector chains to
    it, and the program, having handled the signal, finishes normally."""
    proc = helpers.run_program(cases, connector, tmp_path / "t", "handled", str(STEPS))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "handled"
    events = read_events(tmp_path / "t" / "events.csv")
    assert helpers.structure(events) == {**died_inside_run(), ("after", "USER_REGION", None): 1}
    meta = json.loads((tmp_path / "t" / "metadata.json").read_text())
    assert meta["ended"] == "finalize" and meta["counts"]["unclosed"] == 0


def test_a_handler_that_exits_leaves_the_trace_as_of_the_signal(cases, connector, tmp_path) -> None:
    folder = tmp_path / "t"
    proc = helpers.run_program(cases, connector, folder, "handled_exit", str(STEPS))
    assert proc.returncode == 7  # the program's handler's _exit(7)
    assert proc.stdout.strip() == "handler ran"
    assert helpers.structure(read_events(folder / "events.csv")) == died_inside_run()
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["ended"] == "signal handled by the program" and meta["signal"] == "SIGTERM"
    assert meta["message"].startswith(
        f"the program received SIGTERM and its own handler took over; {2 * STEPS + 1} events"
    )
    # _exit skipped the end: the records stay too, for eopt to read if they hold more
    assert files(folder) == ["events.csv", "events.records", "metadata.json"]


def test_sigkill_leaves_the_records_in_the_file(cases, connector, tmp_path) -> None:
    """Nothing runs on SIGKILL: events.csv has its header only, and the records file holds
    the events, written by the connector's flusher within 10 ms of each (the program
    waits 50 ms before the kill). Reading them is the reader's part."""
    folder = tmp_path / "t"
    proc = helpers.run_program(cases, connector, folder, "kill", str(STEPS))
    assert proc.returncode == -signal.SIGKILL
    assert (folder / "events.csv").read_text() == helpers.EVENTS_COLUMNS + "\n"
    records = (folder / "events.records").read_bytes()
    assert records.startswith(b"EOPTKKR1")
    # every closed event is a 40-byte record of the file, and each name is in it once
    assert len(records) > 2 * STEPS * 40
    for name in (b"step", b"work", b"run"):
        assert records.count(name.ljust(8, b"\0")) == 1


def test_eopt_measure_keeps_a_crashed_programs_trace(
    cases, tmp_path, monkeypatch, wall_gpu
) -> None:
    """`eopt measure --kokkos` on a program that aborts: the trace holds its events, the
    energy is attributed, and the program is not blamed for a missing Kokkos."""
    monkeypatch.setattr(
        measure_cli, "open_measure_gpus", lambda selection, backend: [wall_gpu(200.0)]
    )
    monkeypatch.setattr(measure_cli, "open_rapl_source", lambda backend: None)
    folder = tmp_path / "run"
    result = CliRunner().invoke(
        measure_cli.command,
        ["--kokkos", "--trace-dir", str(folder), "--json", "--", str(cases), "abort", "1000"],
    )
    assert result.exit_code == -signal.SIGABRT, result.output
    assert "built with Kokkos" not in result.output
    # The user is told how the program ended and what of its trace was kept.
    assert re.search(r"killed by SIGABRT; \d+ events kept", result.stderr), result.stderr
    data = json.loads(result.stdout)
    regions = {r["name"]: r for r in data["regions"]}
    assert regions["step"]["calls"] == STEPS and regions["work"]["calls"] == STEPS
    assert regions["run"]["inclusive_energy_j"] == pytest.approx(
        200.0 * regions["run"]["time_s"], rel=1e-3
    )
    assert data["returncode"] == -signal.SIGABRT
