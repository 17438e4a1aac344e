"""Longest-path times of one assignment, kept up to date as a few durations change.

The local searches (`solvers.improve`, `solvers.perturb`) change a handful of task
durations at a time and need, after each change, every task's earliest start and tail
(the longest time from its end to the end of the schedule). Recomputing both over the
whole DAG is a Python loop over every edge; here only the tasks whose value can move
are revisited: a changed duration moves the ends of its task and, through them, the
starts of the successors it binds (forward), and the tails of its predecessors
(backward). A task whose value comes out unchanged stops the wave there.

Every value is computed by the same expression as the full pass
(`IndexedProblem.earliest_starts`, `IndexedProblem.tails`) from the same inputs, so an
updated `PathTimes` equals a fresh one bit for bit.

Assumptions:
    No transition times (uncoupled problems): starts depend on predecessors' ends only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solvers.indexed import IndexedProblem


class PathTimes:
    """Earliest starts, ends and tails (s) of one assignment's durations.

    Build with `PathTimes.of(ip, durations)`; `changed` gives a new object for new
    durations of a few tasks, leaving this one as it was.

    The times live in lists (the waves read and write them one task at a time) and,
    for the whole-schedule passes of the searches (`arrays`), in numpy
    arrays: an object made by `changed` keeps its parent's arrays and marks of the tasks
    its waves visited, and brings a copy up to date from those only when asked (on 65 536
    tasks, converting the lists on every round of a search cost as much as the waves).
    """

    __slots__ = (
        "_base",
        "_mirror",
        "_touched",
        "durations",
        "ends",
        "preds",
        "sinks",
        "starts",
        "succs",
        "tails",
    )

    def __init__(
        self,
        preds: list[list[int]],
        succs: list[list[int]],
        durations: list[float],
        starts: list[float],
        ends: list[float],
        tails: list[float],
        sinks: list[int],
    ) -> None:
        self.preds = preds
        self.sinks = sinks
        self.succs = succs
        self.durations = durations
        self.starts = starts
        self.ends = ends
        self.tails = tails
        #: (durations, starts, tails) as read-only arrays equal to the lists, or None.
        self._mirror: tuple[np.ndarray, ...] | None = None
        #: Arrays equal to the lists but at the tasks `_touched` marks (a byte mask per wave).
        self._base: tuple[np.ndarray, ...] | None = None
        self._touched: list[bytearray] = []

    @classmethod
    def of(cls, ip: IndexedProblem, durations: np.ndarray) -> PathTimes:
        """Times of `durations` (s per task, in `ip`'s task order), by full passes."""
        d = np.array(durations, dtype=float)
        starts = ip.earliest_starts(d)
        ends = starts + d
        tails = ip.tails(d)
        lists = (d.tolist(), starts.tolist(), ends.tolist(), tails.tolist())
        out = cls(ip.preds, ip.succs, *lists, ip.sinks)
        out._mirror = _frozen(d, starts, tails)
        return out

    @property
    def makespan(self) -> float:
        """The longest path, s: the latest end of a task without successors."""
        return max(map(self.ends.__getitem__, self.sinks), default=0.0)

    def arrays(self) -> tuple[np.ndarray, ...]:
        """(durations, earliest starts, tails) as read-only arrays, s, brought up to date
        from the lists where the waves touched them."""
        if self._mirror is None:
            lists = (self.durations, self.starts, self.tails)
            base, idx = self._base, None
            if base is not None:
                mask = np.zeros(len(self.durations), dtype=np.uint8)
                for marks in self._touched:
                    mask |= np.frombuffer(marks, dtype=np.uint8)
                idx = np.flatnonzero(mask)
            if idx is None or 4 * len(idx) > len(self.durations):
                self._mirror = _frozen(*(np.array(x, dtype=float) for x in lists))
            else:
                copies = [b.copy() for b in base]
                for arr, values in zip(copies, lists, strict=True):
                    arr[idx] = [values[i] for i in idx.tolist()]
                self._mirror = _frozen(*copies)
            self._base, self._touched = None, []
        return self._mirror

    def _child(self, durations: list[float]) -> PathTimes:
        """A copy with `durations`, its arrays to be brought up to date from this one's."""
        starts, ends = list(self.starts), list(self.ends)
        out = PathTimes(self.preds, self.succs, durations, starts, ends, self.tails, self.sinks)
        if self._mirror is not None:
            out._base = self._mirror
        else:
            out._base, out._touched = self._base, list(self._touched)
        return out

    def changed(
        self, tasks: Sequence[int], durations: Sequence[float], *, tails: bool = True
    ) -> PathTimes:
        """The times after `tasks` take `durations` (s); the others keep theirs.

        Args:
            tasks: task indices.
            durations: their new durations, s.
            tails: also bring the tails up to date. With False the new object's tails
                are this one's (stale): enough for a trial whose makespan alone is
                wanted; `with_tails` completes it.
        """
        d = list(self.durations)
        for i, x in zip(tasks, durations, strict=True):
            d[int(i)] = float(x)
        out = self._child(d)
        idx = sorted({int(i) for i in tasks})
        if idx:
            out._forward(idx)
        return out.with_tails(idx) if tails else out

    def with_tails(self, tasks: Sequence[int]) -> PathTimes:
        """This object with its tails brought up to date after `tasks` changed duration
        (`changed(..., tails=False)`); returns self."""
        self.tails = list(self.tails)
        idx = sorted({int(i) for i in tasks})
        if idx:
            if self._mirror is not None:
                self._base, self._mirror = self._mirror, None
            self._backward(idx)
        return self

    def _forward(self, changed: list[int]) -> None:
        """Revisit starts and ends from the first changed task on (topological order)."""
        n = len(self.durations)
        dirty = bytearray(n)
        for i in changed:
            dirty[i] = 1
        preds, succs, d = self.preds, self.succs, self.durations
        start, end = self.starts, self.ends
        for v in range(changed[0], n):
            if not dirty[v]:
                continue
            s = 0.0
            for u in preds[v]:
                if end[u] > s:
                    s = end[u]
            e = s + d[v]
            if e != end[v] or s != start[v]:
                start[v] = s
                end[v] = e
                for w in succs[v]:
                    dirty[w] = 1
        self._touched.append(dirty)  # a superset of the tasks whose times changed

    def _backward(self, changed: list[int]) -> None:
        """Revisit tails from the last changed task's predecessors back to the first task."""
        n = len(self.durations)
        dirty = bytearray(n)
        top = -1
        for c in changed:
            for u in self.preds[c]:
                dirty[u] = 1
                if u > top:
                    top = u
        preds, succs, d, tail = self.preds, self.succs, self.durations, self.tails
        for v in range(top, -1, -1):
            if not dirty[v]:
                continue
            t = 0.0
            for w in succs[v]:
                x = d[w] + tail[w]
                if x > t:
                    t = x
            if t != tail[v]:
                tail[v] = t
                for u in preds[v]:
                    dirty[u] = 1
        self._touched.append(dirty)


def _frozen(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The arrays, made read-only (they are shared between objects)."""
    for a in arrays:
        a.flags.writeable = False
    return arrays
