"""Large-neighbourhood search: re-optimize windows of tasks exactly with a MILP.

The whole mode-choice MILP (`solvers.milp` documents the model) is built once in HiGHS
from numpy arrays. Each step frees the tasks of one window — consecutive in the
current schedule — pins every other task to its current mode through variable bounds,
and lets HiGHS find the best modes for the window within a short time limit (presolve
removes the pinned part). A window's result is kept when it is cheaper, evaluated
exactly with the real durations. Sweeps repeat until one brings nothing.

Assumptions:
    No groups and no transition costs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import highspy
import numpy as np
import scipy.sparse as sp

from solvers.hull import pareto_modes
from solvers.indexed import IndexedProblem, meets
from solvers.lp import highs_model
from solvers.stopping import Watch

#: Feasibility tolerance of exact solves (`WindowMIP.set_deadline`) on scaled models.
EXACT_TOLERANCE = 1e-9


class WindowMIP:
    """The mode-choice MILP of an uncoupled problem, for windowed re-optimization.

    Column layout: x (one per Pareto mode of every task), S (n), H (1).
    """

    def __init__(self, ip: IndexedProblem, deadline: float | None) -> None:
        self.ip = ip
        n = ip.n
        self.modes = [pareto_modes(ip.durations[i], ip.costs[i]) for i in range(n)]
        sizes = np.array([len(m) for m in self.modes])
        self.first = np.concatenate([[0], np.cumsum(sizes)])  # x columns of task i
        nx_ = int(self.first[-1])
        self.nx = nx_
        task_of = np.repeat(np.arange(n), sizes)
        dur = np.concatenate([ip.durations[i][m] for i, m in enumerate(self.modes)])
        cost = np.concatenate([ip.costs[i][m] for i, m in enumerate(self.modes)])
        self.mode_of = np.concatenate([np.asarray(m) for m in self.modes])
        s_col = nx_ + np.arange(n)
        h_col = nx_ + n
        r, c, v = [], [], []
        lo, hi = [], []
        inf = highspy.kHighsInf
        row = 0
        # One mode per task.
        r.append(task_of)
        c.append(np.arange(nx_))
        v.append(np.ones(nx_))
        lo.append(np.ones(n))
        hi.append(np.ones(n))
        row += n
        # Edges u -> v: S_u + Σ d x_u − S_v ≤ 0.
        for u, w in zip(ip.edge_u.tolist(), ip.edge_v.tolist(), strict=True):
            cols = np.arange(self.first[u], self.first[u + 1])
            r.append(np.full(len(cols) + 2, row))
            c.append(np.concatenate([cols, [s_col[u], s_col[w]]]))
            v.append(np.concatenate([dur[cols], [1.0, -1.0]]))
            row += 1
        e = len(ip.edge_u)
        lo.append(np.full(e, -inf))
        hi.append(np.zeros(e))
        # Sinks: S_i + Σ d x_i − H ≤ 0.
        for i in ip.sinks:
            cols = np.arange(self.first[i], self.first[i + 1])
            r.append(np.full(len(cols) + 2, row))
            c.append(np.concatenate([cols, [s_col[i], h_col]]))
            v.append(np.concatenate([dur[cols], [1.0, -1.0]]))
            row += 1
        lo.append(np.full(len(ip.sinks), -inf))
        hi.append(np.zeros(len(ip.sinks)))
        ncol = nx_ + n + 1
        a = sp.csc_matrix(
            (np.concatenate(v), (np.concatenate(r), np.concatenate(c))), shape=(row, ncol)
        )
        a.sort_indices()
        held = ip.problem.hold == "deadline" and deadline is not None
        obj = np.concatenate([cost, np.zeros(n), [0.0 if held else ip.idle_total_w]])
        self.offset = ip.idle_total_w * float(deadline) if held else 0.0
        upper = np.concatenate([np.ones(nx_), np.full(n, inf), [inf]])
        if deadline is not None:
            upper[h_col] = float(deadline)
        self.highs = highs_model(
            obj,
            np.zeros(ncol),
            upper,
            a,
            np.concatenate(lo),
            np.concatenate(hi),
            integer_columns=nx_,
        )
        # Windows are many and short: a loose gap (relative to the whole plan's energy)
        # lets each stop early; a window that comes back worse is simply not taken.
        self.highs.setOptionValue("mip_rel_gap", 1e-4)
        self.ncol = ncol
        self.h_col = h_col

    def set_deadline(self, deadline: float | None, gap: float = 1e-4) -> None:
        """Bound H ≤ deadline (None: no bound) and set the relative gap of each solve.

        Assumptions:
            Devices are held to the makespan (the objective does not change with the
            deadline), as in a frontier.
        """
        hi = highspy.kHighsInf if deadline is None else float(deadline)
        self.highs.changeColBounds(self.h_col, 0.0, hi)
        self.highs.setOptionValue("mip_rel_gap", float(gap))
        # At HiGHS's default tolerances (1e-6 on integrality) a plan may overrun its
        # deadline by a millionth, enough to miss it; a frontier looks for the slowest
        # plan just below a point's makespan, so it needs them tight.
        for option in ("mip_feasibility_tolerance", "primal_feasibility_tolerance"):
            self.highs.setOptionValue(option, EXACT_TOLERANCE)

    def _pin(self, modes: Sequence[int], free: np.ndarray) -> None:
        """Bounds: free tasks' x in [0, 1], every other task pinned to its mode."""
        lo = np.zeros(self.nx)
        hi = np.zeros(self.nx)
        pos = {}
        for i, m in enumerate(modes):
            pos[i] = self.first[i] + self.modes[i].index(m) if m in self.modes[i] else -1
        for i in range(self.ip.n):
            a, b = self.first[i], self.first[i + 1]
            if free[i] or pos[i] < 0:
                hi[a:b] = 1.0
            else:
                lo[pos[i]] = hi[pos[i]] = 1.0
        idx = np.arange(self.nx, dtype=np.int32)
        self.highs.changeColsBounds(self.nx, idx, lo, hi)

    def reoptimize(
        self, modes: Sequence[int], free: np.ndarray, time_limit: float
    ) -> list[int] | None:
        """Best modes for the free tasks with the others pinned; None if nothing found."""
        self._pin(modes, free)
        h = self.highs
        # No warm start: HiGHS 1.16 can hand back the given solution unchanged, with
        # another solution's objective, when presolve does most of the work — and
        # presolve is what makes a window cheap. Every result is checked anyway.
        h.setOptionValue("time_limit", float(max(0.01, time_limit)))
        h.run()
        if h.getInfo().primal_solution_status != 2:
            return None
        x = np.asarray(h.getSolution().col_value)[: self.nx]
        out = list(modes)
        for i in np.flatnonzero(free):
            a, b = self.first[i], self.first[i + 1]
            out[i] = int(self.mode_of[a + int(np.argmax(x[a:b]))])
        return out


