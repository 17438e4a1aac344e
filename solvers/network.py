"""The hull LP solved through its dual, a minimum-cost circulation (Fulkerson 1961).

The hull LP (`solvers.lp`) is the convex project time–cost trade-off: each task's
effective cost f_i is convex, piecewise linear and falling in its duration t_i, and
the schedule must fit the deadline. Its dual sends a flow φ through the DAG from a
source σ to a sink τ, and back over a return arc that costs the deadline D per unit:

    maximize   Σ_i h_i(φ_i) − D·F₂,      h_i(φ) = min_t f_i(t) + φ·t,

with F₂ the flow above S̄ (held to the deadline: all of it). φ_i is the task's price of
time, W. h_i is concave and piecewise linear: one arc per hull vertex k from the
task's start node to its end node, of cost −d_k (s) and capacity the width of the
price interval on which d_k is the best duration (the fastest vertex: unbounded).

`HullNetwork.solve` runs the network interior-point method (`solvers.flowipm`) and
returns the LP optimum in the same form as the HiGHS model of `solvers.lp`:

- **the bound** from a flow that conserves exactly: the interior point's flow,
  re-propagated through the DAG in topological order with its own split ratios
  (`certified_bound`); any such flow bounds every schedule from below (weak duality),
  so the bound is certified whatever the interior point's residuals;
- **the schedule** at a vertex of the optimal face: the latest event times that keep
  complementary slackness with that flow — every duration in the subdifferential its
  price selects, every arc that carries flow tight — by one shortest-path pass
  (Dijkstra after Johnson's reweighting with the interior point's own times).

Assumptions:
    The problem is uncoupled (no groups, no transitions), its tasks are in
    topological order (`IndexedProblem`), and it is scaled (`solvers.scaling`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla
from scipy.sparse.csgraph import dijkstra

from solvers.flowipm import FlowResult, min_cost_circulation
from solvers.indexed import IndexedProblem

#: Relative distance within which a schedule's duration is taken to be a hull vertex.
SNAP_RTOL = 1e-7

#: Relative tolerance on the deadline below which the fastest makespan still counts
#: as meeting it (HiGHS's primal feasibility tolerance is 1e-7, absolute).
FEASIBLE_RTOL = 1e-9

#: Deadlines are solved at least this much (relative) above the fastest makespan.
DEGENERATE_RTOL = 1e-12


@dataclass
class NetworkPoint:
    """An optimum of the hull LP from the network method.

    Attributes:
        objective: certified lower bound on the LP objective (J, scaled units, without
            the idle constant of a problem held to its deadline).
        t: duration per task, s (a hull vertex where it sits on one).
        starts: start per task, s.
        horizon: H, s.
        primal: the schedule's own LP objective (≥ `objective`; equal at the optimum).
        iterations: interior-point steps.
    """

    objective: float
    t: np.ndarray
    starts: np.ndarray
    horizon: float
    primal: float
    iterations: int


class HullNetwork:
    """The dual network of one problem's hull LP, re-solvable with tasks pinned.

    Nodes: start s_i = i, end e_i = n + i, σ = 2n, τ = 2n + 1. Arcs, in this order:
    the hull-vertex arcs of every task (slowest first), the precedence arcs e_u → s_v,
    σ → s_i for tasks without predecessors, e_i → τ for tasks without successors, and
    the return arcs τ → σ (cost 0 up to S̄, then cost D).

    Args:
        ip: the (scaled, uncoupled) problem.
        hull: per task, the mode indices of its lower-hull vertices, fastest first.
    """

    def __init__(self, ip: IndexedProblem, hull: Sequence[Sequence[int]]) -> None:
        n = ip.n
        self.ip = ip
        self.n = n
        sizes = np.array([len(h) for h in hull], dtype=np.int64)
        # Hull vertices flattened slowest first within each task: the flow fills the
        # slowest duration's price interval first.
        d = np.concatenate([ip.durations[i][np.asarray(h)[::-1]] for i, h in enumerate(hull)])
        c = np.concatenate([ip.costs[i][np.asarray(h)[::-1]] for i, h in enumerate(hull)])
        task = np.repeat(np.arange(n), sizes)
        first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        last = first + sizes - 1
        # Price where the next faster vertex takes over, for every vertex but the
        # fastest: p = −slope of the hull segment to it.
        price = np.full(len(d), np.inf)
        inner = np.ones(len(d), dtype=bool)
        inner[last] = False
        k = np.flatnonzero(inner)
        price[k] = (c[k + 1] - c[k]) / (d[k] - d[k + 1])
        below = np.zeros(len(d))
        not_first = np.ones(len(d), dtype=bool)
        not_first[first] = False
        below[not_first] = price[np.flatnonzero(not_first) - 1]
        self.vertex_d = d
        self.vertex_c = c
        self.vertex_task = task
        self.first = first
        self.last = last
        #: Flow through the task before this vertex's interval starts, W.
        self.vertex_from = below
        #: Width of the vertex's price interval, W (inf for the fastest).
        self.vertex_width = price - below
        self.slowest_c = c[first]
        self.lo = d[last]
        self.hi = d[first]
        self.sources = np.array([i for i in range(n) if not ip.preds[i]], dtype=np.int64)
        self.sinks = np.array(ip.sinks, dtype=np.int64)
        self.edge_u = np.asarray(ip.edge_u, dtype=np.int64)
        self.edge_v = np.asarray(ip.edge_v, dtype=np.int64)
        self.sigma, self.tau = 2 * n, 2 * n + 1
        nv, ne = len(d), len(self.edge_u)
        self.slices = {
            "vertex": slice(0, nv),
            "edge": slice(nv, nv + ne),
            "source": slice(nv + ne, nv + ne + len(self.sources)),
            "sink": slice(
                nv + ne + len(self.sources), nv + ne + len(self.sources) + len(self.sinks)
            ),
        }
        self.tail = np.concatenate(
            [task, n + self.edge_u, np.full(len(self.sources), 2 * n), n + self.sinks]
        )
        self.head = np.concatenate(
            [n + task, self.edge_v, self.sources, np.full(len(self.sinks), 2 * n + 1)]
        )
        self.idle = float(ip.idle_total_w)
        finite = np.isfinite(self.vertex_width)
        # No optimal flow needs more than every bounded arc's capacity together (a path
        # of unbounded arcs alone gains Σ lo − D ≤ 0): the return arc's capacity.
        self.flow_cap = 2.0 * (float(np.sum(self.vertex_width[finite])) + self.idle) + 1.0
        self.t_slow = float(np.max(ip.earliest_starts(self.hi) + self.hi))

    # ------------------------------------------------------------------ arcs
    def _arcs(
        self, deadline: float | None, idle: float, pinned: np.ndarray, pin_d: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(tail, head, cost, capacity) of the circulation at `deadline`, with a free
        return arc of capacity `idle` (W) when it is positive; the deadline's return
        arc, when there is one, is the last."""
        cost_v = -self.vertex_d
        cap_v = self.vertex_width.copy()
        if pinned.any():
            # A pinned task: one unbounded arc at its pinned duration (h = c + φ·d).
            on_pin = pinned[self.vertex_task]
            cost_v = np.where(on_pin, -pin_d[self.vertex_task], cost_v)
            cap_v[on_pin] = np.inf
        rest = len(self.tail) - len(cost_v)
        tail, head = [self.tail], [self.head]
        cost, cap = [cost_v, np.zeros(rest)], [cap_v, np.full(rest, np.inf)]
        if idle > 0:
            tail.append([self.tau]), head.append([self.sigma])
            cost.append([0.0]), cap.append([idle])
        if deadline is not None:
            tail.append([self.tau]), head.append([self.sigma])
            cost.append([float(deadline)]), cap.append([self.flow_cap])
        return (
            np.concatenate(tail),
            np.concatenate(head),
            np.concatenate(cost),
            np.concatenate(cap),
        )

    # ----------------------------------------------------------------- solve
    def solve(
        self,
        deadline: float | None,
        held: bool,
        pinned: np.ndarray,
        pin_d: np.ndarray,
        pin_c: np.ndarray,
        check: Callable[[float], None] | None = None,
    ) -> NetworkPoint | None:
        """The LP optimum at `deadline`; None when the deadline cannot be met.

        Args:
            deadline: s (scaled), or None.
            held: devices are held to the deadline (H costs nothing).
            pinned: per task, whether its duration and cost are pinned.
            pin_d, pin_c: the pinned duration (s) and cost (J) per task.
            check: called between Newton steps with the work done (`min_cost_circulation`);
                raises to stop (a budget spent).
        """
        lo = np.where(pinned, pin_d, self.lo)
        hi = np.where(pinned, pin_d, self.hi)
        fastest = float(np.max(self.ip.earliest_starts(lo) + lo))
        if deadline is not None:
            if fastest > deadline * (1 + FEASIBLE_RTOL):
                return None
            # At the fastest makespan exactly, the all-fastest paths and the return arc
            # close cycles of zero cost and unbounded flow, whose centre the interior
            # point cannot reach: the deadline is taken a hair longer (the bound stays
            # valid, as the LP's value only falls with the deadline, and is lower by
            # about the flow times the hair).
            deadline = max(float(deadline), fastest * (1 + DEGENERATE_RTOL))
        idle = 0.0 if held and deadline is not None else self.idle
        if idle == 0.0 and deadline is None:
            # Nothing to trade time for: every task at its slowest.
            return self._slowest(pinned, pin_d, pin_c)
        tail, head, cost, cap = self._arcs(deadline, idle, pinned, pin_d)
        # A pinned task needs one arc: its other vertex arcs would be parallel copies
        # of unbounded capacity, a degenerate face that doubles the interior point's
        # steps (16 × 128 with its steady state pinned: 50 steps against 23).
        keep = self._kept_arcs(pinned, len(tail))
        if keep is not None:
            tail, head, cost, cap = tail[keep], head[keep], cost[keep], cap[keep]
        horizon = float(deadline) if deadline is not None else self.t_slow
        scale = abs(float(np.sum(self.slowest_c))) + self.idle * horizon
        finite = np.isfinite(self.vertex_width)
        # A typical flow: the widest price interval (1 W when nothing has a price).
        flow_scale = max(float(np.max(self.vertex_width[finite], initial=0.0)), idle) or 1.0
        res = min_cost_circulation(
            tail,
            head,
            cost,
            cap,
            2 * self.n + 2,
            scale=scale,
            flow_scale=flow_scale,
            ground=self.sigma,
            check=check,
            eliminate=np.arange(self.n),
        )
        if keep is not None:
            res = _expanded(res, keep)
        bound = self.certified_bound(res.flow, deadline, idle, pinned, pin_d, pin_c)
        times = -res.potential
        t, starts, horizon = self._vertex_schedule(res, times, deadline, lo, hi, pinned)
        primal = self.primal_objective(t, horizon, idle, pinned, pin_c)
        return NetworkPoint(bound, t, starts, horizon, primal, res.iterations)

    def _kept_arcs(self, pinned: np.ndarray, arcs: int) -> np.ndarray | None:
        """Mask of the `arcs` arcs (`_arcs`) a solve with `pinned` tasks needs (None:
        every arc): a pinned task keeps its first vertex arc only."""
        if not pinned.any():
            return None
        nv = len(self.vertex_task)
        keep = np.ones(arcs, dtype=bool)
        drop = pinned[self.vertex_task]
        drop[self.first] = False
        keep[:nv] = ~drop
        return keep

    def _slowest(self, pinned: np.ndarray, pin_d: np.ndarray, pin_c: np.ndarray) -> NetworkPoint:
        t = np.where(pinned, pin_d, self.hi)
        starts = self.ip.earliest_starts(t)
        cost = float(np.sum(np.where(pinned, pin_c, self.slowest_c)))
        return NetworkPoint(cost, t, starts, float(np.max(starts + t)), cost, 0)

    # ----------------------------------------------------------------- bound
    def task_value(
        self, phi: np.ndarray, pinned: np.ndarray, pin_d: np.ndarray, pin_c: np.ndarray
    ) -> np.ndarray:
        """h_i(φ_i) per task, J: the cheapest c_i(t) + φ_i·t over the hull."""
        take = np.clip(phi[self.vertex_task] - self.vertex_from, 0.0, self.vertex_width)
        value = self.slowest_c + np.bincount(
            self.vertex_task, weights=self.vertex_d * take, minlength=self.n
        )
        return np.where(pinned, pin_c + phi * pin_d, value)

    def certified_bound(
        self,
        flow: np.ndarray,
        deadline: float | None,
        idle: float,
        pinned: np.ndarray,
        pin_d: np.ndarray,
        pin_c: np.ndarray,
    ) -> float:
        """A lower bound on the LP objective from a flow that conserves exactly.

        The interior point's flow conserves only to its tolerance. Here each task
        keeps the split of its outflow among successors and the sink, and the flow
        entering at the sources, and every task's flow follows in topological order
        from its predecessors' (one triangular solve): the result conserves, so its
        dual value is a valid bound; it differs from the interior point's by about
        the interior point's residual.
        """
        n = self.n
        sl = self.slices
        x_src = np.zeros(n)
        x_src[self.sources] = np.maximum(flow[sl["source"]], 0.0)
        out_edge = np.maximum(flow[sl["edge"]], 0.0)
        out_sink = np.zeros(n)
        out_sink[self.sinks] = np.maximum(flow[sl["sink"]], 0.0)
        is_sink = np.zeros(n, dtype=bool)
        is_sink[self.sinks] = True
        total = np.bincount(self.edge_u, weights=out_edge, minlength=n) + out_sink
        # A task whose outflow vanished splits evenly (its flow still reaches τ).
        empty = total <= 0
        ways = np.bincount(self.edge_u, minlength=n) + is_sink
        total = np.where(empty, 1.0, total)
        share_e = np.where(
            empty[self.edge_u], 1.0 / ways[self.edge_u], out_edge / total[self.edge_u]
        )
        share_s = np.where(
            is_sink, np.where(empty, 1.0 / np.maximum(ways, 1), out_sink / total), 0.0
        )
        # φ = x_src + Rᵀ φ, R strictly upper triangular in topological order.
        mat = sp.csc_matrix(
            (
                np.concatenate([np.ones(n), -share_e]),
                (
                    np.concatenate([np.arange(n), self.edge_v]),
                    np.concatenate([np.arange(n), self.edge_u]),
                ),
            ),
            shape=(n, n),
        )
        phi = sla.spsolve_triangular(mat.tocsr(), x_src, lower=True)
        phi = np.maximum(phi, 0.0)
        total_flow = float(np.sum(phi * share_s))
        if deadline is None and total_flow > idle:
            phi *= idle / total_flow
            total_flow = idle
        value = float(np.sum(self.task_value(phi, pinned, pin_d, pin_c)))
        if deadline is not None:
            value -= float(deadline) * max(0.0, total_flow - idle)
        return value

    # --------------------------------------------------------------- schedule
    def primal_objective(
        self, t: np.ndarray, horizon: float, idle: float, pinned: np.ndarray, pin_c: np.ndarray
    ) -> float:
        """Σ_i f_i(t_i) + idle·H of a schedule, J."""
        # f(t) = c_slowest + Σ_k width_k · max(0, d_k − t) over the bounded vertices.
        finite = np.isfinite(self.vertex_width)
        task = self.vertex_task[finite]
        gap = np.maximum(self.vertex_d[finite] - t[task], 0.0)
        extra = np.bincount(task, weights=self.vertex_width[finite] * gap, minlength=self.n)
        f = np.where(pinned, pin_c, self.slowest_c + extra)
        return float(np.sum(f) + idle * horizon)

    def _vertex_schedule(
        self,
        res: FlowResult,
        times: np.ndarray,
        deadline: float | None,
        lo: np.ndarray,
        hi: np.ndarray,
        pinned: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """Durations at a vertex of the optimal face, and their earliest schedule.

        The vertex: the latest event times in complementary slackness with the flow.
        """
        n = self.n
        sl = self.slices
        at_lower, at_upper = res.at_lower, res.at_upper
        # Subdifferential of each task's duration at its price: an arc off its bounds
        # fixes t = d_k; one at 0 says t ≥ d_k; one at capacity says t ≤ d_k.
        vl, vu = at_lower[sl["vertex"]], at_upper[sl["vertex"]]
        d, task = self.vertex_d, self.vertex_task
        low_d = np.where(vl | ~vu, d, -np.inf)
        high_d = np.where(vu | ~vl, d, np.inf)
        tl = np.maximum(lo, _group_max(low_d, task, n))
        th = np.minimum(hi, -_group_max(-high_d, task, n))
        t0 = times[n : 2 * n] - times[:n]
        bad = tl > th
        tl[bad] = np.clip(t0[bad], lo[bad], hi[bad])
        th[bad] = tl[bad]
        tl = np.where(pinned, lo, tl)
        th = np.where(pinned, hi, th)
        s_, e_ = np.arange(n), n + np.arange(n)
        sig, tau = self.sigma, self.tau
        tight_edge = ~at_lower[sl["edge"]]
        tight_src = ~at_lower[sl["source"]]
        tight_sink = ~at_lower[sl["sink"]]
        frm = [
            e_,
            s_,
            self.edge_v,
            n + self.edge_u[tight_edge],
            s_,
            np.full(int(tight_src.sum()), sig),
            np.full(len(self.sinks), tau),
            n + self.sinks[tight_sink],
        ]
        to = [
            s_,
            e_,
            n + self.edge_u,
            self.edge_v[tight_edge],
            np.full(n, sig),
            self.sources[tight_src],
            n + self.sinks,
            np.full(int(tight_sink.sum()), tau),
        ]
        wt = [
            -tl,
            th,
            np.zeros(len(self.edge_u)),
            np.zeros(int(tight_edge.sum())),
            np.zeros(n),
            np.zeros(int(tight_src.sum())),
            np.zeros(len(self.sinks)),
            np.zeros(int(tight_sink.sum())),
        ]
        if deadline is not None:
            limit = float(deadline)
        else:  # no schedule needs longer than its slowest durations' makespan
            limit = float(np.max(self.ip.earliest_starts(hi) + hi))
        frm.append([sig]), to.append([tau]), wt.append([limit])
        if deadline is not None:
            ret = ~at_lower[-1:]  # the deadline's return arc is the last arc
            if ret[0]:
                frm.append([tau]), to.append([sig]), wt.append([-limit])
        u = np.concatenate(frm).astype(np.int64)
        v = np.concatenate(to).astype(np.int64)
        w = np.concatenate(wt).astype(float)
        # Johnson's reweighting with the interior point's times (feasible to its
        # tolerance): the weights are then ≥ 0 up to that tolerance.
        reduced = np.maximum(w + times[u] - times[v], 0.0)
        size = 2 * n + 2
        key = u * size + v
        order = np.lexsort((reduced, key))
        key, u, v, reduced = key[order], u[order], v[order], reduced[order]
        firsts = np.concatenate([[True], key[1:] != key[:-1]])
        graph = sp.csr_matrix((reduced[firsts], (u[firsts], v[firsts])), shape=(size, size))
        dist = dijkstra(graph, indices=sig)
        ok = np.isfinite(dist)
        late = np.where(ok, dist + times - times[sig], times - times[sig])
        t = self._snap(np.clip(late[e_] - late[s_], lo, hi))
        # The earliest schedule of these durations: no later anywhere, so no costlier,
        # and the start times do not depend on how much slack the deadline leaves.
        starts = self.ip.earliest_starts(t)
        return t, starts, float(np.max(starts + t))

    def _snap(self, t: np.ndarray) -> np.ndarray:
        """Durations within `SNAP_RTOL` of a hull vertex set to it."""
        near = np.abs(self.vertex_d - t[self.vertex_task]) <= SNAP_RTOL * np.maximum(
            1.0, np.abs(self.vertex_d)
        )
        out = t.copy()
        out[self.vertex_task[near]] = self.vertex_d[near]
        return out


def _group_max(values: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Maximum of `values` per group 0 … n − 1 (groups contiguous, each non-empty)."""
    starts = np.flatnonzero(np.concatenate([[True], group[1:] != group[:-1]]))
    out = np.full(n, -np.inf)
    out[group[starts]] = np.maximum.reduceat(values, starts)
    return out


def _expanded(res: FlowResult, keep: np.ndarray) -> FlowResult:
    """`res` over the arcs `keep` marks, spread back over all of them: a dropped arc
    carries no flow and sits at its lower bound."""
    size = len(keep)
    flow = np.zeros(size)
    at_lower = np.ones(size, dtype=bool)
    at_upper = np.zeros(size, dtype=bool)
    flow[keep] = res.flow
    at_lower[keep] = res.at_lower
    at_upper[keep] = res.at_upper
    return replace(res, flow=flow, at_lower=at_lower, at_upper=at_upper)
