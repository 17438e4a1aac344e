"""One attribution engine: `eopt measure`'s regions and `eopt attribute` on the trace that
run wrote give the same energy per region, threads and processes included."""

from __future__ import annotations

import json
import sys
import textwrap
import threading
import time

import pytest
from click.testing import CliRunner

from eopt.cli import attribute as attribute_cli
from eopt.cli import measure as measure_cli
from eopt.devices.base import PowerReading, WallClock
from eopt.model.operating_point import OperatingPoint
from eopt.model.trace_io import read_trace
from eopt.sim.gpu import SimulatedGPU


class WallSim:
    """eopt's simulated GPU served on the wall clock (``eopt measure`` measures real
    commands only): before every read the simulator's virtual time catches up with the
    wall time since it was made, running GEMMs for the first 0.15 s of every 0.25 s and
    idling otherwise. Readings come from the simulator's own sensor (refreshed every
    100 ms, with its noise) and its energy counter."""

    index = 0
    name = "wallsim0"

    def __init__(self, counter: bool) -> None:
        self.sim = SimulatedGPU(seed=7, energy_counter=counter, control=False)
        self.model = self.sim.model
        self.clock = WallClock()
        self.power_update_period_s = self.sim.power_update_period_s
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()  # the meter's timer thread reads too

    def _catch_up(self) -> float:
        now = time.perf_counter()
        target = now - self._t0
        while (v := self.sim.clock.now()) < target:
            phase = v % 0.25
            if phase < 0.15:
                self.sim.launch("gemm")
            else:
                self.sim.idle(max(min(0.25 - phase, target - v), 1e-6))
        return now

    def power(self) -> PowerReading:
        with self._lock:
            now = self._catch_up()
            reading = self.sim.power()
        return PowerReading(now, reading.power_w, reading.field)

    def energy_counter_j(self) -> float | None:
        with self._lock:
            self._catch_up()
            return self.sim.energy_counter_j()

    def synchronize(self) -> None:
        pass  # the simulator's launches finish before they return

    def current_operating_point(self) -> OperatingPoint:
        return self.sim.current_operating_point()

    def power_limit_range_w(self) -> tuple[float, float]:
        return self.sim.power_limit_range_w()


# Two threads whose regions overlap without nesting (thread b's lie inside thread a's in
# time: the barriers make sure), a child process with its own regions, all inside the
# main thread's region, and idle time before and after.
CHILD = textwrap.dedent(
    """
    import subprocess, sys, threading, time
    from eopt.measure import regions

    inside = threading.Barrier(2)
    done = threading.Barrier(2)

    def thread_a():
        with regions.region("a"):
            inside.wait()
            with regions.region("a_inner"):
                time.sleep(0.15)
            done.wait()
            time.sleep(0.05)

    def thread_b():
        inside.wait()
        with regions.region("b"):
            with regions.region("b_inner"):
                time.sleep(0.1)
            time.sleep(0.02)
        done.wait()

    PROC = (
        "import time\\n"
        "from eopt.measure import regions\\n"
        "with regions.region('proc'):\\n"
        "    with regions.region('proc_inner'):\\n"
        "        time.sleep(0.12)\\n"
    )
    time.sleep(0.05)
    with regions.region("main"):
        child = subprocess.Popen([sys.executable, "-c", PROC])
        threads = [threading.Thread(target=f) for f in (thread_a, thread_b)]
        for t in threads:
            t.start()
        with regions.region("main_inner"):
            time.sleep(0.08)
        for t in threads:
            t.join()
        child.wait()
    time.sleep(0.05)
    """
)


@pytest.mark.parametrize("counter", [False, True], ids=["sampler", "counter"])
def test_measure_and_attribute_charge_each_region_the_same(tmp_path, monkeypatch, counter):
    monkeypatch.setattr(
        measure_cli, "open_measure_device", lambda backend, gpu: WallSim(counter=counter)
    )
    folder, out = tmp_path / "run", tmp_path / "run.json"
    measured = CliRunner().invoke(
        measure_cli.command,
        ["--trace-dir", str(folder), "-o", str(out), "--", sys.executable, "-c", CHILD],
    )
    assert measured.exit_code == 0, measured.output
    run = json.loads(out.read_text())
    assert run["meter"]["method"] == ("counter" if counter else "sampler")
    attributed = CliRunner().invoke(attribute_cli.command, [str(folder), "--json", "--calls"])
    assert attributed.exit_code == 0, attributed.output
    att = json.loads(attributed.stdout)

    # The same region calls on both sides, with the nesting the threads had: b lies inside
    # a in time but is its sibling (another thread), and each inner region is its outer
    # region's child.
    events = {e["name"]: e for e in run["events"]}
    assert set(events) == {
        "main",
        "main_inner",
        "a",
        "a_inner",
        "b",
        "b_inner",
        "proc",
        "proc_inner",
    }
    a, b = events["a"], events["b"]
    assert a["start_s"] < b["start_s"] and b["end_s"] < a["end_s"]
    for name in ("a", "b", "proc", "main"):
        assert events[name]["parent_id"] == 0
        assert events[f"{name}_inner"]["parent_id"] == events[name]["id"]
    calls = {c["id"]: c for c in att["calls"]}
    assert {c["name"]: c["parent_id"] for c in calls.values()} == {
        e["name"]: e["parent_id"] for e in events.values()
    }

    # Per region and per call, measure's energies are attribute's.
    by_key = {r["name"]: r for r in run["regions"]}
    for r in att["regions"]:
        (key,) = [k for k in by_key if k.rsplit("/", 1)[-1] == r["name"]]
        assert by_key[key]["energy_j"] == pytest.approx(r["inclusive_energy_j"], rel=1e-12)
    for e in run["events"]:
        assert e["energy_j"] == pytest.approx(calls[e["id"]]["inclusive_energy_j"], rel=1e-12)
    assert run["total_energy_j"] == pytest.approx(att["total_energy_j"], rel=1e-12)
    assert run["outside_energy_j"] == pytest.approx(att["outside_energy_j"], rel=1e-12)

    # The sharing rule, seen from measure's numbers alone: the outermost calls overlap,
    # yet with what fell outside them they add up to the total, once.
    tops = sum(e["energy_j"] for e in run["events"] if e["parent_id"] == 0)
    assert tops + run["outside_energy_j"] == pytest.approx(run["total_energy_j"], rel=1e-12)
    overlap = min(a["end_s"], events["main"]["end_s"]) - max(
        a["start_s"], events["main"]["start_s"]
    )
    assert overlap > 0.1  # so charging each the full overlap would have counted ≥ 10 J twice
    assert read_trace(folder).metadata["recorded_by"] == "eopt measure"
