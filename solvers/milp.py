"""`method="milp"`: the exact mixed-integer model, built once from arrays.

    minimize   Σ_i Σ_m c_im·x_im + Σ_(a,b) (ε − s̄·τ)·z_ab + S̄·H
    subject to Σ_m x_im = 1                              (one mode per task)
               S_j ≥ S_i + Σ_m d_im·x_im                  (edges)
               S_b ≥ S_a + Σ_m d_am·x_am + τ·z_ab         (consecutive tasks a, b on a
                                                           device with a transition cost)
               H ≥ S_i + Σ_m d_im·x_im,  H ≤ deadline
               Σ_(m: setting s) x_im = y_gs,  Σ_s y_gs = 1 (groups share a setting)
               z_ab = 1 exactly when a and b run at different settings
               x, y, z binary; S ≥ 0

with c_im = E_im − s̄·d_im (see `solvers.indexed`). S̄·H is a constant (S̄·deadline)
when devices are held to the deadline. Dominated modes are dropped first (within each
setting when a group or a transition cost makes settings matter).

`ExactModel` is this model in HiGHS (`solvers.highs`). Every exact solve of the package
uses it: the milp method (`solve_milp`), the fastest makespan (`min_makespan`), the
coupled relaxation (``relax=True``), and MILP windows (`solvers.lns`, which pin all
tasks but a window through `ExactModel.pin`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solvers.budget import Budget
from solvers.highs import INF, Model
from solvers.hull import pareto_modes_by_setting, task_pareto
from solvers.indexed import IndexedProblem
from solvers.stopping import Watch

#: The MILP engine's name, for solution records.
SOLVER_NAME = "HiGHS"

#: Feasibility tolerance of solves that must not overrun a deadline by HiGHS's default
#: 1e-6 (frontier points, `ExactModel.tighten`), on scaled models.
EXACT_TOLERANCE = 1e-9


def candidate_modes(ip: IndexedProblem) -> list[list[int]]:
    """Modes worth modelling per task: non-dominated (per setting when settings matter)."""
    cached = ip.__dict__.get("_candidates")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    out: list[list[int]] = []
    on_chain = {i for pair in ip.chain_pairs for i in pair}
    plain = task_pareto(ip)
    for i in range(ip.n):
        if ip.group_of[i] >= 0 or i in on_chain:
            out.append(pareto_modes_by_setting(ip.durations[i], ip.costs[i], ip.settings[i]))
        else:
            out.append(plain[i])
    ip._candidates = out  # type: ignore[attr-defined]
    return out


def milp_columns(ip: IndexedProblem) -> int:
    """Binary mode columns of the exact model (every candidate mode of every task)."""
    return sum(len(m) for m in candidate_modes(ip))


class _Rows:
    """Triplets of a sparse constraint matrix, row by row."""

    def __init__(self) -> None:
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.lo: list[float | np.ndarray] = []
        self.hi: list[float | np.ndarray] = []
        self.count = 0

    def block(
        self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> None:
        """Rows numbered 0 … len(lo)−1 locally, appended after the rows so far."""
        self.r.append(np.asarray(rows, dtype=np.int64) + self.count)
        self.c.append(np.asarray(cols, dtype=np.int64))
        self.v.append(np.asarray(vals, dtype=float))
        self.lo.append(np.asarray(lo, dtype=float))
        self.hi.append(np.asarray(hi, dtype=float))
        self.count += len(lo)

    def one(self, cols: Sequence[int], vals: Sequence[float], lo: float, hi: float) -> None:
        """One row."""
        self.block(np.zeros(len(cols)), np.asarray(cols), np.asarray(vals), [lo], [hi])

    def matrix(self, ncol: int) -> tuple[sp.csc_matrix, np.ndarray, np.ndarray]:
        a = sp.csc_matrix(
            (np.concatenate(self.v), (np.concatenate(self.r), np.concatenate(self.c))),
            shape=(self.count, ncol),
        )
        return a, np.concatenate(self.lo), np.concatenate(self.hi)


class ExactModel:
    """The exact model above in HiGHS, for one problem.

    Column layout: x (one per candidate mode of every task, task by task), y (one per
    setting of every group), z (one per costed consecutive pair), S (n), H (1).

    Args:
        ip: the problem (scaled: `solvers.scaling.scaled`).
        deadline: in `ip`'s time unit, or None (no bound on H).
        relax: continuous x, y, z in [0, 1] (the LP relaxation).
        objective: ``"energy"``, or ``"makespan"`` to minimize H (fastest makespan).
    """

    def __init__(
        self,
        ip: IndexedProblem,
        deadline: float | None,
        *,
        relax: bool = False,
        objective: str = "energy",
    ) -> None:
        self.ip = ip
        n = ip.n
        self.modes = candidate_modes(ip)
        sizes = np.array([len(m) for m in self.modes], dtype=np.int64)
        self.first = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        nx = int(self.first[-1])
        self.nx = nx
        self.mode_of = np.concatenate([np.asarray(m, dtype=np.int64) for m in self.modes])
        task_of = np.repeat(np.arange(n), sizes)
        dur = np.concatenate([ip.durations[i][m] for i, m in enumerate(self.modes)])
        cost = np.concatenate([ip.costs[i][m] for i, m in enumerate(self.modes)])
        self.group_first = [nx]
        for settings in ip.group_settings:
            self.group_first.append(self.group_first[-1] + len(settings))
        ny = self.group_first[-1] - nx
        self.z_col = {pair: nx + ny + k for k, pair in enumerate(ip.chain_pairs)}
        self.s0 = nx + ny + len(ip.chain_pairs)
        self.h_col = self.s0 + n
        ncol = self.h_col + 1
        rows = _Rows()
        rows.block(task_of, np.arange(nx), np.ones(nx), np.ones(n), np.ones(n))

        def through(tasks: np.ndarray, other: np.ndarray, sign: float) -> None:
            """Rows S_t + Σ d x_t + sign·other ≤ 0 for each t (other: a column each)."""
            k = len(tasks)
            counts = sizes[tasks]
            row = np.repeat(np.arange(k), counts)
            within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
            cols = np.repeat(self.first[tasks], counts) + within
            rows.block(
                np.concatenate([row, np.arange(k), np.arange(k)]),
                np.concatenate([cols, self.s0 + tasks, other]),
                np.concatenate([dur[cols], np.ones(k), np.full(k, sign)]),
                np.full(k, -INF),
                np.zeros(k),
            )

        through(ip.edge_u, self.s0 + ip.edge_v, -1.0)
        sinks = np.asarray(ip.sinks, dtype=np.int64)
        through(sinks, np.full(len(sinks), self.h_col), -1.0)
        upper = np.concatenate([np.ones(nx + ny + len(ip.chain_pairs)), np.full(n + 1, INF)])
        for g, members in enumerate(ip.groups):
            ys = list(range(self.group_first[g], self.group_first[g + 1]))
            rows.one(ys, [1.0] * len(ys), 1.0, 1.0)
            where = {s: j for j, s in enumerate(ip.group_settings[g])}
            for i in members:
                a = int(self.first[i])
                for s, j in where.items():
                    cols = [a + k for k, m in enumerate(self.modes[i]) if ip.settings[i][m] == s]
                    rows.one([*cols, ys[j]], [1.0] * len(cols) + [-1.0], 0.0, 0.0)
                # Modes whose setting no other member offers are never allowed.
                for k, m in enumerate(self.modes[i]):
                    if ip.settings[i][m] not in where:
                        upper[a + k] = 0.0
        for (a, b), z in self.z_col.items():
            settings = list(dict.fromkeys([*ip.settings[a], *ip.settings[b]]))
            for s in settings:
                ca = [
                    int(self.first[a]) + k
                    for k, m in enumerate(self.modes[a])
                    if ip.settings[a][m] == s
                ]
                cb = [
                    int(self.first[b]) + k
                    for k, m in enumerate(self.modes[b])
                    if ip.settings[b][m] == s
                ]
                # z ≥ u_a − u_b and z ≤ 2 − u_a − u_b: z = 1 exactly on a change.
                rows.one([z, *ca, *cb], [1.0] + [-1.0] * len(ca) + [1.0] * len(cb), 0.0, INF)
                rows.one([z, *ca, *cb], [1.0] * (1 + len(ca) + len(cb)), -INF, 2.0)
            ca = list(range(int(self.first[a]), int(self.first[a + 1])))
            rows.one(
                [self.s0 + a, *ca, z, self.s0 + b],
                [1.0, *dur[ca].tolist(), float(ip.trans_time[b]), -1.0],
                -INF,
                0.0,
            )
        objective_cost = np.zeros(ncol)
        if objective == "makespan":
            objective_cost[self.h_col] = 1.0
        else:
            objective_cost[:nx] = cost
            for (_, b), z in self.z_col.items():
                objective_cost[z] = float(ip.trans_energy[b]) - float(ip.task_idle_w[b]) * float(
                    ip.trans_time[b]
                )
        self.objective = objective
        matrix, row_lo, row_hi = rows.matrix(ncol)
        self.model = Model(
            objective_cost,
            np.zeros(ncol),
            upper,
            matrix,
            row_lo,
            row_hi,
            integer_columns=0 if relax else nx + ny + len(ip.chain_pairs),
        )
        self.upper = upper
        self.set_deadline(deadline)

    def set_deadline(self, deadline: float | None) -> None:
        """Bound H ≤ deadline (None: no bound); with devices held to the deadline, S̄·H
        becomes the constant S̄·deadline."""
        self.model.set_bound(self.h_col, 0.0, INF if deadline is None else float(deadline))
        if self.objective != "energy":
            return
        held = self.ip.problem.hold == "deadline" and deadline is not None
        self.model.set_cost(self.h_col, 0.0 if held else self.ip.idle_total_w)
        self.model.offset = self.ip.idle_total_w * float(deadline) if held else 0.0

    def tighten(self, gap: float) -> None:
        """Solve to relative gap `gap` with feasibility tolerances of `EXACT_TOLERANCE`
        (at HiGHS's defaults a plan may overrun its deadline by a millionth)."""
        self.model.set_option("mip_rel_gap", float(gap))
        for option in ("mip_feasibility_tolerance", "primal_feasibility_tolerance"):
            self.model.set_option(option, EXACT_TOLERANCE)

    def column(self, i: int, mode: int) -> int:
        """The x column of task i's mode (−1 when the mode is not a candidate)."""
        try:
            return int(self.first[i]) + self.modes[i].index(int(mode))
        except ValueError:
            return -1

    def pin(self, modes: Sequence[int], free: np.ndarray) -> None:
        """Free tasks choose among their modes; every other task is held to its mode."""
        lo = np.zeros(self.nx)
        hi = np.zeros(self.nx)
        for i in range(self.ip.n):
            a, b = int(self.first[i]), int(self.first[i + 1])
            j = -1 if free[i] else self.column(i, modes[i])
            if j < 0:
                hi[a:b] = self.upper[a:b]
            else:
                lo[j] = hi[j] = 1.0
        self.model.set_bounds(np.arange(self.nx), lo, hi)

    def start(self, modes: Sequence[int]) -> None:
        """Hand HiGHS the assignment `modes` as a starting solution."""
        ip = self.ip
        ev = ip.evaluate(modes)
        x = np.zeros(self.model.num_cols)
        for i, m in enumerate(modes):
            j = self.column(i, m)
            if j >= 0:
                x[j] = 1.0
        for g, members in enumerate(ip.groups):
            s = ip.settings[members[0]][modes[members[0]]]
            if s in ip.group_settings[g]:
                x[self.group_first[g] + list(ip.group_settings[g]).index(s)] = 1.0
        for (a, b), z in self.z_col.items():
            x[z] = float(ip.settings[a][modes[a]] != ip.settings[b][modes[b]])
        x[self.s0 : self.s0 + ip.n] = ev.starts
        x[self.h_col] = ev.makespan
        self.model.set_start(x)

    def solve(
        self,
        budget: Budget,
        *,
        gap: float = 1e-4,
        abs_gap: float = 0.0,
        warm: Sequence[int] | None = None,
        watch: Watch | None = None,
    ) -> str:
        """Run HiGHS within `budget`; one of `solvers.highs.STATUSES`.

        Args:
            budget: the time allowed.
            gap: relative gap at which the MILP may stop.
            abs_gap: absolute gap, in the model's energy units (HiGHS's default of 1e-6
                would let it stop "optimal" far from the optimum on small numbers).
            warm: a feasible assignment to start from.
            watch: stops the MILP early (Ctrl-C, stop gap, stall) and receives its
                incumbents and bounds.
        """
        self.model.set_option("mip_rel_gap", float(gap))
        self.model.set_option("mip_abs_gap", float(abs_gap))
        if warm is not None:
            self.start(warm)
        status = self.model.run(max(0.05, budget.remaining()), watch=watch, budget=budget)
        interrupted = watch is not None and watch.interrupted
        if warm is not None and not self.model.consistent() and not interrupted:
            # HiGHS 1.16 can hand back the start unchanged with another solution's
            # objective after presolve: solve again without the start.
            self.model.highs.clearSolver()
            status = self.model.run(max(0.05, budget.remaining()), watch=watch, budget=budget)
        return status

    def read_modes(self) -> list[int]:
        """The mode with the largest x of every task in the solution."""
        x = self.model.values()
        return [
            int(self.mode_of[self.first[i] + int(np.argmax(x[self.first[i] : self.first[i + 1]]))])
            for i in range(self.ip.n)
        ]

    def task_weights(self) -> list[dict[int, float]]:
        """Per task, mode index → its x value in the solution."""
        x = self.model.values()
        return [
            {int(m): float(x[self.first[i] + k]) for k, m in enumerate(self.modes[i])}
            for i in range(self.ip.n)
        ]

    def group_weights(self) -> list[dict[Hashable, float]]:
        """Per group, setting → its y value in the solution."""
        x = self.model.values()
        return [
            {s: float(x[self.group_first[g] + j]) for j, s in enumerate(settings)}
            for g, settings in enumerate(self.ip.group_settings)
        ]


@dataclass
class MilpResult:
    """Outcome of `solve_milp`.

    Attributes:
        modes: mode index per task, or None when no integer solution was found.
        bound: certified lower bound on the energy (model units), nan when none.
        status: one of `solvers.highs.STATUSES`.
        solver: solver name.
        message: details.
        objective: the solution's objective (model units), nan without one.
    """

    modes: list[int] | None
    bound: float
    status: str
    solver: str
    message: str = ""
    objective: float = math.nan


def solve_milp(
    ip: IndexedProblem,
    deadline: float | None,
    budget: Budget,
    *,
    gap: float = 1e-4,
    warm: Sequence[int] | None = None,
    watch: Watch | None = None,
) -> MilpResult:
    """Solve the exact model within `budget`, optionally warm-started.

    Args:
        ip: the problem (scaled).
        deadline: in `ip`'s time unit, or None.
        budget: the time allowed, building the model included.
        gap: relative optimality gap at which the solver may stop.
        warm: a feasible assignment to start from.
        watch: stops the solver early and receives its incumbents and bounds.
    """
    exact = ExactModel(ip, deadline)
    status = exact.solve(budget, gap=gap, warm=warm, watch=watch)
    bound = exact.model.dual_bound()
    if not exact.model.has_solution():
        if status in ("infeasible", "failed"):
            message = f"{SOLVER_NAME} found no solution ({status})"
            return MilpResult(None, math.nan, status, SOLVER_NAME, message)
        return MilpResult(None, bound, status, SOLVER_NAME)
    if status not in ("optimal", "stopped"):
        status = "time_limit"  # a plan, not proven: the limit (or a solution limit) came
    return MilpResult(
        exact.read_modes(), bound, status, SOLVER_NAME, objective=exact.model.objective()
    )


def min_makespan(ip: IndexedProblem, budget: Budget | None = None) -> tuple[float, list[int]]:
    """The fastest makespan (in `ip`'s time unit) and an assignment achieving it, by MILP.

    Solved to a zero gap, absolute and relative: with HiGHS's default absolute gap of
    1e-6 a makespan in seconds could come back 1 µs above the fastest, and a deadline
    between the two would be refused as infeasible. Scale `ip` first so that the
    feasibility tolerances are relative too.
    """
    exact = ExactModel(ip, None, objective="makespan")
    exact.solve(budget or Budget.of(60.0), gap=0.0, abs_gap=0.0)
    if not exact.model.has_solution():
        raise RuntimeError("could not compute the fastest makespan")
    modes = exact.read_modes()
    return ip.evaluate(modes).makespan, modes
