"""Perfetto trace structure and energy; matplotlib frontier plots; trace/report CLI."""

from __future__ import annotations

import itertools
import json
import xml.etree.ElementTree as ET

import pytest

from eopt.calculus.frontier import Frontier
from eopt.cli import main
from eopt.model.operating_point import OperatingPoint
from eopt.model.schedule import write_schedule
from eopt.model.signature import Signature
from eopt.report import (
    Measurement,
    Region,
    plot_frontier,
    predicted_power,
    read_frontier_csv,
    schedule_trace,
)


def _validate_trace(trace: dict) -> list[dict]:
    """Check the Trace Event Format structure; returns the events."""
    assert set(trace) >= {"traceEvents"}
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    json.dumps(trace, allow_nan=False)  # strict JSON: no NaN/Infinity
    for ev in events:
        assert ev["ph"] in ("X", "C", "M"), ev
        assert isinstance(ev["pid"], int) and isinstance(ev["name"], str)
        if ev["ph"] == "X":
            assert isinstance(ev["tid"], int)
            assert ev["ts"] >= 0 and ev["dur"] >= 0
        elif ev["ph"] == "C":
            assert ev["ts"] >= 0
            assert ev["args"] and all(isinstance(v, (int, float)) for v in ev["args"].values())
        else:
            assert ev["name"] in ("process_name", "thread_name", "process_sort_index")
    return events


def test_schedule_trace_has_one_event_per_element_in_microseconds(schedule):
    events = _validate_trace(schedule_trace(schedule))
    xs = [e for e in events if e["ph"] == "X"]
    assert sorted(e["name"] for e in xs) == sorted(e.name for e in schedule.elements)
    by_name = {e.name: e for e in schedule.elements}
    for ev in xs:
        el = by_name[ev["name"]]
        assert ev["ts"] == pytest.approx(el.start * 1e6)
        assert ev["dur"] == pytest.approx(el.duration * 1e6)
    # Each device is a process with a name; its elements share its pid.
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert set(names.values()) == {"stage0 (GPU 0)", "stage1 (GPU 1)"}
    for ev in xs:
        assert names[ev["pid"]].startswith(by_name[ev["name"]].device)
    threads = [e for e in events if e["name"] == "thread_name"]
    assert len(threads) == 2


def test_power_counter_integrates_to_the_schedule_energy(schedule):
    """∫ predicted power dt over the makespan, summed over devices, is the predicted
    energy: Σ element energies + idle (an independent check of the counter track)."""
    events = _validate_trace(schedule_trace(schedule))
    total = 0.0
    for pid in {e["pid"] for e in events if e["ph"] == "C"}:
        steps = sorted(
            (e["ts"] / 1e6, e["args"]["W"])
            for e in events
            if e["ph"] == "C" and e["pid"] == pid and e["name"] == "predicted power (W)"
        )
        total += sum(w * (t1 - t0) for (t0, w), (t1, _) in itertools.pairwise(steps))
    assert total == pytest.approx(schedule.energy, rel=1e-9)
    assert predicted_power(schedule, "stage1")[0] == (0.0, 60.0)  # idle until 0.10 s


def test_measurement_trace_has_power_counters_and_timed_regions():
    m = Measurement(
        total_energy_j=10.0,
        total_time_s=1.0,
        regions=(Region("fwd", 4.0, 0.4),),
        samples=((0.0, 50.0), (0.5, 60.0), (1.0, 55.0)),
        meta={"events": [{"name": "fwd", "start_s": 0.1, "end_s": 0.5}]},
    )
    events = _validate_trace(schedule_trace(measurement=m))
    assert [e["args"]["W"] for e in events if e["ph"] == "C"] == [50.0, 60.0, 55.0]
    (region,) = [e for e in events if e["ph"] == "X"]
    assert region["ts"] == pytest.approx(1e5) and region["dur"] == pytest.approx(4e5)


def test_plot_frontier_writes_png_and_svg(tmp_path):
    sigs = [
        Signature(
            "gemm",
            80.0,
            t,
            d,
            var_time=1e-8,
            var_energy=0.02,
            op_point=OperatingPoint(sm_clock_mhz=c),
        )
        for c, t, d in [
            (1410, 1.0, 200.0),
            (1200, 1.1, 170.0),
            (1005, 1.3, 160.0),
            (810, 1.6, 200.0),
        ]
    ]
    front = Frontier.from_signatures(sigs)
    png = plot_frontier(front, tmp_path / "f.png", chosen=(1.1, 258.0))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    svg = plot_frontier(front, tmp_path / "f.svg", time_unit="ms")
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    with pytest.raises(ValueError, match=r"\.png, \.svg or \.pdf"):
        plot_frontier(front, tmp_path / "f.gif")
    csv = tmp_path / "f.csv"
    csv.write_text("makespan_s,energy_j\n1,10\n2,8\n")
    assert plot_frontier(read_frontier_csv(csv), tmp_path / "rows.png").exists()


def test_trace_and_report_commands(schedule, tmp_path, capsys):
    path = tmp_path / "s.json"
    write_schedule(path, schedule)
    main(["trace", str(path), "-o", str(tmp_path / "t.json")])
    _validate_trace(json.loads((tmp_path / "t.json").read_text()))
    main(
        [
            "report",
            "--schedule",
            str(path),
            "--perfetto",
            str(tmp_path / "p.json"),
            "-o",
            str(tmp_path / "r.html"),
        ]
    )
    assert "<svg" in (tmp_path / "r.html").read_text()
    _validate_trace(json.loads((tmp_path / "p.json").read_text()))
    with pytest.raises(SystemExit) as exc:
        main(["report", "-o", str(tmp_path / "x.html")])
    assert exc.value.code == 1
    assert "nothing to report" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["report", "--schedule", str(tmp_path / "missing.json")])
    assert "missing.json: no such schedule file" in " ".join(capsys.readouterr().err.split())
