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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "CATEGORIES",
    "DOMAINS",
    "NO_DEVICE",
    "Event",
    "EventTable",
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


#: ``EventTable.device_ids`` where an event's device is not known.
NO_DEVICE = np.iinfo(np.int64).min


class EventTable(Sequence[Event]):
    """A trace's events held column by column, for traces of millions of events.

    It reads as a sequence of :class:`Event` (made on first use, then kept), while the
    attribution engine works on its columns and never makes an object per event.

    Attributes:
        ids: Event ids (int64).
        parent_ids: Enclosing event's id per event, 0 at the top level (int64).
        name_codes: Index into ``names`` per event (int64).
        names: The distinct names.
        category_codes: Index into ``categories`` per event (int64).
        categories: The distinct categories.
        start_ns: Starts, in ns (int64).
        end_ns: Ends, in ns (int64).
        device_ids: Device per event, :data:`NO_DEVICE` where unknown (int64).
        first_line: The file line of the first event (one event a line after it), for
            messages; None when not read from a file.
        path: The file the events were read from.
    """

    __slots__ = (
        "_depth",
        "_events",
        "_parent",
        "categories",
        "category_codes",
        "device_ids",
        "end_ns",
        "first_line",
        "ids",
        "name_codes",
        "names",
        "parent_ids",
        "path",
        "start_ns",
    )

    def __init__(
        self,
        ids: np.ndarray,
        parent_ids: np.ndarray,
        name_codes: np.ndarray,
        names: Sequence[str],
        category_codes: np.ndarray,
        categories: Sequence[str],
        start_ns: np.ndarray,
        end_ns: np.ndarray,
        *,
        device_ids: np.ndarray | None = None,
        first_line: int | None = None,
        path: str = "",
    ) -> None:
        self.ids = ids
        self.parent_ids = parent_ids
        self.name_codes = name_codes
        self.names = list(names)
        self.category_codes = category_codes
        self.categories = list(categories)
        self.start_ns = start_ns
        self.end_ns = end_ns
        # Unknown everywhere: one value seen through every row, not a column in memory.
        unknown = np.broadcast_to(np.int64(NO_DEVICE), ids.shape)
        self.device_ids = unknown if device_ids is None else device_ids
        self.first_line = first_line
        self.path = path
        self._events: tuple[Event, ...] | None = None
        self._parent: np.ndarray | None = None
        self._depth: np.ndarray | None = None

    @classmethod
    def from_events(cls, events: Sequence[Event]) -> EventTable:
        """The columns of events that exist as objects (which it keeps, as they are)."""
        if isinstance(events, EventTable):
            return events
        names: dict[str, int] = {}
        categories: dict[str, int] = {}
        n = len(events)

        def column(values: Iterable[int]) -> np.ndarray:
            return np.fromiter(values, dtype=np.int64, count=n)

        table = cls(
            column(e.id for e in events),
            column(e.parent_id for e in events),
            column(names.setdefault(e.name, len(names)) for e in events),
            list(names),
            column(categories.setdefault(e.category, len(categories)) for e in events),
            list(categories),
            column(e.start_ns for e in events),
            column(e.end_ns for e in events),
            device_ids=column(NO_DEVICE if e.device_id is None else e.device_id for e in events),
        )
        table._events = tuple(events)
        return table

    def where(self, k: int) -> str:
        """Where event ``k`` was read (``file:line``), for messages."""
        if self._events is not None:
            return self._events[k].where
        return f"{self.path}:{self.first_line + k}" if self.first_line is not None else self.path

    def events(self) -> tuple[Event, ...]:
        """Every event as an :class:`Event`, in table order (made once, then kept)."""
        if self._events is None:
            names, categories = self.names, self.categories
            devices = self.device_ids.tolist()
            self._events = tuple(
                Event(
                    i,
                    p,
                    names[n],
                    categories[c],
                    a,
                    b,
                    self.where(k),
                    None if devices[k] == NO_DEVICE else devices[k],
                )
                for k, (i, p, n, c, a, b) in enumerate(
                    zip(
                        self.ids.tolist(),
                        self.parent_ids.tolist(),
                        self.name_codes.tolist(),
                        self.category_codes.tolist(),
                        self.start_ns.tolist(),
                        self.end_ns.tolist(),
                        strict=True,
                    )
                )
            )
        return self._events

    def __len__(self) -> int:
        return int(self.ids.size)

    def __getitem__(self, k):  # type: ignore[no-untyped-def]  # Sequence's two overloads
        return self.events()[k]

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]  # equal to the tuple of its events

    def parent_index(self) -> np.ndarray:
        """Each event's parent as a row of this table, -1 at the top level or when the
        parent is not an event here (int64)."""
        if self._parent is None:
            n = self.ids.size
            if n == 0:
                return np.zeros(0, dtype=np.int64)
            order = np.argsort(self.ids, kind="stable")
            sorted_ids = self.ids[order]
            at = np.minimum(np.searchsorted(sorted_ids, self.parent_ids), n - 1)
            found = (self.parent_ids != 0) & (sorted_ids[at] == self.parent_ids)
            self._parent = np.where(found, order[at], -1)
        return self._parent

    def is_well_formed(self) -> bool:
        """Whether :meth:`Trace.validate` would accept these events (ends after starts,
        positive unique ids, parents that exist, enclose their children and form no
        cycle), checked column-wise; when False, the object-wise check says why."""
        n = self.ids.size
        if n == 0:
            return True
        if np.any(self.end_ns < self.start_ns) or np.any(self.ids <= 0):
            return False
        ids = np.sort(self.ids)
        if np.any(ids[1:] == ids[:-1]):
            return False
        parent = self.parent_index()
        has_parent = self.parent_ids != 0
        if np.any(has_parent & (parent < 0)):
            return False
        p = parent[has_parent]
        if np.any(self.start_ns[has_parent] < self.start_ns[p]) or np.any(
            self.end_ns[has_parent] > self.end_ns[p]
        ):
            return False
        return self.depths() is not None

    def depths(self) -> np.ndarray | None:
        """Each event's nesting depth (0: top level); None when parents form a cycle."""
        if self._depth is None:
            self._depth = event_depths(self.parent_index())
        return self._depth


