"""Statistics of ``eopt compare``: does variant B really cost less than variant A?

Input: one :class:`RunValues` per run of each variant (time and energy of one region, or
of the whole run), built by whoever reads the traces. Output: a :class:`Comparison` with

- medians and means of time, energy and mean power per variant, with bootstrap CIs;
- the relative reduction ``1 − stat_B / stat_A`` of the medians (and of the means), with
  bootstrap CIs from resampling A and B independently;
- the share of each run's energy that falls outside every region, by either definition
  (:data:`OUTSIDE_DEFINITIONS`), each named in the output;
- blocks of consecutive runs (in run order, by start time) in a different machine state,
  reported with their 1-based run indices; they stay in the main result, and the whole
  comparison is repeated without them (``without_blocks``). They are never dropped.

Everything is pure and seeded: the same runs and seed give the same numbers.

Example:
    >>> a = [RunValues(f"a{i}", i, 2.0 + 0.01 * (i % 3), 500.0 + i) for i in range(12)]
    >>> b = [RunValues(f"b{i}", i, 1.6 + 0.01 * (i % 3), 380.0 + i) for i in range(12)]
    >>> cmp = compare_runs(a, b, region="solve")
    >>> round(cmp.reduction.time.value, 2)
    0.2
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from eopt.runs.stats import default_min_block, detect_state_change

__all__ = [
    "OUTSIDE_DEFINITIONS",
    "SCHEMA",
    "Comparison",
    "Intervals",
    "OutsideShare",
    "Quantities",
    "Reduction",
    "Reductions",
    "RunValues",
    "StateBlock",
    "VariantSummary",
    "compare_runs",
    "format_runs",
    "outside_shares",
]

SCHEMA = "eopt.comparison/1"
CI_METHOD = (
    "percentile bootstrap: runs resampled with replacement within each variant, "
    "A and B independently; the three quantities of a run stay together"
)
MIN_RESAMPLES = 2000
#: Below this many runs a variant's percentile intervals are rough (they under-cover).
SMALL_N = 10
#: A block holding at least this share of its variant's runs moves the medians.
LARGE_BLOCK_SHARE = 0.25

Variant = Literal["a", "b"]
_QUANTITIES = ("time_s", "energy_j", "power_w")
_REDUCTION_KEYS = ("time", "energy", "power")


def _num(x: float | None) -> float | None:
    """A JSON-safe number: NaN and ±inf become None (``null``)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _ci(lo: float | None, hi: float | None) -> tuple[float | None, float | None]:
    return (_num(lo), _num(hi))


def format_runs(runs: Sequence[int]) -> str:
    """1-based run indices as ranges, e.g. ``[1, 2, 3, 7]`` → ``"1–3, 7"``."""
    parts: list[str] = []
    ordered = sorted(runs)
    for _, grp in itertools.groupby(enumerate(ordered), key=lambda p: p[1] - p[0]):
        seq = [r for _, r in grp]
        parts.append(str(seq[0]) if len(seq) == 1 else f"{seq[0]}–{seq[-1]}")
    return ", ".join(parts)


def _pct(x: float | None, signed: bool = True) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:+.1f} %" if signed else f"{100 * x:.1f} %"


def _less_more(x: float | None, what: str) -> str:
    """A reduction in words: 0.14 → "14.4 % less time", −0.03 → "3.0 % more time"."""
    if x is None:
        return f"an undefined change of {what}"
    return f"{100 * abs(x):.1f} % {'less' if x >= 0 else 'more'} {what}"


