"""The simulated power sensor's blind spot: 25 ms of each 100 ms refresh interval.

NVML's averaged power reading refreshes every 100 ms but averages only the last 25 ms of
each interval (Yang, Adamek and Armour, SC24; ``reference/kokkos-energy-note.txt``). The
simulator's ``average`` field does the same, with the window taken from the profile.
Independent truth: the simulator's exact piecewise-constant power trace.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from eopt.measure.meter import Meter, average_window_s
from eopt.sim import profiles as sim_profiles
from eopt.sim.gpu import SENSOR_PERIOD_S, SimulatedGPU
from eopt.sim.profiles import available_profiles, load_profile

#: NVML reports milliwatts: the simulator rounds its readings to 1 mW.
READING_RESOLUTION_W = 1e-3
#: A gemm on the H100 profile: ~11.25 ms per 16384 of k at the top clock, ~635 W.
H100_S_PER_K = 0.01125 / 16384


def _mean_power_w(trace: list[tuple[float, float, float]], start_s: float, end_s: float) -> float:
    """Exact mean power over ``[start_s, end_s]`` from ``power_trace`` segments, in W."""
    energy = sum(p * max(0.0, min(t1, end_s) - max(t0, start_s)) for t0, t1, p in trace)
    return energy / (end_s - start_s)


def _record_refreshes(gpu: SimulatedGPU) -> list[tuple[float, float, float]]:
    """Poll the GPU every 1 ms; returns a list that fills with ``(refresh time s, average
    W, instant W)``, one entry per sensor refresh."""
    seen: list[tuple[float, float, float]] = []
    last = [gpu.last_power_update_s]

    def poll(_now: float) -> None:
        if gpu.last_power_update_s != last[0]:
            last[0] = gpu.last_power_update_s
            fields = gpu.power_fields()
            seen.append((last[0], fields["average"].power_w, fields["instant"].power_w))

    gpu.clock.every(0.001, poll)
    return seen


def _bursty_load(gpu: SimulatedGPU, duration_s: float, seed: int) -> None:
    """GEMM bursts of 1–30 ms between idle gaps of 0–40 ms: the draw changes several times
    inside most refresh intervals, so a 25 ms mean and a 100 ms mean differ."""
    rng = np.random.default_rng(seed)
    end = gpu.clock.now() + duration_s
    while gpu.clock.now() < end:
        k = float(rng.uniform(0.001, 0.03)) / H100_S_PER_K
        gpu.launch("gemm", "cublas", {"m": 16384, "n": 16384, "k": k})
        gpu.idle(float(rng.uniform(0.0, 0.04)))


def _blind_spot_gpu(**kwargs) -> SimulatedGPU:
    gpu = SimulatedGPU("H100-SXM5-80GB", energy_counter=False, power_field="average", **kwargs)
    gpu.idle(1.0)
    return gpu


def _launch_at(gpu: SimulatedGPU, offset_s: float, duration_s: float) -> tuple[float, float, float]:
    """Run one ~``duration_s`` GEMM starting ``offset_s`` after a sensor refresh; returns
    (that refresh, kernel start, kernel end), in s."""
    target = gpu.last_power_update_s + offset_s
    if target < gpu.clock.now():
        target += SENSOR_PERIOD_S
    gpu.idle(target - gpu.clock.now())
    refresh, start = gpu.last_power_update_s, gpu.clock.now()
    assert start - refresh == pytest.approx(offset_s, abs=1e-9)
    gpu.launch("gemm", "cublas", {"m": 16384, "n": 16384, "k": duration_s / H100_S_PER_K})
    return refresh, start, gpu.clock.now()


@pytest.mark.parametrize("model", ["H100-SXM5-80GB", "A100-SXM4-40GB"])
def test_average_is_the_mean_over_exactly_the_last_window_before_each_refresh(model):
    gpu = SimulatedGPU(model, noise=False, record_trace=True, power_field="average")
    window = gpu.power_average_window_s
    assert window == 0.025
    refreshes = _record_refreshes(gpu)
    gpu.idle(0.3)
    _bursty_load(gpu, 2.0, seed=1)
    trace = gpu.power_trace()
    assert len(refreshes) >= 20
    whole_period_differs = 0
    for u, average, instant in refreshes:
        assert u == pytest.approx(refreshes[0][0] + SENSOR_PERIOD_S * round(
            (u - refreshes[0][0]) / SENSOR_PERIOD_S), abs=1e-9)  # fmt: skip
        truth = _mean_power_w(trace, u - window, u)
        assert average == pytest.approx(truth, abs=READING_RESOLUTION_W)
        # instant: the draw in the segment that ends at the refresh
        at_u = next(p for t0, t1, p in trace if t0 < u <= t1 + 1e-12)
        assert instant == pytest.approx(at_u, abs=READING_RESOLUTION_W)
        if abs(_mean_power_w(trace, u - SENSOR_PERIOD_S, u) - truth) > 5.0:
            whole_period_differs += 1
    # The load is bursty enough that the old whole-interval mean would fail above.
    assert whole_period_differs >= len(refreshes) // 2


@pytest.mark.parametrize(
    ("offset_s", "seen"),
    [(0.005, False), (0.035, True)],  # a 60 ms kernel in the blind 75 ms, or ending in the window
)
def test_a_kernel_in_the_blind_75_ms_leaves_no_trace_in_the_readings(offset_s, seen):
    gpu = _blind_spot_gpu(noise=False, record_trace=True)
    idle_w = gpu.power().power_w
    refreshes = _record_refreshes(gpu)
    u0, start, end = _launch_at(gpu, offset_s, 0.06)
    assert end < u0 + SENSOR_PERIOD_S  # between two refreshes
    kernel_w = _mean_power_w(gpu.power_trace(), start, end)
    assert kernel_w > 5 * idle_w
    gpu.idle(0.5)
    assert len(refreshes) >= 5
    peak_average = max(a for _, a, _ in refreshes)
    peak_instant = max(i for _, _, i in refreshes)
    assert peak_instant < 1.001 * idle_w  # every refresh instant is idle in both cases
    if seen:
        # 20 of the window's 25 ms hold the kernel
        expected = (20 * kernel_w + 5 * idle_w) / 25
        assert peak_average == pytest.approx(expected, rel=0.01)
    else:
        assert peak_average < 1.001 * idle_w


def test_the_meter_misses_a_blind_kernel_but_its_error_covers_the_truth():
    gpu = _blind_spot_gpu(seed=3)
    with Meter(gpu, method="sampler") as meter:
        assert meter.averaging_s == 0.025 and meter.power_trace is not None
        assert meter.power_trace.kind == "point"
        e0 = gpu.true_energy_j()
        _, start, end = _launch_at(gpu, 0.005, 0.06)
        truth = gpu.true_energy_j() - e0
        got = meter.energy(start, end)
    assert got.short and got.n_samples == 0
    assert got.energy_j < 0.25 * truth  # only the idle draw around it was seen
    assert abs(got.energy_j - truth) <= got.error_j


def test_every_shipped_profile_averages_25_ms_of_100():
    for name in available_profiles():
        assert load_profile(name).power_average_window_s == 0.025, name
        assert SimulatedGPU(name).power_average_window_s == 0.025


@pytest.fixture
def extra_profile(monkeypatch, tmp_path: Path) -> Iterator[Path]:
    """A profiles folder extended with files written to ``tmp_path`` (caches reset)."""
    shipped = sim_profiles._profile_files()

    def files() -> dict[str, object]:
        found = {p.name[: -len(".yaml")]: p for p in tmp_path.glob("*.yaml")}
        return {**shipped, **found}

    monkeypatch.setattr(sim_profiles, "_profile_files", files)
    sim_profiles._raw.cache_clear()
    sim_profiles.load_profile.cache_clear()
    yield tmp_path
    sim_profiles._raw.cache_clear()
    sim_profiles.load_profile.cache_clear()


def _write_profile(folder: Path, name: str, window: object) -> None:
    (folder / f"{name}.yaml").write_text(
        f"kind: gpu\nmodel: {name}\nbase: H100-SXM5-80GB\npower_average_window_s: {window}\n",
        encoding="utf-8",
    )


def test_the_window_comes_from_the_profile(extra_profile):
    _write_profile(extra_profile, "Wide-Window-GPU", 0.05)
    gpu = SimulatedGPU("Wide-Window-GPU", noise=False, record_trace=True, power_field="average")
    assert gpu.power_average_window_s == 0.05
    assert Meter(gpu, method="sampler").start().averaging_s == 0.05
    refreshes = _record_refreshes(gpu)
    gpu.idle(0.3)
    _bursty_load(gpu, 1.0, seed=2)
    trace = gpu.power_trace()
    assert len(refreshes) >= 10
    for u, average, _ in refreshes:
        assert average == pytest.approx(_mean_power_w(trace, u - 0.05, u), abs=1e-3)


@pytest.mark.parametrize("window", [0, -0.01, 0.2, "soon"])
def test_a_window_outside_the_refresh_period_is_refused(extra_profile, window):
    _write_profile(extra_profile, "Bad-Window-GPU", window)
    with pytest.raises(ValueError, match=r"Bad-Window-GPU\.yaml.*power_average_window_s"):
        load_profile("Bad-Window-GPU")


def test_meter_reads_a_whole_period_window_as_an_interval_mean():
    gpu = SimulatedGPU(energy_counter=False, power_field="average")
    gpu.power_average_window_s = gpu.power_update_period_s
    meter = Meter(gpu, method="sampler").start()
    assert meter.power_trace is not None and meter.power_trace.kind == "interval_mean"
    assert meter.averaging_s == 0.0


def test_average_window_is_none_where_a_device_does_not_say():
    assert average_window_s(SimpleNamespace()) is None  # e.g. an NVML GPU: today's model
    assert average_window_s(SimpleNamespace(power_average_window_s=0.0)) is None
    assert average_window_s(SimpleNamespace(power_average_window_s=True)) is None
    assert average_window_s(SimpleNamespace(power_average_window_s=0.025)) == 0.025


def _load_benchmark():
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "sensor_shift.py"
    spec = importlib.util.spec_from_file_location("sensor_shift_under_test", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


def test_shifted_repeats_recover_a_10_ms_kernel_that_single_runs_miss():
    bench = _load_benchmark()
    rows = {r.method.label: r for r in bench.measure("H100-SXM5-80GB", [10.0], 20, 5.0, 20.0, 3, 0)}
    single = rows["single run, trapezoid"]
    assert min(abs(e) for e in single.errors_pct) > 50  # the sensor never saw most of it
    pooled = rows["20 shifted repeats, pooled + lag − idle"]
    assert max(abs(e) for e in pooled.errors_pct) < 2
    unshifted = rows["20 unshifted repeats, pooled + lag − idle"]
    assert max(abs(e) for e in unshifted.errors_pct) > 50  # the blind spot recurs
