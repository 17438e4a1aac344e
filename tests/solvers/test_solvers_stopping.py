"""Stopping before the time limit (certified gap, stall), saying why, and Ctrl-C.

The stop rule is checked on a `Watch` driven by a fake clock; the solves check the
reasons they report, never how long they took. Ctrl-C is a KeyboardInterrupt raised by
a patched stage: the solve keeps its best plan and says it was interrupted.
"""

from __future__ import annotations

import importlib
import itertools
from types import SimpleNamespace
from typing import Any

import highspy
import pytest

from solvers import Mode, Problem, fastest_makespan, solve
from solvers.stopping import REASONS, RUN_TO_LIMIT, StopRule, Watch


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_gap_rule_stops_once_a_plan_is_finished() -> None:
    clock = FakeClock()
    watch = Watch(StopRule(gap=1e-3), clock=clock)
    watch.offer_bound(999.5)
    watch.offer(1000.0, [0])
    assert not watch.should_stop()  # the first plan is still being built
    watch.arm()
    assert watch.should_stop()
    assert watch.reason == "gap" and "0.050% ≤ 0.100%" in watch.detail


def test_the_gap_rule_waits_for_the_gap() -> None:
    watch = Watch(StopRule(gap=1e-3, stall_gain=0.0), clock=FakeClock())
    watch.offer_bound(900.0)
    watch.offer(1000.0, [0])
    watch.arm()
    assert not watch.should_stop()  # 10 % from the bound
    watch.offer(900.5, [1])
    assert watch.should_stop() and watch.reason == "gap"
    assert watch.modes == [1] and watch.modes_energy == 900.5


def test_a_stall_is_no_gain_above_the_threshold_over_the_window() -> None:
    clock = FakeClock()
    rule = StopRule(gap=0.0, stall_gain=1e-4, stall_min_s=2.0, stall_share=0.5)
    watch = Watch(rule, clock=clock)
    clock.now = 10.0
    watch.offer(1000.0, [0])
    watch.arm()  # improving starts at 10 s
    clock.now = 14.0
    watch.offer(999.0)  # 0.1 % gained at 14 s
    clock.now = 19.0
    assert not watch.should_stop()  # window 9.5 s reaches back before the arming
    clock.now = 24.0
    assert not watch.should_stop()  # window [12, 24] holds the 0.1 % gain
    clock.now = 28.5
    watch.offer(998.95)  # 0.005 %: below the threshold
    clock.now = 30.0
    assert watch.should_stop()  # window [15, 30]: only 0.005 %
    assert watch.reason is None  # a stall does not end the solve by itself …
    assert watch.stall_detail == "no gain above 0.010% in the last 15 s"  # … but says so


def test_arming_twice_keeps_the_first_start() -> None:
    clock = FakeClock()
    watch = Watch(StopRule(gap=0.0, stall_min_s=2.0), clock=clock)
    watch.offer(10.0, [0])
    watch.arm()
    clock.now = 3.0
    watch.arm()  # a second search starts: the window still spans the first
    assert watch.should_stop()


def test_ctrl_c_is_latched() -> None:
    watch = Watch(RUN_TO_LIMIT, clock=FakeClock())
    watch.interrupted = True
    assert watch.should_stop() and watch.reason == "interrupted"


def _problem(bf: SimpleNamespace) -> tuple[Problem, float]:
    """A 3-stage, 4-microbatch 1F1B pipeline with 5 clocks, and a deadline 10 % slack."""
    freqs = [1410 - 90 * k for k in range(5)]

    def modes(stage: int, kind: str) -> tuple[Mode, ...]:
        t_ref = (0.04 if kind == "f" else 0.08) * (1.25 if stage == 2 else 1.0)
        alpha = 0.85 if kind == "f" else 0.9
        out = []
        for f in freqs:
            t = t_ref * (alpha * 1410 / f + 1 - alpha)
            power = 105 + (245 if kind == "f" else 270) * (f / 1410) ** 2.4
            out.append(Mode(t, power * t, setting=f))
        return tuple(out)

    problem = bf.one_f_one_b(3, 4, modes, idle_w=75.0)
    return problem, 1.1 * fastest_makespan(problem)


@pytest.mark.parametrize("method", ["relax", "auto", "milp"])
def test_every_solve_says_why_it_stopped(bf, method: str) -> None:
    problem, deadline = _problem(bf)
    sol = solve(problem, deadline, method=method, time_limit=30)
    assert sol.stop_reason in REASONS
    assert sol.message.startswith("stopped: ")
    if method == "milp":  # exact: runs to its gap
        assert sol.stop_reason == "optimal" and sol.status == "optimal"
    else:  # the default stop rule ends relax and auto well before 30 s
        assert sol.stop_reason in ("optimal", "gap", "stalled")
        assert sol.status in ("optimal", "feasible")
    if sol.stop_reason == "gap":
        assert sol.gap <= StopRule().gap


def test_run_to_limit_searches_past_the_stop_gap(bf) -> None:
    problem, deadline = _problem(bf)
    quick = solve(problem, deadline, method="auto", time_limit=30)
    full = solve(problem, deadline, method="auto", time_limit=30, stop=RUN_TO_LIMIT)
    assert full.energy <= quick.energy * (1 + 1e-12)
    assert full.stop_reason in ("optimal", "time_limit", "stalled", "done")


perturb_module = importlib.import_module("solvers.perturb")
improve_module = importlib.import_module("solvers.improve")


def test_ctrl_c_in_the_relax_search_keeps_the_best_plan(
    bf, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem, deadline = _problem(bf)
    calls = itertools.count()
    real = improve_module.improve_with_times

    def interrupted_on_the_fifth_step(*args: Any, **kwargs: Any) -> Any:
        if next(calls) == 5:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(perturb_module, "improve_with_times", interrupted_on_the_fifth_step)
    sol = solve(problem, deadline, method="relax", stop=RUN_TO_LIMIT)
    assert sol.status == "interrupted" and sol.stop_reason == "interrupted"
    assert "interrupted" in sol.message
    assert sol.makespan <= deadline * (1 + 1e-9)
    monkeypatch.undo()
    # The plan it kept is the relax search's, before the iterated improvement.
    fastest = solve(problem, fastest_makespan(problem), method="relax")
    assert sol.energy < fastest.energy + 1e-9 * fastest.energy


def test_ctrl_c_in_the_milp_keeps_its_incumbent(bf, monkeypatch: pytest.MonkeyPatch) -> None:
    problem, deadline = _problem(bf)
    real = highspy.Highs.wait
    presses = itertools.count()

    def pressed_once(self: highspy.Highs, timeout: float = -1.0) -> Any:
        if next(presses) == 0:
            raise KeyboardInterrupt
        return real(self, timeout)

    monkeypatch.setattr(highspy.Highs, "wait", pressed_once)
    sol = solve(problem, deadline, method="milp", gap=1e-9, time_limit=30)
    assert sol.status == "interrupted" and sol.stop_reason == "interrupted"
    assert sol.makespan <= deadline * (1 + 1e-9)
    assert next(presses) > 1  # it went on waiting for HiGHS to hand back its plan
