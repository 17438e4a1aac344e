"""``eopt reset``: restore GPUs that a killed eopt run left with changed settings."""

from __future__ import annotations

from typing import Any

import click

from eopt.cli._common import UserError, console, err_console

__all__ = ["command"]


def _describe(entry: dict[str, Any]) -> str:
    limit = entry.get("power_limit_w")
    parts = ["reset its locked SM and memory clocks"]
    if isinstance(limit, (int, float)):
        parts.append(f"set its power limit back to {limit:g} W")
    return " and ".join(parts)


def _open(entry: dict[str, Any]) -> Any:
    """The NVML GPU an entry refers to, found by UUID when indices have moved."""
    from eopt.devices import nvml

    index = int(entry.get("index", -1))
    uuid = entry.get("uuid")
    if uuid:
        found = nvml.find_index_by_uuid(str(uuid))
        if found is None:
            raise UserError(f"GPU {uuid} (was gpu{index}) is not present; nothing to restore")
        index = found
    return nvml.NvmlGPU(index, control=True)


@click.command("reset")
@click.option(
    "--gpu",
    "gpus",
    type=int,
    multiple=True,
    help="Restore only this GPU index (repeatable). Default: every saved GPU.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be done; change nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Also restore GPUs saved by eopt processes that are still running.",
)
def command(gpus: tuple[int, ...], dry_run: bool, force: bool) -> None:
    """Restore GPU clocks and power limits saved by eopt runs that were killed.

    eopt saves each GPU's settings before changing them and restores them on exit,
    errors and Ctrl-C. A run killed with SIGKILL cannot: its saved state stays in
    $EOPT_STATE_DIR (default ~/.local/state/eopt), and this command puts the GPUs
    back: it resets locked clocks and sets the ORIGINAL power limit. Needs root or
    CAP_SYS_ADMIN.

    \b
    Examples:
      eopt reset --dry-run        # show what would be restored
      sudo eopt reset             # restore every saved GPU
      sudo eopt reset --gpu 0     # only GPU 0
    """
    from eopt.devices.base import DeviceError
    from eopt.devices.guard import find_state_files, state_dir

    files = find_state_files()
    wanted = set(gpus)
    restored = 0
    pending = 0
    failures: list[str] = []
    for state in files:
        if not state.local:
            err_console.print(
                f"skipping {state.path}: saved on host {state.host!r}; run eopt reset there",
                highlight=False,
                soft_wrap=True,
            )
            continue
        if not state.stale and not force:
            err_console.print(
                f"skipping {state.path}: eopt process {state.pid} is still running and will "
                "restore its GPUs itself (use --force to restore anyway)",
                highlight=False,
                soft_wrap=True,
            )
            continue
        remaining = []
        for entry in state.devices:
            index = entry.get("index")
            if wanted and index not in wanted:
                remaining.append(entry)
                continue
            if entry.get("backend") != "nvml":
                continue
            label = f"gpu{index} ({entry.get('model', '?')})"
            if dry_run:
                console.print(
                    f"would {_describe(entry)} on {label}", highlight=False, soft_wrap=True
                )
                remaining.append(entry)
                pending += 1
                continue
            try:
                for line in _open(entry).restore_from_state(entry):
                    console.print(f"restored {line}", highlight=False, soft_wrap=True)
            except (DeviceError, UserError) as exc:
                failures.append(f"{label}: {exc}")
                remaining.append(entry)
                continue
            restored += 1
        if not dry_run:
            state.write_devices(remaining)
    if failures:
        raise UserError(
            f"restored {restored} GPU(s); failed: " + "; ".join(failures) + " (state file kept)"
        )
    if restored == 0 and pending == 0:
        where = state_dir()
        which = f" for GPU(s) {', '.join(map(str, sorted(wanted)))}" if wanted else ""
        console.print(f"Nothing to restore{which}: no saved GPU state in {where}.", soft_wrap=True)
    elif dry_run:
        console.print(f"{pending} GPU(s) would be restored; run without --dry-run to do it.")
    else:
        console.print(f"Restored {restored} GPU(s).")
