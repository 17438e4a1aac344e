"""The sharing rule over a trace's events a block at a time, in bounded memory.

For traces of tens of millions of events (:func:`eopt.attribute.engine.attribute_streamed`
reads an ``events.csv`` in blocks of lines): each block's events are charged with the
events still open from the blocks before it, over the time window from the last start
of the previous block to the last start of this one. Every event is cut to the window;
a window's edges are event edges, so the elementary intervals of all the windows
together are exactly those of the whole trace, each with the same active events, the
same number of leaves and the same energy. An event's exclusive and inclusive energies
are then the sums of its pieces' (:mod:`eopt.attribute.sharing` in each window), and so
are its region's (:class:`eopt.attribute.regions.RegionSums`); only the events open at a
window's end are carried to the next, so memory is bounded by one block and the events
open at once, whatever the number of events.

The events must come in the order a sweep needs: starts non-decreasing, ids strictly
increasing (so unique), each parent before its children and open when they start, and
every event well formed. A file in any other order, or with any fault, is refused
(:func:`sweep` returns None) and read whole instead, which accepts it or names the line
at fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from eopt.attribute.integral import EnergyCurve
from eopt.attribute.regions import RegionSums
from eopt.attribute.sharing import share_energy
from eopt.model.trace import EventTable, event_depths

__all__ = ["MAX_OPEN", "Swept", "in_sweep_order", "sweep"]

#: Events open at once past which a sweep gives up (the trace is read whole instead):
#: bounds what is carried from one window to the next.
MAX_OPEN = 1 << 20


def in_sweep_order(table: EventTable, last_id: int = 0, last_start: int | None = None) -> bool:
    """Whether a block's events come as a sweep needs them: ids strictly increasing from
    above ``last_id``, starts non-decreasing from ``last_start`` (ns), no event ending
    before it starts. A non-empty block only."""
    ids, starts, ends = table.ids, table.start_ns, table.end_ns
    return not (
        ids[0] <= last_id
        or np.any(ids[1:] <= ids[:-1])
        or np.any(ends < starts)
        or (last_start is not None and starts[0] < last_start)
        or np.any(starts[1:] < starts[:-1])
    )


@dataclass(frozen=True)
class Swept:
    """What a sweep found besides the region sums.

    Attributes:
        inside: Per series, the energy of the intervals with an active event, in J.
        events: Number of events.
        start_ns: The earliest event start, in ns.
        end_ns: The latest event end, in ns.
    """

    inside: np.ndarray
    events: int
    start_ns: int
    end_ns: int


class _Open:
    """The events of one window (or those carried out of it), column by column."""

    __slots__ = ("code", "depth", "end", "end_ns", "ids", "parent_ids", "row", "start", "start_ns")

    def __init__(self, **columns: np.ndarray) -> None:
        for name in self.__slots__:
            setattr(self, name, columns[name])

    @classmethod
    def empty(cls) -> _Open:
        i, f = np.zeros(0, dtype=np.int64), np.zeros(0)
        return cls(
            code=i, depth=i, end=f, end_ns=i, ids=i, parent_ids=i, row=i, start=f, start_ns=i
        )

    def joined(self, other: _Open) -> _Open:
        return _Open(
            **{n: np.concatenate([getattr(self, n), getattr(other, n)]) for n in self.__slots__}
        )

    def taken(self, keep: np.ndarray) -> _Open:
        return _Open(**{n: getattr(self, n)[keep] for n in self.__slots__})

    def parents(self) -> np.ndarray:
        """Each event's parent row among these events, -1 where none (ids are sorted)."""
        at = np.minimum(np.searchsorted(self.ids, self.parent_ids), max(self.ids.size - 1, 0))
        found = (self.parent_ids != 0) & (self.ids[at] == self.parent_ids)
        return np.where(found, at, -1)


