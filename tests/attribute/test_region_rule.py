"""`eopt measure`'s regions follow the engine's one rule: nested regions are charged once,
regions that overlap without nesting share the overlap, and nothing is counted twice."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eopt.attribute.engine import attribute
from eopt.measure.meter import Meter
from eopt.measure.regions import RegionWindow, attribute_regions
from eopt.sim.gpu import SimulatedGPU

SPAN_S = 2.0
#: Kernels of ~40 ms: few launches make a second of load.
BIG_GEMM = {"m": 16384, "n": 16384, "k": 16384}


@dataclass(frozen=True)
class Call:
    """A generated region call and the index of the call it is nested in (-1: none)."""

    window: RegionWindow
    parent: int


def _load(gpu: SimulatedGPU, segments: list[tuple[bool, float]]) -> None:
    """Run GEMM bursts and idle spells until SPAN_S of virtual time has passed."""
    stop = gpu.clock.now() + SPAN_S
    k = 0
    while stop - gpu.clock.now() > 1e-9:
        busy, length = segments[k % len(segments)]
        end = min(gpu.clock.now() + length, stop)
        if busy:
            while gpu.clock.now() < end:
                gpu.launch("gemm", None, BIG_GEMM)
        else:
            gpu.idle(end - gpu.clock.now())
        k += 1


@st.composite
def threads_of_regions(draw: st.DrawFn) -> list[Call]:
    """Region calls of 1–3 threads, each thread's calls nested as a call stack nests them
    (names reused across threads and depths), all inside [0, SPAN_S]."""
    calls: list[Call] = []
    for tid in range(1, draw(st.integers(1, 3)) + 1):
        t = draw(st.floats(0.0, 0.3))
        stack: list[tuple[str, float, int]] = []  # (name, start, index of its Call)
        for op in draw(st.lists(st.sampled_from(["enter", "exit", "wait"]), max_size=14)):
            t = min(t + draw(st.sampled_from([0.0, 0.01, 0.07, 0.2])), SPAN_S)
            if op == "enter" and len(stack) < 3:
                stack.append((draw(st.sampled_from(["a", "b", "c"])), t, len(calls)))
                calls.append(None)  # type: ignore[arg-type]  # its slot, filled at exit
            elif op == "exit" and stack:
                _close(calls, stack, t, tid)
        while stack:
            _close(calls, stack, min(t + 0.05, SPAN_S), tid)
    return calls


def _close(calls: list[Call], stack: list[tuple[str, float, int]], t: float, tid: int) -> None:
    path = tuple(name for name, _, _ in stack)
    name, start, slot = stack.pop()
    parent = stack[-1][2] if stack else -1
    calls[slot] = Call(RegionWindow(name, path, start, t, pid=100, tid=tid), parent)


#: How the meter reads the simulated GPU: its energy counter, its point readings, or its
#: readings averaged over each whole refresh interval.
SENSORS = ("counter", "instant", "interval_mean")


def _measure(sensor: str, segments, calls: list[Call]):
    """The calls, shifted onto a simulated GPU's measured span, attributed."""
    field = "average" if sensor == "interval_mean" else "instant"
    gpu = SimulatedGPU(seed=5, energy_counter=sensor == "counter", power_field=field)
    gpu.power_average_window_s = gpu.power_update_period_s
    with Meter(gpu) as meter:
        assert meter.method == ("counter" if sensor == "counter" else "sampler")
        assert meter.method == "counter" or meter.power_trace.kind == sensor.replace(
            "instant", "point"
        )
        gpu.idle(0.05)
        t0 = meter.mark()
        _load(gpu, segments)
        t1 = meter.mark()
        windows = [
            RegionWindow(w.name, w.path, t0 + w.start_s, t0 + w.end_s, w.pid, w.tid)
            for w in (c.window for c in calls)
        ]
        return attribute_regions(windows, meter, t0, t1), meter, t0


segments_strategy = st.lists(
    st.tuples(st.booleans(), st.sampled_from([0.03, 0.15, 0.4])), min_size=1, max_size=6
)


