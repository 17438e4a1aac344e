"""Energy over time from a sensor's readings: the one power integrator of eopt.

An :class:`EnergyCurve` is the cumulative energy of one sensor as a function of time,
known at its knots and interpolated between them by one of two rules:

* **power samples** (:meth:`EnergyCurve.from_power`): the power is linear between
  samples, so the energy between two samples is their trapezoid and the energy up to any
  instant takes the power interpolated linearly there. A power series of a trace, and a
  power sensor's point readings, are integrated this way.
* **energies** (:meth:`EnergyCurve.from_energy`, :meth:`EnergyCurve.from_means`): the
  cumulative energy is known at each knot (an energy counter's readings, or the mean power
  of each interval), and the power is constant between knots, so the energy is
  interpolated linearly. Where a knot is hit exactly, its own value is returned.

The attribution engine (:mod:`eopt.attribute.engine`) and the meter's traces
(:mod:`eopt.measure.integrate`) both integrate through this class. Times are in any unit
of seconds the caller keeps consistent (s from a trace's start, or a device's clock).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["EnergyCurve"]


class EnergyCurve:
    """Cumulative energy of one sensor as a function of time, in J.

    Build it with :meth:`from_power`, :meth:`from_energy` or :meth:`from_means`.

    Attributes:
        t: Knot times, in s, non-decreasing (float64).
        cum: Cumulative energy at each knot, in J.
        p: Power at each knot, in W, for the power-samples rule; None for the energies rule
            (constant power between knots).
    """

    __slots__ = ("cum", "p", "t")

    def __init__(self, t: np.ndarray, cum: np.ndarray, p: np.ndarray | None = None) -> None:
        self.t = t
        self.cum = cum
        self.p = p

    @classmethod
    def from_power(
        cls, times_s: Sequence[float] | np.ndarray, power_w: Sequence[float] | np.ndarray
    ) -> EnergyCurve:
        """Power samples, linear between samples (the trapezoid rule).

        Two samples may share a time: the power steps there (no energy in between).

        Args:
            times_s: Sample times, in s, non-decreasing (at least one).
            power_w: Power at each sample, in W.
        """
        t = np.asarray(times_s, dtype=np.float64)
        p = np.asarray(power_w, dtype=np.float64)
        area = 0.5 * (p[1:] + p[:-1]) * np.diff(t)
        return cls(t, np.concatenate([[0.0], np.cumsum(area)]), p)

    @classmethod
    def from_energy(
        cls, times_s: Sequence[float] | np.ndarray, energy_j: Sequence[float] | np.ndarray
    ) -> EnergyCurve:
        """Readings of a cumulative energy counter (constant power between readings).

        The counter's values are kept as they are (no re-basing), so a window's energy is
        exactly the difference of two readings where both edges were read.

        Args:
            times_s: Reading times, in s, strictly increasing (at least one).
            energy_j: The counter at each reading, in J.
        """
        t = np.asarray(times_s, dtype=np.float64)
        return cls(t, np.asarray(energy_j, dtype=np.float64))

    @classmethod
    def from_means(
        cls, times_s: Sequence[float] | np.ndarray, mean_w: Sequence[float] | np.ndarray
    ) -> EnergyCurve:
        """Mean powers of the intervals between knots (constant power in each).

        Args:
            times_s: Knot times, in s, non-decreasing (at least one).
            mean_w: ``mean_w[k]`` is the mean power over ``(times_s[k-1], times_s[k]]``, in
                W; ``mean_w[0]`` is not used.
        """
        t = np.asarray(times_s, dtype=np.float64)
        m = np.asarray(mean_w, dtype=np.float64)
        return cls(t, np.concatenate([[0.0], np.cumsum(m[1:] * np.diff(t))]))

    @property
    def first(self) -> float:
        """The first knot's time, in s."""
        return float(self.t[0])

    @property
    def last(self) -> float:
        """The last knot's time, in s."""
        return float(self.t[-1])

    @property
    def energy_j(self) -> float:
        """Energy from the first knot to the last, in J."""
        return float(self.cum[-1] - self.cum[0])

    def at(self, x: Sequence[float] | np.ndarray | float) -> np.ndarray:
        """Cumulative energy at each time in ``x`` (clipped to the knots), in J."""
        t = self.t
        x = np.minimum(np.maximum(np.asarray(x, dtype=np.float64), t[0]), t[-1])
        if t.size < 2:
            return np.full(x.shape, self.cum[0])
        right = np.searchsorted(t, x, side="right") - 1
        return self._value(x, right, np.minimum(np.maximum(right, 0), t.size - 2))

    def between(self, start_s: float, end_s: float) -> float:
        """Energy over ``[start_s, end_s]`` (clipped to the knots), in J."""
        t = self.t
        if t.size < 2:
            return 0.0
        # One instant at a time, without arrays: a meter asks for many single windows.
        ends = []
        for x in (start_s, end_s):
            x = min(max(float(x), t[0]), t[-1])
            right = int(np.searchsorted(t, x, side="right")) - 1
            ends.append(self._value(x, right, min(max(right, 0), t.size - 2)))
        return float(ends[1] - ends[0])

    def _value(self, x: Any, right: Any, i: Any) -> Any:
        """The energy at ``x`` (an array, or one instant) in knot interval ``i``;
        ``right`` is the last knot at or before ``x``."""
        t, cum = self.t, self.cum
        t0, t1 = t[i], t[i + 1]
        if self.p is not None:
            p0, p1 = self.p[i], self.p[i + 1]
            px = p0 + (p1 - p0) * (x - t0) / (t1 - t0)
            return cum[i] + 0.5 * (x - t0) * (p0 + px)
        e0, e1 = cum[i], cum[i + 1]
        value = e0 + (x - t0) / (t1 - t0) * (e1 - e0)
        # A reading hit exactly is its own value, not the interpolation's rounding of it.
        hit = np.maximum(right, 0)  # right ≤ size − 1 already
        if np.ndim(x) == 0:
            return cum[hit] if t[hit] == x else value
        return np.where(t[hit] == x, cum[hit], value)

    def inside(self, start_s: float, end_s: float) -> float:
        """The knot intervals wholly inside ``[start_s, end_s]``, in J (the partial
        intervals at both edges are left out)."""
        i = int(np.searchsorted(self.t, start_s, side="left"))
        j = int(np.searchsorted(self.t, end_s, side="right")) - 1
        return float(self.cum[j] - self.cum[i]) if j > i else 0.0
