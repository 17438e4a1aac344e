"""``eopt trace``: export a schedule (and a measurement) as a Perfetto / Chrome trace."""

from __future__ import annotations

import click
from rich.markup import escape

from eopt.cli._common import UserError, console

__all__ = ["command"]


@click.command("trace")
@click.argument(
    "schedule_path", metavar="SCHEDULE.json", required=False, type=click.Path(dir_okay=False)
)
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
def command(schedule_path: str | None, measurement_path: str | None, output: str) -> None:
    """Export a Perfetto / Chrome trace: elements per device, power as counters.

    Open the file at https://ui.perfetto.dev (or chrome://tracing).

    \b
    Examples:
      eopt trace schedule.json -o trace.json
      eopt trace schedule.json --measurement run.json -o trace.json
    """
    from eopt.plan.schedule import read_schedule
    from eopt.report import read_measurement, write_trace

    if not schedule_path and not measurement_path:
        raise UserError("give a SCHEDULE.json and/or --measurement M.json to trace")
    schedule = read_schedule(schedule_path) if schedule_path else None
    measurement = read_measurement(measurement_path) if measurement_path else None
    target = write_trace(output, schedule, measurement)
    console.print(
        f"Trace written to [bold]{escape(str(target))}[/] (open at ui.perfetto.dev)",
        highlight=False,
    )
