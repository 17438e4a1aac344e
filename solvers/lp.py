"""The convex-hull LP relaxation of an uncoupled problem, kept alive across deadlines.

For each task i the LP chooses a duration t_i on the lower convex hull of its
(duration, effective cost) modes and pays w_i ≥ every hull segment at t_i:

    minimize   Σ_i w_i + S̄·H           (S̄·H dropped when devices are held to the deadline)
    subject to w_i ≥ c_k + b_k·(t_i − d_k)      for each hull segment k of task i
               S_u + t_u ≤ S_v                  for each edge (u, v)
               S_i + t_i ≤ H                    for each task without successors
               d_min,i ≤ t_i ≤ d_max,i,  S ≥ 0,  0 ≤ H ≤ deadline

Its optimum is a certified lower bound on the discrete problem (every assignment is a
feasible point). Two ways to solve it, with the same optimum:

- **network** (from `NETWORK_TASKS` tasks): its dual, a minimum-cost circulation,
  by the network interior-point method (`solvers.network`); every solve costs about
  the same, growing as about n^1.16 (16 384 tasks: 9.7× less CPU than HiGHS;
  ``benchmarks/lp_scale.py``);
- **HiGHS** (smaller problems): the model above, built once (`solvers.highs`), so
  that later solves — other deadlines, tasks fixed to modes — warm-start from the last
  basis, in milliseconds on a few hundred tasks.

Assumptions:
    No groups and no transition costs (`IndexedProblem.coupled` is False).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from solvers.budget import Budget
from solvers.exceptions import SolverError, TimeLimitReached
from solvers.highs import INF, Model
from solvers.hull import lower_hull, task_hulls, task_pareto
from solvers.indexed import IndexedProblem
from solvers.network import HullNetwork

#: Relative distance below which an LP duration counts as sitting on a mode.
VERTEX_RTOL = 1e-9

#: Above this many LP columns the first (cold) solve uses the interior-point method.
IPM_COLUMNS = 3000

#: Above this many LP columns every solve is an interior-point solve without crossover:
#: on 32 × 256 × 30 (49 153 columns) the cold solve takes 31 s of CPU without crossover
#: and 37 s with it, and a warm re-solve at a deadline 1 % tighter another 41 s, so
#: such a problem gets one LP (its bound and rounding) and no sweeps.
NO_CROSSOVER_COLUMNS = 30_000

#: Relative allowance taken off an interior-point optimum without crossover before it
#: serves as a bound (HiGHS's interior point stops at a relative gap of 1e-8).
IPM_BOUND_RTOL = 1e-7

#: From this many tasks the LP is solved through its dual network (`solvers.network`):
#: from it a network solve costs no more than a warm HiGHS re-solve (1.10 × the fastest
#: makespan, 2048 tasks: HiGHS warm 0.43 s, network about 0.5 s; 4096 tasks: HiGHS warm
#: 2–3 s, network 0.97 s).
NETWORK_TASKS = 2048

#: The ways of solving the LP (`HullLP`'s ``method``).
METHODS = ("highs", "network")


class HullLP:
    """The LP relaxation above, for one problem; re-solvable at any deadline.

    HiGHS column layout: t (n), w (n), S (n), H (1).

    Args:
        ip: the problem (uncoupled, scaled).
        pareto: per task, its Pareto modes (default: computed here).
        method: ``"highs"`` or ``"network"`` (`METHODS`); default by size
            (`NETWORK_TASKS`).
    """

    def __init__(
        self,
        ip: IndexedProblem,
        pareto: Sequence[Sequence[int]] | None = None,
        *,
        method: str | None = None,
    ) -> None:
        if ip.coupled:
            raise SolverError("HullLP handles problems without groups or transition costs")
        self.ip = ip
        n = ip.n
        self.n = n
        if method is None:
            method = "network" if n >= NETWORK_TASKS else "highs"
        if method not in METHODS:
            raise SolverError(f"unknown LP method {method!r}; use one of {', '.join(METHODS)}")
        #: How the LP is solved (`METHODS`).
        self.method = method
        if pareto is not None:
            self.pareto = [list(p) for p in pareto]
            self.hull = [lower_hull(ip.durations[i], ip.costs[i], self.pareto[i]) for i in range(n)]
        else:
            # Shared with every LP of `ip` (an LP only reads them).
            self.pareto, self.hull = task_pareto(ip), task_hulls(ip)
        self.hull_d = _pad([ip.durations[i][h] for i, h in enumerate(self.hull)])
        self.pareto_d = _pad([ip.durations[i][q] for i, q in enumerate(self.pareto)])
        self.pareto_idx = _pad([np.asarray(q, float) for q in self.pareto], fill=-1).astype(
            np.int64
        )
        self.pareto_len = np.array([len(q) for q in self.pareto], dtype=np.int64)
        self.t_lo = np.array([ip.durations[i][h[0]] for i, h in enumerate(self.hull)])
        self.t_hi = np.array([ip.durations[i][h[-1]] for i, h in enumerate(self.hull)])
        self.hold_deadline = ip.problem.hold == "deadline"
        self.w_lo = np.full(n, -INF)
        self.w_hi = np.full(n, INF)
        single = np.array([len(h) == 1 for h in self.hull])
        # A single hull vertex pins w to its cost (no segment row bounds it).
        for i in np.flatnonzero(single):
            self.w_lo[i] = self.w_hi[i] = ip.costs[i][self.hull[i][0]]
        self._deadline: float | None = None
        self._pin_d = np.zeros(n)
        self._pin_c = np.zeros(n)
        self.model: Model | None = None
        self.network: HullNetwork | None = None
        if method == "network":
            self.network = HullNetwork(ip, self.hull)
        else:
            self.model = self._build_model()
        self._fixed = np.zeros(n, dtype=bool)
        #: Whether re-solves are affordable next to the first: HiGHS's leave a basis
        #: that the next one starts from (False above `NO_CROSSOVER_COLUMNS`: every
        #: solve is then a cold interior-point solve); the network's each cost about
        #: as much as the first, which is cheap.
        self.warm = self.model is None or self.model.num_cols <= NO_CROSSOVER_COLUMNS
        #: s, wall time of the first (cold) solve; 0 until then.
        self.cold_solve_s = 0.0
        #: The budget every solve must end within (None: no limit). HiGHS stops at its
        #: end and `solve` raises `TimeLimitReached`: a cold solve of thousands of tasks
        #: can take longer than a whole short time limit.
        self.budget: Budget | None = None

    def _build_model(self) -> Model:
        """The HiGHS model of the LP (column layout in the class docstring)."""
        ip, n, inf = self.ip, self.n, INF
        rows_r: list[np.ndarray] = []
        rows_c: list[np.ndarray] = []
        rows_v: list[np.ndarray] = []
        lo: list[np.ndarray] = []
        hi: list[np.ndarray] = []
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
        col_lo = np.concatenate([self.t_lo, self.w_lo, np.zeros(n), [0.0]])
        col_hi = np.concatenate([self.t_hi, self.w_hi, np.full(n, inf), [inf]])
        return Model(cost, col_lo, col_hi, a, np.concatenate(lo), np.concatenate(hi))

    @property
    def stop_at(self) -> float | None:
        """The clock reading (`solvers.budget.now`) by which every solve must end."""
        return None if self.budget is None else self.budget.end

    @stop_at.setter
    def stop_at(self, value: float | None) -> None:
        self.budget = None if value is None else Budget(value)  # a wall-clock reading

    def time_left(self) -> float:
        """Seconds left of `budget` (inf without one)."""
        return np.inf if self.budget is None else self.budget.remaining()

    # --------------------------------------------------------------- modifiers
    def set_deadline(self, deadline: float | None) -> None:
        """Bound H ≤ deadline (s); None removes the bound."""
        self._deadline = None if deadline is None else float(deadline)
        if self.model is None:
            return
        self.model.set_bound(3 * self.n, 0.0, INF if deadline is None else float(deadline))
        # Held to the deadline, H costs nothing (S̄·deadline is a constant); without a
        # deadline the devices are held to the makespan.
        held = self.hold_deadline and deadline is not None
        self.model.set_cost(3 * self.n, 0.0 if held else self.ip.idle_total_w)

    def fix(self, tasks: Sequence[int], modes: Sequence[int]) -> None:
        """Pin each task's duration and cost to one of its modes (any mode, hull or not)."""
        if len(tasks) == 0:
            return
        ip = self.ip
        idx = np.asarray(tasks, dtype=np.int64)
        d = np.array([ip.durations[i][m] for i, m in zip(tasks, modes, strict=False)])
        c = np.array([ip.costs[i][m] for i, m in zip(tasks, modes, strict=False)])
        self._pin_d[idx] = d
        self._pin_c[idx] = c
        self._fixed[idx] = True
        if self.model is not None:
            self.model.set_bounds(idx, d, d)
            self.model.set_bounds(self.n + idx, c, c)

    def unfix_all(self) -> None:
        """Release every pinned task."""
        idx = np.flatnonzero(self._fixed)
        if len(idx) == 0:
            return
        if self.model is not None:
            self.model.set_bounds(idx, self.t_lo[idx], self.t_hi[idx])
            self.model.set_bounds(self.n + idx, self.w_lo[idx], self.w_hi[idx])
        self._fixed[:] = False

    @property
    def fixed(self) -> np.ndarray:
        """Boolean mask of pinned tasks."""
        return self._fixed.copy()

    # ------------------------------------------------------------------- solve
    def solve(self) -> LPPoint | None:
        """Solve; None when infeasible (a deadline below the fastest makespan).

        Raises:
            TimeLimitReached: `stop_at` came before the solve finished.
        """
        left = self.time_left()
        if left <= 0:
            raise TimeLimitReached("no time left for the LP relaxation")
        cold = self.cold_solve_s == 0.0
        # On the budget's own clock: on a work clock the estimates built on it count work.
        clock = (self.budget or Budget.unlimited()).stopwatch()
        point = self._solve_network() if self.network is not None else self._solve_highs(left)
        if cold:
            self.cold_solve_s = max(clock(), 1e-9)
        return point

    def _solve_network(self) -> LPPoint | None:
        assert self.network is not None

        def check(units: float = 0.0) -> None:
            if self.budget is not None:
                self.budget.charge(units)
            if self.time_left() <= 0:
                raise TimeLimitReached("the LP relaxation did not finish within the time limit")

        deadline = self._deadline
        held = self.hold_deadline and deadline is not None
        found = self.network.solve(
            deadline, held, self._fixed, self._pin_d, self._pin_c, check=check
        )
        if found is None:
            return None
        return LPPoint(found.objective, found.t, found.starts, found.horizon)

    def _solve_highs(self, left: float) -> LPPoint | None:
        assert self.model is not None
        cold = self.cold_solve_s == 0.0
        status = self.model.run(
            left,
            ipm=self.warm is False or (cold and self.model.num_cols > IPM_COLUMNS),
            crossover=self.warm,
            budget=self.budget,
        )
        if status == "failed":
            # Rare numerical trouble: retry once from scratch before giving up.
            status = self.model.rerun_cold()
        if status == "infeasible":
            return None
        if status == "time_limit":
            raise TimeLimitReached("the LP relaxation did not finish within the time limit")
        if status != "optimal":
            raise SolverError(f"HiGHS could not solve the LP relaxation ({status})")
        x = self.model.values()
        n = self.n
        objective = self.model.objective()
        if not self.warm:
            objective -= IPM_BOUND_RTOL * abs(objective)
        return LPPoint(
            objective=objective,
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
