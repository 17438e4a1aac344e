"""Every report kind rendered in headless Chromium (offline), checked for what a reader
must see: read back from the DOM the browser built and from the pixels it drew."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from eopt.attribute.engine import attribute_all
from eopt.model.operating_point import OperatingPoint
from eopt.model.schedule import DeviceInfo, Schedule
from eopt.model.signature import Signature
from eopt.model.trace import PowerSeries, Trace, region_events
from eopt.report import write_report
from eopt.report.chart_rules import category_colors
from eopt.report.compare_report import write_compare_report
from eopt.report.recording import measurement_from_attribution
from eopt.runs.compare import compare_runs
from eopt.runs.variants import load_variant

DBSCAN = Path(__file__).resolve().parents[1] / "data" / "kokkos_dbscan_h100"

#: (implementation, time at 1410 MHz in s, energy there in J): naive is 12× slower, so
#: the cells span decades.
IMPLS = (("cublas", 0.002, 0.9), ("cutlass", 0.0025, 1.0), ("naive", 0.024, 9.0))
CLOCKS = (1410, 1200, 1005, 810)


def _cells(name: str = "gemm", scale: float = 1.0) -> list[Signature]:
    cells = []
    for impl, t0, e0 in IMPLS:
        for clock in CLOCKS:
            slow = 1410 / clock
            t = scale * t0 * (0.6 + 0.4 * slow)
            e = scale * e0 * (0.7 + 0.3 / slow)
            cells.append(
                Signature(
                    name,
                    80.0,
                    t,
                    e - 80.0 * t,
                    var_time=(0.01 * t) ** 2,
                    var_energy=(0.02 * e) ** 2,
                    impl=impl,
                    op_point=OperatingPoint(sm_clock_mhz=clock),
                )
            )
    return cells


def _ticks(svg, axis: str) -> list[tuple[float, float]]:
    """(value, pixel) of an axis's tick labels."""
    out = []
    for node in svg.find_all("text", f"{axis}-tick"):
        value = float(node.text.replace(",", ""))
        out.append((value, float(node.attrs["x" if axis == "x" else "y"])))
    return out


# The library chart ---------------------------------------------------------------------------
def test_library_chart_has_log_decade_axes_and_one_colour_per_implementation(
    tmp_path, render_in_chromium
):
    page = write_report(tmp_path / "library.html", library=_cells())
    shown = render_in_chromium(page, height=900)
    (svg,) = [s for s in shown.dom.find_all("svg") if s.attrs.get("aria-label") == "gemm frontier"]
    (axes,) = svg.find_all("g", "axes")
    assert axes.attrs["data-x-scale"] == "log" and axes.attrs["data-y-scale"] == "log"
    assert "time (ms, log scale)" in svg.all_text()
    for axis in ("x", "y"):
        ticks = sorted(_ticks(svg, axis))
        assert len(ticks) >= 3
        # Tick values are 1, 2 or 5 times a power of ten …
        for value, _ in ticks:
            mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
            assert round(mantissa, 6) in (1.0, 2.0, 5.0), value
        # … and the axis is logarithmic: equal ratios take equal distances.
        (v0, p0), (v1, p1) = ticks[0], ticks[-1]
        per_decade = (p1 - p0) / math.log10(v1 / v0)
        for v, p in ticks:
            assert p == pytest.approx(p0 + per_decade * math.log10(v / v0), abs=0.6)

    colors = category_colors(impl for impl, _, _ in IMPLS)
    legend = {e.all_text(): e for e in svg.find_all("g", "legend-entry")}
    for impl, color in colors.items():
        swatch = legend[impl].find_all("circle")[0]
        assert f"fill:{color}" in swatch.attrs["style"]
        # The implementation's cells are drawn in its colour (filled or hollow) …
        marks = [c for c in svg.find_all("circle", "pt") if color in c.attrs.get("style", "")]
        assert len(marks) == len(CLOCKS), impl
        # … and that colour is on the screen.
        assert len(shown.pixels_near(color, 12)) > 20, impl

    # The fast kernels are not squeezed into a corner: cublas' cells spread over many
    # pixels, several times what a linear time axis would give them.
    t_all = [c.time for c in _cells()]
    t_fast = [c.time for c in _cells() if c.impl == "cublas"]
    plot_px = 470 - 64 - 16
    linear_px = plot_px * (max(t_fast) - min(t_fast)) / (max(t_all) - min(t_all))
    blue = shown.pixels_near(colors["cublas"], 12)
    blue = blue[blue[:, 0] > blue[:, 0].min() + 12]  # below the legend's swatch
    assert np.ptp(blue[:, 1]) > 3 * linear_px


