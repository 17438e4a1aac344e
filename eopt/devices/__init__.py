"""Hardware operating-point control: operating points and devices (NVML, simulated).

Importing this package never touches NVML; backends load on demand.

Example::

    from eopt.devices import open_devices
    gpus = open_devices()             # NVML GPUs, or the simulated A100 when none
    gpus[0].power().power_w
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from eopt.model.operating_point import OperatingPoint

if TYPE_CHECKING:
    from eopt.devices.base import Device

# Loaded on first use, so importing the package never imports NVML or NumPy.
_LAZY = {
    "NvmlGPU": "eopt.devices.nvml",
    "SimulatedGPU": "eopt.sim.gpu",
    "VirtualClock": "eopt.sim.gpu",
    "Launch": "eopt.sim.gpu",
    "SimulatedNode": "eopt.sim.node",
    "Mechanisms": "eopt.sim.mechanisms",
    "restoring_on_exit": "eopt.devices.guard",
    "resolve_gpu": "eopt.devices.gpu_select",
}

__all__ = [
    "SIM_ANNOUNCEMENT",
    "SIM_FALLBACK_ANNOUNCEMENT",
    "OperatingPoint",
    "open_devices",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'eopt.devices' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


SIM_ANNOUNCEMENT = "No NVIDIA GPU found: using the simulated {model} (eopt sim)."
#: Said instead when a real backend is there but cannot be used.
SIM_FALLBACK_ANNOUNCEMENT = (
    "{library} did not start ({reason}): using the simulated {model} (eopt sim); "
    "--backend {backend} makes this an error"
)


def open_devices(
    backend: str = "auto",
    indices: Sequence[int] | None = None,
    sim_model: str = "A100-SXM4-40GB",
    seed: int = 0,
    control: bool = True,
) -> list[Device]:
    """Open GPUs through NVML, or simulated ones.

    Args:
        backend: ``"nvml"`` (real GPUs; errors without them), ``"sim"`` (simulated GPUs),
            or ``"auto"``: NVML when it initialises and sees at least one GPU, else the
            simulator, announced on stderr with the reason (no NVIDIA driver, or what
            stopped NVML from starting, e.g. a driver/library version mismatch).
        indices: NVML indices to open; all NVML GPUs (or one simulated GPU) when None.
            ``eopt.devices.gpu_select.resolve_gpu`` turns a CUDA ordinal, UUID or PCI bus
            id into one.
        sim_model: Simulated GPU model (see ``eopt.sim.profiles.available_profiles``).
        seed: Seed of the simulator's noise (GPU ``i`` uses ``[seed, i]``).
        control: False opens measure-only devices: every setter raises, nothing changes.

    Returns:
        The devices, in the order of ``indices``. Simulated GPUs share one virtual clock.

    Raises:
        ValueError: for an unknown backend or model.
        DeviceError: when NVML was asked for and is unavailable, an index is out of range,
            or a GPU to control is in MIG mode.
    """
    from eopt.devices.backends import AUTO, BACKENDS
    from eopt.devices.backends import backend as named
    from eopt.devices.base import BackendUnavailableError, DeviceError

    explicit = backend != AUTO
    candidates = [named(backend)] if explicit else list(BACKENDS)
    announcement = SIM_ANNOUNCEMENT.format(model=sim_model)
    for entry in candidates:
        if not entry.real and not explicit:
            print(announcement, file=sys.stderr)
        try:
            module = importlib.import_module(entry.module)
        except ImportError as exc:  # the backend's library is missing from this environment
            if explicit or not entry.real:
                missing = exc.name or entry.module
                raise DeviceError(f"cannot import {missing} ({exc}): {entry.install}") from exc
            announcement = SIM_FALLBACK_ANNOUNCEMENT.format(
                library=entry.library,
                reason=f"cannot import {exc.name or entry.module}: {exc}; {entry.install}",
                model=sim_model,
                backend=entry.name,
            )
            continue
        try:
            return list(
                module.open_backend(indices, control=control, sim_model=sim_model, seed=seed)
            )
        except BackendUnavailableError as exc:
            if explicit or not entry.real:
                raise
            if exc.fallback_reason is not None:
                announcement = SIM_FALLBACK_ANNOUNCEMENT.format(
                    library=entry.library,
                    reason=exc.fallback_reason,
                    model=sim_model,
                    backend=entry.name,
                )
    raise DeviceError("no device backend could open a GPU")  # the table ends with the simulator
