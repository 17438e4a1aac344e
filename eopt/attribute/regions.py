"""Per-event energies summed per region name, column-wise.

A region is every call of one name. Its calls, time, energies, poorly resolved calls and
notes are sums (or unions) over its calls, taken in event order; it is placed in the tree
by its earliest call (the first in event order among equal starts), and the regions are
ordered by that call's start and depth, then by the order their names first appear.

The sums are kept by :class:`RegionSums`, which takes a trace's events a part at a time
(the whole trace at once, or the blocks of a streamed file in file order): every field
is a sum, a minimum or a union over the parts, so the parts may be of any size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from eopt.attribute.sharing import Shares
from eopt.model.trace import EventTable

__all__ = ["RegionSums", "by_name"]

#: A row past every event's (no call seen yet).
_NO_ROW = np.iinfo(np.int64).max


class RegionSums:
    """The per-region sums of a trace whose events come a part at a time.

    Calls are numbered by their row in the whole trace (file order). Each call's own
    fields (:meth:`add_calls`) are given once; energies (:meth:`add_energy`) and notes
    (:meth:`add_notes`) may come in several pieces per call (a call cut by the parts'
    time windows), each added.

    Args:
        n_series: Number of power series (the energies' columns).
        notes: The notes' texts, in the order a call lists them (a note given with
            :meth:`add_notes` is named by its index here).
    """

    def __init__(self, n_series: int, notes: Sequence[str]) -> None:
        self.notes = list(notes)
        self._n_s = n_series
        self._index: dict[str, int] = {}
        self.names: list[str] = []
        self.categories: list[str] = []
        self.calls = np.zeros(0, dtype=np.int64)
        self.time_s = np.zeros(0)
        self.incl = np.zeros((0, n_series))
        self.excl = np.zeros((0, n_series))
        self.incl_unknown = np.zeros(0, dtype=bool)
        self.excl_unknown = np.zeros(0, dtype=bool)
        self.shorts = np.zeros(0)
        self.first_seen = np.zeros(0, dtype=np.int64)
        self.earliest = np.zeros(0)
        self.chosen = np.zeros(0, dtype=np.int64)
        self.place_depth = np.zeros(0, dtype=np.int64)
        self._found: list[dict[str, tuple[int, int]]] = []

    def _grow(self, m: int) -> None:
        """Room for ``m`` regions (the new ones empty)."""
        extra = m - self.calls.size
        if extra <= 0:
            return

        def more(a: np.ndarray, fill: Any) -> np.ndarray:
            pad = np.full((extra, *a.shape[1:]), fill, dtype=a.dtype)
            return np.concatenate([a, pad])

        self.calls = more(self.calls, 0)
        self.time_s = more(self.time_s, 0.0)
        self.incl = more(self.incl, 0.0)
        self.excl = more(self.excl, 0.0)
        self.incl_unknown = more(self.incl_unknown, False)
        self.excl_unknown = more(self.excl_unknown, False)
        self.shorts = more(self.shorts, 0.0)
        self.first_seen = more(self.first_seen, _NO_ROW)
        self.earliest = more(self.earliest, np.inf)
        self.chosen = more(self.chosen, _NO_ROW)
        self.place_depth = more(self.place_depth, 0)
        self._found.extend({} for _ in range(extra))

    def codes(self, table: EventTable) -> np.ndarray:
        """Each event's region number, the names of the part registered (int64)."""
        present = np.bincount(table.name_codes, minlength=len(table.names)) > 0
        remap = np.full(len(table.names), -1, dtype=np.int64)
        for c in np.flatnonzero(present).tolist():
            name = table.names[c]
            code = self._index.get(name)
            if code is None:
                code = self._index[name] = len(self.names)
                self.names.append(name)
                self.categories.append("")
            remap[c] = code
        self._grow(len(self.names))
        return remap[table.name_codes]

    @property
    def size(self) -> int:
        """Number of regions so far."""
        return len(self.names)

    def add_calls(
        self,
        codes: np.ndarray,
        row0: int,
        table: EventTable,
        depth: np.ndarray,
        start: np.ndarray,
        short: np.ndarray,
    ) -> None:
        """The calls of one part, rows ``row0`` … in the whole trace.

        Args:
            codes: Region number per call (:meth:`codes`).
            row0: The first call's row in the whole trace.
            table: The part's events.
            depth: Nesting depth per call.
            start: Start per call, in s from the trace's start.
            short: Whether each call is poorly resolved.
        """
        m, n = self.size, codes.size
        if n == 0:
            return
        local = np.arange(n)
        self.calls += np.bincount(codes, minlength=m)
        duration = (table.end_ns - table.start_ns).astype(np.float64) * 1e-9
        self.time_s += np.bincount(codes, weights=duration, minlength=m)
        self.shorts += np.bincount(codes, weights=short.astype(np.float64), minlength=m)
        first = np.full(m, n)
        np.minimum.at(first, codes, local)
        new = (first < n) & (self.first_seen == _NO_ROW)
        for g in np.flatnonzero(new).tolist():
            self.categories[g] = table.categories[int(table.category_codes[first[g]])]
        self.first_seen[new] = row0 + first[new]
        # The earliest call of each name, the first in event order among equal starts.
        earliest = np.full(m, np.inf)
        np.minimum.at(earliest, codes, start)
        at_earliest = start == earliest[codes]
        chosen = np.full(m, n)
        np.minimum.at(chosen, codes[at_earliest], local[at_earliest])
        take = (chosen < n) & (
            (earliest < self.earliest)
            | ((earliest == self.earliest) & (row0 + chosen < self.chosen))
        )
        self.earliest[take] = earliest[take]
        self.chosen[take] = row0 + chosen[take]
        self.place_depth[take] = depth[chosen[take]]

    def add_energy(self, codes: np.ndarray, shares: Shares) -> None:
        """Energies (a piece of each call's, or all of it) with their unknown flags."""
        m = self.size
        self.incl += np.stack(
            [np.bincount(codes, weights=shares.incl[:, s], minlength=m) for s in range(self._n_s)],
            axis=1,
        ).reshape(m, self._n_s)
        self.excl += np.stack(
            [np.bincount(codes, weights=shares.excl[:, s], minlength=m) for s in range(self._n_s)],
            axis=1,
        ).reshape(m, self._n_s)
        self.incl_unknown |= (
            np.bincount(codes, weights=shares.incl_unknown.astype(np.float64), minlength=m) > 0
        )
        self.excl_unknown |= (
            np.bincount(codes, weights=shares.excl_unknown.astype(np.float64), minlength=m) > 0
        )

    def add_notes(self, codes: np.ndarray, rows: np.ndarray, i: int, mask: np.ndarray) -> None:
        """Note ``i`` applies to the calls where ``mask`` holds (``rows``: their rows in
        the whole trace); each region keeps the first call that carries each note."""
        hit = np.flatnonzero(mask)
        if hit.size == 0:
            return
        text = self.notes[i]
        groups, at = np.unique(codes[hit], return_index=True)
        for g, k in zip(groups.tolist(), rows[hit[at]].tolist(), strict=True):
            old = self._found[g].get(text)
            if old is None or (k, i) < old:
                self._found[g][text] = (k, i)

    def fields(self, labels: Sequence[str], total_j: float) -> list[dict[str, Any]]:
        """The fields of each region (``RegionEnergy``'s keyword arguments), in region
        order; ``labels`` names the series, ``total_j`` is the trace's total energy in J
        (for each region's share)."""
        out = []
        order = np.lexsort((self.first_seen, self.place_depth, self.earliest))
        for g in order.tolist():
            unknown = bool(self.incl_unknown[g])
            inclusive = None if unknown else float(self.incl[g].sum())
            exclusive = None if self.excl_unknown[g] else float(self.excl[g].sum())
            found = self._found[g]
            out.append(
                {
                    "name": self.names[g],
                    "category": self.categories[g],
                    "depth": int(self.place_depth[g]),
                    "calls": int(self.calls[g]),
                    "time_s": float(self.time_s[g]),
                    "inclusive_energy_j": inclusive,
                    "exclusive_energy_j": exclusive,
                    "share": (
                        inclusive / total_j if inclusive is not None and total_j > 0 else None
                    ),
                    "by_series": {
                        label: (None if unknown else float(v))
                        for label, v in zip(labels, self.incl[g].tolist(), strict=True)
                    },
                    "short_calls": int(self.shorts[g]),
                    "flags": tuple(sorted(found, key=found.__getitem__)),
                }
            )
        return out


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
    """The fields of each region (``RegionEnergy``'s keyword arguments), in region order.

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
    if len(table) == 0:
        return []
    sums = RegionSums(len(labels), [text for text, _ in notes])
    codes = sums.codes(table)
    sums.add_calls(codes, 0, table, depth, start, short)
    sums.add_energy(codes, shares)
    rows = np.arange(len(table))
    for i, (_, mask) in enumerate(notes):
        sums.add_notes(codes, rows, i, mask)
    return sums.fields(labels, total_j)
