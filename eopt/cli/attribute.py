"""``eopt attribute PATH``: per-region energy of a recorded trace."""

from __future__ import annotations

import click

from eopt.cli._common import UserError, check_output, console, note, write_json
from eopt.cli.options import (
    csv_options,
    domain_option,
    force_option,
    json_option,
    json_output_option,
    quiet_option,
    recording_options,
)

__all__ = ["command"]


@click.command("attribute")
@click.argument("path", metavar="PATH", type=click.Path())
@json_option("Print eopt.attribution/1 JSON on stdout.")
@json_output_option()
@domain_option()
@click.option("--calls", is_flag=True, help="JSON: also list every call with its energy.")
@click.option("--regions-only", is_flag=True, help="Table: hide kernels and copies.")
@csv_options
@quiet_option()
@force_option()
def command(
    path: str,
    as_json: bool,
    output: str | None,
    domain: str | None,
    calls: bool,
    regions_only: bool,
    time_column: str | None,
    power_column: str | None,
    time_unit: str,
    power_unit: str | None,
    tz: str | None,
    events_path: str | None,
    force: bool,
) -> None:
    """Charge a recorded run's energy to its regions and kernels.

    PATH is a trace folder (events.csv + power_samples.csv, as energy-dashboard-for-kokkos
    and `eopt measure --trace-dir` write; rank_<N>/ folders for MPI), one run of the Kokkos
    NVML connector (FOLDER/<run> for <run>-nvml-power.csv and its regions and kernels), an
    eopt measurement .json, or any power CSV (nvidia-smi, DCGM; with --events for regions).

    Per region name: calls, time, inclusive energy, exclusive energy (without nested
    events), mean power and share of the total; per power series its energy; the energy
    outside every event. Power is integrated with the trapezoid rule, interpolated at event
    edges; events that overlap without nesting share the overlap equally, so exclusive +
    outside = total. A region outside the power trace has unknown energy, never 0.

    \b
    Examples:
      eopt attribute run-trace/
      eopt attribute data/fdbscan/illyad-2495425 --regions-only
      eopt attribute power.csv --events events.csv --time-unit datetime
      eopt attribute smi.csv --events events.csv --tz UTC
      eopt attribute dcgm.csv --power-unit mW
      eopt attribute mpi-run/ --json -o attribution.json
    """
    from eopt.attribute.engine import attribute_all, attribute_streamed
    from eopt.model.trace import TraceError
    from eopt.model.trace_io import read_traces

    check_output(output, force)
    opts = recording_options(
        time_column=time_column,
        power_column=power_column,
        time_unit=time_unit,
        events_path=events_path,
        power_unit=power_unit,
        tz=tz,
    )
    try:
        # A large trace folder is streamed (bounded memory); any other is read whole.
        result = None if calls else attribute_streamed(path, domain=domain)
        traces = [] if result is not None else read_traces(path, opts)
        if result is None:
            result = attribute_all(traces, domain=domain, source=path, calls=calls)
    except TraceError as exc:
        raise UserError(str(exc)) from None
    zones = sorted({str(t.metadata["time_zone"]) for t in traces if "time_zone" in t.metadata})
    if zones:
        note(f"date-times without an offset read as {', '.join(zones)} (--tz to change)")
    data = result.to_dict(calls=calls)
    if output:
        write_json(output, data)
    if as_json:
        write_json("-", data)
    else:
        from eopt.report.attribution_table import render_attribution

        render_attribution(result, console, kernels=not regions_only)
