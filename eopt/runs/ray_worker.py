"""A distributed sweep's worker: one Ray actor per GPU, measuring the points it is handed.

A worker asks Ray for one GPU. Ray gives it one by setting ``CUDA_VISIBLE_DEVICES`` in
CUDA's numbering, not NVML's; the worker resolves that once, at its start, to the GPU's
NVML index (and so its UUID, :func:`eopt.devices.gpu_select.resolve_gpu`) and measures
only there. A simulated GPU is pinned by host and index: the GPU id Ray gave the worker.
Each point is measured by :func:`eopt.runs.point.measure_point`, as a serial sweep's are,
with the GPU guarded (:func:`eopt.devices.guard.restoring_on_exit`) while its point is set.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eopt.devices.backends import backend, backend_of, gpu_backend_names
from eopt.devices.base import Device
from eopt.measure.meter import MeterMethod
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature
from eopt.runs.gpus import GpuSpec, fresh_opener, is_simulated, place_of
from eopt.runs.point import PointWork, measure_point
from eopt.runs.ray_runtime import RaySweepError
from eopt.runs.repeat import RepeatPolicy
from eopt.runs.sweep import (
    Grid,
    Kernel,
    PythonKernel,
    cell_meta,
    check_sweep,
    parse_kernel,
    resolve_sync,
)

__all__ = [
    "CellOutcome",
    "GpuWorker",
    "PortableKernel",
    "UnitOutcome",
    "portable_kernel",
    "worker_gpu",
]


@dataclass(frozen=True)
class CellOutcome:
    """One cell of a unit, as a worker ends it: a signature, an error, or neither (the
    worker was told to stop before it)."""

    impl: str
    signature: Signature | None = None
    error: str | None = None


@dataclass(frozen=True)
class UnitOutcome:
    """A point as a worker ends it.

    Attributes:
        cells: Each implementation's outcome, in the order asked for.
        notes: What the GPU noted while its point was set (said by the driver).
    """

    cells: tuple[CellOutcome, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PortableKernel:
    """A Python kernel as it travels to a worker: its spec, imported there again (a
    function object cannot be sent to another process by value)."""

    spec: str
    workload: Mapping[str, Any]
    impls: tuple[str, ...] | None
    sync: str | None
    name: str

    def build(self) -> Kernel:
        """The kernel, imported in this process.

        Raises:
            SweepError: as :func:`eopt.runs.sweep.parse_kernel` (a module this node
                cannot import, say).
        """
        return parse_kernel(
            self.spec, params=self.workload, impls=self.impls, sync=self.sync, name=self.name
        )


def portable_kernel(kernel: Kernel) -> Kernel | PortableKernel:
    """``kernel`` in a form a worker process can receive (see :class:`PortableKernel`)."""
    if not isinstance(kernel, PythonKernel):
        return kernel
    chosen = kernel.sync_spec is not None and "(chosen" in kernel.sync_spec
    return PortableKernel(
        kernel.spec,
        dict(kernel.workload),
        tuple(kernel.functions) if kernel.pass_impl else None,
        None if chosen else kernel.sync_spec,
        kernel.name,
    )


def worker_gpu(template: GpuSpec, gpu_ids: Sequence[Any], simulated: bool) -> GpuSpec:
    """The GPU a worker was given, from Ray's GPU ids and ``CUDA_VISIBLE_DEVICES``.

    A simulated GPU is the index Ray gave (its id); a real one is CUDA ordinal 0 of the
    worker's process (the one GPU Ray left visible), resolved to its NVML index.
    """
    if not gpu_ids:
        raise RaySweepError("Ray started a GPU worker without a GPU")
    if simulated:
        token = str(gpu_ids[0])
        if not token.isdigit():
            raise RaySweepError(
                f"Ray gave a simulated GPU worker the GPU id {token!r}; simulated GPUs "
                "take indices (start the runtime with CUDA_VISIBLE_DEVICES=0,1,…)"
            )
        return template.at(int(token))
    from eopt.devices.gpu_select import resolve_gpu

    return template.at(resolve_gpu("0"))


class GpuWorker:
    """One GPU's worker (a Ray actor: :func:`eopt.runs.ray_sweep.ray_sweep` makes it remote).

    Opens its GPU once, checks the sweep against it, then measures the points it is
    handed, one at a time. Construction never raises: a worker that cannot open its GPU
    says why in :meth:`describe`.
    """

    def __init__(
        self,
        template: GpuSpec,
        kernel: Kernel | PortableKernel,
        grid: Grid,
        policy: RepeatPolicy,
        method: MeterMethod,
    ) -> None:
        import ray

        self.grid = grid
        self.policy = policy
        self.method = method
        self.error: str | None = None
        self.place: dict[str, Any] = {}
        self.model = ""
        self._stop = threading.Event()
        self._busy = threading.Lock()
        try:
            spec = worker_gpu(template, ray.get_gpu_ids(), _simulated(template))
            self.device: Device = spec.open()
            built = kernel.build() if isinstance(kernel, PortableKernel) else kernel
            check_sweep(built, grid, self.device, template.control)
            self.kernel, _note = resolve_sync(built, self.device)
            self.fresh = fresh_opener(spec, self.device)
            self.extra = cell_meta(self.kernel, grid, self.device)
            self.node = {"ray_node": ray.get_runtime_context().get_node_id()}
            self.place = {**place_of(self.device), **self.node}
            self.model = str(self.device.model)
        except Exception as exc:  # said by describe(): the driver stops the sweep with it
            self.error = f"{type(exc).__name__}: {exc}"

    def describe(self) -> dict[str, Any]:
        """Where this worker measures (``place``), its GPU ``model``, or its ``error``."""
        return {"place": self.place, "model": self.model, "error": self.error}

    def stop(self) -> None:
        """End the point being measured after its current cell (Ctrl-C on the driver)."""
        self._stop.set()

    def measure(self, point: OperatingPoint, impls: tuple[str, ...], workload: Any) -> Any:
        """Measure ``impls`` at ``point``; each cell's signature or error.

        The GPU is guarded while its point is set: it is restored when the point ends,
        however it ends. A cell whose kernel raises fails alone; a setting the GPU cannot
        make fails the cells left.
        """
        if self.error is not None:
            raise RaySweepError(self.error)
        with self._busy:
            if self.grid.controls:
                from eopt.devices.guard import restoring_on_exit

                with restoring_on_exit([self.device], warn=False):
                    return self._measure(point, impls, workload)
            return self._measure(point, impls, workload)

    def _measure(self, point: OperatingPoint, impls: tuple[str, ...], workload: Any) -> Any:
        cells: dict[str, CellOutcome] = {}
        notes: list[str] = []
        left = list(impls)
        while left and not self._stop.is_set():
            try:
                measure_point(
                    self.kernel,
                    PointWork(point, tuple(left), self.grid.controls),
                    self.device,
                    workload=workload,
                    policy=self.policy,
                    method=self.method,
                    sync=getattr(self.kernel, "sync", None),
                    backend=backend_of(self.device),
                    extra_meta=self.extra,
                    fresh=self.fresh,
                    place=self.node,
                    warn=notes.append,
                    on_cell=lambda sig: cells.__setitem__(sig.impl, CellOutcome(sig.impl, sig)),
                    should_stop=self._stop.is_set,
                )
            except Exception as exc:  # the cell in progress failed; go on with the rest
                failing = next(i for i in left if i not in cells)
                cells[failing] = CellOutcome(failing, error=f"{type(exc).__name__}: {exc}")
            left = [i for i in left if i not in cells]
        return UnitOutcome(
            tuple(cells.get(i, CellOutcome(i)) for i in impls), tuple(dict.fromkeys(notes))
        )


def _simulated(template: GpuSpec) -> bool:
    """Whether ``template`` opens simulated GPUs (``auto`` opens one to find out: on a node
    without NVIDIA GPUs it is the simulator)."""
    if template.backend in gpu_backend_names():
        return not backend(template.backend).real
    return is_simulated(template.open())
