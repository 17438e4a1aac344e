"""``eopt profile``: characterize a program's own elements, in place."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from eopt.cli._common import UserError, check_output, console, err_console, write_json
from eopt.cli.options import (
    force_option,
    gpu_option,
    json_option,
    quiet_option,
    seed_option,
    sim_model_option,
)

__all__ = ["METER_METHODS", "command", "sim_kernels"]

METER_METHODS = ("auto", "counter", "sampler")


@click.command(
    "profile",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD ...")
@click.option(
    "--sim",
    is_flag=True,
    help="Run on a simulated GPU held by the program's process: entering an element runs "
    "its kind's simulated kernel from --kernels.",
)
@click.option(
    "--kernels",
    "kernels_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --sim: element kind → simulated kernel, the file `eopt check --kernels` reads "
    "(e.g. 'stage0.forward: {kernel: gemm, workload: {m: 4096}}').",
)
@gpu_option()
@click.option(
    "--clocks",
    help="SM clocks to profile at, in MHz: 1410,1200,1005 or 900:1410:30.",
)
@click.option("--power-limits", help="Power limits to profile at, in W: 250,300.")
@click.option(
    "--in-run",
    "every_steps",
    type=click.IntRange(1, 1_000_000),
    metavar="K",
    help="Switch to the next operating point every K eopt.step() calls within ONE run "
    "(for jobs that take long to start), instead of one run per point.",
)
@click.option(
    "--no-control",
    is_flag=True,
    help="Change no GPU setting: profile the GPU as it runs now (no --clocks/--power-limits).",
)
@click.option(
    "--kokkos",
    is_flag=True,
    help="The regions of an unmodified Kokkos program are the elements (eopt's Kokkos Tools "
    "connector, built on first use).",
)
@click.option(
    "--static-idle",
    "static_idle_s",
    type=click.FloatRange(0.001, 600),
    help="Length of the idle window that measures each point's static power, in s "
    "(default: ten sensor periods; 1 s on the simulator).",
)
@click.option(
    "--method",
    # eopt.measure.meter.MeterMethod, spelled out so that --help loads no NumPy (a test
    # keeps the two equal).
    type=click.Choice(METER_METHODS),
    default="auto",
    show_default=True,
    help="Energy counter or power sampling (auto: the counter where the GPU has one).",
)
@sim_model_option("Model of the simulated GPU (--sim).")
@seed_option("Seed of the simulated GPU's noise (--sim); run r uses SEED + r.")
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="The signature library to write (.jsonl, one eopt.signature/1 line per element kind "
    "and operating point).",
)
@json_option("Print the signatures as JSON on stdout.")
@force_option("Overwrite the -o file.")
@quiet_option()
def command(
    cmd: tuple[str, ...],
    sim: bool,
    kernels_file: Path | None,
    gpu: str,
    clocks: str | None,
    power_limits: str | None,
    every_steps: int | None,
    no_control: bool,
    kokkos: bool,
    static_idle_s: float | None,
    method: str,
    sim_model: str,
    seed: int,
    output: str,
    as_json: bool,
    force: bool,
) -> None:
    """Characterize a program in place: one signature per element kind and point.

    Mark the program's parts once, `with eopt.element(name, kind=...):` (and `eopt.step()`
    at the end of an iteration); unmarked, the markers cost under a microsecond and do
    nothing. Each element KIND is measured over all its calls: its time, the ready GPU's
    static power at the point, its dynamic energy, the variances over the calls and the
    number of calls; each line says how its energy was read (energy-counter deltas at the
    element edges where the counter refreshes fast enough, else the power trace) and
    flags elements shorter than ten of the reading's periods.

    By default CMD runs once per operating point (each SM clock × power limit), locked for
    the whole run and restored afterwards; --in-run K switches every K eopt.step() calls
    within one run instead. --no-control leaves the GPU as it is.

    The library feeds `eopt plan pipeline --library`; then `eopt solve` and
    `eopt apply SCHEDULE --elements -- CMD` runs the same program at its plan.

    \b
    Examples:
      eopt profile --sim --kernels k.yaml --clocks 1410,1200,1005 -o lib.jsonl -- python loop.py
      eopt profile --clocks 1410,1200,1005 -o lib.jsonl -- python train.py --steps 20
      eopt profile --no-control -o lib.jsonl -- python train.py
      eopt profile --sim --kernels k.yaml --clocks 1410,1005 --in-run 2 -o lib.jsonl \\
          -- python loop.py 4
      eopt profile --kokkos --clocks 1410,1200,1005 -o lib.jsonl -- ./kokkos_app
    """
    check_output(output, force, option="-o")
    if sim and kernels_file is None:
        raise UserError(
            "--sim needs --kernels K.yaml: the simulated kernel each element kind runs, e.g. "
            "'stage0.forward: {kernel: gemm, workload: {m: 4096, n: 4096, k: 4096}}'"
        )
    if kernels_file is not None and not sim:
        raise UserError("--kernels gives the simulated kernels: add --sim")
    if no_control and (clocks or power_limits):
        raise UserError("--no-control changes no setting: drop --clocks and --power-limits")
    if sim and kokkos:
        raise UserError("--kokkos profiles a real Kokkos program: drop --sim")
    points = _points(clocks, power_limits)
    if every_steps is not None and len(points) < 2:
        raise UserError("--in-run switches between operating points: give at least two")
    from eopt.runs.profile import ProfileError, ProfilePlan, signatures_from_calls

    plan = ProfilePlan(tuple(cmd), tuple(points), every_steps, static_idle_s)
    progress = _progress()
    # With --json, stdout carries the JSON only: the program's own output goes to stderr.
    out = sys.stderr if as_json else None
    try:
        if sim:
            run = _profile_sim(plan, kernels_file, sim_model, seed, progress, out)  # type: ignore[arg-type]
        else:
            run = _profile_device(plan, gpu, not no_control, method, kokkos, progress, out)
        sigs = signatures_from_calls(run)
    except ProfileError as exc:
        raise UserError(str(exc)) from None
    from eopt.model.library import write_library

    write_library(output, sigs)
    if as_json:
        write_json("-", {"library": output, "signatures": [s.to_dict() for s in sigs]})
    else:
        _print(sigs, output)
    bad = [c for c in run.returncodes if c != 0]
    if bad:
        err_console.print(f"[yellow]warning:[/] the command exited with status {bad[0]}")
        sys.exit(bad[0])


def _points(clocks: str | None, power_limits: str | None) -> list[Any]:
    """The operating points: every clock × every power limit."""
    if not clocks and not power_limits:
        return []
    from eopt.model.operating_point import OperatingPoint
    from eopt.runs.sweep import SweepError, parse_values

    try:
        sm = parse_values(clocks, "--clocks", "MHz") if clocks else [None]
        pl = parse_values(power_limits, "--power-limits", "W") if power_limits else [None]
    except SweepError as exc:
        raise UserError(str(exc)) from None
    return [OperatingPoint(sm_clock_mhz=c, power_limit_w=p) for c in sm for p in pl]


def _progress() -> Any:
    def show(line: str) -> None:
        err_console.print(line, highlight=False, markup=False)

    return None if console.quiet else show


def sim_kernels(path: Path) -> dict[str, dict[str, Any]]:
    """Element kind → its simulated kernel, from a ``--kernels`` file (the reader of
    ``eopt check --kernels``), as the JSON the program's process is handed."""
    import dataclasses

    from eopt.cli.check import read_kernel_map

    return {
        kind: {k: v for k, v in dataclasses.asdict(spec).items() if v not in (None, ())}
        for kind, spec in read_kernel_map(path).items()
    }


