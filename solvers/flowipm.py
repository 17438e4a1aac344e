"""A primal–dual interior-point method for minimum-cost circulations.

    minimize   cᵀy   subject to   A y = 0,   0 ≤ y ≤ u

with A the node–arc incidence matrix of a directed graph (u may be infinite). Each
Newton step solves one system in the weighted graph Laplacian A Θ Aᵀ (one node
grounded), by a sparse LU factorization that keeps the diagonal as pivots (the
Laplacian is symmetric and diagonally dominant, so no pivoting is needed). That is the
specialization to networks (Portugal, Resende, Veiga & Júdice 2000; Daitch &
Spielman 2008): the general-LP normal equations of the same problem in HiGHS cost
far more to factor.

Mehrotra's predictor–corrector, with costs and capacities scaled to about 1. The
iterations, and so the result, depend only on the input: no clock, no randomness.

Assumptions:
    The circulation problem is bounded (every cycle of infinite capacity has a
    positive cost) and the graph's arcs connect the nodes into one component.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla

#: Stop once the duality gap is below this share of `scale` and the residuals are as
#: small: the bound is then exact to far better than 1e-6 relative.
GAP_RTOL = 1e-9

#: Largest primal and dual residual (scaled units) at which the iterate counts as
#: feasible.
RESIDUAL_TOL = 1e-9

#: Iterations allowed (Mehrotra's method needs 20–40 on these problems).
MAX_ITERATIONS = 150

#: Share of the step to the boundary taken, keeping the iterate interior.
STEP_SHARE = 0.995

#: Gondzio centrality correctors per step, at most.
CORRECTORS = 3

#: Work units (`solvers.budget.WORK_UNITS_PER_S`) per arc of one Newton step: its
#: factorization and its four or five solves and vector passes (16 384 tasks, 173 000
#: arcs: about 0.1 s a step on an idle core).
STEP_UNITS_PER_ARC = 1.2


@dataclass
class FlowResult:
    """An interior-point optimum of a circulation problem.

    Attributes:
        flow: y per arc, in the input's units.
        potential: π per node (π_ground = 0): at the optimum c_a − (π_head − π_tail) ≥ 0
            where y_a < u_a and ≤ 0 where y_a > 0.
        at_lower: per arc, True where y_a is at 0 rather than off it (y_a < z_a, the
            arc's reduced cost, in scaled units: strict complementarity at the
            central optimum makes the two of very different size).
        at_upper: per arc, True where y_a is at u_a rather than below it.
        iterations: Newton steps taken.
        converged: whether the gap reached `GAP_RTOL`.
    """

    flow: np.ndarray
    potential: np.ndarray
    at_lower: np.ndarray
    at_upper: np.ndarray
    iterations: int
    converged: bool


#: Nodes of at most this many neighbours may be eliminated before the factorization.
ELIMINATE_DEGREE = 4


class Laplacian:
    """A Θ Aᵀ for changing arc weights θ (ground node removed), solved by sparse LU.

    Nodes of an independent set (`eliminate`, those of at most `ELIMINATE_DEGREE`
    neighbours) are eliminated first, in closed form: the factorization then works on
    the Schur complement of the other nodes only (on a pipeline's network, its task
    start nodes: half the nodes, and about a third less to factor).
    """

    def __init__(
        self,
        tail: np.ndarray,
        head: np.ndarray,
        nodes: int,
        ground: int,
        eliminate: np.ndarray | None = None,
    ) -> None:
        m = len(tail)
        self.keep = np.flatnonzero(np.arange(nodes) != ground)
        self.size = len(self.keep)
        # Undirected node pairs joined by arcs, and their weights g = E θ.
        lo, hi = np.minimum(tail, head), np.maximum(tail, head)
        pairs, edge = np.unique(lo * nodes + hi, return_inverse=True)
        self.edges = sp.csr_matrix((np.ones(m), (edge, np.arange(m))), shape=(len(pairs), m))
        ea, eb = pairs // nodes, pairs % nodes
        degree = np.bincount(np.concatenate([ea, eb]), minlength=nodes)
        out = np.zeros(nodes, dtype=bool)
        if eliminate is not None:
            out[np.asarray(eliminate, dtype=np.int64)] = True
        out &= degree <= ELIMINATE_DEGREE
        out[ground] = False
        # Keep the eliminated nodes independent (no edge between two of them).
        both = out[ea] & out[eb]
        out[eb[both]] = False
        kept = np.flatnonzero(~out & (np.arange(nodes) != ground))
        gone = np.flatnonzero(out)
        index = np.full(nodes, -1, dtype=np.int64)
        index[kept] = np.arange(len(kept))
        xindex = np.full(nodes, -1, dtype=np.int64)
        xindex[gone] = np.arange(len(gone))
        self.kept, self.gone = kept, gone
        ne = len(pairs)
        # Linear part: the Laplacian restricted to the kept nodes.
        ra, rb = index[ea], index[eb]
        inner = (ra >= 0) & (rb >= 0)
        e_in = np.flatnonzero(inner)
        diag_a, diag_b = np.flatnonzero(ra >= 0), np.flatnonzero(rb >= 0)
        lin_r = np.concatenate([ra[diag_a], rb[diag_b], ra[e_in], rb[e_in]])
        lin_c = np.concatenate([ra[diag_a], rb[diag_b], rb[e_in], ra[e_in]])
        lin_e = np.concatenate([diag_a, diag_b, e_in, e_in])
        lin_v = np.concatenate([np.ones(len(diag_a) + len(diag_b)), -np.ones(2 * len(e_in))])
        # Eliminated node x with edges e1, e2 to kept nodes r1, r2: −g1·g2 / G_x.
        x_of = np.where(out[ea], xindex[ea], np.where(out[eb], xindex[eb], -1))
        other = np.where(out[ea], rb, ra)
        link = np.flatnonzero((x_of >= 0) & (other >= 0))
        order = np.argsort(x_of[link], kind="stable")
        link = link[order]
        lx = x_of[link]
        self.total = sp.csr_matrix((np.ones(len(link)), (lx, link)), shape=(len(gone), ne))
        # every edge at x counts in G_x, the ground's too
        at_x = np.flatnonzero(x_of >= 0)
        self.total = sp.csr_matrix((np.ones(len(at_x)), (x_of[at_x], at_x)), shape=(len(gone), ne))
        p1, p2 = _pairs_within(link, lx, len(gone))
        self.p1, self.p2 = p1, p2
        self.px = x_of[p1]
        rows = np.concatenate([lin_r, other[p1]])
        cols = np.concatenate([lin_c, other[p2]])
        size = len(kept)
        key = cols * size + rows
        unique, where = np.unique(key, return_inverse=True)
        nl = len(lin_r)
        self.lin = sp.csr_matrix((lin_v, (where[:nl], lin_e)), shape=(len(unique), ne))
        self.quad = sp.csr_matrix(
            (np.ones(len(p1)), (where[nl:], np.arange(len(p1)))), shape=(len(unique), len(p1))
        )
        self.indices = (unique % size).astype(np.int32)
        self.indptr = np.searchsorted(unique // size, np.arange(size + 1)).astype(np.int32)
        self.schur_size = size
        # Coupling C (kept × eliminated), C[r, x] = g of the edge r–x.
        self.c_rows, self.c_cols, self.c_edge = other[link], lx, link
        # Positions of kept and eliminated nodes among the ground-less nodes.
        pos = np.full(nodes, -1, dtype=np.int64)
        pos[self.keep] = np.arange(self.size)
        self.kept_pos, self.gone_pos = pos[kept], pos[gone]
        #: Incidence without the ground row: +1 at the head, −1 at the tail.
        self.incidence = sp.csr_matrix(
            (
                np.concatenate([np.ones(m), -np.ones(m)]),
                (np.concatenate([head, tail]), np.concatenate([np.arange(m), np.arange(m)])),
            ),
            shape=(nodes, m),
        )[self.keep].tocsr()
        self.incidence_t = self.incidence.T.tocsr()
        self._order: np.ndarray | None = None
        self._take = np.zeros(0, np.int64)
        self._p_indices = self._p_indptr = np.zeros(0, np.int32)

    def factor(self, theta: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """A solver for A Θ Aᵀ x = b (b and x over the nodes without the ground)."""
        g = self.edges @ theta
        big = self.total @ g
        data = self.lin @ g
        if len(self.p1):
            data = data - self.quad @ (g[self.p1] * g[self.p2] / big[self.px])
        n = self.schur_size
        lu_solve = self._lu(data, n)
        coupling = sp.csr_matrix(
            (g[self.c_edge], (self.c_rows, self.c_cols)), shape=(n, len(self.gone))
        )
        coupling_t = coupling.T.tocsr()
        kp, gp = self.kept_pos, self.gone_pos

        def solve(rhs: np.ndarray) -> np.ndarray:
            bx = rhs[gp]
            xr = lu_solve(rhs[kp] + coupling @ (bx / big))
            out = np.empty(self.size)
            out[kp] = xr
            out[gp] = (bx + coupling_t @ xr) / big
            return out

        return solve

    def _lu(self, data: np.ndarray, n: int) -> Callable[[np.ndarray], np.ndarray]:
        """A solver for the Schur complement of values `data` (pattern: `indices`).

        The fill-reducing ordering depends on the pattern alone, which every Newton
        step shares: the first factorization finds it (minimum degree), and later ones
        factor the matrix permuted by it in natural order, skipping the ordering.
        """
        options = {"SymmetricMode": True}
        if self._order is None:
            mat = sp.csc_matrix((data, self.indices, self.indptr), shape=(n, n))
            lu = sla.splu(mat, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options=options)
            # L U = P_r A P_c with P_r = P_c (diagonal pivots): A[q][:, q] factors
            # without fill beyond this one's, q the inverse of perm_c.
            self._order = np.argsort(lu.perm_c)
            marker = sp.csc_matrix(
                (np.arange(1.0, len(data) + 1.0), self.indices, self.indptr), shape=(n, n)
            )
            permuted = marker[self._order][:, self._order].tocsc()
            permuted.sort_indices()
            self._take = permuted.data.astype(np.int64) - 1
            self._p_indices, self._p_indptr = permuted.indices, permuted.indptr
            return lu.solve
        q = self._order
        mat = sp.csc_matrix((data[self._take], self._p_indices, self._p_indptr), shape=(n, n))
        lu = sla.splu(mat, permc_spec="NATURAL", diag_pivot_thresh=0.0, options=options)

        def solve(rhs: np.ndarray) -> np.ndarray:
            out = np.empty_like(rhs)
            out[q] = lu.solve(rhs[q])
            return out

        return solve


def _pairs_within(link: np.ndarray, group: np.ndarray, groups: int) -> tuple[np.ndarray, ...]:
    """Every ordered pair (a, b) of entries of `link` in one group (`group` sorted).

    Returns:
        (first, second): for each group of k entries, its k² pairs, first-major.
    """
    if groups == 0 or len(link) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.searchsorted(group, np.arange(groups + 1))
    counts = np.diff(starts)
    # Entry j of a group of k repeats k times (first); the group repeats k times (second).
    k_of = np.repeat(counts, counts)
    first = np.repeat(link, k_of)
    pair_group = np.repeat(np.arange(groups), counts * counts)
    within = np.arange(len(first)) - np.repeat(
        np.cumsum(counts * counts) - counts * counts, counts * counts
    )
    second = link[starts[pair_group] + within % np.repeat(counts, counts * counts)]
    return first, second


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """aᵀb without BLAS: a threaded BLAS dot spins its threads, and on a loaded machine
    that costs several times the work in CPU time."""
    return float(np.einsum("i,i->", a, b))


def _centring(v: np.ndarray, target: float) -> np.ndarray:
    """Change that brings complementarity products `v` into [0.1, 10]·target."""
    low, high = 0.1 * target, 10.0 * target
    return np.where(v < low, low - v, np.where(v > high, np.maximum(high - v, -high), 0.0))


def _step(inverse_v: np.ndarray, dv: np.ndarray, sign: float = 1.0) -> float:
    """Longest step α ≤ 1 with v + sign·α·dv ≥ 0, for v > 0 given as 1 / v."""
    # α = 1 / max(−sign·dv / v) when that exceeds 1: one product and one reduction.
    if sign > 0:
        worst = -float(np.min(dv * inverse_v, initial=0.0))
    else:
        worst = float(np.max(dv * inverse_v, initial=0.0))
    return 1.0 if worst <= 1.0 else 1.0 / worst


@dataclass
class _Iterate:
    """One interior point: flows y, upper slacks s = u − y, potentials π, and the
    reduced-cost parts z (at 0) and w (at u); w and s only count on bounded arcs."""

    y: np.ndarray
    s: np.ndarray
    pi: np.ndarray
    z: np.ndarray
    w: np.ndarray


class _Newton:
    """Newton directions at one iterate, from one factorization of A Θ Aᵀ."""

    def __init__(
        self, lap: Laplacian, p: _Iterate, b: np.ndarray, rp: np.ndarray, rd: np.ndarray
    ) -> None:
        self.p, self.b, self.rp, self.rd = p, b, rp, rd
        self.a, self.at = lap.incidence, lap.incidence_t
        # Reciprocals shared by every direction and step at this iterate.
        self.inv_y = 1.0 / p.y
        self.b_s = b / p.s
        self.theta = 1.0 / (p.z * self.inv_y + p.w * self.b_s)
        self.solve = lap.factor(self.theta)
        self.bounded = k = np.flatnonzero(b > 0)
        self.inv_z = 1.0 / p.z
        self.inv_sk, self.inv_wk = 1.0 / p.s[k], 1.0 / p.w[k]

    def direction(
        self, ryz: np.ndarray, rsw: np.ndarray, residuals: bool = True
    ) -> tuple[np.ndarray, ...]:
        """(Δπ, Δy, Δz, Δw) for complementarity targets ryz, rsw (and the residuals)."""
        p = self.p
        rho = rsw * self.b_s - ryz * self.inv_y
        if residuals:
            rho += self.rd
        dpi = self.solve((self.rp if residuals else 0.0) + self.a @ (self.theta * rho))
        dy = self.theta * (self.at @ dpi - rho)
        dz = (ryz - p.z * dy) * self.inv_y
        dw = (rsw + p.w * dy) * self.b_s
        return dpi, dy, dz, dw

    def steps(self, d: tuple[np.ndarray, ...]) -> tuple[float, float]:
        """Longest primal and dual steps ≤ 1 along `d` that stay interior."""
        k = self.bounded
        _, dy, dz, dw = d
        primal = min(_step(self.inv_y, dy), _step(self.inv_sk, dy[k], sign=-1.0))
        dual = min(_step(self.inv_z, dz), _step(self.inv_wk, dw[k]))
        return primal, dual

    def best(self, mu: float, m: float) -> tuple[tuple[np.ndarray, ...], float, float]:
        """Mehrotra's predictor–corrector direction, with Gondzio's centrality
        correctors: (direction, primal step, dual step)."""
        p, b = self.p, self.b
        pred = self.direction(-p.y * p.z, -p.s * p.w * b)
        ap, ad = self.steps(pred)
        _, dy, dz, dw = pred
        mu_aff = (
            _dot(p.y + ap * dy, p.z + ad * dz) + _dot((p.s - ap * dy) * (p.w + ad * dw), b)
        ) / m
        target = (mu_aff / mu) ** 3 * mu
        d = self.direction(target - p.y * p.z - dy * dz, (target - p.s * p.w + dy * dw) * b)
        ap, ad = self.steps(d)
        for _ in range(CORRECTORS):
            # Aim at a longer step; pull the products that would fall far outside
            # [0.1, 10]·target back into it (one more solve, no factorization).
            tp, td = min(1.0, 1.5 * ap + 0.1), min(1.0, 1.5 * ad + 0.1)
            _, dy, dz, dw = d
            cyz = _centring((p.y + tp * dy) * (p.z + td * dz), target)
            csw = _centring((p.s - tp * dy) * (p.w + td * dw), target) * b
            corr = self.direction(cyz, csw, residuals=False)
            trial = tuple(x + dx for x, dx in zip(d, corr, strict=True))
            tap, tad = self.steps(trial)
            if min(tap, tad) < min(ap, ad) + 0.1 * min(tp - ap, td - ad):
                break
            d, ap, ad = trial, tap, tad
        return d, ap, ad


def min_cost_circulation(
    tail: np.ndarray,
    head: np.ndarray,
    cost: np.ndarray,
    capacity: np.ndarray,
    nodes: int,
    *,
    scale: float,
    flow_scale: float | None = None,
    ground: int = 0,
    check: Callable[[float], None] | None = None,
    eliminate: np.ndarray | None = None,
) -> FlowResult:
    """Solve the circulation problem above by the interior-point method.

    Args:
        tail, head: arc end nodes (0 … nodes − 1).
        cost: c per arc.
        capacity: u per arc, > 0 (inf: none).
        nodes: number of nodes.
        scale: size of the objective the gap is measured against (in units of
            cost × flow; e.g. the total energy the bound stands for).
        flow_scale: a typical flow (default: the largest finite capacity); arcs of far
            larger capacity start at this flow.
        ground: the node whose potential is 0.
        check: called before each step with the work of the step before it (work
            units, `STEP_UNITS_PER_ARC`); raises to stop (a budget spent).
        eliminate: nodes no two of which share an arc, to eliminate before each
            factorization (`Laplacian`).

    Returns:
        The central optimum (`FlowResult`).
    """
    m = len(cost)
    cs = float(max(np.max(np.abs(cost)), 1e-300))
    bounded = np.isfinite(capacity)
    if flow_scale is None:
        flow_scale = float(np.max(capacity[bounded])) if bounded.any() else 1.0
    us = float(flow_scale)
    c = cost / cs
    u = np.where(bounded, capacity / us, 1.0)
    gap_tol = GAP_RTOL * max(abs(scale) / (cs * us), 1e-12)
    lap = Laplacian(tail, head, nodes, ground, eliminate)
    b = bounded.astype(float)
    count = m + float(np.count_nonzero(bounded))
    y = np.where(bounded, np.minimum(0.5 * u, 1.0), 1.0)
    p = _Iterate(y=y, s=np.where(bounded, u - y, 1.0), pi=np.zeros(lap.size), z=np.ones(m), w=b)
    it = 0
    converged = False
    best, best_merit = p, np.inf
    for it in range(MAX_ITERATIONS):
        rp = -(lap.incidence @ p.y)
        rd = c - lap.incidence_t @ p.pi - p.z + p.w
        mu = (_dot(p.y, p.z) + _dot(p.s * p.w, b)) / count
        # The complementarity gap: the duality gap wherever the iterate is feasible.
        merit = max(mu * count / gap_tol, np.max(np.abs(rp)) / RESIDUAL_TOL)
        merit = max(merit, np.max(np.abs(rd)) / RESIDUAL_TOL)
        if merit < best_merit:
            best, best_merit = p, merit
        if merit <= 1.0:
            converged = True
            break
        if check is not None:
            check(STEP_UNITS_PER_ARC * m if it else 0.0)
        try:
            newton = _Newton(lap, p, b, rp, rd)
        except RuntimeError:
            # The Laplacian has lost its last digits (weights 1e±15 apart) before the
            # gap closed: the best iterate seen is as good as double precision gets.
            break
        (dpi, dy, dz, dw), ap, ad = newton.best(mu, count)
        ap, ad = STEP_SHARE * ap, STEP_SHARE * ad
        # The slack steps on its own: u − y loses all its digits on an arc whose flow
        # nears a large capacity.
        p = _Iterate(
            y=p.y + ap * dy,
            s=np.where(bounded, p.s - ap * dy, 1.0),
            pi=p.pi + ad * dpi,
            z=p.z + ad * dz,
            w=p.w + ad * dw,
        )
    p = best
    potential = np.zeros(nodes)
    potential[lap.keep] = p.pi * cs
    s = np.where(bounded, p.s, np.inf)
    return FlowResult(
        flow=p.y * us,
        potential=potential,
        at_lower=(p.y < p.z) & (p.y <= s),
        at_upper=bounded & (s < p.w) & (s < p.y),
        iterations=it,
        converged=converged,
    )
