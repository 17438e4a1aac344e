"""Per-event energies summed per region name, column-wise.

A region is every call of one name. Its calls, time, energies, poorly resolved calls and
notes are sums (or unions) over its calls, taken in event order; it is placed in the tree
by its earliest call (the first in event order among equal starts), and the regions are
ordered by that call's start and depth, then by the order their names first appear.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from eopt.attribute.sharing import Shares
from eopt.model.trace import EventTable

__all__ = ["by_name"]


def _flags(inverse: np.ndarray, notes: Sequence[tuple[str, np.ndarray]], m: int) -> list[list[str]]:
    """Each region's notes, in the order its calls first carry them."""
    found: list[dict[str, tuple[int, int]]] = [{} for _ in range(m)]
    for i, (text, mask) in enumerate(notes):
        hit = np.flatnonzero(mask)
        if hit.size == 0:
            continue
        groups, at = np.unique(inverse[hit], return_index=True)
        for g, k in zip(groups.tolist(), hit[at].tolist(), strict=True):
            old = found[g].get(text)
            if old is None or (k, i) < old:
                found[g][text] = (k, i)
    return [sorted(f, key=f.__getitem__) for f in found]


def by_name(
    table: EventTable,
    depth: np.ndarray,
    start: np.ndarray,
    shares: Shares,
    notes: Sequence[tuple[str, np.ndarray]],
    short: np.ndarray,
    labels: Sequence[str],
    total_j: float,
) -> list[dict[str, Any]]:
    """The fields of each region (``RegionEnergy``'s keyword arguments), in table order.

    Args:
        table: The events.
        depth: Nesting depth per event.
        start: Start per event, in s from the trace's start.
        shares: The events' energies.
        notes: (text, which events it applies to), in the order a call lists them.
        short: Whether each call is poorly resolved.
        labels: Series labels, in the order of the shares' columns.
        total_j: The trace's total energy, in J (for each region's share).
    """
    n = len(table)
    if n == 0:
        return []
    # Names are codes 0 … k−1: group by counting, not by sorting.
    present = np.bincount(table.name_codes, minlength=len(table.names)) > 0
    groups = np.flatnonzero(present)
    remap = np.cumsum(present) - 1
    inverse = remap[table.name_codes]
    m = groups.size
    rows = np.arange(n)
    first_seen = np.full(m, n)
    np.minimum.at(first_seen, inverse, rows)
    # The earliest call of each name, the first in event order among equal starts.
    earliest = np.full(m, np.inf)
    np.minimum.at(earliest, inverse, start)
    at_earliest = start == earliest[inverse]
    chosen = np.full(m, n)
    np.minimum.at(chosen, inverse[at_earliest], rows[at_earliest])
    place_start, place_depth = start[chosen], depth[chosen]

    def summed(weights: np.ndarray) -> np.ndarray:
        return np.bincount(inverse, weights=weights, minlength=m)

    calls = np.bincount(inverse, minlength=m)
    time_s = summed((table.end_ns - table.start_ns).astype(np.float64) * 1e-9)
    incl = np.stack([summed(shares.incl[:, s]) for s in range(len(labels))], axis=1)
    excl = np.stack([summed(shares.excl[:, s]) for s in range(len(labels))], axis=1)
    incl_unknown = summed(shares.incl_unknown.astype(np.float64)) > 0
    excl_unknown = summed(shares.excl_unknown.astype(np.float64)) > 0
    shorts = np.bincount(inverse, weights=short.astype(np.float64), minlength=m)
    flags = _flags(inverse, notes, m)

    out = []
    for g in np.lexsort((first_seen, place_depth, place_start)).tolist():
        unknown = bool(incl_unknown[g])
        inclusive = None if unknown else float(incl[g].sum())
        exclusive = None if excl_unknown[g] else float(excl[g].sum())
        out.append(
            {
                "name": table.names[int(groups[g])],
                "category": table.categories[int(table.category_codes[first_seen[g]])],
                "depth": int(place_depth[g]),
                "calls": int(calls[g]),
                "time_s": float(time_s[g]),
                "inclusive_energy_j": inclusive,
                "exclusive_energy_j": exclusive,
                "share": inclusive / total_j if inclusive is not None and total_j > 0 else None,
                "by_series": {
                    label: (None if unknown else float(v))
                    for label, v in zip(labels, incl[g].tolist(), strict=True)
                },
                "short_calls": int(shorts[g]),
                "flags": tuple(flags[g]),
            }
        )
    return out
