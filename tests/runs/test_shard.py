"""``--shard K/N``: every cell in exactly one share, shares of about equal expected work,
and the shares merged equal the serial sweep."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eopt.model.library import merge_libraries, read_library
from eopt.model.operating_point import OperatingPoint
from eopt.runs.shard import Shard, ShardError, expected_cost, shard_points, split_points
from eopt.runs.sweep import sweep


@pytest.mark.parametrize(
    ("text", "match"),
    [("0/3", "K must be 1"), ("4/3", "K must be 1"), ("1/0", "N must be 1"),
     ("3", "expected K/N"), ("a/b", "expected K/N"), ("-1/3", "expected K/N")],
)  # fmt: skip
def test_bad_shards_are_refused_with_the_form_to_write(text, match):
    with pytest.raises(ShardError, match=match) as info:
        Shard.parse(text)
    assert "--shard" in str(info.value) and "\n" not in str(info.value)


def test_a_shard_reads_as_written():
    assert Shard.parse(" 2 / 3 ") == Shard(2, 3) and Shard(2, 3).label() == "2/3"


clock_lists = st.lists(
    st.sampled_from([210.0 + 15 * i for i in range(81)]), min_size=1, max_size=12, unique=True
)


@given(clock_lists, st.integers(1, 5), st.integers(1, 4))
def test_every_point_is_in_exactly_one_share(clocks, count, impls):
    points = [OperatingPoint(c) for c in sorted(clocks, reverse=True)]
    shares = split_points(points, impls, count)
    assert len(shares) == count
    dealt = [p for share in shares for p in share]
    assert sorted(dealt, key=points.index) == points  # each once, none lost
    for share in shares:  # each share keeps the sweep's order
        assert share == sorted(share, key=points.index)
    for k in range(1, count + 1):  # and every copy computes the same split
        assert shard_points(points, impls, Shard(k, count)) == shares[k - 1]


@given(clock_lists.filter(lambda c: len(c) <= 7), st.integers(2, 3))
def test_shares_are_within_four_thirds_of_the_best_split(clocks, count):
    points = [OperatingPoint(c) for c in sorted(clocks, reverse=True)]
    top = max(clocks)
    cost = {p: expected_cost(p, 3, top) for p in points}
    largest = max(sum(cost[p] for p in share) for share in split_points(points, 3, count))
    # The best split, by trying every assignment of points to shares.
    best = min(
        max(sum(cost[p] for p, s in zip(points, assign, strict=True) if s == k)
            for k in range(count))
        for assign in itertools.product(range(count), repeat=len(points))
    )  # fmt: skip
    assert largest <= 4 / 3 * best + 1e-9


def test_lower_clocks_are_expected_to_cost_more():
    assert expected_cost(OperatingPoint(705.0), 3, 1410.0) == pytest.approx(6.0)
    assert expected_cost(OperatingPoint(None, None, 300.0), 3, 1410.0) == 3.0


def test_shards_merged_equal_the_serial_sweep(
    tmp_path, gemm, fast, sim_spec, acceptance_grid, serial_library, by_cell
):
    kernel = gemm()
    grid = acceptance_grid(kernel)
    parts = []
    for k in (1, 2, 3):
        part = tmp_path / f"part{k}.jsonl"
        result = sweep(kernel, grid, sim_spec, part, policy=fast, shard=Shard(k, 3))
        assert result.signatures and len(result.signatures) % len(grid.impls) == 0
        parts.append(part)
    sizes = [len(read_library(p)) for p in parts]
    assert sum(sizes) == len(grid) and min(sizes) > 0
    merged = merge_libraries(parts, tmp_path / "lib.jsonl")
    assert merged.duplicates == 0 and merged.pooled == ()
    assert by_cell(read_library(tmp_path / "lib.jsonl")) == by_cell(read_library(serial_library))


def test_a_share_without_points_measures_nothing(tmp_path, gemm, fast, sim_spec, acceptance_grid):
    kernel = gemm()
    grid = acceptance_grid(kernel)
    result = sweep(kernel, grid, sim_spec, tmp_path / "none.jsonl", policy=fast,
                   shard=Shard(7, 7))  # fmt: skip
    assert result.signatures == () and result.measured == ()
    assert not (tmp_path / "none.jsonl").exists()
