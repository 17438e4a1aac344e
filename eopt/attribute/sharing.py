"""The sharing rule, column-wise: each event's inclusive and exclusive energy.

The rule (see :mod:`eopt.attribute.engine`): at each instant the power is split equally
among the *leaves*, the active events with no active child; an event's exclusive energy
is what it receives as a leaf, its inclusive energy what it and its descendants receive.

The event edges cut time into elementary intervals, in each of which the set of active
events is fixed. Everything here is computed over those intervals with whole-array
operations, in time and memory linear in the number of events (whatever the nesting
depth):

* an event is a leaf over its own intervals less the union of its children's, so the
  number of leaves per interval is a running sum of +1/−1 at the edges of events and of
  their merged children;
* an event's exclusive energy is the sum, over its leaf intervals, of each interval's
  energy over its number of leaves: differences of one prefix sum (kept in extended
  precision, so a short event's energy is not lost against the trace's total);
* inclusive = exclusive + the children's inclusive, summed from the deepest level up.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from eopt.attribute.integral import EnergyCurve

__all__ = ["Shares", "share_energy"]


@dataclass(frozen=True)
class Shares:
    """What the sharing rule gives each event, per power series.

    Attributes:
        excl: Exclusive energy, (events, series), in J.
        incl: Inclusive energy, (events, series), in J.
        excl_unknown: Whether a leaf interval of the event lies outside a series' samples.
        incl_unknown: The same for the event or any descendant.
        inside: Per series, the energy of the intervals with an active event, in J.
    """

    excl: np.ndarray
    incl: np.ndarray
    excl_unknown: np.ndarray
    incl_unknown: np.ndarray
    inside: np.ndarray


def _children_cover(
    first: np.ndarray, last: np.ndarray, parent: np.ndarray, held: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per parent, the union of its holding children's intervals as disjoint segments
    (parent row, first interval, end interval), sorted by parent; ``held`` marks the
    events that hold at least one interval."""
    child = np.flatnonzero(held & (parent >= 0))
    child = child[held[parent[child]]]
    if child.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    p = parent[child]
    lo = np.maximum(first[child], first[p])
    hi = np.minimum(last[child], last[p])
    keep = lo < hi
    p, lo, hi = p[keep], lo[keep], hi[keep]
    order = np.lexsort((lo, p))
    p, lo, hi = p[order], lo[order], hi[order]
    # The running end within each parent's group: offsetting by the group makes one
    # running maximum over the whole array restart at every group.
    reach = np.maximum.accumulate(p * (size + 1) + hi) - p * (size + 1)
    new = np.ones(p.size, dtype=bool)
    new[1:] = (p[1:] != p[:-1]) | (lo[1:] > reach[:-1])
    starts = np.flatnonzero(new)
    return p[starts], lo[starts], np.maximum.reduceat(hi, starts)


#: Instants interpolated at once: bounds the temporaries of a trace of millions of events.
_CHUNK = 1 << 18


def _cumulative(curve: EnergyCurve, times: np.ndarray) -> np.ndarray:
    """``curve.at(times)``, a chunk of instants at a time."""
    out = np.empty(times.size)
    for a in range(0, times.size, _CHUNK):
        out[a : a + _CHUNK] = curve.at(times[a : a + _CHUNK])
    return out