# Values --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunValues:
    """What one run contributes to a comparison.

    Attributes:
        label: Run id (e.g. the trace's file stem); named in errors and blocks.
        start_ns: Start of the run (ns, any epoch shared by the run set); sets run order.
        time_s: Duration of the region (or of the whole run when no region is asked), s.
        energy_j: Energy of the same span, J.
        outside_share: The run's energy outside every event (user region, kernel or
            copy) divided by its total energy (0 … 1), or None when unknown (the
            ``"events"`` definition of :data:`OUTSIDE_DEFINITIONS`).
        outside_share_regions: The run's energy outside every user region (kernels
            outside every region count as outside: the field note's definition,
            ``"regions"``), or None when unknown. :func:`outside_shares` gives both.
    """

    label: str
    start_ns: int
    time_s: float
    energy_j: float
    outside_share: float | None = None
    outside_share_regions: float | None = None

    def __post_init__(self) -> None:
        where = f"run {self.label!r}"
        if not isinstance(self.start_ns, (int, np.integer)) or isinstance(self.start_ns, bool):
            raise ValueError(f"{where}: start_ns must be an integer (ns), got {self.start_ns!r}")
        for name in ("time_s", "energy_j"):
            v = getattr(self, name)
            if not isinstance(v, (int, float, np.number)) or not math.isfinite(v):
                raise ValueError(f"{where}: {name} must be a finite number, got {v!r}")
        if self.time_s <= 0:
            raise ValueError(f"{where}: time_s must be > 0, got {self.time_s!r}")
        if self.energy_j < 0:
            raise ValueError(f"{where}: energy_j must be >= 0, got {self.energy_j!r}")
        for name in ("outside_share", "outside_share_regions"):
            s = getattr(self, name)
            if s is not None and (
                not isinstance(s, (int, float, np.number))
                or not math.isfinite(s)
                or not 0 <= s <= 1
            ):
                raise ValueError(f"{where}: {name} must be in [0, 1] or None, got {s!r}")

    def outside(self, definition: str) -> float | None:
        """The outside share by ``definition`` (a key of :data:`OUTSIDE_DEFINITIONS`)."""
        return self.outside_share_regions if definition == "regions" else self.outside_share

    @property
    def power_w(self) -> float:
        """Mean power over the span, W (energy_j / time_s)."""
        return self.energy_j / self.time_s


@dataclass(frozen=True)
class Quantities:
    """One statistic of time (s), energy (J) and mean power (W)."""

    time_s: float
    energy_j: float
    power_w: float

    def to_dict(self) -> dict[str, float | None]:
        """JSON-ready mapping (non-finite values as None)."""
        return {k: _num(getattr(self, k)) for k in _QUANTITIES}


@dataclass(frozen=True)
class Intervals:
    """Confidence intervals (low, high) of time (s), energy (J) and mean power (W)."""

    time_s: tuple[float | None, float | None]
    energy_j: tuple[float | None, float | None]
    power_w: tuple[float | None, float | None]

    def to_dict(self) -> dict[str, list[float | None]]:
        """JSON-ready mapping."""
        return {k: [_num(v) for v in getattr(self, k)] for k in _QUANTITIES}


#: What "outside every region" counts, by name. ``regions`` is the Kokkos field note's
#: (``shared/reference/kokkos-energy-note.txt``: the run's total "also counts the time
#: outside any region", against the energy of its regions), the default; ``events`` also
#: counts kernels and copies that lie outside every user region as inside.
OUTSIDE_DEFINITIONS: dict[str, str] = {
    "regions": "outside every user region (kernels outside every region count as outside)",
    "events": "outside every event (kernels outside every region count as inside)",
}


def outside_shares(att: Any) -> dict[str, float | None]:
    """Both outside shares of one run's attribution.

    Args:
        att: An :class:`eopt.attribute.engine.Attribution` made with ``calls=True``
            (without its calls only ``events`` is known).

    Returns:
        Share of the total energy by definition name (None where unknown).
    """
    total = float(att.total_energy_j)
    if total <= 0:
        return dict.fromkeys(OUTSIDE_DEFINITIONS)
    events = float(att.outside_energy_j) / total
    if not att.calls:
        return {"regions": None, "events": events}
    # What lies inside the user regions is what their outermost calls were charged (the
    # sharing rule splits the power among the calls running at each instant, so these
    # add up without counting an instant twice); top-level kernels and copies, which the
    # two definitions disagree on, are then outside. The regions lie inside the power
    # trace, where a kernel launched before it or after it need not.
    inside = [c.inclusive_energy_j for c in att.calls if c.depth == 0 and c.event.is_region]
    if not att.calls or any(e is None for e in inside):
        return {"regions": None, "events": events}
    regions = min(1.0, max(0.0, 1.0 - float(sum(inside)) / total))
    return {"regions": regions, "events": events}


