"""What a measured run writes: the power trace and region calls, as the report reads them."""

from __future__ import annotations

import json
import statistics
import sys
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

from eopt.cli import measure as measure_cli
from eopt.measure import regions
from eopt.measure.command import measure_regions
from eopt.measure.meter import Meter
from eopt.report.html import render_report
from eopt.report.inputs import read_measurement
from eopt.report.perfetto import schedule_trace
from eopt.sim.gpu import SimulatedGPU

BIG_GEMM = {"m": 16384, "n": 16384, "k": 16384}


def _run_on_sim(method: str) -> tuple[dict, dict[str, float]]:
    """Idle 0.3 s, then region step{fwd: ~2 s of GEMMs, 0.2 s idle}, then idle 0.3 s.

    Returns the report's JSON and the truth: region times on the span's axis and energies.
    """
    gpu = SimulatedGPU(seed=3, energy_counter=method == "counter")
    with measure_regions(gpu, method=method) as session:  # type: ignore[arg-type]
        t0 = gpu.clock.now()
        e0 = gpu.true_energy_j()
        gpu.idle(0.3)
        with regions.region("step"):
            fwd_start, fwd_e0 = gpu.clock.now() - t0, gpu.true_energy_j()
            with regions.region("fwd"):
                while gpu.clock.now() - t0 < 2.3:
                    gpu.launch("gemm", "cublas", BIG_GEMM)
            fwd_end, fwd_e1 = gpu.clock.now() - t0, gpu.true_energy_j()
            gpu.idle(0.2)
        gpu.idle(0.3)
        e1 = gpu.true_energy_j()
    assert session.report is not None
    data = json.loads(json.dumps(session.report.to_dict()))  # JSON-ready, round-trips
    truth = {
        "fwd_start": fwd_start,
        "fwd_end": fwd_end,
        "fwd_energy": fwd_e1 - fwd_e0,
        "total_energy": e1 - e0,
    }
    return data, truth


@pytest.mark.parametrize("method", ["sampler", "counter"])
def test_region_report_carries_the_power_trace_and_each_region_call(method):
    data, truth = _run_on_sim(method)
    times, powers = data["samples"]["time_s"], data["samples"]["power_w"]
    assert len(times) == len(powers) > 20
    # The trace spans the run: it starts at the run's start and ends at its end.
    assert times[0] == 0.0
    assert times[-1] == pytest.approx(data["total_time_s"], abs=1e-6)
    assert times == sorted(times)
    # Both paths show the power sensor, one reading a refresh (100 ms on the simulator).
    gaps = np.diff(times[1:-1])
    assert statistics.median(gaps) == pytest.approx(SimulatedGPU.power_update_period_s, rel=0.1)
    assert data["samples"]["field"] == "instant"
    # The trace is the power: its integral is the run's true energy (up to how the 100 ms
    # sensor places the two load steps).
    integral = float(np.trapezoid(powers, times))
    assert integral == pytest.approx(truth["total_energy"], rel=0.05)
    assert max(powers) > 3 * min(powers)  # the GEMMs show up above idle

    events = data["events"]
    assert [(e["name"], e["path"], e["depth"]) for e in events] == [
        ("step", "step", 0),
        ("fwd", "step/fwd", 1),
    ]
    step, fwd = events
    assert fwd["start_s"] == pytest.approx(truth["fwd_start"], abs=1e-9)
    assert fwd["end_s"] == pytest.approx(truth["fwd_end"], abs=1e-9)
    assert step["start_s"] == pytest.approx(0.3, abs=1e-9)
    assert step["end_s"] == pytest.approx(truth["fwd_end"] + 0.2, abs=1e-9)
    assert fwd["energy_j"] == pytest.approx(truth["fwd_energy"], rel=0.02)
    by_name = {r["name"]: r for r in data["regions"]}
    for e in events:  # one call each: the call's energy is the region's
        assert e["energy_j"] == pytest.approx(by_name[e["path"]]["energy_j"])


