"""``eopt sweep --ray``: one sweep spread over the GPUs of a Ray cluster.

eopt runs on Ray rather than on a scheduler of its own: Ray starts the workers, places
them on GPUs and says when one dies. The sweep itself stays eopt's:

* **One worker per GPU**, a Ray actor pinned to its GPU by UUID (a simulated GPU by host
  and index; :mod:`eopt.runs.ray_worker`).
* **Unit of work: one operating point** of the kernel with all its implementations
  (:mod:`eopt.runs.point`): the point is set once and its static power measured once.
  Points go to whichever worker is idle.
* **Only the driver writes the library**, under its lock
  (:func:`eopt.model.library.library_lock`), one whole line per cell as results arrive,
  skipping cells already there (a cell is its name, κ, θ, ω and GPU model:
  :func:`eopt.model.library.cell_key`). Nothing is half-written, whatever stops the sweep.
* **Faults.** A worker that dies (its node removed, its process killed) loses the point
  it was measuring; a cell whose kernel raises fails alone. Either is tried again,
  preferably on another GPU, at most :data:`MAX_RETRIES` more times; then it goes, with
  the error of its last try, to ``LIB.failed.jsonl`` (:mod:`eopt.runs.failed`), and the
  rest of the grid goes on.
* **Ctrl-C** tells every worker to stop after the cell it is in; each worker's GPU guard
  restores its GPU as its point ends, the driver writes the cells finished by then, and
  the runtime is stopped (:mod:`eopt.runs.ray_runtime`).

Simulated GPUs are seeded per cell (:mod:`eopt.runs.gpus`), so a simulated library swept
on Ray equals the one swept serially, whichever worker measured which point.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from eopt.devices.base import Device
from eopt.measure.meter import MeterMethod
from eopt.model.library import append_signature, cell_key
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature
from eopt.runs.failed import FailedCell, append_failed, failed_path
from eopt.runs.gpus import GpuSpec
from eopt.runs.ray_runtime import RaySweepError, import_ray, ray_runtime
from eopt.runs.ray_worker import GpuWorker, UnitOutcome, portable_kernel
from eopt.runs.repeat import RepeatPolicy
from eopt.runs.sweep import (
    Grid,
    Kernel,
    SweepError,
    SweepPlan,
    SweepResult,
    check_sweep,
    hold_library,
    plan_sweep,
)

__all__ = ["MAX_RETRIES", "RayProgressFn", "ray_sweep"]

#: How many more times a failed cell is tried (a dead worker's, or a raising kernel's).
MAX_RETRIES = 2

#: (cells done, cells in the sweep, cells per second of each GPU worker by its label).
RayProgressFn = Callable[[int, int, Mapping[str, float]], None]


@dataclass
class _Unit:
    """Cells of one point still to measure, and how often they were tried."""

    point: OperatingPoint
    impls: tuple[str, ...]
    attempts: int = 0
    tried_on: frozenset[int] = frozenset()
    last_place: Mapping[str, Any] | None = None
    errors: dict[str, str] = field(default_factory=dict)


@dataclass
class _Worker:
    actor: Any
    label: str
    place: Mapping[str, Any]
    cells: int = 0
    alive: bool = True


def ray_sweep(
    kernel: Kernel,
    grid: Grid,
    device: Device,
    gpu: GpuSpec,
    out_path: str | os.PathLike[str],
    *,
    address: str | None = "local",
    gpus: Sequence[str] | int | None = None,
    resume: bool = False,
    policy: RepeatPolicy | None = None,
    method: MeterMethod = "auto",
    progress: RayProgressFn | None = None,
    warn: Callable[[str], None] | None = None,
    max_retries: int = MAX_RETRIES,
    start_timeout_s: float = 120.0,
    stop_grace_s: float = 60.0,
) -> SweepResult:
    """Measure every cell of ``grid`` on the GPUs of a Ray cluster, into ``out_path``.

    Args:
        kernel: What to run (:func:`eopt.runs.sweep.parse_kernel`).
        grid: Implementations × operating points; it must set the GPU (a measure-only
            sweep has one point: nothing to spread).
        device: This process's GPU of the model the workers have: the cells' identity
            and the grid were worked out against it.
        gpu: How workers open their GPU (backend, simulated model, seed, control); each
            worker fills in the index of the GPU Ray gave it.
        out_path: The ``.jsonl`` library; its failed cells go to ``LIB.failed.jsonl``.
        address: ``"local"`` (a runtime of its own on 127.0.0.1, stopped at the end), a
            running cluster's address, or None (the runtime this process is connected
            to).
        gpus: With ``"local"``: the GPUs to offer, as ``CUDA_VISIBLE_DEVICES`` writes
            them (UUIDs; simulated GPUs' indices). Otherwise how many GPU workers to
            start (None: one per GPU the cluster has).
        resume: Skip cells already in the library; without it finding one is an error.
        policy: Repeat counts and durations.
        method: Meter method.
        progress: Called with (cells done, cells in the sweep, each worker's cells per
            second): first once every worker has started, then as results arrive and at
            least every half second.
        warn: Called with each warning (a repaired library, notes from the workers, a
            dead worker); default: printed to stderr.
        max_retries: How many more times a failed cell is tried.
        start_timeout_s: How long to wait for every worker to open its GPU, in s.
        stop_grace_s: On Ctrl-C, how long to wait for workers to end their cell, in s.

    Returns:
        The sweep's result; ``failed`` lists the cells written to ``LIB.failed.jsonl``.

    Raises:
        RayMissingError: without Ray.
        RaySweepError: for a cluster without GPUs, workers that do not start in time or
            cannot open or use their GPU, or GPUs of another model than ``device``'s.
        SweepError: for a measure-only grid, what :func:`eopt.runs.sweep.check_sweep`
            refuses on ``device``, or cells already in the library without ``resume``.
        LibraryInUseError: when another process writes to ``out_path``.
        KeyboardInterrupt: after a clean stop on Ctrl-C.
    """
    if not grid.controls:
        raise SweepError(
            "a measure-only sweep (no --clocks, --power-limits or --mem-clocks) measures "
            "one point: there is nothing to spread over GPUs; run it without --ray"
        )
    check_sweep(kernel, grid, device)  # here first: what this GPU refuses, every GPU does
    ray = import_ray(local=address == "local")
    path = Path(out_path)
    lock = hold_library(path)
    try:
        plan = plan_sweep(kernel, grid, device, path, resume=resume, warn=warn)
        if not plan.todo:
            return SweepResult(plan.ordered(()), (), len(plan.cells), path, plan.repairs)
        with ray_runtime(ray, address, gpus):
            return _Driver(
                ray, kernel, grid, device, gpu, path, plan, policy or RepeatPolicy(), method,
                progress, warn, max_retries, start_timeout_s, stop_grace_s, gpus,
            ).run()  # fmt: skip
    finally:
        lock.release()


class _Driver:
    """The scheduling loop of one Ray sweep (see :func:`ray_sweep`)."""

    def __init__(
        self,
        ray: ModuleType,
        kernel: Kernel,
        grid: Grid,
        device: Device,
        gpu: GpuSpec,
        path: Path,
        plan: SweepPlan,
        policy: RepeatPolicy,
        method: MeterMethod,
        progress: RayProgressFn | None,
        warn: Callable[[str], None] | None,
        max_retries: int,
        start_timeout_s: float,
        stop_grace_s: float,
        gpus: Sequence[str] | int | None,
    ) -> None:
        self.ray = ray
        self.kernel = kernel
        self.grid = grid
        self.device = device
        self.gpu = gpu
        self.path = path
        self.plan = plan
        self.policy = policy
        self.method = method
        self.progress = progress
        self.warn_fn = warn
        self.max_retries = max_retries
        self.start_timeout_s = start_timeout_s
        self.stop_grace_s = stop_grace_s
        self.gpus = gpus
        self.wanted = {key for _cell, key in plan.todo}
        self.present = set(plan.existing)
        self.measured: list[Signature] = []
        self.failed: list[FailedCell] = []
        self.duplicates = 0
        self.workers: list[_Worker] = []
        self.inflight: dict[Any, tuple[int, _Unit]] = {}
        self.queue: deque[_Unit] = deque()
        self.started = time.monotonic()
        self.last_report = 0.0

    # life cycle ------------------------------------------------------------------------
    def run(self) -> SweepResult:
        by_point: dict[OperatingPoint, list[str]] = {}
        for cell, _key in self.plan.todo:
            by_point.setdefault(cell.op_point, []).append(cell.impl)
        self.queue.extend(_Unit(p, tuple(impls)) for p, impls in by_point.items())
        failed_file = failed_path(self.path)
        failed_file.unlink(missing_ok=True)  # it describes the run that wrote it
        try:
            self._start_workers()
            self.started = time.monotonic()  # rates count measuring, not starting up
            self._report(force=True)  # every worker is ready: the bar starts
            self._loop()
        except KeyboardInterrupt:
            self._stop_cleanly()
            raise
        finally:
            for worker in self.workers:
                with contextlib.suppress(Exception):
                    self.ray.kill(worker.actor, no_restart=True)
        total = len(self.plan.cells)
        return SweepResult(
            self.plan.ordered(self.measured),
            tuple(self.measured),
            total - len(self.plan.todo),
            self.path,
            self.plan.repairs,
            tuple(self.failed),
            self.duplicates,
        )

    def _start_workers(self) -> None:
        ray = self.ray
        count = self._worker_count()
        remote = ray.remote(num_gpus=1, num_cpus=0, max_restarts=0, max_concurrency=2)(GpuWorker)
        shipped = portable_kernel(self.kernel)
        actors = [
            remote.remote(self.gpu, shipped, self.grid, self.policy, self.method)
            for _ in range(count)
        ]
        try:
            described = ray.get([a.describe.remote() for a in actors], timeout=self.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            for actor in actors:
                ray.kill(actor, no_restart=True)
            raise RaySweepError(
                f"not every one of {count} GPU workers started within "
                f"{self.start_timeout_s:g} s: the cluster has fewer free GPUs than that "
                "(another job holds them?); ask for fewer with --gpus"
            ) from None
        labels: list[str] = []
        for actor, info in zip(actors, described, strict=True):
            place = info["place"]
            label = f"{place.get('host', '?')}/{place.get('uuid') or place.get('gpu', '?')}"
            if label in labels:  # simulated nodes on one machine share a host name
                label = f"{label}#{labels.count(label) + 1}"
            labels.append(label)
            self.workers.append(_Worker(actor, label, place))
        errors = [(w.label, i["error"]) for w, i in zip(self.workers, described, strict=True)]
        bad = [(label, e) for label, e in errors if e]
        if bad:
            label, error = bad[0]
            raise RaySweepError(f"the GPU worker on {label} cannot run this sweep: {error}")
        model = str(self.device.model)
        others = sorted({i["model"] for i in described} - {model})
        if others:
            raise RaySweepError(
                f"the cluster's GPUs are {', '.join(others)}, not {model} (the model this "
                "sweep's grid and cells are for): sweep each model into its own library"
            )

    def _worker_count(self) -> int:
        if isinstance(self.gpus, int):
            count = self.gpus
        elif self.gpus:
            count = len(self.gpus)
        else:
            count = int(self.ray.cluster_resources().get("GPU", 0))
        if count < 1:
            raise RaySweepError(
                "the Ray cluster offers no GPUs: start its nodes with their GPUs "
                "(ray start --num-gpus N for simulated ones)"
            )
        return count

    # scheduling ------------------------------------------------------------------------
    def _loop(self) -> None:
        ray = self.ray
        while self.queue or self.inflight:
            self._assign()
            if not self.inflight:
                self._fail_left("no GPU worker is left (every worker died)")
                break
            ready, _ = ray.wait(list(self.inflight), num_returns=1, timeout=0.5)
            for ref in ready:
                self._collect(ref)
            self._report(force=bool(ready))

    def _assign(self) -> None:
        busy = {index for index, _unit in self.inflight.values()}
        for index, worker in enumerate(self.workers):
            if not self.queue:
                return
            if not worker.alive or index in busy:
                continue
            unit = self._next_unit(index)
            if unit is None:
                continue
            self.queue.remove(unit)
            ref = worker.actor.measure.remote(unit.point, unit.impls, self.plan.workload)
            self.inflight[ref] = (index, unit)

    def _next_unit(self, index: int) -> _Unit | None:
        """The first queued unit for worker ``index``: a retry goes to a GPU it has not
        failed on while there is one alive (a GPU that broke it may break it again)."""
        alive = {i for i, w in enumerate(self.workers) if w.alive}
        for unit in self.queue:
            if index not in unit.tried_on or alive <= unit.tried_on:
                return unit
        return None

    def _collect(self, ref: Any) -> None:
        ray = self.ray
        index, unit = self.inflight.pop(ref)
        worker = self.workers[index]
        try:
            outcome: UnitOutcome = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            worker.alive = False
            # Never used again, even if Ray brings it back: its point is measured elsewhere.
            with contextlib.suppress(Exception):
                ray.kill(worker.actor, no_restart=True)
            self._warn(
                f"the GPU worker on {worker.label} died ({_first_line(exc)}); its point "
                f"{unit.point.label()} is tried again elsewhere"
            )
            errors = dict.fromkeys(unit.impls, f"the worker on {worker.label} died")
            self._retry(unit, errors, index, worker.place)
            return
        except ray.exceptions.RayError as exc:  # the task itself broke: try it again
            errors = dict.fromkeys(unit.impls, _first_line(exc))
            self._retry(unit, errors, index, worker.place)
            return
        for note in outcome.notes:
            self._warn(f"{worker.label}: {note}")
        failures: dict[str, str] = {}
        for cell in outcome.cells:
            if cell.signature is not None:
                self._write(cell.signature, worker)
            elif cell.error is not None:
                failures[cell.impl] = cell.error
        if failures:
            self._retry(unit, failures, index, worker.place)

    def _write(self, sig: Signature, worker: _Worker) -> None:
        key = cell_key(sig)
        if key in self.present or key not in self.wanted:
            self.duplicates += 1  # measured twice (a retry raced a slow worker): once
            return
        append_signature(self.path, sig)
        self.present.add(key)
        self.measured.append(sig)
        worker.cells += 1

    def _retry(
        self, unit: _Unit, errors: Mapping[str, str], index: int, place: Mapping[str, Any]
    ) -> None:
        impls = tuple(i for i in unit.impls if i in errors)
        again = replace(
            unit,
            impls=impls,
            attempts=unit.attempts + 1,
            tried_on=unit.tried_on | {index},
            last_place=place,
            errors=dict(errors),
        )
        if again.attempts <= self.max_retries:
            self.queue.append(again)
            return
        self._give_up(again)

    def _give_up(self, unit: _Unit) -> None:
        model = str(self.device.model)
        for impl in unit.impls:
            cell = FailedCell(
                self.kernel.name,
                impl,
                unit.point,
                dict(self.plan.workload),
                model,
                unit.errors.get(impl, "not measured"),
                unit.attempts,
                unit.last_place,
            )
            append_failed(failed_path(self.path), cell)
            self.failed.append(cell)
            self._warn(
                f"gave up on {self.kernel.name} {impl} @ {unit.point.label()} after "
                f"{unit.attempts} tries: {cell.error} (in {failed_path(self.path)})"
            )

    def _fail_left(self, why: str) -> None:
        while self.queue:
            unit = self.queue.popleft()
            self._give_up(replace(unit, errors=dict.fromkeys(unit.impls, why)))

    # reporting and stopping ------------------------------------------------------------
    def _report(self, force: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if not force and now - self.last_report < 0.5:
            return
        self.last_report = now
        elapsed = max(now - self.started, 1e-9)
        rates = {w.label: w.cells / elapsed for w in self.workers}
        done = len(self.plan.cells) - len(self.plan.todo) + len(self.measured)
        self.progress(done, len(self.plan.cells), rates)

    def _stop_cleanly(self) -> None:
        """Ctrl-C: workers end their cell and restore their GPU; finished cells are kept."""
        ray = self.ray
        self.queue.clear()
        for worker in self.workers:
            if worker.alive:
                with contextlib.suppress(Exception):
                    worker.actor.stop.remote()
        if not self.inflight:
            return
        ready, _ = ray.wait(
            list(self.inflight), num_returns=len(self.inflight), timeout=self.stop_grace_s
        )
        for ref in ready:
            index, _unit = self.inflight.pop(ref)
            with contextlib.suppress(ray.exceptions.RayError):
                outcome: UnitOutcome = ray.get(ref)
                for cell in outcome.cells:
                    if cell.signature is not None:
                        self._write(cell.signature, self.workers[index])
        if self.inflight:
            stuck = ", ".join(self.workers[i].label for i, _u in self.inflight.values())
            self._warn(
                f"{stuck}: still measuring {self.stop_grace_s:g} s after Ctrl-C; stopped "
                "without waiting (if a GPU stays changed, `eopt reset` on its node)"
            )

    def _warn(self, message: str) -> None:
        if self.warn_fn is not None:
            self.warn_fn(message)
        else:
            print(f"warning: {message}", file=sys.stderr)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
