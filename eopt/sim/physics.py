"""The physical model behind the simulated GPU: voltage, power, time and throttling.

Pure functions over floats or NumPy arrays (they broadcast), so the simulator evaluates
one kernel launch and the calibration evaluates hundreds of clocks with the same code.

Model (all powers in W, clocks in MHz, times in s, temperatures in °C):

* Voltage–frequency curve: a flat floor ``v_min`` up to the knee clock, then rising as
  ``((f − knee)/(f_max − knee))**v_gamma`` to ``v_max`` at the highest clock. Voltages are
  used relative to ``v_max`` (``v = V/V_max``).
* Static power (the ready device, clocks running, no kernel):
  ``p_const + p_clock·v²·f/f_max + p_leak·v**leak_v_exp·exp(leak_temp_coeff·(T − t_ref))`` —
  board constant, clock tree, and leakage rising with voltage and temperature.
* Dynamic power while a kernel runs: ``p_core·activity·u_c·v²·f/f_max + p_mem·mem_activity·u_m``
  where ``u_c`` and ``u_m`` are the fractions of the kernel's time its compute and memory
  pipes are busy (from the roofline time model below).
* Kernel time (roofline with partial overlap): compute time ``t_c = compute_s·f_max/f``,
  memory time ``t_m = memory_s·((1/m)**q + (s·f_max/f)**q)**(1/q)``, combined by a p-norm
  ``(t_c**p + t_m**p)**(1/p)`` (p = 1: no overlap; p → ∞: the roofline max), plus a fixed
  launch overhead. The memory side is itself a roofline of two stages: the DRAM (``m`` is
  the memory clock relative to the top one) and the core side that feeds it (load/store
  units, L2 and crossbar, clocked with the SMs). ``s = mem_core_share`` is the core side's
  time relative to the DRAM's at the top clock, fitted per GPU: below ``s·f_max`` the SM
  clock limits even memory-bound kernels (a V100's slow 2.3–2.6× at 0.29 f_max, an
  RTX 8000's hardly at all); ``q = mem_core_p`` is how sharply the two stages hand over.
  ``s = 0``: memory time ignores the SM clock.
* A kernel's memory step (optional, per kernel): above a clock ``c`` its memory time
  grows by the factor ``1 + k·clip((f − c)/w + ½, 0, 1)`` — a ramp of width ``w`` centred
  on ``c``. Measured sweeps show it as a kernel's time *rising* with the clock while its
  power falls (the Perseus A40 stages: +6 % and +10 % over 30 MHz at 975 and 1065 MHz,
  far under the power limit), a memory stall no smooth clock law produces; it moves that
  kernel's energy-optimal clock to just below ``c``. ``k = 0`` (the default): no step.
* A kernel's voltage exposure ``x`` (optional, per kernel, default 1): only the share
  ``x`` of its core dynamic power follows ``v²``; the rest stays at the floor's
  ``v_min²`` (switching in blocks fed at a fixed voltage). Below the knee nothing
  changes; above it, a kernel with ``x < 1`` pays less for the clock, so its
  energy-optimal clock lies higher (the Perseus A40 stages: 1050 MHz for GPT-3 forward,
  1140 MHz for BLOOM backward, with the same time scaling).
* Stall power (optional, per kernel, default 0): SMs waiting on memory stay clocked and
  draw ``p_core·stall_activity·(1 − u_c)·v²·f/f_max``. It rises with the clock while it
  buys no time, so a memory-heavier kernel's energy-optimal clock lies lower.
* Memory power ``p_mem·mem_activity·u_m·m``: the DRAM's energy per byte is fixed, so its
  power follows the bandwidth the memory clock allows.
* Power-limit throttling: a kernel's activity is not uniform; it is modelled as ``phases``
  equal slices of its work whose activity spreads ``±throttle_spread`` around the mean.
  Each slice runs at the highest clock (continuous: the time average of the driver's clock
  dithering) at which its power fits under the limit, so the average power approaches the
  limit smoothly and the busiest slices slow down first.
* Thermal RC: ``C·dT/dt = P − (T − t_ambient)/R``. Profiles size ``C`` for a time
  constant ``R·C`` of about a minute (die plus heatsink), the scale on which a board's
  leakage-driven power drift settles under a steady load.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

__all__ = [
    "GpuPhysics",
    "KernelDemand",
    "KernelRun",
    "kernel_run",
    "kernel_run_arrays",
    "leak_factor",
    "mem_step_ramp",
    "static_power_w",
    "steady_state_run",
    "thermal_step_c",
    "voltage_rel",
]

_BISECTION_STEPS = 40


@dataclass(frozen=True)
class GpuPhysics:
    """Physical parameters of one GPU model (see the module docstring for the equations).

    Attributes:
        v_min: Voltage floor relative to the top voltage (0 < v_min ≤ 1).
        knee_mhz: Clock where the voltage starts to rise above the floor, in MHz.
        v_gamma: Shape exponent of the voltage rise above the knee.
        p_const_w: Clock-independent board power, in W.
        p_clock_w: Clock-tree / uncore power at top voltage and clock, in W.
        p_leak_w: Leakage power at top voltage and ``t_ref_c``, in W.
        leak_v_exp: Exponent of the leakage's voltage dependence.
        leak_temp_coeff: Leakage's relative rise per kelvin, in 1/K.
        t_ref_c: Reference temperature of ``p_leak_w``, in °C.
        p_core_w: Dynamic core power at top voltage and clock, activity 1, in W.
        p_mem_w: Memory-system dynamic power at full bandwidth use, in W.
        t_ambient_c: Inlet (ambient) temperature, in °C.
        r_thermal_k_per_w: Thermal resistance die → ambient, in K/W.
        c_thermal_j_per_k: Heat capacity, in J/K.
        throttle_spread: Relative spread of activity inside a kernel (power-limit model).
        throttle_phases: Number of activity slices in the power-limit model.
        time_jitter: Relative standard deviation of a launch's duration.
        activity_jitter: Relative standard deviation of a launch's dynamic power.
        sensor_noise: Relative standard deviation of a power-sensor reading.
        mem_core_share: Core-side memory time (scales with 1/SM clock) relative to the
            DRAM time at the top clock (0–1; 0: memory time ignores the SM clock).
        mem_core_p: p-norm exponent combining DRAM and core-side memory time (≥ 1).
    """

    v_min: float = 0.72
    knee_mhz: float = 1080.0
    v_gamma: float = 1.6
    p_const_w: float = 30.0
    p_clock_w: float = 30.0
    p_leak_w: float = 80.0
    leak_v_exp: float = 3.0
    leak_temp_coeff: float = 0.012
    t_ref_c: float = 60.0
    p_core_w: float = 330.0
    p_mem_w: float = 60.0
    t_ambient_c: float = 30.0
    r_thermal_k_per_w: float = 0.08
    c_thermal_j_per_k: float = 250.0
    throttle_spread: float = 0.25
    throttle_phases: int = 9
    time_jitter: float = 0.004
    activity_jitter: float = 0.004
    sensor_noise: float = 0.005
    mem_core_share: float = 0.0
    mem_core_p: float = 4.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "physics") -> GpuPhysics:
        """Build from a mapping (a profile's ``physics`` section); unknown keys are errors.

        Raises:
            ValueError: naming ``where`` and the offending key.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(known)}")
        values: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{where}.{key}: must be a number, got {value!r}")
            values[key] = int(value) if key == "throttle_phases" else float(value)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain mapping of all parameters."""
        return asdict(self)


@dataclass(frozen=True)
class KernelDemand:
    """What one kernel invocation asks of a GPU, independent of the operating point.

    The physics functions broadcast over the fields too: a fit evaluates many kernels at
    once with NumPy arrays shaped ``settings.shape + (1,)`` in place of the floats.

    Attributes:
        compute_s: Compute-pipe time at the top SM clock, in s (scales with 1/clock).
        memory_s: DRAM time at the top memory clock, in s (the GPU's ``mem_core_share``
            says when the SM clock limits the memory side instead).
        activity: Dynamic core activity while the compute pipe is busy (0–1.5).
        mem_activity: Memory-system activity while the memory pipe is busy (0–1.5).
        overlap_p: p-norm exponent combining compute and memory time (≥ 1).
        launch_s: Fixed launch/tail overhead, in s.
        mem_step_mhz: Centre of the kernel's memory step, in MHz (see the module
            docstring; inf: none).
        mem_step_width_mhz: Width of the step's ramp, in MHz (0: a sharp step).
        mem_step_slowdown: Relative growth of the memory time above the step (0: none,
            which reproduces the model without a step exactly).
        v_exposure: Share of the kernel's core dynamic power that follows the voltage
            curve above the knee (1: all of it, the model without this parameter; the
            rest stays at the floor voltage's ``v_min²``).
        stall_activity: Core activity while the compute pipe waits (clocked, not
            computing: the share ``1 − u_c`` of the time), 0–1 (0: stalled SMs draw
            nothing beyond static power, the model without this parameter).
    """

    compute_s: float
    memory_s: float
    activity: float = 0.8
    mem_activity: float = 0.8
    overlap_p: float = 3.0
    launch_s: float = 5e-6
    mem_step_mhz: float = math.inf
    mem_step_width_mhz: float = 0.0
    mem_step_slowdown: float = 0.0
    v_exposure: float = 1.0
    stall_activity: float = 0.0


@dataclass(frozen=True)
class KernelRun:
    """How one kernel invocation runs at a given setting and temperature.

    Attributes:
        duration_s: Wall time of the invocation, in s.
        power_w: Its average power at the temperature it started at, in W.
        leak_coeff_w: The part of ``power_w`` that scales with the leakage temperature
            factor, divided by that factor (so power at temperature T is
            ``power_w + leak_coeff_w·(g(T) − g(T0))``), in W.
        sm_clock_mhz: Its average effective SM clock (time-weighted), in MHz.
        throttled: Whether the power limit lowered the clock of any slice.
    """

    duration_s: float
    power_w: float
    leak_coeff_w: float
    sm_clock_mhz: float
    throttled: bool


def voltage_rel(phys: GpuPhysics, f_mhz: Any, f_max_mhz: float) -> Any:
    """Voltage relative to the top voltage at clock ``f_mhz`` (broadcasts)."""
    span = max(f_max_mhz - phys.knee_mhz, 1e-9)
    x = np.clip((np.asarray(f_mhz, dtype=float) - phys.knee_mhz) / span, 0.0, None)
    return phys.v_min + (1.0 - phys.v_min) * x**phys.v_gamma


def leak_factor(phys: GpuPhysics, temp_c: Any) -> Any:
    """Leakage's temperature factor ``exp(coeff·(T − t_ref))`` (broadcasts)."""
    return np.exp(phys.leak_temp_coeff * (np.asarray(temp_c, dtype=float) - phys.t_ref_c))


def static_power_w(phys: GpuPhysics, f_mhz: Any, f_max_mhz: float, temp_c: Any) -> Any:
    """The ready device's power with clocks at ``f_mhz`` and no kernel running, in W."""
    v = voltage_rel(phys, f_mhz, f_max_mhz)
    f_rel = np.asarray(f_mhz, dtype=float) / f_max_mhz
    return _static_w(phys, v, f_rel, temp_c)


def _static_w(phys: GpuPhysics, v: Any, f_rel: Any, temp_c: Any) -> Any:
    # Split out so the throttling bisection reuses the voltage it already has.
    return (
        phys.p_const_w
        + phys.p_clock_w * v**2 * f_rel
        + phys.p_leak_w * v**phys.leak_v_exp * leak_factor(phys, temp_c)
    )


def _time_and_utils(
    phys: GpuPhysics, demand: KernelDemand, f_mhz: Any, f_max_mhz: float, mem_rel: Any
) -> tuple[Any, Any, Any]:
    slow = f_max_mhz / np.asarray(f_mhz, dtype=float)
    t_c = demand.compute_s * slow
    share, q = phys.mem_core_share, phys.mem_core_p
    t_m = demand.memory_s * ((1.0 / mem_rel) ** q + (share * slow) ** q) ** (1.0 / q)
    if np.any(np.asarray(demand.mem_step_slowdown) != 0.0):
        # Skipped without a step, so every kernel without one keeps its numbers bit for bit.
        t_m = t_m * (1.0 + demand.mem_step_slowdown * mem_step_ramp(demand, f_mhz))
    p = demand.overlap_p
    busy = (t_c**p + t_m**p) ** (1.0 / p)
    total = busy + demand.launch_s
    return total, t_c / total, t_m / total


def mem_step_ramp(demand: KernelDemand, f_mhz: Any) -> Any:
    """How far clock ``f_mhz`` (MHz) is into ``demand``'s memory step: 0 below, 1 above."""
    width = np.maximum(np.asarray(demand.mem_step_width_mhz, dtype=float), 1e-9)
    x = (np.asarray(f_mhz, dtype=float) - demand.mem_step_mhz) / width + 0.5
    return np.clip(np.nan_to_num(x, nan=0.0, neginf=0.0), 0.0, 1.0)


def _slice_power_w(
    phys: GpuPhysics,
    demand: KernelDemand,
    activity: Any,
    f_mhz: Any,
    f_max_mhz: float,
    temp_c: Any,
    mem_rel: Any,
) -> Any:
    _, u_c, u_m = _time_and_utils(phys, demand, f_mhz, f_max_mhz, mem_rel)
    v = voltage_rel(phys, f_mhz, f_max_mhz)
    f_rel = np.asarray(f_mhz, dtype=float) / f_max_mhz
    x = demand.v_exposure
    # Skipped at the default, so every kernel without the parameter keeps its numbers.
    v2 = v**2 if np.all(np.asarray(x) == 1.0) else x * v**2 + (1.0 - x) * phys.v_min**2
    dynamic = phys.p_core_w * activity * u_c * v2 * f_rel
    if np.any(np.asarray(demand.stall_activity) != 0.0):
        dynamic = dynamic + phys.p_core_w * demand.stall_activity * (1.0 - u_c) * v2 * f_rel
    memory = phys.p_mem_w * demand.mem_activity * u_m * mem_rel
    return _static_w(phys, v, f_rel, temp_c) + dynamic + memory


def _slice_activities(phys: GpuPhysics, activity: float) -> np.ndarray:
    k = max(int(phys.throttle_phases), 1)
    z = np.linspace(-1.0, 1.0, k) if k > 1 else np.zeros(1)
    return activity * (1.0 + phys.throttle_spread * z)


def kernel_run_arrays(
    phys: GpuPhysics,
    demand: KernelDemand,
    f_set_mhz: Any,
    limit_w: Any,
    temp_c: Any,
    f_max_mhz: float,
    f_min_mhz: float,
    mem_rel: Any = 1.0,
) -> dict[str, np.ndarray]:
    """Vectorised :func:`kernel_run`: arrays over settings (broadcast), for calibration.

    ``mem_rel`` is the memory clock relative to the top one (broadcasts like the settings).

    Returns:
        Mapping with ``duration_s``, ``power_w``, ``energy_j``, ``leak_coeff_w``,
        ``sm_clock_mhz`` and ``throttled`` arrays of the broadcast shape.
    """
    f_set = np.asarray(f_set_mhz, dtype=float)[..., None]
    limit = np.asarray(limit_w, dtype=float)[..., None]
    temp = np.asarray(temp_c, dtype=float)[..., None]
    m_rel = np.asarray(mem_rel, dtype=float)[..., None]
    acts = _slice_activities(phys, demand.activity)
    shape = np.broadcast_shapes(f_set.shape, limit.shape, temp.shape, m_rel.shape, acts.shape)
    f_set, limit, temp, m_rel = (np.broadcast_to(a, shape) for a in (f_set, limit, temp, m_rel))
    acts = np.broadcast_to(acts, shape)

    p_top = _slice_power_w(phys, demand, acts, f_set, f_max_mhz, temp, m_rel)
    over = p_top > limit
    f_eff = f_set.copy()
    if np.any(over):
        # Highest clock in [f_min, f_set] whose power fits: power rises with clock.
        lo = np.full(shape, min(f_min_mhz, float(np.min(f_set))))
        hi = f_set.copy()
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            fits = _slice_power_w(phys, demand, acts, mid, f_max_mhz, temp, m_rel) <= limit
            lo = np.where(fits, mid, lo)
            hi = np.where(fits, hi, mid)
        f_eff = np.where(over, lo, f_set)

    k = shape[-1]
    t_slice, _, _ = _time_and_utils(phys, demand, f_eff, f_max_mhz, m_rel)
    t_slice = t_slice / k
    p_slice = _slice_power_w(phys, demand, acts, f_eff, f_max_mhz, temp, m_rel)
    v = voltage_rel(phys, f_eff, f_max_mhz)
    duration = t_slice.sum(axis=-1)
    energy = (p_slice * t_slice).sum(axis=-1)
    leak = (phys.p_leak_w * v**phys.leak_v_exp * t_slice).sum(axis=-1) / duration
    return {
        "duration_s": duration,
        "power_w": energy / duration,
        "energy_j": energy,
        "leak_coeff_w": leak,
        "sm_clock_mhz": (f_eff * t_slice).sum(axis=-1) / duration,
        "throttled": np.any(over, axis=-1),
    }


def kernel_run(
    phys: GpuPhysics,
    demand: KernelDemand,
    f_set_mhz: float,
    limit_w: float,
    temp_c: float,
    f_max_mhz: float,
    f_min_mhz: float,
    mem_rel: float = 1.0,
) -> KernelRun:
    """How one invocation of ``demand`` runs at clock ``f_set_mhz`` under ``limit_w``.

    Args:
        phys: The GPU's physical parameters.
        demand: The kernel's demand.
        f_set_mhz: Requested (locked or boost) SM clock, in MHz.
        limit_w: Power limit, in W.
        temp_c: Die temperature at the start, in °C.
        f_max_mhz: The GPU's top SM clock, in MHz.
        f_min_mhz: The lowest clock the power controller may drop to, in MHz.
        mem_rel: Memory clock relative to the top memory clock.
    """
    out = kernel_run_arrays(phys, demand, f_set_mhz, limit_w, temp_c, f_max_mhz, f_min_mhz, mem_rel)
    return KernelRun(
        duration_s=float(out["duration_s"]),
        power_w=float(out["power_w"]),
        leak_coeff_w=float(out["leak_coeff_w"]),
        sm_clock_mhz=float(out["sm_clock_mhz"]),
        throttled=bool(out["throttled"]),
    )


def steady_state_run(
    phys: GpuPhysics,
    demand: KernelDemand,
    f_set_mhz: Any,
    limit_w: Any,
    f_max_mhz: float,
    f_min_mhz: float,
    iterations: int = 8,
    mem_rel: Any = 1.0,
) -> dict[str, np.ndarray]:
    """The kernel run back-to-back until the temperature settles (broadcasts).

    Solves ``T = t_ambient + R·P(T)`` by fixed-point iteration (a contraction: leakage's
    temperature slope times R is far below 1).

    Returns:
        :func:`kernel_run_arrays`' mapping plus ``temp_c``.
    """
    temp = np.full(np.shape(np.asarray(f_set_mhz, dtype=float)), phys.t_ambient_c + 40.0)
    out: dict[str, np.ndarray] = {}
    for _ in range(max(iterations, 1)):
        out = kernel_run_arrays(
            phys, demand, f_set_mhz, limit_w, temp, f_max_mhz, f_min_mhz, mem_rel
        )
        temp = phys.t_ambient_c + phys.r_thermal_k_per_w * out["power_w"]
    out["temp_c"] = temp
    return out


def thermal_step_c(phys: GpuPhysics, temp_c: float, power_w: float, dt_s: float) -> float:
    """Temperature after ``dt_s`` at constant ``power_w`` (exact RC solution), in °C."""
    t_eq = phys.t_ambient_c + phys.r_thermal_k_per_w * power_w
    tau = phys.r_thermal_k_per_w * phys.c_thermal_j_per_k
    return t_eq + (temp_c - t_eq) * math.exp(-dt_s / tau)
