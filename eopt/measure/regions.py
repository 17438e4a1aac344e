"""Named, nested regions: which part of a program spent the energy.

Mark regions with a context manager or a decorator::

    from eopt.measure import regions

    with regions.region("forward"):
        model(x)

    @regions.region("backward")
    def backward(): ...

Recording a region only takes two timestamps; energy is charged afterwards from a meter's
trace (:func:`attribute_regions`), so regions are cheap and can nest freely.

**Child processes** (``eopt measure -- CMD``): when the environment variable
``EOPT_REGIONS_FILE`` names a file, every region that closes appends one JSON line to it::

    {"schema": "eopt.region/1", "name": "forward", "path": ["step", "forward"],
     "start_s": 1234.5, "end_s": 1234.9, "pid": 4242, "tid": 4243, "clock": "perf_counter"}

Times are ``time.perf_counter()`` seconds, the system-wide monotonic clock on Linux, so
the measuring process can place them on its own power trace. ``pid`` and ``tid`` (the
native thread id; optional, as ``pid``) say which thread's stack ``path`` is: a region's
parent is the enclosing call of ``path[:-1]`` in the same thread. Any program (not only
Python) can write such lines itself.

**Energy** is charged by the one attribution engine (:mod:`eopt.attribute.engine`, the
rule of ``eopt attribute``): the power at each instant is split equally among the region
calls running then that have no running child, so nested regions are charged once and
regions that overlap without nesting (two threads, two processes) share the overlap;
the regions' exclusive energies plus the energy outside every region are the total.

**One marker.** :func:`region` is :func:`eopt.element` (:mod:`eopt.measure.element`) with
one difference: where nothing measures the program it still records in memory (below),
while an element does nothing. Under ``eopt measure`` both record here, through
:class:`RecorderHook`; an element's ``kind`` is kept on its line (``"kind"``, written
when it differs from the name).

**Outside** ``eopt measure`` (no ``$EOPT_REGIONS_FILE``) and outside
:func:`eopt.measure.command.measure_regions`, nobody charges regions any energy: they are
only kept in memory on :func:`default_recorder`. The first such region warns once per
process (:class:`UnmeasuredRegionWarning`); measure a block in-process with
:func:`eopt.measure.windows.window` instead.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from eopt.devices.base import Clock, WallClock
from eopt.measure.element import ElementHook, _Element, use_hook

if TYPE_CHECKING:
    from eopt.model.trace import Trace

__all__ = [
    "REGIONS_FILE_ENV",
    "RecorderHook",
    "RegionError",
    "RegionEvent",
    "RegionRecorder",
    "RegionReport",
    "RegionStats",
    "RegionWindow",
    "UnmeasuredRegionWarning",
    "attribute_regions",
    "default_recorder",
    "read_region_windows",
    "region",
    "use_recorder",
]

#: Environment variable naming the JSON-lines file a child process reports regions to.
REGIONS_FILE_ENV = "EOPT_REGIONS_FILE"
REGION_SCHEMA = "eopt.region/1"
#: Decimals of the watts a trace folder's power_samples.csv keeps.
TRACE_POWER_DECIMALS = 6


class RegionError(ValueError):
    """Misused regions (closing one that is not open) or a bad regions file."""


class UnmeasuredRegionWarning(UserWarning):
    """A region was entered where nothing measures regions (no ``eopt measure`` around the
    program, no :func:`~eopt.measure.command.measure_regions` block)."""


@dataclass(frozen=True)
class RegionWindow:
    """One closed region call.

    Attributes:
        name: The region's name.
        path: Names from the outermost open region to this one.
        start_s: Start on the recorder's clock, in s.
        end_s: End on the recorder's clock, in s.
        pid: The process that recorded it.
        tid: The thread that recorded it (its native id; 0 when unknown).
        kind: The element type of an :func:`eopt.element` call; ``""``: the name.
    """

    name: str
    path: tuple[str, ...]
    start_s: float
    end_s: float
    pid: int = 0
    tid: int = 0
    kind: str = ""

    @property
    def element_kind(self) -> str:
        """The element type (the name unless the call gave a kind)."""
        return self.kind or self.name

    @property
    def key(self) -> str:
        """The region's path joined with ``/`` (how reports group calls)."""
        return "/".join(self.path)

    @property
    def depth(self) -> int:
        """Nesting depth (0 for an outermost region)."""
        return len(self.path) - 1

    @property
    def duration_s(self) -> float:
        """Length in s."""
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        """The ``eopt.region/1`` JSON line."""
        out: dict[str, Any] = {
            "schema": REGION_SCHEMA,
            "name": self.name,
            "path": list(self.path),
            "start_s": self.start_s,
            "end_s": self.end_s,
            "pid": self.pid,
            "tid": self.tid,
            "clock": "perf_counter",
        }
        if self.kind and self.kind != self.name:
            out["kind"] = self.kind
        return out


