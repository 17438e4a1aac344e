"""The convex-hull LP relaxation of an uncoupled problem, kept alive across deadlines.

For each task i the LP chooses a duration t_i on the lower convex hull of its
(duration, effective cost) modes and pays w_i ≥ every hull segment at t_i:

    minimize   Σ_i w_i + S̄·H           (S̄·H dropped when devices are held to the deadline)
    subject to w_i ≥ c_k + b_k·(t_i − d_k)      for each hull segment k of task i
               S_u + t_u ≤ S_v                  for each edge (u, v)
               S_i + t_i ≤ H                    for each task without successors
               d_min,i ≤ t_i ≤ d_max,i,  S ≥ 0,  0 ≤ H ≤ deadline

Its optimum is a certified lower bound on the discrete problem (every assignment is a
feasible point). The model is built once in HiGHS (through `highspy`) so that later
solves — other deadlines, tasks fixed to modes — warm-start from the last basis.

Assumptions:
    No groups and no transition costs (`IndexedProblem.coupled` is False).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

import highspy
import numpy as np
import scipy.sparse as sp

from solvers.exceptions import SolverError, TimeLimitReached
from solvers.hull import lower_hull, pareto_modes
from solvers.indexed import IndexedProblem

#: Relative distance below which an LP duration counts as sitting on a mode.
VERTEX_RTOL = 1e-9


_BANNER_SHOWN = False

#: Above this many LP columns the first (cold) solve uses the interior-point method.
IPM_COLUMNS = 3000

#: Share of the time left that an interior-point solve may use before its crossover.
IPM_TIME_SHARE = 0.5


def new_highs() -> highspy.Highs:
    """A silent HiGHS instance.

    HiGHS prints a banner on stdout the first time a `Highs` object is made in a
    process, even with output switched off; a command's JSON output must not carry it,
    so the first instance is made with stdout pointed at /dev/null.
    """
    global _BANNER_SHOWN
    if not _BANNER_SHOWN:
        _BANNER_SHOWN = True
        try:
            sys.stdout.flush()
            saved = os.dup(1)
            devnull = os.open(os.devnull, os.O_WRONLY)
        except (OSError, ValueError):
            saved = -1
        if saved >= 0:
            os.dup2(devnull, 1)
            try:
                highspy.Highs()
            finally:
                os.dup2(saved, 1)
                os.close(saved)
                os.close(devnull)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return h


def highs_model(
    cost: np.ndarray,
    col_lower: np.ndarray,
    col_upper: np.ndarray,
    rows: sp.csc_matrix,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    integer_columns: int = 0,
) -> highspy.Highs:
    """A silent, single-threaded HiGHS instance holding min cost·x over the given bounds.

    Args:
        cost, col_lower, col_upper: per column.
        rows: the constraint matrix (column-wise, sorted indices).
        row_lower, row_upper: per row.
        integer_columns: the first this many columns are integer (a MILP); 0 for an LP.
    """
    lp = highspy.HighsLp()
    lp.num_col_ = rows.shape[1]
    lp.num_row_ = rows.shape[0]
    lp.col_cost_ = cost
    lp.col_lower_ = col_lower
    lp.col_upper_ = col_upper
    lp.row_lower_ = row_lower
    lp.row_upper_ = row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = rows.indptr
    lp.a_matrix_.index_ = rows.indices
    lp.a_matrix_.value_ = rows.data
    if integer_columns:
        kinds = highspy.HighsVarType
        lp.integrality_ = [kinds.kInteger] * integer_columns + [kinds.kContinuous] * (
            rows.shape[1] - integer_columns
        )
    h = new_highs()
    h.setOptionValue("threads", 1)
    h.passModel(lp)
    return h


class HullLP:
    """The LP relaxation above, for one problem; re-solvable at any deadline.

    Column layout: t (n), w (n), S (n), H (1).
    """

    def __init__(self, ip: IndexedProblem, pareto: Sequence[Sequence[int]] | None = None) -> None:
        if ip.coupled:
            raise SolverError("HullLP handles problems without groups or transition costs")
        self.ip = ip
        n = ip.n
        self.n = n
        self.pareto = (
            [list(p) for p in pareto]
            if pareto is not None
            else [pareto_modes(ip.durations[i], ip.costs[i]) for i in range(n)]
        )
        self.hull = [lower_hull(ip.durations[i], ip.costs[i], self.pareto[i]) for i in range(n)]
        self.hull_d = _pad([ip.durations[i][h] for i, h in enumerate(self.hull)])
        self.pareto_d = _pad([ip.durations[i][q] for i, q in enumerate(self.pareto)])
        self.pareto_idx = _pad([np.asarray(q, float) for q in self.pareto], fill=-1).astype(
            np.int64
        )
        self.pareto_len = np.array([len(q) for q in self.pareto], dtype=np.int64)
        self.t_lo = np.array([ip.durations[i][h[0]] for i, h in enumerate(self.hull)])
        self.t_hi = np.array([ip.durations[i][h[-1]] for i, h in enumerate(self.hull)])
        self.hold_deadline = ip.problem.hold == "deadline"
        rows_r: list[np.ndarray] = []
        rows_c: list[np.ndarray] = []
        rows_v: list[np.ndarray] = []
        lo: list[np.ndarray] = []
        hi: list[np.ndarray] = []
        inf = highspy.kHighsInf
        # Hull segments: w_i − b·t_i ≥ c_k − b·d_k.
        seg_task, seg_b, seg_rhs = [], [], []
        for i, h in enumerate(self.hull):
            d = ip.durations[i][h]
            c = ip.costs[i][h]
            for k in range(len(h) - 1):
                b = (c[k + 1] - c[k]) / (d[k + 1] - d[k])
                seg_task.append(i)
                seg_b.append(b)
                seg_rhs.append(c[k] - b * d[k])
        m = len(seg_task)
        r = np.arange(m)
        st = np.array(seg_task, dtype=np.int64)
        rows_r += [r, r]
        rows_c += [st, n + st]
        rows_v += [-np.array(seg_b, float), np.ones(m)]
        lo.append(np.array(seg_rhs, float))
        hi.append(np.full(m, inf))
        row = m
        # Edges: S_u + t_u − S_v ≤ 0.
        e = len(ip.edge_u)
        r = row + np.arange(e)
        rows_r += [r, r, r]
        rows_c += [2 * n + ip.edge_u, ip.edge_u, 2 * n + ip.edge_v]
        rows_v += [np.ones(e), np.ones(e), -np.ones(e)]
        lo.append(np.full(e, -inf))
        hi.append(np.zeros(e))
        row += e
        # Sinks: S_i + t_i − H ≤ 0.
        sinks = np.array(ip.sinks, dtype=np.int64)
        k = len(sinks)
        r = row + np.arange(k)
        rows_r += [r, r, r]
        rows_c += [2 * n + sinks, sinks, np.full(k, 3 * n)]
        rows_v += [np.ones(k), np.ones(k), -np.ones(k)]
        lo.append(np.full(k, -inf))
        hi.append(np.zeros(k))
        row += k
        ncol = 3 * n + 1
        a = sp.csc_matrix(
            (np.concatenate(rows_v), (np.concatenate(rows_r), np.concatenate(rows_c))),
            shape=(row, ncol),
        )
        a.sort_indices()
        cost = np.zeros(ncol)
        cost[n : 2 * n] = 1.0
        if not self.hold_deadline:
            cost[3 * n] = ip.idle_total_w
        self.w_lo = np.full(n, -inf)
        self.w_hi = np.full(n, inf)
        single = np.array([len(h) == 1 for h in self.hull])
        # A single hull vertex pins w to its cost (no segment row bounds it).
        for i in np.flatnonzero(single):
            self.w_lo[i] = self.w_hi[i] = ip.costs[i][self.hull[i][0]]
        col_lo = np.concatenate([self.t_lo, self.w_lo, np.zeros(n), [0.0]])
        col_hi = np.concatenate([self.t_hi, self.w_hi, np.full(n, inf), [inf]])
        self.highs = highs_model(cost, col_lo, col_hi, a, np.concatenate(lo), np.concatenate(hi))
        self._fixed = np.zeros(n, dtype=bool)
        self._solved = False
        #: s, wall time of the first (cold) solve; 0 until then.
        self.cold_solve_s = 0.0
        #: `time.perf_counter()` reading by which every solve must end (None: no limit).
        #: HiGHS stops there and `solve` raises `TimeLimitReached`: a cold solve of
        #: thousands of tasks can take longer than a whole short time limit.
        self.stop_at: float | None = None

    def time_left(self) -> float:
        """Seconds until `stop_at` (inf without one)."""
        return np.inf if self.stop_at is None else self.stop_at - time.perf_counter()

    # --------------------------------------------------------------- modifiers
    def set_deadline(self, deadline: float | None) -> None:
        """Bound H ≤ deadline (s); None removes the bound."""
        hi = highspy.kHighsInf if deadline is None else float(deadline)
        self.highs.changeColBounds(3 * self.n, 0.0, hi)
        # Held to the deadline, H costs nothing (S̄·deadline is a constant); without a
        # deadline the devices are held to the makespan.
        held = self.hold_deadline and deadline is not None
        self.highs.changeColCost(3 * self.n, 0.0 if held else self.ip.idle_total_w)

    def fix(self, tasks: Sequence[int], modes: Sequence[int]) -> None:
        """Pin each task's duration and cost to one of its modes (any mode, hull or not)."""
        if len(tasks) == 0:
            return
        ip = self.ip
        idx = np.asarray(tasks, dtype=np.int64)
        d = np.array([ip.durations[i][m] for i, m in zip(tasks, modes, strict=False)])
        c = np.array([ip.costs[i][m] for i, m in zip(tasks, modes, strict=False)])
        self.highs.changeColsBounds(len(idx), idx, d, d)
        self.highs.changeColsBounds(len(idx), self.n + idx, c, c)
        self._fixed[idx] = True

    def unfix_all(self) -> None:
        """Release every pinned task."""
        idx = np.flatnonzero(self._fixed)
        if len(idx) == 0:
            return
        self.highs.changeColsBounds(len(idx), idx, self.t_lo[idx], self.t_hi[idx])
        self.highs.changeColsBounds(len(idx), self.n + idx, self.w_lo[idx], self.w_hi[idx])
        self._fixed[:] = False

    @property
    def fixed(self) -> np.ndarray:
        """Boolean mask of pinned tasks."""
        return self._fixed.copy()

    # ------------------------------------------------------------------- solve
    def solve(self) -> LPPoint | None:
        """Solve; None when infeasible (a deadline below the fastest makespan).

        Raises:
            TimeLimitReached: `stop_at` came before HiGHS finished.
        """
        h = self.highs
        left = self.time_left()
        if left <= 0:
            raise TimeLimitReached("no time left for the LP relaxation")
        # Large cold solves are far faster by interior point (with crossover, which
        # leaves a basis); re-solves after small changes warm-start the dual simplex.
        cold = not self._solved
        started = time.perf_counter()
        ipm = cold and self.highs.getNumCol() > IPM_COLUMNS
        # HiGHS does not stop crossover at its time limit (8000 tasks: 2.0 s of
        # interior point, then 1.6 s of crossover): the interior point gets a share of
        # the time left so that the crossover fits in the rest.
        limit = IPM_TIME_SHARE * left if ipm else left
        h.setOptionValue("time_limit", float(min(limit, highspy.kHighsInf)))
        if ipm:
            h.setOptionValue("solver", "ipm")
        h.run()
        if cold:
            h.setOptionValue("solver", "choose")
            self._solved = True
            self.cold_solve_s = time.perf_counter() - started
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            return None
        if status == highspy.HighsModelStatus.kTimeLimit:
            raise TimeLimitReached("the LP relaxation did not finish within the time limit")
        if status != highspy.HighsModelStatus.kOptimal:
            # Rare numerical trouble: retry once from scratch before giving up.
            h.clearSolver()
            h.run()
            status = h.getModelStatus()
            if status == highspy.HighsModelStatus.kInfeasible:
                return None
            if status == highspy.HighsModelStatus.kTimeLimit:
                raise TimeLimitReached("the LP relaxation did not finish within the time limit")
            if status != highspy.HighsModelStatus.kOptimal:
                raise SolverError(
                    f"HiGHS could not solve the LP relaxation: {h.modelStatusToString(status)}"
                )
        x = np.asarray(h.getSolution().col_value)
        n = self.n
        return LPPoint(
            objective=float(h.getInfo().objective_function_value),
            t=x[:n].copy(),
            starts=x[2 * n : 3 * n].copy(),
            horizon=float(x[3 * n]),
        )


