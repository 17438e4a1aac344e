"""The runtime controller: switch each GPU to the operating point of the element it runs.

A schedule whose device runs elements at different clocks cannot be served by one lock.
The training loop tells the controller which element starts (``controller.enter("F3")``
or ``with controller.element("F3"):``); the controller compares the element's
device-wide operating point with the one last requested on that device and, only when
it differs, hands the switch to a worker thread of that device, because the NVML call
blocks for milliseconds and the training loop must not wait for it. Each switch's
latency (request → device call returned) is recorded.

Every exit path restores the devices: the controller runs inside the devices layer's
state guard (normal exit, exceptions, SIGINT/SIGTERM), after stopping its workers so
that no switch can land after the restore.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from types import TracebackType

from eopt.apply.guard import device_guard
from eopt.apply.latency import SwitchStats
from eopt.apply.settings import ApplyError, check_setting, device_plans, resolve_gpu_map
from eopt.devices.base import Device
from eopt.devices.operating_point import OperatingPoint
from eopt.plan.schedule import Schedule, ScheduledElement

__all__ = ["RuntimeController"]

GuardFactory = Callable[[Sequence[Device]], AbstractContextManager[object]]


class _SwitchWorker:
    """One thread per GPU that carries out the switches requested for it, newest first.

    A request that arrives while an older one still waits replaces it: only the latest
    setting matters, and applying a stale one would only add latency.
    """

    def __init__(self, device: Device, plan_device: str, timer: Callable[[], float]) -> None:
        self.device = device
        self.plan_device = plan_device
        self._timer = timer
        self._cond = threading.Condition()
        self._pending: tuple[OperatingPoint, float] | None = None
        self._busy = False
        self._stopping = False
        self.latencies_s: list[float] = []
        self.applied: list[OperatingPoint] = []
        self.coalesced = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"eopt-switch-{plan_device}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def request(self, point: OperatingPoint, requested_at: float) -> None:
        with self._cond:
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
                self._busy = True
            try:
                self.device.set_operating_point(point)
            except BaseException as exc:  # handed to the caller's thread, never lost
                with self._cond:
                    if self.error is None:
                        self.error = exc
            else:
                done = self._timer()
                with self._cond:
                    self.latencies_s.append(done - requested_at)
                    self.applied.append(point)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


class RuntimeController:
    """Switches GPUs between the operating points of a schedule's elements at run time.

    Use it as a context manager; the devices are restored when the block ends, however
    it ends::

        schedule = read_schedule("schedule.json")
        with RuntimeController.from_schedule(schedule, only=["stage1"]) as ctl:
            for name in my_stage_order:
                with ctl.element(name):
                    run_microbatch(name)
        print(ctl.stats().summary())

    Args:
        schedule: The solved schedule.
        devices: Plan device name → the GPU it runs on. Elements on plan devices not in
            this mapping cannot be entered (e.g. another rank's stage).
        guard: Context-manager factory that saves and restores device state; defaults
            to the devices layer's guard. Tests may pass their own.
        timer: Wall-clock source for latency, in s.
        check: Check every setting against the devices' supported clocks and power-limit
            range before anything changes.

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
        self._lock = threading.Lock()
        self._stack: ExitStack | None = None
        self._closed = False

    # Construction --------------------------------------------------------------------------
    @classmethod
    def from_schedule(
        cls,
        schedule: Schedule,
        *,
        gpu_map: Mapping[str, int] | None = None,
        only: Sequence[str] | None = None,
        backend: str = "auto",
        **kwargs: object,
    ) -> RuntimeController:
        """Open the GPUs a schedule maps to and build a controller over them.

        Args:
            schedule: The solved schedule.
            gpu_map: Plan device → GPU index overrides (else the schedule's ``gpu``
                fields, else position order).
            only: Control just these plan devices (e.g. the stage of this rank).
            backend: ``auto`` | ``nvml`` | ``sim`` (see ``eopt.devices.open_devices``).
            **kwargs: Passed to the constructor (``guard``, ``timer``, ``check``).
        """
        from eopt.devices import open_devices  # type: ignore[attr-defined]

        mapping = resolve_gpu_map(schedule, gpu_map)
        wanted = list(only) if only is not None else list(mapping)
        missing = sorted(set(wanted) - set(mapping))
        if missing:
            raise ApplyError(f"only={missing}: not devices of the schedule ({list(mapping)})")
        opened = open_devices(backend=backend, indices=[mapping[n] for n in wanted])
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
            self.close()

    # Switching ------------------------------------------------------------------------------
    def enter(self, element_name: str) -> bool:
        """Element ``element_name`` is about to run: switch its device if the setting changes.

        Returns at once; the switch runs on the device's worker thread.

        Returns:
            True when a switch was requested, False when the device already had (or was
            already switching to) this setting.

        Raises:
            KeyError: an element the schedule does not have.
            ApplyError: an element on a device this controller does not control, or a
                controller that was not started.
            Exception: the error of an earlier switch that failed on the worker.
        """
        if self._stack is None:
            raise ApplyError(
                "the controller is not running: use `with controller:` or call start() first"
            )
        self._raise_worker_error()
        element = self._elements.get(element_name)
        if element is None:
            sample = ", ".join(list(self._elements)[:5])
            raise KeyError(
                f"element {element_name!r} is not in the schedule (elements look like: {sample})"
            )
        worker = self._workers.get(element.device)
        if worker is None:
            raise ApplyError(
                f"element {element_name!r} runs on device {element.device!r}, which this "
                f"controller does not control ({sorted(self._workers)})"
            )
        point = element.op_point.device_wide()
        with self._lock:
            if self._requested[element.device] == point:
                self._skipped[element.device] += 1
                return False
            self._requested[element.device] = point
            worker.request(point, self._timer())
        return True

    @contextmanager
    def element(self, element_name: str) -> Iterator[None]:
        """``with controller.element("F3"):`` — :meth:`enter` around a block."""
        self.enter(element_name)
        yield

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
    def stats(self, device: str | None = None) -> SwitchStats:
        """Switching latency over all devices, or one plan device."""
        names = [device] if device is not None else list(self._workers)
        latencies: list[float] = []
        coalesced = skipped = 0
        for name in names:
            worker = self._workers[name]
            latencies.extend(worker.latencies_s)
            coalesced += worker.coalesced
            skipped += self._skipped[name]
        return SwitchStats.from_latencies(latencies, coalesced=coalesced, skipped=skipped)

    def applied(self, device: str) -> list[OperatingPoint]:
        """The settings carried out on ``device``, in order."""
        return list(self._workers[device].applied)

    @property
    def devices(self) -> dict[str, Device]:
        """Plan device name → controlled GPU."""
        return dict(self._devices)

    def _raise_worker_error(self) -> None:
        for worker in self._workers.values():
            if worker.error is not None:
                error, worker.error = worker.error, None
                raise error