class _Region(contextlib.ContextDecorator):
    """A region handle: a context manager and a decorator (re-entrant, thread-safe)."""

    def __init__(self, recorder: RegionRecorder, name: str) -> None:
        self._recorder = recorder
        self.name = name

    def __enter__(self) -> _Region:
        self._recorder.enter(self.name)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # A region that raised still ran and still spent energy: record it.
        self._recorder.exit(self.name)


class RegionRecorder:
    """Records region windows on one clock, optionally appending them to a file.

    Args:
        clock: Where timestamps come from (a device's clock to measure against that
            device; default ``time.perf_counter``).
        sink: A JSON-lines file each closed region is appended to (the child-process
            protocol, see the module docstring).
    """

    def __init__(self, clock: Clock | None = None, sink: str | os.PathLike[str] | None = None):
        self.clock = clock if clock is not None else WallClock()
        self.windows: list[RegionWindow] = []
        self._local = threading.local()
        self._lock = threading.Lock()
        self._sink_path = Path(sink) if sink is not None else None
        self._sink: IO[str] | None = None

    def _stack(self) -> list[tuple[str, float, str]]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack  # type: ignore[no-any-return]

    def region(self, name: str) -> _Region:
        """A region named ``name``: ``with rec.region("fwd"):`` or ``@rec.region("fwd")``."""
        if not isinstance(name, str) or not name or "/" in name:
            raise RegionError(f"region name must be a non-empty string without '/', got {name!r}")
        return _Region(self, name)

    def enter(self, name: str, kind: str = "") -> None:
        """Open region ``name`` (prefer :meth:`region`); ``kind``: its element type."""
        self._stack().append((name, self.clock.now(), kind))

    def exit(self, name: str) -> RegionWindow:
        """Close the innermost region, which must be ``name``.

        Raises:
            RegionError: when ``name`` is not the innermost open region.
        """
        end = self.clock.now()
        stack = self._stack()
        if not stack or stack[-1][0] != name:
            open_name = stack[-1][0] if stack else None
            raise RegionError(
                f"closing region {name!r} but the innermost open region is {open_name!r}; "
                "regions must nest"
            )
        path = tuple(n for n, _, _ in stack)
        _, start, kind = stack.pop()
        # The pid of a forked child too; the thread, so threads' stacks stay apart.
        window = RegionWindow(name, path, start, end, os.getpid(), threading.get_native_id(), kind)
        with self._lock:
            self.windows.append(window)
            if self._sink_path is not None:
                self._write(window)
        return window

    def _write(self, window: RegionWindow) -> None:
        if self._sink is None:
            # Line-buffered append: each line reaches the file when the region closes, so a
            # crashing child still leaves its finished regions behind.
            self._sink = self._sink_path.open("a", encoding="utf-8", buffering=1)  # type: ignore[union-attr]
        self._sink.write(json.dumps(window.to_dict(), allow_nan=False) + "\n")

    def close(self) -> None:
        """Close the sink file (regions recorded later reopen it)."""
        with self._lock:
            if self._sink is not None:
                self._sink.close()
                self._sink = None

    def clear(self) -> None:
        """Forget recorded windows (open regions stay open)."""
        with self._lock:
            self.windows.clear()


# The module-level API ---------------------------------------------------------------------
_default: RegionRecorder | None = None
_default_lock = threading.Lock()
# The recorder default_recorder() made without a sink: what it records, nothing reads.
_unmeasured: RegionRecorder | None = None
_warned_unmeasured = False

UNMEASURED_MESSAGE = (
    "region {name!r} is not measured: no `eopt measure` runs this program "
    "($EOPT_REGIONS_FILE is unset) and no measure_regions() block is active. Run it as "
    "`eopt measure -- python PROGRAM …` for per-region energy, or measure a block "
    'in-process with `with eopt.measure.window("{name}") as w: …`.'
)


