"""The runtime controller: switch each GPU to the operating point of the element it runs.

A schedule whose device runs elements at different clocks cannot be served by one lock.
The training loop tells the controller which element starts (``controller.enter("F3")``
or ``with controller.element("F3"):``); the controller compares the element's
device-wide operating point with the one last requested on that device and, only when
it differs, hands the switch to a worker thread of that device, because the NVML call
blocks for milliseconds and the training loop must not wait for it. Each switch's
latency (request → device call returned) is recorded, and so is how the loop drifts
from the schedule (order, durations, elements never entered; :mod:`eopt.apply.drift`).

A ``None`` field of an element's operating point means the driver's default (its
original setting, for the power limit): switching to it from a point that set the field
puts the device back first, then applies the fields that are set.

Every exit path restores the devices: the controller runs inside the devices layer's
state guard. On a normal exit or an exception the workers stop first, then the guard
restores. On SIGINT / SIGTERM the guard's watchdog restores at once, from its own thread
(the main thread may be blocked in ``dist.recv``); the device's gate lets a switch in
flight finish first and refuses every later one, so the workers go quiet and the loop
runs on at the original settings until it ends.
"""

from __future__ import annotations

import difflib
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from types import TracebackType

from eopt.apply.drift import DriftTracker
from eopt.apply.guard import device_guard
from eopt.apply.latency import SwitchStats
from eopt.apply.settings import (
    ApplyError,
    GpuSpec,
    check_setting,
    device_plans,
    gpu_resolver,
    resolve_gpu_map,
)
from eopt.devices.base import Device
from eopt.devices.guard import ControlEndedError, changing
from eopt.model.operating_point import OperatingPoint
from eopt.model.schedule import Schedule, ScheduledElement

__all__ = ["RuntimeController"]

GuardFactory = Callable[[Sequence[Device]], AbstractContextManager[object]]

_FIELDS = ("sm_clock_mhz", "mem_clock_mhz", "power_limit_w")
_UNKNOWN = object()  # the device's setting after a failed switch: anything may be set


def _needs_reset(current: OperatingPoint | None, point: OperatingPoint) -> bool:
    """True when ``point`` leaves a field to the driver that ``current`` had set."""
    if current is None:
        return False
    return any(getattr(point, f) is None and getattr(current, f) is not None for f in _FIELDS)


class _SwitchWorker:
    """One thread per GPU that carries out the switches requested for it, newest first.

    A request that arrives while an older one still waits replaces it: only the latest
    setting matters, and applying a stale one would only add latency. A request for the
    setting the GPU already has when the worker reaches it is dropped.
    """

    def __init__(self, device: Device, plan_device: str, timer: Callable[[], float]) -> None:
        self.device = device
        self.plan_device = plan_device
        self._timer = timer
        self._cond = threading.Condition()
        self._pending: tuple[OperatingPoint, float] | None = None
        self._busy = False
        self._stopping = False
        # What this worker last put on the device: None is the state found at the start.
        self._current: object = None
        self.latencies_s: list[float] = []
        self.applied: list[OperatingPoint] = []
        self.coalesced = 0
        self.redundant = 0
        self.ended = False  # the device was restored (a signal): nothing more is switched
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"eopt-switch-{plan_device}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def request(self, point: OperatingPoint, requested_at: float) -> None:
        with self._cond:
            if self.ended:
                return
            if self._pending is not None:
                self.coalesced += 1
            self._pending = (point, requested_at)
            self._cond.notify_all()

    def wait_idle(self, timeout_s: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout_s)

    def stop(self) -> None:
        """Drop any waiting request, let an in-flight call finish, end the thread."""
        with self._cond:
            self._stopping = True
            self._pending = None
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._stopping)
                if self._stopping:
                    return
                assert self._pending is not None
                point, requested_at = self._pending
                self._pending = None
                if point == self._current:
                    # Superseded by the setting the GPU already has: nothing to do.
                    self.redundant += 1
                    self._cond.notify_all()
                    continue
                self._busy = True
            try:
                self._switch(point)
            except ControlEndedError:
                with self._cond:
                    self.ended = True  # restored under us: stay quiet, it is not an error
            except BaseException as exc:  # handed to the caller's thread, never lost
                with self._cond:
                    self._current = _UNKNOWN
                    if self.error is None:
                        self.error = exc
            else:
                done = self._timer()
                with self._cond:
                    self._current = point
                    self.latencies_s.append(done - requested_at)
                    self.applied.append(point)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _switch(self, point: OperatingPoint) -> None:
        current = self._current
        reset = current is _UNKNOWN or _needs_reset(current, point)  # type: ignore[arg-type]
        if not reset:
            self.device.set_operating_point(point)
            return
        # Back to the state found at the start, then the fields that are set; under the
        # device's gate, so that no restore of the guard can fall between the two.
        with changing(self.device):
            self.device.restore()
            if point.device_key != (None, None, None):
                self.device.set_operating_point(point)