def test_report_and_perfetto_trace_show_the_measured_run(tmp_path):
    data, truth = _run_on_sim("counter")
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    m = read_measurement(path)
    times, powers = data["samples"]["time_s"], data["samples"]["power_w"]
    # The reader rebases times on the first sample: at 0 already, so nothing moves and
    # the samples stay aligned with the region calls.
    assert m.samples == tuple(zip(times, powers, strict=True))

    trace = schedule_trace(measurement=m)["traceEvents"]
    counters = [e for e in trace if e["ph"] == "C"]
    assert [(e["ts"], e["args"]["W"]) for e in counters] == [
        (pytest.approx(t * 1e6), p) for t, p in zip(times, powers, strict=True)
    ]
    slices = [e for e in trace if e["ph"] == "X"]
    assert [s["name"] for s in slices] == ["step", "fwd"]
    fwd = slices[1]
    assert fwd["ts"] == pytest.approx(truth["fwd_start"] * 1e6)
    assert fwd["dur"] == pytest.approx((truth["fwd_end"] - truth["fwd_start"]) * 1e6)
    assert fwd["args"]["path"] == "step/fwd"
    assert fwd["args"]["energy_j"] == pytest.approx(truth["fwd_energy"], rel=0.02)

    html = render_report(measurement=m)
    assert "Power trace" in html
    chart = html[html.index("Power trace") :]
    assert "<svg" in chart


def test_eopt_measure_json_and_output_file_carry_samples_and_events(
    tmp_path, monkeypatch, wall_gpu
):
    child = textwrap.dedent(
        """
        import time
        from eopt.measure import regions

        for _ in range(2):
            with regions.region("train"):
                with regions.region("fwd"):
                    time.sleep(0.12)
            time.sleep(0.03)
        """
    )
    monkeypatch.setattr(measure_cli, "open_measure_device", lambda backend, index: wall_gpu(150.0))
    out = tmp_path / "run.json"
    result = CliRunner().invoke(
        measure_cli.command, ["--json", "-o", str(out), "--", sys.executable, "-c", child]
    )
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    written = json.loads(out.read_text())
    assert printed["events"] == written["events"]
    events = written["events"]
    assert [e["path"] for e in events] == ["train", "train/fwd"] * 2
    total = written["total_time_s"]
    for e in events:
        assert 0.0 <= e["start_s"] < e["end_s"] <= total
        # Constant 150 W: each call's energy is its length at that power.
        assert e["energy_j"] == pytest.approx(150.0 * (e["end_s"] - e["start_s"]), rel=1e-3)
    fwd = [e for e in events if e["name"] == "fwd"]
    assert all(e["end_s"] - e["start_s"] >= 0.12 for e in fwd)
    assert fwd[1]["start_s"] > fwd[0]["end_s"]  # in order, not overlapping
    samples = written["samples"]
    assert samples["time_s"][0] == 0.0
    assert samples["time_s"][-1] == pytest.approx(total, abs=1e-6)
    assert set(samples["power_w"]) == {150.0}
    assert len(samples["time_s"]) >= 3  # one reading a sensor period over ≥ 0.3 s
    assert written["meter"]["method"] == "counter"

    m = read_measurement(out)
    trace = schedule_trace(measurement=m)["traceEvents"]
    assert [e["name"] for e in trace if e["ph"] == "X"] == ["train", "fwd"] * 2
    assert sum(e["ph"] == "C" for e in trace) == len(samples["time_s"])


@pytest.mark.parametrize("method", ["sampler", "counter"])
def test_interval_mean_samples_sit_mid_interval(fake_gpu, method):
    """A reading that averages the last 100 ms describes the middle of those 100 ms: the
    trace of a 1 s load is centred on the load, not half a period late."""
    gpu = fake_gpu(idle_w=50.0, sensor="average", period=0.1)
    with Meter(gpu, method=method) as meter:
        t0 = meter.mark()
        gpu.clock.sleep(1.0)
        gpu.busy(1.0, 300.0)  # the load: [1, 2] s after t0
        gpu.clock.sleep(1.0)
        t1 = meter.mark()
        points = meter.power_samples(t0, t1, edges=True)
    assert points[0][0] == t0 and points[-1][0] == t1
    high = [t - t0 for t, p in points if p > 175.0]
    assert len(high) >= 9
    assert statistics.mean(high) == pytest.approx(1.5, abs=0.02)
    assert min(high) == pytest.approx(1.05, abs=0.02)
