"""``eopt check`` names a mechanism by what it does, not by where the tuned set put it.

Each test builds a small schedule at random (sizes, order and the partner device drawn
from the seed) under the simulator's default, realistic noise, with one mechanism on:

* a node power budget across two GPUs whose kernels already report a power throttle
  alone (a GEMM at the top clock sits at its own limit), so the throttle flag cannot
  tell, and the co-run's lower SM clock must;
* the same on one device (the power cap against contention);
* a clock change followed, within its settling time, by more work at the new clock on
  one GPU while another GPU runs on, so the effect reaches elements whose own clock
  equals their predecessor's and the schedule's idle tail;
* a cache pair: first on a locked clock (random sizes and fillers), with a cold
  consumer that keeps a tiny residue of its deviation, and in the middle of a two-GPU
  schedule whose prefix search ends past it (the last two from random schedules of
  ``benchmarks/check_acceptance.py`` that the check once misnamed).
"""

from __future__ import annotations

import numpy as np
import pytest

from eopt.check.runner import Job, SimElement, SimRunner
from eopt.check.workflow import CheckResult, characterize_element, check_schedule
from eopt.model.signature import Signature
from tests.check.placed import place_groups

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
    placements = place_groups(lib, groups)
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


def _el(kernel: str, size: float, clock: float, **buffers: tuple[str, ...]) -> SimElement:
    work = {
        "gemm": {"m": size, "n": size, "k": size},
        "layernorm": {"rows": size},
        "memcpy": {"bytes": size * 2**20},
    }[kernel]
    return SimElement(kernel, workload=work, sm_clock_mhz=clock, **buffers)


def _placed_check(
    els: dict[str, SimElement],
    devices: list[str],
    layout: list[list[tuple[str, str]]],
    gaps: list[float],
    seed: int,
    runs: int = RUNS,
    mechanism: str = "cache",
) -> CheckResult:
    """Characterize, place ``layout`` (a group's members co-start after its gap), check."""
    runner = SimRunner(els, devices, mechanisms=mechanism)
    used = list(dict.fromkeys(n for g in layout for n, _ in g))
    lib = {
        n: characterize_element(runner, n, devices[0], runs, seed=seed * 7919 + 1000 * (k + 1))
        for k, n in enumerate(used)
    }
    return check_schedule(
        place_groups(lib, layout, gaps),
        list(lib.values()),
        runner,
        runs=runs,
        seed=seed * 7919 + 500_000,
    )


def _named_cache_pair(res: CheckResult) -> None:
    assert res.deviation and res.found
    first = res.found[0]
    assert set(first.elements) == {"produce", "consume"} and first.kind == "entry"
    assert first.mechanism == "cache", first.evidence


@pytest.mark.parametrize("seed", SEEDS)
def test_a_cache_pair_first_on_a_locked_clock_is_named(seed: int) -> None:
    rng = np.random.default_rng(seed)
    clock = float(rng.choice([1200.0, 1410.0]))
    rows = float(rng.choice([1024, 2048]))
    els = {
        "produce": _el("layernorm", rows, clock, writes=("x",)),
        "consume": _el("layernorm", rows, clock, reads=("x",)),
    }
    layout = [[("produce", "gpu0")], [("consume", "gpu0")]]
    for _ in range(int(rng.integers(3, 6))):
        kernel = str(rng.choice(["gemm", "layernorm", "memcpy"]))
        size = float(
            rng.choice(
                {"gemm": [1024, 2048], "layernorm": [1024, 4096], "memcpy": [16, 128]}[kernel]
            )
        )
        name = f"{kernel}{size:.0f}"
        els.setdefault(name, _el(kernel, size, clock))
        layout.append([(name, "gpu0")])
    gaps = (
        [float(rng.choice([0.0, 1e-4, 5e-4]))]
        + [0.0]
        + [float(rng.choice([0.0, 1e-4])) for _ in layout[2:]]
    )
    _named_cache_pair(_placed_check(els, ["gpu0"], layout, gaps, seed=100 * seed + 7))


