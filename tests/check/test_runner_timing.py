"""The runner times a schedule as the calculus composes it (docs/uncertainty.md).

A group of jobs whose planned intervals overlap co-runs, its members at their planned
offsets from its first start; the next group starts when every member has ended, plus
the planned gap; a device's first group starts at its planned time. With a 2 % launch
jitter the members' order of ending changes from run to run, which is what is checked.
"""

from __future__ import annotations

import numpy as np
import pytest

from eopt.check.runner import Job, SimElement, SimRunner, parse_jitter

ELEMENTS = {
    "a": SimElement("layernorm", workload={"rows": 4096.0}),
    "b": SimElement("layernorm", workload={"rows": 4096.0, "hidden": 8190.0}),
    "c": SimElement("memcpy", workload={"bytes": 64.0 * 2**20}),
}


def test_a_group_waits_for_every_member_and_keeps_its_gaps() -> None:
    runner = SimRunner(ELEMENTS, ["gpu0", "gpu1"], mechanisms="none", jitter=0.02)
    t = 1.07e-4  # about each layernorm's time; "b" is planned a hair longer
    gap = 3e-5
    jobs = [
        Job("a", "gpu0", 0.0, t),
        Job("b", "gpu0", 0.0, t + 1e-9),
        Job("c", "gpu0", t + 1e-9 + gap, 2 * t + gap),
        Job("a", "gpu1", 2e-5, 2e-5 + t),  # another device: its own planned start
        Job("b", "gpu1", 2e-5 + 4e-5, 6e-5 + t),  # a later member: a fixed lead of 40 µs
    ]
    rs = runner.run(jobs, 40, seed=5)
    shorter_planned_ended_last = 0
    for run in rs.jobs:
        a, b, c, a1, b1 = run
        assert a.start_s == pytest.approx(0.0, abs=1e-12)
        assert b.start_s == pytest.approx(0.0, abs=1e-12)
        ends = max(a.start_s + a.time_s, b.start_s + b.time_s)
        assert c.start_s == pytest.approx(ends + gap, abs=1e-12)
        shorter_planned_ended_last += a.start_s + a.time_s > b.start_s + b.time_s
        assert a1.start_s == pytest.approx(2e-5, abs=1e-12)
        assert b1.start_s - a1.start_s == pytest.approx(4e-5, abs=1e-12)
    # The jitter does reorder the members' ends: the test above is not vacuous.
    assert 0 < shorter_planned_ended_last < rs.runs
    assert np.all(rs.time_s > 0)


def test_a_jitter_out_of_range_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"relative standard deviation in \[0, 0\.2\]"):
        SimRunner(ELEMENTS, ["gpu0"], jitter=2.0)
    assert parse_jitter("2%") == pytest.approx(0.02) and parse_jitter(None) is None
    with pytest.raises(ValueError, match=r"--jitter: must be at most 20%, got '30%'"):
        parse_jitter("30%", "--jitter")
    with pytest.raises(ValueError, match=r"--jitter: 2 would mean 200%; did you mean 2%"):
        parse_jitter("2", "--jitter")