def _profile_sim(
    plan: Any, kernels_file: Path, model: str, seed: int, progress: Any, out: Any
) -> Any:
    import dataclasses

    from eopt.runs.profile import profile_on_sim
    from eopt.sim.profiles import load_profile

    try:
        load_profile(model)
    except ValueError as exc:
        raise UserError(f"--sim-model: {exc}") from None
    kernels = sim_kernels(kernels_file)
    if plan.static_idle_s is None:
        plan = dataclasses.replace(plan, static_idle_s=1.0)
    return profile_on_sim(
        plan,
        kernels,
        model=model,
        seed=seed,
        kernels_file=str(kernels_file),
        progress=progress,
        stdout=out,
    )


def _profile_device(
    plan: Any, gpu: str, control: bool, method: str, kokkos: bool, progress: Any, out: Any
) -> Any:
    from eopt.cli._gpus import resolve_gpu_option
    from eopt.devices import open_devices
    from eopt.devices.base import WallClock
    from eopt.runs.profile import profile_on_device

    device = open_devices("nvml", [resolve_gpu_option(gpu)], control=control)[0]
    if not isinstance(device.clock, WallClock):
        raise UserError(f"{device.name} is simulated: profile with --sim --kernels K.yaml")
    library = None
    if kokkos:
        from eopt.measure.kokkos import build_connector

        library = str(build_connector())
    return profile_on_device(
        plan,
        device,
        control=control,
        method=method,
        kokkos_library=library,
        progress=progress,
        stdout=out,
    )


def _print(sigs: list[Any], output: str) -> None:
    from rich.table import Table

    table = Table(title="Element kinds per operating point")
    for col in ("kind", "point", "calls", "time (ms)", "σ time (ms)", "static W", "dyn. J", "how"):
        table.add_column(col)
    for s in sigs:
        point = ", ".join(f"{k}={v:g}" for k, v in s.op_point.to_dict().items()) or "as is"
        flags = " (short)" if s.meta.get("flags") else ""
        table.add_row(
            s.name,
            point,
            str(s.meta.get("n")),
            f"{s.time * 1e3:.4g}",
            f"{s.var_time**0.5 * 1e3:.3g}",
            f"{s.static_power:.4g}",
            f"{s.dynamic_energy:.4g}",
            str(s.meta.get("method")) + flags,
        )
    console.print(table)
    console.print(
        f"Wrote {len(sigs)} signature(s) to {output}. Next: eopt plan pipeline --library "
        f"{output} …",
        highlight=False,
        markup=False,
    )