@settings(max_examples=30)
@given(calls=threads_of_regions(), segments=segments_strategy, sensor=st.sampled_from(SENSORS))
def test_nested_and_overlapping_regions_conserve_energy(calls, segments, sensor):
    report, _, _ = _measure(sensor, segments, calls)
    events = {e.id: e for e in report.events}
    assert len(events) == len(calls)
    # Nesting is the threads' own: each call's parent is the call that was open beneath
    # it in its thread, never another thread's call that happens to enclose it in time.
    for k, c in enumerate(calls):
        assert events[k + 1].parent_id == c.parent + 1
    assert report.trace is not None
    att = attribute(report.trace)
    total = att.total_energy_j
    scale = max(total, 1.0) * 1e-9
    assert sum(c.exclusive_energy_j for c in att.calls) + att.outside_energy_j == pytest.approx(
        total, abs=scale
    )
    for c in att.calls:
        children = [d for d in att.calls if d.event.parent_id == c.event.id]
        assert c.inclusive_energy_j == pytest.approx(
            c.exclusive_energy_j + sum(d.inclusive_energy_j for d in children), abs=scale
        )
        assert events[c.event.id].energy_j == c.inclusive_energy_j
    # The report says the same: its outermost calls, with the outside, make the total
    # once, however much they overlap.
    assert report.total_energy_j == total
    tops = sum(e.energy_j for e in report.events if e.parent_id == 0)
    assert tops + report.outside_energy_j == pytest.approx(total, abs=scale)
    for r in report.regions:
        assert r.energy_j == pytest.approx(
            sum(e.energy_j for e in report.events if e.path == r.key), abs=scale
        )


@st.composite
def apart(draw: st.DrawFn) -> list[tuple[float, float]]:
    """Windows one after another with gaps of at least 0.25 s (more than two sensor
    periods), inside [0, SPAN_S]."""
    out, t = [], draw(st.floats(0.25, 0.5))
    for _ in range(draw(st.integers(1, 4))):
        length = draw(st.floats(0.001, 0.3))
        if t + length > SPAN_S - 0.25:
            break
        out.append((t, t + length))
        t += length + draw(st.floats(0.25, 0.4))
    return out


@settings(max_examples=30)
@given(windows=apart(), segments=segments_strategy, sensor=st.sampled_from(SENSORS))
def test_a_region_overlapping_no_other_gets_the_meters_energy_of_its_window(
    windows, segments, sensor
):
    calls = [
        Call(RegionWindow(f"r{i}", (f"r{i}",), a, b, 1, 1), -1) for i, (a, b) in enumerate(windows)
    ]
    report, meter, t0 = _measure(sensor, segments, calls)
    for e in report.events:
        window = meter.energy(t0 + e.start_s, t0 + e.end_s)
        # The energies pass to the engine as power to the µW (as a trace file keeps it).
        assert e.energy_j == pytest.approx(window.energy_j, rel=1e-7, abs=1e-6 * e.end_s)
        assert e.error_j == window.error_j


def test_overlapping_threads_share_and_nested_regions_are_charged_once():
    """Thread 1: a over [0.2, 1.2] with a child over [0.3, 0.5]; thread 2: b over
    [0.7, 1.7]. The rule, from the meter's own window energies E: the child gets
    E(0.3, 0.5); a gets E(0.2, 0.7) plus half of E(0.7, 1.2); b the other half plus
    E(1.2, 1.7); each used to be charged the whole overlap."""
    calls = [
        Call(RegionWindow("a", ("a",), 0.2, 1.2, 1, 1), -1),
        Call(RegionWindow("child", ("a", "child"), 0.3, 0.5, 1, 1), 0),
        Call(RegionWindow("b", ("b",), 0.7, 1.7, 1, 2), -1),
    ]
    report, meter, t0 = _measure("counter", [(True, 0.15), (False, 0.1)], calls)

    def energy(a: float, b: float) -> float:
        return meter.energy(t0 + a, t0 + b).energy_j

    got = {r.key: r.energy_j for r in report.regions}
    shared = energy(0.7, 1.2)
    assert got["a/child"] == pytest.approx(energy(0.3, 0.5), rel=1e-7)
    assert got["a"] == pytest.approx(energy(0.2, 0.7) + shared / 2, rel=1e-7)
    assert got["b"] == pytest.approx(shared / 2 + energy(1.2, 1.7), rel=1e-7)
    assert report.outside_energy_j == pytest.approx(
        energy(0.0, 0.2) + energy(1.7, report.total_time_s), rel=1e-7
    )
    assert got["a"] + got["b"] + report.outside_energy_j == pytest.approx(
        report.total_energy_j, rel=1e-12
    )
