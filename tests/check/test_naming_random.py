"""``eopt check`` names a mechanism by what it does, not by where the tuned set put it.

Each test builds a small schedule at random (sizes, order and the partner device drawn
from the seed) under the simulator's default, realistic noise, with one mechanism on:

* a node power budget across two GPUs whose kernels already report a power throttle
  alone (a GEMM at the top clock sits at its own limit), so the throttle flag cannot
  tell, and the co-run's lower SM clock must;
* the same on one device (the power cap against contention);
* a clock change followed, within its settling time, by more work at the new clock on
  one GPU while another GPU runs on, so the effect reaches elements whose own clock
  equals their predecessor's and the schedule's idle tail.
"""

from __future__ import annotations

import numpy as np
import pytest

from eopt.calculus.schedule import Placement
from eopt.check.runner import Job, SimElement, SimRunner
from eopt.check.workflow import CheckResult, characterize_element, check_schedule
from eopt.model.signature import Signature

RUNS = 20
SEEDS = (1, 2, 3)


def _check(
    runner: SimRunner, groups: list[list[tuple[str, str]]], seed: int
) -> tuple[CheckResult, dict[str, Signature]]:
    """Characterize the element types, place ``groups`` back to back per device (a
    group's members co-start), and check the schedule."""
    names = list(dict.fromkeys(n for g in groups for n, _ in g))
    lib = {
        n: characterize_element(runner, n, runner.devices[0], RUNS, seed=seed * 7919 + 1000 * k)
        for k, n in enumerate(names)
    }
    free = dict.fromkeys(runner.devices, 0.0)
    placements = []
    for group in groups:
        start = max(free[d] for _, d in group)
        for n, d in group:
            placements.append(Placement(lib[n].on(d), d, start))
            free[d] = max(free[d], start + lib[n].time)
    res = check_schedule(placements, list(lib.values()), runner, runs=RUNS, seed=seed * 31)
    return res, lib


def _gemm(m: float, clock: float | None) -> SimElement:
    return SimElement("gemm", workload={"m": m, "n": m, "k": m}, sm_clock_mhz=clock)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_node_budget_is_named_though_each_gemm_throttles_alone(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = [float(rng.choice([4096, 6144, 8192])) for _ in range(2)]
    els = {"mm0": _gemm(m[0], 1410.0), "mm1": _gemm(m[1], 1410.0)}
    els["copy"] = SimElement("memcpy", workload={"bytes": 128.0 * 2**20}, sm_clock_mhz=1410.0)
    runner = SimRunner(els, ["gpu0", "gpu1"], mechanisms="node_power", power_budget_w=700.0)
    lead = [[("copy", str(rng.choice(["gpu0", "gpu1"])))] for _ in range(int(rng.integers(0, 3)))]
    res, _ = _check(runner, [*lead, [("mm0", "gpu0"), ("mm1", "gpu1")]], seed)
    # Alone, each GEMM already reports a throttle (its own limit): the flag cannot tell.
    alone = runner.run([Job("mm0", "gpu0", 0.0, 0.0)], 3, seed)
    assert all(run[0].throttled for run in alone.jobs)
    assert res.deviation
    first = res.found[0]
    assert set(first.elements) == {"mm0", "mm1"} and first.kind == "runtime"
    assert first.mechanism == "node_power", first.evidence
    assert "SM clock" in first.evidence


@pytest.mark.parametrize("seed", SEEDS)
def test_collectives_on_a_shared_fabric_stay_interconnect(seed: int) -> None:
    rng = np.random.default_rng(seed)
    b = [float(rng.choice([128, 256, 512])) * 2**20 for _ in range(2)]
    els = {f"ar{i}": SimElement("allreduce", workload={"bytes": v}) for i, v in enumerate(b)}
    runner = SimRunner(els, ["gpu0", "gpu1"], mechanisms="interconnect")
    res, _ = _check(runner, [[("ar0", "gpu0"), ("ar1", "gpu1")]], seed)
    assert res.deviation and res.found[0].mechanism == "interconnect"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_power_cap_on_one_device_is_not_taken_for_contention(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = [float(rng.choice([4096, 6144, 8192])) for _ in range(2)]
    els = {"mm_a": _gemm(m[0], None), "mm_b": _gemm(m[1], None)}
    runner = SimRunner(els, ["gpu0"], mechanisms="power_cap")
    res, _ = _check(runner, [[("mm_a", "gpu0"), ("mm_b", "gpu0")]], seed)
    assert res.deviation
    assert res.found[0].mechanism == "power_cap", res.found[0].evidence


@pytest.mark.parametrize("seed", SEEDS)
def test_a_clock_still_settling_is_named_and_its_tail_refined(seed: int) -> None:
    rng = np.random.default_rng(seed)
    f2 = float(rng.choice([900.0, 1005.0, 1110.0]))
    els = {
        "fast": SimElement("memcpy", workload={"bytes": 256.0 * 2**20}, sm_clock_mhz=1410.0),
        "slow": _gemm(2048.0, f2),
        "after": SimElement("memcpy", workload={"bytes": 128.0 * 2**20}, sm_clock_mhz=f2),
        "other": SimElement("layernorm", workload={"rows": 4096.0}, sm_clock_mhz=1200.0),
    }
    runner = SimRunner(els, ["gpu0", "gpu1"], mechanisms="clock_state")
    tail = [[("other", "gpu1")] for _ in range(int(rng.integers(2, 5)))]
    groups = [[("fast", "gpu0")], [("slow", "gpu0")], [("after", "gpu0")], *tail]
    res, _ = _check(runner, groups, seed)
    assert res.deviation
    assert res.found[0].mechanism == "clock_state"
    assert set(res.found[0].elements) >= {"fast", "slow"}
    # Every finding is the clock change's, and the refined prediction covers the run.
    assert {f.mechanism for f in res.found} == {"clock_state"}
    assert res.refined_covers