def test_every_panel_keeps_the_colours_of_the_whole_library(tmp_path, render_in_chromium):
    # softmax lacks cublas: cutlass keeps its colour, not the first one.
    cells = _cells() + [c for c in _cells("softmax", 0.25) if c.impl != "cublas"]
    page = write_report(tmp_path / "two.html", library=cells)
    shown = render_in_chromium(page, height=900)
    colors = category_colors(c.impl for c in cells)
    panels = {s.attrs.get("aria-label"): s for s in shown.dom.find_all("svg")}
    for label in ("gemm frontier", "softmax frontier"):
        legend = {e.all_text(): e for e in panels[label].find_all("g", "legend-entry")}
        for impl in ("cutlass", "naive"):
            assert f"fill:{colors[impl]}" in legend[impl].find_all("circle")[0].attrs["style"]
    assert "cublas" not in {
        e.all_text() for e in panels["softmax frontier"].find_all("g", "legend-entry")
    }


# The comparison ------------------------------------------------------------------------------
def test_compare_report_shows_both_run_series_the_block_and_the_bootstraps(
    tmp_path, render_in_chromium
):
    a = load_variant(DBSCAN / "fdbscan", "DBSCANCalculation")
    b = load_variant(DBSCAN / "fdbscan-dense", "DBSCANCalculation")
    cmp = compare_runs(a, b, region="DBSCANCalculation", names=("fdbscan", "fdbscan-dense"))
    page = write_compare_report(tmp_path / "compare.html", cmp, a, b)
    shown = render_in_chromium(page, height=3400)
    text = shown.dom.all_text()
    # B's block (16 of its 34 runs ~1.5× slower) makes the energy interval reach 0; the
    # page says so, and gives the clear reduction without the block beside it.
    assert "No clear difference in energy: fdbscan-dense uses 22." in text
    assert re.search(
        r"Without the blocks of runs in another machine state \(34 runs of fdbscan, 18 of "
        r"fdbscan-dense\): fdbscan-dense uses 2\d\.\d % less energy than fdbscan",
        text,
    )

    charts = [s for s in shown.dom.find_all("svg") if "runs" in s.classes()]
    assert [c.attrs["aria-label"] for c in charts] == [
        "energy per run",
        "time per run",
        "mean power per run",
    ]
    colors = category_colors(["A", "B"])
    for chart in charts:
        series = chart.find_all("g", "run-series")
        assert [len(s.find_all("circle", "run")) for s in series] == [34, 34]
        # The B block of the recorded data (runs 1–16, ~1.5× slower): a band, labelled,
        # its runs ringed, in B's colour.
        (block,) = chart.find_all("g", "block")
        assert re.search(r"B runs 1–16: 1\.\d\d× time", block.all_text())
        assert colors["B"] in block.find_all("rect", "block-band")[0].attrs["style"]
        ringed = series[1].find_all("circle", "in-block")
        assert len(ringed) == 16 and not series[0].find_all("circle", "in-block")
    # The block is there in time: its runs' markers sit above B's other runs.
    time_chart = charts[1].find_all("g", "run-series")[1]
    ys = [float(c.attrs["cy"]) for c in time_chart.find_all("circle", "run")]
    assert max(ys[:16]) < min(ys[16:])  # SVG y grows downwards: slower is higher

    hists = [s for s in shown.dom.find_all("svg") if "histogram" in s.classes()]
    assert len(hists) == 9  # A, B and 1 − B/A for energy, time and power
    assert all(h.find_all("g", "histogram") for h in hists)
    assert "Without the blocks (34 runs of fdbscan, 18 of fdbscan-dense)" in text
    for color in colors.values():
        assert len(shown.pixels_near(color, 12)) > 200


# The attribution report ----------------------------------------------------------------------
#: Power of each region while it runs (W); 70 W outside. fwd and bwd nest in step.
POWER = {"step": 120.0, "fwd": 250.0, "bwd": 310.0}


def _recorded_run() -> tuple[Trace, list[tuple[str, float, float]]]:
    """Six steps of fwd then bwd, power sampled every ms (noise-free), as a trace."""
    calls = []
    for k in range(6):
        s0 = 0.2 + k
        calls += [("step", s0, s0 + 0.8), ("fwd", s0 + 0.05, s0 + 0.35)]
        calls.append(("bwd", s0 + 0.4, s0 + 0.78))
    samples = []
    for i in range(6501):
        t = i * 1e-3
        inside = [n for n, a, b in calls if a <= t < b]
        watts = 70.0
        for name in ("step", "fwd", "bwd"):  # innermost last
            if name in inside:
                watts = POWER[name]
        samples.append((t, watts))
    origin = 1_700_000_000_000_000_000
    series = (PowerSeries.from_seconds("GPU", 0, samples, origin),)
    return Trace(tuple(region_events(calls, origin)), series, {}, "run"), calls


def _significant(cell: str) -> int:
    digits = re.sub(r"[^0-9]", "", cell).lstrip("0")
    return len(digits.rstrip("0")) if "." not in cell else len(digits)