def default_recorder() -> RegionRecorder:
    """The recorder behind :func:`region`: ``perf_counter`` timestamps, appended to
    ``$EOPT_REGIONS_FILE`` when it is set."""
    global _default, _unmeasured
    with _default_lock:
        if _default is None:
            sink = os.environ.get(REGIONS_FILE_ENV) or None
            _default = RegionRecorder(sink=sink)
            if sink is None:
                _unmeasured = _default
        return _default


def _warn_if_unmeasured(recorder: RegionRecorder, name: str) -> None:
    """Warn once per process when a region goes to a recorder nothing reads.

    Silence would read as "regions cost nothing"; a warning every time would flood a
    training loop.
    """
    global _warned_unmeasured
    with _default_lock:
        if recorder is not _unmeasured or _warned_unmeasured:
            return
        _warned_unmeasured = True
    # stacklevel: this helper, _fallback, _DefaultRegion.__enter__, the user's `with` line.
    warnings.warn(UNMEASURED_MESSAGE.format(name=name), UnmeasuredRegionWarning, stacklevel=4)


class RecorderHook:
    """The element hook that records each element call as a region.

    Args:
        recorder: Where to record; None: whichever is :func:`default_recorder` at each
            call (``eopt measure``'s child, ``$EOPT_REGIONS_FILE``).
    """

    def __init__(self, recorder: RegionRecorder | None = None) -> None:
        self.recorder = recorder

    def _target(self) -> RegionRecorder:
        return self.recorder if self.recorder is not None else default_recorder()

    def begin(self, name: str, kind: str) -> None:
        """Open region ``name``."""
        self._target().enter(name, "" if kind == name else kind)

    def end(self, name: str, kind: str) -> None:
        """Close region ``name``."""
        self._target().exit(name)

    def step(self) -> None:
        """Nothing: a region report has no iterations."""


@contextlib.contextmanager
def use_recorder(recorder: RegionRecorder) -> Iterator[RegionRecorder]:
    """Make ``recorder`` the one behind :func:`region` and :func:`eopt.element` inside
    the ``with`` block."""
    global _default
    with _default_lock:
        previous, _default = _default, recorder
    try:
        with use_hook(RecorderHook(recorder)):
            yield recorder
    finally:
        with _default_lock:
            _default = previous


class _DefaultRegion(_Element):
    """An element that, where nothing measures, records on the in-memory default
    recorder (and warns once) instead of doing nothing."""

    __slots__ = ()

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise RegionError(f"region name must be a non-empty string without '/', got {name!r}")
        super().__init__(name)

    def _recreate_cm(self) -> _DefaultRegion:
        return type(self)(self.name)

    def _fallback(self) -> ElementHook | None:
        rec = default_recorder()
        _warn_if_unmeasured(rec, self.name)
        return RecorderHook(rec)


def region(name: str) -> _DefaultRegion:
    """A named region on the default recorder (context manager or decorator).

    The same marker as :func:`eopt.element` (whose ``kind`` is the name). Regions are
    charged energy by ``eopt measure -- CMD`` (through ``$EOPT_REGIONS_FILE``) or inside
    :func:`~eopt.measure.command.measure_regions`. Anywhere else the first region warns
    once (:class:`UnmeasuredRegionWarning`) and regions are only kept in memory.
    """
    return _DefaultRegion(name)


# Reading a regions file -------------------------------------------------------------------
def read_region_windows(path: str | os.PathLike[str]) -> list[RegionWindow]:
    """Read a regions file written by child processes.

    A missing file means no regions were recorded (an empty list). A last line cut short
    (a child killed mid-write) is ignored; any other bad line is an error.

    Raises:
        RegionError: naming ``file:line`` and what is wrong.
    """
    p = Path(path)
    if not p.exists():
        return []
    text_all = p.read_text(encoding="utf-8")
    lines = text_all.splitlines()
    out: list[RegionWindow] = []
    for lineno, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if lineno == len(lines) and not text_all.endswith("\n"):
                continue  # a write cut short by a crash: the region never finished
            raise RegionError(
                f"{p}:{lineno}: not valid JSON ({exc.msg}); expected one "
                "eopt.region/1 object a line"
            ) from None
        out.append(_window_from_dict(data, f"{p}:{lineno}"))
    return out


