"""Latency statistics against numpy; device plans from schedules."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from eopt.apply import SwitchStats, device_plans
from eopt.model.operating_point import OperatingPoint


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=200))
def test_percentiles_match_numpy(latencies):
    stats = SwitchStats.from_latencies(latencies, coalesced=2, skipped=5)
    assert stats.count == len(latencies)
    assert math.isclose(stats.p50_s, float(np.percentile(latencies, 50)), abs_tol=1e-12)
    assert math.isclose(stats.p99_s, float(np.percentile(latencies, 99)), abs_tol=1e-12)
    assert math.isclose(stats.mean_s, float(np.mean(latencies)), rel_tol=1e-9, abs_tol=1e-15)
    assert stats.max_s == max(latencies)
    assert stats.to_dict()["coalesced"] == 2 and stats.to_dict()["skipped"] == 5


def test_no_switches_reads_as_zero_with_nulls():
    stats = SwitchStats.from_latencies([])
    assert stats.summary() == "0 switches"
    assert stats.to_dict()["p99_s"] is None


def test_device_plans_group_elements_by_device_wide_setting_in_start_order(build):
    e = build.element
    sch = build.schedule(
        [
            e("B", "s0", 0.02, 0.01, sm=1200),
            e("A", "s0", 0.00, 0.01, sm=1410),
            e("C", "s0", 0.04, 0.01, sm=1410),
            e("D", "s1", 0.00, 0.01),
        ],
        ["s0", "s1"],
    )
    p0, p1 = device_plans(sch, {"s0": 0, "s1": 1})
    assert p0.settings == (OperatingPoint(1410), OperatingPoint(1200))
    assert p0.users == (("A", "C"), ("B",))
    assert not p0.is_static
    assert p1.is_static and not p1.changes_anything()
