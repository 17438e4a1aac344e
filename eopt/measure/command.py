"""The energy of one command and of the regions it reports (``eopt measure -- CMD``).

The command runs as a child process with ``EOPT_REGIONS_FILE`` set (see
:mod:`eopt.measure.regions`); the meter watches the GPU on the wall clock meanwhile, and the
child's region windows are charged from the meter's trace afterwards, by the one
attribution engine (:func:`eopt.measure.regions.attribute_regions`): regions that overlap
without nesting share the overlap, as in ``eopt attribute``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from eopt.devices.base import Device, WallClock
from eopt.measure.meter import Meter, MeterMethod
from eopt.measure.regions import (
    REGIONS_FILE_ENV,
    RegionRecorder,
    RegionReport,
    attribute_regions,
    read_region_windows,
    use_recorder,
)
from eopt.model.trace import PowerSeries, Trace, region_events

__all__ = [
    "CommandMeasurement",
    "MeasureError",
    "RegionSession",
    "measure_command",
    "measure_regions",
    "require_wall_clock",
    "run_child",
    "run_program",
]


#: What the power series of a trace written by ``eopt measure`` is (its metadata says so).
SERIES_NOTE = (
    "the meter's energies as power samples: knots at every counter reading or sensor "
    "refresh and every region edge, whose trapezoid is the meter's energy between any two "
    "knots, with a knot mid-interval that keeps each interval's energy (the power between "
    "knots is not a reading)"
)


class MeasureError(RuntimeError):
    """A command cannot be measured as asked (simulated GPU, command not found …)."""


@dataclass(frozen=True)
class CommandMeasurement:
    """The outcome of :func:`measure_command`.

    Attributes:
        command: The command as run.
        returncode: The child's exit status.
        report: Per-region energy, totals and the energy outside every region.
        device: The measured device's name.
        model: Its model.
    """

    command: tuple[str, ...]
    returncode: int
    report: RegionReport
    device: str
    model: str
    start_unix_ns: int = 0
    gpu: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (``eopt measure --json``)."""
        return {
            "command": list(self.command),
            "returncode": self.returncode,
            "device": self.device,
            "model": self.model,
            "gpu": self.gpu,
            "start_unix_ns": self.start_unix_ns,
            **self.report.to_dict(),
        }

    def to_trace(self) -> Trace:
        """The run as a trace, times in ns since the epoch: what the report's energies
        were attributed from, so ``eopt attribute`` on it gives the same numbers.

        The events are the region calls nested as their paths say (per process and
        thread); the power series is the meter's energies as power samples
        (:meth:`eopt.measure.meter.Meter.attribution_series`: the energy counter's, on
        the counter path), not the sensor readings of ``samples``, which are for showing.
        A report without its trace (built by hand) gives the readings and nests the
        regions by time.
        """
        rep = self.report
        origin = self.start_unix_ns
        meta = {
            "command": list(self.command),
            "returncode": self.returncode,
            "device": self.device,
            "model": self.model,
            "meter": dict(rep.meter),
            "recorded_by": "eopt measure",
        }
        if rep.trace is None:
            series = (PowerSeries.from_seconds("GPU", self.gpu, rep.samples, origin),)
            events = region_events(((e.name, e.start_s, e.end_s) for e in rep.events), origin)
            return Trace(tuple(events), series, meta, " ".join(self.command))
        meta["power_series"] = SERIES_NOTE
        return Trace(
            tuple(
                dataclasses.replace(e, start_ns=e.start_ns + origin, end_ns=e.end_ns + origin)
                for e in rep.trace.events
            ),
            tuple(
                PowerSeries(s.domain, self.gpu, s.times_ns + origin, s.power_w, s.where)
                for s in rep.trace.series
            ),
            meta,
            " ".join(self.command),
        )


def require_wall_clock(device: Device, what: str) -> None:
    """Refuse to measure real work on a device whose clock is not the wall clock.

    The simulated GPU runs on virtual time and only "sees" simulated kernels: a real
    process or Python function leaves its sensors untouched, so any number read from them
    would be made up.

    Raises:
        MeasureError: naming the device and what to do instead.
    """
    if not isinstance(device.clock, WallClock):
        raise MeasureError(
            f"{what} runs real work, but {device.name} ({device.model}) is simulated: its "
            "sensors cannot see a real process, so its GPU energy cannot be measured here. "
            "Run on a machine with an NVIDIA GPU, or characterize a simulated kernel "
            "instead (eopt sweep sim:gemm)."
        )


