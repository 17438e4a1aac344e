"""The column-wise engine gives the numbers of the event-by-event sweep it replaced, on
random traces that nest, overlap across threads, touch at their edges, have zero-length
events, reach outside the power trace and have sampling gaps; and its memory grows
linearly with the nesting depth."""

from __future__ import annotations

import importlib.util
import math
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from eopt.attribute.engine import Attribution, attribute
from eopt.model.trace import Event, EventTable, PowerSeries, Trace
from eopt.model.trace_io import read_trace, write_dashboard

_SPEC = importlib.util.spec_from_file_location(
    "_eopt_reference_engine", Path(__file__).with_name("reference_engine.py")
)
assert _SPEC is not None and _SPEC.loader is not None
reference = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = reference  # dataclasses look their module up by name
_SPEC.loader.exec_module(reference)

ORIGIN_NS = 1_700_000_000_000_000_000
NAMES = ("solve", "assemble", "halo", "Kokkos::axpy", "Kokkos::dot", "copy")


def _tree(
    rng: np.random.Generator, events: list[Event], lo: int, hi: int, parent: int, depth: int
) -> None:
    """Children of ``parent`` inside [lo, hi]: siblings that may touch or overlap."""
    t = lo
    while depth < 4 and t < hi and (rng.random() < 0.8 or not events):
        a = int(t + rng.integers(0, 3) * rng.integers(0, 2_000_000))
        if rng.random() < 0.15:  # overlap the sibling before (same thread, two streams)
            a = max(lo, a - 3_000_000)
        if a > hi:
            break
        length = 0 if rng.random() < 0.05 else int(rng.integers(1, 40_000_000))
        b = min(hi, a + length)
        k = len(events) + 1
        events.append(Event(k, parent, NAMES[int(rng.integers(len(NAMES)))], "USER_REGION", a, b))
        _tree(rng, events, a, b, k, depth + 1)
        t = b if rng.random() < 0.5 else b + int(rng.integers(0, 5_000_000))


def random_trace(seed: int) -> Trace:
    """Up to four threads of nested events over 2 s, under one or two power series."""
    rng = np.random.default_rng(seed)
    events: list[Event] = []
    for _ in range(int(rng.integers(1, 5))):
        _tree(rng, events, ORIGIN_NS, ORIGIN_NS + 2_000_000_000, 0, 0)
    events = [
        Event(
            e.id,
            e.parent_id,
            e.name,
            "PARALLEL_FOR" if e.parent_id and k % 3 == 0 else e.category,
            e.start_ns,
            e.end_ns,
        )
        for k, e in enumerate(events)
    ]
    series = []
    for device in range(int(rng.integers(1, 3))):
        # The power trace may start late or end early (unknown calls) and has a gap.
        first = ORIGIN_NS + int(rng.integers(0, 2)) * int(rng.integers(0, 100_000_000))
        last = (
            ORIGIN_NS + 2_000_000_000 - int(rng.integers(0, 2)) * int(rng.integers(0, 100_000_000))
        )
        times = np.arange(first, last, 20_000_000 + device * 3_000_000, dtype=np.int64)
        if rng.random() < 0.5:
            cut = int(rng.integers(10, times.size - 10))
            times = np.delete(times, np.arange(cut, cut + 12))
        power = 100 + 200 * rng.random(times.size)
        series.append(PowerSeries("GPU", device, times, power))
    return Trace(tuple(events), tuple(series), {}, f"random trace {seed}")


def _close(a: float | None, b: float | None, scale: float) -> bool:
    if a is None or b is None:
        return a is b
    # Both sum the same interval energies (each a difference of one cumulative curve), so
    # they agree to rounding: relative 1e-9, or 1e-12 of the trace's total energy.
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12 * scale)


