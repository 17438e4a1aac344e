"""A 200 000-character region name: tables shorten it, JSON keeps it whole."""

from __future__ import annotations

import json

import pytest

from eopt.cli import main
from eopt.report.names import shorten

LONG = "kernel<" + "a" * 199_990 + ">end"


def _trace(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(
        json.dumps(
            {
                "samples": {"time_s": [0.0, 1.0, 2.0], "power_w": [100.0, 200.0, 100.0]},
                "events": [{"name": LONG, "start_s": 0.5, "end_s": 1.5}],
            }
        ),
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("most", [1, 2, 3, 16, 160])
def test_shorten_keeps_the_start_and_the_end_within_the_limit(most):
    short = shorten(LONG, most)
    assert len(short) == most
    if most >= 3:
        assert short.startswith("k") and short.endswith("d") and "…" in short
    assert shorten(LONG[:most], most) == LONG[:most]  # a name that fits is kept whole


def test_the_attribution_table_stays_short_and_the_json_keeps_the_name(tmp_path, capsys):
    trace = _trace(tmp_path)
    main(["attribute", str(trace)])
    table = capsys.readouterr().out
    assert len(table.splitlines()) < 40  # not thousands of folded lines
    assert "kernel<aaa" in table and "aaa>end" in table
    main(["attribute", str(trace), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert LONG in [r["name"] for r in data["regions"]]
