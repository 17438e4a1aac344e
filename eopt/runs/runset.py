"""Repeated runs of one command, each recorded as its own trace (``eopt measure --repeat``).

A run set is a folder::

    RUNSET/
      index.json          eopt.runset/1: the command, the protocol, one entry per run
      run_001/            a trace in the dashboard layout (events.csv, power_samples.csv,
      run_002/            metadata.json)
      …

``eopt compare`` and :func:`eopt.model.trace_io.read_runs` read it.

Phase shifts: a power sensor that refreshes every period P and averages only part of each
period sees a short region at the same phase on every run, so repeating a run does not
help by itself. With ``shift_ms``, the start of run k is delayed by (k · shift) mod P, so
the runs sample the region at different phases (the field note's 5-ms shifts).
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eopt.devices.base import Device
from eopt.measure.command import measure_command
from eopt.measure.meter import MeterMethod
from eopt.measure.session import RunOutcome
from eopt.model.fileformats import atomic_write_text, dumps_json, json_ready
from eopt.model.trace_io import write_dashboard

__all__ = [
    "RUNSET_SCHEMA",
    "RecordedRun",
    "RunOutcome",
    "RunRecorder",
    "RunSetError",
    "gpu_recorder",
    "phase_delay_s",
    "record_runs",
]

RUNSET_SCHEMA = "eopt.runset/1"
#: Most runs one run set may hold (a typo such as --repeat 100000 should not start).
MAX_RUNS = 10_000


class RunSetError(ValueError):
    """Bad protocol values or an output folder that cannot be used."""


def phase_delay_s(k: int, shift_ms: float, period_s: float) -> float:
    """The delay before run ``k`` (0-based): (k · shift) mod the sensor period, in s."""
    if shift_ms <= 0:
        return 0.0
    # In integer nanoseconds, so that k shifts that add up to whole periods give exactly 0.
    step_ns, period_ns = round(shift_ms * 1e6), round(period_s * 1e9)
    return ((k * step_ns) % period_ns) * 1e-9


#: Records one run of the command into the given (new, empty) trace folder.
RunRecorder = Callable[[Path], RunOutcome]


@dataclass(frozen=True)
class RecordedRun:
    """One run of a run set.

    Attributes:
        index: 1-based position in the set.
        trace: Its trace folder's name inside the set.
        outcome: What was recorded.
        delay_s: The phase delay before it started, in s.
    """

    index: int
    trace: str
    outcome: RunOutcome
    delay_s: float


def gpu_recorder(
    command: Sequence[str], device: Device, method: MeterMethod = "auto"
) -> RunRecorder:
    """Runs recorded with one GPU's meter and the Python regions (``eopt measure``)."""

    def record(folder: Path) -> RunOutcome:
        result = measure_command(command, device, method=method)
        write_dashboard(result.to_trace(), folder)
        rep = result.report
        return RunOutcome(
            result.returncode, result.start_unix_ns, rep.total_time_s, rep.total_energy_j
        )

    return record


def _check(n: int, shift_ms: float, cooldown_s: float) -> None:
    if not 1 <= n <= MAX_RUNS:
        raise RunSetError(f"--repeat {n}: give between 1 and {MAX_RUNS} runs")
    if not math.isfinite(shift_ms) or shift_ms < 0:
        raise RunSetError(f"--shift {shift_ms}: give a shift ≥ 0 ms")
    if not math.isfinite(cooldown_s) or cooldown_s < 0:
        raise RunSetError(f"--cooldown {cooldown_s}: give a cooldown ≥ 0 s")


