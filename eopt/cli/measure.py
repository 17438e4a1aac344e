"""``eopt measure -- CMD …``: the GPU energy of one command and of its regions."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from eopt.cli._common import UserError, console, err_console, write_json
from eopt.measure.command import CommandMeasurement, MeasureError, measure_command

__all__ = ["command", "open_measure_device", "print_report"]


def open_measure_device(backend: str, index: int) -> Any:
    """The GPU to watch (a seam the tests replace)."""
    from eopt.devices import open_devices

    return open_devices(backend, [index], control=False)[0]


def print_report(result: CommandMeasurement) -> None:
    """Per-region table: inclusive energy, time, mean power, share; outside and total."""
    rep = result.report
    table = Table(
        title=escape(
            f"{result.device} ({result.model}): {rep.meter.get('method')} "
            f"({rep.meter.get('power_field')})"
        ),
        title_justify="left",
    )
    for col in ("region", "calls", "time s", "energy J", "mean W", "share"):
        table.add_column(col, justify="left" if col == "region" else "right")
    for r in rep.regions:
        flag = f" [yellow](short calls: ±{r.error_j:.2g} J)[/]" if r.short_calls else ""
        table.add_row(
            "  " * r.depth + escape(r.key.rsplit("/", 1)[-1]) + flag,
            str(r.calls),
            f"{r.time_s:.4g}",
            f"{r.energy_j:.4g}",
            f"{r.mean_power_w:.4g}",
            f"{r.share:.1%}",
        )
    outside_w = rep.outside_energy_j / rep.outside_time_s if rep.outside_time_s > 0 else 0.0
    share = rep.outside_energy_j / rep.total_energy_j if rep.total_energy_j > 0 else 0.0
    table.add_row(
        "[dim]outside regions[/]",
        "",
        f"{rep.outside_time_s:.4g}",
        f"{rep.outside_energy_j:.4g}",
        f"{outside_w:.4g}",
        f"{share:.1%}",
        end_section=True,
    )
    mean_w = rep.total_energy_j / rep.total_time_s if rep.total_time_s > 0 else 0.0
    table.add_row(
        "[bold]total[/]",
        "",
        f"{rep.total_time_s:.4g}",
        f"{rep.total_energy_j:.4g}",
        f"{mean_w:.4g}",
        "100.0%",
    )
    console.print(table)
    if not rep.regions:
        console.print(
            "[dim]no regions reported: instrument the program with "
            '`from eopt.measure import regions` / `with regions.region("name"):` '
            "(or append eopt.region/1 lines to $EOPT_REGIONS_FILE)[/]"
        )


@click.command(
    "measure",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option(
    "-o",
    "--output",
    type=click.Path(),
    help="Also write the JSON result to this file (for `eopt report --measurement`); with "
    "--repeat, the run-set folder.",
)
@click.option(
    "--backend",
    type=click.Choice(["auto", "nvml"]),
    default="auto",
    show_default=True,
    help="Device backend (a real GPU is needed).",
)
@click.option("--gpu", "gpu_index", type=int, default=0, show_default=True, help="GPU index.")
@click.option(
    "--method",
    type=click.Choice(["auto", "counter", "sampler"]),
    default="auto",
    show_default=True,
    help="Energy counter or power sampling.",
)
@click.option(
    "--trace-dir",
    type=click.Path(file_okay=False),
    help="Also write the run as a trace folder (energy-dashboard-for-kokkos layout, v1).",
)
@click.option(
    "--repeat",
    type=click.IntRange(1, 10_000),
    help="Run the command N times; -o then names the run-set folder (one trace per run).",
)
@click.option(
    "--shift",
    "shift_ms",
    type=click.FloatRange(0, 1e6),
    default=0.0,
    help="With --repeat: delay run k by k·MS modulo the sensor period, in ms.",
)
@click.option(
    "--cooldown",
    "cooldown_s",
    type=click.FloatRange(0, 86_400),
    default=0.0,
    help="With --repeat: idle seconds between runs.",
)
@click.option(
    "--force", is_flag=True, help="With --repeat: write into a run-set folder that is not empty."
)
def command(
    cmd: tuple[str, ...],
    as_json: bool,
    output: str | None,
    backend: str,
    gpu_index: int,
    method: str,
    trace_dir: str | None,
    repeat: int | None,
    shift_ms: float,
    cooldown_s: float,
    force: bool,
) -> None:
    """Measure the GPU energy of one command, and of the regions it reports.

    The command runs with EOPT_REGIONS_FILE set; a Python program reports regions with
    `from eopt.measure import regions` and `with regions.region("forward"): …` (or any
    program appends eopt.region/1 JSON lines to that file). The GPU is only watched,
    never changed. Energy is whole-board: regions that overlap in time are each charged
    the full overlap.

    The JSON (--json, -o) holds the totals, per-region sums, the power trace
    ("samples": time_s and power_w lists, s from the start) and every region call
    ("events": name, path, start_s, end_s, energy_j), for `eopt report --measurement`
    and `eopt trace --measurement`.

    With --trace-dir the run is also written as a trace folder that `eopt attribute`,
    `eopt report --trace` and energy-dashboard-for-kokkos read. With --repeat N the command
    runs N times and -o names a run-set folder (index.json + run_001/ … traces) for
    `eopt compare`; --shift moves each run's start against the power sensor's refresh so
    that short regions are seen at different phases.

    \b
    Examples:
      eopt measure -- python train.py --epochs 1
      eopt measure --json -o run.json -- ./bench --size 8192
      eopt measure --trace-dir run-trace -- ./bench
      eopt measure --repeat 20 --shift 5 --cooldown 2 -o runs-a -- ./bench --variant a
      eopt compare runs-a runs-b --region solve
    """
    if any(x is not None and not math.isfinite(x) for x in (shift_ms, cooldown_s)):
        raise UserError("--shift and --cooldown must be finite numbers")
    if repeat is None and (shift_ms or cooldown_s):
        raise UserError("--shift and --cooldown apply to repeated runs; add --repeat N")
    if repeat is not None:
        _repeat(list(cmd), backend, gpu_index, method, repeat, shift_ms, cooldown_s, output, force)
        return
    if output and os.path.isdir(output):
        raise UserError(f"{output}: is a folder; -o names the JSON file (or add --repeat N)")
    device = open_measure_device(backend, gpu_index)
    try:
        result = measure_command(list(cmd), device, method=method)  # type: ignore[arg-type]
    except MeasureError as exc:
        raise UserError(str(exc)) from None
    if trace_dir:
        from eopt.measure.trace_io import write_dashboard

        write_dashboard(result.to_trace(), trace_dir)
        err_console.print(f"trace written to [bold]{escape(trace_dir)}[/]", highlight=False)
    data = result.to_dict()
    if output:
        write_json(output, data)
    if as_json:
        write_json("-", data)
    else:
        print_report(result)
    if result.returncode != 0:
        err_console.print(f"[yellow]warning:[/] the command exited with status {result.returncode}")
        sys.exit(result.returncode)


def _repeat(
    cmd: list[str],
    backend: str,
    gpu_index: int,
    method: str,
    n: int,
    shift_ms: float,
    cooldown_s: float,
    output: str | None,
    force: bool,
) -> None:
    """``--repeat N``: record N runs into the run-set folder ``output``."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from eopt.measure.runset import RecordedRun, RunSetError, record_runs

    if not output:
        raise UserError("--repeat needs -o RUNSET, the folder that receives one trace per run")
    device = open_measure_device(backend, gpu_index)
    failed: list[int] = []
    with Progress(
        TextColumn("runs"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    ) as progress:
        task = progress.add_task("runs", total=n)

        def on_run(run: RecordedRun) -> None:
            if run.measurement.returncode != 0:
                failed.append(run.index)
            progress.advance(task)

        try:
            runs = record_runs(
                cmd,
                device,
                output,
                n,
                shift_ms=shift_ms,
                cooldown_s=cooldown_s,
                method=method,  # type: ignore[arg-type]
                force=force,
                on_run=on_run,
            )
        except (MeasureError, RunSetError) as exc:
            raise UserError(str(exc)) from None
    energies = sorted(r.measurement.report.total_energy_j for r in runs)
    times = sorted(r.measurement.report.total_time_s for r in runs)
    mid = len(runs) // 2
    console.print(
        f"{len(runs)} runs written to [bold]{escape(output)}[/]: median {times[mid]:.4g} s, "
        f"{energies[mid]:.4g} J per run. Compare with `eopt compare {escape(output)} OTHER`.",
        highlight=False,
    )
    if failed:
        err_console.print(
            f"[yellow]warning:[/] runs {', '.join(map(str, failed))} exited with a non-zero "
            "status (kept in the run set; index.json records each status)"
        )
        sys.exit(1)
