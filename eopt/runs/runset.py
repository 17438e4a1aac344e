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
        on_run: Called after each run (progress).
        sleep: How to wait (the wall clock's by default).

    Returns:
        The runs, in order. ``index.json`` is rewritten after every run, so an
        interrupted set keeps the runs it finished.

    Raises:
        RunSetError: for bad values or a folder that is not empty.
    """
    _check(n, shift_ms, cooldown_s)
    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise RunSetError(f"{out}: exists and is not a folder; name a folder for the run set")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise RunSetError(f"{out}: not empty; choose a new folder or pass --force to overwrite")
    out.mkdir(parents=True, exist_ok=True)
    runs: list[RecordedRun] = []
    for k in range(n):
        delay = phase_delay_s(k, shift_ms, period_s)
        sleep(delay)
        name = f"run_{k + 1:03d}"
        trace_dir = out / name
        if trace_dir.exists():  # --force over an older set: this run's folder starts empty
            shutil.rmtree(trace_dir)
        trace_dir.mkdir()
        run = RecordedRun(k + 1, name, record(trace_dir), delay)
        runs.append(run)
        _write_index(out, command, runs, n, shift_ms, cooldown_s, period_s)
        if on_run is not None:
            on_run(run)
        if cooldown_s > 0 and k < n - 1:
            sleep(cooldown_s)
    return runs


def _write_index(
    out: Path,
    command: Sequence[str],
    runs: Sequence[RecordedRun],
    n: int,
    shift_ms: float,
    cooldown_s: float,
    period_s: float,
) -> None:
    data: dict[str, Any] = {
        "schema": RUNSET_SCHEMA,
        "command": list(command),
        "planned_runs": n,
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
