"""Read-only probe of an NVIDIA GPU's sensors, for machines where settings must not change.

Opens the GPU through eopt's NVML device with ``control=False`` and, before that, replaces
every NVML function that could change a setting with one that refuses and records the
call; the probe fails if any was called. It reports:

- identity: name, UUID, driver, NVML and CUDA driver versions;
- supported SM / memory clocks (count, min, max), power-limit range, default and current
  limit, current clocks, temperature;
- which power fields exist (``instant``, ``average_1s``, ``usage``) and the energy counter;
- how often each power field and the energy counter refresh, polled every 1 ms for 2 s
  (1 s for the counter) idle and under load
  (:func:`eopt.measure.sensor_period.estimate_power_update_period`); the counter meter is
  then told the measured counter period, so its edge errors use it;
- what NVML says about the GPU's state: persistence mode, MIG mode, requested and enforced
  power limit, clocks-event reasons, clock settings made before eopt, what
  ``nvmlDeviceGetPowerUsage`` is on this architecture, and the energy counter's scope;
- the energy of a ~5 s matmul loop (PyTorch bf16, else CuPy fp16) from the energy counter
  and from each power field sampled and integrated by :class:`eopt.measure.meter.Meter`
  over the same window, three times;
- the same comparison on short regions (10 ms, 100 ms, 1 s): how far sampling is off, and
  whether the meter's own error estimate covers it.

Needs only what a GPU box usually has (nvidia-ml-py, NumPy, PyTorch or CuPy): eopt is
imported from this checkout, and only its device and measurement modules are loaded.
Takes about a minute. Writes ``$OUT/probe.json`` when ``OUT`` is set, else
``./probe.json`` (or ``--out``).

Usage::

    python benchmarks/gpu_readonly_probe.py              # GPU 0
    python benchmarks/gpu_readonly_probe.py --gpu 1
    python benchmarks/gpu_readonly_probe.py --sim        # same logic, simulated H200
    python benchmarks/gpu_readonly_probe.py --smoke      # the GPU path on a fake NVML

``--sim`` runs every step against eopt's simulated H200 on virtual time (the matmul loop
becomes simulated GEMMs), so the script can be checked on a machine without a GPU.
``--smoke`` runs the real-GPU path (guard, eopt's NVML device, every step) against the
device tests' behavioural NVML fake (``tests/devices/conftest.py``, which needs pytest) on
the fake's virtual time, with short durations; the matmul loop becomes the fake GPU
drawing more power while work is queued. It checks that no setting-changing call reached
the fake, and writes ``probe.json`` only where ``--out`` says (else to a temporary folder).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock

REPO_DIR = Path(__file__).resolve().parent.parent
if str(REPO_DIR) not in sys.path:
    sys.path.insert(0, str(REPO_DIR))  # run from a checkout without installing eopt

from eopt.devices.base import PowerReading  # noqa: E402
from eopt.measure.meter import Meter, WindowEnergy  # noqa: E402
from eopt.measure.sensor_period import estimate_power_update_period  # noqa: E402
from eopt.model.operating_point import OperatingPoint  # noqa: E402

SCHEMA = "eopt.gpu-probe/1"
PERIOD_POLL_S = 0.001
PERIOD_DURATION_S = 2.0
COUNTER_PERIOD_DURATION_S = 1.0
WINDOW_S = 5.0
WINDOW_REPEATS = 3
SHORT_REGIONS_S = (0.01, 0.1, 1.0)
SHORT_REPEATS = 5
GAP_S = 0.3  # idle time before and between measured windows
# --smoke: the durations above, shortened (virtual time; a few sensor periods each).
SMOKE_SIZES: dict[str, Any] = {
    "PERIOD_DURATION_S": 1.0,
    "COUNTER_PERIOD_DURATION_S": 0.5,
    "WINDOW_S": 1.0,
    "WINDOW_REPEATS": 1,
    "SHORT_REGIONS_S": (0.01, 0.1),
    "SHORT_REPEATS": 2,
}
SMOKE_IDLE_MW = 60_000  # the fake GPU's draw idle and while work is queued, mW
SMOKE_BUSY_MW = 350_000
SMOKE_COUNTER_PERIOD_S = 0.001  # the fake's energy counter refresh: NVML's moves every ms

# NVML calls that change state: setters, resets, clears, creations and the like.
_CHANGING = re.compile(
    r"^nvml\w*?(Set|Reset|Clear|Create|Destroy|Modify|Freeze|Register|Enable|Disable|Remove)"
    r"(?![a-z])"
)


class SetterCalledError(AssertionError):
    """The probe reached a function that changes GPU settings (it must never do that)."""


class SetterGuard:
    """Replaces state-changing functions with ones that refuse, and records any attempt."""

    def __init__(self) -> None:
        self.guarded: list[str] = []
        self.calls: list[str] = []
        self._originals: list[tuple[Any, str, Any, bool]] = []

    def wrap(self, owner: Any, names: Sequence[str], label: str) -> None:
        """Replace ``owner.<name>`` for each name with a refusing stand-in."""
        for name in names:
            if not callable(getattr(owner, name, None)):
                continue
            qualified = f"{label}.{name}"

            def refuse(*args: Any, _name: str = qualified, **kwargs: Any) -> Any:
                self.calls.append(_name)
                raise SetterCalledError(
                    f"{_name} was called; this probe must never change a setting"
                )

            own = name in getattr(owner, "__dict__", {})
            self._originals.append((owner, name, getattr(owner, name), own))
            setattr(owner, name, refuse)
            self.guarded.append(qualified)

    def restore(self) -> None:
        """Put the original functions back."""
        for owner, name, original, own in reversed(self._originals):
            if own:
                setattr(owner, name, original)
            else:  # it was found on the class: drop the instance's stand-in
                delattr(owner, name)
        self._originals.clear()

    def to_dict(self) -> dict[str, Any]:
        return {"guarded": len(self.guarded), "calls": list(self.calls)}


def guard_nvml(guard: SetterGuard) -> Any:
    """Guard every state-changing function of the ``pynvml`` module eopt uses."""
    import pynvml

    names = [n for n in dir(pynvml) if _CHANGING.match(n) and callable(getattr(pynvml, n))]
    guard.wrap(pynvml, names, "pynvml")
    return pynvml


# --------------------------------------------------------------------------------------
# Work that keeps the GPU busy
# --------------------------------------------------------------------------------------
class Load:
    """Queues matrix multiplications for about a given time, without waiting for them."""

    library = "none"
    dtype = "none"

    def __init__(self) -> None:
        self.op_time_s: dict[str, float] = {}

    def _launch(self, kind: str) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError

    def _time(self, kind: str, count: int) -> float:
        self._launch(kind)
        self.sync()
        start = time.perf_counter()
        for _ in range(count):
            self._launch(kind)
        self.sync()
        return (time.perf_counter() - start) / count

    def calibrate(self) -> None:
        """Time one multiplication of each size."""
        self.op_time_s = {"small": self._time("small", 50), "big": self._time("big", 10)}

    def enqueue(self, duration_s: float) -> int:
        """Queue about ``duration_s`` of work; returns the number of operations queued.

        Long loads use big operations so the launch queue (about a thousand entries)
        never fills and the caller stays free to poll sensors meanwhile.
        """
        kind = "big" if duration_s >= 0.5 else "small"
        count = max(1, round(duration_s / self.op_time_s[kind]))
        for _ in range(count):
            self._launch(kind)
        return count

    def describe(self) -> dict[str, Any]:
        return {"library": self.library, "dtype": self.dtype, "op_time_s": self.op_time_s}


class TorchLoad(Load):
    library = "torch"
    dtype = "bfloat16"
    SIZES: ClassVar[dict[str, int]] = {"small": 4096, "big": 16384}

    def __init__(self, index: int) -> None:
        super().__init__()
        import torch

        self.torch = torch
        self.device = torch.device(f"cuda:{index}")
        self.mats = {}
        for kind, n in self.SIZES.items():
            a = torch.randn(n, n, device=self.device, dtype=torch.bfloat16)
            b = torch.randn(n, n, device=self.device, dtype=torch.bfloat16)
            self.mats[kind] = (a, b, torch.empty_like(a))

    def _launch(self, kind: str) -> None:
        a, b, c = self.mats[kind]
        self.torch.matmul(a, b, out=c)

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "sizes": self.SIZES, "version": self.torch.__version__}


class CupyLoad(Load):
    library = "cupy"
    dtype = "float16"  # CuPy has no bfloat16
    SIZES: ClassVar[dict[str, int]] = {"small": 4096, "big": 16384}

    def __init__(self, index: int) -> None:
        super().__init__()
        import cupy

        self.cp = cupy
        self.dev = cupy.cuda.Device(index)
        self.dev.use()
        self.mats = {}
        for kind, n in self.SIZES.items():
            a = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
            b = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
            self.mats[kind] = (a, b, cupy.empty_like(a))

    def _launch(self, kind: str) -> None:
        a, b, c = self.mats[kind]
        self.cp.matmul(a, b, out=c)

    def sync(self) -> None:
        self.dev.synchronize()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "sizes": self.SIZES, "version": self.cp.__version__}


class SimLoad(Load):
    """Simulated GEMMs on the simulated GPU (virtual time)."""

    library = "eopt-sim"
    dtype = "bf16 (simulated cublas gemm)"
    WORKLOADS: ClassVar[dict[str, dict[str, int]]] = {
        "small": {"m": 4096, "n": 4096, "k": 4096},
        "big": {"m": 16384, "n": 16384, "k": 16384},
    }

    def __init__(self, gpu: Any) -> None:
        super().__init__()
        self.gpu = gpu

    def _launch(self, kind: str) -> None:
        self.gpu.enqueue("gemm", "cublas", self.WORKLOADS[kind])

    def sync(self) -> None:
        self.gpu.synchronize()

    def calibrate(self) -> None:
        # Virtual time: one launch gives the exact duration.
        self.op_time_s = {
            k: self.gpu.launch("gemm", "cublas", w) for k, w in self.WORKLOADS.items()
        }


class FakeNvmlLoad(Load):
    """Work on the NVML fake's GPU (``--smoke``): while work is queued the fake GPU draws
    about ``busy_mw`` (±5 %, alternating every ``WOBBLE_S``, as a real load's draw moves),
    else ``idle_mw``, on the fake's virtual time.

    Args:
        fake_gpu: The fake's GPU (a ``FakeGpu``; its ``power_mw`` is the true draw, mW).
        time: The fake's time source (a ``FakeTime``), which the device polls on.
        idle_mw: Draw with nothing queued, mW.
        busy_mw: Draw while work is queued, mW.
    """

    library = "nvml-fake"
    dtype = "none (the fake GPU draws more while work is queued)"
    OP_TIME_S: ClassVar[dict[str, float]] = {"small": 0.005, "big": 0.05}
    WOBBLE_S = 0.03

    def __init__(self, fake_gpu: Any, time: Any, idle_mw: int, busy_mw: int) -> None:
        super().__init__()
        self.fake_gpu, self.time = fake_gpu, time
        self.idle_mw, self.busy_mw = idle_mw, busy_mw
        self._busy_until_s = time.now()
        self._end: Any = None  # the timer that ends the queued work
        self._high = True
        fake_gpu.power_mw = idle_mw
        time.every(self.WOBBLE_S, self._wobble)

    def calibrate(self) -> None:
        self.op_time_s = dict(self.OP_TIME_S)

    def _launch(self, kind: str) -> None:
        now = self.time.now()
        self._busy_until_s = max(self._busy_until_s, now) + self.op_time_s[kind]
        self.fake_gpu.power_mw = self.busy_mw
        if self._end is not None:
            self._end.cancel()
        self._end = self.time.every(self._busy_until_s - now, self._finish)

    def _wobble(self, now_s: float) -> None:
        if now_s < self._busy_until_s:
            self._high = not self._high
            self.fake_gpu.power_mw = round(self.busy_mw * (1.05 if self._high else 0.95))

    def _finish(self, now_s: float) -> None:
        self.fake_gpu.power_mw = self.idle_mw
        self._end.cancel()  # a one-shot: the fake's timers repeat

    def sync(self) -> None:
        self.time.advance(max(0.0, self._busy_until_s - self.time.now()))


def open_load(index: int) -> Load:
    """PyTorch if importable, else CuPy."""
    try:
        return TorchLoad(index)
    except ImportError:
        pass
    try:
        return CupyLoad(index)
    except ImportError:
        raise SystemExit("neither torch nor cupy is importable: no way to load the GPU") from None


# --------------------------------------------------------------------------------------
# Device facts
# --------------------------------------------------------------------------------------
def _try(fn: Callable[[], Any]) -> Any:
    """A read that may be unsupported: its value, or ``{"error": …}``."""
    try:
        return fn()
    except SetterCalledError:
        raise
    except Exception as exc:  # an unsupported query must not end the probe
        return {"error": f"{type(exc).__name__}: {exc}"}


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _clock_summary(clocks: Sequence[float]) -> dict[str, Any]:
    values = list(clocks)
    return {
        "count": len(values),
        "min_mhz": min(values) if values else None,
        "max_mhz": max(values) if values else None,
    }


def device_facts(gpu: Any, pynvml: Any | None) -> dict[str, Any]:
    """Identity, clock tables, limits, current clocks, temperature, power fields."""
    facts: dict[str, Any] = {
        "index": gpu.index,
        "name": gpu.name,
        "model": gpu.model,
        "sm_clocks": _try(lambda: _clock_summary(gpu.supported_sm_clocks_mhz())),
        "mem_clocks": _try(lambda: _clock_summary(gpu.supported_mem_clocks_mhz())),
        "power_limit_range_w": _try(lambda: list(gpu.power_limit_range_w())),
        "default_power_limit_w": _try(gpu.default_power_limit_w),
        "current_power_limit_w": _try(lambda: gpu.current_operating_point().power_limit_w),
        "energy_counter": _try(lambda: gpu.energy_counter_j() is not None),
        "power_fields": _try(lambda: {k: r.power_w for k, r in gpu.power_fields().items()}),
        "assumed_power_update_period_s": gpu.power_update_period_s,
    }
    if pynvml is not None:
        h = pynvml.nvmlDeviceGetHandleByIndex(gpu.index)
        facts.update(
            persistence_mode=_try(gpu.persistence_mode),
            persistence_note=_try(gpu.persistence_note),
            mig_enabled=_try(gpu.mig_enabled),
            enforced_power_limit_w=_try(gpu.enforced_power_limit_w),
            clocks_event_reasons=_try(lambda: sorted(gpu.clocks_event_reasons() or [])),
            preexisting_clock_settings=_try(
                lambda: list(gpu.preexisting_clock_settings().findings)
            ),
            power_source=_try(lambda: gpu.power().field),
            energy_counter_scope=gpu.energy_counter_scope,
            assumed_energy_counter_period_s=gpu.energy_counter_period_s,
        )
        facts.update(
            uuid=_try(lambda: _text(pynvml.nvmlDeviceGetUUID(h))),
            driver=_try(lambda: _text(pynvml.nvmlSystemGetDriverVersion())),
            nvml_version=_try(lambda: _text(pynvml.nvmlSystemGetNVMLVersion())),
            cuda_driver_version=_try(lambda: pynvml.nvmlSystemGetCudaDriverVersion()),
            current_sm_clock_mhz=_try(
                lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            ),
            current_mem_clock_mhz=_try(
                lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
            ),
            temperature_c=_try(
                lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
            ),
        )
    else:
        facts.update(
            uuid=None,
            driver="eopt simulator",
            current_sm_clock_mhz=gpu.current_operating_point().sm_clock_mhz
            or gpu.profile.max_sm_clock_mhz,
            current_mem_clock_mhz=gpu.supported_mem_clocks_mhz()[0],
            temperature_c=gpu.temperature_c,
        )
    return facts


# --------------------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------------------
def update_periods(gpu: Any, load: Load, fields: Sequence[str]) -> list[dict[str, Any]]:
    """Each power field's and the counter's refresh period, idle and under load."""
    out = []
    for state in ("idle", "load"):
        for field in [*fields, "energy_counter"]:
            duration = COUNTER_PERIOD_DURATION_S if field == "energy_counter" else PERIOD_DURATION_S
            if state == "load":
                load.enqueue(duration + 0.2)  # busy from before the first poll to the last
                gpu.clock.sleep(0.1)
            if field == "energy_counter":
                found = estimate_power_update_period(
                    gpu,
                    read=gpu.energy_counter_j,
                    label=field,
                    poll_s=PERIOD_POLL_S,
                    duration_s=duration,
                )
            else:
                found = estimate_power_update_period(
                    gpu, field=field, poll_s=PERIOD_POLL_S, duration_s=duration
                )
            if state == "load":
                load.sync()
            gpu.clock.sleep(GAP_S)
            out.append({"state": state, **found.to_dict()})
    return out


def sampler_periods(
    gpu: Any, fields: Sequence[str], found: list[dict[str, Any]]
) -> dict[str, float]:
    """Each field's refresh period for its meter: the estimate under load where there is
    a resolved one, else the device's assumed period."""
    out = {}
    for field in fields:
        est = next(
            (r for r in found if r["state"] == "load" and r["field"] == field and r["period_s"]),
            None,
        )
        usable = est is not None and not est["at_poll_limit"]
        out[field] = est["period_s"] if usable else gpu.power_update_period_s
    return out


def counter_period(found: list[dict[str, Any]]) -> float | None:
    """The energy counter's refresh period measured under load, in s; None when it was
    not resolved (no estimate, or as fast as the polling)."""
    est = next(
        (
            r
            for r in found
            if r["state"] == "load" and r["field"] == "energy_counter" and r["period_s"]
        ),
        None,
    )
    if est is None or est["at_poll_limit"]:
        return None
    return float(est["period_s"])


class FieldView:
    """The device seen through one power field (so a sampler meter can read any field).

    Args:
        gpu: The device.
        field: A key of ``gpu.power_fields()``.
        period_s: The field's refresh period, in s (default: the device's assumption).
    """

    def __init__(self, gpu: Any, field: str, period_s: float | None = None) -> None:
        self.gpu = gpu
        self.field = field
        self.index, self.name, self.model, self.clock = gpu.index, gpu.name, gpu.model, gpu.clock
        self.power_update_period_s = period_s or gpu.power_update_period_s

    def power(self) -> PowerReading:
        return self.gpu.power_fields()[self.field]

    def energy_counter_j(self) -> None:
        return None

    def power_limit_range_w(self) -> tuple[float, float]:
        return self.gpu.power_limit_range_w()


@contextlib.contextmanager
def meters(gpu: Any, periods: dict[str, float]) -> Iterator[dict[str, Meter]]:
    """The counter meter (``energy_counter``) and one sampler meter per power field,
    each told its field's refresh period (``periods``: field → s)."""
    opened = {"energy_counter": Meter(gpu, method="counter")}
    opened.update({f: Meter(FieldView(gpu, f, p), method="sampler") for f, p in periods.items()})
    with contextlib.ExitStack() as stack:
        for meter in opened.values():
            stack.enter_context(meter)
        yield opened


def _compare(
    ref: WindowEnergy, got: dict[str, WindowEnergy]
) -> dict[str, dict[str, float | bool | int]]:
    out: dict[str, dict[str, float | bool | int]] = {}
    for field, w in got.items():
        diff = w.energy_j - ref.energy_j
        out[field] = {
            "energy_j": w.energy_j,
            "diff_j": diff,
            "rel_diff": diff / ref.energy_j if ref.energy_j > 0 else float("nan"),
            "error_estimate_j": w.error_j,
            "covered": bool(abs(diff) <= w.error_j),
            "samples_inside": w.n_samples,
            "short": w.short,
        }
    return out


def measure_windows(
    gpu: Any, load: Load, periods: dict[str, float], durations: Sequence[float], repeats: int
) -> list[dict[str, Any]]:
    """Counter vs sampled energy of GPU work lasting each duration, ``repeats`` times."""
    rows = []
    with meters(gpu, periods) as ms:
        gpu.clock.sleep(GAP_S)
        for duration in durations:
            for repeat in range(repeats):
                starts = {k: m.mark() for k, m in ms.items()}
                ops = load.enqueue(duration)
                load.sync()
                ends = {k: m.mark() for k, m in ms.items()}
                gpu.clock.sleep(GAP_S)
                energies = {k: m.energy(starts[k], ends[k]) for k, m in ms.items()}
                ref = energies.pop("energy_counter")
                rows.append(
                    {
                        "target_s": duration,
                        "repeat": repeat,
                        "ops": ops,
                        "duration_s": ref.duration_s,
                        "counter_j": ref.energy_j,
                        "mean_power_w": ref.mean_power_w,
                        "sampled": _compare(ref, energies),
                    }
                )
    return rows


def summarize_regions(rows: list[dict[str, Any]], fields: Sequence[str]) -> list[dict[str, Any]]:
    """Per target length and field: typical and worst relative error, estimate coverage."""
    out = []
    for target in sorted({r["target_s"] for r in rows}):
        group = [r for r in rows if r["target_s"] == target]
        for field in fields:
            errs = [abs(r["sampled"][field]["rel_diff"]) for r in group]
            out.append(
                {
                    "target_s": target,
                    "field": field,
                    "median_abs_rel_err": statistics.median(errs),
                    "max_abs_rel_err": max(errs),
                    "covered_by_estimate": sum(r["sampled"][field]["covered"] for r in group),
                    "n": len(group),
                }
            )
    return out


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------
def open_gpu(
    sim: bool, index: int, guard: SetterGuard, clock: Any = None, load: Load | None = None
) -> tuple[Any, Any, Load]:
    """The guarded, measure-only device, the pynvml module (None on the sim) and a load.

    ``clock`` and ``load`` replace the NVML device's wall clock and the matmul loop (the
    smoke run's fake time and fake load); the simulator ignores them.
    """
    if sim:
        from eopt.sim.gpu import SimulatedGPU

        gpu = SimulatedGPU("H200-SXM-141GB", index=index, seed=0, control=False)
        load: Load = SimLoad(gpu)
        pynvml = None
    else:
        pynvml = guard_nvml(guard)
        from eopt.devices.nvml import NvmlGPU

        gpu = NvmlGPU(index, control=False, clock=clock)
        load = load if load is not None else open_load(index)
    guard.wrap(gpu, ["set_operating_point", "restore", "restore_from_state"], gpu.name)
    return gpu, pynvml, load


def _section(result: dict[str, Any], key: str, step: Callable[[], Any]) -> Any:
    """Run one step into ``result[key]``; a failure is recorded there and the probe goes
    on (the other sections still come back). A setter attempt is never swallowed."""
    try:
        result[key] = step()
    except SetterCalledError:
        raise
    except Exception as exc:
        result[key] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        print(f"{key} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    return result[key]


def run_probe(
    sim: bool,
    index: int,
    result: dict[str, Any] | None = None,
    *,
    clock: Any = None,
    load: Load | None = None,
) -> dict[str, Any]:
    """Run every step; returns the JSON-ready result (filled into ``result`` as it goes,
    so a caller keeps what was measured even if a step raises). ``clock`` and ``load``:
    see :func:`open_gpu`.

    Raises:
        SetterCalledError: when anything tried to change a setting.
    """
    started = time.perf_counter()
    result = {} if result is None else result
    result.update(
        schema=SCHEMA,
        mode="sim" if sim else "nvml",
        # timezone.utc, not datetime.UTC: the package supports Python 3.10.
        started_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        python=platform.python_version(),
    )
    guard = SetterGuard()
    result["guard"] = guard.to_dict()
    gpu, pynvml, load = open_gpu(sim, index, guard, clock=clock, load=load)
    # The guard is in place: an (empty) setting is refused before it reaches the device.
    try:
        gpu.set_operating_point(OperatingPoint())
        guard_refused = False
    except SetterCalledError:
        guard_refused = True
    guard.calls.clear()
    result["device"] = device_facts(gpu, pynvml)
    offered = result["device"]["power_fields"]
    fields = sorted(k for k, v in offered.items() if isinstance(v, float) and k != "error")
    if _section(result, "workload", lambda: (load.calibrate(), load.describe())[1]) is None:
        fields = []  # no load: nothing below can be measured
    found = _section(result, "update_periods", lambda: update_periods(gpu, load, fields))
    periods = sampler_periods(gpu, fields, found or [])
    result["sampler_periods_s"] = periods
    measured = counter_period(found or [])
    if measured is not None:
        gpu.energy_counter_period_s = measured  # the counter meter's edge errors use it
    result["counter_period_s"] = measured
    _section(
        result,
        "windows",
        lambda: measure_windows(gpu, load, periods, [WINDOW_S], WINDOW_REPEATS),
    )

    def short_regions() -> dict[str, Any]:
        rows = measure_windows(gpu, load, periods, SHORT_REGIONS_S, SHORT_REPEATS)
        return {"rows": rows, "summary": summarize_regions(rows, fields)}

    _section(result, "short_regions", short_regions)
    result["guard"] = {**guard.to_dict(), "self_test_refused": guard_refused}
    result["elapsed_s"] = time.perf_counter() - started
    if guard.calls:
        raise SetterCalledError(f"setting-changing calls were attempted: {guard.calls}")
    return result


def _rows(result: dict[str, Any], key: str, sub: str | None = None) -> list[dict[str, Any]]:
    """A section's rows, or none (after printing its error) when the step failed."""
    section = result.get(key)
    if isinstance(section, dict) and "error" in section:
        print(f"  {key}: {section['error']}")
        return []
    if sub is not None and isinstance(section, dict):
        section = section.get(sub)
    return list(section) if isinstance(section, list) else []


def print_summary(result: dict[str, Any]) -> None:
    """A few lines a person can read; everything is in the JSON."""
    dev = result["device"]
    print(f"{dev['model']} ({result['mode']}), driver {dev.get('driver')}")
    print(
        f"  SM clocks {dev['sm_clocks']}, limit {dev['current_power_limit_w']} W "
        f"in {dev['power_limit_range_w']}, {dev['temperature_c']} °C"
    )
    print(f"  power fields: {dev['power_fields']}; energy counter: {dev['energy_counter']}")
    for row in _rows(result, "update_periods"):
        period = row["period_s"]
        shown = f"{period * 1e3:.1f} ms" if period is not None else "no estimate"
        limit = " (at the poll limit)" if row["at_poll_limit"] else ""
        print(f"  {row['state']:>4} {row['field']:>14}: {shown}{limit}, {row['changes']} changes")
    for row in _rows(result, "windows"):
        parts = ", ".join(f"{f} {v['rel_diff']:+.2%}" for f, v in row["sampled"].items())
        print(f"  {row['duration_s']:.2f} s window: counter {row['counter_j']:.1f} J; {parts}")
    for row in _rows(result, "short_regions", "summary"):
        print(
            f"  {row['target_s'] * 1e3:>6.0f} ms regions, {row['field']:>10}: median "
            f"|err| {row['median_abs_rel_err']:.1%}, max {row['max_abs_rel_err']:.1%}, "
            f"estimate covers {row['covered_by_estimate']}/{row['n']}"
        )
    print(f"  setter calls: {len(result['guard']['calls'])}; {result['elapsed_s']:.1f} s")


def write_probe(out: Path, run: Callable[[dict[str, Any]], Any]) -> None:
    """Run the probe (``run`` fills the result it is given) and write ``out``: the whole
    result and a summary, or, when a step raises, whatever was measured before it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {}
    try:
        run(result)
    except BaseException as exc:
        # Keep whatever was measured: device time is scarce.
        result["fatal"] = f"{type(exc).__name__}: {exc}"
        result["fatal_trace"] = traceback.format_exc()
        out.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
        print(f"wrote partial results to {out}", file=sys.stderr)
        raise
    out.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    print_summary(result)
    print(f"wrote {out}")


@contextlib.contextmanager
def _module_values(values: Mapping[str, Any]) -> Iterator[None]:
    """This module's constants set to ``values`` for the duration (the smoke sizes)."""
    saved = {name: globals()[name] for name in values}
    globals().update(values)
    try:
        yield
    finally:
        globals().update(saved)


def smoke(index: int, out: str | None) -> int:
    """The real-GPU path on the device tests' NVML fake, on its virtual time, shortened.

    Returns:
        0.

    Raises:
        SetterCalledError: when any setting-changing call reached the fake.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _common as common

    fakes = common.load_nvml_fake()
    clock = fakes.FakeTime()
    gpus = [fakes.FakeGpu(power_mw=SMOKE_IDLE_MW, energy_period_s=SMOKE_COUNTER_PERIOD_S)]
    fake = fakes.FakePynvml(gpus, time=clock)
    load = FakeNvmlLoad(fake.gpus[0], clock, SMOKE_IDLE_MW, SMOKE_BUSY_MW)
    source = common.NVML_FAKE.relative_to(REPO_DIR)
    print(f"smoke run: the NVML path on the fake NVML of {source}")

    def run(result: dict[str, Any]) -> None:
        result["smoke"] = f"fake NVML of {source}, virtual time, shortened"
        run_probe(False, index, result, clock=clock, load=load)
        result["mode"] = "nvml-fake"  # no GPU was read: say so in probe.json

    with (
        tempfile.TemporaryDirectory(prefix="eopt-probe-smoke-") as tmp,
        _module_values(SMOKE_SIZES),
        # The probe guards, and eopt's device calls, the very module they import.
        mock.patch.dict(sys.modules, {"pynvml": fake}),
        mock.patch("eopt.devices.nvml.pynvml", fake),
    ):
        path = Path(out) if out else Path(tmp) / "probe.json"
        write_probe(path, run)
        if not out:
            print("(smoke run: written to a temporary folder, removed on exit)")
    reached = fake.setter_calls()
    print(
        f"fake NVML: {len(fake.calls)} calls answered, setting-changing ones: "
        f"{', '.join(reached) or 'none'}"
    )
    if reached:
        raise SetterCalledError(f"setting-changing calls reached the fake NVML: {reached}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU to probe")
    parser.add_argument("--sim", action="store_true", help="probe the simulated H200 instead")
    parser.add_argument("--out", help="output file (default: $OUT/probe.json or ./probe.json)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the GPU path on the device tests' NVML fake, shortened (no GPU needed)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        return smoke(args.gpu, args.out)
    out = Path(args.out) if args.out else Path(os.environ.get("OUT") or ".") / "probe.json"
    write_probe(out, lambda result: run_probe(args.sim, args.gpu, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
