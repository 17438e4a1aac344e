"""Charge a trace's energy to its events: inclusive, exclusive, outside, per power series.

The one attribution engine of eopt: every trace, whatever its source, goes through
:func:`attribute` — a recorded trace folder (``eopt attribute``), a power CSV, and the
regions of ``eopt measure`` (:func:`eopt.measure.regions.attribute_regions` turns the
meter's readings and the region calls into a trace and attributes it here).

Integration:
    Each power series (one per (domain, device)) is integrated on its own with the
    trapezoid rule over its samples, with the power interpolated linearly at every event
    edge (:class:`eopt.attribute.integral.EnergyCurve`, the one power integrator). The
    energy of ``[a, b]`` is exactly the area under the piecewise-linear power curve
    through the samples.

Sharing rule (the one overlap rule of eopt):
    At each instant, the *leaves* are the active events with no active child. The power
    at that instant is split equally among the leaves. An event's exclusive energy is what
    it receives as a leaf; its inclusive energy is what it and its descendants receive.
    So nested events are charged once (inclusive = exclusive + the children's inclusive),
    events that overlap without nesting (two streams, two threads, two processes) share
    the overlap, and conservation holds exactly: the exclusive energies plus the energy
    outside every event equal the total. This is the rule of energy-dashboard-for-kokkos.
    Nesting is what the events' ``parent_id`` says, never inferred here: an event of one
    thread that happens to lie inside another thread's event in time is its sibling, not
    its child, when the trace says so.
    The rule is computed column-wise (:mod:`eopt.attribute.sharing`), in time and memory
    linear in the number of events whatever the nesting depth, and summed per region
    name in :mod:`eopt.attribute.regions`.

Streaming:
    A large trace folder (an ``events.csv`` above :data:`STREAM_BYTES`) is attributed by
    :func:`attribute_streamed` when no per-call list is asked for: its events are read a
    block at a time and charged window by window (:mod:`eopt.attribute.stream`), with
    the same numbers in memory that does not grow with the number of events. A file
    whose events are not in start order (the Kokkos connector writes them as they
    close), or that holds a fault, is read whole instead.

Missing data:
    A call that reaches outside a series' samples has unknown energy (None, never 0), and
    its region says so. A gap between samples longer than :data:`GAP_FACTOR` times the
    series' median sampling interval flags the calls it touches. A call shorter than two
    sampling intervals is counted as poorly resolved (``short_calls``).
"""

from __future__ import annotations

import difflib
import itertools
import math
import os
import warnings as _warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from eopt.attribute.integral import EnergyCurve
from eopt.attribute.regions import RegionSums, by_name
from eopt.attribute.sharing import Shares, share_energy
from eopt.attribute.stream import in_sweep_order, sweep
from eopt.model.trace import Event, EventTable, PowerSeries, Trace, TraceError

__all__ = [
    "ATTRIBUTION_SCHEMA",
    "GAP_FACTOR",
    "Attribution",
    "CallEnergy",
    "EdgeRule",
    "RegionEnergy",
    "SeriesEnergy",
    "attribute",
    "attribute_all",
    "attribute_streamed",
    "sum_attributions",
    "window_energy",
]

ATTRIBUTION_SCHEMA = "eopt.attribution/1"
#: A sampling gap longer than this many median intervals flags the calls it touches.
GAP_FACTOR = 5.0

#: ``interpolate``: power interpolated at the edges (the attribution rule);
#: ``inside``: only the sample intervals wholly inside the window (the field note's
#: recompute convention, which drops the partial intervals at both edges).
EdgeRule = Literal["interpolate", "inside"]


def _curve(series: PowerSeries, origin_ns: int) -> EnergyCurve:
    """One series' cumulative energy, times in s from ``origin_ns``."""
    return EnergyCurve.from_power(
        (series.times_ns - origin_ns).astype(np.float64) * 1e-9, series.power_w
    )


