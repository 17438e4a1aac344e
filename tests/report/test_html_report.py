"""The HTML report: structure, escaping, offline-ness, breakdown numbers, inputs."""

from __future__ import annotations

import dataclasses
import json
import re
from html.parser import HTMLParser

import pytest

from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature
from eopt.report import (
    ReportInputError,
    baseline_of,
    energy_breakdown,
    read_frontier_csv,
    read_measurement,
    render_report,
)


class _Collector(HTMLParser):
    """Collects tags with their attributes and the text, and checks nesting."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.stack: list[str] = []
        self.text: list[str] = []
        self.void = {"meta", "br", "img", "link", "input", "hr"}
        self.svg_void = {"line", "circle", "rect", "path", "polyline"}

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.void:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def _parse(document: str) -> _Collector:
    parser = _Collector()
    parser.feed(document)
    parser.close()
    assert parser.stack == [], f"unclosed tags: {parser.stack}"
    return parser


def test_schedule_report_has_gantt_bars_legend_and_idle(schedule):
    page = render_report(schedule=schedule)
    doc = _parse(page)
    svgs = [a for t, a in doc.tags if t == "svg"]
    labels = [a.get("aria-label") for a in svgs]
    assert "Schedule per device" in labels and "Plan time–energy frontier" in labels
    # One bar per element, one idle band per device; bars coloured by clock.
    bars = [a for t, a in doc.tags if t == "rect" and a.get("class") == "element"]
    assert len(bars) == len(schedule.elements)
    colours = {a["fill"] for a in bars}
    assert len(colours) == 3  # 1410, 1200, 1005 MHz
    assert len([a for t, a in doc.tags if t == "rect" and a.get("class") == "idle"]) == 2
    text = " ".join(doc.text)
    for clock in ("1410 MHz", "1200 MHz", "1005 MHz", "idle"):
        assert clock in text  # legend
    assert "idle 45%" in text  # stage0 idle 0.18 s of 0.40 s
    assert "<script" not in page.lower()


def test_report_requests_nothing_from_the_network(schedule, tmp_path):
    csv = tmp_path / "f.csv"
    csv.write_text(
        "makespan_s,energy_j,lower_bound_j,gap,status\n0.38,150,149,0.001,optimal\n"
        "0.40,139.8,138,0.01,optimal\n0.5,135,134,0.01,optimal\n"
    )
    page = render_report(schedule=schedule, frontier=read_frontier_csv(csv))
    doc = _parse(page)
    for _, attrs in doc.tags:
        for key in ("src", "href", "xlink:href", "action"):
            value = attrs.get(key)
            assert value is None or not re.match(r"\s*(https?:)?//", value), (key, value)
    assert "@import" not in page and "url(http" not in page


def test_text_from_inputs_is_escaped(schedule):
    evil = dataclasses.replace(
        schedule.elements[0], name='<script>alert("x")</script>', type="<b>t</b>"
    )
    sch = dataclasses.replace(schedule, elements=(evil, *schedule.elements[1:]))
    page = render_report(schedule=sch, title="<i>title</i>")
    assert "<script>" not in page and "<b>t</b>" not in page and "<i>title</i>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    _parse(page)


def test_breakdown_adds_up_to_the_independent_total(schedule):
    b = energy_breakdown(schedule)
    # Hand-computed from the fixture: dynamic = (P − 100 W)·T per element.
    assert b.dynamic_by_type == pytest.approx(
        {"stage0.forward": 38.0, "stage1.forward": 20.0, "stage1.backward": 15.0}
    )
    assert b.static_busy_j == pytest.approx(120.0 - 73.0)
    assert b.idle_j == pytest.approx(60 * 0.18 + 60 * 0.15)
    assert b.total_j == pytest.approx(schedule.energy)
    assert b.static_over_makespan_j == pytest.approx(47.0 + 19.8)
    base = baseline_of(schedule)
    assert base is not None
    assert base.saved_j == pytest.approx(150.0 - 139.8)
    assert base.saved_fraction == pytest.approx(10.2 / 150.0)
    assert base.time_added_s == pytest.approx(0.02)
    page = render_report(schedule=schedule)
    assert "10.2 J (6.8%)" in page  # the savings card


def test_frontier_plot_marks_bars_bound_chosen_and_baseline(schedule, tmp_path):
    csv = tmp_path / "f.csv"
    csv.write_text(
        "makespan_s,energy_j,energy_std_j,lower_bound_j,status\n"
        "0.38,150,1,149,optimal\n0.40,139.8,1,138,optimal\n0.5,135,1,134,optimal\n"
    )
    rows = read_frontier_csv(csv)
    assert rows[0].low_j == pytest.approx(150 - 1.96) and rows[0].high_j == pytest.approx(151.96)
    doc = _parse(render_report(schedule=schedule, frontier=rows))
    classes = [a.get("class", "") for t, a in doc.tags if t in ("circle", "rect", "polyline")]
    assert classes.count("pt frontier") == 3 + 1  # three points + the legend swatch
    assert "pt chosen" in classes and "pt baseline" in classes and "bound-line" in classes
    assert sum(1 for t, a in doc.tags if t == "g" and "errbar" in (a.get("class") or "")) == 4


def test_element_frontiers_from_a_library_mark_dominated_and_used_cells(schedule):
    lib = []
    for clock, t, d in [(1410, 0.10, 20.0), (1200, 0.12, 18.0), (1005, 0.15, 17.5), (810, 0.2, 30)]:
        lib.append(
            Signature(
                "stage0.forward",
                100.0,
                t,
                d,
                var_time=1e-8,
                var_energy=0.01,
                impl="cublas",
                op_point=OperatingPoint(sm_clock_mhz=clock),
            )
        )
    doc = _parse(render_report(schedule=schedule, library=lib))
    classes = [a.get("class", "") for t, a in doc.tags if t == "circle"]
    assert "pt dominated" in classes  # 810 MHz: slower and costlier than 1005 MHz
    assert classes.count("pt chosen") >= 2  # 1410 and 1200 are used by the schedule


def test_measurement_section_lists_regions_outside_energy_and_trace(tmp_path):
    data = {
        "total": {"energy_j": 100.0, "time_s": 2.0},
        "regions": [
            {"name": "forward", "energy_j": 40.0, "time_s": 0.5, "calls": 8},
            {"name": "backward", "energy_j": 50.0, "time_s": 1.0, "calls": 8},
        ],
        "outside_energy_j": 10.0,
        "samples": [[10.0 + 0.1 * i, 50.0 + i] for i in range(21)],
    }
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    m = read_measurement(path)
    assert m.samples[0] == (0.0, 50.0)  # times from the run's start
    page = render_report(measurement=m)
    doc = _parse(page)
    text = " ".join(doc.text)
    assert "forward" in text and "80" in text  # 40 J / 0.5 s = 80 W mean power
    assert "40.0%" in text and "outside every region" in text and "10.0%" in text
    assert any(t == "polyline" and a.get("class") == "power-line" for t, a in doc.tags)


def test_bad_inputs_name_file_and_place(tmp_path):
    csv = tmp_path / "f.csv"
    csv.write_text("makespan_s,energy_j\n1.0,10\n1.1,abc\n")
    with pytest.raises(ReportInputError, match=r"f\.csv:3: column 'energy_j' is 'abc'"):
        read_frontier_csv(csv)
    csv.write_text("when,how_much\n1,2\n")
    with pytest.raises(ReportInputError, match=r"f\.csv:1: header"):
        read_frontier_csv(csv)
    bad = tmp_path / "m.json"
    bad.write_text('{"total": {"energy_j": 1}}')
    with pytest.raises(ReportInputError, match=r"m\.json: total: missing 'time_s'"):
        read_measurement(bad)
    with pytest.raises(ValueError, match="nothing to report"):
        render_report()


def test_reads_what_eopt_measure_json_writes(tmp_path):
    from eopt.measure.command import CommandMeasurement
    from eopt.measure.regions import RegionReport, RegionStats

    report = RegionReport(
        regions=(
            RegionStats("train", 0, 1, 1.5, 300.0, 0.5, 0, 0.75),
            RegionStats("train/forward", 1, 8, 0.5, 90.0, 0.2, 0, 0.225),
        ),
        total_energy_j=400.0,
        total_time_s=2.0,
        outside_energy_j=100.0,
        outside_time_s=0.5,
        meter={"method": "counter"},
    )
    data = CommandMeasurement(("python", "train.py"), 0, report, "gpu0", "NVIDIA H200").to_dict()
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    m = read_measurement(path)
    assert [r.name for r in m.regions] == ["train", "train/forward"]
    assert m.regions[1].depth == 1 and m.regions[1].mean_power_w == pytest.approx(180.0)
    assert m.total_energy_j == 400.0 and m.outside_energy_j == 100.0
    assert "NVIDIA H200" in m.device
    text = " ".join(_parse(render_report(measurement=m)).text)
    assert "train/forward" in text and "75.0%" in text and "25.0%" in text


def test_gantt_legend_names_power_limits_and_mixed_settings(schedule):
    els = list(schedule.elements)
    els[0] = dataclasses.replace(els[0], op_point=OperatingPoint(power_limit_w=250))
    els[1] = dataclasses.replace(els[1], op_point=OperatingPoint(1200, power_limit_w=300))
    doc = _parse(render_report(schedule=dataclasses.replace(schedule, elements=tuple(els))))
    text = " ".join(doc.text)
    for label in ("250 W", "1200 MHz / 300 W", "1410 MHz", "1005 MHz", "idle"):
        assert label in text
    bars = [a["fill"] for t, a in doc.tags if t == "rect" and a.get("class") == "element"]
    assert len(set(bars)) == 4  # four distinct settings, four colours


def test_breakdown_counts_setting_changes(schedule):
    """Devices that pay 1 ms and 0.5 J per setting change: stage0 changes 1410 → 1200
    and stage1 1410 → 1005 once each, so 1 J more and 2 ms less idle at 60 W."""
    from eopt.model.schedule import DeviceInfo

    devices = tuple(
        DeviceInfo(d.name, d.idle_power_w, d.gpu, transition_time_s=0.001, transition_energy_j=0.5)
        for d in schedule.devices
    )
    sch = dataclasses.replace(schedule, devices=devices, energy=139.8 + 1.0 - 60 * 0.002)
    b = energy_breakdown(sch)
    assert b.transitions == 2 and b.transitions_j == pytest.approx(1.0)
    assert b.idle_j == pytest.approx(19.8 - 0.12)
    assert b.total_j == pytest.approx(sch.energy)
    assert "setting changes (2)" in render_report(schedule=sch)