def _ranges(prefix: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``prefix[..., hi] − prefix[..., lo]``: sums over interval ranges from a prefix sum."""
    out = np.empty((*prefix.shape[:-1], lo.size), dtype=prefix.dtype)
    for a in range(0, lo.size, _CHUNK):
        out[..., a : a + _CHUNK] = prefix[..., hi[a : a + _CHUNK]] - prefix[..., lo[a : a + _CHUNK]]
    return out


def share_energy(
    start: np.ndarray,
    end: np.ndarray,
    parent: np.ndarray,
    depth: np.ndarray,
    integrals: Sequence[EnergyCurve],
) -> Shares:
    """Each event's share of every series' energy under the sharing rule.

    Args:
        start: Event starts, in s from the trace's start.
        end: Event ends, in s.
        parent: Each event's parent row, -1 at the top level.
        depth: Each event's nesting depth (0: top level).
        integrals: One cumulative energy curve per series (same time origin).

    Returns:
        Per event and series the exclusive and inclusive energies, with the unknown flags.
    """
    n_ev, n_s = start.size, len(integrals)
    excl = np.zeros((n_ev, n_s))
    excl_unknown = np.zeros(n_ev, dtype=bool)
    if n_ev == 0:
        return Shares(excl, excl.copy(), excl_unknown, excl_unknown.copy(), np.zeros(n_s))
    # Starts and ends come nearly in order: a stable sort runs over them in one merge.
    edges_s = np.sort(np.concatenate([start, end]), kind="stable")
    bounds = edges_s[np.r_[True, edges_s[1:] != edges_s[:-1]]]
    del edges_s
    size = bounds.size - 1  # elementary intervals
    energy = np.stack([np.diff(_cumulative(g, bounds)) for g in integrals])  # (series, j)
    covered_lo = max(g.first for g in integrals)
    covered_hi = min(g.last for g in integrals)
    unknown = (bounds[:-1] < covered_lo) | (bounds[1:] > covered_hi)
    index = np.int32 if bounds.size < 2**31 else np.int64
    first = np.searchsorted(bounds, start).astype(index)
    last = np.searchsorted(bounds, end).astype(index)
    del bounds
    held = last > first  # zero-length events hold no energy
    seg_p, seg_lo, seg_hi = _children_cover(first, last, parent, held, size)

    def edges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return np.bincount(lo, minlength=size + 1) - np.bincount(hi, minlength=size + 1)

    active = np.cumsum(edges(first[held], last[held]))[:-1]
    inside = energy[:, active > 0].sum(axis=1)
    leaves = active - np.cumsum(edges(seg_lo, seg_hi))[:-1]
    del active
    weight = 1.0 / np.maximum(leaves, 1)
    weight[leaves == 0] = 0.0
    wide = np.longdouble
    prefix = np.zeros((n_s, size + 1), dtype=wide)
    energy *= weight
    np.cumsum(energy, axis=1, dtype=wide, out=prefix[:, 1:])
    del energy, weight
    unknown_prefix = np.zeros(size + 1, dtype=index)
    np.cumsum(unknown & (leaves > 0), out=unknown_prefix[1:])
    del leaves, unknown

    rows = slice(None) if held.all() else np.flatnonzero(held)
    own = np.zeros((n_s, n_ev), dtype=wide)
    own[:, rows] = _ranges(prefix, first[rows], last[rows])
    own_unknown = np.zeros(n_ev, dtype=np.int64)
    own_unknown[rows] = _ranges(unknown_prefix, first[rows], last[rows])
    if seg_p.size:
        # Segments come sorted by parent: one reduction per parent's run of segments.
        runs = np.flatnonzero(np.r_[True, seg_p[1:] != seg_p[:-1]])
        who = seg_p[runs]
        own[:, who] -= np.add.reduceat(_ranges(prefix, seg_lo, seg_hi), runs, axis=1)
        own_unknown[who] -= np.add.reduceat(_ranges(unknown_prefix, seg_lo, seg_hi), runs)
    excl_unknown = own_unknown > 0

    # Inclusive from the deepest level up: each level adds its totals to its parents.
    incl = own.copy()
    incl_unknown = excl_unknown.copy()
    order = np.argsort(-depth, kind="stable")
    levels = np.flatnonzero(np.r_[True, np.diff(depth[order]) != 0, True])
    for a, b in itertools.pairwise(levels.tolist()):
        rows = order[a:b]
        if depth[rows[0]] == 0:
            break
        np.add.at(incl.T, parent[rows], incl[:, rows].T)
        np.logical_or.at(incl_unknown, parent[rows], incl_unknown[rows])
    return Shares(
        excl=own.T.astype(np.float64),
        incl=incl.T.astype(np.float64),
        excl_unknown=excl_unknown,
        incl_unknown=incl_unknown,
        inside=inside,
    )