def window_energy(
    series: PowerSeries, start_ns: int, end_ns: int, edges: EdgeRule = "interpolate"
) -> float | None:
    """Energy of one series over ``[start_ns, end_ns]``, in J; None outside its samples.

    Args:
        series: The power series.
        start_ns: Window start, in ns (same origin as the series).
        end_ns: Window end, in ns.
        edges: How the partial sample intervals at the edges count (see :data:`EdgeRule`).
    """
    first, last = series.span_ns
    if start_ns < first or end_ns > last:
        return None
    curve = _curve(series, first)
    a, b = (start_ns - first) * 1e-9, (end_ns - first) * 1e-9
    if edges == "inside":
        return curve.inside(a, b)
    return curve.between(a, b)


@dataclass(frozen=True)
class SeriesEnergy:
    """The energy of one power series over its own samples.

    Attributes:
        domain: Power domain (``GPU``, ``CPU_PKG`` …).
        device_id: Device index in the domain.
        energy_j: Trapezoid over all samples, in J.
        time_s: From the first to the last sample, in s.
        n_samples: Number of samples.
        period_s: Median sampling interval, in s.
        gaps: Sampling gaps longer than :data:`GAP_FACTOR` periods, as (start, end) s from
            the trace's start.
    """

    domain: str
    device_id: int
    energy_j: float
    time_s: float
    n_samples: int
    period_s: float
    gaps: tuple[tuple[float, float], ...] = ()

    @property
    def mean_power_w(self) -> float:
        """Energy over time, in W."""
        return self.energy_j / self.time_s if self.time_s > 0 else math.nan

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "domain": self.domain,
            "device_id": self.device_id,
            "energy_j": self.energy_j,
            "time_s": self.time_s,
            "mean_power_w": _finite(self.mean_power_w),
            "n_samples": self.n_samples,
            "period_s": _finite(self.period_s),
            "gaps": [list(g) for g in self.gaps],
        }


@dataclass(frozen=True)
class CallEnergy:
    """One event and the energy charged to it.

    Attributes:
        event: The event.
        depth: Nesting depth (0: top level).
        start_s: Start, in s from the trace's start.
        end_s: End, in s from the trace's start.
        inclusive_energy_j: With its descendants, summed over series; None when unknown.
        exclusive_energy_j: Without them; None when unknown.
    """

    event: Event
    depth: int
    start_s: float
    end_s: float
    inclusive_energy_j: float | None
    exclusive_energy_j: float | None


