"""A stateful fake of the ``pynvml`` module, patched in at eopt's NVML boundary.

The fake keeps each GPU's settings (locked clocks, power limit in mW, energy counter in
mJ) so tests can check what eopt changed and restored. Every call is logged, and its
arguments are bound against the real ``pynvml`` function's signature, so a call with the
wrong arity fails here as it would on a real GPU.
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pynvml as real_pynvml
import pytest


@dataclass
class FakeGpu:
    """One fake GPU's state; powers in mW, energy in mJ, clocks in MHz."""

    name: str = "NVIDIA A100-SXM4-40GB"
    uuid: str = "GPU-0000-fake"
    mem_clocks: tuple[int, ...] = (1215,)
    sm_clocks: tuple[int, ...] = tuple(range(1410, 209, -15))
    limit_min_mw: int = 100_000
    limit_max_mw: int = 400_000
    default_limit_mw: int = 400_000
    limit_mw: int = 400_000
    locked_sm: tuple[int, int] | None = None
    locked_mem: tuple[int, int] | None = None
    current_sm_mhz: int = 1410
    power_mw: int = 61_234
    energy_supported: bool = True
    fields: dict[int, bool] = field(
        default_factory=lambda: {
            real_pynvml.NVML_FI_DEV_POWER_INSTANT: True,
            real_pynvml.NVML_FI_DEV_POWER_AVERAGE: True,
        }
    )
    can_set: bool = True  # False: setters fail with NVML_ERROR_NO_PERMISSION
    limit_sticks: bool = True  # False: the limit silently stays as it was
    mem_lock_supported: bool = True
    energy: Any = field(default_factory=lambda: itertools.count(1_000_000, 2_500))


def _err(code: int) -> real_pynvml.NVMLError:
    return real_pynvml.NVMLError(code)


