"""``eopt measure -- CMD …``: the GPU energy of one command and of its regions."""

from __future__ import annotations

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
    type=click.Path(dir_okay=False),
    help="Also write the JSON result to this file (for `eopt report --measurement`).",
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
def command(
    cmd: tuple[str, ...],
    as_json: bool,
    output: str | None,
    backend: str,
    gpu_index: int,
    method: str,
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

    \b
    Examples:
      eopt measure -- python train.py --epochs 1
      eopt measure --json -o run.json -- ./bench --size 8192
      eopt trace --measurement run.json -o run.trace.json
    """
    device = open_measure_device(backend, gpu_index)
    try:
        result = measure_command(list(cmd), device, method=method)  # type: ignore[arg-type]
    except MeasureError as exc:
        raise UserError(str(exc)) from None
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
