"""The block detector's smallest block follows from n and the level, and is detectable."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from eopt.runs.stats import (
    _block_statistics,
    _candidate_blocks,
    block_p_floor,
    default_min_block,
    detect_state_change,
    min_detectable_block,
)


@pytest.mark.parametrize(("n", "m"), [(8, 2), (9, 3), (10, 4)])
def test_p_floor_is_the_share_of_placements_that_reach_the_observed_maximum(n, m):
    # Independent count: place the m high runs everywhere and see which placements
    # give the search's maximum (a clean two-level series).
    a, b = _candidate_blocks(n, min(m, n - m))
    placements = list(itertools.combinations(range(n), m))
    stats = []
    for where in placements:
        x = np.zeros(n)
        x[list(where)] = 1.0
        stats.append(float(_block_statistics(x[None, :], a, b)[0].max()))
    best = max(stats)
    hits = sum(s >= best * (1 - 1e-9) for s in stats)
    assert hits / len(placements) == pytest.approx(block_p_floor(n, m))


def test_a_three_run_block_at_34_runs_cannot_reach_the_per_series_level():
    # The documented case: 34 placements of C(34, 3).
    assert block_p_floor(34, 3) == pytest.approx(34 / 5984)
    assert block_p_floor(34, 3) > 0.005
    assert default_min_block(34, 0.005) == 4


@pytest.mark.parametrize("level", [0.005, 0.01, 0.05])
def test_the_smallest_block_is_the_first_that_can_reach_the_level(level):
    for n in range(8, 120):
        m = min_detectable_block(n, level)
        if m < n // 2:
            assert block_p_floor(n, m) <= level / 4
        if m > 1:
            assert block_p_floor(n, m - 1) > level / 4
        assert default_min_block(n, level) >= max(3, n // 10, m)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("n", [20, 34, 64])
def test_every_allowed_block_size_is_found(n, seed):
    level = 0.005
    m = default_min_block(n, level)
    rng = np.random.default_rng(seed)
    found = 0
    trials = 8
    for trial in range(trials):
        x = 100.0 * (1.0 + 0.01 * rng.standard_normal(n))
        start = int(rng.integers(0, n - m + 1))
        x[start : start + m] *= 1.2
        sc = detect_state_change(x, alpha=level, min_effect=0.02, seed=trial)
        edges = {s.start for s in sc.segments[1:]}
        found += sc.detected and edges <= {start, start + m}
    assert found >= trials - 1


@pytest.mark.parametrize("seed", [4, 5])
def test_no_block_in_exchangeable_runs_at_about_the_level(seed):
    rng = np.random.default_rng(seed)
    alarms = sum(
        detect_state_change(rng.standard_normal(34) + 50.0, alpha=0.05, seed=i).detected
        for i in range(40)
    )
    # 40 trials at 5 %: more than 8 alarms has probability below 0.5 %.
    assert alarms <= 8