def _window_from_dict(data: Any, where: str) -> RegionWindow:
    if not isinstance(data, dict):
        raise RegionError(f"{where}: expected a JSON object")
    schema = data.get("schema", REGION_SCHEMA)
    if schema != REGION_SCHEMA:
        raise RegionError(f"{where}: schema {schema!r} is not {REGION_SCHEMA!r}")
    try:
        name = str(data["name"])
        start, end = float(data["start_s"]), float(data["end_s"])
    except KeyError as exc:
        raise RegionError(f"{where}: field {exc.args[0]!r} is missing") from None
    except (TypeError, ValueError):
        raise RegionError(f"{where}: start_s and end_s must be numbers (seconds)") from None
    path = data.get("path") or [name]
    if not isinstance(path, list) or not all(isinstance(x, str) for x in path):
        raise RegionError(f"{where}: path must be a list of region names")
    if end < start:
        raise RegionError(f"{where}: region {name!r} ends ({end}) before it starts ({start})")
    try:
        pid, tid = int(data.get("pid", 0)), int(data.get("tid", 0))
    except (TypeError, ValueError):
        raise RegionError(f"{where}: pid and tid must be integers") from None
    kind = data.get("kind", "")
    if not isinstance(kind, str):
        raise RegionError(f"{where}: kind must be a string (the element type)")
    return RegionWindow(name, tuple(path), start, end, pid, tid, kind)


# Attribution ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RegionStats:
    """One region's totals over its calls.

    Attributes:
        key: The region path (``outer/inner``).
        depth: Nesting depth.
        calls: Number of calls.
        time_s: Inclusive time summed over calls, in s.
        energy_j: Inclusive energy summed over calls, in J (its calls and their nested
            regions; the overlap with another thread's or process's region is shared, see
            the module docstring).
        error_j: Summed integration-error bound of the calls' windows, in J (the meter's
            bound for the whole window, also for a call that shares part of it).
        short_calls: Calls shorter than ten sensor periods (poorly resolved).
        share: energy_j / total energy of the measured span.
        kind: The element type of its calls (:func:`eopt.element`'s ``kind``; the
            region's name when none was given).
    """

    key: str
    depth: int
    calls: int
    time_s: float
    energy_j: float
    error_j: float
    short_calls: int
    share: float
    kind: str = ""

    @property
    def mean_power_w(self) -> float:
        """Energy over time, in W."""
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "name": self.key,
            "depth": self.depth,
            "calls": self.calls,
            "time_s": self.time_s,
            "energy_j": self.energy_j,
            "mean_power_w": self.mean_power_w,
            "share": self.share,
            "error_j": self.error_j,
            "short_calls": self.short_calls,
            "kind": self.kind or self.key.rsplit("/", 1)[-1],
        }


