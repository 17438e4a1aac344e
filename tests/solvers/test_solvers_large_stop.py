"""Large problems (the LP solved through its network) end after rounding when the plan
is within `solvers.stages.NETWORK_POLISH_GAP` of its bound; the hulls an LP needs are
computed once per problem (`solvers.hull.task_hulls`)."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import Mode, stages
from solvers.budget import Budget
from solvers.hull import lower_hull, pareto_modes
from solvers.incumbent import Incumbent
from solvers.indexed import IndexedProblem, meets
from solvers.lp import HullLP
from solvers.relax import rounding_stage
from solvers.solve import fastest_plan
from solvers.stopping import RUN_TO_LIMIT, Watch

NOTE = "after rounding: no further search"


def _solve(bf, method: str, slack: float, polish_gap: float, monkeypatch) -> Incumbent:
    monkeypatch.setattr(stages, "NETWORK_POLISH_GAP", polish_gap)
    problem, _ = bf.pipeline_problem(4, 8)
    ip = IndexedProblem(problem)
    t_fast, start = fastest_plan(ip)
    lp = HullLP(ip, method=method)
    return stages.relax_plan(
        ip,
        slack * t_fast,
        start,
        t_fast,
        Budget.of_work(20.0),
        lp=lp,
        watch=Watch(rule=RUN_TO_LIMIT),
    )


def _record_steps(monkeypatch) -> list[str]:
    """The large-problem steps `relax_stages` runs, in order, recorded as they start."""
    calls: list[str] = []

    def recorded(name: str, step):
        def run(*args, **kwargs):
            tiles = kwargs.get("tiles")
            calls.append(name if tiles is None else f"{name} {tiles.start}")
            return step(*args, **kwargs)

        monkeypatch.setattr(stages, step.__name__, run)

    recorded("tiles", stages.tiled_plans)
    recorded("nearest", stages.nearest_rounding)
    recorded("rounding", stages.rounding_stage)
    recorded("improvement", stages.improvement_stage)
    return calls


@pytest.mark.parametrize("slack", [1.0, 1.03, 1.1, 1.3])
def test_a_network_lp_plan_within_the_polish_gap_ends_the_stages(
    bf, slack: float, monkeypatch
) -> None:
    calls = _record_steps(monkeypatch)
    inc = _solve(bf, "network", slack, 1.0, monkeypatch)
    assert any("no further search" in n for n in inc.notes)
    assert meets(inc.ip.evaluate(inc.modes).makespan, inc.deadline)
    # Every plan is within 100 % of the bound: nothing runs after the first step (a tile
    # where the deadline binds, the LP rounded down at the fastest makespan).
    assert calls in ([], ["tiles 0"], ["rounding"])


def test_a_network_lp_plan_within_the_polish_gap_after_rounding_is_the_rounding_stages(
    bf, monkeypatch
) -> None:
    # At the fastest makespan the LP rounded down comes first.
    inc = _solve(bf, "network", 1.0, 1.0, monkeypatch)
    assert any(NOTE in n for n in inc.notes)
    ip = inc.ip
    t_fast, start = fastest_plan(ip)
    alone = Incumbent.start(ip, inc.deadline, start, Watch(rule=RUN_TO_LIMIT))
    lp = HullLP(ip, method="network")
    lp.budget = Budget.of_work(20.0)
    rounding_stage(lp, alone, t_fast, lp.budget.until(stages.GENERATOR_SHARE))
    assert alone.modes == inc.modes


@pytest.mark.parametrize("slack", [1.03, 1.1, 1.3])
def test_outside_the_polish_gap_the_search_goes_on(bf, slack: float, monkeypatch) -> None:
    ended = _solve(bf, "network", slack, 1.0, monkeypatch)
    full = _solve(bf, "network", slack, 0.0, monkeypatch)
    assert not any(NOTE in n for n in full.notes)
    # Tiling and iterated improvement only ever keep a cheaper plan.
    assert full.energy <= ended.energy * (1 + 1e-12)
    assert full.bound == pytest.approx(ended.bound, rel=1e-12)


def test_a_highs_lp_never_ends_after_rounding(bf, monkeypatch) -> None:
    # Below `NETWORK_TASKS` (HiGHS LPs) the stages are what they were.
    inc = _solve(bf, "highs", 1.1, 1.0, monkeypatch)
    assert not any(NOTE in n for n in inc.notes)


@pytest.mark.parametrize("seed", range(12))
def test_cached_hulls_are_the_computed_ones(bf, seed: int) -> None:
    problem = bf.random_problem(seed, max_tasks=7, max_modes=4)
    ip = IndexedProblem(problem)
    first, second = HullLP(ip), HullLP(ip)
    assert second.hull is first.hull  # computed once per problem
    for i in range(ip.n):
        pareto = pareto_modes(ip.durations[i], ip.costs[i])
        assert first.pareto[i] == pareto
        assert first.hull[i] == lower_hull(ip.durations[i], ip.costs[i], pareto)
    # A given Pareto table is used as given, not the cache.
    given = HullLP(ip, [list(p) for p in first.pareto])
    assert given.hull == first.hull and given.hull is not first.hull
    # A rescaled copy has its own.
    assert HullLP(ip.rescaled(2.0, 4.0)).hull is not first.hull


@pytest.mark.parametrize("seed", range(8))
def test_shared_mode_tables_give_each_task_its_own_pareto_modes_and_hull(bf, seed) -> None:
    from solvers.hull import task_hulls, task_pareto

    ip = IndexedProblem(bf.pipeline_problem(2 + seed % 3, 6)[0])
    pareto, hulls = task_pareto(ip), task_hulls(ip)
    for i in range(ip.n):
        assert pareto[i] == pareto_modes(ip.durations[i], ip.costs[i])
        assert hulls[i] == lower_hull(ip.durations[i], ip.costs[i], pareto[i])
    # Tasks with one mode table share one computation.
    same = [
        (i, j)
        for i in range(ip.n)
        for j in range(i)
        if np.array_equal(ip.durations[i], ip.durations[j])
        and np.array_equal(ip.costs[i], ip.costs[j])
    ]
    assert same
    assert all(pareto[i] is pareto[j] for i, j in same)


@pytest.mark.parametrize(
    ("slack", "order"),
    [
        (1.05, ["tiles 0", "nearest", "rounding", "tiles 1", "improvement"]),
        (1.0, ["rounding", "tiles 0", "nearest", "tiles 1", "improvement"]),
    ],
)
def test_a_large_problem_tries_its_first_tile_and_the_nearest_rounding_first(
    bf, monkeypatch, slack: float, order: list[str]
) -> None:
    """With slack: the first tile, the nearest rounding, the LP rounded down, the other
    tiles. At the fastest makespan the LP rounded down comes first."""

    calls = _record_steps(monkeypatch)
    monkeypatch.setattr(stages, "NETWORK_POLISH_GAP", 0.0)  # never polished: every step runs

    def modes(s: int, k: str) -> tuple[Mode, ...]:
        base = (1.0 if k == "f" else 2.0) * (1 + 0.07 * s)
        return tuple(
            Mode(base * (1 + 0.06 * j), base * 300 * (1 - 0.05 * j + 0.003 * j * j))
            for j in range(6)
        )

    problem = bf.one_f_one_b(4, 24, modes)
    ip = IndexedProblem(problem)
    t_fast, start = fastest_plan(ip)
    inc = stages.relax_plan(
        ip,
        slack * t_fast,
        start,
        t_fast,
        Budget.of_work(20.0),
        lp=HullLP(ip, method="network"),
        watch=Watch(rule=RUN_TO_LIMIT),
    )
    assert calls == order
    assert meets(ip.evaluate(inc.modes).makespan, inc.deadline)
