"""Record one run of a command as a trace: every power source, every event source.

Power sources (each GPU's meter, the node's RAPL zones, or none) run beside the command;
event sources are the regions a Python program reports (``$EOPT_REGIONS_FILE``) and the
Kokkos Tools connector's events. Everything lands on one clock, ns since the UNIX epoch,
and in one trace folder (the dashboard layout) that the attribution engine reads like any
other trace::

    run = record_command(["./app"], [GpuPowerSource(gpu)], trace_dir="run", kokkos=True)
    attribute(run.traces[0])

Under MPI, the connector writes ``rank_<N>/events.csv`` per rank; the power of the node is
written once, beside the rank folders, and the reader merges the ranks' events onto it, so
regions of different ranks that overlap share the node's power instead of each being
charged all of it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from eopt.devices.base import Device, WallClock
from eopt.measure.meter import Meter, MeterMethod
from eopt.measure.regions import REGIONS_FILE_ENV, read_region_windows
from eopt.model.lockfile import LockBusyError, ProcessLock
from eopt.model.trace import Event, PowerSeries, Trace, TraceError, region_events
from eopt.model.trace_io import RANK_DIR, read_events, read_traces, write_dashboard

__all__ = [
    "GpuPowerSource",
    "PowerSource",
    "RecordedCommand",
    "RunOutcome",
    "SessionError",
    "record_command",
    "session_recorder",
    "trace_folder",
]


class SessionError(RuntimeError):
    """The command cannot be recorded as asked (not found, folder in use …)."""


class PowerSource(Protocol):
    """Anything that samples power beside a run and hands back power series."""

    def start(self) -> None:
        """Begin sampling."""

    def stop(self) -> list[PowerSeries]:
        """End sampling; the series, timestamps in ns since the UNIX epoch."""

    def describe(self) -> dict[str, Any]:
        """What it is and how it sampled (for the trace's metadata)."""


def _epoch_offset_ns() -> int:
    """time.time_ns() − perf_counter_ns(): converts the monotonic clock to the epoch."""
    return time.time_ns() - time.perf_counter_ns()


class GpuPowerSource:
    """One GPU's meter (energy counter or power sampler) as a power series.

    Args:
        device: A GPU on the wall clock (NVML, or a test's fake).
        method: Meter method.
    """

    def __init__(self, device: Device, method: MeterMethod = "auto") -> None:
        if not isinstance(device.clock, WallClock):
            raise SessionError(
                f"{device.name} ({device.model}) is simulated: its sensors cannot see a real "
                "process; record on a machine with an NVIDIA GPU"
            )
        self.device = device
        self.method = method
        self._meter: Meter | None = None
        self._start = 0.0
        self._offset = 0

    def start(self) -> None:
        self._meter = Meter(self.device, method=self.method).start()
        self.device.clock.sleep(self._meter.period_s)  # a reading before the run starts
        self._offset = _epoch_offset_ns()
        self._start = self._meter.mark()

    def stop(self) -> list[PowerSeries]:
        meter = self._meter
        if meter is None:
            raise SessionError("GpuPowerSource.stop() before start()")
        try:
            self.device.synchronize()
            end = meter.mark()
            # The meter's energies as samples (exact at every counter reading), not the
            # readings for display: counter deltas must not become a coarser trapezoid.
            times_ns, power_w = meter.attribution_series(self._start, end)
        finally:
            meter.stop()
        index = int(getattr(self.device, "index", 0) or 0)
        origin_ns = self._offset + round(self._start * 1e9)
        return [PowerSeries("GPU", index, origin_ns + times_ns, power_w, self.device.name)]

    def describe(self) -> dict[str, Any]:
        meter = self._meter.describe() if self._meter is not None else {}
        return {
            "source": "gpu",
            "device": self.device.name,
            "model": self.device.model,
            "index": int(getattr(self.device, "index", 0) or 0),
            "meter": meter,
        }


@dataclass(frozen=True)
class RecordedCommand:
    """The outcome of :func:`record_command`.

    Attributes:
        command: The command as run.
        returncode: Its exit status.
        trace_dir: The trace folder written.
        traces: The trace(s) read back from it (one; or one merged over MPI ranks).
        start_unix_ns: When the command started, ns since the epoch.
        end_unix_ns: When it ended.
        sources: Each power source's description.
        warnings: Plain-words notes (no power source, connector counts …).
    """

    command: tuple[str, ...]
    returncode: int
    trace_dir: Path
    traces: tuple[Trace, ...]
    start_unix_ns: int
    end_unix_ns: int
    sources: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = field(default=())


@contextlib.contextmanager
def trace_folder(folder: str | os.PathLike[str], force: bool = False) -> Iterator[Path]:
    """Hold a trace folder for one writer: locked, checked and emptied of an older trace.

    The lock (``.<name>.eopt-lock`` beside the folder) keeps a second ``eopt measure``
    from writing the same folder at once, which would mix two runs' events under one run's
    metadata; the second is refused, naming the first.

    Raises:
        SessionError: when the folder is in use, is a file, or is not empty without
            ``force``.
    """
    path = Path(folder)
    lock = ProcessLock(path.parent / f".{path.name}.eopt-lock")
    try:
        lock.acquire()
    except LockBusyError as exc:
        who = exc.holder.describe() if exc.holder is not None else "another process"
        raise SessionError(
            f"{path}: another eopt run is writing this trace folder ({who}); wait for it, or "
            "choose another folder"
        ) from None
    try:
        _prepare(path, force)
        yield path
    finally:
        lock.release()


#: What an older trace leaves in its folder (the connector's records while it runs).
_TRACE_FILES = ("events.csv", "power_samples.csv", "metadata.json", "events.records")


def _prepare(folder: Path, force: bool) -> None:
    if folder.exists() and not folder.is_dir():
        raise SessionError(f"{folder}: exists and is not a folder; name a folder for the trace")
    if folder.is_dir() and any(folder.iterdir()):
        if not force:
            raise SessionError(
                f"{folder}: not empty; choose a new folder or pass --force to overwrite"
            )
        for stale in _TRACE_FILES:
            (folder / stale).unlink(missing_ok=True)
        for child in folder.iterdir():
            if child.is_dir() and RANK_DIR.match(child.name):
                for stale in _TRACE_FILES:
                    (child / stale).unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)


