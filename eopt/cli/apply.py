"""``eopt apply``: put a schedule's clocks and power limits on the GPUs."""

from __future__ import annotations

import sys

import click

from eopt.cli._common import UserError, console, err_console, write_json
from eopt.cli.options import gpu_backend_option, json_option, quiet_option, sim_model_option

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
@gpu_backend_option()
@sim_model_option("Model of the simulated GPU (when the simulator is used).")
@json_option("Print what is (or would be) set per GPU as JSON.")
@quiet_option()
def command(
    schedule_path: str,
    cmd: tuple[str, ...],
    gpu_pairs: tuple[str, ...],
    dry_run: bool,
    until_exit: bool,
    backend: str,
    sim_model: str,
    as_json: bool,
) -> None:
    """Set the clocks / power limits of a schedule through NVML.

    Where every element on a GPU runs at one setting, the GPU's clocks are locked (and
    its power limit set) once and kept until `eopt reset`, or with --until-exit only
    while the given command runs. Where a GPU needs several settings, the schedule
    needs the runtime controller (eopt.apply.RuntimeController, see docs/pytorch.md);
    `eopt apply` says so in one line and leaves that GPU unchanged. When no GPU at all
    can be set that way, it stops with an error instead of running the command at the
    default settings: solve with `eopt solve --static` for a schedule it can lock.

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
      eopt reset                       # undo a kept apply
    """
    from eopt.apply import ApplyError, apply_locked, parse_gpu_map, plan_apply, run_with_settings
    from eopt.apply.settings import gpu_resolver, resolve_gpu_map
    from eopt.apply.static import check_persistence
    from eopt.devices import open_devices
    from eopt.model.schedule import read_schedule

    if cmd and not until_exit:
        raise UserError(
            f"unexpected command {' '.join(cmd)!r}: add --until-exit to run a command "
            "with the settings applied"
        )
    if until_exit and not cmd and not dry_run:
        raise UserError("--until-exit needs a command after `--`, e.g. -- python train.py")
    try:
        schedule = read_schedule(schedule_path)
        gpu_map = resolve_gpu_map(schedule, parse_gpu_map(gpu_pairs), resolve=gpu_resolver(backend))
    except ValueError as exc:  # ScheduleError, ApplyError
        raise UserError(str(exc)) from None
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
        plan = plan_apply(schedule, devices, gpu_map)
    except ApplyError as exc:
        raise UserError(str(exc)) from None

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


def _is_simulated(devices: list[object]) -> bool:
    from eopt.sim.gpu import SimulatedGPU

    return any(isinstance(d, SimulatedGPU) for d in devices)