class LPPoint:
    """An LP optimum: objective (J, without constant terms), durations t (s), starts, H."""

    __slots__ = ("horizon", "objective", "starts", "t")

    def __init__(self, objective: float, t: np.ndarray, starts: np.ndarray, horizon: float) -> None:
        self.objective = objective
        self.t = t
        self.starts = starts
        self.horizon = horizon

    def energy_bound(self, ip: IndexedProblem, deadline: float | None) -> float:
        """The LP optimum as a lower bound on total energy, J."""
        if ip.problem.hold == "deadline" and deadline is not None:
            return self.objective + ip.idle_total_w * float(deadline)
        return self.objective


def classify(lp: HullLP, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Locate LP durations among each task's modes.

    Args:
        lp: the LP (for its hull and Pareto tables).
        t: LP duration per task, s.

    Returns:
        (on_vertex, down, up, position): whether t sits on a hull vertex; the cheapest
        Pareto mode no slower than t; the next slower Pareto mode (−1 if none); and where
        t lies between the two (0 at `down`, 1 at `up`).
    """
    tol = VERTEX_RTOL * np.maximum(1.0, np.abs(t))
    on_vertex = np.min(np.abs(lp.hull_d - t[:, None]), axis=1) <= tol
    count = np.sum(lp.pareto_d <= (t + tol)[:, None], axis=1)
    pos_down = np.maximum(count - 1, 0)
    rows = np.arange(len(t))
    down = lp.pareto_idx[rows, pos_down]
    has_up = count < lp.pareto_len
    pos_up = np.minimum(count, lp.pareto_len - 1)
    up = np.where(has_up, lp.pareto_idx[rows, pos_up], -1)
    d_down = lp.pareto_d[rows, pos_down]
    d_up = np.where(has_up, lp.pareto_d[rows, pos_up], d_down + 1.0)
    position = np.clip((t - d_down) / np.maximum(d_up - d_down, 1e-300), 0.0, 1.0)
    return on_vertex, down, up, position


def vertex_modes(lp: HullLP, t: np.ndarray) -> np.ndarray:
    """Mode index of the hull vertex nearest to each LP duration."""
    k = np.argmin(np.abs(lp.hull_d - t[:, None]), axis=1)
    return np.array([lp.hull[i][j] for i, j in enumerate(k)], dtype=np.int64)


def round_down(lp: HullLP, t: np.ndarray) -> np.ndarray:
    """Modes for LP durations, never slower: the hull vertex where t sits on one, else the
    cheapest Pareto mode no slower than t (it fits the LP's own schedule)."""
    on_vertex, down, _, _ = classify(lp, t)
    return np.where(on_vertex, vertex_modes(lp, t), down)


def _pad(rows: Sequence[np.ndarray], fill: float = np.inf) -> np.ndarray:
    """Stack ragged 1-D arrays into a 2-D array padded with `fill`."""
    k = max(len(r) for r in rows)
    out = np.full((len(rows), k), fill, dtype=float)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out
