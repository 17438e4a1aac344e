"""The column-wise readers of events.csv, power_samples.csv and nvidia-smi CSVs read what
the line-by-line readers read, value for value, and leave every file they cannot read
exactly (or that holds a fault) to those readers, whose messages stay the same."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import numpy as np
import pytest

from eopt.model import trace_io
from eopt.model.trace import NO_DEVICE, Event, EventTable, TraceError
from eopt.model.trace_io import read_event_table, read_traces

HEADER = "id,parent_id,name,category,start_ns,end_ns"


def slow_events(path: Path) -> tuple[Event, ...]:
    return tuple(trace_io._read_events_csv(path))


def fast_table(path: Path) -> EventTable | None:
    return trace_io._event_columns(path.read_bytes(), path)


def random_events_csv(path: Path, seed: int) -> None:
    """Nested events with names of every length from 1 to 40 bytes, some not ASCII,
    ids of 1 to 19 digits and times up to 2**63 − 1; a device column half the time."""
    rng = random.Random(seed)
    devices = rng.random() < 0.5
    lines = [HEADER + (",device_id" if devices else "")]
    ids = rng.sample(range(1, 10 ** rng.randint(3, 18)), 300)
    base = rng.choice([0, 1_700_000_000_000_000_000, 2**63 - 10**12])
    for k, i in enumerate(ids):
        parent = ids[rng.randrange(k)] if k and rng.random() < 0.6 else 0
        length = rng.randint(1, 40)
        name = "".join(rng.choice("abcXYZ_:<>é0123 ") for _ in range(length)).strip() or "n"
        a = base + rng.randint(0, 10**9)
        row = f"{i},{parent},{name},{rng.choice(['USER_REGION', 'parallel_for', 'Deep_Copy'])},"
        row += f"{a},{a}"
        if devices:
            row += "," + rng.choice(["", "0", "1", "17"])
        lines.append(row)
    end = "\n" if rng.random() < 0.7 else ""
    path.write_text("\n".join(lines) + end, encoding="utf-8")


@pytest.mark.parametrize("seed", range(12))
def test_events_read_column_wise_equal_the_line_by_line_reader(tmp_path: Path, seed: int):
    path = tmp_path / "events.csv"
    random_events_csv(path, seed)
    table = fast_table(path)
    assert table is not None
    slow = slow_events(path)
    assert tuple(table) == slow
    assert [e.where for e in table] == [e.where for e in slow]
    assert [e.device_id for e in table] == [e.device_id for e in slow]
    # A name is one code: as many distinct codes as distinct names.
    assert len(set(table.name_codes.tolist())) == len({e.name for e in slow})


@pytest.mark.parametrize(
    "body",
    [
        '1,0,"a, quoted name",USER_REGION,1,2\n',  # quotes: csv's rules
        "1,0,a,USER_REGION,1,2\r\n",  # CR LF
        "1,0, padded ,USER_REGION,1,2\n",  # white space the reader strips
        "1,0,a,USER_REGION,1,2\n\n2,0,b,USER_REGION,1,2\n",  # a blank line
        "1,0,a,USER_REGION,1.0,2\n",  # an integer written as a float
        "1,0,a,USER_REGION,+1,2\n",  # a sign
    ],
)
def test_files_the_column_reader_leaves_to_the_line_reader(tmp_path: Path, body: str):
    path = tmp_path / "events.csv"
    path.write_text(HEADER + "\n" + body, encoding="utf-8")
    assert fast_table(path) is None
    assert tuple(read_event_table(path)) == slow_events(path)  # read all the same


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("1,0,a,USER_REGION,5,2\n", "events.csv:2: event 'a' ends"),
        (
            "1,0,a,USER_REGION,1,2\n1,0,b,USER_REGION,1,2\n",
            "events.csv:3: event id 1 is used twice",
        ),
        ("1,9,a,USER_REGION,1,2\n", "events.csv:2: event 'a' names parent_id 9"),
        ("1,0,a,USER_REGION,1,99999999999999999999\n", "events.csv:2: end_ns is 999"),
        ("1,0,a,,1,2\n", "events.csv:2: empty category"),
        ("1,0,a,USER_REGION,1\n", "events.csv:2: 5 fields where the header has 6"),
        ("2,0,a,USER_REGION,1,9\n1,0,b,USER_REGION,5,12\n3,1,c,USER_REGION,6,7\n", None),
    ],
)
def test_faults_keep_the_line_readers_message(tmp_path: Path, body: str, message: str | None):
    (tmp_path / "events.csv").write_text(HEADER + "\n" + body, encoding="utf-8")
    (tmp_path / "power_samples.csv").write_text(
        "timestamp_ns,domain,device_id,power_watts\n0,GPU,0,10\n100,GPU,0,10\n", encoding="utf-8"
    )
    if message is None:  # c lies inside b, b overlaps a: valid, read as written
        assert [e.name for e in read_traces(tmp_path)[0].events] == ["a", "b", "c"]
        return
    with pytest.raises(TraceError, match=message.replace("(", r"\(")):
        read_traces(tmp_path)


def test_a_child_outside_its_parent_is_named(tmp_path: Path):
    (tmp_path / "events.csv").write_text(
        HEADER + "\n1,0,a,USER_REGION,10,20\n2,1,b,USER_REGION,5,15\n", encoding="utf-8"
    )
    (tmp_path / "power_samples.csv").write_text(
        "timestamp_ns,domain,device_id,power_watts\n0,GPU,0,10\n100,GPU,0,10\n", encoding="utf-8"
    )
    with pytest.raises(TraceError, match=r"events.csv:3: event 'b' \[5, 15\] ns lies outside"):
        read_traces(tmp_path)


def slow_power(path: Path) -> list:
    """The line-by-line power reader (the column reader switched off)."""
    original = trace_io._power_columns
    trace_io._power_columns = lambda raw, path: None  # type: ignore[assignment]
    try:
        return trace_io._read_power_samples(path)
    finally:
        trace_io._power_columns = original


@pytest.mark.parametrize("seed", range(6))
def test_power_samples_read_column_wise_equal_the_line_reader(tmp_path: Path, seed: int):
    rng = np.random.default_rng(seed)
    path = tmp_path / "power_samples.csv"
    rows = ["timestamp_ns,domain,device_id,power_watts"]
    t = 1_700_000_000_000_000_000
    for _ in range(500):
        t += int(rng.integers(1, 10**8))
        watts = rng.choice([f"{rng.uniform(0, 900):.6f}", f"{rng.integers(0, 900)}", ".5", "12."])
        rows.append(f"{t},{rng.choice(['GPU', 'gpu', 'CPU_PKG'])},{rng.integers(0, 3)},{watts}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    fast = trace_io._power_columns(path.read_bytes(), path)
    assert fast is not None
    slow = slow_power(path)
    assert [s.label for s in fast] == [s.label for s in slow]
    for a, b in zip(fast, slow, strict=True):
        assert np.array_equal(a.times_ns, b.times_ns)
        assert np.array_equal(a.power_w, b.power_w)  # the same doubles, not merely close


def test_power_faults_keep_the_line_readers_message(tmp_path: Path):
    path = tmp_path / "power_samples.csv"
    path.write_text(
        "timestamp_ns,domain,device_id,power_watts\n5,GPU,0,1\n5,GPU,0,2\n", encoding="utf-8"
    )
    assert trace_io._power_columns(path.read_bytes(), path) is None
    with pytest.raises(TraceError, match=r"power_samples.csv:3: timestamp 5 of GPU 0 duplicates"):
        trace_io._read_power_samples(path)


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Kolkata"])
def test_nvidia_smi_csv_read_column_wise_equals_the_line_reader(tmp_path: Path, zone: str):
    rng = random.Random(zone)
    start = dt.datetime(2024, 3, 9, 21, 0, 0)  # a day before New York's clocks change
    lines = ["index, timestamp, power.draw [W]"]
    for k in range(2000):
        stamp = start + dt.timedelta(milliseconds=20 * k + rng.randint(0, 3))
        text = stamp.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        lines.append(f"{k % 2}, {text}, {rng.uniform(50, 700):.2f} W")
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    opts = trace_io.PowerCsvOptions(tz=zone)
    fast = read_traces(path, opts)[0]
    original = trace_io._smi_columns
    trace_io._smi_columns = lambda *args: None  # type: ignore[assignment]
    try:
        slow = read_traces(path, opts)[0]
    finally:
        trace_io._smi_columns = original
    assert trace_io._PlainCsv.parse(path.read_bytes()) is not None
    assert [s.label for s in fast.series] == [s.label for s in slow.series] == ["GPU 0", "GPU 1"]
    for a, b in zip(fast.series, slow.series, strict=True):
        assert np.array_equal(a.times_ns, b.times_ns)
        assert np.array_equal(a.power_w, b.power_w)
    assert fast.metadata == slow.metadata


def test_an_impossible_date_keeps_the_line_readers_message(tmp_path: Path):
    path = tmp_path / "smi.csv"
    path.write_text(
        "timestamp, power.draw [W]\n2024/05/01 12:00:00.000, 10 W\n2024/02/30 12:00:00.020, 10 W\n",
        encoding="utf-8",
    )
    with pytest.raises(TraceError, match=r"smi.csv:3: time '2024/02/30 12:00:00.020' is not"):
        read_traces(path, trace_io.PowerCsvOptions(tz="UTC"))


def test_events_without_a_device_read_as_none(tmp_path: Path):
    path = tmp_path / "events.csv"
    path.write_text(HEADER + ",device_id\n1,0,a,USER_REGION,1,2,\n2,0,b,USER_REGION,1,2,3\n")
    table = fast_table(path)
    assert table is not None
    assert table.device_ids.tolist() == [NO_DEVICE, 3]
    assert [e.device_id for e in table] == [None, 3]
