"""`eopt demo` end to end on the simulated GPU: files, a schedule that keeps its deadline
and saves energy, a report and trace that parse, a dry run, the runtime controller."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math

import pytest

from eopt.cli import main
from eopt.model.library import read_library
from eopt.model.planfile import read_plan
from eopt.model.schedule import read_schedule
from eopt.model.units import format_energy
from eopt.plan.solve import savings
from eopt.report import energy_breakdown


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Runs `eopt demo` once; returns its directory and what it printed."""
    out = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(["demo", "--out", str(out)])
    return out, " ".join(printed.getvalue().split())


@pytest.fixture(scope="module")
def demo(run):
    return run[0]


def test_demo_writes_every_file(demo):
    for name in (
        "signatures.jsonl",
        "plan.yaml",
        "schedule.json",
        "frontier.csv",
        "report.html",
        "trace.json",
    ):
        assert (demo / name).stat().st_size > 0, name
    sigs = read_library(demo / "signatures.jsonl")
    names = {s.name for s in sigs}
    assert {"stage0.forward", "stage3.backward", "allreduce"} <= names
    assert len({s.op_point.sm_clock_mhz for s in sigs}) >= 5  # a real clock sweep
    assert all(s.meta for s in sigs)  # measured, with their statistics


def test_schedule_keeps_its_deadline_and_its_precedence(demo):
    schedule = read_schedule(demo / "schedule.json")
    plan = read_plan(demo / "plan.yaml")
    by_name = {e.name: e for e in schedule.elements}
    assert set(by_name) == {e.name for e in plan.elements}
    for element in plan.elements:  # every dependency ends before its successor starts
        for before in element.after:
            assert by_name[before].end <= by_name[element.name].start + 1e-9
    for device in schedule.devices:  # one element at a time per GPU
        on = schedule.elements_on(device.name)
        assert all(a.end <= b.start + 1e-9 for a, b in itertools.pairwise(on))
    makespan = max(e.end for e in schedule.elements)
    assert makespan == pytest.approx(schedule.makespan)
    assert schedule.deadline is not None and makespan <= schedule.deadline * (1 + 1e-9)
    # The deadline is the fastest makespan + 5 %: the baseline runs at the fastest one.
    assert schedule.deadline == pytest.approx(1.05 * schedule.baseline["makespan"], rel=1e-6)


def test_schedule_energy_adds_up_and_saves_against_all_fastest(demo):
    schedule = read_schedule(demo / "schedule.json")
    idle = sum(
        d.idle_power_w * (schedule.makespan - sum(e.duration for e in schedule.elements_on(d.name)))
        for d in schedule.devices
    )
    assert schedule.energy == pytest.approx(sum(e.energy for e in schedule.elements) + idle)
    assert energy_breakdown(schedule).total_j == pytest.approx(schedule.energy)
    baseline = schedule.baseline["energy"]
    assert schedule.energy < baseline  # slack turned into savings
    assert schedule.lower_bound is not None and schedule.lower_bound <= schedule.energy + 1e-6
    assert 0 <= schedule.gap < 0.01


def test_report_trace_and_frontier_parse(demo):
    page = (demo / "report.html").read_text()
    assert page.count("<svg") >= 4 and "<script" not in page
    trace = json.loads((demo / "trace.json").read_text())
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(read_schedule(demo / "schedule.json").elements)
    rows = (demo / "frontier.csv").read_text().splitlines()
    assert rows[0].startswith("makespan_s,energy_j") and len(rows) > 3
    energies = [float(r.split(",")[1]) for r in rows[1:]]
    assert all(math.isfinite(e) for e in energies)


def test_demo_prints_the_headline_the_files_and_the_dry_run(run):
    out_dir, out = run
    schedule = read_schedule(out_dir / "schedule.json")
    gains = savings(schedule)
    assert gains is not None
    # First the headline: what is free, then what the 5 % buys, both against all-fastest.
    assert out.startswith(
        f"Saves {gains.at_fastest * 100:.1f} % at no slowdown, "
        f"{gains.for_time * 100:.1f} % more for +5.0 % time against every element"
    )
    assert gains.at_fastest > 0.05 and gains.for_time > 0  # both parts are real
    saved = schedule.baseline["energy"] - schedule.energy
    assert gains.at_deadline == pytest.approx(saved / schedule.baseline["energy"])
    assert f"saves {format_energy(saved)}" in out and "time added" in out
    assert "optimality gap" in out
    assert "0 of 4 GPUs would change: the schedule switches settings per element" in out
    for name in ("report.html", "trace.json", "schedule.json"):
        assert name in out
    assert "nvmlDeviceSetGpuLockedClocks(gpu0," in out
    # The controller switched each GPU at every change of setting in start order.
    changes = 0
    for device in schedule.devices:
        clocks = [e.op_point.device_key for e in schedule.elements_on(device.name)]
        changes += sum(1 for i, c in enumerate(clocks) if i == 0 or c != clocks[i - 1])
    assert f"Runtime controller one iteration on simulated GPUs: {changes} switches" in out
    assert "GPUs restored" in out


def test_demo_replaces_its_own_files_and_leaves_others_alone(tmp_path):
    """`eopt demo` twice in one folder works (README), with no --force: the demo owns
    the files it writes there."""
    out = tmp_path / "demo"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    (out / "schedule.json").write_text("stale\n")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(["demo", "--out", str(out), "--stages", "2", "--microbatches", "2", "-q"])
    assert printed.getvalue() == ""  # --quiet
    assert (out / "notes.txt").read_text() == "mine\n"
    assert read_schedule(out / "schedule.json").baseline is not None  # replaced


def test_an_interrupted_solve_stops_the_demo_with_the_plan_written(tmp_path, monkeypatch):
    import dataclasses

    import eopt.plan.solve as solve_module
    from eopt.demo import run_demo

    real = solve_module.solve_plan

    def interrupted(*args, **kwargs):
        schedule = real(*args, **kwargs)
        return dataclasses.replace(schedule, solver={**schedule.solver, "status": "interrupted"})

    monkeypatch.setattr(solve_module, "solve_plan", interrupted)
    out = tmp_path / "demo"
    with pytest.raises(KeyboardInterrupt):
        run_demo(out)
    assert read_schedule(out / "schedule.json").solver["status"] == "interrupted"
    assert not (out / "report.html").exists()  # nothing spent on the interrupted plan