def assert_same(new: Attribution, old: Attribution) -> None:
    scale = old.total_energy_j
    assert new.total_energy_j == old.total_energy_j
    assert _close(new.outside_energy_j, old.outside_energy_j, scale)
    assert new.warnings == old.warnings
    assert [r.name for r in new.regions] == [r.name for r in old.regions]
    for r, q in zip(new.regions, old.regions, strict=True):
        assert (r.category, r.depth, r.calls, r.short_calls, r.flags) == (
            q.category,
            q.depth,
            q.calls,
            q.short_calls,
            q.flags,
        )
        assert math.isclose(r.time_s, q.time_s, rel_tol=1e-12)
        for field in ("inclusive_energy_j", "exclusive_energy_j", "share"):
            assert _close(getattr(r, field), getattr(q, field), scale), (r.name, field)
        assert r.by_series.keys() == q.by_series.keys()
        for label in r.by_series:
            assert _close(r.by_series[label], q.by_series[label], scale)
    assert len(new.calls) == len(old.calls)
    for c, d in zip(new.calls, old.calls, strict=True):
        assert (c.event, c.depth, c.start_s, c.end_s) == (d.event, d.depth, d.start_s, d.end_s)
        assert _close(c.inclusive_energy_j, d.inclusive_energy_j, scale)
        assert _close(c.exclusive_energy_j, d.exclusive_energy_j, scale)


@pytest.mark.parametrize("seed", range(40))
def test_columnwise_engine_matches_the_sweep(seed: int) -> None:
    trace = random_trace(seed)
    assert len(trace.events) > 0
    assert_same(attribute(trace), reference.reference_attribute(trace))


@pytest.mark.parametrize("seed", range(6))
def test_trace_read_column_wise_matches_the_sweep(seed: int, tmp_path: Path) -> None:
    trace = random_trace(100 + seed)
    write_dashboard(trace, tmp_path)
    read = read_trace(tmp_path)
    assert isinstance(read.events, EventTable)  # the fast reader took it
    assert tuple(read.events) == trace.events
    assert_same(attribute(read), reference.reference_attribute(read))


def test_the_sweep_rule_on_a_hand_computed_trace() -> None:
    """Constant 100 W over [0, 10] s; A [0, 10] holds B [2, 6]; C [4, 8] is another
    thread's. Leaves: A on [0, 2] (200 J); B on [2, 4] (200 J); B and C on [4, 6] (100 J
    each); A and C on [6, 8] (100 J each); A on [8, 10] (200 J)."""
    s = 1_000_000_000
    events = (
        Event(1, 0, "A", "USER_REGION", 0, 10 * s),
        Event(2, 1, "B", "USER_REGION", 2 * s, 6 * s),
        Event(3, 0, "C", "USER_REGION", 4 * s, 8 * s),
    )
    times = np.arange(0, 11 * s, s // 2, dtype=np.int64)[:21]
    trace = Trace(events, (PowerSeries("GPU", 0, times, np.full(times.size, 100.0)),))
    att = attribute(trace)
    excl = {r.name: r.exclusive_energy_j for r in att.regions}
    incl = {r.name: r.inclusive_energy_j for r in att.regions}
    assert excl == pytest.approx({"A": 500.0, "B": 300.0, "C": 200.0})
    assert incl == pytest.approx({"A": 800.0, "B": 300.0, "C": 200.0})
    assert att.outside_energy_j == pytest.approx(0.0, abs=1e-9)


def _chain_peak_bytes(depth: int) -> int:
    """Peak memory of attributing ``depth`` regions nested one in the next."""
    events = tuple(
        Event(k + 1, k, f"level{k}", "USER_REGION", k * 1000, 10**9 - k * 1000)
        for k in range(depth)
    )
    times = np.linspace(0, 10**9, 101).astype(np.int64)
    trace = Trace(events, (PowerSeries("GPU", 0, times, np.full(times.size, 50.0)),))
    tracemalloc.start()
    try:
        att = attribute(trace, calls=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert att.regions[0].inclusive_energy_j == pytest.approx(50.0 * 1.0)
    return peak


def test_memory_is_linear_in_nesting_depth() -> None:
    small, large = _chain_peak_bytes(1000), _chain_peak_bytes(4000)
    # Four times the depth: linear memory is about 4×, the old sweep's quadratic 16×.
    assert large < 6 * small, (small, large)
    assert large < 20 * 2**20