@dataclass(frozen=True)
class RegionEnergy:
    """The calls of one region (or kernel) name, summed.

    Attributes:
        name: Region or kernel name.
        category: Its category (``USER_REGION``, ``PARALLEL_FOR`` …; the first call's).
        depth: Nesting depth of its first call (where a table places it).
        calls: Number of calls.
        time_s: Summed duration of the calls, in s.
        inclusive_energy_j: Summed over calls and series, in J; None when any call's energy
            is unknown.
        exclusive_energy_j: The same without nested events, in J; None when unknown.
        share: Inclusive energy over the trace's total (None when unknown).
        by_series: Inclusive energy per series label (``GPU 0`` …), in J.
        short_calls: Calls shorter than two sampling intervals (poorly resolved).
        flags: Plain-words warnings (outside the power trace, sampling gaps).
    """

    name: str
    category: str
    depth: int
    calls: int
    time_s: float
    inclusive_energy_j: float | None
    exclusive_energy_j: float | None
    share: float | None
    by_series: dict[str, float | None]
    short_calls: int = 0
    flags: tuple[str, ...] = ()

    @property
    def mean_power_w(self) -> float | None:
        """Inclusive energy over time, in W (None when unknown or of zero length)."""
        if self.inclusive_energy_j is None or self.time_s <= 0:
            return None
        return self.inclusive_energy_j / self.time_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (``regions[]`` of ``eopt.attribution/1``)."""
        return {
            "name": self.name,
            "category": self.category,
            "depth": self.depth,
            "calls": self.calls,
            "time_s": self.time_s,
            "inclusive_energy_j": self.inclusive_energy_j,
            "exclusive_energy_j": self.exclusive_energy_j,
            "mean_power_w": self.mean_power_w,
            "share": self.share,
            "by_series": dict(self.by_series),
            "short_calls": self.short_calls,
            "flags": list(self.flags),
        }


@dataclass(frozen=True)
class Attribution:
    """Per-region energy of a trace, per-series energy, and what fell outside every event.

    Attributes:
        regions: Per region name, in order of first call (outer before inner).
        series: Per power series.
        outside_energy_j: Energy of the series outside every event, in J.
        total_energy_j: Sum of the series' energies, in J.
        total_time_s: The trace's span, in s.
        calls: Every event with its own energy, in time order.
        source: Where the trace came from.
        rank: MPI rank (None for a single-process run or a sum over ranks).
        ranks: For a sum over ranks, each rank's attribution.
        warnings: Plain-words notes about the data.
    """

    regions: tuple[RegionEnergy, ...]
    series: tuple[SeriesEnergy, ...]
    outside_energy_j: float
    total_energy_j: float
    total_time_s: float
    calls: tuple[CallEnergy, ...] = ()
    source: str = ""
    rank: int | None = None
    ranks: tuple[Attribution, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    @property
    def outside_share(self) -> float | None:
        """Outside energy over the total (None when the total is 0)."""
        return self.outside_energy_j / self.total_energy_j if self.total_energy_j > 0 else None

    def region(self, name: str) -> RegionEnergy:
        """The region of that name.

        Raises:
            KeyError: naming the regions there are.
        """
        for r in self.regions:
            if r.name == name:
                return r
        names = sorted({r.name for r in self.regions})
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        # The close matches first, so the right name is never cut off the list.
        shown = close + [n for n in names if n not in close]
        known = ", ".join(shown[:12]) + (f" … ({len(names)} in all)" if len(names) > 12 else "")
        raise KeyError(
            f"{self.source}: no region {name!r} in this trace{hint} (regions: {known or 'none'})"
        )

    def to_dict(self, *, calls: bool = False) -> dict[str, Any]:
        """JSON-ready mapping with schema tag ``eopt.attribution/1``.

        Args:
            calls: Also list every call with its energy (large for kernel-heavy traces).
        """
        out: dict[str, Any] = {
            "schema": ATTRIBUTION_SCHEMA,
            "source": self.source,
            "rank": self.rank,
            "total_energy_j": self.total_energy_j,
            "total_time_s": self.total_time_s,
            "outside_energy_j": self.outside_energy_j,
            "outside_share": self.outside_share,
            "regions": [r.to_dict() for r in self.regions],
            "series": [s.to_dict() for s in self.series],
            "warnings": list(self.warnings),
        }
        if self.ranks:
            out["ranks"] = [r.to_dict(calls=calls) for r in self.ranks]
        if calls:
            out["calls"] = [
                {
                    "id": c.event.id,
                    "parent_id": c.event.parent_id,
                    "name": c.event.name,
                    "category": c.event.category,
                    "depth": c.depth,
                    "start_s": c.start_s,
                    "end_s": c.end_s,
                    "inclusive_energy_j": c.inclusive_energy_j,
                    "exclusive_energy_j": c.exclusive_energy_j,
                }
                for c in self.calls
            ]
        return out


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def attribute(trace: Trace, *, domain: str | None = None, calls: bool = True) -> Attribution:
    """Charge each event the energy of every power series during it.

    Args:
        trace: The recorded run.
        domain: Only the series of this domain (``GPU``, ``CPU_PKG`` …); all when None.
        calls: Also list every call with its own energy (:attr:`Attribution.calls`);
            False leaves it empty, which a trace of millions of events is spared.

    Returns:
        Per-region (per name) inclusive and exclusive energy, per-series energy, the energy
        outside every event and the total; see the module docstring for the rules.

    Raises:
        TraceError: when the trace has no power series (of that domain).

    Assumptions:
        Power is whole-device: every event running on a device shares that device's draw
        (the sharing rule), whichever device the event ran on.
    """
    series = trace.series_for(domain)
    if not series:
        what = f"no {domain} power series" if domain else "no power samples"
        raise TraceError(
            f"{trace.source}: the trace has {what}; energy cannot be attributed (record power "
            "with the run, or pass a power CSV)"
        )
    origin = trace.start_ns
    integrals, per_series = _series_energies(series, origin)
    labels = [s.label for s in series]
    table = EventTable.from_events(trace.events)
    n_ev = len(table)
    parent = table.parent_index()
    depth = table.depths()
    if depth is None:  # a validated trace has no cycle; refuse rather than loop
        raise TraceError(f"{trace.source}: an event is its own ancestor")
    start = (table.start_ns - origin).astype(np.float64) * 1e-9
    end = (table.end_ns - origin).astype(np.float64) * 1e-9
    shares = share_energy(start, end, parent, depth, integrals)
    total = float(sum(se.energy_j for se in per_series))
    outside = float(total - shares.inside.sum())

    # Each note and the events it applies to, in the order a call lists its notes.
    gap_notes = _gap_notes(per_series)
    notes = [(note, (start < gb) & (end > ga)) for note, (ga, gb) in gap_notes]
    notes.append((OUTSIDE_NOTE, shares.incl_unknown))
    short_s = _short_s(per_series)
    short = (end - start) < short_s if short_s is not None else np.zeros(n_ev, dtype=bool)

    regions = [
        RegionEnergy(**fields)
        for fields in by_name(table, depth, start, shares, notes, short, labels, total)
    ]
    warnings = [f"{r.name}: {flag}" for r in regions for flag in r.flags]
    return Attribution(
        regions=tuple(regions),
        series=tuple(per_series),
        outside_energy_j=outside,
        total_energy_j=total,
        total_time_s=(trace.end_ns - origin) * 1e-9,
        calls=_calls(table, depth, start, end, shares) if calls else (),
        source=trace.source,
        rank=trace.rank,
        warnings=tuple(warnings),
    )


#: The note of a call that reaches outside the power trace.
OUTSIDE_NOTE = "a call reaches outside the power trace: its energy is unknown"


def _series_energies(
    series: Sequence[PowerSeries], origin: int
) -> tuple[list[EnergyCurve], list[SeriesEnergy]]:
    """Each series' cumulative energy (times in s from ``origin``, in ns) and summary."""
    integrals = [_curve(s, origin) for s in series]
    per_series = []
    for s, g in zip(series, integrals, strict=True):
        period = s.median_interval_s()
        steps = np.diff(g.t)
        where = np.flatnonzero(steps > GAP_FACTOR * period) if math.isfinite(period) else []
        per_series.append(
            SeriesEnergy(
                domain=s.domain,
                device_id=s.device_id,
                energy_j=float(g.cum[-1]),
                time_s=g.last - g.first,
                n_samples=int(s.times_ns.size),
                period_s=period,
                gaps=tuple((float(g.t[i]), float(g.t[i + 1])) for i in where),
            )
        )
    return integrals, per_series


