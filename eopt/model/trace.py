"""A recorded run as data: power series plus timed events (the trace of design.md).

Every source of measurements (a recorded trace folder, eopt's own measurement JSON, a
power CSV from ``nvidia-smi`` or DCGM, the meter of ``eopt measure``) becomes a
:class:`Trace`, and one engine (:mod:`eopt.attribute.engine`) charges its energy to its
events. Times are integer nanoseconds since the UNIX epoch (or since any origin the source
used); the engine converts them to seconds from the trace's own start, so no precision is
lost to 64-bit floats at epoch scale.

A :class:`Trace` is validated when it is built: events end after they start, parents exist
and enclose their children, and each power series is finite with strictly increasing
timestamps. Errors are :class:`TraceError` naming the file and line when the reader knows
them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "CATEGORIES",
    "DOMAINS",
    "Event",
    "PowerSeries",
    "Trace",
    "TraceError",
    "TraceWarning",
    "check_plausible",
    "nest_by_time",
    "region_events",
]

#: Event categories of the dashboard trace (version 1).
CATEGORIES = ("USER_REGION", "PARALLEL_FOR", "PARALLEL_REDUCE", "PARALLEL_SCAN", "DEEP_COPY")
#: Power domains of the dashboard trace (version 1).
DOMAINS = ("GPU", "CPU_PKG", "CPU_DRAM", "NODE")

#: No one device draws this much; a reading above it is a unit slip or a glitch, in W.
IMPLAUSIBLE_POWER_W = 5000.0
#: A change between two readings of one series larger than any board's range, in W.
IMPLAUSIBLE_STEP_W = 3000.0
#: The longest gap between two readings of one series: a power trace has no day-long
#: holes, and one stray timestamp would otherwise integrate into terajoules, in ns.
MAX_SAMPLE_GAP_NS = 86_400 * 10**9


class TraceWarning(UserWarning):
    """A trace holds readings that are possible but implausible (named by file and line)."""


class TraceError(ValueError):
    """A trace that cannot be used as it is; the message names the file, line and fix."""


@dataclass(frozen=True)
class Event:
    """One timed event: a region call, a kernel, a copy.

    Attributes:
        id: Identifier, unique in its trace, > 0.
        parent_id: The enclosing event's id; 0 for a top-level event.
        name: The region's or kernel's name.
        category: One of :data:`CATEGORIES` (or another upper-case word a source uses).
        start_ns: Start, in ns.
        end_ns: End, in ns (≥ start).
        where: Where it was read (``file:line``), for error messages.
        device_id: The device it ran on, where the source says (Kokkos' device id).
    """

    id: int
    parent_id: int
    name: str
    category: str
    start_ns: int
    end_ns: int
    where: str = field(default="", compare=False)
    device_id: int | None = None

    @property
    def duration_s(self) -> float:
        """Length in s."""
        return (self.end_ns - self.start_ns) * 1e-9

    @property
    def is_region(self) -> bool:
        """Whether it is a user region (not a kernel or a copy)."""
        return self.category == "USER_REGION"


@dataclass(frozen=True, eq=False)
class PowerSeries:
    """Power samples of one (domain, device): what one sensor read over a run.

    Attributes:
        domain: ``GPU``, ``CPU_PKG``, ``CPU_DRAM`` or ``NODE``.
        device_id: The device's index within its domain.
        times_ns: Sample times, in ns, strictly increasing (int64).
        power_w: Power at each sample, in W, finite.
        where: Where it was read, for error messages.
    """

    domain: str
    device_id: int
    times_ns: np.ndarray
    power_w: np.ndarray
    where: str = ""

    @classmethod
    def from_seconds(
        cls,
        domain: str,
        device_id: int,
        points: Iterable[tuple[float, float]],
        origin_ns: int,
        where: str = "",
    ) -> PowerSeries:
        """A series from (s after ``origin_ns``, W) points, in time order.

        Two points that land on one nanosecond (a span's edge and a sensor refresh) keep
        the later reading, so the timestamps strictly increase.
        """
        pairs = list(points)
        times = np.array([origin_ns + round(t * 1e9) for t, _ in pairs], dtype=np.int64)
        power = np.array([p for _, p in pairs], dtype=np.float64)
        keep = np.append(np.diff(times) > 0, True) if times.size else np.zeros(0, dtype=bool)
        return cls(domain, device_id, times[keep], power[keep], where)

    @property
    def key(self) -> tuple[str, int]:
        """(domain, device_id)."""
        return (self.domain, self.device_id)

    @property
    def label(self) -> str:
        """``GPU 0``, ``CPU_PKG 1`` …"""
        return f"{self.domain} {self.device_id}"

    @property
    def span_ns(self) -> tuple[int, int]:
        """(first, last) sample time in ns."""
        return int(self.times_ns[0]), int(self.times_ns[-1])

    def median_interval_s(self) -> float:
        """Median time between samples, in s (the sampling period)."""
        if self.times_ns.size < 2:
            return math.nan
        return float(np.median(np.diff(self.times_ns))) * 1e-9

    def validate(self) -> None:
        """Check the samples; raises :class:`TraceError` naming the first bad one."""
        where = self.where or f"{self.label} power series"
        if self.times_ns.shape != self.power_w.shape or self.times_ns.ndim != 1:
            raise TraceError(f"{where}: times and powers differ in length")
        if self.times_ns.size < 2:
            raise TraceError(
                f"{where}: {self.label} has {self.times_ns.size} power sample(s); at least 2 "
                "are needed to integrate"
            )
        bad = np.flatnonzero(~np.isfinite(self.power_w))
        if bad.size:
            i = int(bad[0])
            raise TraceError(
                f"{where}: sample {i + 1} of {self.label} has power {self.power_w[i]}; "
                "power must be a finite number of watts (drop or fix the sample)"
            )
        bad = np.flatnonzero(self.power_w < 0)
        if bad.size:
            i = int(bad[0])
            raise TraceError(
                f"{where}: sample {i + 1} of {self.label} has power {self.power_w[i]:g} W; a "
                "power reading is never negative (fix or drop the sample)"
            )
        steps = np.diff(self.times_ns)
        bad = np.flatnonzero(steps <= 0)
        if bad.size:
            i = int(bad[0]) + 1
            what = "duplicates" if steps[i - 1] == 0 else "is earlier than"
            raise TraceError(
                f"{where}: sample {i + 1} of {self.label} at {int(self.times_ns[i])} ns {what} "
                "the sample before it; timestamps must strictly increase (sort the file and "
                "drop duplicates)"
            )


@dataclass(frozen=True)
class Trace:
    """A recorded run: its power series and its timed events.

    Attributes:
        events: Timed events with their nesting (``parent_id``).
        series: One power series per (domain, device).
        metadata: Whatever the source recorded (``metadata.json``, command, host …).
        source: Where the trace was read from (a folder or file), for messages.
        rank: The MPI rank, for traces of one rank of a multi-rank run.
    """

    events: tuple[Event, ...]
    series: tuple[PowerSeries, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    rank: int | None = None

    def __post_init__(self) -> None:
        self.validate()

    @property
    def start_ns(self) -> int:
        """The earliest sample or event start, in ns (the run's start, for run order)."""
        starts = [s.span_ns[0] for s in self.series] + [e.start_ns for e in self.events]
        return min(starts) if starts else 0

    @property
    def end_ns(self) -> int:
        """The latest sample or event end, in ns."""
        ends = [s.span_ns[1] for s in self.series] + [e.end_ns for e in self.events]
        return max(ends) if ends else 0

    def validate(self) -> None:
        """Check every series and event; raises :class:`TraceError` on the first fault."""
        keys: set[tuple[str, int]] = set()
        for s in self.series:
            s.validate()
            if s.key in keys:
                raise TraceError(f"{self.source}: two power series for {s.label}")
            keys.add(s.key)
        by_id: dict[int, Event] = {}
        for e in self.events:
            where = e.where or self.source
            if e.end_ns < e.start_ns:
                raise TraceError(
                    f"{where}: event {e.name!r} ends ({e.end_ns} ns) before it starts "
                    f"({e.start_ns} ns); end_ns must be ≥ start_ns"
                )
            if e.id <= 0:
                raise TraceError(f"{where}: event id {e.id} must be a positive integer")
            if e.id in by_id:
                raise TraceError(f"{where}: event id {e.id} is used twice; ids must be unique")
            by_id[e.id] = e
        for e in self.events:
            if e.parent_id == 0:
                continue
            where = e.where or self.source
            parent = by_id.get(e.parent_id)
            if parent is None:
                raise TraceError(
                    f"{where}: event {e.name!r} names parent_id {e.parent_id}, which is not an "
                    "event id of this trace (use 0 for a top-level event)"
                )
            if e.start_ns < parent.start_ns or e.end_ns > parent.end_ns:
                raise TraceError(
                    f"{where}: event {e.name!r} [{e.start_ns}, {e.end_ns}] ns lies outside its "
                    f"parent {parent.name!r} [{parent.start_ns}, {parent.end_ns}] ns; a child "
                    "must start and end inside its parent"
                )
        # A cycle of parents cannot pass the containment check unless the events coincide.
        for e in self.events:
            seen = {e.id}
            p = e.parent_id
            while p:
                if p in seen:
                    raise TraceError(f"{e.where or self.source}: event {e.id} is its own ancestor")
                seen.add(p)
                p = by_id[p].parent_id

    def series_for(self, domain: str | None = None) -> tuple[PowerSeries, ...]:
        """The series of one domain (all series when ``domain`` is None)."""
        if domain is None:
            return self.series
        return tuple(s for s in self.series if s.domain == domain.upper())


def nest_by_time(
    items: Sequence[tuple[str, str, int, int, str]],
) -> list[Event]:
    """Events with parents inferred from time containment.

    For sources that do not record nesting (the Kokkos connector's raw region and kernel
    CSVs): an event's parent is the shortest earlier-or-equal-starting event that encloses
    it. Events that overlap without one enclosing the other stay siblings.

    Args:
        items: (name, category, start_ns, end_ns, where) per event, in any order.

    Returns:
        Events with ids 1…n in (start, longest first) order.
    """
    order = sorted(range(len(items)), key=lambda i: (items[i][2], -items[i][3], i))
    events: list[Event] = []
    stack: list[Event] = []
    for new_id, i in enumerate(order, start=1):
        name, category, start, end, where = items[i]
        while stack and not (stack[-1].start_ns <= start and end <= stack[-1].end_ns):
            stack.pop()
        parent = stack[-1].id if stack else 0
        event = Event(new_id, parent, name, category, start, end, where)
        events.append(event)
        stack.append(event)
    return events


def region_events(
    spans: Iterable[tuple[str, float, float]], origin_ns: int, first_id: int = 0
) -> list[Event]:
    """User regions timed in seconds from ``origin_ns`` as events, nested by time.

    Args:
        spans: (name, start s, end s) per region call.
        origin_ns: What 0 s is, in ns (an epoch offset, or a span's start).
        first_id: Added to every id (to append them to events that already exist).
    """
    items = [
        (name, "USER_REGION", origin_ns + round(a * 1e9), origin_ns + round(b * 1e9), "")
        for name, a, b in spans
    ]
    return [
        Event(
            e.id + first_id,
            e.parent_id + first_id if e.parent_id else 0,
            e.name,
            e.category,
            e.start_ns,
            e.end_ns,
        )
        for e in nest_by_time(items)
    ]


def check_plausible(series: PowerSeries, lines: Sequence[int] | None = None) -> None:
    """Refuse impossible readings of a series and warn once about implausible ones.

    Refused: a negative power, a gap of more than a day between two readings. Warned
    (:class:`TraceWarning`, once per series, with the first offender's place and the
    count): a power above :data:`IMPLAUSIBLE_POWER_W`, or a step between two readings
    above :data:`IMPLAUSIBLE_STEP_W`.

    Args:
        series: The series (its ``where`` names the file).
        lines: The file line of each sample, for messages; sample numbers without.

    Raises:
        TraceError: naming the file and line of the first impossible reading.
    """

    def at(i: int) -> str:
        base = series.where or f"{series.label} power series"
        return f"{base}:{lines[i]}" if lines is not None else f"{base}: sample {i + 1}"

    power, times = series.power_w, series.times_ns
    bad = np.flatnonzero(power < 0)
    if bad.size:
        i = int(bad[0])
        raise TraceError(
            f"{at(i)}: power {power[i]:g} W is negative; a power reading is never below 0 W "
            "(fix or drop the line)"
        )
    gaps = np.flatnonzero(np.diff(times) > MAX_SAMPLE_GAP_NS)
    if gaps.size:
        i = int(gaps[0]) + 1
        days = (int(times[i]) - int(times[i - 1])) / 86_400e9
        raise TraceError(
            f"{at(i)}: this reading is {days:.3g} days after the one before it; a power trace "
            "has no such gap: fix the timestamp or drop the line (or check --time-unit)"
        )
    high = np.flatnonzero(power > IMPLAUSIBLE_POWER_W)
    if high.size:
        i = int(high[0])
        warnings.warn(
            f"{at(i)}: {series.label} reads {power[i]:g} W, more than any GPU draws "
            f"({high.size} such reading(s)); a milliwatt column read as watts? "
            "(--power-unit mW)",
            TraceWarning,
            stacklevel=2,
        )
    jumps = np.flatnonzero(np.abs(np.diff(power)) > IMPLAUSIBLE_STEP_W)
    if jumps.size and not high.size:
        i = int(jumps[0]) + 1
        warnings.warn(
            f"{at(i)}: {series.label} jumps from {power[i - 1]:g} W to {power[i]:g} W "
            f"between two readings ({jumps.size} such step(s)), beyond any board's range",
            TraceWarning,
            stacklevel=2,
        )
