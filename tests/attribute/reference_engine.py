"""The attribution engine as it was before it worked column-wise: an event-by-event sweep
over the elementary intervals, listing every leaf's share of each one. Kept here, and only
here, as the reference the column-wise engine must reproduce."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from eopt.attribute.engine import (
    GAP_FACTOR,
    Attribution,
    CallEnergy,
    RegionEnergy,
    SeriesEnergy,
    _curve,
)
from eopt.model.trace import Event, Trace, TraceError

__all__ = ["reference_attribute"]


def _depths(events: Sequence[Event]) -> dict[int, int]:
    parents = {e.id: e.parent_id for e in events}
    depth: dict[int, int] = {}
    for e in events:
        chain = []
        p = e.id
        while p and p not in depth:
            chain.append(p)
            p = parents[p]
        d = depth[p] if p else -1
        for q in reversed(chain):
            d += 1
            depth[q] = d
    return depth


def reference_attribute(trace: Trace, *, domain: str | None = None) -> Attribution:
    """The attribution as the engine computed it with its event-by-event sweep."""
    series = trace.series_for(domain)
    if not series:
        what = f"no {domain} power series" if domain else "no power samples"
        raise TraceError(
            f"{trace.source}: the trace has {what}; energy cannot be attributed (record power "
            "with the run, or pass a power CSV)"
        )
    origin = trace.start_ns
    integrals = [_curve(s, origin) for s in series]
    labels = [s.label for s in series]
    events = list(trace.events)
    n_ev, n_s = len(events), len(series)
    index = {e.id: k for k, e in enumerate(events)}
    parent = np.array([index.get(e.parent_id, -1) for e in events], dtype=np.int64)
    depth_of = _depths(events)
    start = np.array([(e.start_ns - origin) * 1e-9 for e in events])
    end = np.array([(e.end_ns - origin) * 1e-9 for e in events])

    incl = np.zeros((n_ev, n_s))
    excl = np.zeros((n_ev, n_s))
    incl_unknown = np.zeros(n_ev, dtype=bool)
    excl_unknown = np.zeros(n_ev, dtype=bool)
    inside = np.zeros(n_s)

    if n_ev:
        bounds = np.unique(np.concatenate([start, end]))
        energy = np.diff(np.stack([g.at(bounds) for g in integrals]), axis=1)  # (series, j)
        covered_lo = max(g.first for g in integrals)
        covered_hi = min(g.last for g in integrals)
        unknown = (bounds[:-1] < covered_lo) | (bounds[1:] > covered_hi)
        first = np.searchsorted(bounds, start).tolist()
        last = np.searchsorted(bounds, end).tolist()
        opens: dict[int, list[int]] = {}
        closes: dict[int, list[int]] = {}
        for k in range(n_ev):
            if last[k] > first[k]:  # zero-length events hold no energy
                opens.setdefault(first[k], []).append(k)
                closes.setdefault(last[k], []).append(k)
        parents = parent.tolist()
        # The sweep only lists who gets what share of which interval; the energies are
        # scattered in one vectorized step afterwards.
        leaf_j: list[int] = []
        leaf_k: list[int] = []
        leaf_w: list[float] = []
        incl_j: list[int] = []
        incl_k: list[int] = []
        incl_w: list[float] = []
        busy: list[int] = []
        active: set[int] = set()
        active_children = [0] * n_ev
        for j in range(bounds.size - 1):
            for k in closes.get(j, ()):
                active.discard(k)
                if parents[k] >= 0:
                    active_children[parents[k]] -= 1
            for k in opens.get(j, ()):
                active.add(k)
                if parents[k] >= 0:
                    active_children[parents[k]] += 1
            if not active:
                continue
            busy.append(j)
            leaves = [k for k in active if active_children[k] == 0]
            w = 1.0 / len(leaves)
            for leaf in leaves:
                leaf_j.append(j)
                leaf_k.append(leaf)
                leaf_w.append(w)
                k = leaf
                while k >= 0:
                    incl_j.append(j)
                    incl_k.append(k)
                    incl_w.append(w)
                    k = parents[k]
        if busy:
            inside = energy[:, busy].sum(axis=1)
        for rows, cols, weights, out, flags in (
            (leaf_k, leaf_j, leaf_w, excl, excl_unknown),
            (incl_k, incl_j, incl_w, incl, incl_unknown),
        ):
            if not rows:
                continue
            ks, js = np.asarray(rows), np.asarray(cols)
            np.add.at(out, ks, (energy[:, js] * np.asarray(weights)).T)
            flags[ks[unknown[js]]] = True

    per_series = []
    gaps_by_series: list[list[tuple[float, float]]] = []
    for s, g in zip(series, integrals, strict=True):
        period = s.median_interval_s()
        steps = np.diff(g.t)
        where = np.flatnonzero(steps > GAP_FACTOR * period) if math.isfinite(period) else []
        gaps = [(float(g.t[i]), float(g.t[i + 1])) for i in where]
        gaps_by_series.append(gaps)
        per_series.append(
            SeriesEnergy(
                domain=s.domain,
                device_id=s.device_id,
                energy_j=float(g.cum[-1]),
                time_s=g.last - g.first,
                n_samples=int(s.times_ns.size),
                period_s=period,
                gaps=tuple(gaps),
            )
        )
    total = float(sum(se.energy_j for se in per_series))
    outside = float(total - inside.sum())

    flags_of: list[list[str]] = [[] for _ in range(n_ev)]
    periods = [se.period_s for se in per_series if math.isfinite(se.period_s)]
    short = (end - start) < 2 * max(periods) if periods else np.zeros(n_ev, dtype=bool)
    for label, gaps, se in zip(labels, gaps_by_series, per_series, strict=True):
        for ga, gb in gaps:
            note = (
                f"a {label} sampling gap of {(gb - ga) * 1e3:.0f} ms "
                f"(period {se.period_s * 1e3:.0f} ms) falls in a call"
            )
            for k in np.flatnonzero((start < gb) & (end > ga)).tolist():
                flags_of[k].append(note)
    for k in np.flatnonzero(incl_unknown).tolist():
        flags_of[k].append("a call reaches outside the power trace: its energy is unknown")
    incl_total, excl_total = incl.sum(axis=1).tolist(), excl.sum(axis=1).tolist()
    starts, ends = start.tolist(), end.tolist()
    calls = [
        CallEnergy(
            event=events[k],
            depth=depth_of[events[k].id],
            start_s=starts[k],
            end_s=ends[k],
            inclusive_energy_j=None if incl_unknown[k] else incl_total[k],
            exclusive_energy_j=None if excl_unknown[k] else excl_total[k],
        )
        for k in range(n_ev)
    ]
    calls.sort(key=lambda c: (c.start_s, c.depth))

    regions = _by_name(
        events, depth_of, start, incl, excl, incl_unknown, excl_unknown, flags_of, short
    )
    regions = [_with_share(r, labels, total) for r in regions]
    warnings = [f"{r.name}: {flag}" for r in regions for flag in r.flags]
    return Attribution(
        regions=tuple(regions),
        series=tuple(per_series),
        outside_energy_j=outside,
        total_energy_j=total,
        total_time_s=(trace.end_ns - origin) * 1e-9,
        calls=tuple(calls),
        source=trace.source,
        rank=trace.rank,
        warnings=tuple(warnings),
    )


@dataclass
class _Acc:
    name: str
    category: str
    depth: int
    first: float
    calls: int = 0
    time_s: float = 0.0
    incl: np.ndarray | None = None
    excl: np.ndarray | None = None
    incl_unknown: bool = False
    excl_unknown: bool = False
    short: int = 0
    flags: list[str] = field(default_factory=list)


def _by_name(
    events: Sequence[Event],
    depth_of: dict[int, int],
    start: np.ndarray,
    incl: np.ndarray,
    excl: np.ndarray,
    incl_unknown: np.ndarray,
    excl_unknown: np.ndarray,
    flags_of: list[list[str]],
    short: np.ndarray,
) -> list[_Acc]:
    accs: dict[str, _Acc] = {}
    for k, e in enumerate(events):
        acc = accs.get(e.name)
        if acc is None:
            acc = accs[e.name] = _Acc(e.name, e.category, depth_of[e.id], float(start[k]))
            acc.incl = np.zeros(incl.shape[1])
            acc.excl = np.zeros(incl.shape[1])
        acc.calls += 1
        acc.time_s += e.duration_s
        if float(start[k]) < acc.first:  # the first call places the name in the tree
            acc.first, acc.depth = float(start[k]), depth_of[e.id]
        acc.incl = acc.incl + incl[k]  # type: ignore[operator]
        acc.excl = acc.excl + excl[k]  # type: ignore[operator]
        acc.incl_unknown |= bool(incl_unknown[k])
        acc.excl_unknown |= bool(excl_unknown[k])
        acc.short += int(short[k])
        for flag in flags_of[k]:
            if flag not in acc.flags:
                acc.flags.append(flag)
    return sorted(accs.values(), key=lambda a: (a.first, a.depth))


def _with_share(acc: _Acc, labels: Sequence[str], total: float) -> RegionEnergy:
    assert acc.incl is not None and acc.excl is not None
    inclusive = None if acc.incl_unknown else float(acc.incl.sum())
    exclusive = None if acc.excl_unknown else float(acc.excl.sum())
    share = inclusive / total if inclusive is not None and total > 0 else None
    by_series: dict[str, float | None] = {
        label: (None if acc.incl_unknown else float(v))
        for label, v in zip(labels, acc.incl, strict=True)
    }
    return RegionEnergy(
        name=acc.name,
        category=acc.category,
        depth=acc.depth,
        calls=acc.calls,
        time_s=acc.time_s,
        inclusive_energy_j=inclusive,
        exclusive_energy_j=exclusive,
        share=share,
        by_series=by_series,
        short_calls=acc.short,
        flags=tuple(acc.flags),
    )