def event_depths(parent: np.ndarray, base: np.ndarray | None = None) -> np.ndarray | None:
    """Each event's nesting depth (0: top level) from its parent's row (-1: none), by
    pointer doubling (log₂ of the deepest chain rounds); None when parents form a cycle.

    Args:
        parent: Each event's parent row, -1 where it has none here.
        base: The depth of each event without a parent row here (a part of a trace whose
            ancestors were seen before: their own depth); 0 when None. Ignored for the
            events that have a parent row.
    """
    depth = (parent >= 0).astype(np.int64)
    if base is not None:
        depth = np.where(parent >= 0, depth, base).astype(np.int64)
    up = parent.copy()
    for _ in range(max(int(parent.size), 1).bit_length() + 1):
        live = np.flatnonzero(up >= 0)
        if live.size == 0:
            return depth
        via = up[live]
        # Both updates read this round's values: the jump doubles every chain's reach.
        depth[live] = depth[live] + depth[via]
        up[live] = up[via]
    return None if np.any(up >= 0) else depth


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
        events: Timed events with their nesting (``parent_id``): a tuple of
            :class:`Event`, or an :class:`EventTable` for large traces.
        series: One power series per (domain, device).
        metadata: Whatever the source recorded (``metadata.json``, command, host …).
        source: Where the trace was read from (a folder or file), for messages.
        rank: The MPI rank, for traces of one rank of a multi-rank run.
    """

    events: Sequence[Event]
    series: tuple[PowerSeries, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    rank: int | None = None

    def __post_init__(self) -> None:
        self.validate()

    @property
    def start_ns(self) -> int:
        """The earliest sample or event start, in ns (the run's start, for run order)."""
        starts = [s.span_ns[0] for s in self.series]
        if isinstance(self.events, EventTable):
            starts += [int(self.events.start_ns.min())] if len(self.events) else []
        else:
            starts += [e.start_ns for e in self.events]
        return min(starts) if starts else 0

    @property
    def end_ns(self) -> int:
        """The latest sample or event end, in ns."""
        ends = [s.span_ns[1] for s in self.series]
        if isinstance(self.events, EventTable):
            ends += [int(self.events.end_ns.max())] if len(self.events) else []
        else:
            ends += [e.end_ns for e in self.events]
        return max(ends) if ends else 0

    def validate(self) -> None:
        """Check every series and event; raises :class:`TraceError` on the first fault."""
        keys: set[tuple[str, int]] = set()
        for s in self.series:
            s.validate()
            if s.key in keys:
                raise TraceError(f"{self.source}: two power series for {s.label}")
            keys.add(s.key)
        try:
            well_formed = EventTable.from_events(self.events).is_well_formed()
        except (OverflowError, TypeError, ValueError):
            well_formed = False  # not 64-bit integers: the checks below say what is wrong
        if well_formed:
            return  # the object-wise checks below would find the same nothing, slowly
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
