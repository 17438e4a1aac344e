"""benchmarks/gpu_readonly_probe.py: its whole logic runs against the simulated H200."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eopt.devices import nvml as eopt_nvml
from eopt.model.operating_point import OperatingPoint
from eopt.sim.gpu import SimulatedGPU

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_readonly_probe.py"

# What a GPU box may lack (and the probe must not need): importing them fails here.
_BLOCKED = ("pulp", "highspy", "torch", "cupy")
_RUN = (
    "import runpy, sys\n"
    f"for name in {_BLOCKED!r}: sys.modules[name] = None\n"
    "sys.argv = [sys.argv[1], '--sim']\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def _load_probe():
    spec = importlib.util.spec_from_file_location("gpu_readonly_probe_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sim_probe_runs_end_to_end_and_writes_out_probe_json(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, str(SCRIPT)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {tmp_path / 'probe.json'}" in proc.stdout
    result = json.loads((tmp_path / "probe.json").read_text())
    assert result["schema"] == "eopt.gpu-probe/1" and result["mode"] == "sim"

    dev = result["device"]
    truth = SimulatedGPU("H200-SXM-141GB")
    assert dev["model"] == truth.model
    assert dev["sm_clocks"] == {
        "count": len(truth.supported_sm_clocks_mhz()),
        "min_mhz": min(truth.supported_sm_clocks_mhz()),
        "max_mhz": max(truth.supported_sm_clocks_mhz()),
    }
    assert dev["power_limit_range_w"] == list(truth.power_limit_range_w())
    assert dev["current_power_limit_w"] == truth.default_power_limit_w()
    assert sorted(dev["power_fields"]) == ["average", "instant"]
    assert dev["energy_counter"] is True

    # Nothing was changed, and the guard was in place to notice.
    assert result["guard"]["calls"] == []
    assert result["guard"]["guarded"] >= 2 and result["guard"]["self_test_refused"] is True

    periods = {(r["state"], r["field"]): r for r in result["update_periods"]}
    assert set(periods) == {
        (s, f) for s in ("idle", "load") for f in ("average", "instant", "energy_counter")
    }
    for state in ("idle", "load"):
        for field in ("average", "instant"):
            found = periods[(state, field)]["period_s"]
            assert found == pytest.approx(truth.power_update_period_s, rel=0.02)
        # The counter (mJ steps) moves at every 1 ms poll even idle: only a bound.
        assert periods[(state, "energy_counter")]["at_poll_limit"] is True

    # The samplers were told the measured periods.
    for field in ("average", "instant"):
        assert result["sampler_periods_s"][field] == periods[("load", field)]["period_s"]

    windows = result["windows"]
    assert len(windows) == 3
    for row in windows:
        assert row["duration_s"] == pytest.approx(5.0, rel=0.05)
        assert row["mean_power_w"] > 3 * dev["power_fields"]["instant"]  # loaded, not idle
        for field in ("average", "instant"):
            sampled = row["sampled"][field]
            assert abs(sampled["rel_diff"]) < 0.01 and sampled["covered"]

    summary = {(r["target_s"], r["field"]): r for r in result["short_regions"]["summary"]}
    assert {t for t, _ in summary} == {0.01, 0.1, 1.0}
    assert all(r["n"] == 5 for r in summary.values())
    # 1 s regions are resolved; a 10 ms region between two 100 ms refreshes of the
    # instant field is not, and the meter's error estimate says so.
    assert summary[(1.0, "instant")]["max_abs_rel_err"] < 0.02
    assert summary[(0.01, "instant")]["median_abs_rel_err"] > 0.3
    assert summary[(0.01, "instant")]["covered_by_estimate"] == 5
    rows = result["short_regions"]["rows"]
    assert all(r["sampled"]["instant"]["short"] for r in rows if r["target_s"] < 1.0)


def test_samplers_use_a_resolved_estimate_else_the_assumed_period():
    probe = _load_probe()
    gpu = SimulatedGPU()
    found = [
        {"state": "idle", "field": "a", "period_s": 0.5, "at_poll_limit": False},
        {"state": "load", "field": "a", "period_s": 0.02, "at_poll_limit": False},
        {"state": "load", "field": "b", "period_s": 0.001, "at_poll_limit": True},
        {"state": "load", "field": "c", "period_s": None, "at_poll_limit": False},
    ]
    assumed = gpu.power_update_period_s
    got = probe.sampler_periods(gpu, ["a", "b", "c", "d"], found)
    assert got == {"a": 0.02, "b": assumed, "c": assumed, "d": assumed}


def test_a_setting_change_during_the_probe_fails_it(monkeypatch):
    probe = _load_probe()
    original = probe.device_facts

    def facts_then_change(gpu, pynvml):
        out = original(gpu, pynvml)
        gpu.set_operating_point(OperatingPoint(sm_clock_mhz=1200.0))
        return out

    monkeypatch.setattr(probe, "device_facts", facts_then_change)
    with pytest.raises(probe.SetterCalledError, match=r"sim0\.set_operating_point"):
        probe.run_probe(sim=True, index=0)


def test_nvml_guard_covers_every_setter_eopt_uses_and_no_reader():
    import pynvml

    probe = _load_probe()
    guard = probe.SetterGuard()
    reader = pynvml.nvmlDeviceGetPowerUsage
    setter = pynvml.nvmlDeviceSetPowerManagementLimit
    probe.guard_nvml(guard)
    try:
        for name in (
            "nvmlDeviceSetGpuLockedClocks",
            "nvmlDeviceSetMemoryLockedClocks",
            "nvmlDeviceSetPowerManagementLimit",
            "nvmlDeviceResetGpuLockedClocks",
            "nvmlDeviceResetMemoryLockedClocks",
            "nvmlDeviceSetPersistenceMode",
            "nvmlDeviceClearEccErrorCounts",
        ):
            assert f"pynvml.{name}" in guard.guarded
        # Every NVML reader eopt's device and the probe call stays callable.
        sources = (SCRIPT.parents[1] / "eopt" / "devices" / "nvml.py").read_text()
        sources += SCRIPT.read_text()
        used = set(re.findall(r"pynvml\.(nvml\w+)", sources))
        readers = {n for n in used if re.match(r"nvml(Device|System)?(Get|Init)", n)}
        assert len(readers) >= 10
        assert not {f"pynvml.{n}" for n in readers} & set(guard.guarded)
        assert pynvml.nvmlDeviceGetPowerUsage is reader  # readers untouched
        with pytest.raises(probe.SetterCalledError):
            pynvml.nvmlDeviceSetPowerManagementLimit(None, 100_000)  # never reaches NVML
        assert guard.calls == ["pynvml.nvmlDeviceSetPowerManagementLimit"]
    finally:
        guard.restore()
    assert pynvml.nvmlDeviceSetPowerManagementLimit is setter


def _fake_pynvml_module():
    """The stateful NVML fake of the device tests (one A100 that logs every call)."""
    path = SCRIPT.parents[1] / "tests" / "devices" / "conftest.py"
    spec = importlib.util.spec_from_file_location("devices_fake_nvml_for_probe", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.FakePynvml([module.FakeGpu()])


class _SleepLoad:
    """Stands in for the matmul loop on the wall clock: the 'GPU' is busy until sync."""

    library, dtype = "sleep", "none"

    def __init__(self) -> None:
        self.op_time_s = {"small": 0.001, "big": 0.01}
        self.queued_s = 0.0

    def calibrate(self) -> None:
        pass

    def enqueue(self, duration_s: float) -> int:
        self.queued_s += duration_s
        return 1

    def sync(self) -> None:
        time.sleep(self.queued_s)
        self.queued_s = 0.0

    def describe(self) -> dict[str, object]:
        return {"library": self.library}


def test_nvml_path_reads_only_and_guards_the_module_eopt_calls(monkeypatch):
    """The real-GPU path, on the NVML fake and the wall clock (shortened): every step runs,
    the guard sits on the very module eopt's device calls, and no setter is reached."""
    probe = _load_probe()
    fake = _fake_pynvml_module()
    monkeypatch.setitem(sys.modules, "pynvml", fake)  # what the probe guards
    monkeypatch.setattr(eopt_nvml, "pynvml", fake)  # what eopt's device calls
    monkeypatch.setattr(probe, "open_load", lambda index: _SleepLoad())
    for name, value in {
        "PERIOD_DURATION_S": 0.05,
        "COUNTER_PERIOD_DURATION_S": 0.05,
        "WINDOW_S": 0.05,
        "WINDOW_REPEATS": 1,
        "SHORT_REGIONS_S": (0.02,),
        "SHORT_REPEATS": 1,
        "GAP_S": 0.02,
    }.items():
        monkeypatch.setattr(probe, name, value)
    result = probe.run_probe(sim=False, index=0)
    assert result["mode"] == "nvml"
    assert fake.setter_calls() == []
    assert result["guard"]["calls"] == [] and result["guard"]["self_test_refused"]
    for setter in fake.SETTERS:
        assert getattr(fake, setter).__name__ == "refuse"  # guarded on the fake itself
    dev = result["device"]
    gpu = fake.gpus[0]
    assert dev["model"] == gpu.name and dev["uuid"] == gpu.uuid
    assert dev["sm_clocks"]["count"] == len(gpu.sm_clocks)
    assert dev["power_limit_range_w"] == [gpu.limit_min_mw / 1000, gpu.limit_max_mw / 1000]
    # nvmlDeviceGetPowerUsage is a point reading on the A100 (GA100), and labelled so.
    assert sorted(dev["power_fields"]) == ["average_1s", "instant", "usage_instant"]
    assert "error" in dev["driver"]  # the fake has no driver query: recorded, not fatal
    # What NVML says about the GPU's state comes back too (read-only).
    assert dev["persistence_mode"] is True and dev["mig_enabled"] is False
    assert dev["enforced_power_limit_w"] == gpu.limit_mw / 1000
    assert dev["power_source"] == "instant" and dev["energy_counter_scope"] == "gpu"
    assert dev["preexisting_clock_settings"] == []
    # The fake's readings never change: no period estimate, so samplers keep 100 ms.
    assert set(result["sampler_periods_s"].values()) == {0.1}
    assert len(result["windows"]) == 1 and len(result["short_regions"]["rows"]) == 1