def test_a_cold_consumer_that_keeps_a_tiny_residue_is_still_named_cache() -> None:
    # A locked clock holds a kernel's time to a few 1e-4, so here the consumer on cold
    # buffers keeps a residue (-0.05 % of its time against a -22 % effect) that a test of
    # equality rejects: the protocol must count the deviation as removed.
    els = {
        "produce": _el("layernorm", 2048.0, 1200.0, writes=("x",)),
        "consume": _el("layernorm", 2048.0, 1200.0, reads=("x",)),
        "layernorm1024": _el("layernorm", 1024.0, 1200.0),
        "memcpy128": _el("memcpy", 128.0, 1200.0),
        "gemm2048": _el("gemm", 2048.0, 1200.0),
        "memcpy16": _el("memcpy", 16.0, 1200.0),
    }
    layout = [
        [("produce", "gpu0")],
        [("consume", "gpu0")],
        [("layernorm1024", "gpu0")],
        [("memcpy128", "gpu0")],
        [("gemm2048", "gpu0")],
        [("gemm2048", "gpu0"), ("memcpy128", "gpu0")],
        [("memcpy16", "gpu0")],
    ]
    gaps = [5e-4, 0.0, 0.0, 1e-4, 0.0, 1e-4, 1e-4]
    _named_cache_pair(_placed_check(els, ["gpu0"], layout, gaps, seed=352_009, runs=30))


def test_the_pair_is_found_when_the_prefix_search_runs_past_it() -> None:
    # Two GPUs; the cache pair in the middle of gpu1. The prefix ending at the consumer
    # tests just under the localization threshold, so the bisection ends seven elements
    # later, where no pair of the last element deviates: the search must look back.
    els = {
        "produce": _el("layernorm", 2048.0, 1410.0, writes=("x",)),
        "consume": _el("layernorm", 2048.0, 1410.0, reads=("x",)),
    }
    for kernel, size in [
        ("gemm", 4096),
        ("gemm", 1024),
        ("gemm", 3072),
        ("layernorm", 8192),
        ("layernorm", 4096),
        ("layernorm", 1024),
        ("memcpy", 16),
        ("memcpy", 128),
        ("memcpy", 256),
    ]:
        els[f"{kernel}{size}"] = _el(kernel, float(size), 1410.0)
    layout = [
        [("gemm4096", "gpu0"), ("layernorm8192", "gpu1")],
        [("layernorm8192", "gpu0")],
        [("memcpy16", "gpu0"), ("layernorm8192", "gpu0")],
        [("layernorm8192", "gpu0"), ("memcpy256", "gpu1")],
        [("produce", "gpu1")],
        [("consume", "gpu1")],
        [("gemm4096", "gpu0"), ("gemm4096", "gpu1")],
        [("layernorm1024", "gpu0"), ("gemm1024", "gpu1")],
        [("layernorm8192", "gpu1")],
        [("memcpy128", "gpu1"), ("layernorm4096", "gpu1")],
        [("gemm3072", "gpu1")],
    ]
    gaps = [0.0, 5e-4, 0.0, 0.0, 1e-3, 0.0, 0.0, 0.0, 0.0, 1e-3, 0.0]
    res = _placed_check(els, ["gpu0", "gpu1"], layout, gaps, seed=252_000, runs=30)
    _named_cache_pair(res)
    assert res.found[0].devices == ("gpu1",)


def test_a_heat_prefix_is_not_pinned_on_an_earlier_pair_that_barely_deviates() -> None:
    # The first deviating prefix ends with a heater and no pair of it deviates; looking
    # back finds an earlier filler pair whose test deviates by a stray 1 mJ against the
    # prefix's 17 J of heat. It must not take the blame: the prefix is heat.
    els = {
        "heat": _el("gemm", 65536.0, 1200.0),
        "probe": _el("layernorm", 16384.0, 1200.0),
        "memcpy128": _el("memcpy", 128.0, 1200.0),
        "memcpy256": _el("memcpy", 256.0, 1200.0),
        "layernorm1024": _el("layernorm", 1024.0, 1200.0),
        "layernorm4096": _el("layernorm", 4096.0, 1200.0),
        "gemm4096": _el("gemm", 4096.0, 1200.0),
        "memcpy64": _el("memcpy", 64.0, 1200.0),
        "layernorm8192": _el("layernorm", 8192.0, 1200.0),
    }
    layout = [
        [("memcpy128", "gpu0")],
        [("memcpy256", "gpu0"), ("memcpy256", "gpu0")],
        [("layernorm1024", "gpu0"), ("layernorm4096", "gpu0")],
        [("gemm4096", "gpu0"), ("memcpy256", "gpu0")],
        [("gemm4096", "gpu0"), ("memcpy64", "gpu0")],
        *([[("heat", "gpu0")]] * 17),
        [("probe", "gpu0")],
        [("layernorm8192", "gpu0")],
    ]
    gaps = [1e-3, 5e-4, 1e-3, 1e-3, 1e-4, 5e-4] + [0.0] * 18
    res = _placed_check(els, ["gpu0"], layout, gaps, seed=556_000, runs=30, mechanism="thermal")
    assert res.deviation and res.found
    first = res.found[0]
    assert first.mechanism == "thermal", first.evidence
    assert first.scope == "prefix" or "heat" in first.elements
