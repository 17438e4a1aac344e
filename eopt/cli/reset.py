"""``eopt reset``: restore GPUs that a killed eopt run left with changed settings."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from eopt.cli._common import UserError, console, err_console, quiet_option, write_json

if TYPE_CHECKING:
    from eopt.devices.guard import StateFile

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
    type=click.IntRange(min=0),
    multiple=True,
    help="Restore only this GPU index (repeatable). Default: every saved GPU.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be done; change nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Also restore GPUs saved by eopt processes that are still running, even while "
    "they hold the GPU's lock.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was (or would be) restored.")
@quiet_option
def command(gpus: tuple[int, ...], dry_run: bool, force: bool, as_json: bool) -> None:
    """Restore GPU clocks and power limits saved by eopt runs that were killed.

    eopt saves each GPU's settings before changing them and restores them on exit,
    errors and Ctrl-C. A run killed with SIGKILL cannot: its saved state stays in
    $EOPT_STATE_DIR (default ~/.local/state/eopt), and this command puts the GPUs
    back: it resets locked clocks and sets the ORIGINAL power limit. When several
    saved states name one GPU (`eopt apply a.json; eopt apply b.json`), the oldest
    one, the state found before the first change, is restored. A GPU that another
    eopt process controls right now is left alone. Needs root or CAP_SYS_ADMIN.

    \b
    Examples:
      eopt reset --dry-run        # show what would be restored
      sudo eopt reset             # restore every saved GPU
      sudo eopt reset --gpu 0     # only GPU 0
    """
    from eopt.devices.base import DeviceError
    from eopt.devices.guard import (
        controlling_gpu,
        entry_key,
        find_state_files,
        state_dir,
    )

    # What --json prints: one entry per GPU acted on (or that would be), and the skips.
    events: dict[str, list[str]] = {"restored": [], "would_restore": [], "skipped": []}
    if as_json:
        console.quiet = True  # stdout carries the JSON only

    def say(text: str, stream: Any = err_console) -> None:
        stream.print(text, highlight=False, soft_wrap=True)

    files = find_state_files()  # oldest first
    wanted = set(gpus)
    remaining: dict[Path, list[dict[str, Any]]] = {}
    # GPU → its saved entries, oldest first: the first is the original state.
    saved: dict[str, list[tuple[StateFile, dict[str, Any]]]] = {}
    for state in files:
        if not state.local:
            say(f"skipping {state.path}: saved on host {state.host!r}; run eopt reset there")
            events["skipped"].append(f"{state.path}: saved on host {state.host}")
            continue
        if not state.stale and not force:
            say(
                f"skipping {state.path}: eopt process {state.pid} is still running and will "
                "restore its GPUs itself (use --force to restore anyway)"
            )
            events["skipped"].append(f"{state.path}: eopt process {state.pid} is running")
            continue
        remaining[state.path] = list(state.devices)
        for entry in state.devices:
            if wanted and entry.get("index") not in wanted:
                continue
            if entry.get("backend") != "nvml":
                # Not a GPU eopt reset can reach (e.g. a test double): nothing to restore.
                remaining[state.path] = [e for e in remaining[state.path] if e is not entry]
                continue
            saved.setdefault(entry_key(entry, state.host), []).append((state, entry))

    restored = 0
    pending = 0
    failures: list[str] = []
    for entries in saved.values():
        first_state, first = entries[0]
        label = f"gpu{first.get('index')} ({first.get('model', '?')})"
        later = len(entries) - 1
        if later:
            say(
                f"{label}: {later + 1} saved states; restoring the oldest ({first_state.created},"
                f" {first_state.path.name}), the settings found before the first change"
            )
        if dry_run:
            say(f"would {_describe(first)} on {label}", console)
            events["would_restore"].append(label)
            pending += 1
            continue
        try:
            lock = (
                contextlib.nullcontext()
                if force
                else controlling_gpu(first, first_state.host, state_dir())
            )
            with lock:
                for line in _open(first).restore_from_state(first):
                    say(f"restored {line}", console)
        except (DeviceError, UserError) as exc:  # GpuInUseError included: someone controls it
            failures.append(f"{label}: {exc}")
            continue
        restored += 1
        events["restored"].append(label)
        # Every saved state of this GPU is settled now, the later ones included.
        for state, entry in entries:
            remaining[state.path] = [e for e in remaining[state.path] if e is not entry]
    if not dry_run:
        for state in files:
            if state.path in remaining and len(remaining[state.path]) != len(state.devices):
                state.write_devices(remaining[state.path])
    if as_json:
        write_json("-", {**events, "failed": failures, "dry_run": dry_run})
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
