"""``eopt report``: one standalone offline HTML file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from eopt.cli._common import UserError, check_output, console
from eopt.cli.options import csv_options, force_option, quiet_option, recording_options
from eopt.cli.trace import is_recording

__all__ = ["command"]


@click.command("report")
@click.option(
    "--library",
    "libraries",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="LIB.jsonl",
    help="Signature library: element frontier plots (repeatable).",
)
@click.option(
    "--schedule",
    "schedule_path",
    type=click.Path(dir_okay=False),
    metavar="S.json",
    help="Schedule: Gantt chart, energy breakdown, savings, chosen point.",
)
@click.option(
    "--frontier",
    "frontier_path",
    type=click.Path(dir_okay=False),
    metavar="F.csv",
    help="Frontier table from `eopt solve --frontier` or `eopt frontier --csv`.",
)
@click.option(
    "--measurement",
    "measurement_path",
    type=click.Path(),
    metavar="M.json|TRACE",
    help="Measured run (`eopt measure --json`) or a recorded trace folder: regions, power.",
)
@click.option(
    "--check",
    "check_path",
    type=click.Path(dir_okay=False),
    metavar="C.json",
    help="Result of `eopt check -o`: prediction against measurement, interactions found.",
)
@click.option(
    "--perfetto",
    "perfetto_path",
    type=click.Path(dir_okay=False),
    metavar="T.json",
    help="Also write a Perfetto / Chrome trace of the schedule and measurement.",
)
@click.option("--title", default="eopt report", show_default=True, help="Page title.")
@click.option(
    "-o",
    "--output",
    default="report.html",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="HTML file to write.",
)
@csv_options
@force_option()
@quiet_option()
def command(
    libraries: tuple[str, ...],
    schedule_path: str | None,
    frontier_path: str | None,
    measurement_path: str | None,
    check_path: str | None,
    perfetto_path: str | None,
    title: str,
    output: str,
    force: bool,
    **csv: Any,
) -> None:
    """Write a standalone HTML report (inline CSS and SVG; opens offline).

    \b
    Examples:
      eopt report --schedule schedule.json --frontier frontier.csv -o report.html
      eopt report --library gemm.jsonl -o gemm.html
      eopt report --measurement run.json --perfetto run.trace.json -o run.html
      eopt report --measurement run-trace/ -o run.html
      eopt report --measurement power.csv --events events.csv -o run.html
      eopt report --check check.json -o check.html
    """
    from eopt.model.library import read_library
    from eopt.model.schedule import read_schedule
    from eopt.report import read_frontier_csv, read_measurement, write_report, write_trace

    if not (libraries or schedule_path or frontier_path or measurement_path or check_path):
        raise UserError(
            "nothing to report: give --schedule, --library, --frontier, --measurement "
            "and/or --check"
        )
    if csv.get("events_path") and not (measurement_path and is_recording(measurement_path)):
        raise UserError(
            f"--events {csv['events_path']}: gives a power CSV its regions; add "
            "--measurement POWER.csv"
        )
    check = None
    if check_path:
        from eopt.check.result_file import CheckFileError, read_check_result

        try:
            check = read_check_result(check_path)
        except CheckFileError as exc:
            raise UserError(str(exc)) from None
    schedule = read_schedule(schedule_path) if schedule_path else None
    library = [sig for path in libraries for sig in read_library(path)]
    frontier = read_frontier_csv(frontier_path) if frontier_path else None
    measurement = recording = None
    if measurement_path and is_recording(measurement_path):
        from eopt.model.trace import TraceError
        from eopt.report.recording import load_recording, measurement_from_attribution

        try:
            recording = load_recording(measurement_path, recording_options(**csv))
        except TraceError as exc:
            raise UserError(str(exc)) from None
        traces, att = recording
        measurement = measurement_from_attribution(att, traces[0])
    elif measurement_path:
        measurement = read_measurement(measurement_path)
    # After the inputs are read: a bad input is the first thing to hear about.
    check_output(output, force)
    check_output(perfetto_path, force, option="--perfetto")
    sources = [
        p for p in (*libraries, schedule_path, frontier_path, measurement_path, check_path) if p
    ]
    target = write_report(
        output,
        schedule=schedule,
        library=library,
        frontier=frontier,
        measurement=measurement,
        check=check,
        title=title,
        sources=[Path(s).name for s in sources],
    )
    console.print(f"Report written to [bold]{escape(str(target))}[/]", highlight=False)
    if perfetto_path:
        if schedule is None and measurement is None:
            raise UserError("--perfetto needs --schedule or --measurement to trace")
        if recording is not None:
            trace = write_trace(perfetto_path, schedule, None, recording)
        else:
            trace = write_trace(perfetto_path, schedule, measurement)
        console.print(
            f"Trace written to [bold]{escape(str(trace))}[/] (open at ui.perfetto.dev)",
            highlight=False,
        )
