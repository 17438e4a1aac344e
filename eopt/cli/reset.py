"""``eopt reset``: restore GPUs that a killed eopt run left with changed settings."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from eopt.cli._common import UserError, console, err_console, write_json
from eopt.cli.options import force_option, json_option, quiet_option

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


class _GpuSpec(click.ParamType):
    """``--gpu``: checked for its form here, resolved (through NVML) only when needed."""

    name = "GPU"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from eopt.devices.gpu_select import parse_pci_bus_id

        text = str(value).strip()
        if re.fullmatch(r"-\d+", text):
            self.fail(f"{text} is not in the range x>=0", param, ctx)
        if (
            re.fullmatch(r"(?i)(cuda:|nvml:)?\d+", text)
            or text.upper().startswith(("GPU-", "MIG-"))
            or parse_pci_bus_id(text) is not None
        ):
            return text
        self.fail(
            f"{text!r}: give a UUID (GPU-…, from nvidia-smi -L), a PCI bus id "
            "(0000:3b:00.0), a CUDA ordinal (0, cuda:1) or nvml:N",
            param,
            ctx,
        )


def _gpu_filter(specs: tuple[str, ...]) -> Any:
    """A predicate over saved entries for ``--gpu`` specs (None: every entry).

    A UUID (or a unique prefix of one) matches saved entries directly, so it works for
    a GPU that is no longer present; CUDA ordinals, PCI bus ids and ``nvml:N`` are
    resolved through NVML to the GPU's UUID (``eopt.devices.resolve_gpu``).
    """
    if not specs:
        return None
    uuids: list[str] = []
    for spec in specs:
        if spec.upper().startswith("GPU-"):
            uuids.append(spec.lower())
            continue
        from eopt.cli._gpus import resolve_gpu_option
        from eopt.devices import nvml
        from eopt.devices.base import DeviceError

        try:
            index = resolve_gpu_option(spec)
            uuids.append(next(g.uuid for g in nvml.list_gpus() if g.index == index).lower())
        except (DeviceError, StopIteration) as exc:
            raise UserError(f"--gpu {spec}: {exc}") from None

    def wanted(entry: dict[str, Any]) -> bool:
        uuid = str(entry.get("uuid") or "").lower()
        return bool(uuid) and any(uuid == u or uuid.startswith(u) for u in uuids)

    return wanted


@click.command("reset")
@click.option(
    "--gpu",
    "gpus",
    multiple=True,
    type=_GpuSpec(),
    help="Restore only this GPU (repeatable): a UUID (GPU-…, from nvidia-smi -L), a PCI "
    "bus id, a CUDA ordinal as this shell sees it (CUDA_VISIBLE_DEVICES honoured) or "
    "nvml:N (nvidia-smi's number). Default: every saved GPU.",
)
@click.option(
    "--state-dir",
    "state_dirs",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Look for saved states here instead (repeatable). Default: $EOPT_STATE_DIR or "
    "~/.local/state/eopt, and under sudo also the invoking user's ~/.local/state/eopt.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be done; change nothing.")
@force_option(
    "Also restore GPUs saved by eopt processes that are still running, even while they "
    "hold the GPU's lock."
)
@json_option("Print what was (or would be) restored.")
@quiet_option()
def command(
    gpus: tuple[str, ...],
    state_dirs: tuple[Path, ...],
    dry_run: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Restore GPU clocks and power limits saved by eopt runs that were killed.

    eopt saves each GPU's settings before changing them and restores them on exit,
    errors, Ctrl-C and SIGTERM. A run killed with SIGKILL cannot: its saved state stays
    in $EOPT_STATE_DIR (default ~/.local/state/eopt), and this command puts the GPUs
    back: it resets locked clocks and sets the ORIGINAL power limit. When several
    saved states name one GPU (`eopt apply a.json; eopt apply b.json`), the oldest
    one, the state found before the first change, is restored. A GPU that another
    eopt process controls right now is left alone. Needs root or CAP_SYS_ADMIN; under
    sudo it also looks in the invoking user's state directory.

    \b
    Examples:
      eopt reset --dry-run                # show what would be restored
      sudo eopt reset                     # restore every saved GPU
      sudo eopt reset --gpu GPU-8f2c      # only this GPU (UUID or a unique prefix)
      sudo eopt reset --state-dir /shared/eopt-state
    """
    from eopt.devices.base import DeviceError
    from eopt.devices.guard import (
        controlling_gpu,
        entry_key,
        find_state_files,
        reset_state_dirs,
    )

    # What --json prints: one entry per GPU acted on (or that would be), and the skips.
    events: dict[str, list[str]] = {"restored": [], "would_restore": [], "skipped": []}
    if as_json:
        console.quiet = True  # stdout carries the JSON only

    def say(text: str, stream: Any = err_console) -> None:
        stream.print(text, highlight=False, soft_wrap=True)

    directories = reset_state_dirs(state_dirs)
    try:
        files = sorted(
            (f for d in directories for f in find_state_files(d)), key=lambda f: f.created
        )  # oldest first, across directories
    except ValueError as exc:
        raise UserError(str(exc)) from None
    wanted = _gpu_filter(gpus)
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
            if wanted is not None and not wanted(entry):
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
            # The lock lives next to the state file: the process that wrote it (another
            # user's, under sudo) locked the GPU in its own directory.
            lock = (
                contextlib.nullcontext()
                if force
                else controlling_gpu(first, first_state.host, first_state.path.parent)
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
        where = ", ".join(str(d) for d in directories)
        which = f" for GPU(s) {', '.join(gpus)}" if gpus else ""
        console.print(f"Nothing to restore{which}: no saved GPU state in {where}.", soft_wrap=True)
    elif dry_run:
        console.print(f"{pending} GPU(s) would be restored; run without --dry-run to do it.")
    else:
        console.print(f"Restored {restored} GPU(s).")
