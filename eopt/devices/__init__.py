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
#: Said instead when there is an NVIDIA driver or NVML library but NVML cannot use it.
SIM_FALLBACK_ANNOUNCEMENT = (
    "NVML did not start ({reason}): using the simulated {model} (eopt sim); "
    "--backend nvml makes this an error"
)
_BACKENDS = ("auto", "nvml", "sim")


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
    if backend not in _BACKENDS:
        raise ValueError(
            f"unknown device backend {backend!r}; choose one of {', '.join(_BACKENDS)}"
        )
    if backend in ("auto", "nvml"):
        from eopt.devices.base import DeviceError

        announcement = SIM_ANNOUNCEMENT.format(model=sim_model)
        try:
            from eopt.devices import nvml
        except ImportError as exc:  # nvidia-ml-py missing from this environment
            if backend == "nvml":
                raise DeviceError(
                    f"cannot import pynvml ({exc}): pip install nvidia-ml-py"
                ) from exc
            nvml = None
            announcement = SIM_FALLBACK_ANNOUNCEMENT.format(
                reason=f"cannot import pynvml: {exc}; pip install nvidia-ml-py", model=sim_model
            )
        count = 0
        if nvml is not None:
            try:
                count = nvml.device_count(raise_errors=True)
            except nvml.NvmlStartError as exc:
                if backend == "nvml":
                    raise
                if not exc.driver_missing:
                    # A driver is there but NVML cannot use it: "no GPU" would mislead.
                    reason = str(exc).split("; use --backend sim")[0]
                    announcement = SIM_FALLBACK_ANNOUNCEMENT.format(reason=reason, model=sim_model)
        if nvml is not None and count > 0:
            wanted = list(range(count)) if indices is None else list(indices)
            if control:
                from eopt.devices.guard import warn_if_stale

                warn_if_stale()  # a killed run may have left these GPUs changed
            return [nvml.NvmlGPU(i, control=control) for i in wanted]
        if backend == "nvml":
            raise DeviceError("NVML works but reports no GPU; use --backend sim to simulate one")
        print(announcement, file=sys.stderr)
    from eopt.sim.gpu import SimulatedGPU, VirtualClock

    clock = VirtualClock()
    wanted = [0] if indices is None else list(indices)
    return [
        SimulatedGPU(sim_model, index=i, clock=clock, seed=seed, control=control) for i in wanted
    ]