@dataclass(frozen=True)
class OutsideShare:
    """Energy outside every region as a share of each run's total (fractions).

    Attributes:
        n: Runs that reported a share (the others are unknown, not zero).
        median: Median of the per-run shares.
        mean: Mean of the per-run shares.
    """

    n: int
    median: float
    mean: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {"n": self.n, "median": _num(self.median), "mean": _num(self.mean)}


@dataclass(frozen=True)
class VariantSummary:
    """Summary of one variant's runs.

    Attributes:
        name: Display name of the variant (e.g. ``fdbscan``).
        n: Number of runs.
        labels: Run labels in run order (index i − 1 is run i).
        median: Medians of per-run time, energy and mean power.
        mean: Means of per-run time, energy and mean power (power: mean of the per-run
            powers, not total energy / total time).
        ci_median: Bootstrap CIs of the medians.
        ci_mean: Bootstrap CIs of the means.
        outside_share: Energy outside every region by ``outside_definition``, or None
            when no run reported it.
        outside_definition: Which definition ``outside_share`` follows (a key of
            :data:`OUTSIDE_DEFINITIONS`).
        outside_other: The share by the other definition, or None when unknown.
    """

    name: str
    n: int
    labels: tuple[str, ...]
    median: Quantities
    mean: Quantities
    ci_median: Intervals
    ci_mean: Intervals
    outside_share: OutsideShare | None
    outside_definition: str = "regions"
    outside_other: OutsideShare | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "name": self.name,
            "n": self.n,
            "runs": list(self.labels),
            "median": self.median.to_dict(),
            "mean": self.mean.to_dict(),
            "ci_median": self.ci_median.to_dict(),
            "ci_mean": self.ci_mean.to_dict(),
        }


@dataclass(frozen=True)
class Reduction:
    """Relative reduction 1 − stat_B / stat_A (a fraction; > 0: B is lower).

    Attributes:
        value: The reduction of the observed statistics; None when stat_A is 0.
        ci: Bootstrap CI (low, high); None ends when undefined.
    """

    value: float | None
    ci: tuple[float | None, float | None]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {"value": _num(self.value), "ci": [_num(v) for v in self.ci]}


@dataclass(frozen=True)
class Reductions:
    """Reductions of time, energy and mean power."""

    time: Reduction
    energy: Reduction
    power: Reduction

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {k: getattr(self, k).to_dict() for k in _REDUCTION_KEYS}


@dataclass(frozen=True)
class StateBlock:
    """Consecutive runs of one variant in a different machine state than its main one.

    Attributes:
        variant: ``"a"`` or ``"b"``.
        runs: 1-based run indices in run order.
        labels: The runs' labels.
        median_time_s: Median time of the block's runs, s.
        median_energy_j: Median energy of the block's runs, J.
        mean_power_w: Mean of the block's per-run mean powers, W.
        time_ratio: Block median time / median time of the variant's other runs
            (1.5: the block is 1.5× slower).
        power_ratio: Block mean power / mean power of the variant's other runs.
        found_in: Series whose change points delimit the block (``time_s``, ``power_w``).
    """

    variant: Variant
    runs: tuple[int, ...]
    labels: tuple[str, ...]
    median_time_s: float
    median_energy_j: float
    mean_power_w: float
    time_ratio: float
    power_ratio: float
    found_in: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "variant": self.variant,
            "runs": list(self.runs),
            "labels": list(self.labels),
            "n": len(self.runs),
            "median_time_s": _num(self.median_time_s),
            "median_energy_j": _num(self.median_energy_j),
            "mean_power_w": _num(self.mean_power_w),
            "time_ratio": _num(self.time_ratio),
            "power_ratio": _num(self.power_ratio),
            "found_in": list(self.found_in),
        }


