"""``eopt measure -- CMD …``: the GPU energy of one command and of its regions."""

from __future__ import annotations

import contextlib
import math
import os
import sys
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from eopt.cli._common import (
    UserError,
    check_output,
    check_output_dir,
    console,
    err_console,
    write_json,
)
from eopt.cli._gpus import parse_gpus, resolve_gpu_option, sim_gpu_index
from eopt.cli.options import (
    force_option,
    gpu_option,
    gpus_option,
    json_option,
    meter_method_option,
    power_backend_option,
    quiet_option,
)
from eopt.devices.base import WallClock
from eopt.measure.command import CommandMeasurement, MeasureError, measure_command

__all__ = ["command", "open_measure_device", "open_measure_gpus", "parse_gpus", "print_report"]


def open_measure_device(backend: str, gpu: str) -> Any:
    """The GPU to watch (a seam the tests replace).

    Args:
        backend: ``auto`` or ``nvml``.
        gpu: The ``--gpu`` value: a CUDA ordinal, UUID, PCI bus id or ``nvml:N``
            (:func:`eopt.cli._gpus.resolve_gpu_option`).

    Without an NVIDIA GPU this is a simulated one, quietly: a real command cannot be
    measured on it, and the caller says so (or records events only).
    """
    from eopt.devices import open_devices

    if backend == "auto" and nvml_gpu_count() == 0:
        from eopt.sim.gpu import SimulatedGPU

        return SimulatedGPU(index=sim_gpu_index(gpu, nvml_seen=True), control=False)
    return open_devices(backend, [resolve_gpu_option(gpu)], control=False)[0]


def open_measure_gpus(selection: str | None, backend: str) -> list[Any]:
    """The GPUs to watch for a recording (a seam the tests replace).

    Args:
        selection: ``all``, a list of GPUs named as for ``--gpu`` (``0,1``,
            ``GPU-8f2c,GPU-41aa``, ``nvml:0,nvml:3`` …), or None: as ``all``, the GPUs
            ``CUDA_VISIBLE_DEVICES`` gives this process (every GPU when it is unset),
            if NVML sees any (see :func:`eopt.cli._gpus.parse_gpus`).
        backend: The --backend value; GPUs only when it names nvml or is auto.

    Returns:
        Measure-only NVML devices; empty when NVML sees no GPU and none was asked for.

    Raises:
        UserError: for a selection naming no GPU present.
    """
    if backend not in ("auto", "nvml", "nvml,rapl"):
        if selection is not None:
            raise UserError(f"--gpus needs a GPU backend; --backend {backend} has none")
        return []
    from eopt.devices import nvml, open_devices

    if backend == "auto" and selection is None:
        count = nvml_gpu_count()
    else:
        count = nvml.device_count(raise_errors=True)
    if count == 0:
        if selection is not None and selection.strip().lower() != "all":
            raise UserError(f"--gpus {selection}: NVML sees no NVIDIA GPU here")
        return []
    indices = parse_gpus(selection, nvml.list_gpus(), mig_parent=nvml.mig_parent_index)
    return open_devices("nvml", indices, control=False)


def nvml_gpu_count() -> int:
    """The NVIDIA GPUs NVML sees; 0 without a driver, and 0 with a one-line warning saying
    what failed when a driver is there but NVML cannot start (a version mismatch …)."""
    from eopt.devices import nvml

    try:
        return nvml.device_count(raise_errors=True)
    except nvml.NvmlStartError as exc:
        if not exc.driver_missing:
            reason = str(exc).split("; use --backend sim")[0]
            err_console.print(
                f"[yellow]warning:[/] NVML did not start ({escape(reason)}); measuring "
                "without the GPU (--backend nvml makes this an error)",
                highlight=False,
            )
        return 0


def open_rapl_source(backend: str) -> Any | None:
    """The node's RAPL zones as a power source (a seam the tests replace).

    Returns:
        None when the backend excludes RAPL, or (for ``auto``) when RAPL is not readable.

    Raises:
        UserError: when RAPL was asked for and cannot be read, saying what to do.
    """
    if backend not in ("auto", "rapl", "nvml,rapl"):
        return None
    from eopt.measure import rapl

    try:
        source = rapl.RaplSampler()
        source.reader.read()  # a root-only counter fails here, before the run, not in it
        return source
    except (rapl.RaplUnavailableError, rapl.RaplPermissionError) as exc:
        if backend == "auto":
            return None
        raise UserError(str(exc)) from None