def run_child(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    stdout: IO[Any] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``command`` to its end, its standard output sent to ``stdout``.

    A stream without a file descriptor (a test runner's capture) gets the output once the
    command has ended; None leaves the output on this process's stdout.

    Raises:
        FileNotFoundError, PermissionError: as :func:`subprocess.run`.
    """
    try:
        fd: IO[Any] | int | None = stdout
        if stdout is not None:
            stdout.flush()
            stdout.fileno()
    except (AttributeError, OSError, ValueError):
        fd = subprocess.PIPE
    proc = subprocess.run(list(command), env=dict(env), cwd=cwd, check=False, stdout=fd)
    if fd is subprocess.PIPE and stdout is not None:
        stdout.write(proc.stdout.decode("utf-8", "replace"))
    return proc


def run_program(
    command: Sequence[str],
    env: Mapping[str, str],
    error: type[Exception],
    stdout: IO[Any] | None = None,
) -> int:
    """Run a user's program to its end, with ``env`` added to this process's environment.

    Args:
        command: The program and its arguments.
        env: Variables to set for it, over this process's environment.
        error: What to raise, in one line, when the program cannot be started.
        stdout: Where its standard output goes (see :func:`run_child`).

    Returns:
        Its exit status.
    """
    if not command:
        raise error("no command given: put the program after `--`, e.g. -- python train.py")
    try:
        return run_child(command, {**os.environ, **env}, stdout=stdout).returncode
    except FileNotFoundError:
        raise error(f"command not found: {command[0]!r}") from None
    except PermissionError:
        raise error(f"command is not executable: {command[0]!r}") from None


def measure_command(
    command: Sequence[str],
    device: Device,
    *,
    method: MeterMethod = "auto",
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    regions_file: str | os.PathLike[str] | None = None,
    stdout: IO[Any] | None = None,
) -> CommandMeasurement:
    """Run ``command`` and measure the device's energy during it, per region.

    Args:
        command: Program and arguments (no shell; pass ``["sh", "-c", "…"]`` for one).
        device: The GPU to watch; its clock must be the wall clock.
        method: Meter method (``auto``: the energy counter where it exists).
        env: Extra environment variables for the child.
        cwd: The child's working directory.
        regions_file: Where the child appends its regions (a temporary file by default).
        stdout: Where the child's standard output goes (None: this process's; a
            ``--json`` caller passes ``sys.stderr``, so its stdout carries JSON only).

    Raises:
        MeasureError: on a simulated device, an empty command, or one that cannot start.
    """
    if not command:
        raise MeasureError("no command given; usage: eopt measure -- CMD [ARGS…]")
    require_wall_clock(device, "eopt measure")
    with tempfile.TemporaryDirectory(prefix="eopt-measure-") as tmp:
        path = Path(regions_file) if regions_file is not None else Path(tmp) / "regions.jsonl"
        path.unlink(missing_ok=True)
        child_env = {**os.environ, **(env or {}), REGIONS_FILE_ENV: str(path)}
        with Meter(device, method=method) as meter:
            device.clock.sleep(meter.period_s)  # a reading before the command starts
            start = meter.mark()
            # The epoch time of the span's start, so the run's trace can be compared with
            # other recordings (perf_counter has no fixed origin).
            start_unix_ns = time.time_ns() - round((time.perf_counter() - start) * 1e9)
            try:
                proc = run_child(command, child_env, cwd=cwd, stdout=stdout)
            except FileNotFoundError:
                raise MeasureError(f"command not found: {command[0]!r}") from None
            except PermissionError:
                raise MeasureError(f"command is not executable: {command[0]!r}") from None
            device.synchronize()
            end = meter.mark()
            windows = read_region_windows(path)
            report = attribute_regions(windows, meter, start, end)
    return CommandMeasurement(
        command=tuple(command),
        returncode=proc.returncode,
        report=report,
        device=device.name,
        model=device.model,
        start_unix_ns=start_unix_ns if isinstance(device.clock, WallClock) else 0,
        gpu=int(getattr(device, "index", 0) or 0),
    )


@dataclass
class RegionSession:
    """What :func:`measure_regions` yields; ``report`` is set when the block ends."""

    meter: Meter
    recorder: RegionRecorder
    report: RegionReport | None = None


@contextlib.contextmanager
def measure_regions(device: Device, method: MeterMethod = "auto") -> Iterator[RegionSession]:
    """Measure the regions of code running in this process, on ``device``'s clock.

    Inside the block, :func:`eopt.measure.regions.region` records on the device's clock
    (virtual time on the simulated GPU, so simulated kernels can be instrumented too)::

        with measure_regions(gpu) as session:
            with regions.region("forward"):
                gpu.launch("gemm")
        print(session.report.to_dict())

    The report is built even when the block raises (the regions that ran are kept).
    """
    recorder = RegionRecorder(clock=device.clock)
    with Meter(device, method=method) as meter:
        session = RegionSession(meter, recorder)
        start = meter.mark()
        try:
            with use_recorder(recorder):
                yield session
        finally:
            device.synchronize()
            end = meter.mark()
            session.report = attribute_regions(recorder.windows, meter, start, end)
