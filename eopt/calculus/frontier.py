"""Operating frontiers: achievable (T, E) sets, their Pareto frontiers, and composition.

An element swept over its implementations κ and operating points ω lands on a set of
points in the time–energy plane (its achievable set); removing dominated points leaves
its operating frontier (paper §6.1). Frontiers compose (§6.2, App. H):

* sequentially (⊗) by the Pareto-minimum of the Minkowski sum (Property 6.1);
* in parallel on one device (⊕) or across devices (⊕multi) by a sweep coupled through
  the makespan, which must consider points that are dominated in (T, E) but not in
  (T, d): an element with slack affects the composite only through its dynamic energy
  (and its static power), so a slower, (T, E)-dominated point can lower the total
  (Property 6.2, slack-to-energy conversion).

Every :class:`Frontier` therefore keeps two sets: :attr:`Frontier.points`, the (T, E)
frontier, and :attr:`Frontier.candidates`, the points a parallel coupling may need —
those not dominated, by a point of the same device-wide setting, in every quantity
through which an element can enter a parallel composite (see ``_coupling_mask``).

Example:
    >>> from eopt.model.signature import Signature
    >>> cells = [Signature("f", 50.0, 1.0, 80.0), Signature("f", 50.0, 2.0, 10.0),
    ...          Signature("f", 50.0, 2.5, 30.0)]
    >>> [p.time for p in Frontier.from_signatures(cells, dominance="point").points]
    [1.0, 2.0]
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eopt.calculus.operators import clark_max
from eopt.calculus.uncertainty import c_alpha
from eopt.model.signature import Signature

__all__ = ["MIXED_SETTING", "Frontier", "FrontierError", "FrontierPoint", "pareto_mask"]

DOMINANCE_MODES = ("interval", "point")


class _Mixed:
    """Marker for a composite point whose parts run at different device-wide settings."""

    def __repr__(self) -> str:
        return "MIXED_SETTING"


MIXED_SETTING: Hashable = _Mixed()
"""The :attr:`FrontierPoint.setting` of a composite mixing device-wide settings."""


class FrontierError(ValueError):
    """Frontiers that cannot be built or composed (empty input, no compatible pairs …)."""


@dataclass(frozen=True, eq=False)
class FrontierPoint:
    """One achievable point of an element (or of a composite) in the (T, E) plane.

    Attributes:
        time: T, in s.
        energy: E, in J.
        var_time: σ_T² of one run, in s².
        var_energy: σ_E² of one run, in J².
        signature: The (κ, ω) cell behind the point, when there is one (``None`` for
            composite points; see :attr:`parts`).
        dynamic_energy: d, in J; what a parallel coupling adds.
        setting: The device-wide setting key (``op_point.device_key``) the point runs at,
            :data:`MIXED_SETTING` for a composite of several settings.
        parts: For a composite point, the operand points it was made of, in order.
    """

    time: float
    energy: float
    var_time: float
    var_energy: float
    signature: Signature | None
    dynamic_energy: float
    setting: Hashable = None
    parts: tuple[FrontierPoint, ...] = ()

    @classmethod
    def from_signature(cls, sig: Signature) -> FrontierPoint:
        """The point of one measured (κ, ω) cell."""
        return cls(
            time=sig.time,
            energy=sig.energy,
            var_time=sig.var_time,
            var_energy=sig.var_energy,
            signature=sig,
            dynamic_energy=sig.dynamic_energy,
            setting=sig.op_point.device_key,
        )

    @property
    def static_power(self) -> float:
        """s = (E − d)/T, the (time-averaged) static power, in W."""
        return (self.energy - self.dynamic_energy) / self.time if self.time > 0 else 0.0

    @property
    def std_time(self) -> float:
        """σ_T, in s."""
        return math.sqrt(self.var_time)

    @property
    def std_energy(self) -> float:
        """σ_E, in J."""
        return math.sqrt(self.var_energy)

    def cells(self) -> list[Signature]:
        """The measured cells behind the point, in composition order (leaves of :attr:`parts`)."""
        if self.signature is not None:
            return [self.signature]
        return [sig for part in self.parts for sig in part.cells()]

    def __repr__(self) -> str:
        label = ""
        if self.signature is not None:
            label = f", {self.signature.impl}@{self.signature.op_point.label()}"
        return f"FrontierPoint(T={self.time:.6g} s, E={self.energy:.6g} J{label})"


# Dominance --------------------------------------------------------------------------------
def _coefficient(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise FrontierError(f"confidence must lie in (0, 1), got {confidence}")
    return c_alpha(confidence)


def pareto_mask(
    time: np.ndarray,
    energy: np.ndarray,
    std_time: np.ndarray | None = None,
    std_energy: np.ndarray | None = None,
    c: float = 0.0,
) -> np.ndarray:
    """Which points survive (T, E) dominance, optionally under uncertainty.

    A point p is discarded when some other point q is no worse in both coordinates and
    better in one, with intervals: ``q.T + c·σ_T(q) ≤ p.T − c·σ_T(p)`` and the same for E
    (one of the two strict). With ``c = 0`` this is plain Pareto dominance. Exact
    duplicates keep their first occurrence.

    Args:
        time: T per point, in s.
        energy: E per point, in J.
        std_time: σ_T per point (s); zeros when omitted.
        std_energy: σ_E per point (J); zeros when omitted.
        c: Interval half-width multiplier c_α (1.96 for 95 %).

    Returns:
        A boolean mask of the surviving points.
    """
    t = np.asarray(time, dtype=float)
    e = np.asarray(energy, dtype=float)
    n = t.size
    if n == 0:
        return np.zeros(0, dtype=bool)
    st = np.zeros(n) if std_time is None else np.asarray(std_time, dtype=float)
    se = np.zeros(n) if std_energy is None else np.asarray(std_energy, dtype=float)
    t_hi, t_lo = t + c * st, t - c * st
    e_hi, e_lo = e + c * se, e - c * se
    keep = _first_of_duplicates(t, e, st, se)
    idx = np.flatnonzero(keep)
    order = np.argsort(t_hi[idx], kind="stable")
    sorted_t_hi = t_hi[idx][order]
    run_min_e_hi = np.minimum.accumulate(e_hi[idx][order])
    # (a) some q with q.T_hi ≤ p.T_lo and q.E_hi < p.E_lo.
    k = np.searchsorted(sorted_t_hi, t_lo[idx], side="right")
    best = np.where(k > 0, run_min_e_hi[np.maximum(k - 1, 0)], np.inf)
    dominated = best < e_lo[idx]
    # (b) some q with q.T_hi < p.T_lo and q.E_hi ≤ p.E_lo.
    k = np.searchsorted(sorted_t_hi, t_lo[idx], side="left")
    best = np.where(k > 0, run_min_e_hi[np.maximum(k - 1, 0)], np.inf)
    dominated |= best <= e_lo[idx]
    keep[idx[dominated]] = False
    return keep


def _first_of_duplicates(*columns: np.ndarray) -> np.ndarray:
    stacked = np.column_stack(columns)
    _, first = np.unique(stacked, axis=0, return_index=True)
    keep = np.zeros(stacked.shape[0], dtype=bool)
    keep[first] = True
    return keep


def _nondominated(columns: Sequence[np.ndarray]) -> np.ndarray:
    """Mask of points not dominated in every column at once (weakly in all, strictly in one).

    Points are visited in lexicographic order, so a point can only be dominated by one
    visited before it; each is compared with the kept points only. O(n · kept) in numpy.
    """
    data = np.column_stack(columns)
    keep = _first_of_duplicates(*columns)
    order = np.lexsort(tuple(data[:, k] for k in reversed(range(data.shape[1]))))
    kept = np.empty_like(data)
    count = 0
    for i in order.tolist():
        if not keep[i]:
            continue
        row = data[i]
        if count and bool(np.any(np.all(kept[:count] <= row, axis=1))):
            keep[i] = False
            continue
        kept[count] = row
        count += 1
    return keep


# The frontier -----------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class _Columns:
    """Numeric columns of a point list, for vectorised composition."""

    t: np.ndarray
    e: np.ndarray
    vt: np.ndarray
    ve: np.ndarray
    d: np.ndarray

    @classmethod
    def of(cls, pts: Sequence[FrontierPoint]) -> _Columns:
        return cls(
            t=np.array([p.time for p in pts], dtype=float),
            e=np.array([p.energy for p in pts], dtype=float),
            vt=np.array([p.var_time for p in pts], dtype=float),
            ve=np.array([p.var_energy for p in pts], dtype=float),
            d=np.array([p.dynamic_energy for p in pts], dtype=float),
        )

    @property
    def s(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.t > 0, (self.e - self.d) / np.where(self.t > 0, self.t, 1), 0.0)


class Frontier:
    """The operating frontier of an element or of a composite.

    Args:
        points: Achievable points (any order, dominated ones allowed).
        dominance: ``"interval"`` (discard a point only when an interval-separated point
            dominates it) or ``"point"`` (plain Pareto dominance of the means).
        confidence: Confidence of the intervals used by ``"interval"`` dominance.
        idle_cap_w: The largest idle draw S (W) a later ⊕multi may pad with exactly;
            default: the largest static power among ``points``.

    Attributes:
        points: The frontier, sorted by time ascending.
        candidates: Points kept for parallel coupling (a superset of :attr:`points`): per
            device-wide setting, those not dominated in (T, d, s·T, E − S·T, s).
        achievable: Every point given (for plots: the dominated cells).
        dominance: The dominance rule.
        confidence: The interval confidence.
        idle_cap_w: S, see the argument.

    Assumptions:
        Elements are mutually context-insensitive (paper §4), so a composite's value at a
        choice of points is the operator applied to the points' signatures. Compositions
        are exact (equal to enumerating every combination of cells) for ⊗, for ⊕, and for
        ⊕multi with an explicit idle draw s̄ ≤ :attr:`idle_cap_w`. ⊕multi's default draw
        (each side's own static power) is exact on element frontiers; on a sequential
        composite, whose static power is a time-weighted mean, pass the device's idle
        draw instead.
    """

    def __init__(
        self,
        points: Iterable[FrontierPoint],
        dominance: str = "interval",
        confidence: float = 0.95,
        idle_cap_w: float | None = None,
    ) -> None:
        if dominance not in DOMINANCE_MODES:
            raise FrontierError(
                f"dominance must be one of {list(DOMINANCE_MODES)}, got {dominance!r}"
            )
        self.dominance = dominance
        self.confidence = float(confidence)
        self._c = _coefficient(confidence) if dominance == "interval" else 0.0
        pts = list(points)
        if not pts:
            raise FrontierError("a frontier needs at least one achievable point")
        self.achievable: tuple[FrontierPoint, ...] = tuple(pts)
        cols = _Columns.of(pts)
        keep = pareto_mask(cols.t, cols.e, np.sqrt(cols.vt), np.sqrt(cols.ve), self._c)
        chosen = [pts[i] for i in np.flatnonzero(keep)]
        self.points: tuple[FrontierPoint, ...] = tuple(
            sorted(chosen, key=lambda p: (p.time, p.energy))
        )
        if idle_cap_w is None:
            idle_cap_w = float(np.max(cols.s))
        self.idle_cap_w = float(idle_cap_w)
        self.candidates: tuple[FrontierPoint, ...] = _coupling_candidates(
            pts, keep, self.idle_cap_w
        )

    # Construction -------------------------------------------------------------------------
    @classmethod
    def from_signatures(
        cls,
        sigs: Iterable[Signature],
        dominance: str = "interval",
        confidence: float = 0.95,
    ) -> Frontier:
        """The frontier of an element's achievable set over its (κ, ω) cells.

        Args:
            sigs: Signatures of one element (every κ, ω measured).
            dominance: ``"interval"`` or ``"point"`` (see the class).
            confidence: Confidence of the intervals, e.g. 0.95.

        Raises:
            FrontierError: when ``sigs`` is empty.
        """
        sigs = list(sigs)
        if not sigs:
            raise FrontierError("no signatures given: an element's frontier needs its cells")
        return cls((FrontierPoint.from_signature(s) for s in sigs), dominance, confidence)

    def _like(self, points: Iterable[FrontierPoint], idle_cap_w: float) -> Frontier:
        return Frontier(points, self.dominance, self.confidence, idle_cap_w)

    # Queries ------------------------------------------------------------------------------
    @property
    def fastest(self) -> FrontierPoint:
        """The frontier point with the smallest time."""
        return self.points[0]

    @property
    def min_energy(self) -> FrontierPoint:
        """The frontier point with the smallest energy (ties: the faster one)."""
        return min(self.points, key=lambda p: (p.energy, p.time))

    @property
    def dominated(self) -> tuple[FrontierPoint, ...]:
        """Achievable points that are not on the frontier."""
        on = {id(p) for p in self.points}
        return tuple(p for p in self.achievable if id(p) not in on)

    def __len__(self) -> int:
        return len(self.points)

    def __iter__(self) -> Any:
        return iter(self.points)

    def __repr__(self) -> str:
        return (
            f"Frontier({len(self.points)} points, T {self.fastest.time:.6g}…"
            f"{self.points[-1].time:.6g} s, dominance={self.dominance!r})"
        )

    def to_rows(self) -> list[dict[str, Any]]:
        """The frontier as table rows (one dict per point, units in the keys)."""
        c = _coefficient(self.confidence)
        rows = []
        for p in self.points:
            sig = p.signature
            op = sig.op_point if sig is not None else None
            rows.append(
                {
                    "time_s": p.time,
                    "energy_j": p.energy,
                    "energy_low_j": p.energy - c * p.std_energy,
                    "energy_high_j": p.energy + c * p.std_energy,
                    "std_time_s": p.std_time,
                    "std_energy_j": p.std_energy,
                    "dynamic_energy_j": p.dynamic_energy,
                    "static_power_w": p.static_power,
                    "impl": sig.impl if sig is not None else "",
                    "op_point": op.label() if op is not None else "",
                    "sm_clock_mhz": op.sm_clock_mhz if op is not None else None,
                    "mem_clock_mhz": op.mem_clock_mhz if op is not None else None,
                    "power_limit_w": op.power_limit_w if op is not None else None,
                }
            )
        return rows

    # Composition --------------------------------------------------------------------------
    def seq(self, other: Frontier) -> Frontier:
        """Sequential composition ⊗: Pareto-min of the Minkowski sum (Property 6.1).

        Times, energies, dynamic energies and both variances add. The coupling
        candidates compose the same way (a later parallel coupling may need them).
        """
        a, b = list(self.candidates), list(other.candidates)
        ca, cb = _Columns.of(a), _Columns.of(b)
        ii, jj = np.meshgrid(np.arange(len(a)), np.arange(len(b)), indexing="ij")
        ii, jj = ii.ravel(), jj.ravel()
        t = ca.t[ii] + cb.t[jj]
        e = ca.e[ii] + cb.e[jj]
        d = ca.d[ii] + cb.d[jj]
        vt = ca.vt[ii] + cb.vt[jj]
        ve = ca.ve[ii] + cb.ve[jj]
        return self._from_pairs(other, a, b, ii, jj, t, e, vt, ve, d)

    def par(self, other: Frontier) -> Frontier:
        """Same-device parallel composition ⊕, coupled through the makespan.

        Only pairs sharing the device-wide setting (equal ``op_point.device_key``) combine:
        they share one static power s, and E = s·max(T₁, T₂) + d₁ + d₂. σ_T² is Clark's
        Var(max) and σ_E² = σ_d,1² + σ_d,2² + s²·Var(max) (Property 5.6).

        Raises:
            FrontierError: when no pair of points shares a device-wide setting.
        """
        a, b = list(self.candidates), list(other.candidates)
        pairs = [(i, j) for i, p in enumerate(a) for j, q in enumerate(b) if _same_setting(p, q)]
        if not pairs:
            raise FrontierError(
                "par needs points that share the device-wide operating point; the two "
                f"frontiers have no common setting ({_settings(a)} vs {_settings(b)}); "
                "use par_multi for elements on different devices"
            )
        ii = np.array([i for i, _ in pairs])
        jj = np.array([j for _, j in pairs])
        ca, cb = _Columns.of(a), _Columns.of(b)
        s = ca.s[ii]
        _, var_max = clark_max(ca.t[ii], ca.vt[ii], cb.t[jj], cb.vt[jj])
        t = np.maximum(ca.t[ii], cb.t[jj])
        d = ca.d[ii] + cb.d[jj]
        e = s * t + d
        var_d = _var_dynamic(ca, ii) + _var_dynamic(cb, jj)
        ve = var_d + s**2 * var_max
        return self._from_pairs(other, a, b, ii, jj, t, e, var_max, ve, d)

    def par_multi(
        self,
        other: Frontier,
        idle_power: float | None = None,
        other_idle_power: float | None = None,
    ) -> Frontier:
        """Cross-device parallel composition ⊕multi, coupled through the makespan.

        The earlier-finishing side is padded with an idle element to the makespan:
        E = E₁ + E₂ + s̄₁·(T_max − T₁) + s̄₂·(T_max − T₂). σ_E² = σ_d,1² + σ_d,2² +
        (s₁ + s₂)²·Var(max).

        Args:
            other: The frontier on the other device(s).
            idle_power: s̄ of this side's device(s) while padding, in W; ``None``: each
                point's own static power.
            other_idle_power: The same for ``other``.
        """
        a, b = list(self.candidates), list(other.candidates)
        ca, cb = _Columns.of(a), _Columns.of(b)
        ii, jj = np.meshgrid(np.arange(len(a)), np.arange(len(b)), indexing="ij")
        ii, jj = ii.ravel(), jj.ravel()
        ta, tb = ca.t[ii], cb.t[jj]
        t = np.maximum(ta, tb)
        idle_a = ca.s[ii] if idle_power is None else np.full(ii.size, float(idle_power))
        idle_b = cb.s[jj] if other_idle_power is None else np.full(jj.size, float(other_idle_power))
        e = ca.e[ii] + cb.e[jj] + idle_a * (t - ta) + idle_b * (t - tb)
        d = ca.d[ii] + cb.d[jj]
        _, var_max = clark_max(ta, ca.vt[ii], tb, cb.vt[jj])
        var_d = _var_dynamic(ca, ii) + _var_dynamic(cb, jj)
        ve = var_d + (ca.s[ii] + cb.s[jj]) ** 2 * var_max
        return self._from_pairs(other, a, b, ii, jj, t, e, var_max, ve, d, same_device=False)

    def _from_pairs(
        self,
        other: Frontier,
        a: Sequence[FrontierPoint],
        b: Sequence[FrontierPoint],
        ii: np.ndarray,
        jj: np.ndarray,
        t: np.ndarray,
        e: np.ndarray,
        vt: np.ndarray,
        ve: np.ndarray,
        d: np.ndarray,
        same_device: bool = True,
    ) -> Frontier:
        # Prune before building point objects: keep what the (T, E) frontier or a later
        # coupling can use (see _coupling_mask). The composite may pad exactly only with
        # draws both operands were pruned for.
        cap = min(self.idle_cap_w, other.idle_cap_w)
        c = _coefficient(self.confidence) if self.dominance == "interval" else 0.0
        on_front = pareto_mask(t, e, np.sqrt(vt), np.sqrt(ve), c)
        settings = [
            _compose_setting(a[i], b[j]) if same_device else MIXED_SETTING
            for i, j in zip(ii.tolist(), jj.tolist(), strict=True)
        ]
        useful = on_front | _coupling_mask(t, e, d, settings, cap)
        pts = [
            FrontierPoint(
                time=float(t[k]),
                energy=float(e[k]),
                var_time=float(vt[k]),
                var_energy=float(ve[k]),
                signature=None,
                dynamic_energy=float(d[k]),
                setting=settings[k],
                parts=(a[ii[k]], b[jj[k]]),
            )
            for k in np.flatnonzero(useful)
        ]
        return self._like(pts, cap)


def _var_dynamic(cols: _Columns, idx: np.ndarray) -> np.ndarray:
    return np.maximum(0.0, cols.ve[idx] - cols.s[idx] ** 2 * cols.vt[idx])


def _same_setting(p: FrontierPoint, q: FrontierPoint) -> bool:
    if p.setting is MIXED_SETTING or q.setting is MIXED_SETTING:
        return False
    return bool(p.setting == q.setting)


def _compose_setting(p: FrontierPoint, q: FrontierPoint) -> Hashable:
    return p.setting if _same_setting(p, q) else MIXED_SETTING


def _settings(pts: Sequence[FrontierPoint]) -> list[Any]:
    return sorted({repr(p.setting) for p in pts})[:6]


def _coupling_mask(
    t: np.ndarray,
    e: np.ndarray,
    d: np.ndarray,
    settings: Sequence[Hashable],
    idle_cap_w: float,
) -> np.ndarray:
    """Points a later parallel coupling may need: per device-wide setting, those not
    dominated in (T, d, s·T, E − S·T, s) with S = ``idle_cap_w``.

    Why these coordinates: in ⊕ (shared s) a point enters as s·T_max + d; in ⊕multi with
    an idle draw s̄ ≤ S as d + s·T + s̄·(T_max − T), i.e. through T, and E − s̄·T, which is
    linear in s̄ and so bounded by its values at s̄ = 0 (E = s·T + d) and s̄ = S; with the
    default draw (each side's own static power) as d + s·T_max. Every coordinate but s adds
    up under ⊗, so a point dropped here stays dominated inside any sequential composite.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(t > 0, (e - d) / np.where(t > 0, t, 1), 0.0)
    groups: dict[Hashable, list[int]] = {}
    for k, key in enumerate(settings):
        groups.setdefault(key, []).append(k)
    keep = np.zeros(t.size, dtype=bool)
    for idx in groups.values():
        arr = np.array(idx)
        cols = [t[arr], d[arr], (e - d)[arr], (e - idle_cap_w * t)[arr], s[arr]]
        keep[arr[_nondominated(cols)]] = True
    return keep


def _coupling_candidates(
    pts: Sequence[FrontierPoint], on_front: np.ndarray, idle_cap_w: float
) -> tuple[FrontierPoint, ...]:
    """The frontier plus the points a parallel coupling may need (see _coupling_mask)."""
    cols = _Columns.of(pts)
    useful = on_front | _coupling_mask(cols.t, cols.e, cols.d, [p.setting for p in pts], idle_cap_w)
    return tuple(sorted((pts[i] for i in np.flatnonzero(useful)), key=lambda p: (p.time, p.energy)))