class RuntimeController:
    """Switches GPUs between the operating points of a schedule's elements at run time.

    Use it as a context manager; the devices are restored when the block ends, however
    it ends::

        schedule = read_schedule("schedule.json")
        with RuntimeController.from_schedule(
            schedule, only=["stage1"], gpu_map={"stage1": torch.cuda.current_device()},
            backend="nvml",
        ) as ctl:
            for step in stage_steps(1, stages, microbatches):
                with ctl.element(step.name):
                    run(step)
        print(ctl.stats().summary())

    Args:
        schedule: The solved schedule.
        devices: Plan device name → the GPU it runs on. Elements on plan devices not in
            this mapping cannot be entered (e.g. another rank's stage).
        guard: Context-manager factory that saves and restores device state; defaults
            to the devices layer's guard. Tests may pass their own.
        timer: Wall-clock source for latency and durations, in s.
        check: Check every setting against the devices' supported clocks and power-limit
            range before anything changes.
        slow_factor: Elements count as slow from this many times their planned duration
            (median over an iteration of ``with controller.element(...)`` blocks).
        warn_drift: Warn (:class:`eopt.apply.drift.PlanDriftWarning`) when the loop
            leaves the schedule's order, runs slow, or never enters some elements; False
            only records it (:meth:`stats`).

    Raises:
        ApplyError: a device name not in the schedule, or (with ``check``) a setting the
            GPU does not support.
    """

    def __init__(
        self,
        schedule: Schedule,
        devices: Mapping[str, Device],
        *,
        guard: GuardFactory | None = None,
        timer: Callable[[], float] = time.perf_counter,
        check: bool = True,
        slow_factor: float = 2.0,
        warn_drift: bool = True,
    ) -> None:
        plan_names = [d.name for d in schedule.devices]
        unknown = sorted(set(devices) - set(plan_names))
        if unknown:
            raise ApplyError(
                f"controller devices {unknown} are not in the schedule; it has {plan_names}"
            )
        if not devices:
            raise ApplyError("the runtime controller needs at least one device to control")
        self._schedule = schedule
        self._elements: dict[str, ScheduledElement] = {e.name: e for e in schedule.elements}
        self._devices = dict(devices)
        self._guard_factory = guard if guard is not None else device_guard
        self._timer = timer
        if check:
            # The GPU index only labels a device plan; the devices given are what is checked.
            gpu_map = {name: i for i, name in enumerate(plan_names)}
            for plan in device_plans(schedule, gpu_map):
                if plan.device not in self._devices:
                    continue
                for point, users in zip(plan.settings, plan.users, strict=True):
                    check_setting(
                        self._devices[plan.device], point, plan_device=plan.device, elements=users
                    )
        self._workers = {
            name: _SwitchWorker(device, name, timer) for name, device in self._devices.items()
        }
        self._requested: dict[str, OperatingPoint | None] = dict.fromkeys(self._devices)
        self._skipped: dict[str, int] = dict.fromkeys(self._devices, 0)
        self._drift = DriftTracker(schedule, list(self._devices), slow_factor, warn_drift)
        self._lock = threading.Lock()
        self._stack: ExitStack | None = None
        self._closed = False

    # Construction --------------------------------------------------------------------------
    @classmethod
    def from_schedule(
        cls,
        schedule: Schedule,
        *,
        gpu_map: Mapping[str, GpuSpec] | None = None,
        only: Sequence[str] | None = None,
        backend: str = "auto",
        sim_model: str = "A100-SXM4-40GB",
        seed: int = 0,
        **kwargs: object,
    ) -> RuntimeController:
        """Open the GPUs a schedule maps to and build a controller over them.

        Args:
            schedule: The solved schedule.
            gpu_map: Plan device → the GPU it runs on in THIS process: a CUDA ordinal
                (``torch.cuda.current_device()``; ``CUDA_VISIBLE_DEVICES`` is honoured),
                a UUID (``GPU-…``), a PCI bus id or ``nvml:N``. Devices not given use the
                schedule's ``gpu`` field (an NVML index), else their position.
            only: Control just these plan devices (e.g. the stage of this rank). Only they
                must land on distinct GPUs.
            backend: ``nvml`` (real GPUs; an error without them — what a training job
                wants), ``sim``, or ``auto``: NVML where it sees a GPU, else the simulated
                GPU, with a :class:`RuntimeWarning` saying that no real GPU is controlled.
            sim_model: Model of the simulated GPU.
            seed: Seed of the simulator's noise.
            **kwargs: Passed to the constructor (``guard``, ``timer``, ``check``,
                ``slow_factor``, ``warn_drift``).

        Raises:
            ApplyError: an unknown device in ``only`` or ``gpu_map``, a GPU that is not
                there, or two controlled devices on one GPU.
            DeviceError: NVML asked for and unavailable.
        """
        from eopt.devices import open_devices
        from eopt.sim.gpu import SimulatedGPU

        names = [d.name for d in schedule.devices]
        wanted = list(only) if only is not None else names
        missing = sorted(set(wanted) - set(names))
        if missing:
            raise ApplyError(f"only={missing}: not devices of the schedule ({names})")
        mapping = resolve_gpu_map(
            schedule, gpu_map, resolve=gpu_resolver(backend), among=wanted, python_api=True
        )
        opened = open_devices(
            backend=backend, indices=[mapping[n] for n in wanted], sim_model=sim_model, seed=seed
        )
        if backend == "auto" and any(isinstance(d, SimulatedGPU) for d in opened):
            # Training would run on without control: say it where it cannot be missed.
            message = (
                "eopt RuntimeController: backend='auto' found no GPU that NVML can control "
                f"(see the line above) and controls SIMULATED {sim_model} GPUs instead: "
                "the real GPUs, if any, keep their clocks. Pass backend='nvml' to make "
                "this an error, or backend='sim' to simulate on purpose"
            )
            print(f"WARNING: {message}", file=sys.stderr)
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        return cls(schedule, dict(zip(wanted, opened, strict=True)), **kwargs)  # type: ignore[arg-type]

    # Life cycle ----------------------------------------------------------------------------
    def start(self) -> RuntimeController:
        """Save the devices' state (through the guard) and start the switch workers."""
        if self._stack is not None:
            return self
        if self._closed:
            raise ApplyError("this controller was closed; create a new one")
        stack = ExitStack()
        stack.enter_context(self._guard_factory(list(self._devices.values())))
        try:
            for worker in self._workers.values():
                worker.start()
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def close(self) -> None:
        """Stop the workers, then restore every device; re-raise a failed switch."""
        self._close(normal=True)

    def _close(self, normal: bool) -> None:
        if self._stack is None:
            self._closed = True
            return
        stack, self._stack = self._stack, None
        self._closed = True
        try:
            for worker in self._workers.values():
                worker.stop()
        finally:
            stack.close()
        self._drift.close(warn=normal)
        self._raise_worker_error()

    def __enter__(self) -> RuntimeController:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
            return
        # The block's own exception wins; restore regardless.
        with suppress(Exception):
            self._close(normal=False)

    # Switching ------------------------------------------------------------------------------
    def enter(self, element_name: str) -> bool:
        """Element ``element_name`` is about to run: switch its device if the setting changes.

        Returns at once; the switch runs on the device's worker thread.

        Returns:
            True when a switch was requested, False when the device already had (or was
            already switching to) this setting, or its settings were restored after a
            signal.

        Raises:
            KeyError: an element the schedule does not have (naming this controller's
                elements and the nearest names).
            ApplyError: an element on a device this controller does not control, or a
                controller that was not started.
            Exception: the error of an earlier switch that failed on the worker.
        """
        element = self._element(element_name)
        worker = self._workers[element.device]
        self._drift.entered(element.device, element_name)
        point = element.op_point.device_wide()
        with self._lock:
            if worker.ended:
                return False
            if self._requested[element.device] == point:
                self._skipped[element.device] += 1
                return False
            self._requested[element.device] = point
            worker.request(point, self._timer())
        return True

    @contextmanager
    def element(self, element_name: str) -> Iterator[None]:
        """``with controller.element("F3"):`` — :meth:`enter`, and the block's duration
        recorded against the element's planned duration."""
        self.enter(element_name)
        started = self._timer()
        yield
        device = self._elements[element_name].device
        self._drift.finished(device, element_name, self._timer() - started)

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Block until every requested switch has been carried out; False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for worker in self._workers.values():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not worker.wait_idle(left):
                return False
        self._raise_worker_error()
        return True

    # Introspection -------------------------------------------------------------------------
    def __contains__(self, element_name: object) -> bool:
        """``"AR[s0]" in ctl``: whether the schedule has this element."""
        return element_name in self._elements

    def order(self, device: str) -> list[str]:
        """The names of ``device``'s elements in the schedule's order (one iteration)."""
        if device not in self._workers:
            raise ApplyError(
                f"device {device!r} is not controlled here; this controller has "
                f"{sorted(self._workers)}"
            )
        return [e.name for e in self._schedule.elements_on(device)]

    def stats(self, device: str | None = None) -> SwitchStats:
        """Switching latency and drift from the schedule, over all devices or one."""
        names = [device] if device is not None else list(self._workers)
        latencies: list[float] = []
        coalesced = skipped = 0
        for name in names:
            worker = self._workers[name]
            latencies.extend(worker.latencies_s)
            coalesced += worker.coalesced
            skipped += self._skipped[name] + worker.redundant
        drift = self._drift.report()
        if device is not None:
            drift = type(drift)(
                tuple(d for d in drift.devices if d.device == device), drift.slow_factor
            )
        stats = SwitchStats.from_latencies(latencies, coalesced=coalesced, skipped=skipped)
        return stats.with_drift(drift)

    def applied(self, device: str) -> list[OperatingPoint]:
        """The settings carried out on ``device``, in order."""
        return list(self._workers[device].applied)

    @property
    def devices(self) -> dict[str, Device]:
        """Plan device name → controlled GPU."""
        return dict(self._devices)

    def _element(self, element_name: str) -> ScheduledElement:
        if self._stack is None:
            raise ApplyError(
                "the controller is not running: use `with controller:` or call start() first"
            )
        self._raise_worker_error()
        element = self._elements.get(element_name)
        if element is None:
            mine = [n for d in self._workers for n in self.order(d)]
            close = difflib.get_close_matches(element_name, mine, n=3, cutoff=0.6) or (
                difflib.get_close_matches(element_name, list(self._elements), n=3, cutoff=0.6)
            )
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            shown = ", ".join(mine[:5]) + (" …" if len(mine) > 5 else "")
            raise KeyError(
                f"element {element_name!r} is not in the schedule{hint} (the elements of "
                f"{', '.join(sorted(self._workers))} here: {shown})"
            )
        if element.device not in self._workers:
            raise ApplyError(
                f"element {element_name!r} runs on device {element.device!r}, which this "
                f"controller does not control ({sorted(self._workers)})"
            )
        return element

    def _raise_worker_error(self) -> None:
        for worker in self._workers.values():
            if worker.error is not None:
                error, worker.error = worker.error, None
                raise error
