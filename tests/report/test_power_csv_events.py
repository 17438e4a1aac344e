"""`eopt report` and `eopt trace` read a power CSV with its events file, as `eopt
attribute` does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.handoff.runner import run_eopt

S = 1_000_000_000  # ns


def _power_csv(folder: Path) -> tuple[Path, Path]:
    """100 W for 5 s, then 200 W; a region 'solve' over seconds 6–8 (400 J)."""
    lines = ["time_s,power_w"] + [f"{k},{100 if k < 5 else 200}" for k in range(11)]
    power = folder / "power.csv"
    power.write_text("\n".join(lines) + "\n")
    events = folder / "events.csv"
    events.write_text(
        f"id,parent_id,name,category,start_ns,end_ns\n1,0,solve,USER_REGION,{6 * S},{8 * S}\n"
    )
    return power, events


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_report_takes_events(here: Path) -> None:
    power, events = _power_csv(here)
    args = ("--measurement", power, "--time-unit", "s", "--events", events)
    assert run_eopt("report", *args, "-o", "r.html") == 0
    html = (here / "r.html").read_text()
    assert "solve" in html
    # The same numbers as `eopt attribute` gives the region.
    assert run_eopt("attribute", power, "--time-unit", "s", "--events", events,
                    "-o", "a.json", "-q") == 0  # fmt: skip
    region = next(r for r in json.loads((here / "a.json").read_text())["regions"])
    assert region["name"] == "solve" and region["inclusive_energy_j"] == pytest.approx(400.0)
    assert "400" in html


def test_report_without_events_has_no_region(here: Path) -> None:
    power, _ = _power_csv(here)
    assert run_eopt("report", "--measurement", power, "--time-unit", "s", "-o", "r.html") == 0
    assert "solve" not in (here / "r.html").read_text()


def test_trace_takes_events(here: Path) -> None:
    power, events = _power_csv(here)
    args = (power, "--time-unit", "s", "--events", events, "-o", "t.json")
    assert run_eopt("trace", *args) == 0
    trace = json.loads((here / "t.json").read_text())
    items = trace["traceEvents"] if isinstance(trace, dict) else trace
    slices = [e for e in items if e.get("ph") == "X" and e.get("name") == "solve"]
    assert len(slices) == 1
    assert slices[0]["dur"] == pytest.approx(2e6)  # µs


def test_events_without_a_power_csv_is_one_line(here: Path, capsys) -> None:
    _, events = _power_csv(here)
    capsys.readouterr()
    assert run_eopt("report", "--events", events, "--schedule", "x.json") != 0
    err = capsys.readouterr().err
    assert "--events" in err and "--measurement" in err and "Traceback" not in err