@dataclass(frozen=True)
class Comparison:
    """Variant B against variant A over repeated runs.

    Attributes:
        region: The compared region, or None for whole runs.
        names: Display names of A and B.
        a: Summary of A's runs (all of them, blocks included).
        b: Summary of B's runs (all of them, blocks included).
        reduction: Reductions of the medians (1 − median_B / median_A) with CIs.
        reduction_mean: Reductions of the means with CIs.
        state_blocks: Blocks of runs in another machine state, in both variants.
        without_blocks: The same comparison over the runs outside every block (its own
            run indices are renumbered), or None when there is no block.
        warnings: Plain-words cautions about this result.
        confidence: Coverage of every interval (e.g. 0.95).
        resamples: Bootstrap resamples.
        seed: Seed of the resampling and of the state-change permutations.
        ci_method: How the intervals were computed.
        state_detection: Settings of the block search, or None when it was off.
    """

    region: str | None
    names: tuple[str, str]
    a: VariantSummary
    b: VariantSummary
    reduction: Reductions
    reduction_mean: Reductions
    state_blocks: tuple[StateBlock, ...]
    without_blocks: Comparison | None
    warnings: tuple[str, ...]
    confidence: float
    resamples: int
    seed: int
    ci_method: str
    state_detection: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        """The ``eopt.comparison/1`` JSON object (no NaN or infinity: those are null)."""
        return {
            "schema": SCHEMA,
            "region": self.region,
            "confidence": self.confidence,
            "resamples": self.resamples,
            "seed": self.seed,
            "ci_method": self.ci_method,
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "reduction": self.reduction.to_dict(),
            "reduction_mean": self.reduction_mean.to_dict(),
            "outside_share": {
                "definition": self.a.outside_definition,
                "a": self.a.outside_share.to_dict() if self.a.outside_share else None,
                "b": self.b.outside_share.to_dict() if self.b.outside_share else None,
                "other": {
                    "definition": _other_definition(self.a.outside_definition),
                    "a": self.a.outside_other.to_dict() if self.a.outside_other else None,
                    "b": self.b.outside_other.to_dict() if self.b.outside_other else None,
                },
            },
            "state_blocks": [blk.to_dict() for blk in self.state_blocks],
            "state_detection": dict(self.state_detection) if self.state_detection else None,
            "without_blocks": self.without_blocks.to_dict() if self.without_blocks else None,
            "warnings": list(self.warnings),
        }


# Bootstrap ----------------------------------------------------------------------------------
def _values(runs: Sequence[RunValues]) -> np.ndarray:
    """(3, n) array: time, energy, power of each run."""
    return np.array(
        [[r.time_s for r in runs], [r.energy_j for r in runs], [r.power_w for r in runs]]
    )


