"""The figure of `eopt frontier --plot`: colours per κ, labels, log axes, bars."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from eopt.calculus.frontier import Frontier
from eopt.cli import cli
from eopt.model.library import Library
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature
from eopt.report.frontier_plot import LOG_SPAN, plot_element_frontiers

QUICK = ["--min-runs", "3", "--min-time", "0", "--warmup", "1", "-q"]


@pytest.fixture(scope="module")
def gemm_library(tmp_path_factory):
    out = tmp_path_factory.mktemp("plot") / "gemm.jsonl"
    args = ["sweep", "sim:gemm", "--clocks", "1410,1200,1005,810", *QUICK, "-o", str(out)]
    assert CliRunner().invoke(cli, args).exit_code == 0
    return out


def _svg_text(path) -> str:
    """The text drawn in an SVG (matplotlib keeps it as <text> with svg.fonttype none)."""
    return " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", path.read_text()))


def test_a_slow_implementation_switches_the_overview_to_log_axes(gemm_library, tmp_path):
    svg = tmp_path / "f.svg"
    result = CliRunner().invoke(cli, ["frontier", str(gemm_library), "--plot", str(svg)])
    assert result.exit_code == 0, result.output
    text = _svg_text(svg)
    for impl in ("cublas", "cutlass", "naive"):  # one legend entry (colour) each
        assert impl in text
    assert "time per invocation (s, log scale)" in text  # naive is ~15× slower
    assert "the frontier, zoomed in" in text and "1410MHz" in text
    assert "hollow: dominated in (T, E)" in text
    widest = re.search(r"the widest is ±([0-9.]+)% of its energy", text)
    assert widest is not None and 0 < float(widest.group(1)) < 5


def test_close_cells_keep_linear_axes_and_every_frontier_cell_is_labelled(tmp_path):
    cells = [
        Signature("k", 50.0, t, e, var_time=1e-8, var_energy=1e-4, impl="a",
                  op_point=OperatingPoint(clock))
        for t, e, clock in ((1.0, 80.0, 1410.0), (1.2, 60.0, 1200.0), (1.5, 75.0, 1005.0))
    ]  # fmt: skip
    front = Frontier.from_signatures(cells, dominance="point")
    assert max(p.time for p in cells) / min(p.time for p in cells) < LOG_SPAN
    svg = plot_element_frontiers({"k": front}, tmp_path / "k.svg")
    text = _svg_text(svg)
    assert "log scale" not in text
    assert "1410MHz" in text and "1200MHz" in text
    assert "1005MHz" not in text  # dominated: drawn hollow, not labelled
    assert "k: all 3 cells, 2 on the frontier" in text


def test_many_elements_get_one_panel_each(tmp_path):
    cells = [
        Signature(f"e{i}", 50.0, 1.0 + j, 80.0 - 10 * j, impl="a",
                  op_point=OperatingPoint(1410.0 - 100 * j))
        for i in range(6) for j in range(2)
    ]  # fmt: skip
    lib = Library(cells)
    fronts = {n: Frontier.from_signatures(lib.by_name(n), "point") for n in lib.names()}
    text = _svg_text(plot_element_frontiers(fronts, tmp_path / "m.svg"))
    assert text.count("on the frontier") == 6 and "zoomed in" not in text
    assert "No bars: the cells carry no variance" in text


def test_bad_plot_requests_are_value_errors(tmp_path):
    front = Frontier.from_signatures([Signature("k", 50.0, 1.0, 80.0)])
    with pytest.raises(ValueError, match=r"\.png, \.svg or \.pdf"):
        plot_element_frontiers({"k": front}, tmp_path / "k.txt")
    with pytest.raises(ValueError, match="no frontier"):
        plot_element_frontiers({}, tmp_path / "k.png")


def test_frontier_quiet_prints_nothing_and_json_only_json(gemm_library, tmp_path):
    png = tmp_path / "f.png"
    quiet = CliRunner().invoke(cli, ["frontier", str(gemm_library), "--plot", str(png), "-q"])
    assert quiet.exit_code == 0 and quiet.output == ""
    assert png.read_bytes()[:4] == b"\x89PNG"
    data = CliRunner().invoke(cli, ["frontier", str(gemm_library), "--json"])
    rows = json.loads(data.stdout)
    assert rows and {r["impl"] for r in rows} <= {"cublas", "cutlass", "naive"}
