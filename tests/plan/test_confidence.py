"""Deadlines met with a probability: the makespan distribution of a plan and the search.

Independent truths: exact normal sums along a chain; Clark's formulas for two
independent paths, exact for two operands; a shared prefix, exact as the prefix plus the
maximum of the branches; Monte Carlo with many samples for everything else; brute force
over every assignment of a tiny plan; and the solver's own makespan for the mean
durations (transition times included).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.special import ndtr

from eopt.calculus.operators import max_moments
from eopt.cli import cli, main
from eopt.model.library import Library, write_library
from eopt.model.operating_point import OperatingPoint
from eopt.model.planfile import Plan, PlanDevice, PlanElement, PlanError, write_plan
from eopt.model.schedule import read_schedule
from eopt.model.signature import Signature
from eopt.plan.confidence import (
    ConfidenceUnreachableError,
    TimedDag,
    confidence_result,
    makespan_moments,
    on_time,
    sample_makespans,
    solve_with_confidence,
    timed_dag,
)
from eopt.plan.pipeline import pipeline_plan
from eopt.plan.problem import build_problem

IDLE_W = 60.0
CLOCKS = (1400, 1250, 1100, 950, 800)


def _dag(means: list[float], variances: list[float], edges: list[tuple[int, int]]) -> TimedDag:
    """A TimedDag over elements 0..n-1 (already in topological order)."""
    n = len(means)
    preds = tuple(tuple((a, 0.0) for a, b in edges if b == v) for v in range(n))
    sinks = tuple(v for v in range(n) if not any(a == v for a, _ in edges))
    return TimedDag(
        tuple(f"e{i}" for i in range(n)),
        np.array(means, dtype=float),
        np.array(variances, dtype=float),
        preds,
        sinks,
    )


def _cells(name: str, t0: float, d0: float, cv: float, static_w: float) -> list[Signature]:
    """One cell per clock: slower runs longer, with less dynamic energy and more spread;
    a dynamic draw d0/t0 of several times the idle power makes slack worth using."""
    out = []
    for f in CLOCKS:
        t = t0 * (1400 / f) ** 0.9
        d = d0 * (0.5 + 0.5 * (f / 1400) ** 2)
        out.append(
            Signature(name, static_w, t, d, var_time=(cv * t) ** 2, op_point=OperatingPoint(f))
        )
    return out


def _pipeline_library(stages: int, cv: float, seed: int) -> Library:
    rng = np.random.default_rng(seed)
    sigs: list[Signature] = []
    for s in range(stages):
        for kind, t0, d0 in (("forward", 0.05, 20.0), ("backward", 0.1, 45.0)):
            scale = rng.uniform(0.8, 1.2)
            sigs += _cells(f"stage{s}.{kind}", t0 * scale, d0 * scale, cv, IDLE_W)
    return Library(sigs)


def _random_plan(seed: int) -> tuple[Plan, Library]:
    """Two or three devices, six elements, random precedence, a type per element."""
    rng = np.random.default_rng(seed)
    devices = [f"gpu{d}" for d in range(int(rng.integers(2, 4)))]
    elements, sigs = [], []
    for i in range(6):
        after = tuple(f"x{j}" for j in range(i) if rng.random() < 0.35)
        elements.append(PlanElement(f"x{i}", devices[i % len(devices)], f"t{i}", after))
        t0 = rng.uniform(0.5, 2.0)
        sigs += _cells(f"t{i}", t0, t0 * rng.uniform(300, 500), 0.1, IDLE_W)
    plan = Plan(tuple(PlanDevice(d, IDLE_W) for d in devices), tuple(elements))
    return plan, Library(sigs)


# The makespan distribution ---------------------------------------------------------------
def test_chain_is_an_exact_normal_sum() -> None:
    means, variances = [1.0, 2.0, 0.5, 3.0], [0.01, 0.04, 0.0025, 0.09]
    dag = _dag(means, variances, [(0, 1), (1, 2), (2, 3)])
    mean, var = makespan_moments(dag)
    assert mean == pytest.approx(sum(means), rel=1e-12)
    assert var == pytest.approx(sum(variances), rel=1e-12)
    runs = sample_makespans(dag, 200_000, seed=1)
    se = math.sqrt(var / runs.size)
    assert abs(runs.mean() - mean) < 4 * se
    assert runs.var() == pytest.approx(var, rel=0.02)
    deadline = 6.8
    result = on_time(dag, deadline, samples=200_000, seed=2)
    exact = float(ndtr((deadline - sum(means)) / math.sqrt(sum(variances))))
    assert result.analytic == pytest.approx(exact, abs=1e-12)
    assert abs(result.monte_carlo - exact) < 4 * result.stderr


def test_two_independent_paths_match_clark_and_monte_carlo() -> None:
    # 0 → 1 and 2 → 3, one sink each: the makespan is the max of two independent sums.
    dag = _dag([1.0, 1.0, 0.8, 1.1], [0.02, 0.03, 0.05, 0.01], [(0, 1), (2, 3)])
    mean, var = makespan_moments(dag)
    clark_mean, clark_var = max_moments([2.0, 1.9], [0.05, 0.06])
    assert (mean, var) == pytest.approx((clark_mean, clark_var), rel=1e-9)
    runs = sample_makespans(dag, 400_000, seed=3)
    assert abs(runs.mean() - mean) < 4 * math.sqrt(var / runs.size)
    assert runs.var() == pytest.approx(var, rel=0.02)


def test_shared_prefix_is_carried_as_covariance() -> None:
    # 0 → {1, 2} → 3: the paths share element 0, so max = T0 + max(T1, T2) + T3.
    means, variances = [1.0, 2.0, 1.9, 0.5], [0.05, 0.02, 0.03, 0.01]
    dag = _dag(means, variances, [(0, 1), (0, 2), (1, 3), (2, 3)])
    branch_mean, branch_var = max_moments([2.0, 1.9], [0.02, 0.03])
    mean, var = makespan_moments(dag)
    assert mean == pytest.approx(1.0 + branch_mean + 0.5, rel=1e-9)
    assert var == pytest.approx(0.05 + branch_var + 0.01, rel=1e-9)
    # Ignoring the shared prefix (independent paths) would overstate the mean.
    independent_mean, _ = max_moments([3.0, 2.9], [0.07, 0.08])
    assert independent_mean + 0.5 > mean + 0.03
    runs = sample_makespans(dag, 200_000, seed=4)
    assert abs(runs.mean() - mean) < 4 * math.sqrt(var / runs.size)
    assert runs.var() == pytest.approx(var, rel=0.02)


def test_pipeline_analytic_probability_near_monte_carlo() -> None:
    plan = pipeline_plan(4, 6, IDLE_W)
    pp = build_problem(plan, _pipeline_library(4, cv=0.08, seed=5))
    rng = np.random.default_rng(6)
    modes = {name: int(rng.integers(len(t.choices))) for name, t in pp.tasks.items()}
    dag = timed_dag(pp, modes)
    runs = sample_makespans(dag, 100_000, seed=7)
    for q in (0.5, 0.9, 0.99):
        deadline = float(np.quantile(runs, q))
        result = on_time(dag, deadline, samples=20_000, seed=8)
        # Clark's pairwise normal approximation of a 48-element pipeline: within 3 points.
        assert result.analytic == pytest.approx(q, abs=0.03)
        assert result.monte_carlo == pytest.approx(q, abs=5 * math.sqrt(q * (1 - q) / 20_000))


def test_mean_makespan_is_the_solvers_with_device_order_and_transitions() -> None:
    from solvers import evaluate

    plan = pipeline_plan(3, 4, IDLE_W)
    devices = tuple(
        PlanDevice(d.name, d.idle_power_w, transition_time_s=0.013, transition_energy_j=1.0)
        for d in plan.devices
    )
    plan = Plan(devices, plan.elements)
    pp = build_problem(plan, _pipeline_library(3, cv=0.05, seed=9), prune=False)
    rng = np.random.default_rng(10)
    problem = pp.problem
    for _ in range(5):
        modes = {t.name: int(rng.integers(len(t.modes))) for t in problem.tasks}  # type: ignore[attr-defined]
        sol = evaluate(problem, modes)
        assert sol.transitions > 0
        dag = timed_dag(pp, modes)
        assert dag.mean_makespan() == pytest.approx(sol.makespan, rel=1e-12)
        # Without spread every sampled run takes exactly that long.
        still = TimedDag(dag.names, dag.mean_s, 0 * dag.var_s2, dag.preds, dag.sinks)
        assert np.allclose(sample_makespans(still, 50, seed=0), sol.makespan, rtol=1e-12)
        assert makespan_moments(still) == pytest.approx((sol.makespan, 0.0), abs=1e-12)


def test_durations_are_truncated_at_zero() -> None:
    dag = _dag([0.1], [0.04], [])  # σ = 2 × mean: a plain normal would be negative 31 %
    runs = sample_makespans(dag, 100_000, seed=11)
    assert runs.min() > 0
    # Mean of N(0.1, 0.2²) truncated to > 0: μ + σ·φ(α)/(1 − Φ(α)), α = −μ/σ.
    alpha = -0.5
    pdf = math.exp(-(alpha**2) / 2) / math.sqrt(2 * math.pi)
    exact = 0.1 + 0.2 * pdf / (1 - float(ndtr(alpha)))
    assert runs.mean() == pytest.approx(exact, rel=0.01)


# Choosing modes --------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_confident_plan_meets_its_probability(seed: int) -> None:
    plan, lib = _random_plan(seed)
    q = 0.95
    schedule, result = solve_with_confidence(
        plan, q, slowdown=0.15, library=lib, method="milp", time_limit=20, samples=4000
    )
    assert result.solves > 0 and result.mean_plan.monte_carlo < q  # the search ran
    assert schedule.deadline == pytest.approx(result.deadline_s)
    assert schedule.makespan <= result.tightened_deadline_s * (1 + 1e-9)
    # An independent, larger check of the chosen plan: on time at least q of the time.
    pp = build_problem(plan, lib)
    placed = {e.name: (e.impl, e.op_point) for e in schedule.elements}
    modes = {
        name: next(
            k
            for k, cells in enumerate(t.choices)
            if tuple((c.impl, c.op_point) for c in cells) == tuple(placed[m] for m in t.members)
        )
        for name, t in pp.tasks.items()
    }
    check = on_time(timed_dag(pp, modes), result.deadline_s, samples=100_000, seed=99)
    assert check.monte_carlo >= q - 3 * check.stderr
    # Exact solves: meeting D more often never costs less than meeting it on mean times,
    # whose bound the schedule carries (valid for any plan on time half the time).
    assert result.energy_j >= result.mean_plan_energy_j * (1 - 1e-3)
    assert schedule.lower_bound is not None
    assert schedule.lower_bound <= result.mean_plan_energy_j * (1 + 1e-9)
    assert schedule.gap == pytest.approx(1 - schedule.lower_bound / schedule.energy, abs=1e-9)
    assert result.premium == pytest.approx(result.energy_j / result.mean_plan_energy_j - 1)


def test_no_cheaper_than_brute_force_optimum() -> None:
    """Over every assignment of a tiny fork, the cheapest with P ≥ q (by large Monte
    Carlo) bounds what the search may claim."""
    from solvers import evaluate

    plan = Plan(
        (PlanDevice("a", IDLE_W), PlanDevice("b", IDLE_W)),
        (
            PlanElement("x0", "a", "t0"),
            PlanElement("x1", "a", "t1", ("x0",)),
            PlanElement("x2", "b", "t2", ("x0",)),
        ),
    )
    lib = Library(
        _cells("t0", 1.0, 400, 0.08, IDLE_W)
        + _cells("t1", 2.0, 800, 0.08, IDLE_W)
        + _cells("t2", 1.9, 760, 0.08, IDLE_W)
    )
    q, deadline = 0.9, 3.6
    pp = build_problem(plan, lib, prune=False)
    problem = pp.problem
    names = [t.name for t in problem.tasks]  # type: ignore[attr-defined]
    best = math.inf
    for combo in itertools.product(range(len(CLOCKS)), repeat=len(names)):
        modes = dict(zip(names, combo, strict=True))
        p = on_time(timed_dag(pp, modes), deadline, samples=100_000, seed=5).monte_carlo
        if p >= q:
            best = min(best, evaluate(problem, modes).energy)
    _, result = solve_with_confidence(
        plan, q, deadline=deadline, library=lib, method="milp", time_limit=20
    )
    assert result.mean_plan.monte_carlo < q  # the search had work to do
    # Never below the true optimum (that would be a plan claiming a probability it
    # lacks), and on this fork the search over tightened deadlines finds it.
    assert best * (1 - 1e-9) <= result.energy_j <= best * (1 + 1e-6)
    assert result.plan.monte_carlo >= q - 3 * result.plan.stderr


def test_half_confidence_is_about_the_mean_deadline_plan() -> None:
    plan = pipeline_plan(3, 3, IDLE_W)
    lib = _pipeline_library(3, cv=0.03, seed=12)
    premiums = []
    for q in (0.5, 0.95, 0.99):
        _, result = solve_with_confidence(
            plan, q, slowdown=0.1, library=lib, method="milp", gap=1e-3, samples=4000
        )
        premiums.append(result.premium)
        assert result.plan.monte_carlo >= q - 3 * result.plan.stderr
    # At 50 % only the merge of near-critical paths (E[max] > max E) costs anything.
    assert abs(premiums[0]) < 0.01
    assert premiums[0] <= premiums[1] + 1e-6 <= premiums[2] + 2e-6


def test_below_half_confidence_claims_no_lower_bound() -> None:
    plan, lib = _random_plan(0)
    schedule, result = solve_with_confidence(
        plan, 0.3, slowdown=0.15, library=lib, method="milp", time_limit=20, samples=4000
    )
    assert result.solves > 0  # the mean-deadline plan is on time less than 30 % of runs
    assert result.plan.monte_carlo >= 0.3 - 3 * result.plan.stderr
    # A plan on time 30 % of runs may have a mean makespan beyond D: no bound applies.
    assert schedule.lower_bound is None and schedule.gap is None


def test_static_confident_plan_keeps_one_setting_per_gpu() -> None:
    plan = pipeline_plan(3, 3, IDLE_W)
    lib = _pipeline_library(3, cv=0.04, seed=17)
    schedule, result = solve_with_confidence(
        plan, 0.95, slowdown=0.1, library=lib, method="milp", static=True, samples=4000
    )
    assert result.solves > 0 and result.mean_plan.monte_carlo < 0.95
    for device in plan.devices:
        assert len(schedule.device_settings()[device.name]) == 1
    assert result.plan.monte_carlo >= 0.95 - 3 * result.plan.stderr
    assert result.energy_j >= result.mean_plan_energy_j * (1 - 1e-3)


def test_plan_already_confident_keeps_the_mean_plan() -> None:
    plan = pipeline_plan(2, 3, IDLE_W)
    lib = _pipeline_library(2, cv=0.001, seed=13)  # nearly no spread
    # A deadline the mean plan meets with room: the slowest plan is far faster.
    _, result = solve_with_confidence(
        plan, 0.9, slowdown=3.0, library=lib, method="milp", time_limit=20
    )
    assert result.solves == 0 and result.premium == 0.0
    assert result.tightened_deadline_s == result.deadline_s
    assert result.plan.monte_carlo == 1.0


def test_unreachable_confidence_names_the_best_probability() -> None:
    plan = pipeline_plan(3, 3, IDLE_W)
    lib = _pipeline_library(3, cv=0.1, seed=14)
    with pytest.raises(ConfidenceUnreachableError) as info:
        # At the fastest makespan itself, P is about a half at best.
        solve_with_confidence(plan, 0.99, slowdown=0.0, library=lib, method="milp")
    message = str(info.value)
    assert "the fastest plans reach" in message and "deadline of at least" in message
    reached = float(message.split("the fastest plans reach ")[1].split()[0])
    assert reached < 0.99


def test_bad_requests_are_refused_with_the_fix() -> None:
    plan = pipeline_plan(2, 2, IDLE_W)
    lib = _pipeline_library(2, cv=0.05, seed=15)
    with pytest.raises(PlanError, match=r"probability in \(0, 1\)"):
        solve_with_confidence(plan, 1.2, slowdown=0.1, library=lib)
    with pytest.raises(PlanError, match="needs a deadline"):
        solve_with_confidence(plan, 0.95, library=lib)
    flat = Library(
        Signature(s.name, s.static_power, s.time, s.dynamic_energy, op_point=s.op_point)
        for s in lib
    )
    with pytest.raises(PlanError, match="time variance"):
        solve_with_confidence(plan, 0.95, slowdown=0.1, library=flat)


# The command line ------------------------------------------------------------------------
def _plan_file(tmp_path: Path) -> Path:
    lib_path = tmp_path / "lib.jsonl"
    write_library(lib_path, _pipeline_library(3, cv=0.05, seed=16))
    plan = pipeline_plan(3, 3, IDLE_W, libraries=[lib_path.name])
    path = tmp_path / "plan.yaml"
    write_plan(path, plan)
    return path


def test_cli_confidence_writes_the_block_and_prints_the_premium(tmp_path: Path) -> None:
    plan = _plan_file(tmp_path)
    out = tmp_path / "s.json"
    args = ["solve", str(plan), "--slowdown", "10%", "--method", "milp", "--time-limit", "10s"]
    result = CliRunner().invoke(
        cli, [*args, "--confidence", "95%", "-o", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "on time" in text and "mean-deadline plan" in text
    block = confidence_result(read_schedule(out))
    assert block is not None and block["confidence"] == 0.95
    assert block["on_time"]["monte_carlo"] >= 0.95 - 3 * block["on_time"]["monte_carlo_stderr"]
    assert block["energy_j"] == pytest.approx(read_schedule(out).energy)
    printed = CliRunner().invoke(
        cli, [*args, "--confidence", "0.9", "--json"], catch_exceptions=False
    )
    data = json.loads(printed.output)
    assert data["meta"]["deadline_confidence"]["confidence"] == 0.9
    assert data["deadline"] == pytest.approx(block["deadline_s"])


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--confidence", "100%"], "--confidence: a probability strictly between 0 and 1"),
        (["--confidence", "95%", "--frontier"], "--confidence"),
    ],
)
def test_cli_bad_confidence_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    plan = _plan_file(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["solve", str(plan), "--slowdown", "10%", *extra])
    assert info.value.code in (1, 2)
    err = " ".join(capsys.readouterr().err.split())
    assert "Traceback" not in err and expected in err