def _resampled_stats(x: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Medians and means, (3, R) each, of the resamples ``x[:, idx]`` (idx is (R, n))."""
    res = x[:, idx]  # (3, R, n): a run's three quantities move together
    return np.median(res, axis=2), res.mean(axis=2)


def _quantile_pairs(stat: np.ndarray, confidence: float) -> list[tuple[float | None, float | None]]:
    """Percentile interval of each row of ``stat``; None ends where a resample is undefined."""
    alpha = 1.0 - confidence
    out: list[tuple[float | None, float | None]] = []
    for row in stat:
        if not np.all(np.isfinite(row)):
            out.append((None, None))
            continue
        lo, hi = np.quantile(row, [alpha / 2, 1 - alpha / 2])
        out.append(_ci(lo, hi))
    return out


def _reductions(
    obs_a: np.ndarray, obs_b: np.ndarray, boot_a: np.ndarray, boot_b: np.ndarray, conf: float
) -> Reductions:
    with np.errstate(divide="ignore", invalid="ignore"):
        value = 1.0 - obs_b / obs_a
        boot = 1.0 - boot_b / boot_a
    cis = _quantile_pairs(boot, conf)
    return Reductions(*(Reduction(_num(v), ci) for v, ci in zip(value, cis, strict=True)))


def _other_definition(definition: str) -> str:
    return "events" if definition == "regions" else "regions"


def _outside(runs: Sequence[RunValues], definition: str) -> OutsideShare | None:
    values = [r.outside(definition) for r in runs]
    shares = np.array([v for v in values if v is not None])
    if shares.size == 0:
        return None
    return OutsideShare(int(shares.size), float(np.median(shares)), float(shares.mean()))


def _summary(
    name: str,
    runs: Sequence[RunValues],
    x: np.ndarray,
    boot_med: np.ndarray,
    boot_mean: np.ndarray,
    conf: float,
    outside: str,
) -> VariantSummary:
    med, mean = np.median(x, axis=1), x.mean(axis=1)
    return VariantSummary(
        name=name,
        n=len(runs),
        labels=tuple(r.label for r in runs),
        median=Quantities(*(float(v) for v in med)),
        mean=Quantities(*(float(v) for v in mean)),
        ci_median=Intervals(*_quantile_pairs(boot_med, conf)),
        ci_mean=Intervals(*_quantile_pairs(boot_mean, conf)),
        outside_share=_outside(runs, outside),
        outside_definition=outside,
        outside_other=_outside(runs, _other_definition(outside)),
    )


# Machine-state blocks -----------------------------------------------------------------------
def _rel(x: float, ref: float) -> float:
    return abs(x - ref) / abs(ref) if ref != 0 else (0.0 if x == 0 else math.inf)


def _merge_short(bounds: list[int], t: np.ndarray, p: np.ndarray, min_block: int) -> list[int]:
    """Merge pieces shorter than ``min_block`` into their nearer neighbour.

    Time and power may place the same change one or two runs apart; the union of their
    cuts then leaves a sliver too short to test, which belongs to one of its neighbours.
    """
    bounds = list(bounds)
    while len(bounds) > 2:
        sizes = np.diff(bounds)
        k = int(np.argmin(sizes))
        if sizes[k] >= min_block:
            break
        lo, hi = bounds[k], bounds[k + 1]
        mt, mp = float(np.median(t[lo:hi])), float(np.median(p[lo:hi]))

        def dist(a: int, b: int, mt: float = mt, mp: float = mp) -> float:
            return _rel(mt, float(np.median(t[a:b]))) + _rel(mp, float(np.median(p[a:b])))

        left = dist(bounds[k - 1], lo) if k > 0 else math.inf
        right = dist(hi, bounds[k + 2]) if k + 2 < len(bounds) else math.inf
        del bounds[k if left <= right else k + 1]  # drop the edge shared with the nearer one
    return bounds


def _differs(x: np.ndarray, y: np.ndarray, level: str, alpha: float, min_effect: float) -> bool:
    """Whether runs ``x`` sit at another level than runs ``y`` (significant and large).

    Mann–Whitney U is rank-based, so one odd run in either piece does not decide it.
    """
    stat_x = float(np.median(x)) if level == "median" else float(x.mean())
    stat_y = float(np.median(y)) if level == "median" else float(y.mean())
    if _rel(stat_x, stat_y) < min_effect:
        return False
    if np.ptp(np.concatenate([x, y])) == 0:
        return False
    # Imported here: scipy.stats is most of `eopt compare`'s start-up, and a comparison
    # that stops at its inputs never gets here.
    from scipy import stats as sps

    p = float(sps.mannwhitneyu(x, y, alternative="two-sided").pvalue)
    return p < alpha


def _find_blocks(
    variant: Variant,
    runs: Sequence[RunValues],
    alpha: float,
    min_effect: float,
    min_block: int | None,
    n_perm: int,
    seed: int,
) -> list[StateBlock]:
    """Blocks of consecutive runs (in run order) outside the variant's main state.

    ``detect_state_change`` runs on per-run time and on per-run mean power; the union of
    their change points splits the runs into pieces. The largest piece is the main state
    (ties: the later one, the state the machine settled in). Change points say where a
    level changes, not which pieces share a level (an excursion and return leaves the
    runs before and after it in two pieces of one state), so every other piece joins the
    main state unless its time or power differs from the main piece's (Mann–Whitney U at
    ``alpha`` and a relative difference ≥ ``min_effect``).
    """
    x = _values(runs)
    t, p = x[0], x[2]
    n = t.size
    mb = min_block if min_block is not None else default_min_block(n, alpha / 2)
    cuts_by: dict[str, set[int]] = {}
    for name, series, offset in (("time_s", t, 0), ("power_w", p, 1)):
        # Bonferroni over the two series, so that ``alpha`` is the false-alarm rate per
        # variant rather than per series.
        sc = detect_state_change(series, alpha / 2, min_effect, mb, n_perm, seed + offset)
        cuts_by[name] = {s.start for s in sc.segments[1:]}
    bounds = _merge_short([0, *sorted(set().union(*cuts_by.values())), n], t, p, mb)
    pieces = list(itertools.pairwise(bounds))
    if len(pieces) == 1:
        return []
    sizes = [b - a for a, b in pieces]
    main = max(range(len(pieces)), key=lambda i: (sizes[i], i))
    m_lo, m_hi = pieces[main]
    blocks: list[StateBlock] = []
    for i, (lo, hi) in enumerate(pieces):
        if i == main:
            continue
        if not (
            _differs(t[lo:hi], t[m_lo:m_hi], "median", alpha, min_effect)
            or _differs(p[lo:hi], p[m_lo:m_hi], "mean", alpha, min_effect)
        ):
            continue
        rest = np.r_[0:lo, hi:n]
        edges = {lo, hi} - {0, n}
        blocks.append(
            StateBlock(
                variant=variant,
                runs=tuple(range(lo + 1, hi + 1)),
                labels=tuple(r.label for r in runs[lo:hi]),
                median_time_s=float(np.median(t[lo:hi])),
                median_energy_j=float(np.median(x[1, lo:hi])),
                mean_power_w=float(p[lo:hi].mean()),
                time_ratio=float(np.median(t[lo:hi]) / np.median(t[rest])),
                power_ratio=float(p[lo:hi].mean() / p[rest].mean()),
                found_in=tuple(k for k, c in cuts_by.items() if c & edges),
            )
        )
    return blocks


# Entry point --------------------------------------------------------------------------------
def _ordered(runs: Sequence[RunValues], name: str) -> list[RunValues]:
    """The runs in run order (by start time), checked."""
    runs = list(runs)
    for r in runs:
        if not isinstance(r, RunValues):
            raise TypeError(f"{name}: expected RunValues, got {type(r).__name__}")
    if len(runs) < 2:
        raise ValueError(
            f"{name}: need at least 2 runs to compare, got {len(runs)} (repeat the run; "
            "10 or more give useful intervals)"
        )
    seen: set[str] = set()
    for r in runs:
        if r.label in seen:
            raise ValueError(f"{name}: run {r.label!r} appears twice")
        seen.add(r.label)
    return sorted(runs, key=lambda r: r.start_ns)  # stable: equal starts keep input order


def compare_runs(
    a: Sequence[RunValues],
    b: Sequence[RunValues],
    *,
    region: str | None = None,
    names: tuple[str, str] = ("A", "B"),
    resamples: int = MIN_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    detect_states: bool = True,
    state_alpha: float = 0.01,
    state_min_effect: float = 0.02,
    state_min_block: int | None = None,
    state_permutations: int = 999,
    outside: str | None = None,
) -> Comparison:
    """Compare variant B against variant A over repeated runs.

    Args:
        a: Runs of the baseline variant A (any order; sorted by ``start_ns``).
        b: Runs of variant B.
        region: Name of the compared region (for the record), None for whole runs.
        names: Display names of A and B.
        resamples: Bootstrap resamples (≥ 2000).
        confidence: Coverage of the intervals, in (0, 1).
        seed: Seed of the resampling and the state-change permutations.
        detect_states: Whether to look for blocks of runs in another machine state.
        state_alpha: False-alarm level of the block search per variant (split between
            the time and power series), and level of the test that a piece differs from
            the main state.
        state_min_effect: Smallest relative level difference that makes a block (0.02:
            2 %; smaller shifts are drift, not another machine state).
        state_min_block: Smallest block in runs; default max(3, n // 10, the smallest
            block whose p-value can reach state_alpha / 2) (``eopt.runs.stats.
            default_min_block``: four runs at n = 34).
        state_permutations: Permutations per change-point test (999 lets a p-value
            reach 0.001, below the split levels of a second search); raised to what
            the level needs (``eopt.runs.stats.permutations_for``).
        outside: Which "outside every region" headlines (:data:`OUTSIDE_DEFINITIONS`):
            ``"regions"``, the field note's, or ``"events"``; the other is kept beside
            it, and both are named. None: ``"regions"`` wherever a run reports it,
            else ``"events"`` (runs read by a loader that gives only that one).

    Returns:
        The comparison. Blocks stay in ``a``, ``b`` and the reductions; when there is
        any, ``without_blocks`` holds the comparison over the other runs.

    Raises:
        ValueError: Fewer than 2 runs in a variant, a run listed twice, too few
            resamples, or a confidence outside (0, 1).

    Assumptions:
        Runs are independent; within one machine state they are identically distributed.
        Percentile intervals of medians from fewer than about 10 runs under-cover.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if outside is not None and outside not in OUTSIDE_DEFINITIONS:
        raise ValueError(
            f"outside must be one of {', '.join(OUTSIDE_DEFINITIONS)}, got {outside!r}"
        )
    if resamples < MIN_RESAMPLES:
        raise ValueError(
            f"resamples must be at least {MIN_RESAMPLES} (fewer make the CI ends noisy), "
            f"got {resamples}"
        )
    runs_a, runs_b = _ordered(a, f"variant {names[0]}"), _ordered(b, f"variant {names[1]}")
    if outside is None:
        known = any(r.outside_share_regions is not None for r in (*runs_a, *runs_b))
        outside = "regions" if known else "events"
    base = _compare(runs_a, runs_b, region, names, resamples, confidence, seed, outside)
    if not detect_states:
        return base
    settings = {
        "method": "binary segmentation with a permutation test (eopt.runs.stats."
        "detect_state_change) on per-run time and mean power, in run order; pieces "
        "joined to the main state unless Mann-Whitney U separates them",
        "alpha": state_alpha,
        "min_effect": state_min_effect,
        "min_block": state_min_block,
        "permutations": state_permutations,
    }
    warns = list(base.warnings)
    blocks: list[StateBlock] = []
    for key, name, runs in (("a", names[0], runs_a), ("b", names[1], runs_b)):
        mb = state_min_block
        if mb is None:
            mb = default_min_block(len(runs), state_alpha / 2)
        if len(runs) < 2 * mb:
            warns.append(
                f"{name}: {len(runs)} runs are too few to look for blocks in another "
                f"machine state (needs at least {2 * mb})"
            )
            continue
        blocks += _find_blocks(
            key, runs, state_alpha, state_min_effect, state_min_block, state_permutations, seed
        )
    without = None
    if blocks:
        out = {(blk.variant, i) for blk in blocks for i in blk.runs}
        keep_a = [r for i, r in enumerate(runs_a, 1) if ("a", i) not in out]
        keep_b = [r for i, r in enumerate(runs_b, 1) if ("b", i) not in out]
        if len(keep_a) >= 2 and len(keep_b) >= 2:
            without = _compare(keep_a, keep_b, region, names, resamples, confidence, seed, outside)
        warns += _block_warnings(base, blocks, without, len(runs_a), len(runs_b))
    return Comparison(
        region=base.region,
        names=base.names,
        a=base.a,
        b=base.b,
        reduction=base.reduction,
        reduction_mean=base.reduction_mean,
        state_blocks=tuple(blocks),
        without_blocks=without,
        warnings=tuple(warns),
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        ci_method=CI_METHOD,
        state_detection=settings,
    )


