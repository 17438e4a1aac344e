"""With every mechanism off, the simulated GPU is the context-independent world (§4.3).

A same-device co-run without contention must cost exactly what ⊕ prices from the two
kernels run alone: the ready device's static power over the span once, plus each
kernel's dynamic energy d = E − s·T. Kernels that throttle alone at the power limit (a
GEMM at the default 400 W) keep their own slice throttling in the co-run, so their
energy above the static draw adds too.
"""

from __future__ import annotations

import numpy as np
import pytest

from eopt.devices import OperatingPoint
from eopt.sim.gpu import Launch, SimulatedGPU
from eopt.sim.mechanisms import NoiseModel
from eopt.sim.physics import static_power_w

KERNELS = [
    ("gemm", {"m": 2048, "n": 2048, "k": 2048}),
    ("gemm", {"m": 4096, "n": 4096, "k": 4096}),
    ("memcpy", {"bytes": 128 * 2**20}),
    ("layernorm", {"rows": 8192}),
    ("allreduce", {"bytes": 64 * 2**20}),
    ("attention", None),
]


def _gpu(point: OperatingPoint) -> SimulatedGPU:
    gpu = SimulatedGPU(mechanisms="none", noise=False)
    gpu.set_operating_point(point)
    return gpu


def _alone(point: OperatingPoint, kernel: str, workload: dict | None) -> tuple[float, float]:
    """(time s, energy J) of one kernel alone on a fresh GPU."""
    gpu = _gpu(point)
    e0 = gpu.true_energy_j()
    t = gpu.launch(kernel, None, workload)
    return t, gpu.true_energy_j() - e0


def _ready_w(gpu: SimulatedGPU, point: OperatingPoint) -> float:
    """s: the ready device at the set clock (the top clock when unlocked)."""
    f_max = gpu.profile.max_sm_clock_mhz
    f = point.sm_clock_mhz or f_max
    return float(static_power_w(gpu.profile.physics, f, f_max, gpu.temperature_c))


@pytest.mark.parametrize("seed", range(12))
def test_a_co_run_costs_what_par_prices(seed: int) -> None:
    rng = np.random.default_rng(seed)
    i, j = rng.choice(len(KERNELS), 2)
    (ka, wa), (kb, wb) = KERNELS[i], KERNELS[j]
    clock = [None, 1410.0, 1200.0, 1005.0][seed % 4]
    limit = [400.0, 300.0, 250.0][seed % 3]  # low limits throttle a GEMM alone
    point = OperatingPoint(sm_clock_mhz=clock, power_limit_w=limit)
    (ta, ea), (tb, eb) = _alone(point, ka, wa), _alone(point, kb, wb)
    gpu = _gpu(point)
    s = _ready_w(gpu, point)
    lead = 0.0 if seed % 2 == 0 else float(rng.uniform(0.0, 0.8)) * ta
    t0, e0 = gpu.clock.now(), gpu.true_energy_j()
    gpu.enqueue(ka, None, wa, stream="a")
    gpu.clock.advance_to(t0 + lead)
    gpu.enqueue(kb, None, wb, stream="b")
    gpu.synchronize()
    span = gpu.clock.now() - t0
    energy = gpu.true_energy_j() - e0
    assert span == pytest.approx(max(ta, lead + tb), rel=1e-9)
    d_a, d_b = ea - s * ta, eb - s * tb
    assert energy == pytest.approx(s * span + d_a + d_b, rel=1e-9)


def test_a_gemm_that_throttles_alone_adds_its_own_power_in_a_co_run() -> None:
    # The case the null world got wrong: the co-run model priced a throttled GEMM at its
    # average clock instead of its slices, +0.4 % … +0.9 % above ⊕.
    point = OperatingPoint()
    gemm = Launch("gemm", None, {"m": 4096, "n": 4096, "k": 4096})
    copy = Launch("memcpy", None, {"bytes": 128 * 2**20})
    gpu = _gpu(point)
    gpu.launch(gemm.kernel, gemm.impl, gemm.workload)
    assert gpu.kernel_records()[-1].throttled  # it does throttle alone
    tg, eg = _alone(point, gemm.kernel, gemm.workload)
    tc, ec = _alone(point, copy.kernel, copy.workload)
    gpu = _gpu(point)
    s = _ready_w(gpu, point)
    e0 = gpu.true_energy_j()
    gpu.co_run([gemm, copy])
    energy = gpu.true_energy_j() - e0
    assert energy == pytest.approx(s * max(tg, tc) + (eg - s * tg) + (ec - s * tc), rel=1e-9)


def test_a_chosen_launch_jitter_sets_every_kernel_s_time_spread() -> None:
    times = {}
    for jitter in (None, 0.02):
        gpu = SimulatedGPU(mechanisms="noise", seed=3, noise_model=NoiseModel(time_jitter=jitter))
        times[jitter] = np.array(
            [gpu.launch("layernorm", None, {"rows": 4096}) for _ in range(600)]
        )
    cv = {k: float(v.std(ddof=1) / v.mean()) for k, v in times.items()}
    # 600 launches estimate a CV to about ±3 %.
    assert cv[0.02] == pytest.approx(0.02, rel=0.1)
    assert cv[None] < 0.005  # the profile's own, far below
    with pytest.raises(ValueError, match=r"time_jitter=0\.5.*\[0, 0\.2\]"):
        NoiseModel(time_jitter=0.5)
