"""The one place where `eopt.apply` reaches the devices layer's state guard.

Restoring GPU state has one implementation, ``eopt.devices.guard.restoring_on_exit``;
this module only adapts its call so the rest of `eopt.apply` does not depend on its
spelling.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager

from eopt.devices.base import Device

__all__ = ["device_guard"]


def device_guard(
    devices: Sequence[Device], *, keep: bool = False
) -> AbstractContextManager[object]:
    """Guard ``devices``: save their state first, restore it on every exit path.

    Args:
        devices: The GPUs whose settings will change inside the block.
        keep: Leave the new settings in place on a normal exit (``eopt apply`` without
            ``--until-exit``); the saved state stays on disk, marked as kept, for
            ``eopt reset``. Exceptions and signals still restore.
    """
    from eopt.devices.guard import restoring_on_exit

    return restoring_on_exit(list(devices), keep=keep)