def _compare(
    runs_a: list[RunValues],
    runs_b: list[RunValues],
    region: str | None,
    names: tuple[str, str],
    resamples: int,
    confidence: float,
    seed: int,
    outside: str = "regions",
) -> Comparison:
    """Summaries and reductions of runs already in run order (no block search)."""
    xa, xb = _values(runs_a), _values(runs_b)
    rng = np.random.default_rng(seed)
    # One index matrix per variant serves all three quantities and both statistics, so a
    # resample is a set of whole runs; A and B are drawn independently (unpaired runs).
    med_a, mean_a = _resampled_stats(xa, rng.integers(0, xa.shape[1], (resamples, xa.shape[1])))
    med_b, mean_b = _resampled_stats(xb, rng.integers(0, xb.shape[1], (resamples, xb.shape[1])))
    sa = _summary(names[0], runs_a, xa, med_a, mean_a, confidence, outside)
    sb = _summary(names[1], runs_b, xb, med_b, mean_b, confidence, outside)
    obs = {
        "median": (np.median(xa, axis=1), np.median(xb, axis=1)),
        "mean": (xa.mean(axis=1), xb.mean(axis=1)),
    }
    red = _reductions(*obs["median"], med_a, med_b, confidence)
    red_mean = _reductions(*obs["mean"], mean_a, mean_b, confidence)
    warns: list[str] = []
    for s in (sa, sb):
        if s.n < SMALL_N:
            warns.append(
                f"{s.name}: only {s.n} runs; percentile bootstrap intervals from fewer than "
                f"{SMALL_N} runs are too narrow (they cover less than "
                f"{confidence:.0%}): repeat the run more often"
            )
        known = s.outside_share.n if s.outside_share else 0
        if 0 < known < s.n:
            warns.append(
                f"{s.name}: the energy outside every region is known for {known} of "
                f"{s.n} runs only; its share is over those"
            )
    for key, r in zip(_REDUCTION_KEYS, (red.time, red.energy, red.power), strict=True):
        if r.value is None:
            warns.append(f"the {key} reduction is undefined: {names[0]}'s median {key} is 0")
    return Comparison(
        region=region,
        names=names,
        a=sa,
        b=sb,
        reduction=red,
        reduction_mean=red_mean,
        state_blocks=(),
        without_blocks=None,
        warnings=tuple(warns),
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        ci_method=CI_METHOD,
        state_detection=None,
    )


