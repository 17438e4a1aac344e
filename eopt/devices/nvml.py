"""NVIDIA GPUs through NVML (``pynvml``); the only module that calls NVML."""

from __future__ import annotations

import pynvml

from eopt.devices.base import DeviceError

__all__ = ["device_count"]


def device_count(raise_errors: bool = False) -> int:
    """Number of NVIDIA GPUs NVML sees; 0 when NVML is unavailable (unless ``raise_errors``).

    Raises:
        DeviceError: when ``raise_errors`` and NVML cannot start.
    """
    try:
        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as exc:
        if raise_errors:
            raise DeviceError(
                f"NVML is unavailable ({exc}): is the NVIDIA driver installed? "
                "Use --backend sim to run on the simulated GPU"
            ) from exc
        return 0