def print_report(result: CommandMeasurement) -> None:
    """Per-region table: inclusive energy, time, mean power, share; outside and total."""
    from eopt.report.names import shorten

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
            "  " * r.depth + escape(shorten(r.key.rsplit("/", 1)[-1])) + flag,
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
@json_option("Print the result as JSON on stdout.")
@click.option(
    "-o",
    "--output",
    type=click.Path(),
    help="Also write the JSON result to this file (for `eopt report --measurement`); with "
    "--repeat, the run-set folder.",
)
@power_backend_option()
@gpu_option()
@gpus_option()
@click.option(
    "--kokkos",
    is_flag=True,
    help="Attach eopt's Kokkos Tools connector (built on first use): regions, kernels, "
    "deep copies and fences of an unmodified Kokkos program.",
)
@meter_method_option()
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
    "--resume",
    is_flag=True,
    help="With --repeat: continue the run set in -o (keep its finished runs, redo the one "
    "in progress).",
)
@force_option("Overwrite the -o file, or write into a trace or run-set folder that is not empty.")
@quiet_option()
def command(
    cmd: tuple[str, ...],
    as_json: bool,
    output: str | None,
    backend: str,
    gpu: str,
    gpus: str | None,
    kokkos: bool,
    method: str,
    trace_dir: str | None,
    repeat: int | None,
    shift_ms: float,
    cooldown_s: float,
    resume: bool,
    force: bool,
) -> None:
    """Measure the GPU energy of one command, and of the regions it reports.

    The command runs with EOPT_REGIONS_FILE set; a Python program reports regions with
    `with eopt.element("F[s0,m0]", kind="stage0.forward"): …` (or `with
    regions.region("forward"): …`, the same marker; any program may append eopt.region/1
    JSON lines to that file). Each region keeps its element kind. The GPU is only watched,
    never changed. Energy is whole-board, charged by `eopt attribute`'s rule: regions
    that overlap in time without nesting (threads, processes) share the overlap equally.

    The JSON (--json, -o) holds the totals, per-region sums, the power trace
    ("samples": time_s and power_w lists, s from the start) and every region call
    ("events": name, path, start_s, end_s, energy_j), for `eopt report --measurement`
    and `eopt trace --measurement`.

    With --trace-dir the run is also written as a trace folder that `eopt attribute`,
    `eopt report --measurement`, `eopt trace` and energy-dashboard-for-kokkos read. With
    --repeat N the command runs N times and -o names a run-set folder (index.json +
    run_001/ … traces) for `eopt compare`; --shift moves each run's start against the
    power sensor's refresh so that short regions are seen at different phases.

    With --kokkos, --gpus or a RAPL backend, the run is recorded as a trace folder
    (--trace-dir, default ./eopt-trace): one power series per GPU and per CPU package,
    the Kokkos connector's regions and kernels (KOKKOS_TOOLS_LIBS and KOKKOS_PROFILE_LIBRARY
    are set for the child; under MPI each rank writes rank_<N>/), and the energy per region
    and kernel on every series. Without any power sensor the events are still recorded;
    attribute them later with `eopt attribute power.csv --events DIR/events.csv`.

    \b
    Examples:
      eopt measure -- python train.py --epochs 1
      eopt measure --kokkos --gpus all -- ./kokkos_app -n 1000
      eopt measure --kokkos --backend nvml,rapl --trace-dir run1 -- mpirun -n 4 ./app
      eopt measure --json -o run.json -- ./bench --size 8192
      eopt measure --trace-dir run-trace -- ./bench
      eopt measure --repeat 20 --shift 5 --cooldown 2 -o runs-a -- ./bench --variant a
      eopt measure --repeat 20 -o runs-a --resume -- ./bench --variant a  # after a kill
      eopt compare runs-a runs-b --region solve
    """
    if any(x is not None and not math.isfinite(x) for x in (shift_ms, cooldown_s)):
        raise UserError("--shift and --cooldown must be finite numbers")
    if repeat is None and (shift_ms or cooldown_s or resume):
        raise UserError("--shift, --cooldown and --resume apply to repeated runs; add --repeat N")
    if resume and force:
        raise UserError(
            "--resume keeps the run set's finished runs, --force replaces them: pick one"
        )
    # Every output is checked before the command runs: a run is not lost to a bad path.
    if repeat is not None:
        check_output_dir(output, force or resume, option="-o")
    elif output and os.path.isdir(output):
        raise UserError(f"{output}: is a folder; -o names the JSON file (or add --repeat N)")
    else:
        check_output(output, force, option="-o")
    check_output_dir(trace_dir, force, option="--trace-dir")
    if repeat is not None:
        session = kokkos or gpus is not None or "rapl" in backend or backend == "none"
        _repeat(
            list(cmd),
            backend,
            gpu,
            method,
            repeat,
            shift_ms,
            cooldown_s,
            output,
            force,
            resume,
            session=(gpus, kokkos) if session else None,
        )
        return
    if kokkos or gpus is not None or "rapl" in backend or backend == "none":
        check_output(output, force)
        _record(list(cmd), backend, gpus, kokkos, method, trace_dir, as_json, output, force)
        return
    if output and os.path.isdir(output):
        raise UserError(f"{output}: is a folder; -o names the JSON file (or add --repeat N)")
    check_output(output, force)
    device = open_measure_device(backend, gpu)
    if trace_dir and not isinstance(device.clock, WallClock):
        # No GPU to watch: still record the events (and the CPU, where RAPL is readable).
        _record(list(cmd), backend, None, kokkos, method, trace_dir, as_json, output, force)
        return
    from eopt.measure.session import SessionError, trace_folder

    try:
        folder = trace_folder(trace_dir, force) if trace_dir else contextlib.nullcontext()
        with folder:
            result = measure_command(list(cmd), device, method=method)  # type: ignore[arg-type]
            if trace_dir:
                from eopt.model.trace_io import write_dashboard

                write_dashboard(result.to_trace(), trace_dir)
    except SessionError as exc:
        raise UserError(str(exc)) from None
    except MeasureError as exc:
        hint = ""
        if not isinstance(device.clock, WallClock):
            hint = (
                "; without a GPU, --trace-dir DIR still records the regions and kernels (and "
                "the CPU's energy where RAPL is readable)"
            )
        raise UserError(f"{str(exc).rstrip('.')}{hint}") from None
    if trace_dir:
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
    gpu: str,
    method: str,
    n: int,
    shift_ms: float,
    cooldown_s: float,
    output: str | None,
    force: bool,
    resume: bool,
    session: tuple[str | None, bool] | None = None,
) -> None:
    """``--repeat N``: record N runs into the run-set folder ``output``.

    ``session`` (the --gpus selection and --kokkos) records each run with every power source
    and the Kokkos connector; without it, one GPU and the Python regions.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from eopt.measure.meter import sensor_period_s
    from eopt.measure.session import SessionError
    from eopt.runs.runset import RecordedRun, RunSetError, gpu_recorder, record_runs

    if not output:
        raise UserError("--repeat needs -o RUNSET, the folder that receives one trace per run")
    if session is None:
        device = open_measure_device(backend, gpu)
        record = gpu_recorder(cmd, device, method=method)  # type: ignore[arg-type]
        period = sensor_period_s(device)
    else:
        record, period = _session_recorder(cmd, backend, session[0], session[1], method)
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
            if run.outcome.returncode != 0:
                failed.append(run.index)
            progress.advance(task)

        try:
            runs = record_runs(
                record,
                output,
                n,
                command=cmd,
                period_s=period,
                shift_ms=shift_ms,
                cooldown_s=cooldown_s,
                force=force,
                resume=resume,
                on_run=on_run,
            )
        except (MeasureError, RunSetError, SessionError) as exc:
            raise UserError(str(exc)) from None
        except KeyboardInterrupt:
            progress.stop()
            err_console.print(
                f"interrupted: the runs finished so far are kept in {escape(output)}; continue "
                "with the same command and --resume",
                highlight=False,
            )
            sys.exit(130)
    times = sorted(r.outcome.time_s for r in runs)
    energies = sorted(r.outcome.energy_j for r in runs if r.outcome.energy_j is not None)
    mid = len(runs) // 2
    energy = f", {energies[len(energies) // 2]:.4g} J" if energies else ""
    console.print(
        f"{len(runs)} runs written to [bold]{escape(output)}[/]: median {times[mid]:.4g} s"
        f"{energy} per run. Compare with `eopt compare {escape(output)} OTHER`.",
        highlight=False,
    )
    if failed:
        err_console.print(
            f"[yellow]warning:[/] runs {', '.join(map(str, failed))} exited with a non-zero "
            "status (kept in the run set; index.json records each status)"
        )
        sys.exit(1)


def _sources(backend: str, devices: list[Any], method: str) -> list[Any]:
    """Fresh power sources (a sampler runs once): the GPUs' meters, then RAPL."""
    from eopt.measure.session import GpuPowerSource

    sources: list[Any] = [GpuPowerSource(d, method=method) for d in devices]  # type: ignore[arg-type]
    rapl_source = open_rapl_source(backend)
    if rapl_source is not None:
        sources.append(rapl_source)
    return sources


