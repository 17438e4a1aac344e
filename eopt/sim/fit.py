"""Fit the simulated GPU's physics to measured (kernel, clock, time, power) tables.

A measured table holds one row per kernel and operating point (an SM clock, a memory
clock, a power limit) with the measured time and average power, and optionally the
ready device's static power (signature libraries carry it). :func:`fit_sim` finds the
GPU's shared physics (voltage curve, static power, the memory side's share of the SM
clock, throttling spread) and a :class:`~eopt.sim.physics.KernelDemand` per
kernel with :func:`scipy.optimize.least_squares`; :func:`holdout_error` says how well the
fit predicts clocks or kernels it never saw. :func:`read_library_table` turns a signature
library (``eopt sweep``'s ``.jsonl``) into a table, so a user can fit the simulator to a
GPU of their own (``eopt sim fit LIB.jsonl``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares
from scipy.sparse import lil_matrix

from eopt.sim.physics import GpuPhysics, KernelDemand, static_power_w, steady_state_run
from eopt.sim.profiles import GpuProfile

__all__ = [
    "HOLDOUTS",
    "OPTIMUM_ENERGY_TOLERANCE",
    "OPTIMUM_WEIGHT",
    "HoldoutError",
    "MeasuredTable",
    "MemStep",
    "OptimumCheck",
    "SimFit",
    "SimFitError",
    "cannot_serve",
    "find_mem_steps",
    "fit_sim",
    "holdout_error",
    "kernel_label",
    "limit_bound_kernels",
    "memory_bound_kernels",
    "optimum_checks",
    "profile_document",
    "reaches_board_limit",
    "read_library_table",
    "summary_metrics",
    "u_shaped",
]

#: Ways to hold data out of a fit: interior knob values, or whole kernels.
HOLDOUTS = ("clocks", "kernels")

# Shared parameters the fit may free, with bounds. Powers are bounded by the board's limit;
# the knee is fitted as a fraction of the top clock so one bound suits every GPU.
_SHARED_NAMES = (
    "v_min",
    "knee_frac",
    "v_gamma",
    "p_const_w",
    "p_leak_w",
    "mem_core_share",
    "mem_core_p",
    "overlap_p",
    "throttle_spread",
)
_STEADY_ITERATIONS = 2
#: Weight of the energy-shape residuals (see :func:`fit_sim`): at 1 a shape error of 1 %
#: counts as much as a time error of 1 %. Chosen on the Perseus A100 curves (held-out
#: clocks: the optimum within one step on 8 of 8, from 6) without raising the held-out
#: power error of the NV-DVFS RTX 8000 kernels past its bound (largest 5 %, from 3 %).
OPTIMUM_WEIGHT = 0.5
#: Extra weight of the rows near a kernel's optimum (e-folding at 2 % above it): they
#: decide which setting a plan picks.
NEAR_OPTIMUM_BOOST = 8.0
#: Weight of the order residuals (see :func:`fit_sim`): a row measured more than
#: :data:`OPTIMUM_ENERGY_TOLERANCE` above its kernel's optimum that the model puts less
#: than half as far above costs this much per unit of the shortfall.
ORDER_WEIGHT = 5.0
#: Share of a row's power limit its measured power must reach, at some setting, for a
#: power-limit sweep to move that kernel (:func:`limit_bound_kernels`). The Zeus RTX 6000
#: kernels split with a gap: those the limit throttles reach 88–100 % of it (their time
#: rises as the limit falls); the rest stay at 56–82 % of even the lowest limit, run
#: unthrottled at every setting, and their energy varies only by measurement noise.
LIMIT_REACH = 0.85
_MIN_KNOB_VALUES = 3
_SPARSE_FROM_KERNELS = 6


class SimFitError(ValueError):
    """Input a fit cannot use; the message names the file or table, the place and the fix."""


@dataclass(frozen=True, eq=False)
class MeasuredTable:
    """Measured runs: one row per kernel and operating point.

    Attributes:
        kernel: Kernel name per row.
        sm_clock_mhz: Set SM clock per row, in MHz (NaN: the GPU's top clock, as in a
            power-limit sweep).
        mem_clock_mhz: Memory clock per row, in MHz (NaN: the top memory clock).
        power_limit_w: Power limit per row, in W (NaN: the board's default).
        time_s: Measured time of one invocation, in s.
        power_w: Measured average power while it runs, in W.
        static_power_w: Measured static (ready, no kernel) power at the row's setting, in
            W (NaN: not measured).
        source: Where the rows come from (file or data set), for messages and reports.
        memory_bound: Kernels the data themselves mark memory-bound (e.g. DRAM activity
            counters); empty when the data do not say.
    """

    kernel: tuple[str, ...]
    sm_clock_mhz: np.ndarray
    mem_clock_mhz: np.ndarray
    power_limit_w: np.ndarray
    time_s: np.ndarray
    power_w: np.ndarray
    static_power_w: np.ndarray
    source: str = "measured table"
    memory_bound: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[Mapping[str, Any]],
        source: str = "measured table",
        memory_bound: Iterable[str] = (),
    ) -> MeasuredTable:
        """Build from mappings with ``kernel``, ``time_s``, ``power_w`` and optionally
        ``sm_clock_mhz``, ``mem_clock_mhz``, ``power_limit_w``, ``static_power_w``.

        Raises:
            SimFitError: naming ``source``, the row and the field for a missing, non-finite
                or non-positive value.
        """
        cols: dict[str, list[float]] = {k: [] for k in _NUMERIC}
        kernels: list[str] = []
        for i, row in enumerate(rows):
            kernels.append(str(row["kernel"]))
            for key in _NUMERIC:
                value = row.get(key)
                required = key in ("time_s", "power_w")
                if value is None:
                    if required:
                        raise SimFitError(f"{source}: row {i + 1}: missing {key}")
                    cols[key].append(math.nan)
                    continue
                number = float(value)
                if not math.isfinite(number) or number <= 0:
                    raise SimFitError(
                        f"{source}: row {i + 1} ({kernels[-1]}): {key} must be a finite "
                        f"number > 0, got {value!r}"
                    )
                cols[key].append(number)
        if not kernels:
            raise SimFitError(f"{source}: no measurements")
        arrays = {k: np.asarray(v, dtype=float) for k, v in cols.items()}
        return cls(tuple(kernels), source=source, memory_bound=frozenset(memory_bound), **arrays)

    def __len__(self) -> int:
        return len(self.kernel)

    @property
    def kernels(self) -> list[str]:
        """Kernel names in order of first appearance."""
        return list(dict.fromkeys(self.kernel))

    @property
    def knob(self) -> str:
        """``"sm_clock_mhz"`` when kernels were swept over SM clocks, else
        ``"power_limit_w"`` (a power-limit sweep at the top clock)."""
        if np.isfinite(self.sm_clock_mhz).all() and len(np.unique(self.sm_clock_mhz)) > 1:
            return "sm_clock_mhz"
        if np.isfinite(self.power_limit_w).all() and len(np.unique(self.power_limit_w)) > 1:
            return "power_limit_w"
        return "sm_clock_mhz"

    def knob_values(self) -> np.ndarray:
        """The swept knob per row (MHz or W)."""
        return np.asarray(getattr(self, self.knob), dtype=float)

    def select(self, mask: np.ndarray) -> MeasuredTable:
        """The rows where ``mask`` is true."""
        idx = np.flatnonzero(mask)
        return replace(
            self,
            kernel=tuple(self.kernel[i] for i in idx),
            **{k: getattr(self, k)[idx] for k in _NUMERIC},
        )

    def of_kernels(self, names: Iterable[str]) -> MeasuredTable:
        """The rows of the named kernels."""
        keep = set(names)
        return self.select(np.array([k in keep for k in self.kernel]))


_NUMERIC = (
    "sm_clock_mhz",
    "mem_clock_mhz",
    "power_limit_w",
    "time_s",
    "power_w",
    "static_power_w",
)


@dataclass(frozen=True)
class SimFit:
    """A fitted GPU: shared physics plus one demand per kernel.

    Attributes:
        physics: The fitted physical parameters.
        demands: Kernel name → fitted demand.
        f_max_mhz: Top SM clock the physics is relative to, in MHz.
        f_min_mhz: Lowest SM clock, in MHz.
        mem_max_mhz: Top memory clock, in MHz (NaN: the table has no memory clocks).
        power_limit_w: Board power limit used where a row names none, in W.
        success: Whether the optimizer reported convergence.
        message: The optimizer's message.
        rms: Root-mean-square relative residual over the fitted rows.
        board_limit: Whether rows without a power limit ran under ``power_limit_w``
            (else: no throttling for them).
    """

    physics: GpuPhysics
    demands: Mapping[str, KernelDemand]
    f_max_mhz: float
    f_min_mhz: float
    mem_max_mhz: float
    power_limit_w: float
    success: bool = True
    message: str = ""
    rms: float = 0.0
    board_limit: bool = False

    def predict(self, table: MeasuredTable) -> dict[str, np.ndarray]:
        """Model time (s), power (W), energy (J) and static power (W) for every row.

        Raises:
            SimFitError: when a row's kernel has no fitted demand.
        """
        missing = sorted(set(table.kernels) - set(self.demands))
        if missing:
            raise SimFitError(f"{table.source}: no fitted demand for kernel(s) {missing}")
        per = {
            f: np.array([getattr(self.demands[k], f) for k in table.kernel])
            for f in (*_PER_KERNEL, *_STEP_FIELDS)
        }
        overlap = float(next(iter(self.demands.values())).overlap_p)
        return _evaluate(self.physics, per, overlap, table, _Setting.of_fit(self))


@dataclass(frozen=True)
class _Setting:
    f_max: float
    f_min: float
    mem_max: float
    limit: float
    board_limit: bool = False

    @classmethod
    def of_fit(cls, fit: SimFit) -> _Setting:
        return cls(
            fit.f_max_mhz, fit.f_min_mhz, fit.mem_max_mhz, fit.power_limit_w, fit.board_limit
        )


def _evaluate(
    phys: GpuPhysics,
    per: Mapping[str, np.ndarray],
    overlap_p: float,
    table: MeasuredTable,
    s: _Setting,
) -> dict[str, np.ndarray]:
    col = {k: np.asarray(v, dtype=float)[:, None] for k, v in per.items()}
    demand = KernelDemand(
        compute_s=col["compute_s"],  # type: ignore[arg-type]  # arrays broadcast (see KernelDemand)
        memory_s=col["memory_s"],  # type: ignore[arg-type]
        activity=col["activity"],  # type: ignore[arg-type]
        mem_activity=col["mem_activity"],  # type: ignore[arg-type]
        overlap_p=overlap_p,
        launch_s=col["launch_s"],  # type: ignore[arg-type]
        **{f: col[f] for f in _STEP_FIELDS if f in col},  # type: ignore[arg-type]
    )
    f_set = np.where(np.isfinite(table.sm_clock_mhz), table.sm_clock_mhz, s.f_max)
    # A row without a limit ran at its set clock: the measured clock is what ran.
    limit = np.where(
        np.isfinite(table.power_limit_w),
        table.power_limit_w,
        s.limit if s.board_limit else np.inf,
    )
    if not np.isfinite(limit).any():
        # Without a limit no slice throttles, and power is linear in activity: one slice
        # gives the same answer as many, in a fraction of the time.
        phys = replace(phys, throttle_phases=1)
    mem_rel = (
        np.where(np.isfinite(table.mem_clock_mhz), table.mem_clock_mhz / s.mem_max, 1.0)
        if math.isfinite(s.mem_max)
        else np.ones_like(f_set)
    )
    out = steady_state_run(
        phys, demand, f_set, limit, s.f_max, s.f_min, _STEADY_ITERATIONS, mem_rel=mem_rel
    )
    return {
        "time_s": out["duration_s"],
        "power_w": out["power_w"],
        "energy_j": out["energy_j"],
        "static_power_w": static_power_w(phys, f_set, s.f_max, out["temp_c"]),
        "temp_c": out["temp_c"],
    }


def _shared_bounds(name: str, profile: GpuProfile) -> tuple[float, float]:
    top = profile.power_limit_max_w
    return {
        "v_min": (0.4, 1.0),
        "knee_frac": (0.1, 0.97),
        "v_gamma": (0.8, 4.0),
        "p_const_w": (0.0, 0.6 * top),
        "p_leak_w": (0.0, 0.6 * top),
        "mem_core_share": (0.0, 1.0),
        "mem_core_p": (1.0, 24.0),
        "overlap_p": (1.0, 24.0),
        "throttle_spread": (0.0, 0.8),
    }[name]


def _shared_start(name: str, phys: GpuPhysics, f_max: float, overlap_p: float) -> float:
    if name == "knee_frac":
        return phys.knee_mhz / f_max
    if name == "overlap_p":
        return overlap_p
    if name == "mem_core_share" and phys.mem_core_share == 0.0:
        return 0.5  # its gradient vanishes at 0 (a p-norm's flat corner): start inside
    return float(getattr(phys, name))


def _with_shared(phys: GpuPhysics, values: Mapping[str, float], f_max: float) -> GpuPhysics:
    changes = {k: float(v) for k, v in values.items() if k not in ("knee_frac", "overlap_p")}
    if "knee_frac" in values:
        changes["knee_mhz"] = float(values["knee_frac"]) * f_max
    return replace(phys, **changes)


def default_free(table: MeasuredTable) -> tuple[str, ...]:
    """Shared parameters a table can determine: throttling only from power-limit sweeps."""
    names = [n for n in _SHARED_NAMES if n != "throttle_spread"]
    if table.knob == "power_limit_w":
        names.append("throttle_spread")
    return tuple(names)


_PER_KERNEL = ("compute_s", "memory_s", "activity", "mem_activity", "launch_s")
_STEP_FIELDS = (
    "mem_step_mhz",
    "mem_step_width_mhz",
    "mem_step_slowdown",
    "v_exposure",
    "stall_activity",
)
#: A kernel's time rising with the SM clock by more than this in a run of neighbouring
#: measured clocks (each rise above :data:`_STEP_EACH_RISE`), with power under
#: :data:`_STEP_POWER_FRACTION` of the board's limit, is a memory step
#: (see :mod:`eopt.sim.physics`). Noise of a locked clock is a fraction of a percent; a
#: board at its power limit throttles and its time wanders by several, so those rows
#: do not count.
STEP_MIN_RISE = 0.03
_STEP_EACH_RISE = 0.01
_STEP_POWER_FRACTION = 0.9
_STEP_SLOWDOWN_MAX = 3.0
_NO_EXTRAS = KernelDemand(0.0, 0.0)  # the optional fields' defaults: none of them in use
# Per-kernel start and bounds; times as fractions of the kernel's fastest measured time.
_PER_X0 = (0.7, 0.3, 0.7, 0.5, 0.02)
_PER_LO = (1e-4, 0.0, 0.02, 0.0, 0.0)
_PER_HI = (1.5, 1.5, 2.0, 2.0, 0.9)


def fit_sim(
    table: MeasuredTable,
    profile: GpuProfile,
    *,
    free: Sequence[str] | None = None,
    start: GpuPhysics | None = None,
    overlap_p: float = 3.0,
    max_nfev: int = 200,
    optimum_weight: float = OPTIMUM_WEIGHT,
    near_optimum_boost: float = NEAR_OPTIMUM_BOOST,
    mem_steps: bool = True,
    order_weight: float = ORDER_WEIGHT,
    exposure: bool = True,
    board_limit: bool = False,
    stall: bool = True,
    free_step_centre: bool = True,
) -> SimFit:
    """Fit shared physics and per-kernel demands to a measured table.

    Minimizes the relative errors of time and power at every row (and of static power
    where measured), and, weighted by ``optimum_weight``, the error of each kernel's
    energy relative to its energy at the measured energy-optimal setting (what a plan
    chooses by: where the energy curve bottoms out and how it rises on either side, which
    per-row errors of a percent or two can move by several clock steps; rows near the
    optimum weigh more; order residuals keep clean losers ranked behind the optimum),
    with :func:`scipy.optimize.least_squares` (trust-region
    reflective, bounded, sparse Jacobian: each kernel's rows depend on its own demand and
    the shared parameters only).

    Assumptions:
        Every row ran long enough (or back to back) for the die to reach its steady
        temperature; a row that names a power limit ran at the top clock (or its set
        one) under that limit, a row without one ran at its set clock (the measured
        clock is what ran: no throttling is modelled for it), or, with ``board_limit``,
        under the board's default limit.
        Clock-tree and core power (``p_clock_w``, ``p_core_w``), memory power and the
        thermal constants stay at ``start``'s values: core power and a kernel's activity
        are not separable from time and power alone.

    Args:
        table: The measurements.
        profile: The GPU's profile: top/lowest SM clock, power limits, memory clock.
        free: Shared parameters to fit (default: :func:`default_free`); ``()`` fits only
            the kernels' demands.
        start: Physics to start from and to keep for parameters not freed (default: the
            profile's).
        overlap_p: Start (or fixed value) of the compute/memory overlap exponent.
        max_nfev: Limit on function evaluations.
        optimum_weight: Weight of the energy-shape residuals against the time and power
            ones (0: time and power only).
        near_optimum_boost: Extra weight of the shape residuals of rows near the
            optimum (× e^(−excess/2 %) where excess is the row's energy above it).
        mem_steps: Give each kernel whose measured time rises with the clock (see
            :func:`find_mem_steps`) a memory step there, its size fitted.
        order_weight: Weight of the order residuals (clock sweeps only): a row measured
            more than :data:`OPTIMUM_ENERGY_TOLERANCE` above its kernel's optimum that the
            model puts less than half as far above costs the shortfall (0: none).
        exposure: On clock sweeps, fit each kernel's ``v_exposure``.
        stall: On clock sweeps, fit each kernel's ``stall_activity``.
        free_step_centre: Fit where inside the unmeasured gap each memory step sits
            (else: its middle).
        board_limit: Rows without a power limit ran under the profile's default limit
            (see :func:`reaches_board_limit`); slower, as throttled rows are bisected.

    Returns:
        The fit.

    Raises:
        SimFitError: for a table a fit cannot use (an unknown parameter name, a kernel
            measured at fewer than 3 settings).
    """
    names = tuple(default_free(table) if free is None else free)
    unknown = sorted(set(names) - set(_SHARED_NAMES))
    if unknown:
        raise SimFitError(f"unknown shared parameter(s) {unknown}; choose from {_SHARED_NAMES}")
    phys0 = start if start is not None else profile.physics
    s = replace(_setting(table, profile), board_limit=board_limit)
    kernels = table.kernels
    rows_of = {k: np.flatnonzero(np.array(table.kernel) == k) for k in kernels}
    for k, rows in rows_of.items():
        if len(rows) < _MIN_KNOB_VALUES:
            raise SimFitError(
                f"{table.source}: kernel {k!r} has {len(rows)} measurement(s); a fit needs "
                f"at least {_MIN_KNOB_VALUES} settings per kernel (sweep more clocks)"
            )
    t_ref = {k: float(np.min(table.time_s[rows])) for k, rows in rows_of.items()}
    per_n = len(_PER_KERNEL)
    x0 = [_shared_start(n, phys0, s.f_max, overlap_p) for n in names]
    bounds = [_shared_bounds(n, profile) for n in names]
    x0 = [float(np.clip(v, lo, hi)) for v, (lo, hi) in zip(x0, bounds, strict=True)]
    lo = [b[0] for b in bounds] + list(_PER_LO) * len(kernels)
    hi = [b[1] for b in bounds] + list(_PER_HI) * len(kernels)
    x0 += list(_PER_X0) * len(kernels)
    if table.knob != "power_limit_w":
        # Idle gaps only show against a power limit; elsewhere they alias memory time.
        for j in range(len(kernels)):
            hi[len(names) + j * per_n + 4] = 1e-9
            x0[len(names) + j * per_n + 4] = 0.0
    kernel_index = np.array([kernels.index(k) for k in table.kernel])
    t_ref_row = np.array([t_ref[k] for k in table.kernel])
    # Memory steps: where each sits comes from the data (a rise is a place, not a
    # gradient); only its size is a parameter, one per stepped kernel, after the rest.
    steps = find_mem_steps(table, profile) if mem_steps else {}
    stepped = [k for k in kernels if k in steps]
    step_base = len(names) + per_n * len(kernels)
    x0 += [min(2.0 * steps[k].rise, _STEP_SLOWDOWN_MAX) for k in stepped]
    lo += [0.0] * len(stepped)
    hi += [_STEP_SLOWDOWN_MAX] * len(stepped)
    step_col = np.array([step_base + stepped.index(k) if k in steps else -1 for k in table.kernel])
    # Voltage exposure: one per kernel, after the steps; only clock sweeps show it.
    exposed = exposure and table.knob == "sm_clock_mhz"
    exp_base = step_base + len(stepped)
    if exposed:
        x0 += [1.0] * len(kernels)
        lo += [0.0] * len(kernels)
        hi += [1.0] * len(kernels)
    exp_col = exp_base + kernel_index
    stalled = stall and table.knob == "sm_clock_mhz"
    stall_base = exp_base + (len(kernels) if exposed else 0)
    if stalled:
        x0 += [0.0] * len(kernels)
        lo += [0.0] * len(kernels)
        hi += [1.0] * len(kernels)
    stall_col = stall_base + kernel_index
    centre_base = stall_base + (len(kernels) if stalled else 0)
    if free_step_centre:
        # Where the rise starts inside its gap is unmeasured; it may also start up to one
        # gap lower (the A40's BLOOM forward draws more power a clock before it slows).
        x0 += [0.0] * len(stepped)
        lo += [-1.0] * len(stepped)
        hi += [0.5] * len(stepped)
    centre_col = np.array(
        [centre_base + stepped.index(k) if k in steps else -1 for k in table.kernel]
    )
    step_fixed = {
        "mem_step_mhz": np.array(
            [steps[k].centre_mhz if k in steps else math.inf for k in table.kernel]
        ),
        "mem_step_width_mhz": np.array(
            [steps[k].width_mhz if k in steps else 0.0 for k in table.kernel]
        ),
    }
    has_static = np.isfinite(table.static_power_w)
    # Each row's reference: its kernel's measured energy-optimal row (per memory clock).
    e_meas = table.time_s * table.power_w
    ref_row = _optimum_rows(table, e_meas)
    shape_meas = e_meas / e_meas[ref_row]
    # Rows within a few percent of the optimum decide which setting a plan picks.
    near = np.exp(-(shape_meas - 1.0) / 0.02)
    shape_weight = optimum_weight * (1.0 + near_optimum_boost * near)
    # Rows a plan must not pick: measurably (> the optimum tolerance) above the minimum.
    loser = shape_meas > 1.0 + OPTIMUM_ENERGY_TOLERANCE
    # On power-limit sweeps they cost the RTX 6000's held-out energy error a point (3.8 →
    # 4.9 %) and moved no optimum: clock sweeps only.
    use_order = optimum_weight > 0 and order_weight > 0 and table.knob == "sm_clock_mhz"

    def unpack(x: np.ndarray) -> tuple[GpuPhysics, float, dict[str, np.ndarray]]:
        shared = dict(zip(names, x[: len(names)], strict=True))
        phys = _with_shared(phys0, shared, s.f_max)
        ov = float(shared.get("overlap_p", overlap_p))
        per_k = x[len(names) : step_base].reshape(len(kernels), per_n)[kernel_index]
        per = {f: per_k[:, i] for i, f in enumerate(_PER_KERNEL)}
        for f in ("compute_s", "memory_s", "launch_s"):
            per[f] = per[f] * t_ref_row
        if stepped:
            per.update(step_fixed)
            per["mem_step_slowdown"] = np.where(step_col >= 0, x[np.maximum(step_col, 0)], 0.0)
        if stepped and free_step_centre:
            shift = np.where(centre_col >= 0, x[np.maximum(centre_col, 0)], 0.0)
            per["mem_step_mhz"] = (
                step_fixed["mem_step_mhz"] + shift * step_fixed["mem_step_width_mhz"]
            )
        if exposed:
            per["v_exposure"] = x[exp_col]
        if stalled:
            per["stall_activity"] = x[stall_col]
        return phys, ov, per

    def residuals(x: np.ndarray) -> np.ndarray:
        phys, ov, per = unpack(x)
        out = _evaluate(phys, per, ov, table, s)
        res = [out["time_s"] / table.time_s - 1.0, out["power_w"] / table.power_w - 1.0]
        if has_static.any():
            res.append(out["static_power_w"][has_static] / table.static_power_w[has_static] - 1)
        if optimum_weight > 0:
            e_model = out["energy_j"]
            shape_model = e_model / e_model[ref_row]
            res.append(shape_weight * (shape_model - shape_meas))
            if use_order:
                # Zero while the model ranks every clean loser behind the optimum.
                short = 0.5 * (shape_meas - 1.0) - (shape_model - 1.0)
                res.append(order_weight * np.where(loser, np.maximum(short, 0.0), 0.0))
        return np.concatenate(res)

    n_rows = len(table)
    n_static = int(has_static.sum())
    n_res = 2 * n_rows + n_static + (n_rows if optimum_weight > 0 else 0)
    n_res += n_rows if use_order else 0
    sparsity = lil_matrix((n_res, len(x0)), dtype=int)
    sparsity[:, : len(names)] = 1
    row_cols = [
        [*range(len(names) + j * per_n, len(names) + (j + 1) * per_n)]
        + ([int(step_col[r])] if step_col[r] >= 0 else [])
        + ([int(exp_col[r])] if exposed else [])
        + ([int(stall_col[r])] if stalled else [])
        + ([int(centre_col[r])] if centre_col[r] >= 0 and free_step_centre else [])
        for r, j in enumerate(kernel_index)
    ]
    for r, cols in enumerate(row_cols):
        sparsity[r, cols] = 1
        sparsity[n_rows + r, cols] = 1
    for i, r in enumerate(np.flatnonzero(has_static)):
        sparsity[2 * n_rows + i, row_cols[r]] = 1  # through the steady temperature
    if optimum_weight > 0:
        for r, cols in enumerate(row_cols):
            sparsity[2 * n_rows + n_static + r, cols] = 1  # the reference row is its kernel's
            if use_order:
                sparsity[3 * n_rows + n_static + r, cols] = 1
    result = least_squares(
        residuals,
        np.array(x0),
        bounds=(lo, hi),
        # Grouped differences pay off only once kernels outnumber the shared parameters.
        jac_sparsity=sparsity if len(kernels) > _SPARSE_FROM_KERNELS else None,
        x_scale="jac",
        ftol=1e-7,
        xtol=1e-7,
        max_nfev=max_nfev,
    )
    phys, ov, _ = unpack(result.x)
    per_kernel = result.x[len(names) : step_base].reshape(len(kernels), per_n)
    demands = {
        k: KernelDemand(
            compute_s=float(p[0] * t_ref[k]),
            memory_s=float(p[1] * t_ref[k]),
            activity=float(p[2]),
            mem_activity=float(p[3]),
            overlap_p=ov,
            launch_s=float(p[4] * t_ref[k]),
            **(
                {
                    "mem_step_mhz": steps[k].centre_mhz
                    + (
                        float(result.x[centre_base + stepped.index(k)]) * steps[k].width_mhz
                        if free_step_centre
                        else 0.0
                    ),
                    "mem_step_width_mhz": steps[k].width_mhz,
                    "mem_step_slowdown": float(result.x[step_base + stepped.index(k)]),
                }
                if k in steps
                else {}
            ),
            v_exposure=float(result.x[exp_base + i]) if exposed else 1.0,
            stall_activity=float(result.x[stall_base + i]) if stalled else 0.0,
        )
        for i, (k, p) in enumerate(zip(kernels, per_kernel, strict=True))
    }
    return SimFit(
        physics=phys,
        demands=demands,
        f_max_mhz=s.f_max,
        f_min_mhz=s.f_min,
        mem_max_mhz=s.mem_max,
        power_limit_w=s.limit,
        success=bool(result.success),
        message=str(result.message),
        rms=float(np.sqrt(np.mean(result.fun**2))),
        board_limit=board_limit,
    )


@dataclass(frozen=True)
class MemStep:
    """Where a kernel's measured time rises with the SM clock (a memory step).

    Attributes:
        centre_mhz: Middle of the rise, in MHz.
        width_mhz: Clock span the rise takes, between the measured clocks on either side
            of it, in MHz.
        rise: Measured time at the top of the rise over the time at its foot, − 1.
    """

    centre_mhz: float
    width_mhz: float
    rise: float


def find_mem_steps(table: MeasuredTable, profile: GpuProfile) -> dict[str, MemStep]:
    """Kernels whose measured time rises with the SM clock, and where.

    Judged from the data alone, per kernel at its top memory clock, over its measured
    clocks in order: a run of neighbouring clocks at each of which time rises by more
    than 1 %, by at least :data:`STEP_MIN_RISE` in all, with power under 90 % of the
    board's default limit at both ends (a board at its limit throttles, and its time
    wanders). The largest such run per kernel is its step. A power-limit sweep has no
    clocks to judge by and gives none.

    Args:
        table: The measurements.
        profile: The GPU's profile (its default power limit).
    """
    if table.knob != "sm_clock_mhz":
        return {}
    sub = table.select(_top_mem_rows(table))
    names = np.array(sub.kernel)
    power_cap = _STEP_POWER_FRACTION * profile.power_limit_default_w
    found: dict[str, MemStep] = {}
    for k in sub.kernels:
        rows = np.flatnonzero(names == k)
        rows = rows[np.argsort(sub.sm_clock_mhz[rows], kind="stable")]
        f, t, p = sub.sm_clock_mhz[rows], sub.time_s[rows], sub.power_w[rows]
        rising = t[1:] / t[:-1] - 1.0 > _STEP_EACH_RISE
        best: MemStep | None = None
        j = 0
        while j < len(rising):
            if not rising[j]:
                j += 1
                continue
            end = j
            while end + 1 < len(rising) and rising[end + 1]:
                end += 1
            a, b = j, end + 1  # the run's foot and top
            rise = float(t[b] / t[a] - 1.0)
            quiet = max(p[a], p[b]) < power_cap
            if quiet and rise >= STEP_MIN_RISE and (best is None or rise > best.rise):
                best = MemStep(float(0.5 * (f[a] + f[b])), float(f[b] - f[a]), rise)
            j = end + 1
        if best is not None:
            found[k] = best
    return found


#: A clock sweep whose power comes within this fraction of the board's default limit ran
#: into it: see :func:`reaches_board_limit`.
NEAR_LIMIT_FRACTION = 0.9


def reaches_board_limit(table: MeasuredTable, profile: GpuProfile) -> bool:
    """Whether a clock sweep's rows without a power limit ran into the board's default one.

    True when some such row drew at least :data:`NEAR_LIMIT_FRACTION` of
    ``profile.power_limit_default_w``: there the board held its power by lowering the
    clock (the Perseus A40 stages sit at 290–300 W from 1500 MHz up, with time no longer
    falling), which a fit must model (``fit_sim(..., board_limit=True)``) or it bends its
    voltage curve and static power to explain it, and with them every kernel's
    energy-optimal clock.
    """
    free = ~np.isfinite(table.power_limit_w)
    if table.knob != "sm_clock_mhz" or not free.any():
        return False
    return bool(np.max(table.power_w[free]) >= NEAR_LIMIT_FRACTION * profile.power_limit_default_w)


def _optimum_rows(table: MeasuredTable, energy_j: np.ndarray) -> np.ndarray:
    """Per row, the row of least energy among its kernel's rows at its memory clock."""
    mem = np.where(np.isfinite(table.mem_clock_mhz), table.mem_clock_mhz, -1.0)
    groups: dict[tuple[str, float], list[int]] = {}
    for r, key in enumerate(zip(table.kernel, mem, strict=True)):
        groups.setdefault(key, []).append(r)
    ref = np.empty(len(table), dtype=int)
    for rows in groups.values():
        ref[rows] = rows[int(np.argmin(energy_j[rows]))]
    return ref


def _setting(table: MeasuredTable, profile: GpuProfile) -> _Setting:
    mem = table.mem_clock_mhz[np.isfinite(table.mem_clock_mhz)]
    clocks = table.sm_clock_mhz[np.isfinite(table.sm_clock_mhz)]
    # A GPU measured above the profile's top clock (an overclocked board) tops out there.
    top = max(profile.max_sm_clock_mhz, float(clocks.max()) if clocks.size else 0.0)
    return _Setting(
        f_max=top,
        f_min=profile.min_sm_clock_mhz,
        mem_max=float(mem.max()) if mem.size else math.nan,
        limit=profile.power_limit_default_w,
    )


@dataclass(frozen=True)
class HoldoutError:
    """How well a fit predicts data it did not see.

    Attributes:
        holdout: ``"clocks"`` (interior knob values held out) or ``"kernels"`` (whole
            kernels held out; their demand is then fitted at four anchor settings only
            (both ends and two between), with the physics fixed, and judged at the others).
        n_kernels: Kernels in the table.
        n_settings: Distinct knob values (SM clocks or power limits).
        n_held: Held-out rows judged.
        power_err: Mean |relative error| of average power on the held-out rows.
        time_err: Mean |relative error| of time.
        energy_err: Mean |relative error| of energy.
        power_err_max: Largest |relative error| of power.
        time_err_max: Largest |relative error| of time.
    """

    holdout: str
    n_kernels: int
    n_settings: int
    n_held: int
    power_err: float
    time_err: float
    energy_err: float
    power_err_max: float
    time_err_max: float

    def to_dict(self) -> dict[str, Any]:
        """Plain mapping (for JSON and profile files)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _held_knob_values(values: np.ndarray) -> np.ndarray:
    distinct = np.unique(values)
    interior = distinct[1:-1]
    # Every other interior value on short sweeps, every third on long ones: the fit keeps
    # both ends and enough clocks between them.
    return interior[0::2] if len(distinct) <= 6 else interior[0::3]


def holdout_error(
    table: MeasuredTable,
    profile: GpuProfile,
    holdout: str = "clocks",
    *,
    folds: int = 4,
    **fit_options: Any,
) -> HoldoutError:
    """Fit without part of ``table`` and measure the error on that part.

    Args:
        table: The measurements.
        profile: The GPU's profile (clock range, limits).
        holdout: ``"clocks"`` or ``"kernels"`` (see :class:`HoldoutError`).
        folds: Kernel folds for ``"kernels"``.
        **fit_options: Passed to :func:`fit_sim`.

    Raises:
        SimFitError: for an unknown ``holdout`` or a table too small to hold data out of.
    """
    if holdout not in HOLDOUTS:
        raise SimFitError(f"unknown holdout {holdout!r}; choose one of {', '.join(HOLDOUTS)}")
    knob = table.knob_values()
    n_settings = len(np.unique(knob))
    if n_settings < 4:
        raise SimFitError(
            f"{table.source}: {n_settings} distinct settings; holding some out needs at least 4"
        )
    pred_t: list[np.ndarray] = []
    pred_p: list[np.ndarray] = []
    meas: list[MeasuredTable] = []
    if holdout == "clocks":
        held = np.isin(knob, _held_knob_values(knob))
        fit = fit_sim(table.select(~held), profile, **fit_options)
        test = table.select(held)
        out = fit.predict(test)
        pred_t.append(out["time_s"])
        pred_p.append(out["power_w"])
        meas.append(test)
    else:
        kernels = table.kernels
        if len(kernels) < 2:
            raise SimFitError(f"{table.source}: holding kernels out needs at least 2 kernels")
        k_folds = min(folds, len(kernels))
        for fold in range(k_folds):
            out_k = kernels[fold::k_folds]
            train = table.of_kernels(k for k in kernels if k not in out_k)
            fit = fit_sim(train, profile, **fit_options)
            test_all = table.of_kernels(out_k)
            t_knob = test_all.knob_values()
            distinct = np.unique(t_knob)
            n = len(distinct)
            anchors = distinct[sorted({0, n // 3, (2 * n) // 3, n - 1})]
            is_anchor = np.isin(t_knob, anchors)
            ov = float(next(iter(fit.demands.values())).overlap_p)
            # Four anchors say little about where the energy curve bottoms out.
            own = fit_sim(
                test_all.select(is_anchor),
                profile,
                free=(),
                start=fit.physics,
                overlap_p=ov,
                optimum_weight=0.0,
            )
            test = test_all.select(~is_anchor)
            out = own.predict(test)
            pred_t.append(out["time_s"])
            pred_p.append(out["power_w"])
            meas.append(test)
    t_meas = np.concatenate([m.time_s for m in meas])
    p_meas = np.concatenate([m.power_w for m in meas])
    t_pred, p_pred = np.concatenate(pred_t), np.concatenate(pred_p)
    t_err = np.abs(t_pred / t_meas - 1.0)
    p_err = np.abs(p_pred / p_meas - 1.0)
    e_err = np.abs(t_pred * p_pred / (t_meas * p_meas) - 1.0)
    return HoldoutError(
        holdout=holdout,
        n_kernels=len(table.kernels),
        n_settings=n_settings,
        n_held=len(t_meas),
        power_err=float(p_err.mean()),
        time_err=float(t_err.mean()),
        energy_err=float(e_err.mean()),
        power_err_max=float(p_err.max()),
        time_err_max=float(t_err.max()),
    )


def _top_mem_rows(table: MeasuredTable) -> np.ndarray:
    mem = table.mem_clock_mhz
    if not np.isfinite(mem).any():
        return np.ones(len(table), dtype=bool)
    top = {k: np.nanmax(mem[np.array(table.kernel) == k]) for k in table.kernels}
    return np.array(
        [m == top[k] or not math.isfinite(m) for k, m in zip(table.kernel, mem, strict=True)]
    )


def summary_metrics(table: MeasuredTable, fit: SimFit) -> dict[str, Any]:
    """Where energy is lowest and how memory-bound kernels slow down: data against model.

    Both are judged at the table's own settings (at its top memory clock):

    * ``eopt_frac_data`` / ``eopt_frac_sim``: median over kernels of the knob value with
      the least energy, as a fraction of the highest value measured.
    * ``mem_slowdown_data`` / ``mem_slowdown_sim``: median over memory-bound kernels of
      time at the lowest clock over time at the highest (``None`` without any). Memory-
      bound kernels are those the data mark (``table.memory_bound``), else those
      :func:`memory_bound_kernels` finds.
    * ``lowest_frac``: the lowest knob value over the highest.
    """
    sub = table.select(_top_mem_rows(table))
    model = fit.predict(sub)
    knob = sub.knob_values()
    top = float(knob.max())
    names = np.array(sub.kernel)
    e_data = sub.time_s * sub.power_w
    frac_data, frac_sim, slow_data, slow_sim = [], [], [], []
    mem_bound = set(table.memory_bound) or set(memory_bound_kernels(sub))
    for k in sub.kernels:
        rows = np.flatnonzero(names == k)
        kv = knob[rows]
        frac_data.append(kv[int(np.argmin(e_data[rows]))] / top)
        frac_sim.append(kv[int(np.argmin(model["energy_j"][rows]))] / top)
        if k in mem_bound:
            lo, hi = rows[int(np.argmin(kv))], rows[int(np.argmax(kv))]
            slow_data.append(sub.time_s[lo] / sub.time_s[hi])
            slow_sim.append(model["time_s"][lo] / model["time_s"][hi])
    return {
        "eopt_frac_data": float(np.median(frac_data)),
        "eopt_frac_sim": float(np.median(frac_sim)),
        "mem_slowdown_data": float(np.median(slow_data)) if slow_data else None,
        "mem_slowdown_sim": float(np.median(slow_sim)) if slow_sim else None,
        "n_memory_bound": len(slow_data),
        "lowest_frac": float(knob.min()) / top,
    }


def memory_bound_kernels(table: MeasuredTable) -> list[str]:
    """Kernels whose measured time hardly follows the SM clock near the top.

    Judged from the data alone (not from a fit): between the top clock and the measured
    clock nearest 0.7 of it, a compute-bound kernel's time grows like 1/clock; a kernel
    whose time grows by less than a third of that is memory-bound. A power-limit sweep
    has no clocks to judge by and gives none.
    """
    if table.knob != "sm_clock_mhz":
        return []
    sub = table.select(_top_mem_rows(table))
    names = np.array(sub.kernel)
    found = []
    for k in sub.kernels:
        rows = np.flatnonzero(names == k)
        f, t = sub.sm_clock_mhz[rows], sub.time_s[rows]
        top = int(np.argmax(f))
        mid = int(np.argmin(np.abs(f - 0.7 * f[top])))
        if mid == top:
            continue
        compute_bound_growth = f[top] / f[mid] - 1.0
        if t[mid] / t[top] - 1.0 < compute_bound_growth / 3.0:
            found.append(k)
    return found


def kernel_label(name: str, impl: str, workload: Mapping[str, Any]) -> str:
    """One name for a (kernel, implementation, workload): ``gemm[cublas]{m=4096}``."""
    label = name if impl in ("", "default") else f"{name}[{impl}]"
    if workload:
        label += "{" + ",".join(f"{k}={workload[k]}" for k in sorted(workload)) + "}"
    return label


def read_library_table(path: str | os.PathLike[str]) -> tuple[MeasuredTable, str | None]:
    """A signature library as a measured table, and the GPU model its signatures name.

    Each signature is one row: kernel = name, implementation and workload; the setting
    from ``op_point`` (``sm_clock_mhz``, ``mem_clock_mhz``, ``power_limit_w``); power =
    ``static_power + dynamic_energy / time``; static power as measured.

    Raises:
        SimFitError: naming the file, the line and the fix when the library cannot be
            read (see :func:`eopt.model.library.read_library`), is empty, or holds a
            signature without an SM clock or power limit.
    """
    from eopt.model.library import read_library_lines

    p = Path(path)
    try:
        numbered = read_library_lines(p)
    except ValueError as exc:  # LibraryError: already names file, line and field
        raise SimFitError(str(exc)) from None
    if not numbered:
        raise SimFitError(
            f"{p}: no signatures; measure some first, e.g. `eopt sweep KERNEL --clocks all -o {p}`"
        )
    rows: list[dict[str, Any]] = []
    models: list[str] = []
    for lineno, sig in numbered:
        op = sig.op_point
        if op.sm_clock_mhz is None and op.power_limit_w is None:
            raise SimFitError(
                f"{p}:{lineno}: signature {sig.name!r} has no op_point.sm_clock_mhz or "
                "power_limit_w; fitting needs signatures swept over SM clocks or power "
                "limits (e.g. `eopt sweep KERNEL --clocks all`)"
            )
        if sig.time <= 0 or sig.static_power + sig.dynamic_energy / sig.time <= 0:
            raise SimFitError(f"{p}:{lineno}: signature {sig.name!r} has no positive power")
        rows.append(
            {
                "kernel": kernel_label(sig.name, sig.impl, sig.workload),
                "sm_clock_mhz": op.sm_clock_mhz,
                "mem_clock_mhz": op.mem_clock_mhz,
                "power_limit_w": op.power_limit_w,
                "time_s": sig.time,
                "power_w": sig.static_power + sig.dynamic_energy / sig.time,
                "static_power_w": sig.static_power if sig.static_power > 0 else None,
            }
        )
        model = sig.meta.get("device_model") if isinstance(sig.meta, Mapping) else None
        if isinstance(model, str):
            models.append(model)
    table = MeasuredTable.from_rows(rows, source=str(p))
    counts = {k: table.kernel.count(k) for k in table.kernels}
    thin = sorted(k for k, n in counts.items() if n < _MIN_KNOB_VALUES)
    if thin:
        raise SimFitError(
            f"{p}: kernel(s) {thin[:3]} measured at fewer than {_MIN_KNOB_VALUES} settings; "
            "sweep at least 3 SM clocks per kernel (e.g. `eopt sweep KERNEL --clocks all`)"
        )
    model = max(set(models), key=models.count) if models else None
    return table, model


def profile_document(
    fit: SimFit,
    base: str,
    base_profile: GpuProfile,
    model: str,
    provenance: str,
    errors: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A GPU profile (``kind: gpu``) holding a fit, based on a packaged profile.

    The result, written as JSON or YAML, is a profile the simulator loads by path
    (``SimulatedGPU("my-gpu.json")``, ``eopt sweep --sim-model my-gpu.json``): the
    clock table, limits and peaks of ``base`` (widened to the fitted top clock) and the
    fitted physics.
    """
    phys = {k: _round(v) for k, v in fit.physics.to_dict().items()}
    phys["throttle_phases"] = int(fit.physics.throttle_phases)
    doc: dict[str, Any] = {"kind": "gpu", "base": base, "model": model}
    if fit.f_max_mhz != base_profile.max_sm_clock_mhz:
        clocks = sorted(set(base_profile.sm_clocks_mhz) | {fit.f_max_mhz}, reverse=True)
        doc["sm_clocks_mhz"] = [c for c in clocks if c <= fit.f_max_mhz]
    doc["physics"] = phys
    doc["provenance"] = provenance
    if errors is not None:
        doc["fit"] = dict(errors)
    doc["fitted_kernels"] = {
        k: {
            f: _round(getattr(d, f))
            for f in (*_PER_KERNEL, "overlap_p", *_STEP_FIELDS)
            if f in (*_PER_KERNEL, "overlap_p") or getattr(d, f) != getattr(_NO_EXTRAS, f)
        }
        for k, d in fit.demands.items()
    }
    return doc


def _round(value: float, digits: int = 6) -> float:
    return float(f"{float(value):.{digits - 1}e}")


@dataclass(frozen=True)
class OptimumCheck:
    """Whether a fit picks a kernel's energy-optimal setting.

    Attributes:
        kernel: Kernel name.
        data_setting: The measured energy-optimal knob value (MHz or W).
        fit_setting: The knob value the fit's energies are lowest at (among the data's).
        steps: ``fit_setting``'s position minus ``data_setting``'s among the kernel's
            measured values (0: the same setting).
        extra_energy: Measured energy at ``fit_setting`` over the measured minimum, − 1
            (what running at the fit's choice costs).
        ok: Within one step, or within :data:`OPTIMUM_ENERGY_TOLERANCE` of the minimum.
    """

    kernel: str
    data_setting: float
    fit_setting: float
    steps: int
    extra_energy: float
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain mapping (for JSON)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


#: A fit's optimum is good enough when running there costs at most this much more
#: measured energy than the measured optimum (or when it is within one setting of it).
OPTIMUM_ENERGY_TOLERANCE = 0.01


def optimum_checks(table: MeasuredTable, fit: SimFit) -> list[OptimumCheck]:
    """Per kernel (at its top memory clock), the fit's energy-optimal setting against the data's.

    Judged over every setting the table holds, held-out ones included: a fit made
    without some clocks is asked to pick among all of them.
    """
    sub = table.select(_top_mem_rows(table))
    model = fit.predict(sub)["energy_j"]
    knob = sub.knob_values()
    e_data = sub.time_s * sub.power_w
    names = np.array(sub.kernel)
    out = []
    for k in sub.kernels:
        rows = np.flatnonzero(names == k)
        rows = rows[np.argsort(knob[rows], kind="stable")]
        i_data, i_fit = int(np.argmin(e_data[rows])), int(np.argmin(model[rows]))
        extra = float(e_data[rows][i_fit] / e_data[rows][i_data] - 1.0)
        steps = i_fit - i_data
        out.append(
            OptimumCheck(
                kernel=k,
                data_setting=float(knob[rows][i_data]),
                fit_setting=float(knob[rows][i_fit]),
                steps=steps,
                extra_energy=extra,
                ok=abs(steps) <= 1 or extra <= OPTIMUM_ENERGY_TOLERANCE,
            )
        )
    return out


def u_shaped(energy_j: np.ndarray, knob: np.ndarray) -> bool:
    """Whether energy over a knob bottoms out inside the range (both ends above the minimum).

    Args:
        energy_j: Energies, J, one per knob value.
        knob: The knob values (any order).
    """
    order = np.argsort(knob, kind="stable")
    e = np.asarray(energy_j, dtype=float)[order]
    i = int(np.argmin(e))
    return 0 < i < e.size - 1


def limit_bound_kernels(table: MeasuredTable, reach: float = LIMIT_REACH) -> list[str]:
    """The kernels of a power-limit sweep whose power reaches its limit at some setting.

    A kernel whose measured power stays under ``reach`` × the limit at every setting is
    never throttled, so the sweep does not change how it runs: its energy over the limit
    is flat, and any shape the data show (an interior minimum included) is measurement
    noise that no model of the limit should reproduce.

    Args:
        table: A power-limit sweep (every row names its limit, in W).
        reach: Share of the limit (0–1) the measured power must reach at some setting.

    Returns:
        The bound kernels, in the table's order; every kernel if the table is no
        power-limit sweep.
    """
    if table.knob != "power_limit_w":
        return list(table.kernels)
    names = np.asarray(table.kernel)
    reached = table.power_w >= reach * table.power_limit_w
    return [k for k in table.kernels if bool(np.any(reached[names == k]))]


def cannot_serve(table: MeasuredTable, profile: GpuProfile) -> list[str]:
    """What a fit to ``table`` cannot answer for, in plain words (one line each).

    Args:
        table: The measurements the fit is made from.
        profile: The GPU profile the fit starts from (its clock table).
    """
    lines = []
    kernels = ", ".join(table.kernels[:6]) + (" …" if len(table.kernels) > 6 else "")
    lines.append(
        f"kernels it never saw: only the {len(table.kernels)} measured ({kernels}) have a "
        "fitted demand; any other kernel runs on the profile's catalogue demand, whose "
        "error this fit says nothing about (judge one with --holdout kernels)"
    )
    if table.knob == "power_limit_w":
        limits = table.power_limit_w[np.isfinite(table.power_limit_w)]
        lines.append(
            f"power limits outside {limits.min():.0f}–{limits.max():.0f} W and locked SM "
            "clocks: the fit only saw power-limit sweeps, so clocks are extrapolated"
        )
    else:
        clocks = table.sm_clock_mhz[np.isfinite(table.sm_clock_mhz)]
        lo, hi = float(clocks.min()), float(clocks.max())
        outside = [f for f in profile.sm_clocks_mhz if f < lo - 1e-6 or f > hi + 1e-6]
        if outside:
            lines.append(
                f"SM clocks outside {lo:.0f}–{hi:.0f} MHz ({len(outside)} of the profile's "
                f"{len(profile.sm_clocks_mhz)}): never measured, extrapolated"
            )
        lines.append("power limits: no row ran under a limit, so throttling is the start profile's")
        if reaches_board_limit(table, profile):
            free = ~np.isfinite(table.power_limit_w)
            hot = table.power_w[free] >= NEAR_LIMIT_FRACTION * profile.power_limit_default_w
            f_hot = float(np.min(table.sm_clock_mhz[free][hot]))
            lines.append(
                f"clocks from {f_hot:.0f} MHz up ran into the board's "
                f"{profile.power_limit_default_w:.0f} W limit: the fit throttles them there, "
                "so under another limit they are extrapolated"
            )
        for k, step in find_mem_steps(table, profile).items():
            lo = step.centre_mhz - step.width_mhz / 2
            lines.append(
                f"{k}: its time rises {100 * step.rise:.0f} % between {lo:.0f} and "
                f"{lo + step.width_mhz:.0f} MHz (a memory step); clocks between those two "
                "were not measured, and where in between it starts is the fit's guess"
            )
    return lines
