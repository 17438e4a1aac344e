"""`eopt solve` reads its methods, their help and their defaults from the solver's table,
and the one budget of a solve is the solvers' Budget."""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import replace
from pathlib import Path

import click
import pytest

import solvers
from eopt.cli import cli
from eopt.cli.solve import stop_rule
from eopt.model.planfile import read_plan
from eopt.model.units import parse_fraction
from eopt.plan.budget import TimeBudget
from eopt.plan.solve import SIDE_STALL_MIN_S, solve_plan
from solvers.budget import Budget
from solvers.problem import Mode, Problem, Task
from solvers.solve import (
    DEFAULT_GAP,
    DEFAULT_METHOD,
    METHODS,
    method_named,
)
from solvers.stopping import RUN_TO_LIMIT, STALL_GAIN, STOP_GAP, StopRule

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "examples" / "plans" / "dag_two_gpus.yaml"


def solve_options() -> dict[str, click.Option]:
    command = cli.get_command(click.Context(cli), "solve")
    assert command is not None
    return {p.name: p for p in command.params if isinstance(p, click.Option)}


def test_method_choices_help_and_default_are_the_table_s() -> None:
    option = solve_options()["method"]
    assert list(option.type.choices) == list(METHODS)
    assert option.default == DEFAULT_METHOD
    for name, method in METHODS.items():
        assert f"{name}: {method.summary}" in option.help


def test_solver_defaults_are_the_cli_defaults() -> None:
    options = solve_options()
    assert parse_fraction(options["gap"].default) == pytest.approx(DEFAULT_GAP)
    # No wall limit unless asked for: the solver then stops by work alone, as it does
    # when called without one.
    command = cli.get_command(click.Context(cli), "solve")
    assert command is not None
    assert command.make_context("solve", ["plan.yaml"]).params["time_limit"] is None
    assert inspect.signature(solvers.solve).parameters["time_limit"].default is None


@pytest.mark.parametrize(("option", "default"), [("stop_gap", STOP_GAP), ("stall", STALL_GAIN)])
def test_stop_help_names_the_methods_by_how_they_stop(option: str, default: float) -> None:
    text = solve_options()[option].help
    found = re.search(r"\[default: ([\d.]+%) for ([a-z ]+?)(?:; ([a-z ]+?) runs? to |\])", text)
    assert found, text
    assert parse_fraction(found.group(1)) == pytest.approx(default)
    early = set(found.group(2).split(" and "))
    assert early == {n for n, m in METHODS.items() if not m.runs_to_limit}
    if option == "stop_gap":
        assert set(found.group(3).split(" and ")) == {
            n for n, m in METHODS.items() if m.runs_to_limit
        }


def test_each_method_stops_by_its_own_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `solve` uses without a rule is the table's: milp runs to its limit."""
    # `solvers.solve` is the function; the module behind it is this one.
    solve_module = importlib.import_module("solvers.solve")
    rules: list[StopRule] = []
    real_watch = solve_module.Watch

    def spy(*args: object, **kwargs: object) -> object:
        rules.append(kwargs["rule"])  # type: ignore[arg-type]
        return real_watch(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(solve_module, "Watch", spy)
    problem = Problem((Task("a", "gpu0", (Mode(1.0, 100.0), Mode(2.0, 60.0))),), (), {"gpu0": 10.0})
    for name in METHODS:
        solvers.solve(problem, deadline=2.0, method=name, time_limit=5)
    expected = [RUN_TO_LIMIT if m.runs_to_limit else StopRule() for m in METHODS.values()]
    assert rules == expected
    assert method_named("milp").runs_to_limit  # the exact method, as its summary says
    assert [method_named(n).stop for n in METHODS] == expected


@pytest.mark.parametrize("name", list(METHODS))
def test_the_cli_s_stop_options_change_only_what_they_name(name: str) -> None:
    base = method_named(name).stop
    assert stop_rule(None, None, name) is None
    assert stop_rule(0.0, None, name) == replace(base, gap=0.0)
    assert stop_rule(None, 0.002, name) == replace(base, stall_gain=0.002)


def test_an_unknown_method_is_refused_naming_the_choices() -> None:
    with pytest.raises(solvers.ProblemError) as info:
        method_named("simplex")
    assert all(name in str(info.value) for name in METHODS)


@pytest.mark.parametrize("name", list(METHODS))
def test_side_solves_keep_the_method_s_rule_with_a_shorter_window(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules: list[StopRule | None] = []
    real_solve = solvers.solve

    def spy(problem: object, **kwargs: object) -> object:
        rules.append(kwargs["stop"])  # type: ignore[arg-type]
        return real_solve(problem, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(solvers, "solve", spy)
    solve_plan(read_plan(PLAN), slowdown=0.05, method=name, time_limit=10)
    side, asked = rules
    assert asked is None  # the plan asked for: the solver's own default
    assert side == replace(method_named(name).stop, stall_min_s=SIDE_STALL_MIN_S)
    if method_named(name).runs_to_limit:
        assert side.gap == 0 and side.stall_gain == 0  # never stops early


def test_the_solve_budget_is_the_solvers_budget() -> None:
    now = [50.0]
    budget = TimeBudget(3.0, clock=lambda: now[0])
    assert isinstance(budget.budget, Budget)
    assert budget.budget.limit_s == pytest.approx(3.0) == budget.limit_s
    now[0] += 1.25
    assert budget.spent() == pytest.approx(budget.budget.elapsed()) == pytest.approx(1.25)
    assert budget.left() == pytest.approx(budget.budget.remaining()) == pytest.approx(1.75)
    budget.check("reading the plan")
    now[0] += 0.5
    budget.check("building the problem")
    assert budget.stages == [
        ("reading the plan", pytest.approx(1.25)),
        ("building the problem", pytest.approx(0.5)),
    ]