def _kokkos_library(kokkos: bool) -> Any:
    if not kokkos:
        return None
    from eopt.measure.kokkos import KokkosBuildError, build_connector

    try:
        return build_connector()
    except KokkosBuildError as exc:
        raise UserError(str(exc)) from None


def _session_recorder(
    cmd: list[str], backend: str, gpus: str | None, kokkos: bool, method: str
) -> tuple[Any, float]:
    """A recorder of full sessions, and the sensor period the shifts wrap at."""
    from eopt.measure.meter import DEFAULT_SENSOR_PERIOD_S, sensor_period_s
    from eopt.measure.session import session_recorder

    devices = open_measure_gpus(gpus, backend)
    library = _kokkos_library(kokkos)
    period = sensor_period_s(devices[0]) if devices else DEFAULT_SENSOR_PERIOD_S

    def sources() -> list[Any]:
        return _sources(backend, devices, method)

    return session_recorder(cmd, sources, kokkos_library=library), period


def _record(
    cmd: list[str],
    backend: str,
    gpus: str | None,
    kokkos: bool,
    method: str,
    trace_dir: str | None,
    as_json: bool,
    output: str | None,
    force: bool,
) -> None:
    """Record the command as a trace folder with every power source, then attribute it."""
    from eopt.attribute.engine import attribute_all
    from eopt.measure.session import SessionError, record_command
    from eopt.model.trace import TraceError
    from eopt.report.attribution_table import render_attribution

    folder = trace_dir or "eopt-trace"
    sources = _sources(backend, open_measure_gpus(gpus, backend), method)
    library = _kokkos_library(kokkos)
    if not sources:
        err_console.print(
            "[yellow]note:[/] no power sensor here (no NVIDIA GPU, no readable RAPL): "
            f"recording events only; attribute them later with power recorded elsewhere: "
            f"`eopt attribute power.csv --events {escape(folder)}/events.csv`",
            highlight=False,
        )
    try:
        run = record_command(cmd, sources, folder, kokkos_library=library, force=force)
    except (SessionError, TraceError) as exc:
        raise UserError(str(exc)) from None
    for w in run.warnings:
        if not sources and w.startswith("no power was recorded"):
            continue  # the note above said it
        err_console.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
    err_console.print(f"trace written to [bold]{escape(str(run.trace_dir))}[/]", highlight=False)
    data: dict[str, Any] = {
        "command": list(run.command),
        "returncode": run.returncode,
        "trace_dir": str(run.trace_dir),
        "power_sources": list(run.sources),
    }
    if any(t.series for t in run.traces):
        att = attribute_all(run.traces, source=str(run.trace_dir))
        data.update(att.to_dict())
        if not as_json:
            render_attribution(att, console)
    else:
        n = sum(len(t.events) for t in run.traces)
        data.update({"events": n})
        if not as_json:
            console.print(f"{n} events recorded; no power to attribute them to")
    if output:
        write_json(output, data)
    if as_json:
        write_json("-", data)
    if run.returncode != 0:
        err_console.print(f"[yellow]warning:[/] the command exited with status {run.returncode}")
        sys.exit(run.returncode)