def _gap_notes(per_series: Sequence[SeriesEnergy]) -> list[tuple[str, tuple[float, float]]]:
    """Each sampling gap's note and its (start, end) in s, in the order a call lists them."""
    return [
        (
            f"a {se.domain} {se.device_id} sampling gap of {(gb - ga) * 1e3:.0f} ms "
            f"(period {se.period_s * 1e3:.0f} ms) falls in a call",
            (ga, gb),
        )
        for se in per_series
        for ga, gb in se.gaps
    ]


def _short_s(per_series: Sequence[SeriesEnergy]) -> float | None:
    """Calls shorter than this are poorly resolved, in s (None: no sampling period)."""
    periods = [se.period_s for se in per_series if math.isfinite(se.period_s)]
    return 2 * max(periods) if periods else None


def _calls(
    table: EventTable, depth: np.ndarray, start: np.ndarray, end: np.ndarray, shares: Shares
) -> tuple[CallEnergy, ...]:
    """Every event with its own energy, in time order (outer before inner at one start)."""
    events = table.events()
    incl_total, excl_total = shares.incl.sum(axis=1).tolist(), shares.excl.sum(axis=1).tolist()
    incl_unknown, excl_unknown = shares.incl_unknown.tolist(), shares.excl_unknown.tolist()
    depths, starts, ends = depth.tolist(), start.tolist(), end.tolist()
    calls = [
        CallEnergy(
            event=events[k],
            depth=depths[k],
            start_s=starts[k],
            end_s=ends[k],
            inclusive_energy_j=None if incl_unknown[k] else incl_total[k],
            exclusive_energy_j=None if excl_unknown[k] else excl_total[k],
        )
        for k in range(len(events))
    ]
    calls.sort(key=lambda c: (c.start_s, c.depth))
    return tuple(calls)


