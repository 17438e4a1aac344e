"""Running a placed schedule on real GPUs (or any eopt device): Python callables, timed.

Each element type is a Python callable (``file.py:fn`` or ``module:fn``, as ``eopt sweep``
takes them) that queues its GPU work; a ``sync`` callable (``torch.cuda:synchronize``)
waits for it. One thread per device runs that device's jobs in the order of their starts:
a job starts when the one before it on its device has ended, after the planned gap, as
:class:`~eopt.check.runner.SimRunner` runs them. Energy comes from each device's energy
counter, read around the run and around every job; the entry context is what the device
reports when a job starts (its temperature), and a power throttle is read from the clock
event reasons when it ends.

Between runs the devices idle for ``cooldown_s``: a real GPU cannot be reset to a fresh
state, so the null context is approximated by an idle period long enough for the state a
run leaves (heat, clocks) to decay.

Co-running elements on one GPU need the program's own streams; this runner refuses
placements that overlap on one device rather than serialize them silently.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from eopt.check.runner import Job, JobRecord, RunSet, check_run_args, first_jobs
from eopt.model.operating_point import OperatingPoint

__all__ = ["CallableElement", "DeviceRunner"]

_POWER_REASONS = frozenset({"sw_power_cap", "hw_power_brake", "hw_slowdown", "sw_thermal"})


@dataclass(frozen=True)
class CallableElement:
    """How an element type runs on a real device.

    Attributes:
        fn: The callable; it queues the element's GPU work and may return at once.
        kwargs: Keyword arguments it is called with.
        spec: How it was given (``file.py:fn``), for messages.
        sm_clock_mhz: The SM clock to lock for it, in MHz (None: leave the clock alone).
    """

    fn: Callable[..., object]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    spec: str = ""
    sm_clock_mhz: float | None = None


class DeviceRunner:
    """Runs jobs on opened devices (:func:`eopt.devices.open_devices`).

    Args:
        elements: Element type → its callable.
        devices: Schedule device name → an opened device.
        sync: Waits until the GPU work the callables queued is done (None: the callables
            return only when their work is done).
        cooldown_s: Idle time before every run, in s (the null context).
        control: Whether clocks may be changed (False refuses elements with a clock).

    Raises:
        ValueError: an element asks for a clock while ``control`` is False.
    """

    def __init__(
        self,
        elements: Mapping[str, CallableElement],
        devices: Mapping[str, Any],
        *,
        sync: Callable[[], object] | None = None,
        cooldown_s: float = 1.0,
        control: bool = True,
    ) -> None:
        self.elements = dict(elements)
        self.devices = dict(devices)
        self.sync = sync
        self.cooldown_s = cooldown_s
        if not control:
            clocked = sorted(n for n, e in self.elements.items() if e.sm_clock_mhz is not None)
            if clocked:
                raise ValueError(
                    f"elements {clocked} set SM clocks, and this run may not change the GPUs "
                    "(--no-control): drop their sm_clock_mhz or allow control"
                )
        self._idle: dict[str, float] = {}

    def element_clock_mhz(self, element: str) -> float | None:
        """The SM clock an element runs at (None: the device's own)."""
        spec = self.elements.get(element)
        return spec.sm_clock_mhz if spec is not None else None

    def _first_device(self) -> Any:
        return next(iter(self.devices.values()))

    def idle_power_w(self, sm_clock_mhz: float | None = None) -> float:
        """Power an idle device reads after the cool-down, in W (what gaps cost)."""
        key = str(sm_clock_mhz)
        if key not in self._idle:
            device = self._first_device()
            if sm_clock_mhz is not None:
                _lock(device, sm_clock_mhz)
            device.clock.sleep(self.cooldown_s)
            self._idle[key] = float(device.power().power_w)
        return self._idle[key]

    def static_power_w(self, element: str) -> float:
        """The idle draw at the element's clock, in W.

        A real GPU does not report the static power of a ready device; its idle draw is
        the measurable stand-in, and signatures from ``eopt sweep`` carry their own.
        """
        return self.idle_power_w(self.element_clock_mhz(element))

    def run(self, jobs: Sequence[Job], runs: int, seed: int = 0) -> RunSet:
        """Run ``jobs`` ``runs`` times, each after the cool-down; see :class:`RunSet`.

        Raises:
            ValueError: no jobs, fewer than two runs, an unknown device or element, or
                placements that overlap on one device.
        """
        del seed  # real runs draw their own noise
        check_run_args(jobs, runs)
        for job in jobs:
            if job.device not in self.devices:
                known = ", ".join(self.devices)
                raise ValueError(f"job {job.element!r}: no GPU for device {job.device!r} ({known})")
            if job.element not in self.elements:
                raise ValueError(f"element {job.element!r} has no callable; map it in --kernels")
        for d in {j.device for j in jobs}:
            mine = sorted((j for j in jobs if j.device == d), key=lambda j: j.start_s)
            for a, b in itertools.pairwise(mine):
                if b.start_s < a.end_s - 1e-12:
                    raise ValueError(
                        f"{a.element} and {b.element} overlap on {d}: co-running on a real GPU "
                        "needs the program's own streams; run co-runs with --sim"
                    )
        energies, times, per_run = [], [], []
        per_device: dict[str, list[float]] = {d: [] for d in self.devices}
        firsts = first_jobs(jobs)
        for _ in range(runs):
            # The null context includes a settled clock: lock each device's first clock
            # before the cool-down, not as its first element starts.
            for d, job in firsts.items():
                clock_mhz = self.elements[job.element].sm_clock_mhz
                if clock_mhz is not None:
                    _lock(self.devices[d], clock_mhz)
            self._first_device().clock.sleep(self.cooldown_s)
            total, span, dev_e, records = self._run_once(jobs)
            energies.append(total)
            times.append(span)
            per_run.append(records)
            for d in self.devices:
                per_device[d].append(dev_e.get(d, math.nan))
        return RunSet(
            np.array(energies),
            np.array(times),
            {d: np.array(v) for d, v in per_device.items()},
            tuple(per_run),
        )

    def _run_once(
        self, jobs: Sequence[Job]
    ) -> tuple[float, float, dict[str, float], tuple[JobRecord, ...]]:
        used = list(dict.fromkeys(j.device for j in jobs))
        clock = self.devices[used[0]].clock
        out: list[JobRecord | None] = [None] * len(jobs)
        counters0 = {d: _counter(self.devices[d]) for d in used}
        t0 = clock.now()
        errors: list[BaseException] = []

        def device_thread(d: str) -> None:
            device = self.devices[d]
            mine = sorted(
                (i for i, j in enumerate(jobs) if j.device == d), key=lambda i: jobs[i].start_s
            )
            prev_end_planned, prev_end_actual = None, None
            try:
                for i in mine:
                    job = jobs[i]
                    if prev_end_planned is None:
                        due = t0 + job.start_s
                    else:
                        due = prev_end_actual + max(job.start_s - prev_end_planned, 0.0)
                    spec = self.elements[job.element]
                    if spec.sm_clock_mhz is not None:
                        _lock(device, spec.sm_clock_mhz)
                    wait = due - clock.now()
                    if wait > 0:
                        clock.sleep(wait)
                    temp = _temperature(device)
                    e0, start = _counter(device), clock.now()
                    spec.fn(**spec.kwargs)
                    if self.sync is not None:
                        self.sync()
                    device.synchronize()
                    end, e1 = clock.now(), _counter(device)
                    out[i] = JobRecord(
                        element=job.element,
                        device=d,
                        start_s=start - t0,
                        time_s=end - start,
                        energy_j=e1 - e0,
                        entry={"temperature_c": temp},
                        co_runners=(),
                        throttled=_throttled(device),
                    )
                    prev_end_planned, prev_end_actual = job.end_s, end
            except BaseException as exc:  # reported in the caller's thread
                errors.append(exc)

        if len(used) == 1:
            device_thread(used[0])
        else:
            threads = [threading.Thread(target=device_thread, args=(d,)) for d in used]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if errors:
            raise errors[0]
        end = clock.now()
        dev_e = {d: _counter(self.devices[d]) - counters0[d] for d in used}
        records = tuple(r for r in out if r is not None)
        # ρ from the actual intervals across devices (one thread per device).
        with_rho = [
            replace(
                r,
                co_runners=tuple(
                    sorted(
                        {
                            q.element
                            for q in records
                            if q is not r
                            and q.start_s < r.start_s + r.time_s
                            and r.start_s < q.start_s + q.time_s
                        }
                    )
                ),
            )
            for r in records
        ]
        return float(sum(dev_e.values())), end - t0, dev_e, tuple(with_rho)


def _counter(device: Any) -> float:
    value = device.energy_counter_j()
    if value is None:
        raise ValueError(
            f"{device.name} has no energy counter; eopt check needs one on real GPUs "
            "(Volta or newer)"
        )
    return float(value)


def _temperature(device: Any) -> float:
    probe = getattr(device, "temperature_c", None)
    try:
        value = probe() if callable(probe) else probe
        return float(value) if value is not None else math.nan
    except Exception:  # a sensor that refuses leaves the context unknown, not the run
        return math.nan


def _throttled(device: Any) -> bool:
    probe = getattr(device, "clocks_event_reasons", None)
    if not callable(probe):
        return False
    try:
        reasons = probe()
    except Exception:  # unknown, not throttled: the protocol then names the shared resource
        return False
    return bool(reasons and reasons & _POWER_REASONS)


def _lock(device: Any, mhz: float) -> None:
    point = device.current_operating_point()
    if point.sm_clock_mhz != mhz:
        device.set_operating_point(OperatingPoint(sm_clock_mhz=float(mhz)))
