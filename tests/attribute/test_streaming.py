"""Attribution by streaming (``events.csv`` a block at a time) gives the numbers of the
whole-trace engine, on random traces that nest, overlap across threads and devices,
touch at their edges, have zero-length events and events that cross block boundaries,
reach outside the power trace and have sampling gaps; it refuses (and the whole reader
takes) files in another order or with a fault; and its memory does not grow with the
number of events."""

from __future__ import annotations

import importlib.util
import sys
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest

from eopt.attribute import engine
from eopt.attribute.engine import attribute, attribute_streamed
from eopt.cli import main
from eopt.model.trace import Event, PowerSeries, Trace, TraceWarning
from eopt.model.trace_io import read_trace, write_dashboard

_SPEC = importlib.util.spec_from_file_location(
    "_eopt_columnwise_test", Path(__file__).with_name("test_columnwise_engine.py")
)
assert _SPEC is not None and _SPEC.loader is not None
columnwise = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = columnwise
_SPEC.loader.exec_module(columnwise)


def renumbered(trace: Trace, order: list[Event]) -> Trace:
    """The trace's events in `order`, renumbered 1, 2, … in that order (parents follow)."""
    new_id = {e.id: k for k, e in enumerate(order, start=1)}
    events = tuple(
        Event(
            new_id[e.id],
            new_id[e.parent_id] if e.parent_id else 0,
            e.name,
            e.category,
            e.start_ns,
            e.end_ns,
        )
        for e in order
    )
    return Trace(events, trace.series, {}, trace.source)


def sweep_ordered(trace: Trace) -> Trace:
    """The trace's events renumbered in start order (parents before their children at
    one start), as the dashboard writes them."""
    return renumbered(
        trace, sorted(trace.events, key=lambda e: (e.start_ns, _depth(trace, e), e.id))
    )


def _depth(trace: Trace, event: Event) -> int:
    by_id = {e.id: e for e in trace.events}
    depth, p = 0, event.parent_id
    while p:
        depth, p = depth + 1, by_id[p].parent_id
    return depth


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``eopt ARGV``: (exit status, stdout, stderr)."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_streamed_equal(folder: Path, block_bytes: int) -> None:
    whole = attribute(read_trace(folder), calls=False)
    streamed = attribute_streamed(folder, min_bytes=0, block_bytes=block_bytes)
    assert streamed is not None, "a trace in start order is streamed"
    assert streamed.source == whole.source and streamed.rank is None
    assert [s.to_dict() for s in streamed.series] == [s.to_dict() for s in whole.series]
    assert streamed.total_time_s == whole.total_time_s
    columnwise.assert_same(streamed, whole)