#: An ``events.csv`` larger than this is attributed by streaming (:func:`attribute_streamed`)
#: when no call list is asked for: memory then stays bounded whatever the number of
#: events (about 5e4 events of a kernel trace; below, one or two blocks), in bytes.
STREAM_BYTES = 1 << 22


def attribute_streamed(
    path: str | os.PathLike[str],
    *,
    domain: str | None = None,
    min_bytes: int | None = None,
    block_bytes: int | None = None,
) -> Attribution | None:
    """:func:`attribute` of a dashboard trace folder, its ``events.csv`` read a block at a
    time, in memory that does not grow with the number of events.

    The same numbers as reading the trace whole (to rounding, about 1e-15 relative):
    the power series are read whole (their memory grows with the run's length, not with
    its events), the events a block at a time (:mod:`eopt.attribute.stream`). Per-call
    energies (``calls``) are not kept.

    Args:
        path: A dashboard trace folder.
        domain: Only the series of this domain; all when None.
        min_bytes: Stream only an ``events.csv`` larger than this, in bytes
            (:data:`STREAM_BYTES` when None).
        block_bytes: Bytes of ``events.csv`` read at once (the reader's default when None).

    Returns:
        The attribution; None when the path is not one dashboard trace with a large
        enough ``events.csv``, or its events are not in the order a sweep needs (starts
        non-decreasing, ids increasing, parents first) or hold a fault: then read it
        whole (:func:`eopt.model.trace_io.read_traces` and :func:`attribute_all`), which
        accepts it or names the fault.
    """
    from eopt.model import trace_io  # the readers: only this entry point reads files

    folder = Path(path)
    events = folder / "events.csv"
    try:
        if (
            trace_io.detect_layout(folder) != "dashboard"
            or (folder / trace_io.RECORDS_FILE).exists()
        ):
            return None
        least = STREAM_BYTES if min_bytes is None else min_bytes
        if not events.is_file() or events.stat().st_size <= least:
            return None
    except (TraceError, OSError):
        return None
    sizes = {} if block_bytes is None else {"block_bytes": block_bytes}
    blocks = trace_io.event_blocks(events, **sizes)
    first = next(blocks, None)
    # A file in another order (the connector's, written as events close) shows it in its
    # first block: it goes to the whole reader before the power series are read.
    if first is None or len(first) == 0 or not in_sweep_order(first):
        blocks.close()
        return None
    try:
        # Warnings are kept until the sweep succeeds: the whole reader gives its own.
        with _warnings.catch_warnings(record=True) as caught:
            _warnings.simplefilter("always")
            trace_io.dashboard_metadata(folder)
            every = trace_io.read_power_samples(folder / "power_samples.csv")
            for s in every:
                s.validate()
    except (TraceError, OSError):
        blocks.close()
        return None
    series = [s for s in every if domain is None or s.domain == domain.upper()]
    if not series:
        blocks.close()
        return None
    origin = min(min(s.span_ns[0] for s in every), int(first.start_ns[0]))
    integrals, per_series = _series_energies(series, origin)
    labels = [s.label for s in series]
    gap_notes = _gap_notes(per_series)
    sums = RegionSums(len(series), [note for note, _ in gap_notes] + [OUTSIDE_NOTE])
    short_s = _short_s(per_series)
    try:
        swept = sweep(
            itertools.chain([first], blocks),
            origin,
            integrals,
            sums,
            [g for _, g in gap_notes],
            short_s if short_s is not None else -math.inf,
            len(gap_notes),
        )
    finally:
        blocks.close()  # the file, also when the sweep stopped early
    if swept is None:
        return None
    for w in caught:
        _warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    total = float(sum(se.energy_j for se in per_series))
    regions = [RegionEnergy(**fields) for fields in sums.fields(labels, total)]
    end_ns = max(max(s.span_ns[1] for s in every), swept.end_ns)
    return Attribution(
        regions=tuple(regions),
        series=tuple(per_series),
        outside_energy_j=float(total - swept.inside.sum()),
        total_energy_j=total,
        total_time_s=(end_ns - origin) * 1e-9,
        source=str(folder),
        rank=None,
        warnings=tuple(f"{r.name}: {flag}" for r in regions for flag in r.flags),
    )


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def attribute_all(
    traces: Sequence[Trace], *, domain: str | None = None, source: str = "", calls: bool = True
) -> Attribution:
    """:func:`attribute` for what a path holds: one trace as it is, or the MPI ranks'
    traces each attributed and summed (:func:`sum_attributions`); ``calls`` as there."""
    parts = [attribute(t, domain=domain, calls=calls) for t in traces]
    if len(parts) == 1 and parts[0].rank is None:
        return parts[0]
    return sum_attributions(parts, source)


