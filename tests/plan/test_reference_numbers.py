"""Plans priced and solved against numbers computed outside eopt.

``tests/data/lowtime_bench/s4_m8_u1ms/summary.json`` holds the true energy of the
4-stage × 8-microbatch 1F1B iteration at every uniform clock, recomputed from the
measured profile with Perseus's accounting Σ E_i + P_block·(S·T − Σ t_i), and the
README quotes exact MILP optima for deadlines relative to the all-max-clock makespan.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eopt.model.library import Library
from eopt.model.planfile import Plan
from eopt.plan.perseus import read_perseus_profile
from eopt.plan.pipeline import pipeline_plan
from eopt.plan.problem import build_problem
from eopt.plan.solve import baseline, solve_plan
from solvers import evaluate

Case = tuple[Plan, Library, dict[str, Any]]


@pytest.fixture(scope="module")
def lowtime_case(data_file: Callable[[str], Path]) -> Case:
    bench = data_file("lowtime_bench/s4_m8_u1ms")
    summary = json.loads((bench / "summary.json").read_text())
    lib = Library(read_perseus_profile(bench / "profile.csv", summary["p2p_power_w"]))
    plan = pipeline_plan(summary["stages"], summary["microbatches"], summary["p2p_power_w"])
    return plan, lib, summary


def test_uniform_clock_plans_match_reference_accounting(lowtime_case: Case) -> None:
    plan, lib, summary = lowtime_case
    pp = build_problem(plan, lib, prune=False)
    for clock, ref in summary["uniform"].items():
        modes = {
            name: next(
                k for k, sig in enumerate(cells) if sig.op_point.sm_clock_mhz == float(clock)
            )
            for name, cells in pp.cells.items()
        }
        sol = evaluate(pp.problem, modes)
        assert sol.makespan == pytest.approx(ref["makespan_s"], rel=1e-12)
        assert sol.energy == pytest.approx(ref["total_energy_j"], rel=1e-10)


def test_baseline_is_all_max_clock(lowtime_case: Case) -> None:
    plan, lib, summary = lowtime_case
    base = baseline(build_problem(plan, lib))
    assert base.makespan == pytest.approx(summary["allmax"]["makespan_s"], rel=1e-12)
    assert base.energy == pytest.approx(summary["allmax"]["total_energy_j"], rel=1e-10)


@pytest.mark.parametrize(("factor", "optimum_j"), [(1.00, 2033.7), (1.30, 1887.9)])
def test_solutions_near_the_exact_optimum(
    lowtime_case: Case, factor: float, optimum_j: float
) -> None:
    """README: exact MILP optima 2033.7 J (1.00×) and 1887.9 J (1.30×), both 'optimal'."""
    plan, lib, summary = lowtime_case
    deadline = factor * summary["allmax"]["makespan_s"]
    schedule = solve_plan(plan, deadline=deadline, method="relax", library=lib)
    assert schedule.makespan <= deadline
    assert optimum_j - 0.05 <= schedule.energy <= 1.005 * optimum_j
    assert schedule.lower_bound is not None and schedule.lower_bound <= optimum_j + 0.05
