"""The one place where `eopt.apply` reaches the devices layer's state guard.

Restoring GPU state has one implementation, ``eopt.devices.guard.restoring_on_exit``
(which calls each device's own ``restore``); this module only adapts it. ``eopt apply``
without ``--until-exit`` must *keep* the new settings after a normal exit, which the
guard does not offer: for that case the original state is written to a state file in the
guard's format before anything changes (so ``eopt reset`` restores it later), and a
failure part-way calls each device's ``restore``, as the guard does.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from eopt.devices.base import Device, DeviceError

__all__ = ["device_guard"]


def device_guard(
    devices: Sequence[Device], *, keep: bool = False
) -> AbstractContextManager[object]:
    """Guard ``devices``: save their state first, restore it on every exit path.

    Args:
        devices: The GPUs whose settings will change inside the block.
        keep: Leave the new settings in place on a normal exit (``eopt apply`` without
            ``--until-exit``); the saved state stays on disk for ``eopt reset``. An
            exception (including Ctrl-C) inside the block still restores.
    """
    from eopt.devices.guard import restoring_on_exit

    if keep:
        return _kept(list(devices))
    return restoring_on_exit(list(devices))


@contextlib.contextmanager
def _kept(devices: list[Device]) -> Iterator[list[Device]]:
    from eopt.devices.guard import StateFile, state_dir, warn_if_stale

    warn_if_stale()
    entries = [
        d.snapshot_state()  # type: ignore[attr-defined]
        for d in devices
        if hasattr(d, "snapshot_state") and getattr(d, "control", True)
    ]
    state: StateFile | None = None
    if entries:
        pid = os.getpid()
        path = Path(state_dir()) / f"gpu-state-{pid}-apply-{id(devices):x}.json"
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        state = StateFile(
            path=path, pid=pid, host=socket.gethostname(), created=created, devices=()
        )
        state.write_devices(entries)  # before the first change: `eopt reset` can undo it
    try:
        yield devices
    except BaseException:
        # Undo part-way changes with each device's own restore (what the guard calls).
        failures = []
        for device in devices:
            try:
                device.restore()
            except Exception as exc:  # keep restoring the others
                failures.append(f"{device.name}: {exc}")
        if failures:
            where = f" (state kept in {state.path})" if state is not None else ""
            raise DeviceError(
                "could not restore GPU settings: " + "; ".join(failures) + f"{where}; "
                "run `eopt reset`"
            ) from None
        if state is not None:
            state.path.unlink(missing_ok=True)
        raise