def test_a_failing_step_is_recorded_and_the_rest_still_comes_back(monkeypatch, tmp_path, capsys):
    probe = _load_probe()

    def boom(*args, **kwargs):
        raise RuntimeError("no counter here")

    monkeypatch.setattr(probe, "measure_windows", boom)
    result = probe.run_probe(sim=True, index=0)
    assert result["windows"]["error"] == "RuntimeError: no counter here"
    assert result["short_regions"]["error"] == "RuntimeError: no counter here"
    assert len(result["update_periods"]) == 6  # measured before the failing step
    probe.print_summary(result)
    assert "windows: RuntimeError: no counter here" in capsys.readouterr().out

    def no_gpu(*args, **kwargs):
        raise OSError("NVML is not there")

    monkeypatch.setattr(probe, "open_gpu", no_gpu)
    out = tmp_path / "p.json"
    with pytest.raises(OSError, match="NVML is not there"):
        probe.main(["--out", str(out)])
    partial = json.loads(out.read_text())  # what was known is still written
    assert partial["fatal"] == "OSError: NVML is not there"
    assert partial["schema"] == "eopt.gpu-probe/1" and partial["mode"] == "nvml"


def test_the_probe_runs_on_python_3_10_without_datetime_utc(monkeypatch):
    """The package declares Python 3.10; ``datetime.UTC`` arrived in 3.11 (the probe used it)."""
    import datetime

    probe = _load_probe()
    monkeypatch.delattr(datetime, "UTC")  # what 3.10's datetime module lacks
    monkeypatch.setattr(probe, "update_periods", lambda gpu, load, fields: [])
    monkeypatch.setattr(probe, "measure_windows", lambda *args: [])
    result = probe.run_probe(sim=True, index=0)
    assert result["started_utc"].endswith("+00:00")
    assert result["counter_period_s"] is None  # nothing measured: the assumption stays