def _charge(
    window: _Open,
    parent: np.ndarray,
    lo: float,
    hi: float,
    integrals: Sequence[EnergyCurve],
    sums: RegionSums,
    outside_note: int,
) -> np.ndarray:
    """The window's events charged over ``[lo, hi]``; returns the inside energy per series."""
    shares = share_energy(
        np.maximum(window.start, lo), np.minimum(window.end, hi), parent, window.depth, integrals
    )
    sums.add_energy(window.code, shares)
    sums.add_notes(window.code, window.row, outside_note, shares.incl_unknown)
    return shares.inside


def sweep(
    blocks: Iterable[EventTable | None],
    origin_ns: int,
    integrals: Sequence[EnergyCurve],
    sums: RegionSums,
    gaps: Sequence[tuple[float, float]],
    short_s: float,
    outside_note: int,
) -> Swept | None:
    """Charge the events of ``blocks`` (in file order) into ``sums``.

    Args:
        blocks: The events, a block at a time (None: a block that cannot be read so).
        origin_ns: The trace's start (its earliest sample or event), in ns.
        integrals: One cumulative energy curve per series, times in s from the origin.
        sums: Where each region's sums go.
        gaps: Per gap note (numbered from 0 in ``sums.notes``), its (start, end) in s.
        short_s: Calls shorter than this are poorly resolved, in s.
        outside_note: The number of the note "reaches outside the power trace".

    Returns:
        The inside energy and the events' span; None when the events are not in sweep
        order or not well formed (read the trace whole).
    """
    inside = np.zeros(len(integrals))
    carried = _Open.empty()
    lo = -np.inf
    rows, last_id, last_start = 0, 0, None
    first_start, end_ns = None, None
    for table in blocks:
        if table is None:
            return None
        n = len(table)
        if n == 0:
            continue
        ids, starts, ends = table.ids, table.start_ns, table.end_ns
        if not in_sweep_order(table, last_id, last_start):
            return None
        codes = sums.codes(table)
        start = (starts - origin_ns).astype(np.float64) * 1e-9
        end = (ends - origin_ns).astype(np.float64) * 1e-9
        block = _Open(
            code=codes,
            depth=np.zeros(n, dtype=np.int64),
            end=end,
            end_ns=ends,
            ids=ids,
            parent_ids=table.parent_ids,
            row=rows + np.arange(n),
            start=start,
            start_ns=starts,
        )
        window = carried.joined(block)
        parent = window.parents()
        own = slice(carried.ids.size, None)
        p = parent[own]
        has = table.parent_ids != 0
        # A parent comes before its children and encloses them; one that is not open
        # (missing, later in the file, or ended) sends the file to the whole reader.
        mine = np.arange(carried.ids.size, window.ids.size)
        if np.any(has & ((p < 0) | (p >= mine))):
            return None
        q = p[has]
        if np.any(starts[has] < window.start_ns[q]) or np.any(ends[has] > window.end_ns[q]):
            return None
        chain = parent.copy()
        chain[: carried.ids.size] = -1  # their depth is known
        base = np.concatenate([carried.depth, np.zeros(n, dtype=np.int64)])
        depth = event_depths(chain, base)
        if depth is None:
            return None
        window.depth = depth
        hi = float(start[-1])
        inside += _charge(window, parent, lo, hi, integrals, sums, outside_note)
        sums.add_calls(codes, rows, table, depth[own], start, (end - start) < short_s)
        block_rows = rows + np.arange(n)
        for i, (ga, gb) in enumerate(gaps):
            sums.add_notes(codes, block_rows, i, (start < gb) & (end > ga))
        carried = window.taken(window.end >= hi)
        if carried.ids.size > MAX_OPEN:
            return None
        first_start = int(starts[0]) if first_start is None else first_start
        top = int(ends.max())
        end_ns = top if end_ns is None else max(end_ns, top)
        lo, rows, last_id, last_start = hi, rows + n, int(ids[-1]), int(starts[-1])
    if first_start is None or end_ns is None:
        return None
    if carried.ids.size:
        inside += _charge(carried, carried.parents(), lo, np.inf, integrals, sums, outside_note)
    return Swept(inside=inside, events=rows, start_ns=first_start, end_ns=end_ns)
