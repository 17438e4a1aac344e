"""In-process measurement windows (``eopt.measure.window``): the simulator's ground truth,
nesting, begin/end by name, and NVML with two GPUs behind a fake ``pynvml``."""

from __future__ import annotations

import importlib
import importlib.util
import time
from typing import Any
from unittest import mock

import pytest

import eopt.devices
import eopt.measure
from eopt.devices.base import MeasureOnlyError
from eopt.measure import windows
from eopt.measure.windows import (
    EnergyMonitor,
    WindowError,
    begin_window,
    end_window,
    monitor,
    window,
)
from eopt.model.operating_point import OperatingPoint
from eopt.sim.gpu import SimulatedGPU

# The counter of the simulated GPU (like NVML's) counts whole millijoules, so a window read
# at both edges is exact to within one mJ per edge.
COUNTER_RESOLUTION_J = 2e-3


@pytest.fixture(autouse=True)
def fresh_monitors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test opens its own devices (module-level monitors are process singletons)."""
    monkeypatch.setattr(windows, "_monitors", {})
    monkeypatch.setattr(windows, "_named_monitors", {})


class Dial:
    """An energy counter (mJ) the test turns by hand: ``next()`` reads it."""

    def __init__(self, mj: int) -> None:
        self.mj = mj

    def __iter__(self) -> Dial:
        return self

    def __next__(self) -> int:
        return self.mj


@pytest.fixture
def two_nvml_gpus(nvml_fake_module: Any) -> Any:
    """Two fake GPUs behind ``eopt.devices.nvml.pynvml``; their counters are Dials."""
    module = nvml_fake_module
    gpus = [
        module.FakeGpu(uuid="GPU-0-fake", energy=Dial(5_000_000)),
        module.FakeGpu(uuid="GPU-1-fake", energy=Dial(9_000_000), power_mw=95_000),
    ]
    fake = module.FakePynvml(gpus)
    with mock.patch("eopt.devices.nvml.pynvml", fake):
        yield fake


# The simulator -----------------------------------------------------------------------------
def test_window_of_simulated_kernels_equals_the_ground_truth() -> None:
    with window("gemms", backend="sim") as w:
        gpu = w.devices[0]
        e0, t0 = gpu.true_energy_j(), gpu.clock.now()
        for _ in range(40):
            gpu.launch("gemm", "cublas", {})
        gpu.idle(0.25)
        e1, t1 = gpu.true_energy_j(), gpu.clock.now()
    assert w.backend == "sim" and w.method == "counter"
    assert list(w.per_device) == [0]
    assert w.energy_j == pytest.approx(e1 - e0, abs=COUNTER_RESOLUTION_J)
    assert w.per_device[0].energy_j == w.energy_j
    assert w.time_s == pytest.approx(t1 - t0, abs=1e-12)
    assert w.time_s > 0.25  # the kernels took time too
    assert w.mean_power_w == pytest.approx(w.energy_j / w.time_s)
    assert w.error_j == 0.0  # both edges read the counter


def test_sampler_window_on_the_simulator_is_within_its_stated_error() -> None:
    gpu = SimulatedGPU(seed=3, energy_counter=False)
    mon = EnergyMonitor(devices=[gpu])
    gpu.idle(0.3)
    with mon.window("gemms") as w:
        e0 = gpu.true_energy_j()
        for _ in range(400):
            gpu.launch("gemm", "cublas", {})
        e1 = gpu.true_energy_j()
    assert w.method == "sampler" and w.per_device[0].field == "instant"
    assert abs(w.energy_j - (e1 - e0)) <= w.error_j
    assert w.error_j < 0.05 * w.energy_j  # the bound says something


def test_nested_and_overlapping_windows_are_measured_independently() -> None:
    mon = monitor(backend="sim")
    gpu = mon.devices[0]
    truth: dict[str, float] = {}

    def mark(key: str) -> None:
        truth[key] = gpu.true_energy_j()

    with mon.window("outer") as outer:
        mark("outer0")
        gpu.launch("gemm", "cublas", {})
        with mon.window("inner") as inner:
            mark("inner0")
            gpu.launch("attention", None, {})
            b = mon.begin_window("overlap")  # opens inside "inner", closes after it
            mark("overlap0")
            gpu.launch("gemm", "cublas", {})
            mark("inner1")
        gpu.idle(0.1)
        b_result = mon.end_window("overlap")
        mark("overlap1")
        gpu.launch("gemm", "cublas", {})
        mark("outer1")
    for name, win in (("outer", outer), ("inner", inner), ("overlap", b)):
        want = truth[f"{name}1"] - truth[f"{name}0"]
        assert win.energy_j == pytest.approx(want, abs=COUNTER_RESOLUTION_J), name
    assert b.result is b_result
    assert inner.energy_j < outer.energy_j and b.energy_j < outer.energy_j


def test_window_that_raises_is_still_measured() -> None:
    with pytest.raises(ZeroDivisionError), window("boom", backend="sim") as w:
        gpu = w.devices[0]
        e0 = gpu.true_energy_j()
        gpu.launch("gemm", "cublas", {})
        e1 = gpu.true_energy_j()
        _ = 1 / 0
    assert w.energy_j == pytest.approx(e1 - e0, abs=COUNTER_RESOLUTION_J)


def test_queued_kernels_finish_inside_the_window() -> None:
    """Work enqueued (not yet run) when the window ends is waited for and counted."""
    with window("queued", backend="sim") as w:
        gpu = w.devices[0]
        e0 = gpu.true_energy_j()
        for _ in range(20):
            gpu.enqueue("gemm", "cublas", {})
    assert gpu.true_energy_j() - e0 > 0
    assert w.energy_j == pytest.approx(gpu.true_energy_j() - e0, abs=COUNTER_RESOLUTION_J)
    assert w.time_s == pytest.approx(sum(r.duration_s for r in gpu.kernel_records()))


def test_windows_reuse_devices_and_never_change_them() -> None:
    opened: list[dict[str, Any]] = []
    real_open = eopt.devices.open_devices

    def counting_open(*args: Any, **kwargs: Any) -> Any:
        opened.append(kwargs)
        return real_open(*args, **kwargs)

    with mock.patch.object(eopt.devices, "open_devices", counting_open):
        for i in range(5):
            with window(f"step{i}", backend="sim") as w:
                w.devices[0].launch("gemm", "cublas", {})
            assert w.energy_j > 0
    assert len(opened) == 1 and opened[0]["control"] is False
    with pytest.raises(MeasureOnlyError):
        w.devices[0].set_operating_point(OperatingPoint(sm_clock_mhz=1200))


def test_simulated_gpu_is_announced_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(windows, "_announced_sim", False)
    with window("a", backend="sim"):
        pass
    EnergyMonitor(backend="sim")  # another monitor: still said only once
    err = capsys.readouterr().err
    assert err.count("the GPU is simulated") == 1
    assert "Window.devices" in err


# begin / end by name, and misuse --------------------------------------------------------------
def test_begin_and_end_window_by_name() -> None:
    w = begin_window("epoch", backend="sim")
    assert w.open
    with pytest.raises(WindowError, match="still open"):
        _ = w.energy_j
    gpu = w.devices[0]
    e0 = gpu.true_energy_j()
    gpu.launch("gemm", "cublas", {})
    e1 = gpu.true_energy_j()
    result = end_window("epoch")
    assert not w.open and w.result is result
    assert result.name == "epoch" and result.backend == "sim"
    assert result.energy_j == pytest.approx(e1 - e0, abs=COUNTER_RESOLUTION_J)
    data = result.to_dict()
    assert data["schema"] == "eopt.window/1" and data["devices"][0]["name"] == "sim0"
    assert data["energy_j"] == result.energy_j


def test_window_misuse_is_a_clear_error() -> None:
    with pytest.raises(WindowError, match=r"no open window named 'never' \(open: none\)"):
        end_window("never")
    begin_window("a", backend="sim")
    with pytest.raises(WindowError, match="'a' is already open"):
        begin_window("a", backend="sim")
    with pytest.raises(WindowError, match=r"no open window named 'b' \(open: \['a'\]\)"):
        end_window("b")
    assert end_window("a").time_s >= 0  # the first "a" survived the failed second begin
    with pytest.raises(WindowError, match="no open window named 'a'"):
        end_window("a")
    mon = monitor(backend="sim")
    with mon.window("x") as w:
        pass
    with pytest.raises(WindowError, match="already ended"):
        mon.end(w)
    with pytest.raises(ValueError, match="distinct non-negative"):
        window("x", gpus=[0, 0]).__enter__()
    with pytest.raises(ValueError, match="'all' or a sequence"):
        window("x", gpus="gpu0").__enter__()


def test_window_is_exported_lazily_as_the_function() -> None:
    # A submodule named like the function would shadow it after the first access.
    assert eopt.measure.window is window and eopt.measure.window is window
    imported = importlib.import_module("eopt.measure")
    for name in ("window", "begin_window", "end_window", "Window", "WindowResult"):
        assert getattr(imported, name) is getattr(windows, name), name
        assert callable(getattr(imported, name))


# NVML, two GPUs ---------------------------------------------------------------------------
def test_nvml_counter_deltas_per_device_and_their_sum(two_nvml_gpus: Any) -> None:
    fake = two_nvml_gpus
    d0, d1 = (g.energy for g in fake.gpus)
    w = begin_window("step")
    assert w.backend == "nvml"
    d0.mj += 1_500  # 1.5 J on GPU 0
    d1.mj += 42_250  # 42.25 J on GPU 1
    with window("inner") as inner:
        d1.mj += 250
    result = end_window("step")
    assert result.method == "counter"
    assert result.per_device[0].energy_j == pytest.approx(1.5)
    assert result.per_device[1].energy_j == pytest.approx(42.5)
    assert result.energy_j == pytest.approx(44.0)
    assert [d.name for d in result.per_device.values()] == ["gpu0", "gpu1"]
    assert inner.per_device[0].energy_j == 0.0
    assert inner.energy_j == pytest.approx(0.25)
    assert fake.setter_calls() == []


def test_nvml_devices_open_once_and_selection_reads_only_them(two_nvml_gpus: Any) -> None:
    fake = two_nvml_gpus
    for _ in range(3):
        with window("step", gpus=[1]) as w:
            fake.gpus[1].energy.mj += 1_000
        assert list(w.per_device) == [1] and w.energy_j == pytest.approx(1.0)
    handles = [args for name, args in fake.calls if name == "nvmlDeviceGetHandleByIndex"]
    assert handles == [(1,)]  # opened once, for three windows; GPU 0 never opened
    read = {args[0].uuid for name, args in fake.calls if name.startswith("nvmlDeviceGetTotal")}
    assert read == {"GPU-1-fake"}
    assert fake.setter_calls() == []


def test_nvml_without_a_counter_samples_power(two_nvml_gpus: Any) -> None:
    fake = two_nvml_gpus
    for gpu in fake.gpus:
        gpu.energy_supported = False
    with window("sleep") as w:
        time.sleep(0.3)
    assert w.method == "sampler"
    for index, gpu in enumerate(fake.gpus):
        # The fake's instant field reads power_mw plus the field id (186) in mW, constant.
        watts = (gpu.power_mw + 186) / 1000
        got = w.per_device[index]
        assert got.field == "instant"
        assert got.energy_j == pytest.approx(watts * got.time_s, rel=1e-9)
        assert got.time_s >= 0.3
    assert w.energy_j == pytest.approx(sum(d.energy_j for d in w.per_device.values()))
    assert fake.setter_calls() == []


def test_sync_runs_at_both_edges_and_reset_forgets_monitors() -> None:
    calls: list[float] = []
    mon = monitor(backend="sim")
    clock = mon.devices[0].clock
    w = begin_window("step", backend="sim", sync=lambda: calls.append(clock.now()))
    mon.devices[0].idle(0.5)
    with pytest.raises(WindowError, match=r"still open: \['step'\]"):
        windows.reset_monitors()
    end_window("step")
    assert calls == [w.per_device[0].start_s, w.per_device[0].end_s]
    assert w.time_s == pytest.approx(0.5)
    windows.reset_monitors()
    assert monitor(backend="sim") is not mon