def record_runs(
    record: RunRecorder,
    folder: str | os.PathLike[str],
    n: int,
    *,
    command: Sequence[str],
    period_s: float,
    shift_ms: float = 0.0,
    cooldown_s: float = 0.0,
    force: bool = False,
    resume: bool = False,
    on_run: Callable[[RecordedRun], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[RecordedRun]:
    """Record ``n`` runs, each as a trace in ``folder`` (a run set).

    Args:
        record: Records one run into a trace folder (:func:`gpu_recorder`, or
            :func:`eopt.measure.session.session_recorder` for the Kokkos connector, several
            GPUs and RAPL).
        folder: The run set's folder (created; must be empty unless ``force``).
        n: Number of runs.
        command: The command (for the index).
        period_s: The power sensor's update period, in s (what ``shift_ms`` wraps at).
        shift_ms: Phase shift per run, in ms (see the module docstring).
        cooldown_s: Idle time after each run, in s, so runs start from a similar state.
        force: Write into a folder that already holds a run set (its index is replaced).
        resume: Continue the run set in ``folder``: keep its finished runs, redo the run
            that was in progress, record the rest up to ``n``.
        on_run: Called after each run (progress), finished runs kept by ``resume`` too.
        sleep: How to wait (the wall clock's by default).

    Returns:
        The runs, in order. ``index.json`` is written before the first run and after
        every run, with the set's ``state`` (``recording``, ``interrupted``,
        ``complete``), so an interrupted set keeps the runs it finished and says so.
        Ctrl-C (KeyboardInterrupt) marks the set interrupted and is raised again.

    Raises:
        RunSetError: for bad values, a folder that is not empty (without ``force`` or
            ``resume``), or a run set to resume that another command recorded.
    """
    _check(n, shift_ms, cooldown_s)
    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise RunSetError(f"{out}: exists and is not a folder; name a folder for the run set")
    runs: list[RecordedRun] = []
    if resume and (out / "index.json").exists():
        runs = _finished_runs(out, command)
    elif out.is_dir() and any(out.iterdir()) and not force:
        raise RunSetError(
            f"{out}: not empty; pass --resume to continue its run set, --force to start it "
            "over, or choose a new folder"
        )
    out.mkdir(parents=True, exist_ok=True)
    index = functools.partial(_write_index, out, command, n=n, shift_ms=shift_ms,
                              cooldown_s=cooldown_s, period_s=period_s)  # fmt: skip
    index(runs, state="recording")
    for run in runs:
        if on_run is not None:
            on_run(run)
    try:
        for k in range(len(runs), n):
            delay = phase_delay_s(k, shift_ms, period_s)
            sleep(delay)
            name = f"run_{k + 1:03d}"
            trace_dir = out / name
            if trace_dir.exists():  # an older set's, or the run a kill cut short
                shutil.rmtree(trace_dir)
            trace_dir.mkdir()
            run = RecordedRun(k + 1, name, record(trace_dir), delay)
            runs.append(run)
            index(runs, state="recording" if k < n - 1 else "complete")
            if on_run is not None:
                on_run(run)
            if cooldown_s > 0 and k < n - 1:
                sleep(cooldown_s)
    except KeyboardInterrupt:
        index(runs, state="interrupted")
        raise
    if len(runs) >= n:
        index(runs, state="complete")
    return runs


def _finished_runs(out: Path, command: Sequence[str]) -> list[RecordedRun]:
    """The runs an earlier, interrupted ``record_runs`` into ``out`` finished."""
    from eopt.model.fileformats import Where, parse_json, read_text

    at = Where(str(out / "index.json"), error=RunSetError)
    data = parse_json(read_text(out / "index.json", at, what="a run-set index"), at)
    if not isinstance(data, dict) or data.get("schema") != RUNSET_SCHEMA:
        at.fail(f"not an {RUNSET_SCHEMA} index; --resume continues run sets eopt recorded")
    if list(data.get("command", [])) != list(command):
        at.fail(
            f"recorded for {' '.join(map(str, data.get('command', [])))!r}, not this command; "
            "resume it with the same command, or record into another folder"
        )
    runs = []
    for i, entry in enumerate(data.get("runs", [])):
        try:
            outcome = RunOutcome(
                int(entry["returncode"]),
                int(entry["start_unix_ns"]),
                float(entry["time_s"]),
                None if entry.get("energy_j") is None else float(entry["energy_j"]),
            )
            run = RecordedRun(
                int(entry["index"]), str(entry["trace"]), outcome, float(entry["delay_s"])
            )
        except (KeyError, TypeError, ValueError):
            (at / "runs" / i).fail("a run entry without index, trace, times and status")
        if run.index != len(runs) + 1 or not (out / run.trace).is_dir():
            break  # the rest is redone
        runs.append(run)
    return runs


def _write_index(
    out: Path,
    command: Sequence[str],
    runs: Sequence[RecordedRun],
    *,
    n: int,
    shift_ms: float,
    cooldown_s: float,
    period_s: float,
    state: str,
) -> None:
    data: dict[str, Any] = {
        "schema": RUNSET_SCHEMA,
        "command": list(command),
        "planned_runs": n,
        "state": state,
        "shift_ms": shift_ms,
        "cooldown_s": cooldown_s,
        "sensor_period_s": period_s,
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": [
            {
                "index": r.index,
                "trace": r.trace,
                "start_unix_ns": r.outcome.start_unix_ns,
                "delay_s": r.delay_s,
                "returncode": r.outcome.returncode,
                "energy_j": r.outcome.energy_j,
                "time_s": r.outcome.time_s,
            }
            for r in runs
        ],
    }
    atomic_write_text(out / "index.json", dumps_json(json_ready(data), str(out), indent=2) + "\n")
