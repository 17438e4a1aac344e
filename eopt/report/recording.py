"""Recorded traces in the report and the Perfetto export.

A trace folder (or any layout :mod:`eopt.model.trace_io` reads) becomes, for the HTML
report, a :class:`~eopt.report.inputs.Measurement` with inclusive and exclusive energy per
region; for Perfetto, one process per trace (per MPI rank) with its events as nested
slices and one counter track per power series.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from eopt.attribute.engine import Attribution, attribute_all
from eopt.model.trace import Trace
from eopt.model.trace_io import PowerCsvOptions, read_traces
from eopt.report.inputs import Measurement, Region

__all__ = ["load_recording", "measurement_from_attribution", "recording_trace_events"]

_US = 1e6


def load_recording(
    path: str | os.PathLike[str], options: PowerCsvOptions | None = None
) -> tuple[list[Trace], Attribution]:
    """Read every trace at ``path`` and attribute it (summed over MPI ranks).

    Args:
        path: A trace folder, a connector run, or a power CSV.
        options: How to read another tool's power CSV (columns, units, its events
            file), as ``eopt attribute`` reads it; None: found automatically.

    Raises:
        eopt.model.trace.TraceError: naming the file and line.
    """
    traces = read_traces(path, options) if options is not None else read_traces(path)
    return traces, attribute_all(traces, source=str(path))


def measurement_from_attribution(att: Attribution, trace: Trace | None = None) -> Measurement:
    """The report's view of an attributed trace: regions, outside energy, GPU power and
    the region calls (user regions; kernels only in a trace without user regions).

    Unknown energies (a region outside the power trace) stay NaN, and the report shows
    them as unknown. The calls and samples are those of ``trace`` (the first rank of a
    multi-rank run), both timed from that trace's start.
    """
    regions = tuple(
        Region(
            name=r.name,
            energy_j=math.nan if r.inclusive_energy_j is None else r.inclusive_energy_j,
            time_s=r.time_s,
            calls=r.calls,
            depth=r.depth,
            exclusive_energy_j=r.exclusive_energy_j,
        )
        for r in att.regions
    )
    samples: tuple[tuple[float, float], ...] = ()
    device = att.source
    if trace is not None and trace.series:
        first = trace.series_for("GPU") or trace.series
        s = first[0]
        origin = trace.start_ns
        samples = tuple(
            ((int(t) - origin) * 1e-9, float(p)) for t, p in zip(s.times_ns, s.power_w, strict=True)
        )
        device = f"{att.source} ({s.label})"
    # The calls of the trace whose power is shown: a sum over ranks keeps them per rank.
    own = att.ranks[0].calls if att.ranks else att.calls
    user = [c for c in own if c.event.category == "USER_REGION"]
    calls = tuple((c.event.name, c.start_s, c.end_s) for c in (user or own))
    return Measurement(
        total_energy_j=att.total_energy_j,
        total_time_s=att.total_time_s,
        regions=regions,
        outside_energy_j=att.outside_energy_j,
        samples=samples,
        device=device,
        meta={"warnings": list(att.warnings)},
        calls=calls,
    )


def recording_trace_events(
    traces: Sequence[Trace], att: Attribution, first_pid: int = 1
) -> list[dict[str, Any]]:
    """Perfetto events: per trace a process, its events as slices, power as counters."""
    parts = att.ranks or (att,)
    origin = min(t.start_ns for t in traces)
    out: list[dict[str, Any]] = []
    for k, (trace, part) in enumerate(zip(traces, parts, strict=False)):
        pid = first_pid + k
        label = f"rank {trace.rank}" if trace.rank is not None else (trace.source or "recorded")
        out.append(
            {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": label}}
        )
        out.append(
            {"ph": "M", "pid": pid, "tid": 1, "name": "thread_name", "args": {"name": "events"}}
        )
        shift = (trace.start_ns - origin) * 1e-9
        for c in part.calls:
            out.append(
                {
                    "ph": "X",
                    "name": c.event.name,
                    "cat": c.event.category,
                    "pid": pid,
                    "tid": 1,
                    "ts": (c.start_s + shift) * _US,
                    "dur": (c.end_s - c.start_s) * _US,
                    "args": {
                        "inclusive_energy_j": c.inclusive_energy_j,
                        "exclusive_energy_j": c.exclusive_energy_j,
                    },
                }
            )
        for s in trace.series:
            name = f"{s.label} power (W)"
            for t, p in zip(s.times_ns, s.power_w, strict=True):
                out.append(
                    {
                        "ph": "C",
                        "name": name,
                        "pid": pid,
                        "ts": (int(t) - origin) * 1e-9 * _US,
                        "args": {"W": float(p)},
                    }
                )
    return out
