"""The runs of one variant, as the numbers a comparison needs (``eopt compare``).

Each run is read as a trace (:func:`eopt.model.trace_io.read_runs`), attributed with the
one engine (:func:`eopt.attribute.engine.attribute`), and reduced to its time and
energy: of a named region (summed over the region's calls) or of the whole run.
"""

from __future__ import annotations

import os
from pathlib import Path

from eopt.attribute.engine import EdgeRule, attribute, window_energy
from eopt.model.trace import Trace, TraceError
from eopt.model.trace_io import read_runs
from eopt.runs.compare import RunValues, outside_shares

__all__ = ["load_variant", "run_values"]


def run_values(
    trace: Trace,
    region: str | None = None,
    *,
    domain: str | None = None,
    edges: EdgeRule = "interpolate",
) -> RunValues:
    """One run's time and energy, of ``region`` or of the whole run.

    Args:
        trace: The run.
        region: A region (or kernel) name; None for the whole run.
        domain: Only this power domain (all series summed when None).
        edges: ``interpolate`` (power interpolated at the region's edges, the attribution
            rule) or ``inside`` (only sample intervals wholly inside each call: the field
            note's convention).

    Raises:
        TraceError: when the run lacks the region, or its energy is unknown (the region
            reaches outside the power trace), naming the run.
    """
    att = attribute(trace, domain=domain, calls=True)
    shares = outside_shares(att)
    label = Path(trace.source).name or trace.source
    if region is None:
        return RunValues(
            label,
            trace.start_ns,
            att.total_time_s,
            att.total_energy_j,
            shares["events"],
            shares["regions"],
        )
    try:
        r = att.region(region)
    except KeyError as exc:
        raise TraceError(str(exc.args[0])) from None
    if edges == "inside":
        energy = 0.0
        for e in trace.events:
            if e.name != region:
                continue
            for s in trace.series_for(domain):
                part = window_energy(s, e.start_ns, e.end_ns, "inside")
                if part is None:
                    energy = None
                    break
                energy += part
            if energy is None:
                break
    else:
        energy = r.inclusive_energy_j
    if energy is None:
        raise TraceError(
            f"{trace.source}: region {region!r} reaches outside the power trace, so its energy "
            "is unknown; compare another region or drop this run explicitly"
        )
    return RunValues(label, trace.start_ns, r.time_s, energy, shares["events"], shares["regions"])


def load_variant(
    path: str | os.PathLike[str],
    region: str | None = None,
    *,
    domain: str | None = None,
    edges: EdgeRule = "interpolate",
) -> list[RunValues]:
    """Every run in the folder ``path`` (a run set or a folder of runs), in run order.

    Raises:
        TraceError: naming the folder or the run that cannot be used.
    """
    return [run_values(t, region, domain=domain, edges=edges) for t in read_runs(path)]
