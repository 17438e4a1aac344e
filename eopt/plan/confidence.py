"""Deadlines met with a stated probability: the makespan distribution of a plan, and
the cheapest plan whose on-time probability reaches a confidence.

A plan solved for a deadline D on mean durations finishes on time about half the time
when its critical path is tight: the makespan is a maximum over paths of sums of random
durations, and its median sits at or above the makespan of the means.

Model. Each element's duration is an independent normal with its signature's mean T and
single-run variance σ_T², truncated to positive values (drawn by inverting the CDF on
(Φ(−T/σ_T), 1); the truncation matters only for σ_T comparable with T). Elements start
as soon as every predecessor has ended: the plan's precedence, each device's execution
order (the solver problem's edges, :mod:`eopt.plan.problem`) and, where a device pays
for changing its setting, the transition time between consecutive tasks at different
settings. The members of a same-device group co-start and their successors wait for all
of them.

Two estimates of P(makespan ≤ D):

* analytic (:func:`makespan_moments`): a forward pass in topological order; a sum of
  independent normals is exact, the maximum at a merge is Clark's (1961) normal
  approximation, pairwise, with the covariances between the finish times of the elements
  still to be merged carried along (paths that share a prefix are correlated: treating
  them as independent overstates the maximum). P ≈ Φ((D − μ)/σ).
* Monte Carlo (:func:`sample_makespans`): durations drawn per element, the same forward
  pass on every sample (numpy, vectorized over samples, seeded).

Choosing modes (:func:`solve_with_confidence`): the solver minimizes energy under a
deadline on mean durations, so a plan with P ≥ q is found by solving for a tightened mean
deadline D' ≤ D. D' is searched between the fastest makespan and D, starting from the
guess D − (μ − H) − z_q·σ of the mean-deadline plan (H: its makespan on mean durations),
by a safeguarded secant on the analytic margin (D − μ)/σ − z_q; a plan is accepted when the
Monte Carlo estimate stays at least q at a one-sided 95 % level, both on the samples
common to every candidate (common random numbers) and on four times as many fresh ones,
and the cheapest accepted plan wins. Its on-time probability is then re-estimated from
independent samples.

Assumptions:
    Durations are independent between elements and normal around their means; devices
    start an element as soon as it is ready (no waiting for a planned start time).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import networkx as nx
import numpy as np
from scipy.special import ndtr, ndtri

from eopt.calculus.operators import clark_max
from eopt.model.library import Library
from eopt.model.planfile import Plan, PlanError
from eopt.model.schedule import Schedule
from eopt.plan.budget import TimeBudget
from eopt.plan.problem import PlanProblem, build_problem
from eopt.plan.solve import (
    fastest_modes,
    resolve_deadline,
    schedule_from_solution,
    solve_plan,
    static_problem,
)

__all__ = [
    "DEFAULT_SAMPLES",
    "ConfidenceResult",
    "ConfidenceUnreachableError",
    "OnTime",
    "TimedDag",
    "confidence_result",
    "makespan_moments",
    "on_time",
    "sample_makespans",
    "solve_with_confidence",
    "timed_dag",
]

#: Monte Carlo samples per estimate: the standard error of P = 0.95 is then 0.0015.
DEFAULT_SAMPLES = 20_000

#: One-sided z of the level at which a candidate's Monte Carlo estimate must stay ≥ q.
ACCEPT_Z = 1.645

#: A candidate that passes on the common samples is confirmed on this many times as many
#: fresh ones (the cheapest of several passing candidates is the luckiest).
CONFIRM_FACTOR = 4

#: Share of the time limit the mean-deadline plan gets; the search shares the rest.
MEAN_PLAN_SHARE = 0.4

#: Most solves of the tightened-deadline search (each halves the bracket on D').
MAX_SEARCH_SOLVES = 12

#: The search stops once the bracket on D' is this many σ of the makespan wide.
BRACKET_SIGMAS = 0.02

#: Key of the result block in a schedule's ``meta``.
META_KEY = "deadline_confidence"

# Floats per chunk of the Monte Carlo pass (elements × samples): about 32 MB.
_CHUNK_FLOATS = 1 << 22


class ConfidenceUnreachableError(PlanError):
    """No plan found meets the deadline with the requested probability."""


@dataclass(frozen=True)
class TimedDag:
    """Elements as a DAG of random durations, in topological order.

    Attributes:
        names: Element names, in topological order.
        mean_s: Mean duration per element, s.
        var_s2: Variance of one run's duration per element, s².
        preds: Per element, (predecessor index, lag s): it starts once every predecessor
            has ended and its lag (a setting change on the device) has passed.
        sinks: Indices of the elements nothing waits for.
    """

    names: tuple[str, ...]
    mean_s: np.ndarray
    var_s2: np.ndarray
    preds: tuple[tuple[tuple[int, float], ...], ...]
    sinks: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.names)

    def mean_makespan(self) -> float:
        """The makespan with every duration at its mean (the solver's), in s."""
        finish = np.zeros(len(self))
        for i, preds in enumerate(self.preds):
            start = max((finish[j] + lag for j, lag in preds), default=0.0)
            finish[i] = start + self.mean_s[i]
        return float(finish[list(self.sinks)].max()) if len(self) else 0.0


def timed_dag(pp: PlanProblem, modes: Mapping[str, int]) -> TimedDag:
    """The elements of ``pp`` at the solver assignment ``modes`` as a :class:`TimedDag`.

    Args:
        pp: The plan problem (its ``problem`` holds the device orders as edges).
        modes: Solver task name → mode index.

    Raises:
        PlanError: ``modes`` misses a task of the problem.
    """
    from solvers.problem import device_chain

    problem: Any = pp.problem
    missing = [t.name for t in problem.tasks if t.name not in modes]
    if missing:
        raise PlanError(f"the assignment has no mode for task(s) {missing[:5]}")
    lags: dict[tuple[str, str], float] = {(a, b): 0.0 for a, b in problem.edges}
    graph = problem.graph()
    task_by_name = {t.name: t for t in problem.tasks}
    for device, (tau, _) in problem.transition.items():
        if not float(tau) > 0:
            continue
        chain = device_chain(problem, graph, device)
        for a, b in itertools.pairwise(chain):
            setting_a = task_by_name[a].modes[int(modes[a])].setting
            setting_b = task_by_name[b].modes[int(modes[b])].setting
            if setting_a != setting_b:
                lags[(a, b)] = max(lags.get((a, b), 0.0), float(tau))
    cells = pp.element_signatures(modes)
    members = {name: pp.tasks[name].members for name in task_by_name}
    element_graph = nx.DiGraph()
    element_graph.add_nodes_from(e.name for e in pp.plan.elements)
    for (a, b), lag in lags.items():
        for u in members[a]:
            for v in members[b]:
                element_graph.add_edge(u, v, lag=lag)
    order = list(nx.topological_sort(element_graph))
    index = {name: i for i, name in enumerate(order)}
    preds = tuple(
        tuple(
            (index[u], float(element_graph.edges[u, v]["lag"]))
            for u in element_graph.predecessors(v)
        )
        for v in order
    )
    return TimedDag(
        names=tuple(order),
        mean_s=np.array([cells[n].time for n in order], dtype=float),
        var_s2=np.array([cells[n].var_time for n in order], dtype=float),
        preds=preds,
        sinks=tuple(index[v] for v in order if element_graph.out_degree(v) == 0),
    )


# Analytic: Clark's maximum with covariances ------------------------------------------------
class _Covariances:
    """Covariances between the finish times of the elements still to be merged.

    Finish times live in slots of a square matrix; an element's slot is freed once its
    last successor has been merged, so memory follows the DAG's width, not its size.
    """

    def __init__(self, capacity: int = 16) -> None:
        self.cov = np.zeros((capacity, capacity))
        self.free: list[int] = list(range(capacity - 1, -1, -1))

    def vector_size(self) -> int:
        return self.cov.shape[0]

    def take(self, row: np.ndarray, variance: float) -> int:
        """A slot for a new finish time with covariances ``row`` and ``variance``."""
        if not self.free:
            old = self.cov.shape[0]
            grown = np.zeros((2 * old, 2 * old))
            grown[:old, :old] = self.cov
            self.cov = grown
            self.free = list(range(2 * old - 1, old - 1, -1))
        slot = self.free.pop()
        full = np.zeros(self.cov.shape[0])
        full[: row.size] = row
        self.cov[slot, :] = full
        self.cov[:, slot] = full
        self.cov[slot, slot] = variance
        return slot

    def release(self, slot: int) -> None:
        self.free.append(slot)


def _merge(
    first: tuple[float, float, np.ndarray],
    second: tuple[float, float, np.ndarray],
    covariance: float,
) -> tuple[float, float, np.ndarray]:
    """Clark's max of two jointly normal times, each (mean s, variance s², covariances
    with the live finish times), with their covariance in s²."""
    m1, v1, c1 = first
    m2, v2, c2 = second
    theta2 = v1 + v2 - 2.0 * covariance
    if theta2 <= 1e-12 * max(v1 + v2, 1e-300):
        # Their difference is (nearly) certain: the maximum is the one with the larger mean.
        return first if m1 >= m2 else second
    # X_k = W + U_k with a common W of variance `shared` and U_1, U_2 independent:
    # max = W + max(U_1, U_2), exact for shared = covariance (the usual case; an
    # operand varying less than its common part with the other is clamped).
    shared = min(covariance, v1, v2)
    mean, var = clark_max(m1, v1 - shared, m2, v2 - shared)
    weight = float(ndtr((m1 - m2) / math.sqrt(theta2)))
    c1, c2 = _same_size(c1, c2)
    return mean, var + shared, weight * c1 + (1.0 - weight) * c2


def _same_size(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = max(a.size, b.size)
    return np.pad(a, (0, n - a.size)), np.pad(b, (0, n - b.size))


def makespan_moments(dag: TimedDag) -> tuple[float, float]:
    """Mean (s) and variance (s²) of the makespan by Clark's normal approximation.

    Sums of independent normal durations are exact; each merge is Clark's maximum of two
    jointly normal times with their covariance (from the shared history of the paths),
    predecessors merged in descending order of mean.

    Args:
        dag: The elements with their random durations.

    Returns:
        (E[makespan], Var[makespan]).

    Example:
        >>> dag = TimedDag(("a", "b"), np.array([1.0, 2.0]), np.array([0.1, 0.2]),
        ...                ((), ((0, 0.0),)), (1,))
        >>> tuple(round(x, 6) for x in makespan_moments(dag))  # a chain: exact sums
        (3.0, 0.3)
    """
    n = len(dag)
    if n == 0:
        return 0.0, 0.0
    remaining = np.zeros(n, dtype=int)  # successors not yet merged, per element
    for preds in dag.preds:
        for j, _ in preds:
            remaining[j] += 1
    sinks = set(dag.sinks)
    store = _Covariances()
    slot = np.full(n, -1)
    mean = np.zeros(n)
    var = np.zeros(n)

    def operand(j: int, lag: float) -> tuple[float, float, np.ndarray]:
        return mean[j] + lag, var[j], store.cov[slot[j], :].copy()

    def maximum(items: Sequence[tuple[int, float]]) -> tuple[float, float, np.ndarray]:
        ordered = sorted(items, key=lambda p: -(mean[p[0]] + p[1]))
        j0, lag0 = ordered[0]
        result = operand(j0, lag0)
        for j, lag in ordered[1:]:
            other = operand(j, lag)
            # The running maximum's covariance with X_j is the X_j entry of its vector.
            result = _merge(result, other, float(result[2][slot[j]]))
        return result

    for i, preds in enumerate(dag.preds):
        if preds:
            m, v, row = maximum(preds)
        else:
            m, v, row = 0.0, 0.0, np.zeros(store.vector_size())
        mean[i] = m + dag.mean_s[i]
        var[i] = v + dag.var_s2[i]
        # The element's own duration is independent of everything before it.
        slot[i] = store.take(row, var[i])
        for j, _ in preds:
            remaining[j] -= 1
            if remaining[j] == 0 and j not in sinks:
                store.release(int(slot[j]))
    m, v, _ = maximum([(j, 0.0) for j in dag.sinks])
    return float(m), float(max(v, 0.0))


# Monte Carlo ---------------------------------------------------------------------------
def sample_makespans(dag: TimedDag, samples: int = DEFAULT_SAMPLES, seed: int = 0) -> np.ndarray:
    """Makespans of ``samples`` runs with durations drawn per element.

    Each duration is normal with the element's mean and variance, truncated to > 0
    (module docstring); every run keeps each device's order and every precedence.

    Args:
        dag: The elements with their random durations.
        samples: Runs to draw.
        seed: Seed of the generator (the same seed gives the same uniforms for any plan of
            the same elements: common random numbers).

    Returns:
        The makespans, s, one per run.
    """
    if samples < 1:
        raise ValueError(f"samples must be ≥ 1, got {samples}")
    n = len(dag)
    out = np.zeros(samples)
    if n == 0:
        return out
    rng = np.random.default_rng(seed)
    std = np.sqrt(dag.var_s2)[:, None]
    mean = dag.mean_s[:, None]
    # Lower end of the uniforms that the inverse CDF maps to durations > 0; uniforms of
    # exactly that end would map to 0 (or -inf), so they are nudged just above it.
    floor = np.zeros_like(std)
    np.divide(-mean, std, out=floor, where=std > 0)
    floor = np.where(std > 0, ndtr(floor), 0.0)
    lowest = np.nextafter(floor, 1.0)
    chunk = max(1, min(samples, _CHUNK_FLOATS // n))
    sinks = list(dag.sinks)
    for first in range(0, samples, chunk):
        k = min(chunk, samples - first)
        u = rng.random((n, k))
        u *= 1.0 - floor
        u += floor
        np.maximum(u, lowest, out=u)
        # Durations first (a row without spread gets its mean), then each row becomes
        # the element's finish time in topological order.
        finish = ndtri(u)
        finish *= std
        finish += mean
        for i, preds in enumerate(dag.preds):
            if not preds:
                continue
            j, lag = preds[0]
            start = finish[j] + lag
            for j, lag in preds[1:]:
                np.maximum(start, finish[j] + lag, out=start)
            finish[i] += start
        out[first : first + k] = finish[sinks].max(axis=0)
    return out


@dataclass(frozen=True)
class OnTime:
    """How likely a plan meets a deadline.

    Attributes:
        deadline_s: The deadline, s.
        mean_makespan_s: The makespan of the mean durations (what the solver sees), s.
        mean_s: E[makespan] by Clark's approximation, s.
        std_s: Its standard deviation, s.
        analytic: Φ((D − mean)/std) (1 or 0 without spread).
        monte_carlo: Share of sampled runs on time.
        stderr: Standard error of ``monte_carlo``.
        samples: Runs drawn.
        quantile_s: Per requested level q, the q-quantile of the sampled makespans, s.
    """

    deadline_s: float
    mean_makespan_s: float
    mean_s: float
    std_s: float
    analytic: float
    monte_carlo: float
    stderr: float
    samples: int
    quantile_s: Mapping[float, float]

    def to_dict(self) -> dict[str, Any]:
        """For the schedule file."""
        return {
            "deadline_s": self.deadline_s,
            "mean_makespan_s": self.mean_makespan_s,
            "makespan_mean_s": self.mean_s,
            "makespan_std_s": self.std_s,
            "analytic": self.analytic,
            "monte_carlo": self.monte_carlo,
            "monte_carlo_stderr": self.stderr,
            "samples": self.samples,
        }


def on_time(
    dag: TimedDag,
    deadline: float,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    levels: Sequence[float] = (),
) -> OnTime:
    """P(makespan ≤ ``deadline``) of a plan, analytic and by Monte Carlo.

    Args:
        dag: The plan's elements with their random durations.
        deadline: s.
        samples: Monte Carlo runs.
        seed: Monte Carlo seed.
        levels: Probabilities whose makespan quantiles to report.
    """
    mean, var = makespan_moments(dag)
    std = math.sqrt(var)
    if std > 0:
        analytic = float(ndtr((deadline - mean) / std))
    else:
        analytic = 1.0 if mean <= deadline * (1 + 1e-12) else 0.0
    runs = sample_makespans(dag, samples, seed)
    hit = float(np.mean(runs <= deadline * (1 + 1e-12)))
    return OnTime(
        deadline_s=float(deadline),
        mean_makespan_s=dag.mean_makespan(),
        mean_s=mean,
        std_s=std,
        analytic=analytic,
        monte_carlo=hit,
        stderr=math.sqrt(hit * (1.0 - hit) / samples),
        samples=samples,
        quantile_s={q: float(np.quantile(runs, q)) for q in levels},
    )


# Choosing modes ------------------------------------------------------------------------
@dataclass(frozen=True)
class ConfidenceResult:
    """What meeting the deadline with probability ≥ q costs.

    Attributes:
        confidence: q, the requested P(makespan ≤ deadline).
        deadline_s: The deadline D, s.
        tightened_deadline_s: The mean-duration deadline D' the chosen plan was solved
            for, s (D when the mean-deadline plan already reaches q).
        mean_plan_energy_j: Energy of the plan solved for D on mean durations, J.
        energy_j: Energy of the chosen plan, J.
        mean_plan: The mean-deadline plan's on-time probability.
        plan: The chosen plan's on-time probability (independent samples).
        solves: Solver calls of the search.
        wall_time_s: Time the search took, s.
    """

    confidence: float
    deadline_s: float
    tightened_deadline_s: float
    mean_plan_energy_j: float
    energy_j: float
    mean_plan: OnTime
    plan: OnTime
    solves: int
    wall_time_s: float

    @property
    def premium(self) -> float:
        """Extra energy of the chosen plan over the mean-deadline plan, as a fraction."""
        return self.energy_j / self.mean_plan_energy_j - 1.0 if self.mean_plan_energy_j else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The ``meta.deadline_confidence`` block of a schedule."""
        return {
            "confidence": self.confidence,
            "deadline_s": self.deadline_s,
            "tightened_deadline_s": self.tightened_deadline_s,
            "mean_plan_energy_j": self.mean_plan_energy_j,
            "energy_j": self.energy_j,
            "premium": self.premium,
            "on_time": self.plan.to_dict(),
            "mean_plan_on_time": self.mean_plan.to_dict(),
            "solves": self.solves,
            "wall_time_s": self.wall_time_s,
            "model": "independent normal durations (signature var_time), truncated at > 0",
        }


def confidence_result(schedule: Schedule) -> dict[str, Any] | None:
    """The ``deadline_confidence`` block of a schedule written with a confidence, else
    None."""
    block = schedule.meta.get(META_KEY)
    return dict(block) if isinstance(block, Mapping) else None


@dataclass(frozen=True)
class _Candidate:
    at_s: float  # the mean deadline it was solved for
    solution: Any  # solvers.Solution; None: the mean-deadline plan
    check: OnTime  # on the common random numbers
    ok: bool  # reaches the confidence, on those and on fresh samples


def solve_with_confidence(
    plan: Plan,
    confidence: float,
    deadline: float | None = None,
    slowdown: float | None = None,
    method: str = "auto",
    time_limit: float | None = None,
    gap: float = 1e-4,
    library: Library | None = None,
    *,
    static: bool = False,
    budget: TimeBudget | None = None,
    stop: Any = None,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
) -> tuple[Schedule, ConfidenceResult]:
    """The cheapest plan found that meets the deadline with probability ≥ ``confidence``.

    First the plan for the deadline on mean durations (:func:`~eopt.plan.solve.solve_plan`,
    with ``MEAN_PLAN_SHARE`` of the time); then the search over tightened mean deadlines
    (module docstring) with the rest.

    Args:
        plan: The plan; its libraries must give the cells' time variances.
        confidence: q in (0, 1), the requested P(makespan ≤ deadline).
        deadline: Makespan bound D in s (see :func:`~eopt.plan.solve.resolve_deadline`).
        slowdown: D relative to the fastest makespan (0.05 = fastest + 5 %).
        method: Solver method (``"auto"``, ``"milp"``, ``"relax"``).
        time_limit: Wall time for everything, in s; None: no wall limit (the solves
            stop by rules that count work).
        gap: Relative optimality gap of each solve.
        library: Signatures; default: the plan's libraries.
        static: One device-wide setting per device for the whole plan.
        budget: Time budget to draw from instead of a new one of ``time_limit``.
        stop: ``solvers.stopping.StopRule`` of each solve.
        samples: Monte Carlo runs per check.
        seed: Monte Carlo seed (the final check uses ``seed + 1``, confirmations
            ``seed + 2`` on).

    Returns:
        The schedule of the chosen plan (its ``deadline`` is D; ``meta`` holds the result
        under ``"deadline_confidence"``) and the :class:`ConfidenceResult`. With q ≥ 50 %
        its lower bound is the mean-deadline problem's (any plan on time with probability
        ≥ ½ has a mean makespan ≤ D); below, it has none.

    Raises:
        PlanError: bad arguments (confidence outside (0, 1), no deadline).
        ConfidenceUnreachableError: even the fastest plans miss the confidence; the message
            names the best probability found and the deadline it would need.
        solvers.InfeasibleDeadline: D is below the fastest makespan.
    """
    from solvers import fastest_makespan, solve
    from solvers.solve import default_work_s

    started = time.perf_counter()
    if not 0.0 < confidence < 1.0:
        raise PlanError(f"confidence must be a probability in (0, 1), e.g. 0.95; got {confidence}")
    if samples < 100:
        raise PlanError(f"Monte Carlo samples must be ≥ 100, got {samples}")
    budget = budget or TimeBudget(time_limit)
    pp = build_problem(plan, library, prune=not static)
    target = static_problem(pp) if static else pp
    bound = resolve_deadline(pp, deadline, slowdown)
    if bound is None:
        raise PlanError(
            "a confidence needs a deadline: give --deadline or --slowdown, or put "
            "'deadline:' in the plan"
        )
    if not any(sig.var_time > 0 for cells in pp.cells.values() for sig in cells):
        raise PlanError(
            f"{plan.source or 'the plan'}: no cell of its signature libraries has a time "
            "variance (var_time), so every plan is on time with probability 0 or 1; "
            "characterize with repeated runs (eopt sweep) or drop --confidence"
        )
    mean_schedule = solve_plan(
        plan,
        deadline=bound,
        method=method,
        gap=gap,
        library=library,
        static=static,
        budget=TimeBudget(budget.share(MEAN_PLAN_SHARE) if budget.limited else None),
        stop=stop,
    )
    mean_modes = _modes_of(target, mean_schedule)

    # A plan is checked on several sample sets (screen, confirmation, final): its DAG
    # is built once.
    dags: dict[tuple[tuple[str, int], ...], TimedDag] = {}

    def check(modes: Mapping[str, int], at_seed: int = seed, runs: int = samples) -> OnTime:
        key = tuple(sorted(modes.items()))
        if key not in dags:
            dags[key] = timed_dag(target, modes)
        return on_time(dags[key], bound, runs, at_seed, levels=(confidence,))

    def passes(result: OnTime) -> bool:
        return result.monte_carlo - ACCEPT_Z * result.stderr >= confidence

    confirmations = itertools.count(seed + 2)

    def assess(modes: Mapping[str, int]) -> tuple[OnTime, bool]:
        # Common random numbers rank the candidates smoothly, but the cheapest of several
        # that pass on one sample set is biased towards that set's luck: a plan counts as
        # on time only when fresh samples agree.
        screen = check(modes)
        if not passes(screen):
            return screen, False
        return screen, passes(check(modes, next(confirmations), CONFIRM_FACTOR * samples))

    mean_check, mean_ok = assess(mean_modes)
    solves = 0
    # After a Ctrl-C (the solve hands back its best plan) nothing more is searched.
    if mean_ok or _interrupted(mean_schedule.solver.get("status")):
        chosen_at, chosen_modes, chosen_sol = bound, mean_modes, None
    else:
        t_fast = float(fastest_makespan(target.problem))
        tried: list[_Candidate] = []

        def attempt(at: float) -> _Candidate:
            nonlocal solves
            solves += 1
            left = MAX_SEARCH_SOLVES - solves + 1
            sol = solve(
                target.problem,
                deadline=at,
                method=method,
                time_limit=budget.solver_limit(budget.share(1.0 / max(1, left))),
                work_limit=default_work_s(len(target.problem.tasks)) / max(1, left),
                gap=gap,
                stop=stop,
            )
            found = _Candidate(at, sol, *assess(sol.modes))
            tried.append(found)
            return found

        best = attempt(t_fast)
        stopped = _interrupted(best.solution.status)
        if stopped and not best.ok:
            best = _Candidate(bound, None, mean_check, False)
        elif not best.ok:
            best = _fastest_or_raise(target, static, tried, assess, bound, confidence)
        # Safeguarded regula falsi on D' ∈ [accepted lo, rejected hi] over the analytic
        # margin z(D') = (D − μ)/σ − z_q, smooth where the Monte Carlo share is a step.
        z_q = float(ndtri(confidence))
        lo, hi = t_fast, bound
        margin_lo, margin_hi = _margin(best.check, z_q), _margin(mean_check, z_q)
        shift = mean_check.mean_s - mean_check.mean_makespan_s
        at = bound - max(0.0, shift) - z_q * mean_check.std_s
        # A bracket this narrow moves the probability by about 1 % of a σ: done.
        resolution = max(1e-4 * bound, BRACKET_SIGMAS * mean_check.std_s)
        if not lo < at < hi:
            at = _next_deadline(lo, hi, margin_lo, margin_hi)
        while (
            not stopped
            and solves < MAX_SEARCH_SOLVES
            and hi - lo > resolution
            and budget.left() > 0
        ):
            found = attempt(at)
            stopped = _interrupted(found.solution.status)
            if found.ok:
                lo, margin_lo = at, _margin(found.check, z_q)
                if best.solution is None or found.solution.energy < best.solution.energy:
                    best = found
            else:
                # The plan solved for D' is the optimum for any deadline in [its
                # makespan, D']: only a deadline below its makespan can change it.
                hi = min(at, float(found.solution.makespan) * (1 - 1e-9))
                margin_hi = _margin(found.check, z_q)
            at = _next_deadline(lo, hi, margin_lo, margin_hi)
        if best.solution is None:
            chosen_at, chosen_modes, chosen_sol = bound, mean_modes, None
        else:
            chosen_at, chosen_sol = best.at_s, best.solution
            chosen_modes = dict(chosen_sol.modes)
    final = check(chosen_modes, seed + 1)
    mean_energy = float(mean_schedule.energy)
    if chosen_sol is None:
        schedule = mean_schedule
    else:
        schedule = _confident_schedule(
            target, chosen_sol, mean_schedule, bound, chosen_at, bounded=confidence >= 0.5
        )
    result = ConfidenceResult(
        confidence=confidence,
        deadline_s=bound,
        tightened_deadline_s=chosen_at,
        mean_plan_energy_j=mean_energy,
        energy_j=float(schedule.energy),
        mean_plan=mean_check,
        plan=final,
        solves=solves,
        wall_time_s=time.perf_counter() - started,
    )
    meta = {**schedule.meta, META_KEY: result.to_dict(), "wall_time_s": budget.spent()}
    meta["time_limit_s"] = budget.limit_s if budget.limited else None
    return replace(schedule, meta=meta), result


def _margin(result: OnTime, z_q: float) -> float:
    """How many σ of the makespan a plan meets its deadline by, beyond z_q."""
    if result.std_s > 0:
        return (result.deadline_s - result.mean_s) / result.std_s - z_q
    return 1.0 if result.monte_carlo >= 1.0 else -1.0


def _next_deadline(lo: float, hi: float, margin_lo: float, margin_hi: float) -> float:
    """Where the margin's secant through (lo, margin_lo ≥ 0) and (hi, margin_hi < 0)
    crosses 0, kept within the middle 80 % of the bracket so that it always shrinks."""
    weight = 0.5
    if margin_lo > margin_hi and math.isfinite(margin_lo - margin_hi):
        weight = min(0.9, max(0.1, margin_lo / (margin_lo - margin_hi)))
    return lo + weight * (hi - lo)


def _interrupted(status: Any) -> bool:
    return status == "interrupted"


def _modes_of(pp: PlanProblem, schedule: Schedule) -> dict[str, int]:
    """The solver assignment behind a schedule of ``pp``: per task, the mode whose
    members' cells are the schedule's (κ, ω)."""
    placed = {e.name: (e.impl, e.op_point) for e in schedule.elements}
    modes: dict[str, int] = {}
    for name, task in pp.tasks.items():
        want = tuple(placed[m] for m in task.members)
        for k, cells in enumerate(task.choices):
            if tuple((c.impl, c.op_point) for c in cells) == want:
                modes[name] = k
                break
        else:
            raise PlanError(f"the schedule's cells for {name!r} are not among its modes")
    return modes


def _confident_schedule(
    pp: PlanProblem, sol: Any, mean: Schedule, deadline: float, tightened: float, bounded: bool
) -> Schedule:
    """The schedule of ``sol`` with the mean-deadline plan's baseline, savings recounted
    for its energy, and (``bounded``) the mean-deadline problem's lower bound.

    Why that bound holds for q ≥ 50 %: the makespan is at least the sum S over the plan's
    critical path, and truncated normal durations make S stochastically larger than the
    normal sum of mean H, so P(makespan ≤ D) ≥ ½ implies H ≤ D: the plan is one of those
    the mean-deadline problem ranges over."""
    from solvers.solution import relative_gap

    schedule = schedule_from_solution(pp, sol)
    base = dict(mean.baseline or {})
    if isinstance(base.get("savings"), Mapping):
        base["savings"] = {**base["savings"], "at_deadline_energy_j": float(sol.energy)}
    lower = mean.lower_bound if bounded else None
    meta = {k: v for k, v in mean.meta.items() if k != "static"}
    solver = dict(schedule.solver)
    note = f"solved for the tightened mean deadline {tightened:.6g} s" + (
        "; lower bound: the deadline's on mean times" if lower is not None else ""
    )
    solver["message"] = "; ".join(m for m in (str(solver.get("message") or ""), note) if m)
    return replace(
        schedule,
        deadline=deadline,
        lower_bound=lower,
        gap=None if lower is None else relative_gap(float(sol.energy), lower),
        baseline=base or None,
        solver=solver,
        meta={**meta, **{k: v for k, v in schedule.meta.items() if k == "created"}},
    )


def _fastest_or_raise(
    pp: PlanProblem,
    static: bool,
    tried: list[_Candidate],
    assess: Callable[[Mapping[str, int]], tuple[OnTime, bool]],
    deadline: float,
    confidence: float,
) -> _Candidate:
    """The all-fastest plan when it reaches q (the cheapest plan at the fastest makespan
    did not: its slack elements may add spread); else raise
    :class:`ConfidenceUnreachableError` naming the best probability found."""
    from solvers import evaluate

    checks = [c.check for c in tried]
    # One setting per GPU: the per-element fastest cells may not share one.
    if not static:
        modes = fastest_modes(pp)
        result, ok = assess(modes)
        if ok:
            return _Candidate(tried[0].at_s, evaluate(pp.problem, modes), result, True)
        checks.append(result)
    best = max(checks, key=lambda r: r.monte_carlo)
    need = best.quantile_s.get(confidence, math.nan)
    raise ConfidenceUnreachableError(
        f"no plan meets the deadline {deadline:.6g} s with probability ≥ {confidence:.4g}: "
        f"the fastest plans reach {best.monte_carlo:.4g} (Monte Carlo, ±{best.stderr:.2g}; "
        f"analytic {best.analytic:.4g}), their makespan {best.mean_s:.6g} s ± "
        f"{best.std_s:.3g} s; ask for a deadline of at least {need:.6g} s or a lower "
        "confidence"
    )
