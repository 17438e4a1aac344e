"""Statistics of repeated runs: summaries, bootstrap CIs, drift and state changes.

Everything here is pure and seeded: the same runs and seed give the same intervals and
the same flags.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Drift",
    "Segment",
    "StateChange",
    "Summary",
    "block_p_floor",
    "bootstrap_ci",
    "default_min_block",
    "detect_state_change",
    "detect_warmup_drift",
    "min_detectable_block",
    "permutations_for",
    "summarize",
]


@dataclass(frozen=True)
class Summary:
    """Summary of n single-run values of one quantity.

    Attributes:
        n: Number of runs.
        mean: Sample mean.
        var: Unbiased variance of a single run (0 when n < 2).
        median: Sample median.
        ci_mean: Bootstrap percentile interval of the mean at ``confidence``.
        ci_median: Bootstrap percentile interval of the median at ``confidence``.
        confidence: Coverage level of the intervals (e.g. 0.95).
    """

    n: int
    mean: float
    var: float
    median: float
    ci_mean: tuple[float, float]
    ci_median: tuple[float, float]
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "n": self.n,
            "mean": self.mean,
            "var": self.var,
            "median": self.median,
            "ci_mean": list(self.ci_mean),
            "ci_median": list(self.ci_median),
            "confidence": self.confidence,
        }


def _as_array(values: Sequence[float] | np.ndarray, what: str = "values") -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{what}: need a non-empty 1-D sequence of numbers")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what}: contains NaN or infinite values")
    return arr


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    statistic: str = "mean",
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean or median of ``values``.

    Args:
        values: Single-run values.
        statistic: ``mean`` or ``median``.
        confidence: Coverage level in (0, 1).
        n_boot: Number of resamples.
        seed: Seed of the resampling (numpy ``default_rng``).

    Returns:
        (low, high); both equal the value itself for a single run.

    Assumptions:
        Runs are independent and identically distributed; with a flagged drift or state
        change the interval describes the mixture, not either state.
    """
    arr = _as_array(values)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if statistic not in ("mean", "median"):
        raise ValueError(f"statistic must be 'mean' or 'median', got {statistic!r}")
    if arr.size == 1:
        return (float(arr[0]), float(arr[0]))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(n_boot, arr.size))
    resampled = arr[idx]
    stat = resampled.mean(axis=1) if statistic == "mean" else np.median(resampled, axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(stat, [alpha / 2, 1 - alpha / 2])
    return (float(low), float(high))


def summarize(
    values: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> Summary:
    """n, mean, single-run variance, median and bootstrap CIs of ``values``."""
    arr = _as_array(values)
    var = float(arr.var(ddof=1)) if arr.size > 1 else 0.0
    return Summary(
        n=int(arr.size),
        mean=float(arr.mean()),
        var=var,
        median=float(np.median(arr)),
        ci_mean=bootstrap_ci(arr, "mean", confidence, n_boot, seed),
        ci_median=bootstrap_ci(arr, "median", confidence, n_boot, seed + 1),
        confidence=confidence,
    )


# Warm-up drift ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Drift:
    """A trend over the first runs.

    Attributes:
        detected: Whether the trend is both significant and large.
        runs: How many leading runs were tested.
        slope: Change per run (units of the values).
        relative_change: slope × (runs − 1) / |mean| over the tested runs.
        p_value: Two-sided p-value of the slope (least squares t-test).
    """

    detected: bool
    runs: int
    slope: float
    relative_change: float
    p_value: float


def detect_warmup_drift(
    values: Sequence[float] | np.ndarray,
    first: int | None = None,
    alpha: float = 0.01,
    min_effect: float = 0.01,
) -> Drift:
    """Test for a linear trend over the first runs (a device still warming up).

    Args:
        values: Single-run values in the order they were measured.
        first: Leading runs to test; default: the first half, at least 6.
        alpha: Significance level of the slope test.
        min_effect: Smallest relative change over the tested runs that counts (a
            significant but negligible trend is not flagged).

    Returns:
        The trend; ``detected`` is False with fewer than 5 runs.
    """
    arr = _as_array(values)
    m = first if first is not None else max(6, arr.size // 2)
    m = min(m, arr.size)
    if m < 5:
        return Drift(False, m, 0.0, 0.0, 1.0)
    head = arr[:m]
    scale = abs(float(head.mean()))
    if np.ptp(head) == 0 or scale == 0:
        return Drift(False, m, 0.0, 0.0, 1.0)
    # Imported here: scipy.stats takes longer to import than most commands take to run.
    from scipy import stats as sps

    fit = sps.linregress(np.arange(m, dtype=float), head)
    rel = float(fit.slope) * (m - 1) / scale
    p = float(fit.pvalue)
    return Drift(bool(p < alpha and abs(rel) >= min_effect), m, float(fit.slope), rel, p)


# State changes ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Segment:
    """A block of consecutive runs in one state: runs ``start`` … ``stop − 1``."""

    start: int
    stop: int
    mean: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {"start": self.start, "stop": self.stop, "mean": self.mean}


@dataclass(frozen=True)
class StateChange:
    """Blocks of runs whose levels differ.

    Attributes:
        detected: Whether at least one block differs from the rest.
        segments: The blocks (one block when nothing was detected).
        p_values: Permutation p-value of each accepted block.
    """

    detected: bool
    segments: tuple[Segment, ...]
    p_values: tuple[float, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "detected": self.detected,
            "segments": [s.to_dict() for s in self.segments],
            "p_values": list(self.p_values),
        }


#: Smallest block the default rule ever uses, in runs.
MIN_BLOCK_FLOOR = 3


def block_p_floor(n: int, m: int) -> float:
    """The smallest p-value the block search can give a block of ``m`` runs among ``n``.

    Under the permutation null every placement of the block's ``m`` values is equally
    likely; however far they lie from the rest, a permutation matches the observed
    maximum whenever it puts them where some candidate is: one of the ``n − m + 1``
    contiguous blocks of ``m``, or the ``m − 1`` non-contiguous complements of a
    contiguous block of ``n − m`` (a change at both ends). So the exact floor is
    ``n / C(n, m)`` (e.g. 32 + 2 = 34 of C(34, 3) = 5984 placements: 0.0057).

    Args:
        n: Runs in the series.
        m: Runs in the block (1 ≤ m < n).
    """
    if not 1 <= m < n:
        raise ValueError(f"a block of {m} runs among {n} must have 1 ≤ m < n")
    return n / math.comb(n, m)


def min_detectable_block(n: int, level: float) -> int:
    """The smallest block whose p-value can fall well below ``level``.

    The smallest ``m`` with :func:`block_p_floor` ``(n, m) ≤ level / 4``, so that a
    permutation estimate of the p-value (:func:`permutations_for`) lands below
    ``level`` for a clear block; ``n // 2`` when none does (the series is too short
    for any block at this level).

    Args:
        n: Runs in the series (≥ 2).
        level: Significance level the block is tested at (per series).
    """
    if not 0 < level < 1:
        raise ValueError(f"the level must be in (0, 1), got {level!r}")
    for m in range(1, n // 2 + 1):
        if block_p_floor(n, m) <= level / 4:
            return m
    return max(n // 2, 1)


def default_min_block(n: int, level: float) -> int:
    """The default smallest block: ``max(3, n // 10, min_detectable_block(n, level))``.

    Three runs and a tenth of the series keep single outliers from making a block; the
    last term keeps every block the rule allows detectable at ``level`` (at n = 34 and
    level 0.005, four runs: a three-run block cannot reach p < 0.0057).

    Args:
        n: Runs in the series.
        level: Significance level of the block test (per series).
    """
    return max(MIN_BLOCK_FLOOR, n // 10, min_detectable_block(n, level))


def permutations_for(level: float, n_perm: int) -> int:
    """Permutations enough for a p-value estimate to resolve ``level``: at least 20/level.

    Args:
        level: Significance level of the test.
        n_perm: Permutations asked for (the larger of the two is used).
    """
    return max(int(n_perm), math.ceil(20.0 / level) - 1)


def _candidate_blocks(n: int, min_block: int) -> tuple[np.ndarray, np.ndarray]:
    """Edges (a, b) of every candidate block [a, b) with both it and the rest ≥ min_block.

    Long series use a coarser grid of edges (about 100 positions) to bound the work.
    """
    step = max(1, n // 100)
    edges = np.unique(np.append(np.arange(0, n + 1, step), n))
    a, b = np.meshgrid(edges, edges, indexing="ij")
    ok = (b - a >= min_block) & (n - (b - a) >= min_block)
    return a[ok], b[ok]


def _block_statistics(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pooled two-sample |t| between block [a, b) and the other runs, per row of ``x``.

    The pooled (not Welch) statistic is maximized by the split that explains the most
    variance, so it does not favour a few runs that happen to agree closely.
    """
    n = x.shape[-1]
    zeros = np.zeros((*x.shape[:-1], 1))
    c1 = np.concatenate([zeros, np.cumsum(x, axis=-1)], axis=-1)
    c2 = np.concatenate([zeros, np.cumsum(x * x, axis=-1)], axis=-1)
    in1, in2 = c1[..., b] - c1[..., a], c2[..., b] - c2[..., a]
    out1, out2 = c1[..., -1:] - in1, c2[..., -1:] - in2
    ni, no = (b - a).astype(float), (n - (b - a)).astype(float)
    mi, mo = in1 / ni, out1 / no
    ss = np.maximum(in2 - ni * mi**2, 0.0) + np.maximum(out2 - no * mo**2, 0.0)
    se = np.sqrt(ss / max(n - 2, 1) * (1.0 / ni + 1.0 / no))
    # Floor the standard error so blocks of identical values do not divide by zero.
    floor = 1e-12 * (np.abs(x).mean(axis=-1, keepdims=True) + 1e-300)
    return np.abs(mi - mo) / np.maximum(se, floor)


def _best_block(
    x: np.ndarray, min_block: int, n_perm: int, rng: np.random.Generator, min_effect: float
) -> tuple[int, int, float, float]:
    """(a, b, permutation p-value, relative level change) of the most distinct block."""
    a, b = _candidate_blocks(x.size, min_block)
    stat = _block_statistics(x[None, :], a, b)[0]
    j = int(np.argmax(stat))
    observed = float(stat[j])
    lo, hi = int(a[j]), int(b[j])
    inside = float(x[lo:hi].mean())
    outside = float(np.concatenate([x[:lo], x[hi:]]).mean())
    scale = max(abs(inside), abs(outside))
    rel = abs(inside - outside) / scale if scale > 0 else 0.0
    if rel < min_effect:
        return lo, hi, 1.0, rel  # too small to flag whatever the test says: skip it
    perms = rng.permuted(np.tile(x, (n_perm, 1)), axis=1)
    null_max = _block_statistics(perms, a, b).max(axis=1)
    p = (1.0 + float(np.sum(null_max >= observed))) / (n_perm + 1.0)
    return lo, hi, p, rel


def detect_state_change(
    values: Sequence[float] | np.ndarray,
    alpha: float = 0.01,
    min_effect: float = 0.01,
    min_block: int | None = None,
    n_perm: int = 499,
    seed: int = 0,
) -> StateChange:
    """Find blocks of consecutive runs at different levels (binary segmentation).

    The most distinct block [a, b) is the one maximizing the pooled t between its runs and
    all the others (a block at either end is a single change point, one in the middle an
    excursion and return); its significance comes from a permutation test of that maximum,
    so testing every block does not inflate false alarms. The pieces between accepted edges
    are searched again.

    Args:
        values: Single-run values in the order they were measured.
        alpha: Family-wise significance level (the k-th search is tested at alpha / k).
        min_effect: Smallest relative difference of block means that counts.
        min_block: Smallest block; default :func:`default_min_block` ``(n, alpha)``, so
            every block it allows can reach p < alpha.
        n_perm: Permutations per test; raised to :func:`permutations_for` ``(alpha)``.
        seed: Seed of the permutations.

    Assumptions:
        Within a state, runs are exchangeable (independent, identically distributed).
    """
    arr = _as_array(values)
    mb = min_block if min_block is not None else default_min_block(arr.size, alpha)
    n_perm = permutations_for(alpha, n_perm)
    rng = np.random.default_rng(seed)
    cuts: set[int] = set()
    p_values: list[float] = []
    todo = [(0, arr.size)]
    tests = 0
    while todo:
        lo, hi = todo.pop()
        if hi - lo < 2 * mb or np.ptp(arr[lo:hi]) == 0:
            continue
        a, b, p, rel = _best_block(arr[lo:hi], mb, n_perm, rng, min_effect)
        tests += 1
        # Bonferroni over the searches made so far, so that refining the pieces of an
        # accepted split does not add false alarms.
        if p < alpha / tests and rel >= min_effect:
            p_values.append(p)
            inner = [e for e in (lo + a, lo + b) if lo < e < hi]
            cuts.update(inner)
            bounds = [lo, *inner, hi]
            todo.extend(itertools.pairwise(bounds))
    bounds = [0, *sorted(cuts), arr.size]
    segments = tuple(Segment(a, b, float(arr[a:b].mean())) for a, b in itertools.pairwise(bounds))
    return StateChange(bool(cuts), segments, tuple(p_values))
