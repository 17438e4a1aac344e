"""Perfetto / Chrome trace export (the JSON "Trace Event Format").

Open the file at https://ui.perfetto.dev or ``chrome://tracing``. Layout:

- one process per plan device (``pid``), named after it (metadata event ``process_name``),
  with one thread (``tid`` 1, ``thread_name`` "elements") holding each element as a
  complete event (``"ph": "X"``, ``ts``/``dur`` in µs, args: type, κ, ω, energy, power);
- per device, counter tracks (``"ph": "C"``): the predicted power (element energy /
  duration while busy, the idle power s̄ in the gaps) and the SM clock;
- for a measured run, a process "measured" with its power samples as a counter track and
  timed regions as complete events when the measurement recorded their times.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from eopt.attribute.engine import Attribution
from eopt.model.fileformats import atomic_write_text, dumps_json
from eopt.model.schedule import Schedule
from eopt.model.trace import Trace
from eopt.report.inputs import Measurement

__all__ = ["predicted_power", "schedule_trace", "write_trace"]

_US = 1e6  # trace timestamps are in microseconds


def predicted_power(schedule: Schedule, device: str) -> list[tuple[float, float]]:
    """The device's predicted power as a step function: (time s, W) at every change.

    Busy: the element's mean power E/T; overlapping elements (a same-device parallel
    group) add their dynamic power onto one static draw. Idle: s̄. Setting-change costs
    (where a device pays them) have no place in time in a schedule and are left out, so
    the integral is the predicted energy less Σ changes·(ε − s̄·τ).
    """
    idle_w = schedule.device(device).idle_power_w
    edges = sorted(
        {0.0, schedule.makespan}
        | {e.start for e in schedule.elements_on(device)}
        | {e.end for e in schedule.elements_on(device)}
    )
    steps: list[tuple[float, float]] = []
    for t0, t1 in itertools.pairwise(edges):
        mid = (t0 + t1) / 2
        running = [e for e in schedule.elements_on(device) if e.start <= mid < e.end]
        if not running:
            power = idle_w
        else:
            # Static draw counted once; the dynamic parts of co-running elements add.
            first = running[0]
            power = first.energy / first.duration if first.duration > 0 else idle_w
            for other in running[1:]:
                if other.duration > 0:
                    dyn = other.dynamic_energy if other.dynamic_energy is not None else other.energy
                    power += dyn / other.duration
        if not steps or steps[-1][1] != power:
            steps.append((t0, power))
    if edges:
        steps.append((edges[-1], steps[-1][1] if steps else idle_w))
    return steps


def schedule_trace(
    schedule: Schedule | None = None,
    measurement: Measurement | None = None,
    recording: tuple[Sequence[Trace], Attribution] | None = None,
) -> dict[str, Any]:
    """Build the trace as a JSON-ready mapping.

    Args:
        schedule: A solved schedule.
        measurement: A measured run (``eopt measure --json``).
        recording: Recorded traces and their attribution (see
            :func:`eopt.report.recording.load_recording`): events as slices, every power
            series as a counter track.

    Raises:
        ValueError: when no input is given.
    """
    if schedule is None and measurement is None and recording is None:
        raise ValueError("a trace needs a schedule, a measurement or a recorded trace")
    events: list[dict[str, Any]] = []
    if schedule is not None:
        events.extend(_schedule_events(schedule))
    pid = len(schedule.devices) + 1 if schedule is not None else 1
    if measurement is not None:
        events.extend(_measurement_events(measurement, pid))
        pid += 1
    if recording is not None:
        from eopt.report.recording import recording_trace_events

        events.extend(recording_trace_events(recording[0], recording[1], pid))
    other: dict[str, Any] = {"generator": "eopt"}
    if schedule is not None:
        other.update(
            makespan_s=schedule.makespan,
            predicted_energy_j=schedule.energy,
            deadline_s=schedule.deadline,
        )
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_trace(
    path: str | Path,
    schedule: Schedule | None = None,
    measurement: Measurement | None = None,
    recording: tuple[Sequence[Trace], Attribution] | None = None,
) -> Path:
    """Write :func:`schedule_trace` to ``path`` as strict JSON (no NaN or Infinity,
    which Perfetto cannot load), atomically.

    Raises:
        ValueError: naming the field when a value is not finite.
    """
    data = schedule_trace(schedule, measurement, recording)
    return atomic_write_text(path, dumps_json(data, str(path)) + "\n")


def _meta(pid: int, tid: int | None, name: str, value: str, sort: int) -> Iterable[dict[str, Any]]:
    if tid is None:
        yield {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": value}}
        yield {
            "ph": "M",
            "pid": pid,
            "tid": 0,
            "name": "process_sort_index",
            "args": {"sort_index": sort},
        }
    else:
        yield {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": value}}


def _schedule_events(schedule: Schedule) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for index, info in enumerate(schedule.devices):
        pid = index + 1
        label = info.name if info.gpu is None else f"{info.name} (GPU {info.gpu})"
        events.extend(_meta(pid, None, "process_name", label, index))
        events.extend(_meta(pid, 1, "thread_name", "elements", 0))
        for e in schedule.elements_on(info.name):
            events.append(
                {
                    "ph": "X",
                    "name": e.name,
                    "cat": e.type,
                    "pid": pid,
                    "tid": 1,
                    "ts": e.start * _US,
                    "dur": e.duration * _US,
                    "args": {
                        "type": e.type,
                        "impl": e.impl,
                        "op_point": e.op_point.label(),
                        "energy_j": e.energy,
                        "power_w": e.energy / e.duration if e.duration > 0 else None,
                    },
                }
            )
        for t, watts in predicted_power(schedule, info.name):
            events.append(
                {
                    "ph": "C",
                    "name": "predicted power (W)",
                    "pid": pid,
                    "ts": t * _US,
                    "args": {"W": watts},
                }
            )
        last_clock: float | None = None
        for e in schedule.elements_on(info.name):
            clock = e.op_point.sm_clock_mhz
            if clock is not None and clock != last_clock:
                events.append(
                    {
                        "ph": "C",
                        "name": "SM clock (MHz)",
                        "pid": pid,
                        "ts": e.start * _US,
                        "args": {"MHz": clock},
                    }
                )
                last_clock = clock
    return events


def _measurement_events(m: Measurement, pid: int) -> list[dict[str, Any]]:
    events = list(_meta(pid, None, "process_name", f"measured {m.device}".strip(), pid))
    events.extend(_meta(pid, 1, "thread_name", "regions", 0))
    for t, watts in m.samples:
        events.append(
            {"ph": "C", "name": "power (W)", "pid": pid, "ts": t * _US, "args": {"W": watts}}
        )
    # ``calls``: an attribution's call list (`eopt attribute --calls -o`).
    timed = m.meta.get("events") or m.meta.get("region_events") or m.meta.get("calls") or []
    if isinstance(timed, list):
        for item in timed:
            if not isinstance(item, Mapping):
                continue
            start, end = item.get("start_s"), item.get("end_s")
            if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end >= start:
                events.append(
                    {
                        "ph": "X",
                        "name": str(item.get("name", "region")),
                        "cat": "region",
                        "pid": pid,
                        "tid": 1,
                        "ts": float(start) * _US,
                        "dur": (float(end) - float(start)) * _US,
                        "args": {k: v for k, v in item.items() if k not in ("start_s", "end_s")},
                    }
                )
    return events