@dataclass(frozen=True)
class RegionEvent:
    """One region call placed on the measured span's time axis (for traces and reports).

    Attributes:
        name: The region's name.
        path: The region path (``outer/inner``).
        depth: Nesting depth.
        pid: The process that recorded it.
        start_s: Start, in s from the span's start (clipped to the span).
        end_s: End, in s from the span's start.
        energy_j: Inclusive energy of this call, in J.
        error_j: Its window's integration-error bound, in J.
        id: The call's event id in the run's trace (> 0; 0 when not attributed).
        parent_id: The enclosing call's id (0 for an outermost call).
        kind: The call's element type (its name when none was given).
    """

    name: str
    path: str
    depth: int
    pid: int
    start_s: float
    end_s: float
    energy_j: float
    error_j: float
    id: int = 0
    parent_id: int = 0
    kind: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (a slice in ``eopt trace --measurement``)."""
        return {
            "id": self.id,
            "parent_id": self.parent_id,
            "name": self.name,
            "path": self.path,
            "depth": self.depth,
            "pid": self.pid,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "energy_j": self.energy_j,
            "error_j": self.error_j,
            "kind": self.kind or self.name,
        }


@dataclass(frozen=True)
class RegionReport:
    """Per-region energy of a measured span, and what fell outside every region.

    Attributes:
        regions: Per-region totals, outer regions first (by first start, then depth).
        total_energy_j: Energy of the whole span, in J.
        total_time_s: Length of the span, in s.
        outside_energy_j: Energy of the span outside every region, in J.
        outside_time_s: Time outside every region, in s.
        meter: The meter's description (method, power field …).
        samples: (time s from the span's start, power W) points of the meter's power
            trace, for showing; the first is at 0 (the power in force when the span
            opened) and the last at ``total_time_s``.
        events: Every region call in time order (outer before inner at equal starts).
        trace: What the engine attributed: the region calls as events (with their
            nesting) and the meter's energies as a power series
            (:meth:`eopt.measure.meter.Meter.attribution_series`), times in ns from the
            span's start; None for an empty span. Not part of the JSON.
    """

    regions: tuple[RegionStats, ...]
    total_energy_j: float
    total_time_s: float
    outside_energy_j: float
    outside_time_s: float
    meter: dict[str, Any]
    samples: tuple[tuple[float, float], ...] = ()
    events: tuple[RegionEvent, ...] = ()
    trace: Trace | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping: totals, ``regions`` (per-region sums), ``samples``
        (``{"time_s": [...], "power_w": [...]}``, times from the span's start) and
        ``events`` (one object per region call, see :class:`RegionEvent`)."""
        return {
            "schema": "eopt.regions-report/1",
            "total_energy_j": self.total_energy_j,
            "total_time_s": self.total_time_s,
            "mean_power_w": self.total_energy_j / self.total_time_s if self.total_time_s else 0.0,
            "outside_energy_j": self.outside_energy_j,
            "outside_time_s": self.outside_time_s,
            "outside_share": (
                self.outside_energy_j / self.total_energy_j if self.total_energy_j > 0 else 0.0
            ),
            "meter": dict(self.meter),
            "regions": [r.to_dict() for r in self.regions],
            # Microsecond times and milliwatt powers: what the sensors resolve, and a
            # long run's trace stays a small file.
            "samples": {
                "time_s": [round(t, 6) for t, _ in self.samples],
                "power_w": [round(p, 3) for _, p in self.samples],
                "field": self.meter.get("trace_field") or self.meter.get("power_field"),
            },
            "events": [e.to_dict() for e in self.events],
        }


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _parents(calls: Sequence[RegionWindow]) -> list[int]:
    """Each call's enclosing call (index into ``calls``; -1 for none).

    The parent of a call with path ``(…, p, name)`` is a call of path ``(…, p)`` of the
    same process and thread that encloses it in time (the latest-starting one, for data
    that does not name its thread). Time containment alone would nest one thread's region
    inside another thread's that happens to enclose it.
    """
    groups: dict[tuple[int, int, tuple[str, ...]], list[int]] = {}
    for k in sorted(range(len(calls)), key=lambda k: calls[k].start_s):
        c = calls[k]
        groups.setdefault((c.pid, c.tid, c.path), []).append(k)
    starts = {key: [calls[k].start_s for k in ks] for key, ks in groups.items()}
    parents = []
    for c in calls:
        key = (c.pid, c.tid, c.path[:-1])
        candidates = groups.get(key, []) if len(c.path) > 1 else []
        found = -1
        i = bisect.bisect_right(starts.get(key, []), c.start_s) - 1
        while i >= 0:
            k = candidates[i]
            if calls[k].end_s >= c.end_s:
                found = k
                break
            i -= 1
        parents.append(found)
    return parents


def _region_trace(
    calls: Sequence[RegionWindow], parents: Sequence[int], meter: Any, start_s: float, end_s: float
) -> Trace:
    """The calls as events (nested as ``parents`` says) and the meter's energies as their
    power series, times in ns from ``start_s``."""
    # Imported here: an instrumented program imports this module and needs none of them.
    import numpy as np

    from eopt.model.trace import Event, PowerSeries, Trace

    times_ns, power = meter.attribution_series(
        start_s, end_s, [c.start_s for c in calls], [c.end_s for c in calls]
    )
    # Rounded as a trace folder stores power (power_watts to the µW), so that
    # `eopt attribute` on the trace a run writes finds these very numbers.
    power = np.round(power, TRACE_POWER_DECIMALS)
    device = int(getattr(meter.device, "index", 0) or 0)
    series = PowerSeries("GPU", device, times_ns, power, getattr(meter.device, "name", ""))
    events = tuple(
        Event(
            k + 1,
            parents[k] + 1,
            c.name,
            "USER_REGION",
            round((c.start_s - start_s) * 1e9),  # as the series' knots are placed
            round((c.end_s - start_s) * 1e9),
        )
        for k, c in enumerate(calls)
    )
    return Trace(events, (series,), {"meter": meter.describe()}, "eopt measure")


def attribute_regions(
    windows: Iterable[RegionWindow], meter: Any, start_s: float, end_s: float
) -> RegionReport:
    """Charge each region its energy, by the one attribution engine.

    The region calls become the events of a trace (nested as their paths say, per process
    and thread) and the meter's readings its power series
    (:meth:`~eopt.measure.meter.Meter.attribution_series`); :func:`eopt.attribute.engine.
    attribute` charges them. A region that overlaps no other region gets the energy the
    meter reports for its window (:meth:`~eopt.measure.meter.Meter.energy`, to the µW of
    power); regions that overlap without nesting (threads, processes) share the overlap
    equally.

    Args:
        windows: Closed region calls (any nesting, any processes, one clock).
        meter: A started :class:`eopt.measure.meter.Meter` on the same clock.
        start_s: Start of the measured span (the parts of windows outside it are cut off).
        end_s: End of the measured span.

    Returns:
        Inclusive energy per region (nested regions are also counted in their parents),
        and the energy of the span outside every region; the regions' exclusive energies
        and the outside energy add up to the total.
    """
    from eopt.attribute.engine import attribute  # not at import: see _region_trace

    span = meter.energy(start_s, end_s)  # also: the meter covers the span, or it raises
    calls: list[RegionWindow] = []
    for w in windows:
        a, b = max(w.start_s, start_s), min(w.end_s, end_s)
        if b < a:
            continue  # entirely outside the measured span
        calls.append(RegionWindow(w.name, w.path, a, b, w.pid, w.tid, w.kind))
    parents = _parents(calls)
    # The meter's own view of each call's window: its error bound and resolution.
    window_energies = [meter.energy(c.start_s, c.end_s) for c in calls]
    energies = [0.0] * len(calls)
    total, outside = span.energy_j, span.energy_j
    trace = None
    if round((end_s - start_s) * 1e9) >= 2:  # else an empty span: nothing to share
        trace = _region_trace(calls, parents, meter, start_s, end_s)
        att = attribute(trace)
        for call in att.calls:
            energies[call.event.id - 1] = call.inclusive_energy_j or 0.0
        total, outside = att.total_energy_j, max(0.0, att.outside_energy_j)
    groups: dict[str, list[int]] = {}
    for k, c in enumerate(calls):
        groups.setdefault(c.key, []).append(k)
    # Outer regions before the regions nested in them: by first start, then depth.
    order = sorted(
        groups.items(), key=lambda kv: (min(calls[k].start_s for k in kv[1]), calls[kv[1][0]].depth)
    )
    stats = []
    for key, ks in order:
        energy = sum(energies[k] for k in ks)
        stats.append(
            RegionStats(
                key=key,
                depth=calls[ks[0]].depth,
                calls=len(ks),
                time_s=sum(calls[k].duration_s for k in ks),
                energy_j=energy,
                error_j=sum(window_energies[k].error_j for k in ks),
                short_calls=sum(1 for k in ks if window_energies[k].short),
                share=energy / total if total > 0 else 0.0,
                kind=calls[ks[0]].element_kind,
            )
        )
    events = [
        RegionEvent(
            name=c.name,
            path=c.key,
            depth=c.depth,
            pid=c.pid,
            start_s=c.start_s - start_s,
            end_s=c.end_s - start_s,
            energy_j=energies[k],
            error_j=window_energies[k].error_j,
            id=k + 1 if trace is not None else 0,
            parent_id=parents[k] + 1 if trace is not None else 0,
            kind=c.element_kind,
        )
        for k, c in enumerate(calls)
    ]
    # Outer before inner at equal starts, so trace viewers nest the slices.
    events.sort(key=lambda e: (e.start_s, e.depth))
    inside_time = sum(b - a for a, b in _union((c.start_s, c.end_s) for c in calls))
    samples = meter.power_samples(start_s, end_s, edges=True)
    return RegionReport(
        regions=tuple(stats),
        total_energy_j=total,
        total_time_s=span.duration_s,
        outside_energy_j=outside,
        outside_time_s=max(0.0, span.duration_s - inside_time),
        meter=meter.describe(),
        samples=tuple((t - start_s, p) for t, p in samples),
        events=tuple(events),
        trace=trace,
    )
