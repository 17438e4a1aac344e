"""``--shard K/N``: a deterministic share of a sweep's grid, for job arrays.

A Slurm job array (or submitit, or any launcher that starts N copies of one command with
an index) runs ``eopt sweep … --shard K/N -o part-K.jsonl`` for K = 1 … N; each copy
measures its share of the grid's operating points, and ``eopt library merge`` joins the
parts. Every copy computes the same split from the grid alone, so no copy needs to know
about another, and together they measure every cell exactly once.

The unit of a share is an operating point with all its implementations (its static power
is measured once, :mod:`eopt.runs.point`). Points are dealt longest first to the share
with the least expected work so far (ties: the lower K), the classic greedy
longest-processing-time split, whose largest share is within 4/3 of the best possible.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from eopt.model.operating_point import OperatingPoint

__all__ = ["MAX_SHARDS", "Shard", "ShardError", "expected_cost", "shard_points", "split_points"]

#: The most shares a grid may be split into.
MAX_SHARDS = 10_000

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class ShardError(ValueError):
    """A ``--shard`` that is not ``K/N`` with 1 ≤ K ≤ N."""


@dataclass(frozen=True)
class Shard:
    """Share ``index`` of ``count`` (both counted from 1, as job arrays do).

    Attributes:
        index: K, 1 ≤ K ≤ N.
        count: N ≥ 1.
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS:
            raise ShardError(f"--shard {self.label()}: N must be 1 … {MAX_SHARDS}")
        if not 1 <= self.index <= self.count:
            raise ShardError(
                f"--shard {self.label()}: K must be 1 … N (shares are counted from 1, "
                f"e.g. --shard $SLURM_ARRAY_TASK_ID/{self.count} with --array=1-{self.count})"
            )

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"2/3"`` → share 2 of 3.

        Raises:
            ShardError: for anything but ``K/N`` with 1 ≤ K ≤ N.
        """
        found = _SPEC.match(text)
        if found is None:
            raise ShardError(f"--shard {text!r}: expected K/N, e.g. --shard 2/3 (share 2 of 3)")
        return cls(int(found.group(1)), int(found.group(2)))

    def label(self) -> str:
        """``"2/3"``."""
        return f"{self.index}/{self.count}"


def expected_cost(point: OperatingPoint, impls: int, top_clock_mhz: float | None) -> float:
    """The expected work of a point, in units of one cell at the highest clock.

    A cell takes at least the repeat policy's time, and longer where each invocation is
    slower: compute-bound work slows as 1/f_SM, so a point costs
    ``impls × f_top / f_SM`` (``impls`` where the clock is left alone). Memory clocks and
    power limits are taken not to change it.
    """
    clock = point.sm_clock_mhz
    if clock is None or top_clock_mhz is None or not clock > 0:
        return float(impls)
    return impls * top_clock_mhz / clock


def split_points(
    points: Sequence[OperatingPoint], impls: int, count: int
) -> list[list[OperatingPoint]]:
    """Deal ``points`` into ``count`` shares of about equal expected work.

    Args:
        points: The grid's operating points, in sweep order.
        impls: Implementations per point.
        count: How many shares.

    Returns:
        ``count`` lists of points, each in sweep order (some empty when there are fewer
        points than shares).
    """
    clocks = [p.sm_clock_mhz for p in points if p.sm_clock_mhz is not None]
    top = max(clocks) if clocks else None
    costs = [expected_cost(p, impls, top) for p in points]
    # Longest first; equal costs in sweep order, so the deal depends on the grid alone.
    order = sorted(range(len(points)), key=lambda i: (-costs[i], i))
    loads = [0.0] * count
    dealt: list[list[int]] = [[] for _ in range(count)]
    for i in order:
        least = min(range(count), key=lambda k: (loads[k], k))
        loads[least] += costs[i]
        dealt[least].append(i)
    return [[points[i] for i in sorted(share)] for share in dealt]


def shard_points(
    points: Sequence[OperatingPoint], impls: int, shard: Shard
) -> list[OperatingPoint]:
    """The points of ``shard`` (:func:`split_points`), in sweep order."""
    return split_points(points, impls, shard.count)[shard.index - 1]
