"""The side solve at the fastest makespan gets `SIDE_SHARE` of the work below
`solvers.lp.NETWORK_TASKS` tasks and `SIDE_SHARE_LARGE` from there."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import solvers
import solvers.lp
from eopt.model.library import Library
from eopt.plan.perseus import read_perseus_profile
from eopt.plan.pipeline import pipeline_plan
from eopt.plan.solve import SIDE_SHARE, SIDE_SHARE_LARGE, solve_plan
from solvers.solve import DEFAULT_WORK_S

IDLE_W = 100.0


@pytest.mark.parametrize("large", [False, True])
def test_side_solve_work_share(
    tmp_path: Path,
    synthetic_profile: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    large: bool,
) -> None:
    path = synthetic_profile(tmp_path / "p.csv", 2, 0, IDLE_W)
    lib = Library(read_perseus_profile(path, IDLE_W))
    plan = pipeline_plan(2, 2, IDLE_W)
    if large:  # every problem counts as large (and its LP is solved through its network)
        monkeypatch.setattr(solvers.lp, "NETWORK_TASKS", 1)
    calls: list[dict[str, Any]] = []
    real = solvers.solve

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(solvers, "solve", spy)
    schedule = solve_plan(plan, slowdown=0.08, library=lib)
    assert len(calls) == 2  # the side solve, then the plan asked for
    share = SIDE_SHARE_LARGE if large else SIDE_SHARE
    assert calls[0]["work_limit"] == pytest.approx(share * DEFAULT_WORK_S)
    assert calls[1]["work_limit"] == pytest.approx(DEFAULT_WORK_S)
    assert calls[0]["deadline"] < calls[1]["deadline"]
    assert schedule.energy > 0
