"""The one place where `eopt.apply` reaches the devices layer's state guard.

Restoring GPU state has exactly one implementation, in ``eopt.devices.guard``; this
module only adapts its call so the rest of `eopt.apply` does not depend on its spelling.
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
            ``--until-exit``); the saved state stays on disk for ``eopt reset``. Errors
            and signals still restore.
    """
    from eopt.devices import guard

    return guard.controlled(list(devices), keep=keep)
