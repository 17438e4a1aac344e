"""What eopt's power sampling costs: the share of one CPU core it takes, per GPU.

Two settings, each at a 10 ms and a 20 ms polling period, with the energy counter and with
power sampling:

* **patched NVML** — eopt's NVML device over a stand-in ``pynvml`` whose calls return at
  once, on the wall clock: the process's CPU time while the meter polls for
  ``--seconds``, minus the same idle wait without a meter. This is eopt's own cost
  (thread wake-ups, reading, the trace); a real driver call adds its own (NVML's power
  query is microseconds).
* **simulator** — the simulated GPU on virtual time: the CPU time of ``--seconds`` of
  simulated idle with the meter polling, minus the same without it, over the simulated
  time: the cost per second of run if the polls happened on the wall clock.

Target: under 1 % of a core at 20 ms, per GPU.

    python3 benchmarks/sampler_overhead.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from types import SimpleNamespace
from unittest import mock

import pynvml as real_pynvml

from eopt.measure.meter import Meter
from eopt.sim.gpu import SimulatedGPU

TARGET = 0.01  # of one core, at 20 ms


class InstantNvml:
    """A ``pynvml`` whose device calls return immediately (constant 200 W)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def __getattr__(self, name: str) -> object:
        value = getattr(real_pynvml, name)
        if callable(value) and name.startswith("nvml"):
            raise AttributeError(f"the stand-in NVML has no {name}")
        return value  # constants and error classes

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H100 (stand-in)"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return "GPU-standin"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return int(200_000 * (time.perf_counter() - self.t0))  # mJ

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 200_000

    def nvmlDeviceGetFieldValues(self, handle: int, ids: list[int]) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(
                fieldId=f,
                nvmlReturn=real_pynvml.NVML_SUCCESS,
                valueType=real_pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                value=SimpleNamespace(uiVal=200_000),
            )
            for f in ids
        ]


def nvml_share(method: str, period_s: float, seconds: float) -> tuple[float, int]:
    with mock.patch("eopt.devices.nvml.pynvml", InstantNvml()):
        from eopt.devices.nvml import NvmlGPU

        gpu = NvmlGPU(0, control=False)
        c0 = time.process_time()
        time.sleep(seconds)
        idle = time.process_time() - c0
        meter = Meter(gpu, method=method, period_s=period_s).start()  # type: ignore[arg-type]
        c0 = time.process_time()
        time.sleep(seconds)
        busy = time.process_time() - c0
        meter.stop()
        polls = len(meter.counter_trace) if method == "counter" else round(seconds / period_s)
    return max(busy - idle, 0.0) / seconds, polls


def sim_share(method: str, period_s: float, seconds: float) -> tuple[float, int]:
    gpu = SimulatedGPU(seed=0, energy_counter=method == "counter")
    c0 = time.process_time()
    gpu.idle(seconds)
    base = time.process_time() - c0
    meter = Meter(gpu, method=method, period_s=period_s).start()  # type: ignore[arg-type]
    c0 = time.process_time()
    gpu.idle(seconds)
    with_meter = time.process_time() - c0
    meter.stop()
    return max(with_meter - base, 0.0) / seconds, round(seconds / period_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    print(f"{'setting':<14}{'method':<9}{'period':>8}{'polls':>8}{'core share':>12}  check")
    failed = 0
    for name, fn in (("patched NVML", nvml_share), ("simulator", sim_share)):
        for method in ("counter", "sampler"):
            for period in (0.010, 0.020):
                share, polls = fn(method, period, args.seconds)
                check = ""
                if period == 0.020:
                    ok = share < TARGET
                    failed += not ok
                    check = "PASS" if ok else "FAIL"
                print(
                    f"{name:<14}{method:<9}{period * 1e3:>6.0f}ms{polls:>8}{share:>11.2%}  {check}"
                )
    print(f"\ntarget: < {TARGET:.0%} of a core at 20 ms; {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