def sum_attributions(parts: Iterable[Attribution], source: str = "") -> Attribution:
    """The sum over the ranks of one multi-rank run: regions by name, series by label.

    Series of different ranks are kept apart when their (domain, device) differ and added
    when they are the same, which is right when each rank recorded its own devices; when
    several ranks recorded one shared device, its energy is counted once per rank (a
    warning says so).
    """
    parts = list(parts)
    if not parts:
        raise TraceError(f"{source}: no ranks to sum")
    regions: dict[str, RegionEnergy] = {}
    for part in parts:
        for r in part.regions:
            old = regions.get(r.name)
            if old is None:
                regions[r.name] = r
                continue
            by_series = dict(old.by_series)
            for label, v in r.by_series.items():
                by_series[label] = _add(by_series.get(label, 0.0), v)
            regions[r.name] = RegionEnergy(
                name=r.name,
                category=old.category,
                depth=min(old.depth, r.depth),
                calls=old.calls + r.calls,
                time_s=old.time_s + r.time_s,
                inclusive_energy_j=_add(old.inclusive_energy_j, r.inclusive_energy_j),
                exclusive_energy_j=_add(old.exclusive_energy_j, r.exclusive_energy_j),
                share=None,
                by_series=by_series,
                short_calls=old.short_calls + r.short_calls,
                flags=tuple(dict.fromkeys(old.flags + r.flags)),
            )
    series: dict[tuple[str, int], SeriesEnergy] = {}
    shared = set()
    for part in parts:
        for s in part.series:
            key = (s.domain, s.device_id)
            old_s = series.get(key)
            if old_s is None:
                series[key] = s
                continue
            shared.add(f"{s.domain} {s.device_id}")
            series[key] = SeriesEnergy(
                s.domain,
                s.device_id,
                old_s.energy_j + s.energy_j,
                max(old_s.time_s, s.time_s),
                old_s.n_samples + s.n_samples,
                old_s.period_s,
                old_s.gaps + s.gaps,
            )
    total = sum(p.total_energy_j for p in parts)
    outside = sum(p.outside_energy_j for p in parts)
    summed = [
        RegionEnergy(
            **{
                **r.__dict__,
                "share": (
                    r.inclusive_energy_j / total
                    if r.inclusive_energy_j is not None and total > 0
                    else None
                ),
            }
        )
        for r in regions.values()
    ]
    warnings = [w for p in parts for w in p.warnings]
    if shared:
        warnings.append(
            f"several ranks recorded {', '.join(sorted(shared))}: each rank's copy is added "
            "(right when the ranks used different physical devices with the same index)"
        )
    return Attribution(
        regions=tuple(summed),
        series=tuple(series.values()),
        outside_energy_j=outside,
        total_energy_j=total,
        total_time_s=max(p.total_time_s for p in parts),
        source=source,
        rank=None,
        ranks=tuple(parts),
        warnings=tuple(warnings),
    )
