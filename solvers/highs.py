"""The one door to HiGHS: every LP and MILP of the package is built and run here.

Models arrive as arrays (costs, bounds, a column-wise sparse matrix, row bounds) and
leave as a `Model`, which the other modules change (bounds, costs, options), run under
a time limit or a `solvers.stopping.Watch`, and read (values, objective, dual bound).
Statuses come back as plain words (`STATUSES`), so no other module needs HiGHS's enums.

Assumptions:
    ``highspy`` is installed (a declared dependency). Models are single-threaded and
    silent; build them from scaled problems (`solvers.scaling`), since HiGHS's
    tolerances are absolute.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence

import highspy
import numpy as np
import scipy.sparse as sp

from solvers.budget import Budget
from solvers.stopping import Watch

#: HiGHS's infinity (bounds).
INF = float(highspy.kHighsInf)

#: The outcomes of a run: the model's optimum; no feasible point; the time limit; stopped
#: by the watch (stop gap, stall, Ctrl-C); anything else (numerical trouble).
STATUSES = ("optimal", "infeasible", "time_limit", "stopped", "failed")

#: s between the main thread's looks at a MILP running on its worker thread.
POLL_S = 0.05

#: Share of the time left that a cold interior-point solve may use before its crossover:
#: HiGHS does not stop crossover at its time limit (8000 tasks: 2.0 s of interior point,
#: then 1.6 s of crossover), so the crossover must fit in the rest.
IPM_TIME_SHARE = 0.5

#: Work units (`solvers.budget.WORK_UNITS_PER_S`) charged per simplex iteration and
#: model column or row: a simplex iteration touches about a fiftieth of the model.
SIMPLEX_UNITS_PER_ENTRY = 0.02

#: Work units charged per interior-point iteration and matrix entry.
IPM_UNITS_PER_ENTRY = 1.0

#: Work units charged per MILP callback, and per branch-and-bound node, per model
#: column or row: HiGHS reports no simplex iterations inside a MILP; it calls back at
#: fixed points of its search, and a node costs about one LP re-solve (on a 1F1B
#: pipeline of 64 tasks × 12 modes, calibrated so that a solve reads its wall time).
CALLBACK_UNITS_PER_ENTRY = 80.0
NODE_UNITS_PER_ENTRY = 50.0

_BANNER_SHOWN = False


def _new_highs() -> highspy.Highs:
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


def _status(h: highspy.Highs) -> str:
    st = highspy.HighsModelStatus
    ms = h.getModelStatus()
    if ms == st.kOptimal:
        return "optimal"
    if ms == st.kInfeasible:
        return "infeasible"
    if ms == st.kTimeLimit:
        return "time_limit"
    if ms == st.kInterrupt:
        return "stopped"
    return "failed"


class Model:
    """A HiGHS model: min cost·x + offset over column bounds and row bounds.

    Args:
        cost, col_lower, col_upper: per column.
        rows: the constraint matrix (column-wise).
        row_lower, row_upper: per row.
        integer_columns: the first this many columns are integer (a MILP); 0: an LP.
        offset: constant added to every objective value and bound read back.
    """

    def __init__(
        self,
        cost: np.ndarray,
        col_lower: np.ndarray,
        col_upper: np.ndarray,
        rows: sp.csc_matrix,
        row_lower: np.ndarray,
        row_upper: np.ndarray,
        *,
        integer_columns: int = 0,
        offset: float = 0.0,
    ) -> None:
        rows = sp.csc_matrix(rows)
        rows.sort_indices()
        lp = highspy.HighsLp()
        lp.num_col_ = rows.shape[1]
        lp.num_row_ = rows.shape[0]
        lp.col_cost_ = np.asarray(cost, dtype=float)
        lp.col_lower_ = np.asarray(col_lower, dtype=float)
        lp.col_upper_ = np.asarray(col_upper, dtype=float)
        lp.row_lower_ = np.asarray(row_lower, dtype=float)
        lp.row_upper_ = np.asarray(row_upper, dtype=float)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = rows.indptr
        lp.a_matrix_.index_ = rows.indices
        lp.a_matrix_.value_ = rows.data
        if integer_columns:
            kinds = highspy.HighsVarType
            lp.integrality_ = [kinds.kInteger] * integer_columns + [kinds.kContinuous] * (
                rows.shape[1] - integer_columns
            )
        self.highs = _new_highs()
        self.highs.setOptionValue("threads", 1)
        self.highs.passModel(lp)
        self.num_cols = int(rows.shape[1])
        self._size = int(rows.shape[0] + rows.shape[1])
        self._entries = int(rows.nnz)
        self.offset = float(offset)
        self.mip = integer_columns > 0

    # ------------------------------------------------------------------ changes
    def set_bounds(self, cols: Sequence[int] | np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        """Bounds of several columns."""
        idx = np.asarray(cols, dtype=np.int32)
        if len(idx):
            self.highs.changeColsBounds(len(idx), idx, np.asarray(lo, float), np.asarray(hi, float))

    def set_bound(self, col: int, lo: float, hi: float) -> None:
        """Bounds of one column."""
        self.highs.changeColBounds(int(col), float(lo), float(hi))

    def set_cost(self, col: int, cost: float) -> None:
        """Objective coefficient of one column."""
        self.highs.changeColCost(int(col), float(cost))

    def set_option(self, name: str, value: float | int | str | bool) -> None:
        """A HiGHS option (e.g. ``mip_rel_gap``, ``mip_feasibility_tolerance``)."""
        self.highs.setOptionValue(name, value)

    def set_start(self, values: np.ndarray) -> None:
        """A MILP's starting solution (column values)."""
        sol = highspy.HighsSolution()
        sol.col_value = [float(v) for v in values]
        sol.value_valid = True
        self.highs.setSolution(sol)

    # --------------------------------------------------------------------- runs
    def run(
        self,
        time_limit: float,
        *,
        watch: Watch | None = None,
        ipm: bool = False,
        crossover: bool = True,
        budget: Budget | None = None,
    ) -> str:
        """Solve within `time_limit` s; one of `STATUSES`.

        Args:
            time_limit: s (inf: none).
            watch: for a MILP, receives every incumbent and dual bound and stops the
                search once it says so; HiGHS then runs on a worker thread, so that a
                Ctrl-C reaches Python at once (it sets `Watch.interrupted`).
            ipm: an LP solve by interior point (far faster cold on large models; its
                crossover leaves a basis for warm re-solves), with `IPM_TIME_SHARE` of
                the time when it crosses over.
            crossover: with `ipm`, run the crossover to a basis (False: the interior
                point's solution, with all the time; later runs then start cold).
            budget: the budget the run draws on. On a work clock HiGHS runs without a
                wall limit, its iterations are charged to the budget, and a MILP stops
                (status ``"time_limit"``) at the callback where the budget runs out.
        """
        h = self.highs
        counts_work = budget is not None and budget.counts_work
        limit = math.inf if counts_work else float(time_limit)
        limit = float(min(limit, INF))
        if ipm:
            h.setOptionValue("solver", "ipm")
            h.setOptionValue("run_crossover", "on" if crossover else "off")
            if crossover:
                limit *= IPM_TIME_SHARE
        h.setOptionValue("time_limit", max(limit, 1e-3))
        spent = False
        if self.mip and (watch is not None or counts_work):
            spent = self._run_watched(watch, budget if counts_work else None)
        else:
            h.run()
            if counts_work:
                info = h.getInfo()
                budget.charge(self._units(info.simplex_iteration_count, info.ipm_iteration_count))
        if ipm:
            h.setOptionValue("solver", "choose")
        return "time_limit" if spent else _status(h)

    def _units(self, simplex: int, ipm: int) -> float:
        """Work units of `simplex` and `ipm` iterations on this model."""
        return (
            max(simplex, 0) * SIMPLEX_UNITS_PER_ENTRY * self._size
            + max(ipm, 0) * IPM_UNITS_PER_ENTRY * self._entries
        )

    def rerun_cold(self) -> str:
        """Solve again from scratch (after numerical trouble); one of `STATUSES`."""
        self.highs.clearSolver()
        self.highs.run()
        return _status(self.highs)

    def _run_watched(self, watch: Watch | None, budget: Budget | None) -> bool:
        """Run the MILP on a worker thread with HiGHS's callback feeding `watch` and
        charging `budget` (a work clock); True when the budget stopped it."""
        h = self.highs
        offset = self.offset
        spent = [False]
        nodes_seen = [0]

        def on_interrupt(event: highspy.highs.HighsCallbackEvent) -> None:
            out = event.data_out
            if budget is not None:
                nodes = max(int(out.mip_node_count), nodes_seen[0])
                fresh, nodes_seen[0] = nodes - nodes_seen[0], nodes
                budget.charge(
                    (CALLBACK_UNITS_PER_ENTRY + NODE_UNITS_PER_ENTRY * fresh) * self._size
                )
                if budget.expired():
                    spent[0] = True
                    event.interrupt()
            if watch is None:
                return
            watch.offer_bound(float(out.mip_dual_bound) + offset)
            if float(out.mip_primal_bound) < INF:
                watch.offer(float(out.mip_primal_bound) + offset)
            if watch.should_stop():
                event.interrupt()

        h.cbMipInterrupt += on_interrupt
        try:
            h.startSolve()
            done = False
            while not done:
                try:
                    done, _ = h.wait(POLL_S)
                except KeyboardInterrupt:
                    # HiGHS stops at its next callback and hands back its incumbent.
                    if watch is not None:
                        watch.interrupted = True
                    else:
                        raise
        finally:
            h.cbMipInterrupt -= on_interrupt
        return spent[0]

    # -------------------------------------------------------------------- reads
    def has_solution(self) -> bool:
        """True when HiGHS holds a feasible point."""
        return bool(self.highs.getInfo().primal_solution_status == 2)

    def values(self) -> np.ndarray:
        """Column values of the solution."""
        return np.asarray(self.highs.getSolution().col_value)

    def objective(self) -> float:
        """Objective of the solution, offset included (nan without one)."""
        if not self.has_solution():
            return math.nan
        return float(self.highs.getInfo().objective_function_value) + self.offset

    def dual_bound(self) -> float:
        """A MILP's proven lower bound, offset included (nan when unknown)."""
        value = float(self.highs.getInfo().mip_dual_bound)
        return value + self.offset if math.isfinite(value) else math.nan

    def consistent(self) -> bool:
        """True when the solution has the objective HiGHS reports (HiGHS 1.16 can return
        a start solution unchanged with another solution's objective after presolve)."""
        if not self.has_solution():
            return True
        lp = self.highs.getLp()
        value = float(np.dot(np.asarray(lp.col_cost_), self.values())) + float(lp.offset_)
        obj = float(self.highs.getInfo().objective_function_value)
        return abs(value - obj) <= 1e-6 * max(1.0, abs(obj))