def record_command(
    command: Sequence[str],
    sources: Sequence[PowerSource],
    trace_dir: str | os.PathLike[str],
    *,
    kokkos_library: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    force: bool = False,
) -> RecordedCommand:
    """Run ``command`` once with every power source sampling, and write its trace folder.

    Args:
        command: Program and arguments (no shell).
        sources: Power sources; none is allowed (events only, power attributed later).
        trace_dir: The trace folder to write (dashboard layout).
        kokkos_library: The Kokkos Tools connector to attach (see
            :func:`eopt.measure.kokkos.build_connector`); None attaches nothing.
        env: Extra environment variables for the child.
        force: Overwrite a trace folder that is not empty.

    Raises:
        SessionError: an empty command, one that cannot start, or a folder in use.
        TraceError: when what was recorded cannot be read back (a bug, or a disk full).
    """
    if not command:
        raise SessionError("no command given; usage: eopt measure -- CMD [ARGS…]")
    folder = Path(trace_dir)
    with trace_folder(folder, force):
        return _record(command, sources, folder, kokkos_library, env)


def _record(
    command: Sequence[str],
    sources: Sequence[PowerSource],
    folder: Path,
    kokkos_library: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
) -> RecordedCommand:
    with tempfile.TemporaryDirectory(prefix="eopt-session-") as tmp:
        regions_file = Path(tmp) / "regions.jsonl"
        child_env = {**os.environ, **(env or {}), REGIONS_FILE_ENV: str(regions_file)}
        if kokkos_library is not None:
            from eopt.measure.kokkos import connector_env

            child_env.update(connector_env(kokkos_library, folder))
        started: list[PowerSource] = []
        try:
            for source in sources:
                source.start()
                started.append(source)
            offset = _epoch_offset_ns()
            start_ns = time.time_ns()
            try:
                proc = subprocess.run(list(command), env=child_env, check=False)
            except FileNotFoundError:
                raise SessionError(f"command not found: {command[0]!r}") from None
            except PermissionError:
                raise SessionError(f"command is not executable: {command[0]!r}") from None
            end_ns = time.time_ns()
        finally:
            series = [s for source in started for s in source.stop()]
        windows = read_region_windows(regions_file)
        python_spans = [(w.name, w.start_s, w.end_s) for w in windows]
    descriptions = tuple(source.describe() for source in started)
    warnings: list[str] = []
    meta: dict[str, Any] = {
        "command": list(command),
        "returncode": proc.returncode,
        "start_unix_ns": start_ns,
        "end_unix_ns": end_ns,
        "recorded_by": "eopt measure",
        "power_sources": list(descriptions),
    }
    rank_dirs = sorted(
        (int(m.group(1)), c)
        for c in folder.iterdir()
        if c.is_dir() and (m := RANK_DIR.match(c.name))
    )
    connector_events = _connector_events(folder) if not rank_dirs else []
    connector_meta = folder / "metadata.json"
    if kokkos_library is not None and connector_meta.exists() and not rank_dirs:
        import json

        try:
            meta["connector"] = json.loads(connector_meta.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            warnings.append(f"{connector_meta}: the connector's metadata is unreadable")
        ended = meta.get("connector", {}).get("ended")
        said = meta.get("connector", {}).get("message")
        if ended not in (None, "finalize") and isinstance(said, str) and said:
            # A program that died: say how, and what of its trace survived.
            warnings.append(said)
        counts = meta.get("connector", {}).get("counts", {})
        bad = {k: v for k, v in counts.items() if k != "events" and v}
        if bad:
            warnings.append(
                "the Kokkos connector saw "
                + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in bad.items())
            )
    first_id = max((e.id for e in connector_events), default=0)
    python_events = region_events(python_spans, offset, first_id)
    events = tuple(connector_events) + tuple(python_events)
    if kokkos_library is not None and not events and not rank_dirs:
        warnings.append(
            "the Kokkos connector recorded no events: is the program built with Kokkos, and "
            "does it call Kokkos::initialize / Kokkos::finalize?"
        )
    if rank_dirs:
        meta["ranks"] = [r for r, _ in rank_dirs]
        if python_events:
            warnings.append("Python regions of an MPI run are not recorded per rank; dropped")
    trace = Trace(events, tuple(series), meta, str(folder))
    write_dashboard(trace, folder, events=not rank_dirs)
    if not series:
        warnings.append(
            "no power was recorded: the trace holds events only; attribute later with power "
            f"recorded elsewhere, e.g. `eopt attribute power.csv --events {folder}/events.csv`"
        )
    traces = tuple(read_traces(folder)) if series else (trace,)
    return RecordedCommand(
        command=tuple(command),
        returncode=proc.returncode,
        trace_dir=folder,
        traces=traces,
        start_unix_ns=start_ns,
        end_unix_ns=end_ns,
        sources=descriptions,
        warnings=tuple(warnings),
    )