class FakePynvml:
    """Module-like fake: NVML constants and errors from the real module, state in ``gpus``."""

    SETTERS = (
        "nvmlDeviceSetGpuLockedClocks",
        "nvmlDeviceSetMemoryLockedClocks",
        "nvmlDeviceSetPowerManagementLimit",
        "nvmlDeviceResetGpuLockedClocks",
        "nvmlDeviceResetMemoryLockedClocks",
    )

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.init_error = init_error

    def __getattr__(self, name: str) -> Any:
        # Constants and error classes come from the real module.
        if name.startswith(("NVML_", "NVMLError")):
            return getattr(real_pynvml, name)
        raise AttributeError(name)

    def _log(self, name: str, *args: Any) -> None:
        inspect.signature(getattr(real_pynvml, name)).bind(*args)
        self.calls.append((name, args))

    def setter_calls(self) -> list[str]:
        """Names of the setting-changing functions called so far."""
        return [n for n, _ in self.calls if n in self.SETTERS]

    # -- init / discovery
    def nvmlInit(self) -> None:
        self._log("nvmlInit")
        if self.init_error is not None:
            raise _err(self.init_error)

    def nvmlDeviceGetCount(self) -> int:
        self._log("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._log("nvmlDeviceGetHandleByIndex", index)
        if not 0 <= index < len(self.gpus):
            raise _err(real_pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        self._log("nvmlDeviceGetName", h)
        return h.name

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        self._log("nvmlDeviceGetUUID", h)
        return h.uuid

    # -- capabilities
    def nvmlDeviceGetSupportedMemoryClocks(self, h: FakeGpu) -> list[int]:
        self._log("nvmlDeviceGetSupportedMemoryClocks", h)
        return list(h.mem_clocks)

    def nvmlDeviceGetSupportedGraphicsClocks(self, h: FakeGpu, mem: int) -> list[int]:
        self._log("nvmlDeviceGetSupportedGraphicsClocks", h, mem)
        if mem not in h.mem_clocks:
            raise _err(real_pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return list(h.sm_clocks)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h: FakeGpu) -> list[int]:
        self._log("nvmlDeviceGetPowerManagementLimitConstraints", h)
        return [h.limit_min_mw, h.limit_max_mw]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetPowerManagementDefaultLimit", h)
        return h.default_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetPowerManagementLimit", h)
        return h.limit_mw

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, kind: int) -> int:
        self._log("nvmlDeviceGetClockInfo", h, kind)
        if h.locked_sm is not None:
            return min(h.current_sm_mhz, h.locked_sm[1])
        return h.current_sm_mhz

    # -- setters
    def _check_rights(self, h: FakeGpu) -> None:
        if not h.can_set:
            raise _err(real_pynvml.NVML_ERROR_NO_PERMISSION)

    def nvmlDeviceSetGpuLockedClocks(self, h: FakeGpu, lo: int, hi: int) -> None:
        self._log("nvmlDeviceSetGpuLockedClocks", h, lo, hi)
        self._check_rights(h)
        h.locked_sm = (lo, hi)

    def nvmlDeviceResetGpuLockedClocks(self, h: FakeGpu) -> None:
        self._log("nvmlDeviceResetGpuLockedClocks", h)
        self._check_rights(h)
        h.locked_sm = None

    def nvmlDeviceSetMemoryLockedClocks(self, h: FakeGpu, lo: int, hi: int) -> None:
        self._log("nvmlDeviceSetMemoryLockedClocks", h, lo, hi)
        self._check_rights(h)
        if not h.mem_lock_supported:
            raise _err(real_pynvml.NVML_ERROR_NOT_SUPPORTED)
        h.locked_mem = (lo, hi)

    def nvmlDeviceResetMemoryLockedClocks(self, h: FakeGpu) -> None:
        self._log("nvmlDeviceResetMemoryLockedClocks", h)
        self._check_rights(h)
        if not h.mem_lock_supported:
            raise _err(real_pynvml.NVML_ERROR_NOT_SUPPORTED)
        h.locked_mem = None

    def nvmlDeviceSetPowerManagementLimit(self, h: FakeGpu, mw: int) -> None:
        self._log("nvmlDeviceSetPowerManagementLimit", h, mw)
        self._check_rights(h)
        if not h.limit_min_mw <= mw <= h.limit_max_mw:
            raise _err(real_pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if h.limit_sticks:
            h.limit_mw = mw

    # -- sensors
    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetTotalEnergyConsumption", h)
        if not h.energy_supported:
            raise _err(real_pynvml.NVML_ERROR_NOT_SUPPORTED)
        return next(h.energy)

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._log("nvmlDeviceGetPowerUsage", h)
        return h.power_mw

    def nvmlDeviceGetFieldValues(self, h: FakeGpu, ids: list[int]) -> list[SimpleNamespace]:
        self._log("nvmlDeviceGetFieldValues", h, ids)
        out = []
        for fid in ids:
            ok = h.fields.get(fid, False)
            out.append(
                SimpleNamespace(
                    fieldId=fid,
                    nvmlReturn=real_pynvml.NVML_SUCCESS
                    if ok
                    else real_pynvml.NVML_ERROR_NOT_SUPPORTED,
                    valueType=real_pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                    value=SimpleNamespace(uiVal=h.power_mw + fid),  # fid tags the field
                )
            )
        return out


@pytest.fixture
def fake_nvml() -> Any:
    """One fake A100 (400 W default limit) patched in as ``eopt.devices.nvml.pynvml``."""
    fake = FakePynvml([FakeGpu()])
    with mock.patch("eopt.devices.nvml.pynvml", fake):
        yield fake


@pytest.fixture
def make_fake_nvml() -> Any:
    """Factory: ``make_fake_nvml([{FakeGpu field: value}, …], init_error=None)``.

    Patches a fake with one GPU per mapping in and returns it.
    """
    patches = []

    def make(gpus: list[dict[str, Any]], init_error: int | None = None) -> FakePynvml:
        fake = FakePynvml(
            [FakeGpu(**{"uuid": f"GPU-{i}-fake", **g}) for i, g in enumerate(gpus)], init_error
        )
        patcher = mock.patch("eopt.devices.nvml.pynvml", fake)
        patcher.start()
        patches.append(patcher)
        return fake

    yield make
    for patcher in patches:
        patcher.stop()
