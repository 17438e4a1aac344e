"""The report renders in a real headless browser with the network cut off."""

from __future__ import annotations

import re

import numpy as np

from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature
from eopt.report import write_report


def test_report_renders_offline_in_chromium(schedule, tmp_path, render_in_chromium):
    lib = [
        Signature(
            "stage0.forward",
            100.0,
            t,
            d,
            var_energy=0.01,
            impl="cublas",
            op_point=OperatingPoint(sm_clock_mhz=c),
        )
        for c, t, d in [(1410, 0.10, 20.0), (1200, 0.12, 18.0), (1005, 0.15, 17.5)]
    ]
    page = write_report(tmp_path / "report.html", schedule=schedule, library=lib)
    source = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", source)

    shown = render_in_chromium(page, height=1700)
    # The browser parsed the inline SVG into the DOM: the charts and their marks exist.
    labels = {n.attrs.get("aria-label") for n in shown.dom.find_all("svg")}
    assert {"Schedule per device", "Plan time–energy frontier"} <= labels
    assert len(shown.dom.find_all("rect", "element")) == len(schedule.elements)
    # A rendered page, not a blank one: many distinct colours, much of it not white.
    packed = shown.png.astype(np.int32) @ np.array([1 << 16, 1 << 8, 1], dtype=np.int32)
    assert len(np.unique(packed)) > 100
    assert (shown.png.min(axis=2) < 250).mean() > 0.05
