"""Files people have: power CSVs of other tools read with the right units, zones and limits.

Each case is a file a user really has (nvidia-smi's local date-times, milliwatt headers as
people write them, a sensor glitch, a stray timestamp), read through the public reader.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from eopt.attribute.engine import attribute
from eopt.model.trace import TraceError, TraceWarning
from eopt.model.trace_io import PowerCsvOptions, header_power_unit, read_trace


@pytest.fixture
def zone(monkeypatch):
    """Set the process's local time zone ($TZ) for one test, and put it back."""

    def set_zone(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


def _smi_csv(path: Path, start: dt.datetime, seconds: int = 11) -> Path:
    """nvidia-smi --query-gpu=timestamp,power.draw --format=csv: local wall-clock times."""
    lines = ["timestamp, power.draw [W]"]
    for k in range(seconds):
        stamp = (start + dt.timedelta(seconds=k)).strftime("%Y/%m/%d %H:%M:%S.000")
        lines.append(f"{stamp}, {100 + 10 * (k >= 5):.2f} W")
    path.write_text("\n".join(lines) + "\n")
    return path


def _events(path: Path, start_ns: int, length_s: float) -> Path:
    path.write_text(
        "id,parent_id,name,category,start_ns,end_ns\n"
        f"1,0,step,USER_REGION,{start_ns},{start_ns + round(length_s * 1e9)}\n"
    )
    return path


@pytest.mark.parametrize("tz", ["America/New_York", "Asia/Kolkata", "UTC"])
def test_nvidia_smi_times_are_local_time(tmp_path, zone, tz):
    """The events (epoch ns) land on the samples when the CSV's wall clock is $TZ's."""
    zone(tz)
    wall = dt.datetime(2026, 12, 1, 10, 0, 0)
    smi = _smi_csv(tmp_path / "smi.csv", wall)
    epoch = wall.replace(tzinfo=dt.datetime.now().astimezone().tzinfo)
    start_ns = round(dt.datetime(2026, 12, 1, 10, 0, 2).astimezone().timestamp() * 1e9)
    assert abs(start_ns - round((epoch.timestamp() + 2) * 1e9)) < 10**6
    events = _events(tmp_path / "events.csv", start_ns, 2.0)
    trace = read_trace(smi, PowerCsvOptions(events=str(events)))
    result = attribute(trace)
    step = next(r for r in result.regions if r.name == "step")
    assert step.inclusive_energy_j == pytest.approx(200.0)  # 2 s at 100 W, inside the samples
    assert result.total_time_s == pytest.approx(10.0)
    assert tz in trace.metadata["time_zone"]


def test_an_explicit_zone_overrides_the_local_one(tmp_path, zone):
    zone("America/New_York")
    wall = dt.datetime(2026, 12, 1, 10, 0, 0)
    smi = _smi_csv(tmp_path / "smi.csv", wall)
    utc_ns = round(dt.datetime(2026, 12, 1, 10, 0, 0, tzinfo=dt.timezone.utc).timestamp() * 1e9)
    trace = read_trace(smi, PowerCsvOptions(tz="UTC"))
    assert int(trace.series[0].times_ns[0]) == utc_ns
    local = read_trace(smi)
    # New York is 5 hours behind UTC in December: the same wall clock is 5 h later.
    assert int(local.series[0].times_ns[0]) - utc_ns == 5 * 3600 * 10**9
    assert trace.metadata["time_zone"] == "UTC"
    with pytest.raises(TraceError, match="IANA zone"):
        read_trace(smi, PowerCsvOptions(tz="Mars/Olympus"))


@pytest.mark.parametrize(
    "header",
    ["power_mW", "power (mW)", "power_draw_mw", "power [mW]", "power.draw [mW]", "power-mw"],
)
def test_milliwatt_headers_are_read_as_milliwatts(tmp_path, header):
    path = tmp_path / "p.csv"
    path.write_text(f"time_s,{header}\n" + "".join(f"{t},250000\n" for t in range(11)))
    trace = read_trace(path)
    assert float(trace.series[0].power_w.max()) == pytest.approx(250.0)
    assert attribute(trace).total_energy_j == pytest.approx(2500.0)  # 10 s at 250 W


@pytest.mark.parametrize(
    ("header", "unit"),
    [
        ("power_W", "w"),
        ("power_watts", "watts"),
        ("Power (W)", "w"),
        ("power.draw [W]", "w"),
        ("power_kw", "kw"),
        ("power", None),
        ("power_draw", None),
        ("DCGM_FI_DEV_POWER_USAGE", None),
    ],
)
def test_header_units(header, unit):
    assert header_power_unit(header) == unit


def test_a_power_column_without_a_unit_is_refused_naming_the_option(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("time_s,power\n" + "".join(f"{t},250\n" for t in range(11)))
    with pytest.raises(TraceError, match=r"p\.csv:2: .*--power-unit"):
        read_trace(path)
    trace = read_trace(path, PowerCsvOptions(power_unit="mW"))
    assert float(trace.series[0].power_w[0]) == pytest.approx(0.25)
    with pytest.raises(TraceError, match="says mw, but --power-unit says W"):
        read_trace(_mw(tmp_path), PowerCsvOptions(power_unit="W"))


def _mw(tmp_path: Path) -> Path:
    path = tmp_path / "mw.csv"
    path.write_text("time_s,power_mW\n" + "".join(f"{t},250000\n" for t in range(11)))
    return path


def test_a_negative_reading_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "p.csv"
    rows = [f"{t},{-130 if t == 4 else 200}\n" for t in range(11)]
    path.write_text("time_s,power_W\n" + "".join(rows))
    with pytest.raises(TraceError, match=r"p\.csv:6: power -130 W is negative"):
        read_trace(path)


def test_a_stray_timestamp_is_refused_not_integrated(tmp_path):
    """One sample at 9.2e18 ns would integrate into terajoules."""
    path = tmp_path / "p.csv"
    rows = [f"{t * 10**9},200\n" for t in range(10)] + ["9200000000000000000,200\n"]
    path.write_text("time_ns,power_W\n" + "".join(rows))
    with pytest.raises(TraceError, match=r"p\.csv:12: .*days after the one before it"):
        read_trace(path)


def test_a_timestamp_beyond_64_bits_is_one_line(tmp_path):
    path = tmp_path / "p.csv"
    rows = [f"{t * 10**9},200\n" for t in range(10)] + [f"{2**64},200\n"]
    path.write_text("time_ns,power_W\n" + "".join(rows))
    with pytest.raises(TraceError, match=r"p\.csv:12: .*64-bit"):
        read_trace(path)
    folder = tmp_path / "dash"
    folder.mkdir()
    (folder / "power_samples.csv").write_text(
        f"timestamp_ns,domain,device_id,power_watts\n0,GPU,0,100\n{2**63},GPU,0,100\n"
    )
    (folder / "events.csv").write_text("id,parent_id,name,category,start_ns,end_ns\n")
    with pytest.raises(TraceError, match=r"power_samples\.csv:3: timestamp_ns .*64-bit"):
        read_trace(folder)


def test_implausible_power_warns_once_naming_the_place(tmp_path):
    path = tmp_path / "p.csv"
    rows = [f"{t},{266000 if t > 2 else 200}\n" for t in range(11)]
    path.write_text("time_s,power_W\n" + "".join(rows))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = read_trace(path)
    said = [w for w in caught if issubclass(w.category, TraceWarning)]
    assert len(said) == 1
    assert "p.csv:5" in str(said[0].message) and "8 such reading" in str(said[0].message)
    assert float(np.max(trace.series[0].power_w)) == 266000.0  # warned, not altered


def test_plausible_files_say_nothing(tmp_path, zone):
    zone("UTC")
    smi = _smi_csv(tmp_path / "smi.csv", dt.datetime(2026, 12, 1, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_trace(smi)
    assert os.environ["TZ"] == "UTC"


def test_an_epoch_timestamp_column_is_told_its_unit_option(tmp_path):
    path = tmp_path / "p.csv"
    rows = [f"{1_700_000_000 + t}.25,200\n" for t in range(11)]
    path.write_text("timestamp,power_W\n" + "".join(rows))
    with pytest.raises(TraceError, match=r"p\.csv:2: .* is a number.*--time-unit s"):
        read_trace(path)
    trace = read_trace(path, PowerCsvOptions(time_unit="s"))
    assert int(trace.series[0].times_ns[0]) == 1_700_000_000_250_000_000


def test_binary_json_is_called_json_with_its_line(tmp_path):
    path = tmp_path / "run.json"
    path.write_bytes(b'{"schema": "eopt.regions-report/1",\n "name": "\xff\xfe"}\n')
    with pytest.raises(TraceError, match=r"run\.json:2: not UTF-8 text .*UTF-8 JSON$"):
        read_trace(path)


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    from eopt.cli import main

    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_attribute_takes_the_power_unit_and_the_zone(tmp_path, capsys, zone):
    zone("America/New_York")
    path = tmp_path / "p.csv"
    path.write_text("time_s,power\n" + "".join(f"{t},250000\n" for t in range(11)))
    code, _, err = _cli(["attribute", str(path)], capsys)
    assert code == 1 and "--power-unit" in err
    code, out, err = _cli(["attribute", str(path), "--power-unit", "mW", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["total_energy_j"] == pytest.approx(2500.0)
    smi = _smi_csv(tmp_path / "smi.csv", dt.datetime(2026, 12, 1, 10))
    code, out, err = _cli(["attribute", str(smi), "--json"], capsys)
    assert code == 0 and "read as America/New_York" in err and json.loads(out)
    code, _, err = _cli(["attribute", str(smi), "--tz", "UTC"], capsys)
    assert code == 0 and "read as UTC" in err


def test_implausible_power_is_one_warning_line_on_the_cli(tmp_path, capsys):
    path = tmp_path / "p.csv"
    path.write_text("time_s,power_W\n" + "".join(f"{t},{9000 if t else 100}\n" for t in range(5)))
    code, _, err = _cli(["attribute", str(path)], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 0 and len(lines) == 1, err
    assert lines[0].startswith("warning: ") and "p.csv:3" in lines[0]
