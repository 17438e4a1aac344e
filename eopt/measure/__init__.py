"""Measurement: meters, regions, repeated runs and their statistics.

Submodules load on first use, so ``from eopt.measure import regions`` in an instrumented
program stays cheap (no NumPy or SciPy import)::

    from eopt.measure import regions

    with regions.region("forward"):
        ...

The rest: :class:`~eopt.measure.meter.Meter` (energy counter or power sampler),
:func:`~eopt.runs.repeat.measure_signature` (one (κ, ω) cell → ``Signature``),
:func:`~eopt.measure.command.measure_command` (``eopt measure -- CMD``, its regions
charged by the one attribution engine through
:func:`~eopt.measure.regions.attribute_regions`) and
:mod:`~eopt.runs.stats` (bootstrap, drift, state changes) and
:func:`~eopt.measure.sensor_period.estimate_power_update_period` (how often a power
reading refreshes).

Recorded runs: :mod:`~eopt.model.trace` (the trace: power series + timed events),
:mod:`~eopt.model.trace_io` (the dashboard layout, the Kokkos connector's CSVs, power
CSVs), :func:`~eopt.attribute.engine.attribute` (the one attribution engine),
:func:`~eopt.runs.runset.record_runs` (repeated runs), and
:func:`~eopt.runs.compare.compare_runs` (variants over repeated runs).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Meter": "eopt.measure.meter",
    "MeterError": "eopt.measure.meter",
    "WindowEnergy": "eopt.measure.meter",
    "RepeatPolicy": "eopt.runs.repeat",
    "StaticPower": "eopt.runs.repeat",
    "measure_signature": "eopt.runs.repeat",
    "measure_static_power": "eopt.runs.repeat",
    "run_repeats": "eopt.runs.repeat",
    "signature_from_runs": "eopt.runs.repeat",
    "RegionEvent": "eopt.measure.regions",
    "RegionRecorder": "eopt.measure.regions",
    "RegionReport": "eopt.measure.regions",
    "attribute_regions": "eopt.measure.regions",
    "region": "eopt.measure.regions",
    "CommandMeasurement": "eopt.measure.command",
    "MeasureError": "eopt.measure.command",
    "measure_command": "eopt.measure.command",
    "measure_regions": "eopt.measure.command",
    "UpdatePeriodEstimate": "eopt.measure.sensor_period",
    "estimate_power_update_period": "eopt.measure.sensor_period",
    "Window": "eopt.measure.windows",
    "WindowResult": "eopt.measure.windows",
    "begin_window": "eopt.measure.windows",
    "end_window": "eopt.measure.windows",
    "window": "eopt.measure.windows",
    "Trace": "eopt.model.trace",
    "TraceError": "eopt.model.trace",
    "read_trace": "eopt.model.trace_io",
    "read_traces": "eopt.model.trace_io",
    "read_runs": "eopt.model.trace_io",
    "write_dashboard": "eopt.model.trace_io",
    "Attribution": "eopt.attribute.engine",
    "attribute": "eopt.attribute.engine",
    "record_runs": "eopt.runs.runset",
    "RunValues": "eopt.runs.compare",
    "Comparison": "eopt.runs.compare",
    "compare_runs": "eopt.runs.compare",
    "load_variant": "eopt.runs.variants",
    "bootstrap_ci": "eopt.runs.stats",
    "summarize": "eopt.runs.stats",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'eopt.measure' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
