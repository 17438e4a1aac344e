"""Bad traces get one-line errors naming the file, the line and what to fix."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from eopt.cli import attribute as attribute_cli
from eopt.model.trace import TraceError
from eopt.model.trace_io import read_trace

EVENTS = "id,parent_id,name,category,start_ns,end_ns\n"
POWER = "timestamp_ns,domain,device_id,power_watts\n"
GOOD_POWER = POWER + "".join(f"{t}000000000,GPU,0,100\n" for t in range(10))
GOOD_EVENTS = EVENTS + "1,0,outer,USER_REGION,1000000000,8000000000\n"


def make(tmp_path, events: str = GOOD_EVENTS, power: str = GOOD_POWER):
    folder = tmp_path / "trace"
    folder.mkdir()
    (folder / "events.csv").write_text(events)
    (folder / "power_samples.csv").write_text(power)
    return folder


CASES = {
    "unsorted timestamps": (
        GOOD_EVENTS,
        POWER + "0,GPU,0,100\n2000000000,GPU,0,100\n1000000000,GPU,0,100\n",
        r"power_samples\.csv:4: timestamp 1000000000 of GPU 0 is earlier than the one on line 3",
    ),
    "duplicated timestamps": (
        GOOD_EVENTS,
        POWER + "0,GPU,0,100\n1000000000,GPU,0,100\n1000000000,GPU,0,120\n",
        r"power_samples\.csv:4: timestamp 1000000000 of GPU 0 duplicates",
    ),
    "end before start": (
        EVENTS + "1,0,outer,USER_REGION,5000000000,4000000000\n",
        GOOD_POWER,
        r"events\.csv:2: event 'outer' ends \(4000000000 ns\) before it starts",
    ),
    "child outside its parent": (
        GOOD_EVENTS + "2,1,inner,PARALLEL_FOR,7000000000,9000000000\n",
        GOOD_POWER,
        r"events\.csv:3: event 'inner' .* lies outside its parent 'outer'",
    ),
    "non-finite power": (
        GOOD_EVENTS,
        POWER + "0,GPU,0,100\n1000000000,GPU,0,nan\n",
        r"power_samples\.csv:3: power_watts is 'nan'; power must be a finite number",
    ),
    "unknown parent id": (
        GOOD_EVENTS + "2,7,inner,PARALLEL_FOR,2000000000,3000000000\n",
        GOOD_POWER,
        r"events\.csv:3: event 'inner' names parent_id 7, which is not an event id",
    ),
    "missing column": (
        "id,parent,name,category,start_ns,end_ns\n",
        GOOD_POWER,
        r"events\.csv:1: missing column\(s\) parent_id",
    ),
    "text where a number belongs": (
        EVENTS + "1,0,outer,USER_REGION,soon,8000000000\n",
        GOOD_POWER,
        r"events\.csv:2: start_ns is 'soon'; expected an integer",
    ),
    "a line cut short": (
        GOOD_EVENTS + "2,1,inner\n",
        GOOD_POWER,
        r"events\.csv:3: 3 fields where the header has 6",
    ),
    "one sample only": (
        GOOD_EVENTS,
        POWER + "0,GPU,0,100\n",
        r"GPU 0 has 1 power sample\(s\); at least 2",
    ),
    "duplicated event id": (
        GOOD_EVENTS + "1,0,again,USER_REGION,1000000000,2000000000\n",
        GOOD_POWER,
        r"events\.csv:3: event id 1 is used twice",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_trace_error_names_file_and_line(tmp_path, case: str) -> None:
    events, power, message = CASES[case]
    folder = make(tmp_path, events, power)
    with pytest.raises(TraceError, match=message):
        read_trace(folder)
    result = CliRunner().invoke(attribute_cli.command, [str(folder)])
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_utf8_bom_header_is_accepted_and_binary_is_named(tmp_path) -> None:
    folder = make(tmp_path, "\ufeff" + GOOD_EVENTS)
    assert read_trace(folder).events[0].name == "outer"
    (folder / "events.csv").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(TraceError, match=r"events\.csv:1: not UTF-8 text"):
        read_trace(folder)


def test_a_folder_of_many_raw_runs_names_one_and_suggests_compare(data_file) -> None:
    folder = data_file("kokkos_dbscan_h100/fdbscan")
    with pytest.raises(TraceError, match=r"holds 34 runs .*eopt compare"):
        read_trace(folder)


def test_no_trace_here(tmp_path) -> None:
    with pytest.raises(TraceError, match="no trace here"):
        read_trace(tmp_path)
    with pytest.raises(TraceError, match="no such file or folder"):
        read_trace(tmp_path / "missing")
