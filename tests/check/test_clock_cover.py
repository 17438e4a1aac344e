"""After a clock change is found on one of two GPUs, the refined prediction covers the run.

Each test draws a 2-GPU schedule from its seed under the simulator's default, realistic
noise: a few fillers, then a clock change on gpu0 (a copy at a high clock, a GEMM at a
lower one, back to back), then fillers at the new clock on gpu0, alone on gpu1 or
co-started on both, with random gaps. The change settles over 20 ms, longer than the whole
schedule, so gpu0's later elements, its gaps and its idle tail all run at the unsettled
clock, and gpu0 may start after gpu1 (an idle lead-in at the clock it starts at).
"""

from __future__ import annotations

import numpy as np
import pytest

from eopt.check.runner import SimElement, SimRunner
from eopt.check.workflow import CheckResult, characterize_element, check_schedule
from tests.check.placed import place_groups

RUNS = 20
SEEDS = tuple(range(1, 11))
DEVICES = ("gpu0", "gpu1")


def _schedule(
    seed: int,
) -> tuple[dict[str, SimElement], list[list[tuple[str, str]]], list[float]]:
    """Elements, groups (members co-start) and the gap before each group, in s."""
    rng = np.random.default_rng(seed)
    f1 = float(rng.choice([1410.0, 1200.0]))
    f2 = float(rng.choice([900.0, 1005.0, 1110.0]))
    f_other = float(rng.choice([1410.0, 1200.0, 1005.0]))
    els = {
        "fast": SimElement(
            "memcpy", workload={"bytes": float(rng.choice([128, 256])) * 2**20}, sm_clock_mhz=f1
        ),
        "slow": SimElement(
            "gemm", workload={"m": 2048.0, "n": 2048.0, "k": 2048.0}, sm_clock_mhz=f2
        ),
    }

    def filler(device: str, after: bool) -> str:
        # One clock per device before and after the change: fillers never change it.
        clock = (f2 if after else f1) if device == "gpu0" else f_other
        name = f"f{len(els)}@{device}"
        if rng.random() < 0.5:
            size = float(rng.choice([64, 128, 256])) * 2**20
            els[name] = SimElement("memcpy", workload={"bytes": size}, sm_clock_mhz=clock)
        else:
            rows = float(rng.choice([2048, 4096, 8192]))
            els[name] = SimElement("layernorm", workload={"rows": rows}, sm_clock_mhz=clock)
        return name

    gap = [0.0, 1e-4, 5e-4, 1e-3]
    groups: list[list[tuple[str, str]]] = []
    gaps: list[float] = []
    for _ in range(int(rng.integers(0, 3))):
        d = str(rng.choice(DEVICES))
        groups.append([(filler(d, False), d)])
        gaps.append(float(rng.choice(gap)))
    # The consumer right after its producer (a gap would let the change settle).
    groups += [[("fast", "gpu0")], [("slow", "gpu0")]]
    gaps += [float(rng.choice(gap[:3])), 0.0]
    for _ in range(int(rng.integers(2, 5))):
        kind = str(rng.choice(["gpu0", "gpu1", "both"]))
        devs = DEVICES if kind == "both" else (kind,)
        groups.append([(filler(d, True), d) for d in devs])
        gaps.append(float(rng.choice(gap)))
    return els, groups, gaps


def _check(seed: int) -> CheckResult:
    els, groups, gaps = _schedule(seed)
    runner = SimRunner(els, list(DEVICES), mechanisms="clock_state")
    names = list(dict.fromkeys(n for g in groups for n, _ in g))
    lib = {
        n: characterize_element(runner, n, DEVICES[0], RUNS, seed=seed * 7919 + 1000 * k)
        for k, n in enumerate(names)
    }
    placements = place_groups(lib, groups, gaps)
    return check_schedule(placements, list(lib.values()), runner, runs=RUNS, seed=seed * 31)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_clock_change_on_one_of_two_gpus_is_covered_after_refinement(seed: int) -> None:
    res = _check(seed)
    assert res.deviation
    first = res.found[0]
    assert first.mechanism == "clock_state", first.evidence
    assert set(first.elements) >= {"fast", "slow"}
    # Nothing is left to blame on the other GPU, and one finding is enough.
    assert [f.mechanism for f in res.found] == ["clock_state"], res.log
    assert res.refined_covers, res.log