def _block_warnings(
    base: Comparison, blocks: list[StateBlock], without: Comparison | None, n_a: int, n_b: int
) -> list[str]:
    """Plain-words cautions about the blocks and what they do to the result."""
    warns: list[str] = []
    for blk in blocks:
        name = base.names[0] if blk.variant == "a" else base.names[1]
        n = n_a if blk.variant == "a" else n_b
        warns.append(
            f"{name}: runs {format_runs(blk.runs)} ({len(blk.runs)} of {n}) look like another "
            f"machine state: {blk.time_ratio:.2f}× the median time and {blk.power_ratio:.2f}× "
            f"the mean power of its other runs ({blk.median_time_s:.4g} s, "
            f"{blk.mean_power_w:.4g} W); they are kept in the result above"
        )
    share = {
        v: sum(len(b.runs) for b in blocks if b.variant == v) / n
        for v, n in (("a", n_a), ("b", n_b))
    }
    if max(share.values()) >= LARGE_BLOCK_SHARE:
        r = base.reduction
        wide = ", ".join(
            f"{k} {_pct(x.ci[0])} to {_pct(x.ci[1])}"
            for k, x in zip(_REDUCTION_KEYS, (r.time, r.energy, r.power), strict=True)
        )
        who = " and ".join(
            f"{share[v]:.0%} of {base.names[i]}'s runs"
            for i, v in enumerate(("a", "b"))
            if share[v] >= LARGE_BLOCK_SHARE
        )
        warns.append(
            f"the blocks hold {who}, so the medians sit on the blocks' edge and the CIs of "
            f"the reductions are wide ({wide})"
        )
    if without is None:
        warns.append("too few runs are left outside the blocks to compare without them")
    else:
        w = without.reduction
        parts = ", ".join(
            f"{_less_more(x.value, k)} (CI {_pct(x.ci[0], False)} to {_pct(x.ci[1], False)})"
            for k, x in zip(_REDUCTION_KEYS, (w.time, w.energy, w.power), strict=True)
        )
        warns.append(
            f"the comparison without the blocks ({without.a.n} runs of {base.names[0]}, "
            f"{without.b.n} of {base.names[1]}): {base.names[1]} uses {parts}"
        )
    return warns
