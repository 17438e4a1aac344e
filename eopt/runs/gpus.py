"""The GPU a sweep runs on: how to open it anywhere, a seeded simulated GPU per cell, and
where a cell was measured.

A :class:`GpuSpec` says how to open one GPU (backend, index, simulated model, seed,
control) in any process: the sweep's own, a shard's on another node, a Ray worker's. It
is what a sweep hands to a worker instead of a device object, which cannot travel.

Simulated GPUs are seeded per cell. A simulated GPU carries state from one kernel to the
next (its noise streams, its temperature, its sensor's phase), so numbers measured one
after another on one simulated GPU would depend on what ran before and on which GPU ran
them. Swept from a :class:`GpuSpec`, each cell is measured instead on a fresh simulated
GPU, as one that has sat idle, seeded from the sweep's seed and the cell's identity
(:func:`seed_for`), and so is each operating point's static power: a simulated library
is the same whether it is swept serially, in shards or on a Ray cluster, in any order.
Real GPUs are one device for the whole sweep; their numbers are the hardware's.

Every cell records where it was measured (:func:`place_of`, ``meta.measured_on``): the
host, the GPU's name there, its index and, for a real GPU, its UUID.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from eopt.devices.backends import backend, backend_of, gpu_backend_names
from eopt.devices.base import Device

__all__ = ["GpuSpec", "fresh_opener", "fresh_simulated", "is_simulated", "place_of", "seed_for"]


@dataclass(frozen=True)
class GpuSpec:
    """How to open one GPU of a sweep, in whichever process measures on it.

    Attributes:
        backend: ``auto``, or a backend of :mod:`eopt.devices.backends` (``nvml``,
            ``sim``).
        index: The GPU's NVML index, or the simulated GPU's index.
        sim_model: The simulated GPU's model, or a profile file from ``eopt sim fit``.
        seed: The sweep's seed (the simulator's noise; each cell's own is derived from
            it, :func:`seed_for`).
        control: False opens the GPU measure-only.
    """

    backend: str
    index: int
    sim_model: str
    seed: int
    control: bool = True

    def open(self) -> Device:
        """The GPU itself.

        Raises:
            DeviceError: when it cannot be opened (no such GPU, NVML unavailable …).
            ValueError: for an unknown backend or simulated model.
        """
        from eopt.devices import open_devices

        return open_devices(
            self.backend, [self.index], self.sim_model, self.seed, control=self.control
        )[0]

    def at(self, index: int) -> GpuSpec:
        """The same GPU settings for the GPU at ``index``."""
        return replace(self, index=index)


def is_simulated(device: object) -> bool:
    """Whether ``device`` comes from a registered simulated backend."""
    name = backend_of(device)
    return name in gpu_backend_names() and not backend(name).real


def seed_for(seed: int, key: str) -> int:
    """A seed for one cell, from the sweep's ``seed`` and the cell's identity ``key``.

    The first 8 bytes of a SHA-256 of both: the same for the same cell in every process
    and on every host (Python's own ``hash`` of a string is not), and unrelated between
    cells.
    """
    digest = hashlib.sha256(f"{seed}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def fresh_simulated(spec: GpuSpec, stands_for: Device, key: str) -> Device:
    """A new simulated GPU for the cell ``key``, seeded by :func:`seed_for`.

    It is opened at index 0, because a simulated GPU draws its noise from its seed *and*
    its index, and a cell's numbers must not depend on which GPU measured it; it is then
    named for the GPU it stands for (``stands_for``, whose cells it measures).
    """
    from eopt.devices import open_devices

    device: Any = open_devices(
        backend_of(stands_for),
        [0],
        spec.sim_model,
        seed_for(spec.seed, key),
        control=spec.control,
    )[0]
    device.index = stands_for.index
    device.name = stands_for.name
    return device  # type: ignore[no-any-return]


def fresh_opener(spec: GpuSpec | None, device: Device) -> Callable[[str], Device] | None:
    """Per-cell simulated GPUs for ``device`` when it was opened from ``spec`` and is
    simulated; None when cells are measured on ``device`` itself."""
    if spec is None or not is_simulated(device):
        return None
    return lambda key: fresh_simulated(spec, device, key)


def place_of(device: Device) -> dict[str, Any]:
    """Where a cell on ``device`` is measured, for ``meta.measured_on``.

    Returns:
        ``host`` (this machine's name), ``gpu`` (the device's name here: ``gpu0``,
        ``sim1``), ``index`` (its NVML or simulated index) and, for a GPU that has one,
        ``uuid``.
    """
    place: dict[str, Any] = {"host": socket.gethostname(), "gpu": device.name}
    index = getattr(device, "index", None)
    if isinstance(index, int):
        place["index"] = index
    uuid = getattr(device, "uuid", None)
    if isinstance(uuid, str) and uuid:
        place["uuid"] = uuid
    return place
