"""Energy over a time window from a power sensor's readings or an energy counter.

Both traces are pure data: the meter (:mod:`eopt.measure.meter`) fills them from a device,
and a region's energy is read off them afterwards for any window they cover. The
integration itself is the one power integrator of eopt,
:class:`eopt.attribute.integral.EnergyCurve` (energy counters and interval means:
constant power between knots; point readings: the trapezoid rule); what is here is what
a sensor's readings mean (when a refresh happened, what an edge between refreshes sees).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from eopt.attribute.integral import EnergyCurve

__all__ = ["CounterTrace", "SensorTrace", "TraceCoverageError", "WindowIntegral"]


class TraceCoverageError(ValueError):
    """A window reaches outside the span of the recorded trace."""


@dataclass(frozen=True)
class WindowIntegral:
    """The integral of a trace over one window.

    Attributes:
        energy_j: Energy over the window, in J.
        n_samples: Samples strictly inside the window.
        edge_jump_w: Largest power change across a sample interval that contains an edge,
            in W (how much the unseen edge behaviour could matter).
    """

    energy_j: float
    n_samples: int
    edge_jump_w: float


class CounterTrace:
    """Timestamped readings of a cumulative energy counter.

    Between readings the energy is interpolated linearly (constant power); a window whose
    edges were read directly (the meter reads the counter at every mark) is exact up to the
    counter's own resolution.
    """

    def __init__(self) -> None:
        self._t: list[float] = []
        self._e: list[float] = []
        self._lock = threading.Lock()
        self._curve_cache: EnergyCurve | None = None

    def _curve(self) -> EnergyCurve:
        """The readings as an energy curve (caller holds the lock); rebuilt only when
        readings were added, so many windows read after a run cost one build."""
        curve = self._curve_cache
        if curve is None or curve.t.size != len(self._t):
            curve = self._curve_cache = EnergyCurve.from_energy(self._t, self._e)
        return curve

    def append(self, time_s: float, energy_j: float) -> None:
        """Add one reading; readings that do not advance in time are ignored."""
        with self._lock:
            if self._t and time_s <= self._t[-1]:
                return
            self._t.append(time_s)
            self._e.append(energy_j)

    def __len__(self) -> int:
        return len(self._t)

    @property
    def span(self) -> tuple[float, float]:
        """(first, last) reading time in s; (nan, nan) when empty."""
        with self._lock:
            if not self._t:
                return (float("nan"), float("nan"))
            return (self._t[0], self._t[-1])

    def covers(self, start_s: float, end_s: float) -> bool:
        """Whether readings exist at or before ``start_s`` and at or after ``end_s``."""
        first, last = self.span
        return bool(self._t) and first <= start_s and last >= end_s

    def readings(self) -> tuple[list[float], list[float]]:
        """Copies of the reading times (s) and counter values (J)."""
        with self._lock:
            return list(self._t), list(self._e)

    def cumulative(self, times_s: Sequence[float] | np.ndarray) -> np.ndarray:
        """The counter at each time (interpolated at constant power between readings;
        clipped to the readings), in J."""
        with self._lock:
            if not self._t:
                raise TraceCoverageError("the energy counter was never read")
            return self._curve().at(times_s)

    def integrate(self, start_s: float, end_s: float) -> WindowIntegral:
        """Energy over ``[start_s, end_s]``.

        Raises:
            TraceCoverageError: when no readings bracket the window.
        """
        if end_s < start_s:
            raise ValueError(f"window ends ({end_s}) before it starts ({start_s})")
        with self._lock:
            if not self._t or self._t[0] > start_s or self._t[-1] < end_s:
                first = self._t[0] if self._t else float("nan")
                last = self._t[-1] if self._t else float("nan")
                raise TraceCoverageError(
                    f"energy counter read over [{first:.6g}, {last:.6g}] s but the window is "
                    f"[{start_s:.6g}, {end_s:.6g}] s"
                )
            if len(self._t) == 1:
                return WindowIntegral(0.0, 0, 0.0)
            inside = bisect.bisect_right(self._t, end_s) - bisect.bisect_right(self._t, start_s)
            return WindowIntegral(self._curve().between(start_s, end_s), inside, 0.0)

    def edge_error_j(self, time_s: float) -> float:
        """How far the interpolated energy at ``time_s`` may be off, in J.

        Zero where the counter was read at that instant; otherwise the spread of the mean
        powers of the reading intervals around it times the distance to the nearest
        reading (the draw between two readings is unseen).
        """
        with self._lock:
            n = len(self._t)
            i = bisect.bisect_right(self._t, time_s) - 1
            if n < 2 or (i >= 0 and self._t[i] == time_s):
                return 0.0
            i = min(max(i, 0), n - 2)
            powers = []
            for k in (i - 1, i, i + 1):
                if 0 <= k < n - 1 and self._t[k + 1] > self._t[k]:
                    powers.append((self._e[k + 1] - self._e[k]) / (self._t[k + 1] - self._t[k]))
            gap = min(time_s - self._t[i], self._t[i + 1] - time_s)
            return (max(powers) - min(powers)) * max(gap, 0.0) if powers else 0.0


class SensorTrace:
    """Polled readings of a power sensor that refreshes only every sensor period.

    The sensor is polled much faster than it refreshes, so each refresh shows up as a new
    value at a poll; that fixes the refresh instant ``u_k`` to within one polling period.
    A repeated value is not a new refresh, but the refresh one period before a change is
    known to have carried the old value.

    Two sensor kinds:

    * ``point`` (e.g. NVML's instantaneous power): ``r_k`` is the power at ``u_k``; between
      refreshes the power is taken as linear (trapezoidal rule).
    * ``interval_mean`` (a field averaging over the whole refresh interval, such as the
      simulator's ``average`` with its window set to the period): ``r_k`` is the mean
      power over ``(u_{k−1}, u_k]``, so the energy up to every refresh instant is exact. A
      field that averages only part of the interval (NVML's 25 ms of 100 ms) is not one:
      the meter reads it as ``point`` at its window's centre.

    At a window edge inside a refresh interval, the power is assumed to step at the edge
    (a region edge is where the load changes): for ``point`` the reading on the inside of
    the edge is held up to it; for ``interval_mean`` the part of the interval outside the
    edge is charged at the neighbouring interval's mean and the rest goes inside. Both are
    exact for a load that steps at the window edges.
    """

    def __init__(self, kind: str = "point", period_s: float = 0.1) -> None:
        if kind not in ("point", "interval_mean"):
            raise ValueError(f"sensor kind must be 'point' or 'interval_mean', got {kind!r}")
        if not period_s > 0:
            raise ValueError(f"sensor period must be positive, got {period_s}")
        self.kind = kind
        self.period_s = float(period_s)
        self._raw_first = float("nan")
        self._raw_last = float("nan")
        self._last_value: float | None = None
        self._u: list[float] = []  # refresh instants
        self._r: list[float] = []  # readings
        self._curve_cache: EnergyCurve | None = None
        self.fields: dict[str, int] = {}
        self._lock = threading.Lock()

    def append(self, time_s: float, power_w: float, field: str = "power") -> None:
        """Add one poll of the sensor (polls must come in time order)."""
        with self._lock:
            self.fields[field] = self.fields.get(field, 0) + 1
            if self._last_value is not None and time_s <= self._raw_last:
                return
            if self._last_value is None:
                self._raw_first = time_s
                self._push(time_s, power_w)
            elif power_w != self._last_value:
                # A point reading is placed at the first poll that saw it (never before the
                # refresh, so a step just after a window edge stays outside the window); an
                # interval mean midway between polls (unbiased for the energy it carries).
                u = time_s if self.kind == "point" else 0.5 * (self._raw_last + time_s)
                # An unchanged reading was refreshed too: the old value still held at the
                # refresh one period before this one (for a point reading, placed as early
                # as it can have been, the mirror of placing the new reading late).
                held = (self._raw_last if self.kind == "point" else u) - self.period_s
                if held > self._u[-1] + 0.5 * self.period_s:  # else it is the last refresh
                    self._push(held, self._last_value)
                self._push(u, power_w)
            self._last_value = power_w
            self._raw_last = time_s

    def _push(self, u: float, r: float) -> None:
        self._u.append(u)
        self._r.append(r)

    def _curve(self) -> EnergyCurve:
        """The refreshes as an energy curve (caller holds the lock): interval means are
        constant over the interval each closes, point readings linear between refreshes.
        Rebuilt only when refreshes were added."""
        curve = self._curve_cache
        if curve is None or curve.t.size != len(self._u):
            build = (
                EnergyCurve.from_means if self.kind == "interval_mean" else EnergyCurve.from_power
            )
            curve = self._curve_cache = build(self._u, self._r)
        return curve

    def __len__(self) -> int:
        return len(self._u)

    @property
    def span(self) -> tuple[float, float]:
        """(first, last) poll time in s; (nan, nan) when empty."""
        with self._lock:
            return (self._raw_first, self._raw_last)

    def covers(self, start_s: float, end_s: float) -> bool:
        """Whether polls exist at or before ``start_s`` and at or after ``end_s``."""
        first, last = self.span
        return first <= start_s and last >= end_s

    def refreshes(self) -> tuple[list[float], list[float]]:
        """Copies of the refresh instants (s) and readings (W)."""
        with self._lock:
            return list(self._u), list(self._r)

    def power_range_w(self, start_s: float, end_s: float) -> float:
        """max − min of the readings refreshed in ``[start_s, end_s]`` and the one in force
        at ``start_s``, in W."""
        with self._lock:
            lo = max(bisect.bisect_right(self._u, start_s) - 1, 0)
            hi = bisect.bisect_right(self._u, end_s)
            chunk = self._r[lo:hi]
            return max(chunk) - min(chunk) if len(chunk) > 1 else 0.0

    def readings_between(self, start_s: float, end_s: float) -> list[float]:
        """The readings refreshed in ``(start_s, end_s]``, in W."""
        with self._lock:
            lo = bisect.bisect_right(self._u, start_s)
            hi = bisect.bisect_right(self._u, end_s)
            return list(self._r[lo:hi])

    # integration -------------------------------------------------------------------------
    def _interval_mean_window(self, a: float, b: float) -> float:
        u, r, cum = self._u, self._r, self._curve().cum
        n = len(u)
        i = bisect.bisect_left(u, a)  # first refresh at or after a
        j = bisect.bisect_right(u, b) - 1  # last refresh at or before b

        def mean_after(k: int) -> float | None:  # mean of (u_k, u_{k+1}]
            return r[k + 1] if k + 1 < n else None

        if i > j:  # no refresh inside: a and b share the interval (u_{i-1}, u_i]
            if i >= n:
                return r[-1] * (b - a)
            if i == 0 or not self._single(i - 1, i):
                return r[i] * (b - a)
            inside = r[i] * (u[i] - u[i - 1])
            inside -= r[i - 1] * (a - u[i - 1]) if i >= 2 else r[i] * (a - u[i - 1])
            after = mean_after(i)
            inside -= (after if after is not None else r[i]) * (u[i] - b)
            return max(inside, 0.0)
        energy = cum[j] - cum[i]
        # start piece [a, u_i] inside interval (u_{i-1}, u_i]
        if i >= 1 and u[i] > a:
            if i >= 2 and self._single(i - 1, i):
                energy += max(r[i] * (u[i] - u[i - 1]) - r[i - 1] * (a - u[i - 1]), 0.0)
            else:  # several refreshes of one value: the power was that value throughout
                energy += r[i] * (u[i] - a)
        # end piece [u_j, b] inside interval (u_j, u_{j+1}]
        if b > u[j]:
            nxt = mean_after(j)
            if nxt is None:
                energy += r[j] * (b - u[j])
            elif j + 2 < n and self._single(j, j + 1):
                energy += max(nxt * (u[j + 1] - u[j]) - r[j + 2] * (u[j + 1] - b), 0.0)
            else:
                energy += nxt * (b - u[j])
        return energy

    def _single(self, k0: int, k1: int) -> bool:
        """Whether ``(u_k0, u_k1]`` is one refresh interval (not merged equal readings)."""
        return self._u[k1] - self._u[k0] < 1.5 * self.period_s

    def _point_window(self, a: float, b: float) -> float:
        u, r, cum = self._u, self._r, self._curve().cum
        n = len(u)
        # A refresh exactly at the start edge read the power just before the window.
        i = bisect.bisect_right(u, a)
        j = bisect.bisect_right(u, b) - 1
        if i > j:  # no refresh inside: the window saw one reading
            k = i if i < n else n - 1
            return r[k] * (b - a)
        return cum[j] - cum[i] + r[i] * (u[i] - a) + r[j] * (b - u[j])

    def stepped_curve(
        self,
        starts: Sequence[float] | np.ndarray,
        ends: Sequence[float] | np.ndarray,
        until_s: float,
    ) -> EnergyCurve:
        """The energy curve with the load stepping at the given window edges.

        :meth:`integrate` assumes the load steps at the edges of the one window it is
        asked about. This is the same assumption for many windows at once, as one curve:
        over any single window whose edges are among ``starts`` and ``ends`` and share no
        refresh interval with other edges, the curve's energy is what :meth:`integrate`
        gives; where several edges share an interval, the first one (point readings) or
        the outermost ones (interval means) step, and the energy of each refresh interval
        is kept. Beyond the last refresh the last reading holds, up to ``until_s``.

        Args:
            starts: Window starts, on the trace's clock, in s.
            ends: Window ends, in s.
            until_s: How far the curve must reach, in s.

        Raises:
            TraceCoverageError: when the sensor never refreshed.
        """
        with self._lock:
            u = np.asarray(self._u, dtype=np.float64)
            r = np.asarray(self._r, dtype=np.float64)
        if not u.size:
            raise TraceCoverageError("the power sensor was never read")
        starts = np.asarray(starts, dtype=np.float64)
        ends = np.asarray(ends, dtype=np.float64)
        edges = np.unique(np.concatenate([starts, ends]))
        if self.kind == "point":
            t, p = _point_steps(u, r, edges)
            if until_s > t[-1]:
                t, p = np.append(t, until_s), np.append(p, r[-1])
            return EnergyCurve.from_power(t, p)
        t, m = _mean_steps(
            u, r, edges, np.isin(edges, starts), np.isin(edges, ends), 1.5 * self.period_s
        )
        if until_s > t[-1]:
            t, m = np.append(t, until_s), np.append(m, r[-1])
        return EnergyCurve.from_means(t, m)

    def integrate(self, start_s: float, end_s: float) -> WindowIntegral:
        """Energy over ``[start_s, end_s]``.

        Raises:
            TraceCoverageError: when polls do not reach both edges.
        """
        if end_s < start_s:
            raise ValueError(f"window ends ({end_s}) before it starts ({start_s})")
        if not self.covers(start_s, end_s):
            first, last = self.span
            raise TraceCoverageError(
                f"power sensor polled over [{first:.6g}, {last:.6g}] s but the window is "
                f"[{start_s:.6g}, {end_s:.6g}] s"
            )
        with self._lock:
            if end_s == start_s:  # an empty window holds no energy, whatever the pieces say
                energy = 0.0
            elif self.kind == "interval_mean":
                energy = float(self._interval_mean_window(start_s, end_s))
            else:
                energy = float(self._point_window(start_s, end_s))
            # Refreshes that saw the window: strictly after its start for a point reading
            # (one at the start edge read the power before it).
            first = (bisect.bisect_right if self.kind == "point" else bisect.bisect_left)(
                self._u, start_s
            )
            inside = bisect.bisect_right(self._u, end_s) - first
        return WindowIntegral(energy_j=energy, n_samples=inside, edge_jump_w=0.0)


def _point_steps(u: np.ndarray, r: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Point readings with a step at the first edge of each refresh interval.

    In ``[u_k, u_{k+1})`` holding an edge, the power is ``r_k`` up to the first edge and
    ``r_{k+1}`` after it (an edge at ``u_k`` itself counts in the interval it opens, as a
    refresh at a window's start read the power before it). Returns power samples, two at
    each step.
    """
    k = np.searchsorted(u, edges, side="right") - 1
    held = (k >= 0) & (k <= u.size - 2)
    ks, first = np.unique(k[held], return_index=True)
    step = edges[held][first]
    t = np.concatenate([u, step, step])
    p = np.concatenate([r, r[ks], r[ks + 1]])
    # At one instant: the refresh, then the power before the step, then after it.
    rank = np.concatenate([np.zeros(u.size), np.ones(ks.size), np.full(ks.size, 2.0)])
    order = np.lexsort((rank, t))
    return t[order], p[order]


def _mean_steps(
    u: np.ndarray,
    r: np.ndarray,
    edges: np.ndarray,
    is_start: np.ndarray,
    is_end: np.ndarray,
    single_s: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Interval means with the outside of the outermost edges at the neighbours' means.

    In ``(u_{k-1}, u_k]`` (mean ``r_k``, one refresh interval: shorter than ``single_s``)
    holding edges strictly inside, the part before a first edge that opens a window is
    charged at the previous interval's mean (``r_k`` for the first interval), the part
    after a last edge that closes one at the next interval's mean (``r_k`` for the last),
    and the rest at the constant power that keeps the interval's energy ``r_k·Δ``; when
    the neighbours' means leave nothing (or no room) for the rest, their pieces are scaled
    to that energy. Returns knot times and the mean power over the interval each closes.
    """
    n = u.size
    k = np.searchsorted(u, edges, side="left")
    within = (k >= 1) & (k <= n - 1)
    within[within] = edges[within] < u[k[within]]
    k, e, opens, closes = k[within], edges[within], is_start[within], is_end[within]
    if not k.size:
        return u, r
    ks, first = np.unique(k, return_index=True)
    last = np.append(first[1:], k.size) - 1
    lo, hi = u[ks - 1], u[ks]
    single = (hi - lo) < single_s
    left = opens[first] & single
    right = closes[last] & single
    mean = r[ks]
    energy = mean * (hi - lo)
    before = np.where(ks >= 2, r[np.maximum(ks - 1, 0)], mean)
    after = np.where(ks + 1 <= n - 1, r[np.minimum(ks + 1, n - 1)], mean)
    m0 = np.where(left, e[first], lo)
    m1 = np.where(right, e[last], hi)
    pieces = before * (m0 - lo) + after * (hi - m1)
    rest = energy - pieces
    squeezed = (rest < 0) | (m1 <= m0)
    scale = np.where(squeezed & (pieces > 0), energy / np.where(pieces > 0, pieces, 1.0), 1.0)
    flat = squeezed & ~(pieces > 0)  # no room and nothing to scale: spread it evenly
    before = np.where(flat, mean, before * scale)
    after = np.where(flat, mean, after * scale)
    middle = np.where(squeezed, 0.0, np.maximum(rest, 0.0) / np.where(m1 > m0, m1 - m0, 1.0))
    # An interval whose edges change nothing (merged readings, or no edge facing out)
    # keeps its own mean exactly.
    middle = np.where(left | right, middle, mean)
    means = r.copy()
    means[ks] = np.where(right, after, middle)
    inner = right & ~(left & (m1 <= m0))  # the middle's end, when it has one
    t = np.concatenate([u, m0[left], m1[inner]])
    m = np.concatenate([means, before[left], middle[inner]])
    order = np.argsort(t, kind="stable")
    return t[order], m[order]
