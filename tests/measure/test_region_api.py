"""Regions: nesting, decorator, attribution against truth, the child-process protocol."""

from __future__ import annotations

import json
import sys
import textwrap
import threading
import time
import warnings

import pytest

from eopt.measure import regions
from eopt.measure.command import MeasureError, measure_command
from eopt.measure.meter import Meter
from eopt.measure.regions import (
    RegionError,
    RegionRecorder,
    attribute_regions,
    read_region_windows,
)


def test_nested_regions_and_decorator_on_a_fake_gpu(fake_gpu):
    gpu = fake_gpu(idle_w=50.0)
    rec = RegionRecorder(clock=gpu.clock)

    @rec.region("bwd")
    def backward() -> None:
        gpu.busy(0.4, 300.0)

    with Meter(gpu) as meter:
        t0 = meter.mark()
        for _ in range(3):
            with rec.region("step"):
                with rec.region("fwd"):
                    gpu.busy(0.2, 200.0)
                backward()
            gpu.clock.sleep(0.1)  # outside every region, at idle power
        t1 = meter.mark()
        report = attribute_regions(rec.windows, meter, t0, t1)
    by_key = {r.key: r for r in report.regions}
    assert set(by_key) == {"step", "step/fwd", "step/bwd"}
    assert by_key["step/fwd"].calls == 3 and by_key["step/fwd"].depth == 1
    assert by_key["step/fwd"].energy_j == pytest.approx(3 * 0.2 * 200.0)
    assert by_key["step/bwd"].energy_j == pytest.approx(3 * 0.4 * 300.0)
    assert by_key["step"].energy_j == pytest.approx(3 * (40.0 + 120.0))
    assert by_key["step"].time_s == pytest.approx(1.8)
    assert by_key["step/bwd"].mean_power_w == pytest.approx(300.0)
    assert report.outside_energy_j == pytest.approx(3 * 0.1 * 50.0)
    assert report.outside_time_s == pytest.approx(0.3)
    assert report.total_energy_j == pytest.approx(480.0 + 15.0)
    assert by_key["step"].share == pytest.approx(480.0 / 495.0)


def test_regions_must_nest_and_names_are_checked():
    rec = RegionRecorder()
    rec.enter("a")
    with pytest.raises(RegionError, match="must nest"):
        rec.exit("b")
    with pytest.raises(RegionError, match="without '/'"):
        rec.region("a/b")


def test_region_that_raises_is_still_recorded():
    rec = RegionRecorder()
    with pytest.raises(ZeroDivisionError), rec.region("boom"):
        _ = 1 / 0
    assert [w.name for w in rec.windows] == ["boom"]


def test_module_level_region_uses_the_active_recorder_per_thread():
    rec = RegionRecorder()

    @regions.region("work")
    def work() -> None:
        with regions.region("inner"):
            time.sleep(0.001)

    with regions.use_recorder(rec):
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(w.key for w in rec.windows) == ["work"] * 4 + ["work/inner"] * 4


def test_regions_file_round_trip_and_bad_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = RegionRecorder(sink=path)
    with rec.region("a"), rec.region("b"):
        pass
    rec.close()
    got = read_region_windows(path)
    assert [w.key for w in got] == ["a/b", "a"]
    assert got[0].start_s >= got[1].start_s
    path.write_text(path.read_text() + '{"name": "c", "start_s": 2.0}\n')
    with pytest.raises(RegionError, match=r"r\.jsonl:3: field 'end_s' is missing"):
        read_region_windows(path)
    path.write_text('{"name": "c", "start_s": 1.0, "end_s": 2.0}\n{"name": "d", "sta')
    assert [w.name for w in read_region_windows(path)] == ["c"]  # cut-off last line
    assert read_region_windows(tmp_path / "missing.jsonl") == []


