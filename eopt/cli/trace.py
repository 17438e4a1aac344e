"""``eopt trace``: export a schedule (and a measurement) as a Perfetto / Chrome trace."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape

from eopt.cli._common import UserError, check_output, console
from eopt.cli.options import csv_options, force_option, quiet_option, recording_options

__all__ = ["command", "is_recording"]


def is_recording(path: str) -> bool:
    """Whether ``path`` is a recorded trace rather than a JSON file of eopt's."""
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        return True
    if p.suffix.lower() == ".csv":
        return True
    # A connector run named by its prefix (FOLDER/<run>) does not exist as a file.
    return not p.exists() and p.parent.is_dir() and any(p.parent.glob(f"{p.name}-nvml-*.csv"))


@click.command("trace")
@click.argument("schedule_path", metavar="SCHEDULE.json|TRACE", required=False, type=click.Path())
@click.option(
    "--measurement",
    "measurement_path",
    type=click.Path(dir_okay=False),
    metavar="M.json",
    help="Add a measured run (power samples, timed regions).",
)
@click.option(
    "-o",
    "--output",
    default="trace.json",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Trace file to write.",
)
@csv_options
@force_option()
@quiet_option()
def command(
    schedule_path: str | None,
    measurement_path: str | None,
    output: str,
    force: bool,
    **csv: Any,
) -> None:
    """Export a Perfetto / Chrome trace: elements per device, power as counters.

    The argument is a schedule from `eopt solve`, or a recorded trace (a trace folder as
    `eopt measure --trace-dir` and energy-dashboard-for-kokkos write, rank_<N>/ folders, one
    run of the Kokkos NVML connector): its regions and kernels become nested slices, each
    power series a counter track. Open the file at https://ui.perfetto.dev.

    \b
    Examples:
      eopt trace schedule.json -o trace.json
      eopt trace schedule.json --measurement run.json -o trace.json
      eopt trace run-trace/ -o run.perfetto.json
      eopt trace power.csv --events events.csv -o run.perfetto.json
    """
    from eopt.model.schedule import read_schedule
    from eopt.model.trace import TraceError
    from eopt.report import read_measurement, write_trace
    from eopt.report.recording import load_recording

    if not schedule_path and not measurement_path:
        raise UserError("give a SCHEDULE.json or a trace folder, and/or --measurement M.json")
    schedule = recording = None
    if schedule_path and is_recording(schedule_path):
        try:
            recording = load_recording(schedule_path, recording_options(**csv))
        except TraceError as exc:
            raise UserError(str(exc)) from None
    elif schedule_path:
        if csv.get("events_path"):
            raise UserError(
                f"--events {csv['events_path']}: gives a power CSV its regions; "
                f"{schedule_path} is not a power CSV or trace folder"
            )
        schedule = read_schedule(schedule_path)
    measurement = read_measurement(measurement_path) if measurement_path else None
    check_output(output, force)  # after the inputs: a bad input is the first thing to hear
    target = write_trace(output, schedule, measurement, recording)
    console.print(
        f"Trace written to [bold]{escape(str(target))}[/] (open at ui.perfetto.dev)",
        highlight=False,
    )