def lns(
    ip: IndexedProblem,
    modes: Sequence[int],
    deadline: float | None,
    *,
    time_limit: float = 10.0,
    window: int = 24,
    step_limit: float = 0.3,
    watch: Watch | None = None,
) -> list[int]:
    """Improve a feasible plan by re-optimizing sliding windows of tasks exactly.

    Args:
        ip: the problem (uncoupled).
        modes: a feasible plan.
        deadline: s, or None.
        time_limit: s of wall time in all.
        window: tasks freed per step (consecutive by start time).
        step_limit: s per window solve.
        watch: receives every cheaper plan; the search stops when it says so.

    Returns:
        A plan no worse than `modes`.
    """
    t0 = time.perf_counter()
    best = list(modes)
    best_e = ip.evaluate(best, deadline).energy
    if ip.n == 0:
        return best
    mip = WindowMIP(ip, deadline)
    window = max(2, min(window, ip.n))
    stride = max(1, window // 2)
    improved = True
    while improved and time.perf_counter() - t0 < time_limit:
        improved = False
        order = np.argsort(ip.evaluate(best).starts, kind="stable")
        for lo in range(0, max(1, ip.n - window + stride), stride):
            left = time_limit - (time.perf_counter() - t0)
            if left <= 0 or (watch is not None and watch.should_stop()):
                return best
            free = np.zeros(ip.n, dtype=bool)
            free[order[lo : lo + window]] = True
            cand = mip.reoptimize(best, free, min(step_limit, left))
            if cand is None:
                continue
            ev = ip.evaluate(cand, deadline)
            if meets(ev.makespan, deadline) and ev.energy < best_e - 1e-9 * max(1.0, best_e):
                best, best_e = cand, ev.energy
                improved = True
                if watch is not None:
                    watch.offer(best_e, best)
    if watch is not None and not improved:
        watch.stall_detail = "a sweep of MILP windows found nothing cheaper"
    return best
