"""``eopt apply``: put a schedule's clocks and power limits on the GPUs."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from eopt.cli._common import UserError, check_output, console, err_console, write_json
from eopt.cli.options import (
    force_option,
    gpu_backend_option,
    json_option,
    quiet_option,
    seed_option,
    sim_model_option,
)

__all__ = ["command"]


@click.command("apply", context_settings={"ignore_unknown_options": False})
@click.argument("schedule_path", metavar="SCHEDULE.json", type=click.Path(dir_okay=False))
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED, metavar="[-- CMD ...]")
@click.option(
    "--gpu",
    "gpu_pairs",
    multiple=True,
    metavar="PLANDEV=GPU",
    help="Put a plan device on a GPU (repeatable). GPU: a UUID (GPU-…, from nvidia-smi -L; "
    "the safest), a PCI bus id, a CUDA ordinal as this shell sees it (CUDA_VISIBLE_DEVICES "
    "honoured) or nvml:N (nvidia-smi's number). Default: the schedule's gpu fields, else "
    "plan devices in order on GPUs 0, 1, …",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print every NVML call with its values and check them against the GPUs; change nothing.",
)
@click.option(
    "--until-exit",
    is_flag=True,
    help="Apply, run the command given after `--`, then restore (instead of keeping the "
    "settings until `eopt reset`).",
)
@click.option(
    "--elements",
    "per_element_flag",
    is_flag=True,
    help="Run the command after `--`, switching each GPU at every element the program "
    "marks with eopt.element (implied by -o and --sim); the GPUs are restored after.",
)
@click.option(
    "--sim",
    is_flag=True,
    help="Run the command with a simulated GPU in its process: each element (eopt.element) "
    "runs its kind's simulated kernel from --kernels, at the schedule's setting.",
)
@click.option(
    "--kernels",
    "kernels_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --sim: element kind → simulated kernel (the file `eopt check --kernels` reads).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Write the measured run, energy per element call, as `eopt measure -o` does "
    "(eopt.regions-report/1), for `eopt check SCHEDULE --measured RUN.json`.",
)
@gpu_backend_option()
@sim_model_option(
    "Model of the simulated GPU (when the simulator is used). Default: the schedule's "
    "device_model, else A100-SXM4-40GB."
)
@seed_option("Seed of the simulated GPU's noise (--sim).")
@json_option("Print what is (or would be) set per GPU as JSON.")
@force_option("Overwrite the -o file.")
@quiet_option()
@click.pass_context
def command(
    ctx: click.Context,
    schedule_path: str,
    cmd: tuple[str, ...],
    gpu_pairs: tuple[str, ...],
    dry_run: bool,
    until_exit: bool,
    per_element_flag: bool,
    sim: bool,
    kernels_file: Path | None,
    output: str | None,
    backend: str,
    sim_model: str,
    seed: int,
    as_json: bool,
    force: bool,
) -> None:
    """Set the clocks / power limits of a schedule through NVML.

    Where every element on a GPU runs at one setting, the GPU's clocks are locked (and
    its power limit set) once and kept until `eopt reset`, or with --until-exit only
    while the given command runs.

    Per-element schedules: give the program after `--` with --elements. A program
    that marks its parts with `with eopt.element(name, kind=...):` is switched to each
    element's setting as it enters it (the runtime controller, configured through the
    environment; no code written against it), and the GPUs are restored when it ends.
    -o RUN.json also measures it: energy per element call, as `eopt measure -o` writes
    it. --sim runs it with a simulated GPU instead (--kernels K.yaml: the kernel of each
    element kind). Without a command, a per-element schedule cannot be locked: `eopt
    apply` says so.

    A schedule that records its GPU model (device_model) is checked against the GPUs:
    another model is refused, naming both; --sim and --dry-run on the simulator use
    that model unless --sim-model says otherwise.

    Every value is checked against the GPU's supported clocks and power-limit range
    before anything changes; --dry-run prints each NVML call. Settings kept after eopt
    exits last only while the driver keeps the GPU initialised: eopt reads each GPU's
    persistence mode and says what will happen.

    \b
    Examples:
      eopt apply schedule.json --dry-run
      eopt apply schedule.json --gpu stage0=0 --gpu stage1=1
      eopt apply schedule.json --gpu stage0=GPU-8f2c --gpu stage1=0000:3b:00.0
      eopt apply static.json --until-exit -- python train.py --epochs 1
      eopt apply schedule.json --elements -- python train.py      # per element
      eopt apply schedule.json -o run.json -- python train.py      # … and measured
      eopt apply schedule.json --sim --kernels k.yaml -o run.json -- python loop.py 1
      eopt reset                       # undo a kept apply
    """
    from eopt.apply import ApplyError, apply_locked, parse_gpu_map, plan_apply, run_with_settings
    from eopt.apply.run import schedule_device_model
    from eopt.apply.settings import gpu_resolver, resolve_gpu_map
    from eopt.apply.static import check_persistence
    from eopt.devices import open_devices
    from eopt.model.schedule import read_schedule

    check_output(output, force, option="-o")
    if until_exit and not cmd and not dry_run:
        raise UserError("--until-exit needs a command after `--`, e.g. -- python train.py")
    if (sim or output or per_element_flag) and not cmd and not dry_run:
        raise UserError(
            "--elements, --sim and -o run a program: give it after `--`, e.g. -- python train.py"
        )
    if cmd and not (until_exit or sim or output or per_element_flag):
        raise UserError(
            f"unexpected command {' '.join(cmd)!r}: add --elements to run it switched per "
            "element (-o RUN.json also measures it), or --until-exit to run it with one "
            "lock per GPU"
        )
    if kernels_file is not None and not sim:
        raise UserError("--kernels gives the simulated kernels: add --sim")
    try:
        schedule = read_schedule(schedule_path)
        gpu_map = resolve_gpu_map(schedule, parse_gpu_map(gpu_pairs), resolve=gpu_resolver(backend))
    except ValueError as exc:  # ScheduleError, ApplyError
        raise UserError(str(exc)) from None
    planned_model = schedule_device_model(schedule, schedule_path)
    if planned_model is not None and _default_source(ctx, "sim_model"):
        sim_model = _simulated_model(planned_model, schedule_path, sim_model)
    if sim and not dry_run:
        _run_sim(schedule_path, cmd, kernels_file, sim_model, seed, output, as_json)
        return
    names = [d.name for d in schedule.devices]
    opened = open_devices(
        backend=backend,
        indices=[gpu_map[n] for n in names],
        sim_model=sim_model,
        control=not dry_run,
    )
    devices = dict(zip(names, opened, strict=True))
    simulated = _is_simulated(opened)
    if simulated and backend == "sim":
        err_console.print(f"Using the simulated {sim_model} (eopt sim).", highlight=False)
    try:
        if not simulated:
            from eopt.apply.run import check_device_model

            check_device_model(planned_model, devices, schedule_path)
        plan = plan_apply(schedule, devices, gpu_map)
    except ApplyError as exc:
        raise UserError(str(exc)) from None
    per_element = bool(cmd) and (output is not None or per_element_flag)
    if per_element and not dry_run:
        _run_elements(schedule_path, cmd, devices, gpu_map, backend, output, as_json, simulated)
        return

    where = f"the simulated {opened[0].model}" if simulated else "the GPUs (NVML)"
    # What keeping the settings after eopt exits will do (not asked with --until-exit:
    # eopt holds the GPUs open while the command runs).
    persistence = [] if until_exit else check_persistence(plan, devices)
    if as_json:
        extra = {
            "persistence": [
                {"device": c.device, "gpu": c.gpu, "enabled": c.enabled, "note": c.note}
                for c in persistence
            ]
        }
        write_json("-", {**plan.to_dict(), **extra, "dry_run": dry_run, "backend": where})
        console.quiet = True  # stdout carries the JSON only (and the command's own output)
    if dry_run:
        console.print(f"[bold]Dry run[/] — checked against {where}; nothing changes.")
        for line in plan.lines():
            console.print(line, highlight=False, markup=False)
        console.print(
            f"All settings are within the supported clocks and power-limit range of {where}.",
            highlight=False,
        )
        console.print(plan.summary(done=False), highlight=False, markup=False)
        for check in persistence:
            if not check.keeps:
                console.print(f"note: {check.note}", highlight=False, markup=False)
        return
    if not plan.static and plan.dynamic:
        # Running the command at the default settings would look like success.
        raise UserError(plan.summary(done=False))
    if simulated:
        err_console.print(
            "[yellow]note:[/] the simulated GPU lives in this process only: the settings are "
            "checked and applied to the simulation, and nothing persists.",
            highlight=False,
        )
    if until_exit:
        # Said before the command runs: its own output follows, possibly for hours.
        console.print(plan.summary(done=True), highlight=False, markup=False)
        try:
            status = run_with_settings(plan, devices, cmd)
        except ApplyError as exc:
            raise UserError(str(exc)) from None
        console.print(f"Command exited with status {status}; GPU settings restored.")
        sys.exit(status)
    if simulated:
        console.print(plan.summary(done=False), highlight=False, markup=False)
        return
    changed = apply_locked(plan, devices)
    console.print(plan.summary(done=True), highlight=False, markup=False)
    if not changed:
        return
    lost = [c for c in persistence if not c.keeps]
    for check in lost:
        err_console.print(f"[yellow]warning:[/] {check.note}", highlight=False, soft_wrap=True)
    if lost:
        kept = [f"gpu{c.gpu}" for c in persistence if c.keeps]
        which = f" on {', '.join(kept)}" if kept else " where the driver keeps them"
        console.print(f"Kept{which} until you run [bold]eopt reset[/].", highlight=False)
    else:
        console.print("Kept until you run [bold]eopt reset[/].", highlight=False)


def _simulated_model(planned: str, path: str, default: str) -> str:
    """The simulator profile for a schedule planned for ``planned`` (the default, with a
    note, when the simulator has no such profile)."""
    from eopt.sim.profiles import load_profile

    try:
        load_profile(planned)
    except ValueError:
        err_console.print(
            f"note: {path} was planned for {planned}, which the simulator has no profile "
            f"of; simulating {default} (choose one with --sim-model)",
            highlight=False,
        )
        return default
    return planned


def _default_source(ctx: click.Context, name: str) -> bool:
    """Whether option ``name`` was left at its default."""
    source = ctx.get_parameter_source(name)
    return source is None or source == click.core.ParameterSource.DEFAULT


def _finish_run(code: int, data: dict | None, output: str | None, as_json: bool) -> None:
    """Write and summarize a run of the command; exit with its status."""
    if data is not None:
        if output:
            write_json(output, data)
        if as_json:
            write_json("-", data)
        else:
            calls = len(data.get("events", []))
            console.print(
                f"{calls} element call(s), {data['total_energy_j']:.4g} J in "
                f"{data['total_time_s']:.4g} s ({data['outside_energy_j']:.4g} J outside "
                f"every element)" + (f"; wrote {output}" if output else ""),
                highlight=False,
                markup=False,
            )
    if code != 0:
        err_console.print(f"[yellow]warning:[/] the command exited with status {code}")
        sys.exit(code)


def _run_sim(
    schedule_path: str,
    cmd: tuple[str, ...],
    kernels_file: Path | None,
    model: str,
    seed: int,
    output: str | None,
    as_json: bool,
) -> None:
    """``--sim -- CMD``: the program's process holds a simulated GPU, switched per element."""
    from eopt.apply import ApplyError
    from eopt.apply.run import run_on_sim
    from eopt.cli.profile import sim_kernels
    from eopt.sim.profiles import load_profile

    if kernels_file is None:
        raise UserError(
            "--sim needs --kernels K.yaml: the simulated kernel each element kind runs, e.g. "
            "'stage0.forward: {kernel: gemm, workload: {m: 4096, n: 4096, k: 4096}}'"
        )
    try:
        load_profile(model)
    except ValueError as exc:
        raise UserError(f"--sim-model: {exc}") from None
    kernels = sim_kernels(kernels_file)
    err_console.print(f"Using the simulated {model} in the program's process.", highlight=False)
    try:
        code, data = run_on_sim(
            schedule_path,
            cmd,
            kernels,
            model=model,
            seed=seed,
            kernels_file=str(kernels_file),
            stdout=sys.stderr if as_json else None,
        )
    except ApplyError as exc:
        raise UserError(str(exc)) from None
    _finish_run(code, data, output, as_json)


def _run_elements(
    schedule_path: str,
    cmd: tuple[str, ...],
    devices: dict,
    gpu_map: dict,
    backend: str,
    output: str | None,
    as_json: bool,
    simulated: bool,
) -> None:
    """``-- CMD`` on real GPUs: switched per element by the program's own hook."""
    from eopt.apply import ApplyError
    from eopt.apply.run import run_on_devices

    if simulated:
        raise UserError(
            "no GPU that NVML can control: a real program cannot run on this process's "
            "simulated GPU; add --sim --kernels K.yaml to simulate it"
        )
    try:
        code, data = run_on_devices(
            schedule_path,
            cmd,
            devices,
            gpu_map,
            backend=backend,
            measure=output is not None,
            stdout=sys.stderr if as_json else None,
        )
    except ApplyError as exc:
        raise UserError(str(exc)) from None
    err_console.print("GPU settings restored.", highlight=False)
    _finish_run(code, data, output, as_json)


def _is_simulated(devices: list[object]) -> bool:
    from eopt.sim.gpu import SimulatedGPU

    return any(isinstance(d, SimulatedGPU) for d in devices)
