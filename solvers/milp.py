"""`method="milp"`: the exact mixed-integer model, solved through PuLP.

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

HiGHS is used through PuLP when `highspy` is installed, else the bundled CBC.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import pulp

from solvers.hull import pareto_modes, pareto_modes_by_setting
from solvers.indexed import IndexedProblem
from solvers.lp import new_highs
from solvers.stopping import Watch

try:  # pragma: no cover - depends on the installation
    import highspy

    _HAVE_HIGHSPY = pulp.HiGHS().available()
except Exception:  # pragma: no cover
    highspy = None
    _HAVE_HIGHSPY = False


def candidate_modes(ip: IndexedProblem) -> list[list[int]]:
    """Modes worth modelling per task: non-dominated (per setting when settings matter)."""
    out: list[list[int]] = []
    on_chain = {i for pair in ip.chain_pairs for i in pair}
    for i in range(ip.n):
        if ip.group_of[i] >= 0 or i in on_chain:
            out.append(pareto_modes_by_setting(ip.durations[i], ip.costs[i], ip.settings[i]))
        else:
            out.append(pareto_modes(ip.durations[i], ip.costs[i]))
    return out


def _var(
    prob: pulp.LpProblem, name: str, lo: float | None, hi: float | None, cat: str = "Continuous"
) -> pulp.LpVariable:
    """A variable attached to `prob` (PuLP ≥ 3.3 API, falling back to the older one)."""
    if hasattr(prob, "add_variable"):
        return prob.add_variable(name, lo, hi, cat=cat)
    return pulp.LpVariable(name, lo, hi, cat)  # pragma: no cover - older PuLP


@dataclass
class MilpModel:
    """A PuLP model of the problem with handles on its variables."""

    prob: pulp.LpProblem
    x: list[dict[int, pulp.LpVariable]]
    starts: list[pulp.LpVariable]
    horizon: pulp.LpVariable
    z: dict[tuple[int, int], pulp.LpVariable]
    y: list[dict[Hashable, pulp.LpVariable]]
    offset: float  # J, constant left out of the PuLP objective


def build_model(
    ip: IndexedProblem,
    deadline: float | None,
    *,
    relax: bool = False,
    objective: str = "energy",
) -> MilpModel:
    """Build the model above.

    Args:
        ip: the problem.
        deadline: s, or None (no bound on H).
        relax: continuous x, y, z in [0, 1] (the LP relaxation).
        objective: ``"energy"``, or ``"makespan"`` to minimize H (fastest makespan).
    """
    cat = pulp.LpContinuous if relax else pulp.LpBinary
    prob = pulp.LpProblem("min_energy", pulp.LpMinimize)
    cands = candidate_modes(ip)
    x: list[dict[int, pulp.LpVariable]] = []
    for i, ks in enumerate(cands):
        x.append({k: _var(prob, f"x_{i}_{k}", 0, 1, cat) for k in ks})
    starts = [_var(prob, f"S_{i}", 0, None) for i in range(ip.n)]
    horizon = _var(prob, "H", 0, None if deadline is None else float(deadline))
    dur = [pulp.lpSum(float(ip.durations[i][k]) * v for k, v in x[i].items()) for i in range(ip.n)]
    for i in range(ip.n):
        prob += pulp.lpSum(x[i].values()) == 1, f"one_{i}"
    for u, v in zip(ip.edge_u.tolist(), ip.edge_v.tolist(), strict=False):
        prob += starts[v] >= starts[u] + dur[u], f"edge_{u}_{v}"
    for i in ip.sinks:
        prob += horizon >= starts[i] + dur[i], f"end_{i}"
    y: list[dict[Hashable, pulp.LpVariable]] = []
    for g, members in enumerate(ip.groups):
        yg = {s: _var(prob, f"y_{g}_{j}", 0, 1, cat) for j, s in enumerate(ip.group_settings[g])}
        y.append(yg)
        prob += pulp.lpSum(yg.values()) == 1, f"group_{g}"
        for i in members:
            for j, s in enumerate(ip.group_settings[g]):
                prob += (
                    pulp.lpSum(v for k, v in x[i].items() if ip.settings[i][k] == s) == yg[s],
                    f"group_{g}_{i}_{j}",
                )
            # Modes whose setting no other member offers are never allowed.
            for k, v in x[i].items():
                if ip.settings[i][k] not in yg:
                    v.upBound = 0
    z: dict[tuple[int, int], pulp.LpVariable] = {}
    for a, b in ip.chain_pairs:
        zab = _var(prob, f"z_{a}_{b}", 0, 1, cat)
        z[(a, b)] = zab
        settings = list(dict.fromkeys([*ip.settings[a], *ip.settings[b]]))
        for j, s in enumerate(settings):
            ua = pulp.lpSum(v for k, v in x[a].items() if ip.settings[a][k] == s)
            ub = pulp.lpSum(v for k, v in x[b].items() if ip.settings[b][k] == s)
            prob += zab >= ua - ub, f"chg_{a}_{b}_{j}"
            prob += zab <= 2 - ua - ub, f"same_{a}_{b}_{j}"
        prob += starts[b] >= starts[a] + dur[a] + float(ip.trans_time[b]) * zab, f"chain_{a}_{b}"
    held = ip.problem.hold == "deadline" and deadline is not None
    offset = ip.idle_total_w * float(deadline) if held else 0.0
    if objective == "makespan":
        prob += horizon
        offset = 0.0
    else:
        terms = [float(ip.costs[i][k]) * v for i in range(ip.n) for k, v in x[i].items()]
        terms += [
            (float(ip.trans_energy[b]) - float(ip.task_idle_w[b]) * float(ip.trans_time[b])) * v
            for (_, b), v in z.items()
        ]
        if not held:
            terms.append(ip.idle_total_w * horizon)
        prob += pulp.lpSum(terms)
    return MilpModel(prob, x, starts, horizon, z, y, offset)


class _WarmHiGHS(pulp.HiGHS):  # type: ignore[misc,valid-type]
    """PuLP's HiGHS interface, also handing the variables' initial values to HiGHS and
    running it under a `Watch` (see `run_watched`)."""

    warm_start = False
    watch: Watch | None = None
    offset = 0.0

    def callSolver(self, lp: pulp.LpProblem) -> None:  # noqa: N802 (PuLP's name)
        if self.warm_start:
            # Columns follow the `index` PuLP gave each variable when building.
            values = [0.0] * lp.solverModel.getNumCol()
            for v in lp.variables():
                values[v.index] = float(v.varValue) if v.varValue is not None else 0.0
            sol = highspy.HighsSolution()
            sol.col_value = values
            sol.value_valid = True
            lp.solverModel.setSolution(sol)
        run_watched(lp.solverModel, self.watch, self.offset)


#: s between the main thread's looks at a MILP running on its worker thread.
POLL_S = 0.05


def run_watched(h: highspy.Highs, watch: Watch | None, offset: float = 0.0) -> None:
    """Run a MILP in HiGHS, stopping it early when `watch` says so.

    Without a watch this is ``h.run()``. With one, HiGHS runs on a worker thread (a
    Ctrl-C reaches Python only between bytecodes, never inside ``run``), the main thread
    waits and turns a KeyboardInterrupt into `Watch.interrupted`, and HiGHS's MIP
    interrupt callback hands every incumbent and dual bound to the watch and stops the
    search once the watch says so (interrupted, stop gap, stall). HiGHS then returns its
    best solution as usual.

    Args:
        h: a HiGHS instance holding a MILP (PuLP's ``solverModel``, or our own).
        watch: the solve's watch, or None.
        offset: constant to add to HiGHS's objective values (J, the model's offset).
    """
    if watch is None:
        h.run()
        return

    def on_interrupt(event: highspy.highs.HighsCallbackEvent) -> None:
        out = event.data_out
        watch.offer_bound(float(out.mip_dual_bound) + offset)
        if float(out.mip_primal_bound) < highspy.kHighsInf:
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
                watch.interrupted = True
    finally:
        h.cbMipInterrupt -= on_interrupt


@dataclass
class MilpResult:
    """Outcome of `solve_milp`.

    Attributes:
        modes: mode index per task, or None when no integer solution was found.
        bound: certified lower bound on the energy (J), nan when the solver gave none.
        status: ``"optimal"``, ``"time_limit"``, ``"stopped"`` (by the watch) or
            ``"infeasible"``/``"failed"``.
        solver: solver name.
        message: details.
    """

    modes: list[int] | None
    bound: float
    status: str
    solver: str
    message: str = ""
    objective: float = math.nan


def solver_name() -> str:
    """The MILP engine in use: ``"HiGHS"`` or ``"CBC"``."""
    return "HiGHS" if _HAVE_HIGHSPY else "CBC"


def set_initial(model: MilpModel, ip: IndexedProblem, modes: Sequence[int]) -> None:
    """Give every variable its value under an assignment (for warm starts)."""
    ev = ip.evaluate(modes)
    for i, xi in enumerate(model.x):
        for k, v in xi.items():
            v.setInitialValue(1.0 if k == modes[i] else 0.0)
        model.starts[i].setInitialValue(float(ev.starts[i]))
    model.horizon.setInitialValue(float(ev.makespan))
    for g, yg in enumerate(model.y):
        s = ip.settings[ip.groups[g][0]][modes[ip.groups[g][0]]]
        for key, v in yg.items():
            v.setInitialValue(1.0 if key == s else 0.0)
    for (a, b), v in model.z.items():
        v.setInitialValue(1.0 if ip.settings[a][modes[a]] != ip.settings[b][modes[b]] else 0.0)


def _consistent(h: highspy.Highs) -> bool:
    """True when the solution HiGHS returns has the objective HiGHS reports."""
    info = h.getInfo()
    if info.primal_solution_status != 2:
        return True
    x = np.asarray(h.getSolution().col_value)
    value = float(np.dot(np.asarray(h.getLp().col_cost_), x)) + float(h.getLp().offset_)
    obj = float(info.objective_function_value)
    return abs(value - obj) <= 1e-6 * max(1.0, abs(obj))


def solve_model(
    model: MilpModel,
    *,
    time_limit: float,
    gap: float,
    warm: bool = False,
    mip: bool = True,
    abs_gap: float = 0.0,
    watch: Watch | None = None,
) -> tuple[str, float, float]:
    """Run the solver on a built model.

    Args:
        model: the model (build it from a scaled problem: HiGHS's tolerances are
            absolute, see `IndexedProblem.rescaled`).
        time_limit: s.
        gap: relative gap at which a MILP may stop.
        warm: hand the variables' initial values to the solver.
        mip: solve as a MILP (False: its LP relaxation).
        abs_gap: absolute gap, in the model's energy units, at which a MILP may stop
            (HiGHS's default of 1e-6 would let it stop "optimal" far from the optimum
            on a model of small numbers).
        watch: stops a MILP early (Ctrl-C, stop gap, stall) and receives its
            incumbents and bounds.

    Returns:
        (status, objective J, bound J): status ``"optimal"``, ``"time_limit"``,
        ``"infeasible"`` or ``"failed"``; objective and bound include the offset (nan
        when unknown).
    """
    prob = model.prob
    limit = max(0.05, float(time_limit))
    if _HAVE_HIGHSPY:
        new_highs()  # silences HiGHS's banner before PuLP makes its own instance

        def highs(start: bool) -> _WarmHiGHS:
            solver = _WarmHiGHS(
                mip=mip, msg=False, timeLimit=limit, gapRel=gap, gapAbs=abs_gap, threads=1
            )
            solver.warm_start = start
            solver.watch = watch if mip else None
            solver.offset = model.offset
            return solver

        prob.solve(highs(warm))
        h = prob.solverModel
        if warm and not _consistent(h) and not (watch is not None and watch.interrupted):
            # HiGHS 1.16 can return the start solution unchanged with another
            # solution's objective after presolve; solve again without the start.
            prob.solve(highs(False))
            h = prob.solverModel
        ms = h.getModelStatus()
        info = h.getInfo()
        st = highspy.HighsModelStatus
        if ms == st.kInfeasible:
            return "infeasible", math.nan, math.nan
        has_sol = info.primal_solution_status == 2
        if not mip:
            if ms != st.kOptimal:
                return "failed", math.nan, math.nan
            obj = float(info.objective_function_value) + model.offset
            return "optimal", obj, obj
        bound = float(info.mip_dual_bound) + model.offset
        obj = float(info.objective_function_value) + model.offset if has_sol else math.nan
        if not has_sol:
            stopped = {st.kTimeLimit: "time_limit", st.kInterrupt: "stopped"}
            return stopped.get(ms, "failed"), math.nan, bound
        if ms == st.kOptimal:
            return "optimal", obj, bound
        # Stopped by the watch (stop gap, stall, Ctrl-C): not a time limit.
        return ("stopped" if ms == st.kInterrupt else "time_limit"), obj, bound
    solver = pulp.PULP_CBC_CMD(
        msg=False, timeLimit=limit, gapRel=gap, gapAbs=abs_gap, warmStart=warm, mip=mip
    )
    prob.solve(solver)
    if prob.status == pulp.LpStatusInfeasible:
        return "infeasible", math.nan, math.nan
    if prob.sol_status == pulp.LpSolutionOptimal:
        obj = float(pulp.value(prob.objective) or 0.0) + model.offset
        # CBC stops at the requested relative gap: the bound is only known that far.
        return "optimal", obj, obj * (1 - gap) if mip else obj
    if prob.sol_status == pulp.LpSolutionIntegerFeasible:
        obj = float(pulp.value(prob.objective) or 0.0) + model.offset
        return "time_limit", obj, math.nan
    return "failed", math.nan, math.nan


def read_modes(model: MilpModel) -> list[int]:
    """The mode with the largest x of every task in the solved model."""
    out = []
    for xi in model.x:
        k, _ = max(xi.items(), key=lambda kv: (kv[1].varValue or 0.0, -kv[0]))
        out.append(int(k))
    return out


def solve_milp(
    ip: IndexedProblem,
    deadline: float | None,
    *,
    time_limit: float = 60.0,
    gap: float = 1e-4,
    warm: Sequence[int] | None = None,
    watch: Watch | None = None,
) -> MilpResult:
    """Solve the exact model within a time limit, optionally warm-started.

    Args:
        ip: the problem (scaled: `IndexedProblem.rescaled`).
        deadline: in `ip`'s time unit, or None.
        time_limit: s for the solver (model building comes on top).
        gap: relative optimality gap at which the solver may stop.
        warm: a feasible assignment to start from.
        watch: stops the solver early and receives its incumbents and bounds.
    """
    t0 = time.perf_counter()
    model = build_model(ip, deadline)
    if warm is not None:
        set_initial(model, ip, warm)
    left = time_limit - (time.perf_counter() - t0)
    status, objective, bound = solve_model(
        model, time_limit=left, gap=gap, warm=warm is not None, watch=watch
    )
    name = solver_name()
    if status in ("infeasible", "failed"):
        return MilpResult(None, bound, status, name, f"{name} found no solution ({status})")
    return MilpResult(read_modes(model), bound, status, name, objective=objective)


def min_makespan(ip: IndexedProblem, time_limit: float = 60.0) -> tuple[float, list[int]]:
    """The fastest makespan (in `ip`'s time unit) and an assignment achieving it, by MILP.

    Solved to a zero gap, absolute and relative: with HiGHS's default absolute gap of
    1e-6 a makespan in seconds could come back 1 µs above the fastest, and a deadline
    between the two would be refused as infeasible. Scale `ip` first
    (`IndexedProblem.rescaled`) so that the feasibility tolerances are relative too.
    """
    model = build_model(ip, None, objective="makespan")
    status, _, _ = solve_model(model, time_limit=time_limit, gap=0.0, abs_gap=0.0)
    if status in ("infeasible", "failed"):
        raise RuntimeError("could not compute the fastest makespan")
    modes = read_modes(model)
    return ip.evaluate(modes).makespan, modes
