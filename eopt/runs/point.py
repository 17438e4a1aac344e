"""The unit of a sweep's work: one operating point of one kernel, with its implementations.

A point is set once, its static power measured once, and then every implementation is
measured there (:func:`measure_point`). A serial sweep walks its points one after another;
a shard walks its share; a Ray worker is handed one point at a time. All of them measure
a point through this one function, so a cell is measured the same way wherever it runs.

On a real GPU (or any device handed in as an object) the cells of a point are measured on
that device one after another. On a simulated GPU swept from a
:class:`~eopt.runs.gpus.GpuSpec`, the static power and each cell get a fresh simulated GPU
seeded for them (:func:`eopt.runs.gpus.fresh_simulated`), so a cell's numbers depend only
on the sweep's seed and the cell, never on the worker or the order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from eopt.devices.base import Device
from eopt.measure.meter import Meter, MeterMethod
from eopt.model.context import ISOLATED, device_entry_context
from eopt.model.library import cell_key_of
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature
from eopt.runs.gpus import place_of
from eopt.runs.repeat import RepeatPolicy, StaticPower, measure_signature, measure_static_power

__all__ = ["PointKernel", "PointWork", "measure_point", "static_key"]


class PointKernel(Protocol):
    """What :func:`measure_point` needs of a kernel (every sweep kernel has it)."""

    name: str

    def runner(self, impl: str, device: Device) -> Callable[[], object]:
        """One invocation of ``impl`` on ``device``."""
        ...


@dataclass(frozen=True)
class PointWork:
    """One unit of work.

    Attributes:
        point: The device-wide operating point ω.
        impls: The implementations κ to measure there, in order.
        set_point: Whether to set ``point`` on the device (False: measure at the
            current setting, a measure-only sweep).
    """

    point: OperatingPoint
    impls: tuple[str, ...]
    set_point: bool = True


def static_key(name: str, point: OperatingPoint, workload: Mapping[str, Any], model: str) -> str:
    """The identity of a point's static-power measurement, for its seed: unlike any cell's
    key (:func:`eopt.model.library.cell_key_of`), since no implementation is named."""
    return cell_key_of(name, "", point, workload, model) + "\0static"


def measure_point(
    kernel: PointKernel,
    work: PointWork,
    device: Device,
    *,
    workload: Mapping[str, Any],
    policy: RepeatPolicy,
    method: MeterMethod = "auto",
    sync: Callable[[], object] | None = None,
    backend: str | None = None,
    extra_meta: Mapping[str, Any] | None = None,
    fresh: Callable[[str], Device] | None = None,
    meter: Meter | None = None,
    place: Mapping[str, Any] | None = None,
    warn: Callable[[str], None] | None = None,
    before_cell: Callable[[str], None] | None = None,
    on_cell: Callable[[Signature], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[Signature]:
    """Measure every implementation of ``work`` at its point.

    Args:
        kernel: The sweep's kernel.
        work: The point and its implementations.
        device: The GPU (set to the point unless ``fresh`` gives per-cell GPUs).
        workload: θ as the signatures record it.
        policy: Repeat counts and durations.
        method: Meter method.
        sync: What each window waits with (a Python callable's ``--sync``).
        backend: The backend name recorded in ``meta.backend``.
        extra_meta: Recorded in every signature's ``meta``.
        fresh: A new device for a seed key (simulated GPUs swept from a spec): the
            static power and each cell are measured on their own.
        meter: A started meter on ``device`` to measure with (a serial sweep keeps one
            for all its points); None starts one for the point.
        place: More of where the cells are measured, added to each cell's
            ``meta.measured_on`` (a Ray worker's node).
        warn: Called with what the device noted while setting the point.
        before_cell: Called with each implementation before it is measured.
        on_cell: Called with each finished signature (the sweep appends it at once).
        should_stop: Asked before each cell; True ends the point there (the cells
            measured so far are returned).

    Returns:
        The signatures measured, in the order of ``work.impls``.

    Raises:
        MeterError, KernelError, MeasureError, DeviceError: as the measurement raises
        them; cells finished before were passed to ``on_cell``.
    """
    model = str(getattr(device, "model", ""))
    point = work.point
    extra = dict(extra_meta or {})
    out: list[Signature] = []

    def measure(target: Device, meter: Meter, impl: str, static: StaticPower) -> Signature:
        # φ as the cell's windows find it, ρ = {e}: a sweep runs each cell alone (paper
        # §3.1: every measurement records its context).
        context = {
            "entry": device_entry_context(target).to_dict(),
            "runtime": ISOLATED.to_dict(),
        }
        sig = measure_signature(
            kernel.name,
            kernel.runner(impl, target),
            target,
            meter,
            impl=impl,
            workload=workload,
            op_point=point,
            policy=policy,
            sync=sync,
            static=static,
            backend=backend,
            extra_meta={
                **extra,
                "device_notes": notes,
                "context": context,
                "measured_on": {**place_of(target), **(place or {})},
            },
        )
        # The state the cell leaves behind: what the next cell inherits.
        exit_state = device_entry_context(target).to_dict()
        return sig.with_(meta={**sig.meta, "exit_context": exit_state})

    def done(sig: Signature) -> None:
        out.append(sig)
        if on_cell is not None:
            on_cell(sig)

    base = device if fresh is None else fresh(static_key(kernel.name, point, workload, model))
    notes = _set_point(base, work, warn)
    given = meter if fresh is None else None
    with contextlib.nullcontext(given) if given is not None else Meter(base, method=method) as m:
        static = measure_static_power(base, m, policy.static_idle_s, policy.settle_s)
        for impl in work.impls:
            if should_stop is not None and should_stop():
                return out
            if before_cell is not None:
                before_cell(impl)
            if fresh is None:
                done(measure(base, m, impl, static))
                continue
            own = fresh(cell_key_of(kernel.name, impl, point, workload, model))
            _set_point(own, work, None)
            with Meter(own, method=method) as own_meter:
                # The idle the point's static measurement gave its GPU, so the cell finds
                # its own settled at the point, as the first cell of a point does.
                measure_static_power(own, own_meter, policy.static_idle_s, policy.settle_s)
                done(measure(own, own_meter, impl, static))
    return out


def _set_point(device: Device, work: PointWork, warn: Callable[[str], None] | None) -> list[str]:
    """Set the point (when the work sets it); what the device noted doing so.

    The notes (an administrator's lock it overrode …) are said now and kept with the
    cells, never left unread.
    """
    raw = getattr(device, "notes", None)
    notes: list[str] = raw if isinstance(raw, list) else []
    seen = len(notes)
    if work.set_point:
        device.set_operating_point(work.point)
    fresh_notes = list(notes[seen:])
    if warn is not None:
        for note in fresh_notes:
            warn(note)
    return fresh_notes