def _connector_events(folder: Path) -> list[Event]:
    """The connector's events.csv in ``folder`` (none when it wrote nothing)."""
    if not (folder / "events.csv").exists():
        return []
    try:
        return read_events(folder / "events.csv")
    except TraceError as exc:
        raise TraceError(f"the Kokkos connector's output is unreadable: {exc}") from None


@dataclass(frozen=True)
class RunOutcome:
    """What recording one run produced (its trace folder is already written).

    Attributes:
        returncode: The command's exit status.
        start_unix_ns: When it started, ns since the UNIX epoch.
        time_s: Its length, in s.
        energy_j: Its total energy over every power series, in J (None without power).
    """

    returncode: int
    start_unix_ns: int
    time_s: float
    energy_j: float | None


def session_recorder(
    command: Sequence[str],
    sources: Callable[[], Sequence[PowerSource]],
    *,
    kokkos_library: str | os.PathLike[str] | None = None,
) -> Callable[[Path], Any]:
    """Runs recorded by :func:`record_command` (for ``eopt.runs.runset.record_runs``).

    Args:
        command: Program and arguments.
        sources: Makes fresh power sources for each run (a sampler runs once).
        kokkos_library: The Kokkos connector to attach, if any.
    """
    from eopt.attribute.engine import attribute

    def record(folder: Path) -> RunOutcome:
        run = record_command(command, sources(), folder, kokkos_library=kokkos_library)
        energy = None
        if any(t.series for t in run.traces):
            energy = sum(attribute(t).total_energy_j for t in run.traces)
        return RunOutcome(
            run.returncode,
            run.start_unix_ns,
            (run.end_unix_ns - run.start_unix_ns) * 1e-9,
            energy,
        )

    return record
