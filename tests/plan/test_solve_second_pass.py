"""`eopt solve` on plans: any time scale, transition costs, advice, stopping, Ctrl-C.

* A pipeline of elements of tens of µs solves to the same relative plan as the same
  pipeline in seconds (the exact MILP, at every scale).
* With a transition cost, `--slowdown 0%` asks for the fastest makespan, which is never
  slower than the schedule's own baseline (every element at its fastest cell), and the
  baseline's makespan is a feasible deadline.
* `--static`'s advice on an infeasible deadline, followed, works.
* The solver says why it stopped; Ctrl-C keeps the best plan, writes it, and says so.

Truth: brute force over every cell assignment where the plan is small, otherwise the
same plan at the seconds scale. Nothing here is timed.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from eopt.cli import cli, main
from eopt.model.library import Library
from eopt.model.operating_point import OperatingPoint
from eopt.model.planfile import Plan, PlanDevice, PlanElement
from eopt.model.schedule import read_schedule
from eopt.model.signature import Signature
from eopt.plan.perseus import read_perseus_profile
from eopt.plan.pipeline import pipeline_plan
from eopt.plan.solve import solve_plan

IDLE_W = 80.0


def _profile(path: Path, scale: float, seed: int = 4) -> Path:
    """A 3-stage profile, every time × `scale` (energies with it: the powers stay)."""
    rng = np.random.default_rng(seed)
    rows = ["stage,instruction,frequency,time,energy"]
    for s in range(3):
        for kind, t0, d0 in (("forward", 0.05, 20.0), ("backward", 0.1, 45.0)):
            t0 *= rng.uniform(0.8, 1.2)
            for f in (1400, 1200, 1000, 800):
                t = t0 * (1400.0 / f) ** 0.9
                d = d0 * (0.55 + 0.45 * (f / 1400.0) ** 2) * rng.uniform(0.97, 1.0)
                rows.append(f"{s},{kind},{f},{t * scale!r},{(IDLE_W * t + d) * scale!r}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("scale", [1e-4, 1e-3, 3600.0])
def test_a_plan_of_microseconds_solves_like_one_of_seconds(tmp_path: Path, scale: float) -> None:
    plan = pipeline_plan(3, 4, IDLE_W)
    energies = {}
    for s in (1.0, scale):
        lib = Library(read_perseus_profile(_profile(tmp_path / f"p{s}.csv", s), IDLE_W))
        schedule = solve_plan(plan, slowdown=0.05, method="milp", gap=1e-9, library=lib)
        assert schedule.makespan <= schedule.deadline  # type: ignore[operator]
        assert schedule.solver["status"] == "optimal"
        energies[s] = schedule.energy / s
    assert energies[scale] == pytest.approx(energies[1.0], rel=1e-7)


def _transition_plan() -> tuple[Plan, Library]:
    """Two elements on one GPU; each is fastest at the clock the other is slow at, and a
    clock change takes 0.2 µs: the fastest plan changes clock (2.0002 ms), one clock
    for both takes 2.0005 ms."""
    ms = 1e-3

    def cell(name: str, clock: float, time_s: float) -> Signature:
        return Signature(
            name, static_power=70.0, time=time_s, dynamic_energy=0.1,
            op_point=OperatingPoint(sm_clock_mhz=clock),
        )  # fmt: skip

    lib = Library(
        [
            cell("ta", 1410.0, 1.0 * ms),
            cell("ta", 1000.0, 1.0005 * ms),
            cell("tb", 1410.0, 1.0005 * ms),
            cell("tb", 1000.0, 1.0 * ms),
        ]
    )
    device = PlanDevice("g0", 50.0, transition_time_s=0.0002 * ms, transition_energy_j=0.001)
    plan = Plan(
        devices=(device,),
        elements=(PlanElement("a", "g0", "ta"), PlanElement("b", "g0", "tb", ("a",))),
    )
    return plan, lib


@pytest.mark.parametrize("method", ["relax", "milp", "auto"])
def test_no_slowdown_agrees_with_the_baseline(method: str) -> None:
    plan, lib = _transition_plan()
    schedule = solve_plan(plan, slowdown=0.0, method=method, library=lib)
    base = schedule.baseline or {}
    assert base["makespan"] == pytest.approx(2.0002e-3, rel=1e-12)  # it pays the change
    assert schedule.deadline == pytest.approx(base["makespan"], rel=1e-12)
    assert schedule.makespan <= base["makespan"] * (1 + 1e-12)
    # The baseline's makespan, given as a deadline, is feasible.
    again = solve_plan(plan, deadline=base["makespan"], method=method, library=lib)
    assert again.makespan <= base["makespan"] * (1 + 1e-12)


def test_static_advice_followed_works(tmp_path: Path) -> None:
    # One clock for both elements of stage 0 is slowest at 1400 MHz (0.05 + 0.12 s)
    # and 0.1600003 s at 1000 MHz; 6 digits to nearest would say 0.16 s.
    rows = ["stage,instruction,frequency,time,energy"]
    for kind, times in (("forward", (0.05, 0.06)), ("backward", (0.12, 0.1000003))):
        for f, t in zip((1400, 1000), times, strict=True):
            rows.append(f"0,{kind},{f},{t},{IDLE_W * t + 10}")
    path = tmp_path / "p.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    lib = Library(read_perseus_profile(path, IDLE_W))
    plan = pipeline_plan(1, 1, IDLE_W)
    with pytest.raises(ValueError, match=r"--static") as err:
        solve_plan(plan, slowdown=0.0, method="milp", library=lib, static=True)
    advised = float(re.findall(r"at least ([0-9.e+-]+) s", str(err.value))[0])
    assert advised >= 0.1600003
    schedule = solve_plan(plan, deadline=advised, method="milp", library=lib, static=True)
    assert schedule.makespan == pytest.approx(0.1600003, rel=1e-12)


@pytest.fixture()
def small_plan(tmp_path: Path) -> Path:
    """A 3-stage, 4-microbatch pipeline plan with its library, on disk."""
    out = tmp_path / "plan.yaml"
    args = ["plan", "pipeline", "--profile", str(_profile(tmp_path / "p.csv", 1.0))]
    args += ["--stages", "3", "--microbatches", "4", "--idle-power", f"{IDLE_W}W", "-o", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return out


def test_solve_says_why_it_stopped(small_plan: Path) -> None:
    out = CliRunner().invoke(cli, ["solve", str(small_plan), "--slowdown", "5%", "--json"])
    assert out.exit_code == 0, out.output
    solver = json.loads(out.output)["solver"]
    assert solver["stop_reason"] in ("optimal", "gap", "stalled")
    assert solver["message"].startswith("stopped: ")
    text = CliRunner().invoke(cli, ["solve", str(small_plan), "--slowdown", "5%"]).output
    assert re.search(r"^stopped +\S", text, re.MULTILINE), text


relax_module = importlib.import_module("solvers.relax")


def test_ctrl_c_writes_the_best_plan_and_says_so(
    small_plan: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    def pressed(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(relax_module, "relax_once", pressed)
    out = tmp_path / "schedule.json"
    with pytest.raises(SystemExit) as info:
        main(["solve", str(small_plan), "--slowdown", "5%", "-o", str(out)])
    assert info.value.code == 130
    assert "Interrupted" in capsys.readouterr().err
    schedule = read_schedule(out)
    assert schedule.solver["status"] == "interrupted"
    assert schedule.solver["stop_reason"] == "interrupted"
    assert schedule.makespan <= schedule.deadline  # type: ignore[operator]


def test_stop_options_keep_the_method_defaults_they_do_not_set() -> None:
    from eopt.cli.solve import stop_rule
    from solvers import StopRule

    assert stop_rule(None, None, "auto") is None  # the solver's own default
    assert stop_rule(0.0, None, "auto") == StopRule(gap=0.0)
    assert stop_rule(None, 0.002, "milp") == StopRule(gap=0.0, stall_gain=0.002)