@pytest.mark.parametrize("seed", range(40))
def test_streaming_matches_the_whole_trace(seed: int, tmp_path: Path) -> None:
    trace = sweep_ordered(columnwise.random_trace(seed))
    write_dashboard(trace, tmp_path)
    size = (tmp_path / "events.csv").stat().st_size
    rng = np.random.default_rng(seed)
    # Blocks of a few lines up to the whole file: events cross many block boundaries.
    for block in (1, int(rng.integers(40, 400)), size // 3 + 1, size + 1):
        assert_streamed_equal(tmp_path, block)


def test_events_open_across_many_blocks_and_equal_starts(tmp_path: Path) -> None:
    """A long top-level event holds 300 kernels on two overlapping streams, many starting
    together; a second thread's event spans most of them; every block is a few lines."""
    s = 1_000_000
    events = [
        Event(1, 0, "run", "USER_REGION", 0, 1000 * s),
        Event(2, 0, "io", "USER_REGION", 0, 900 * s),
    ]
    for k in range(300):
        a = (k // 2) * 3 * s  # two kernels at each start
        events.append(Event(3 + k, 1, f"k{k % 5}", "PARALLEL_FOR", a, a + (2 + k % 3) * s))
    times = np.arange(-5 * s, 1005 * s, 7 * s, dtype=np.int64)
    power = 150 + 50 * np.sin(np.arange(times.size) / 9.0)
    trace = sweep_ordered(Trace(tuple(events), (PowerSeries("GPU", 0, times, power),)))
    write_dashboard(trace, tmp_path)
    for block in (1, 64, 1000):
        assert_streamed_equal(tmp_path, block)


def _end_ordered(trace: Trace) -> Trace:
    """Events written as they close (the Kokkos connector's order): children first."""
    return renumbered(trace, sorted(trace.events, key=lambda e: (e.end_ns, -e.start_ns)))


@pytest.mark.parametrize("seed", range(4))
def test_another_order_is_read_whole_with_the_same_numbers(
    seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = _end_ordered(columnwise.random_trace(100 + seed))
    write_dashboard(trace, tmp_path)
    assert attribute_streamed(tmp_path, min_bytes=0, block_bytes=200) is None
    # The command falls back to the whole reader: the same JSON as without streaming.
    monkeypatch.setattr(engine, "STREAM_BYTES", 0)
    code, tried, _ = run(["attribute", str(tmp_path), "--json"], capsys)
    monkeypatch.setattr(engine, "STREAM_BYTES", 10**12)
    code_whole, whole, _ = run(["attribute", str(tmp_path), "--json"], capsys)
    assert code == code_whole == 0
    assert tried == whole and '"regions"' in whole


def test_a_fault_late_in_the_file_is_named_by_the_whole_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = sweep_ordered(columnwise.random_trace(7))
    write_dashboard(trace, tmp_path)
    lines = (tmp_path / "events.csv").read_text(encoding="utf-8").splitlines()
    # The last event ends before it starts.
    fields = lines[-1].split(",")
    fields[5] = str(int(fields[4]) - 1)
    lines[-1] = ",".join(fields)
    (tmp_path / "events.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert attribute_streamed(tmp_path, min_bytes=0, block_bytes=100) is None
    monkeypatch.setattr(engine, "STREAM_BYTES", 0)
    code, _, err = run(["attribute", str(tmp_path)], capsys)
    assert code != 0
    assert f"events.csv:{len(lines)}" in err and "before it starts" in err
    assert "Traceback" not in err


def test_the_command_streams_a_large_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = sweep_ordered(columnwise.random_trace(11))
    write_dashboard(trace, tmp_path)
    used: list[bool] = []
    real = engine.attribute_streamed

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        result = real(*args, **kwargs)
        used.append(result is not None)
        return result

    monkeypatch.setattr(engine, "attribute_streamed", spy)
    monkeypatch.setattr(engine, "STREAM_BYTES", 0)
    code, streamed, _ = run(["attribute", str(tmp_path), "--json"], capsys)
    assert used == [True]
    monkeypatch.setattr(engine, "STREAM_BYTES", 10**12)
    code_whole, whole, _ = run(["attribute", str(tmp_path), "--json"], capsys)
    assert used == [True, False]
    assert code == code_whole == 0 and streamed == whole
    # --calls needs every call: never streamed.
    monkeypatch.setattr(engine, "STREAM_BYTES", 0)
    code, _, _ = run(["attribute", str(tmp_path), "--json", "--calls"], capsys)
    assert code == 0 and used == [True, False]


def test_warnings_about_the_power_come_once(tmp_path: Path) -> None:
    trace = sweep_ordered(columnwise.random_trace(5))
    s = trace.series[0]
    loud = PowerSeries(s.domain, s.device_id, s.times_ns, s.power_w * 100)  # kW read as W
    write_dashboard(Trace(trace.events, (loud,), {}, trace.source), tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert attribute_streamed(tmp_path, min_bytes=0, block_bytes=500) is not None
    assert [w.category for w in caught] == [TraceWarning]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _end = _end_ordered(Trace(trace.events, (loud,), {}, trace.source))
        write_dashboard(_end, tmp_path)
        assert attribute_streamed(tmp_path, min_bytes=0, block_bytes=500) is None
    assert caught == [], "a trace read whole after all warns there, not here too"


def _kernel_trace(folder: Path, steps: int, rng: np.random.Generator) -> None:
    """``steps`` steps of 9 kernels each, packed into the same 2 s of power samples."""
    folder.mkdir()
    step_ns = 2_000_000_000 // steps
    lines = ["id,parent_id,name,category,start_ns,end_ns"]
    k = 1
    for s in range(steps):
        a = s * step_ns
        lines.append(f"{k},0,step,USER_REGION,{a},{a + step_ns - 10}")
        parent, k = k, k + 1
        for j in range(9):
            b = a + j * (step_ns // 10) + int(rng.integers(0, 5))
            lines.append(f"{k},{parent},kernel_{j},PARALLEL_FOR,{b},{b + step_ns // 12}")
            k += 1
    (folder / "events.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    times = np.arange(0, 2_000_000_001, 20_000_000)
    rows = "".join(f"{t},GPU,0,{200 + t % 7}\n" for t in times.tolist())
    (folder / "power_samples.csv").write_text(
        "timestamp_ns,domain,device_id,power_watts\n" + rows, encoding="utf-8"
    )


def _peak_bytes(folder: Path) -> int:
    tracemalloc.start()
    try:
        result = attribute_streamed(folder, min_bytes=0, block_bytes=1 << 15)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result is not None
    assert sum(r.calls for r in result.regions) > 0
    return peak


@pytest.mark.parametrize("seed", [0, 1])
def test_memory_does_not_grow_with_the_number_of_events(seed: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(seed)
    _kernel_trace(tmp_path / "small", 2_000, rng)
    _kernel_trace(tmp_path / "large", 20_000, rng)
    small, large = _peak_bytes(tmp_path / "small"), _peak_bytes(tmp_path / "large")
    # Ten times the events (20 000 against 200 000): whole, the memory would be 10×.
    assert large < 1.5 * small, (small, large)
