"""The parts the reports are built from: the chart rules every time–energy plot shares,
log ticks, intervals without variance, the check verdict, region bands, and the
comparison report's bootstrap distributions."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from eopt.calculus.frontier import Frontier
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature
from eopt.report import plot_frontier, read_frontier_csv, read_measurement, render_report
from eopt.report.chart_rules import CATEGORY_PALETTE, LOG_SPAN, category_colors, log_axes
from eopt.report.charts import power_trace_svg
from eopt.report.check_verdict import refined_verdict
from eopt.report.compare_report import bootstrap_distributions, render_compare_report
from eopt.report.frontier_plot import plot_element_frontiers
from eopt.report.inputs import Measurement, Region
from eopt.report.region_bands import MAX_BANDS, region_bands
from eopt.report.svg import NO_VARIANCE, LogScale, fmt_interval, log_ticks
from eopt.runs.compare import RunValues, compare_runs


def _cells(slow_factor: float) -> list[Signature]:
    """Two implementations of one kernel at three clocks; ``naive`` is ``slow_factor``×
    slower and costlier than ``fast``."""
    out = []
    for impl, k in (("fast", 1.0), ("naive", slow_factor)):
        for clock, t, e in ((1410.0, 0.010, 3.0), (1200.0, 0.012, 2.8), (1005.0, 0.015, 2.9)):
            out.append(
                Signature(
                    "k",
                    50.0,
                    t * k,
                    e * k - 50.0 * t * k,
                    var_time=(0.01 * t * k) ** 2,
                    var_energy=(0.02 * e * k) ** 2,
                    impl=impl,
                    op_point=OperatingPoint(clock),
                )
            )
    return out


# One rule for both plots ---------------------------------------------------------------------
@pytest.mark.parametrize("slow_factor", [1.3, 20.0])
def test_report_and_frontier_plot_agree_on_log_axes_and_colours(slow_factor, tmp_path):
    cells = _cells(slow_factor)
    spans = slow_factor * 0.015 / 0.010 > LOG_SPAN
    assert log_axes([c.time for c in cells], [c.energy for c in cells]) is spans
    page = render_report(library=cells)
    assert ('data-x-scale="log"' in page) is spans and ('data-y-scale="log"' in page) is spans
    figure = plot_element_frontiers(
        {"k": Frontier.from_signatures(cells)}, tmp_path / "k.svg"
    ).read_text()
    assert ("log scale" in figure) is spans
    single = plot_frontier(Frontier.from_signatures(cells), tmp_path / "f.svg").read_text()
    assert ("log scale" in single) is spans
    colors = category_colors(c.impl for c in cells)
    assert colors == {"fast": CATEGORY_PALETTE[0], "naive": CATEGORY_PALETTE[1]}
    for color in colors.values():  # the same colour per implementation in both
        assert f"fill:{color}" in page
        assert color in figure


def test_category_colours_follow_first_sight_and_repeat_past_the_palette():
    names = [f"k{i}" for i in range(12)] + ["k0"]
    colors = category_colors(names)
    assert list(colors) == [f"k{i}" for i in range(12)]
    assert len(set(list(colors.values())[:10])) == 10
    assert colors["k10"] == colors["k0"]


def test_log_axes_need_positive_values():
    assert not log_axes([0.0, 1.0, 100.0], [1.0, 2.0, 3.0])  # 0 has no place on a log axis
    assert not log_axes([], [])


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.75, 10.5, [1, 2, 5, 10]),
        (0.9, 1500.0, [1, 10, 100, 1000]),
        (2.0, 9.0, [2, 3, 4, 5, 6, 7, 8, 9]),
    ],
)
def test_log_ticks_are_decades_with_steps_between_when_few(low, high, expected):
    assert log_ticks(low, high) == pytest.approx(expected)


def test_log_scale_puts_equal_ratios_at_equal_distances():
    scale = LogScale.fit([1.0, 1000.0], 0.0, 300.0, pad=0.0)
    assert [scale(v) for v in (1.0, 10.0, 100.0, 1000.0)] == pytest.approx([0, 100, 200, 300])
    assert scale(0.0) == scale.p0  # no place on the axis: pinned to its edge
    assert log_ticks(1.0, 1.3) == pytest.approx([1.0, 1.1, 1.2, 1.3])  # too narrow for 2, 5


# No variance measured ------------------------------------------------------------------------
def test_an_interval_of_no_width_says_no_variance_was_measured():
    assert fmt_interval(5753.42, 5753.42, "J") == NO_VARIANCE == "no variance measured"
    assert fmt_interval(5700.0, 5800.25, "J") == "5700 – 5800 J"
    assert fmt_interval(None, 1.0) == fmt_interval(math.nan, 1.0) == "unknown"


def test_a_frontier_table_without_spread_draws_no_bars_and_says_why(tmp_path, schedule):
    csv = tmp_path / "f.csv"
    csv.write_text("makespan_s,energy_j,energy_std_j\n0.38,150,0\n0.40,139.8,0\n0.5,135,0\n")
    rows = read_frontier_csv(csv)
    assert all(r.low_j == r.high_j for r in rows)  # the reader makes zero-width bars
    page = render_report(frontier=rows)
    assert 'class="errbar' not in page
    assert f"No bars: {NO_VARIANCE}." in page


# The check verdict ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("means_agree", "covers", "phrases"),
    [
        (False, True, ("still deviates", "though its one-run interval covers")),
        (False, False, ("still deviates", "does not cover")),
        (True, True, ("agrees with the measured mean", "covers the measurement")),
    ],
)
def test_the_verdict_gives_both_answers(means_agree, covers, phrases):
    data = {
        "deviation": True,
        "predicted": {"energy_j": 5000.0},
        "refined": {"energy_j": 5180.0, "test": {"passed": means_agree}},
        "refined_covers": covers,
    }
    verdict = refined_verdict(data)
    assert verdict is not None and verdict.resolved is means_agree
    words = verdict.words()
    assert "5180 J" in words
    for phrase in phrases:
        assert phrase in words
    page = render_report(check={**data, "measured": {"energy_j": 5200.0}, "found": []})
    card = re.search(r'<div class="(card[^"]*)"><div class="k">one-run interval</div>', page)
    assert card is not None
    assert ("good" in card.group(1)) is (means_agree and covers)


def test_no_verdict_without_a_deviation_and_plain_words_without_refinement():
    assert refined_verdict({"deviation": False}) is None
    verdict = refined_verdict(
        {
            "deviation": True,
            "predicted": {"energy_j": 10.0},
            "refined": None,
            "refined_covers": False,
        }
    )
    assert verdict is not None and not verdict.refined
    assert verdict.words().startswith("no interaction was found to refine the prediction")
    assert "does not cover" in verdict.words()


def test_the_check_report_says_what_the_check_printed(tmp_path):
    """A real check (simulated GPUs) stopped after one round: its log, what the terminal
    printed step by step, says whether the refined prediction still deviates; the report
    says the same, beside whether the one-run interval covers the measurement."""
    from click.testing import CliRunner

    from eopt.check.result_file import read_check_result
    from eopt.cli import cli

    examples = Path(__file__).resolve().parents[2] / "examples"
    out = tmp_path / "check.json"
    args = ["check", str(examples / "check_schedule.yaml"), "--sim", "--kernels",
            str(examples / "check_kernels.yaml"), "--runs", "20", "--max-rounds", "1",
            "-o", str(out), "-q"]  # fmt: skip
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = read_check_result(out)
    (said,) = [line for line in data["log"] if line.startswith("refined prediction")]
    persists = said.endswith("still deviates")
    assert persists is (not data["refined"]["test"]["passed"])
    page = render_report(check=data)
    means = re.search(
        r'<div class="k">refined prediction, by the means</div><div class="v">([^<]+)<', page
    )
    assert means is not None and means.group(1) == ("still deviates" if persists else "agrees")
    interval = re.search(r'<div class="k">one-run interval</div><div class="v">([^<]+)<', page)
    covers = data["refined_covers"]
    assert interval is not None
    assert interval.group(1) == ("covers the measurement" if covers else "does not cover")


# Region bands --------------------------------------------------------------------------------
def test_measurement_calls_are_named_by_region_path_and_keep_the_samples_axis(tmp_path):
    data = {
        "total_energy_j": 100.0,
        "total_time_s": 2.0,
        "regions": [
            {"name": "step", "energy_j": 60.0, "time_s": 1.0},
            {"name": "step/fwd", "energy_j": 30.0, "time_s": 0.4, "depth": 1},
        ],
        "samples": {"time_s": [0.05, 1.0, 1.95], "power_w": [50.0, 60.0, 50.0]},
        "events": [
            {"name": "step", "path": "step", "start_s": 0.5, "end_s": 1.5},
            {"name": "fwd", "path": "step/fwd", "start_s": 0.6, "end_s": 1.0},
        ],
    }
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    m = read_measurement(path)
    assert m.calls == (("step", 0.5, 1.5), ("step/fwd", 0.6, 1.0))
    # On the run's axis already: not moved, so the calls line up with the power.
    assert m.samples[0] == (0.05, 50.0)
    bands, left_out = region_bands(m)
    assert [b.name for b in bands] == ["step", "step/fwd"] and left_out == 0
    assert bands[1].summary == "step/fwd: 1 call, 0.4 s, 30 J"


def test_bands_are_limited_and_a_many_call_region_stays_a_few_rects():
    names = [f"r{i}" for i in range(MAX_BANDS + 3)]
    calls = tuple((n, 0.1 * i, 0.1 * i + 0.05) for i, n in enumerate(names))
    # One region called 10 000 times over 10 s: 1 ms calls 1 ms apart.
    calls += tuple(("busy", 1e-3 * (2 * k), 1e-3 * (2 * k + 1)) for k in range(5000))
    m = Measurement(
        total_energy_j=1.0,
        total_time_s=10.0,
        regions=(Region("busy", 0.5, 5.0, calls=5000), *(Region(n, 0.01, 0.05) for n in names)),
        samples=((0.0, 50.0), (10.0, 50.0)),
        calls=calls,
    )
    bands, left_out = region_bands(m)
    assert len(bands) == MAX_BANDS and left_out == len(names) + 1 - MAX_BANDS
    assert bands[0].name == "busy"  # the table's order
    svg = power_trace_svg(m.samples, bands=bands, width=960)
    busy = svg[svg.index('data-region="busy"') : svg.index('data-region="r0"')]
    assert 0 < busy.count('class="band-call"') <= 960  # at most one per pixel


# The comparison report -----------------------------------------------------------------------
def _runs(tag: str, times: np.ndarray, powers: np.ndarray) -> list[RunValues]:
    return [
        RunValues(f"{tag}{i}", i * 10**9, float(t), float(t * p))
        for i, (t, p) in enumerate(zip(times, powers, strict=True))
    ]


def test_bootstrap_distributions_are_those_behind_the_intervals():
    rng = np.random.default_rng(3)
    a = _runs("a", 2.0 + 0.05 * rng.standard_normal(20), 300 + 5 * rng.standard_normal(20))
    b = _runs("b", 1.7 + 0.05 * rng.standard_normal(24), 290 + 5 * rng.standard_normal(24))
    cmp = compare_runs(a, b, seed=11, resamples=2000)
    boot = bootstrap_distributions(cmp, list(reversed(a)), b)  # any order: run order is kept
    assert boot.median_a.shape == (3, 2000) and boot.median_b.shape == (3, 2000)
    q = [0.025, 0.975]
    assert tuple(np.quantile(boot.median_a[1], q)) == pytest.approx(cmp.a.ci_median.energy_j)
    assert tuple(np.quantile(boot.median_b[0], q)) == pytest.approx(cmp.b.ci_median.time_s)
    assert tuple(np.quantile(boot.reduction[1], q)) == pytest.approx(cmp.reduction.energy.ci)
    assert tuple(np.quantile(boot.reduction[2], q)) == pytest.approx(cmp.reduction.power.ci)


def test_compare_report_refuses_other_runs_and_escapes_names():
    rng = np.random.default_rng(5)
    a = _runs("a", 2.0 + 0.05 * rng.standard_normal(12), np.full(12, 300.0))
    b = _runs("b", 1.7 + 0.05 * rng.standard_normal(12), np.full(12, 290.0))
    cmp = compare_runs(a, b, names=("<a>", "b&b"))
    with pytest.raises(ValueError, match=r"variant <a>: the runs given are not those"):
        render_compare_report(cmp, a[:-1], b)
    page = render_compare_report(cmp, a, b)
    assert "<a>" not in page and "&lt;a&gt;" in page and "b&amp;b" in page
    assert "No block of runs in another machine state was found." in page
    assert "<script" not in page.lower()
    plain = render_compare_report(compare_runs(a, b, detect_states=False), a, b)
    assert "No search for machine-state blocks was made." in plain