def test_regions_file_says_which_thread_recorded_each_region(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = RegionRecorder(sink=path)
    both_open = threading.Barrier(2)

    def work() -> None:
        with rec.region("w"):
            both_open.wait()  # two threads, two stacks: neither region is in the other's

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    got = read_region_windows(path)
    assert [w.path for w in got] == [("w",), ("w",)]
    assert len({w.tid for w in got}) == 2 and all(w.tid > 0 for w in got)
    path.write_text('{"name": "c", "start_s": 1.0, "end_s": 2.0, "tid": "main"}\n')
    with pytest.raises(RegionError, match=r"r\.jsonl:1: pid and tid must be integers"):
        read_region_windows(path)


def test_measure_command_attributes_child_regions(tmp_path, wall_gpu):
    script = tmp_path / "child.py"
    script.write_text(
        textwrap.dedent(
            """
            import time
            from eopt.measure import regions

            time.sleep(0.05)
            for _ in range(2):
                with regions.region("train"):
                    with regions.region("fwd"):
                        time.sleep(0.05)
                    time.sleep(0.02)
            """
        )
    )
    gpu = wall_gpu(150.0)
    result = measure_command([sys.executable, str(script)], gpu)
    assert result.returncode == 0
    by_key = {r.key: r for r in result.report.regions}
    assert by_key["train"].calls == 2 and by_key["train/fwd"].calls == 2
    # Constant power: each region's energy is power × its own duration (up to the clock
    # reads that bracket each counter reading).
    for r in by_key.values():
        assert r.energy_j == pytest.approx(150.0 * r.time_s, rel=1e-3)
    assert 0.1 <= by_key["train/fwd"].time_s < 2.0  # two sleeps of 50 ms (a busy host)
    rep = result.report
    assert rep.outside_energy_j == pytest.approx(150.0 * rep.outside_time_s, rel=1e-3)
    assert rep.outside_time_s >= 0.05  # the child's start-up and first sleep
    assert rep.total_energy_j == pytest.approx(
        by_key["train"].energy_j + rep.outside_energy_j, rel=1e-3
    )
    data = result.to_dict()
    assert data["schema"] == "eopt.regions-report/1"
    json.dumps(data)


def test_measure_command_reports_the_exit_status_and_bad_commands(wall_gpu):
    gpu = wall_gpu()
    assert measure_command([sys.executable, "-c", "raise SystemExit(3)"], gpu).returncode == 3
    with pytest.raises(MeasureError, match="command not found"):
        measure_command(["/nonexistent/eopt-test-cmd"], gpu)


def test_measure_command_refuses_a_simulated_gpu(fake_gpu):
    with pytest.raises(MeasureError, match="simulated"):
        measure_command(["true"], fake_gpu())


def test_measure_regions_in_process_on_the_simulated_gpu():
    from eopt.measure.command import measure_regions
    from eopt.sim.gpu import SimulatedGPU

    gpu = SimulatedGPU(seed=2, energy_counter=False)
    with measure_regions(gpu) as session:
        gpu.idle(0.2)
        e0 = gpu.true_energy_j()
        with regions.region("gemm"):
            for _ in range(500):
                gpu.launch("gemm", "cublas", {})
        e1 = gpu.true_energy_j()
        gpu.idle(0.2)
    report = session.report
    (gemm,) = report.regions
    assert gemm.calls == 1 and gemm.time_s > 1.0
    assert gemm.energy_j == pytest.approx(e1 - e0, rel=0.01)
    assert report.outside_energy_j == pytest.approx(report.total_energy_j - gemm.energy_j)
    assert report.meter["method"] == "sampler"


@pytest.fixture
def no_default_recorder(monkeypatch):
    """A process that has not entered a module-level region yet, outside `eopt measure`."""
    monkeypatch.delenv(regions.REGIONS_FILE_ENV, raising=False)
    monkeypatch.setattr(regions, "_default", None)
    monkeypatch.setattr(regions, "_unmeasured", None)
    monkeypatch.setattr(regions, "_warned_unmeasured", False)


def test_region_outside_eopt_measure_warns_once(no_default_recorder):
    with pytest.warns(regions.UnmeasuredRegionWarning) as record, regions.region("fwd"):
        pass
    (warning,) = record
    message = str(warning.message)
    assert "'fwd' is not measured" in message
    assert "eopt measure -- " in message and 'eopt.measure.window("fwd")' in message
    assert warning.filename == __file__  # points at the user's `with` line
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would raise here
        with regions.region("fwd"), regions.region("bwd"):
            pass
    # Still recorded in memory, as before.
    assert [w.key for w in regions.default_recorder().windows] == ["fwd", "fwd/bwd", "fwd"]


def test_region_under_a_recorder_or_a_regions_file_does_not_warn(
    no_default_recorder, monkeypatch, tmp_path
):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with regions.use_recorder(RegionRecorder()), regions.region("a"):
            pass
        path = tmp_path / "regions.jsonl"
        monkeypatch.setenv(regions.REGIONS_FILE_ENV, str(path))
        with regions.region("b"):  # what a child of `eopt measure` does
            pass
        regions.default_recorder().close()
    assert [w.name for w in read_region_windows(path)] == ["b"]