def test_attribution_trace_has_a_named_band_per_region_and_rounded_numbers(
    tmp_path, render_in_chromium
):
    trace, calls = _recorded_run()
    att = attribute_all([trace], source="run")
    page = write_report(tmp_path / "run.html", measurement=measurement_from_attribution(att, trace))
    shown = render_in_chromium(page, height=1100)
    (svg,) = [s for s in shown.dom.find_all("svg") if s.attrs.get("aria-label") == "Power trace"]
    bands = svg.find_all("g", "region-band")
    assert [b.attrs["data-region"] for b in bands] == ["step", "fwd", "bwd"]
    ticks = _ticks(svg, "x")
    (v0, p0), (v1, p1) = ticks[0], ticks[-1]
    px_per_s = (p1 - p0) / (v1 - v0)
    colors = set()
    for band in bands:
        name = band.attrs["data-region"]
        assert band.find_all("text", "band-label")[0].text == name
        starts = sorted(a for n, a, _ in calls if n == name)
        bars = band.find_all("rect", "band-call")
        assert len(bars) == len(starts) == 6
        assert len(band.find_all("rect", "band-shade")) == 6  # shaded over the trace
        for bar, start in zip(bars, starts, strict=True):
            assert float(bar.attrs["x"]) == pytest.approx(p0 + (start - v0) * px_per_s, abs=1.0)
        color = re.search(r"fill:(#[0-9a-f]{6})", bars[0].attrs["style"]).group(1)
        colors.add(color)
        assert len(shown.pixels_near(color, 12)) > 300, name  # the lanes are on screen
    assert len(colors) == 3

    # The region table: four significant digits, and the right energies (250 W for
    # 6 × 0.3 s in fwd: 450 J; 310 W for 6 × 0.38 s in bwd: 706.8 J).
    (table,) = shown.dom.find_all("table", "regions")
    rows = {
        r.find_all("td")[0].text.strip(): [td.text.strip() for td in r.find_all("td")]
        for r in table.find_all("tr")[1:]
    }
    truth = {"fwd": 250.0 * 1.8, "bwd": 310.0 * 2.28}
    for name, energy in truth.items():
        shown_j = float(rows[name][2])
        assert shown_j == pytest.approx(energy, rel=0.01)
        assert shown_j == float(f"{att.region(name).inclusive_energy_j:.4g}")
    for cells in rows.values():
        for cell in cells[1:]:
            if re.fullmatch(r"[0-9][0-9,]*(\.[0-9]+)?", cell):
                assert _significant(cell) <= 4, cell


# The check report and the schedule summary ---------------------------------------------------
def _check(means_agree: bool, covers: bool) -> dict:
    return {
        "schema": "eopt.check/1",
        "deviation": True,
        "predicted": {"energy_j": 5000.0, "time_s": 1.0},
        "measured": {"energy_j": 5200.0, "time_s": 1.0, "runs": 30},
        "test": {"passed": False},
        "found": [],
        "refined": {"energy_j": 5180.0, "time_s": 1.0, "test": {"passed": means_agree}},
        "refined_covers": covers,
        "rounds": 1,
    }


def test_check_report_says_the_deviation_persists_beside_the_covering_interval(
    tmp_path, render_in_chromium
):
    page = write_report(tmp_path / "check.html", check=_check(means_agree=False, covers=True))
    shown = render_in_chromium(page, height=700)
    cards = {c.find_all("div", "k")[0].text: c for c in shown.dom.find_all("div", "card")}
    refined = cards["refined prediction, by the means"]
    interval = cards["one-run interval"]
    assert refined.find_all("div", "v")[0].text == "still deviates" and "bad" in refined.classes()
    assert interval.find_all("div", "v")[0].text == "covers the measurement"
    assert "good" not in interval.classes()  # no green all-clear while a deviation persists
    (verdict,) = shown.dom.find_all("p", "verdict")
    assert "still deviates" in verdict.text and "covers the measurement" in verdict.text
    green = shown.pixels_near("#1a7f37", 30)
    assert len(green) == 0


def test_schedule_without_variance_says_so_instead_of_a_zero_width_interval(
    tmp_path, render_in_chromium, schedule
):
    sch = Schedule(
        elements=schedule.elements[:2],
        devices=(DeviceInfo("stage0", 60.0, 0),),
        makespan=0.3,
        energy=5753.42,
        energy_std=0.0,
    )
    page = write_report(tmp_path / "s.html", schedule=sch)
    shown = render_in_chromium(page, height=900)
    cards = {c.find_all("div", "k")[0].text: c for c in shown.dom.find_all("div", "card")}
    assert cards["95% interval"].find_all("div", "v")[0].text == "no variance measured"
    text = shown.dom.all_text()
    assert "5753" in text and not re.search(r"5753(\.\d+)? – 5753", text)
    assert not shown.dom.find_all("g", "errbar")  # no bar of no width
