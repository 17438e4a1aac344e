"""Repeated measurement of one (κ, ω) cell into an energy signature.

The protocol, in order:

1. **Static power** (:func:`measure_static_power`): after the operating point is set, the
   ready device idles for a settling time, then its draw is measured over an idle window
   of at least ten sensor periods. It is the ``s`` of the signature, so that
   ``d = E − s·T`` is the energy the kernel adds.
2. **Calibration and warm-up**: one invocation is timed; invocations are then grouped into
   windows of ``k`` back-to-back calls so that each window lasts at least ``min_window_s``
   (ten sensor periods by default: a power sensor that refreshes every 100 ms cannot
   resolve anything shorter). ``warmup`` windows are run and discarded; in the last one
   each invocation is synchronised and timed on its own (for the single-run variance).
3. **Measured windows**, back to back (or separated by ``cooldown_s``), until both
   ``min_runs`` windows and ``min_time_s`` of measured time are reached (or a budget runs
   out, which is flagged). Window energies are read off the meter's trace only after the
   last window, so the device never idles between windows while the meter waits for a
   sample.
4. **Statistics** on the per-invocation values of each window: mean, single-run variance,
   medians, bootstrap CIs, warm-up drift and state-change tests. Anything suspicious is
   recorded in ``meta["flags"]``; no run is ever dropped.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eopt.calculus.signature import Signature
from eopt.devices.base import Device
from eopt.devices.operating_point import OperatingPoint
from eopt.measure.meter import Meter, WindowEnergy
from eopt.measure.stats import Summary, detect_state_change, detect_warmup_drift, summarize

__all__ = [
    "CellRuns",
    "RepeatPolicy",
    "StaticPower",
    "measure_signature",
    "measure_static_power",
    "run_repeats",
    "signature_from_runs",
]


# Single runs timed one by one in the last warm-up window (enough for their variance).
_MAX_TIMED_RUNS = 2000


@dataclass(frozen=True)
class RepeatPolicy:
    """How often and how long to repeat a cell.

    Attributes:
        warmup: Windows run and discarded before measuring.
        min_runs: Minimum measured windows.
        min_time_s: Minimum total measured time, in s.
        max_runs: Stop after this many windows even if ``min_time_s`` is not reached.
        max_time_s: Stop after this much measured time, in s.
        cooldown_s: Idle time between windows, in s (0: back to back).
        min_window_s: Shortest window, in s; default ten sensor update periods.
        static_idle_s: Length of the idle window that measures static power, in s;
            default ten sensor update periods.
        settle_s: Idle time before the static window (clocks and sensor settle), in s.
        confidence: Level of the bootstrap intervals.
        n_boot: Bootstrap resamples.
        seed: Seed of the bootstrap and permutation tests.
        alpha: Significance level of the drift and state-change tests.
        min_effect: Smallest relative change the tests flag.
        max_inner_repeats: Most invocations in one window. A kernel so short that
            ``min_window_s`` would need more gets shorter windows, flagged as such
            (the simulator spends CPU time on every invocation: 10⁵ of them per window
            would take minutes a cell).
    """

    warmup: int = 2
    min_runs: int = 10
    min_time_s: float = 1.0
    max_runs: int = 200
    max_time_s: float = 300.0
    cooldown_s: float = 0.0
    min_window_s: float | None = None
    static_idle_s: float | None = None
    settle_s: float = 0.5
    confidence: float = 0.95
    n_boot: int = 2000
    seed: int = 0
    alpha: float = 0.01
    min_effect: float = 0.01
    max_inner_repeats: int = 20_000

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError(f"warmup must be ≥ 0, got {self.warmup}")
        if self.min_runs < 1:
            raise ValueError(f"min_runs must be ≥ 1, got {self.min_runs}")
        if self.max_runs < self.min_runs:
            raise ValueError(f"max_runs ({self.max_runs}) < min_runs ({self.min_runs})")
        for name in ("min_time_s", "max_time_s", "cooldown_s", "settle_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.max_inner_repeats < 1:
            raise ValueError(f"max_inner_repeats must be ≥ 1, got {self.max_inner_repeats}")


@dataclass(frozen=True)
class StaticPower:
    """The ready device's draw at the current operating point.

    Attributes:
        power_w: Mean power over the idle window, in W.
        window: The idle window's energy reading.
    """

    power_w: float
    window: WindowEnergy

    def to_meta(self) -> dict[str, Any]:
        """What goes into ``Signature.meta["static"]``."""
        return {
            "power_w": self.power_w,
            "idle_s": self.window.duration_s,
            "error_w": self.window.error_j / self.window.duration_s
            if self.window.duration_s > 0
            else 0.0,
        }


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def measure_static_power(
    device: Device, meter: Meter, idle_s: float | None = None, settle_s: float = 0.5
) -> StaticPower:
    """Measure the ready device's draw: idle ``settle_s``, then measure ``idle_s`` of idle.

    Args:
        device: The device, already at the operating point.
        meter: A started meter on it.
        idle_s: Measured idle time, in s; default ten sensor periods.
        settle_s: Idle time before measuring, in s.
    """
    window_s = idle_s if idle_s is not None else 10 * meter.sensor_period_s
    if not window_s > 0:
        raise ValueError(f"static idle window must be positive, got {window_s}")
    device.synchronize()
    device.clock.sleep(settle_s)
    t0 = meter.mark()
    device.clock.sleep(window_s)
    t1 = meter.mark()
    window = meter.energy(t0, t1)
    return StaticPower(window.mean_power_w, window)


@dataclass(frozen=True)
class CellRuns:
    """The raw outcome of :func:`run_repeats`: per-invocation values of every window.

    Attributes:
        time_s: Per-invocation time of each measured window (window time / k), in s.
        energy_j: Per-invocation energy of each window (window energy / k), in J.
        inner_repeats: k, invocations per window.
        windows: The windows' energy readings.
        warmup_windows: Windows run and discarded.
        budget_reached: True when ``max_runs`` / ``max_time_s`` stopped the loop before
            ``min_runs`` and ``min_time_s`` were both met.
        started_at: UTC ISO time when the cell started.
        finished_at: UTC ISO time when it finished.
        meter: The meter's description.
        single_times_s: Times of single invocations, each synchronised, from the last
            warm-up window (empty when ``k`` is 1 or there is no warm-up), in s.
    """

    time_s: np.ndarray
    energy_j: np.ndarray
    inner_repeats: int
    windows: tuple[WindowEnergy, ...]
    warmup_windows: int
    budget_reached: bool
    started_at: str
    finished_at: str
    meter: dict[str, Any] = field(default_factory=dict)
    single_times_s: np.ndarray = field(default_factory=lambda: np.zeros(0))


def run_repeats(
    device: Device,
    meter: Meter,
    run: Callable[[], object],
    policy: RepeatPolicy | None = None,
    sync: Callable[[], object] | None = None,
) -> CellRuns:
    """Warm up, then run windows of ``k`` invocations until the policy is satisfied.

    Args:
        device: The device the invocations run on.
        meter: A started meter on it.
        run: One invocation (returns when its work is queued or done).
        policy: Repeat counts and durations.
        sync: Waits for queued work (default ``device.synchronize``); called before each
            window closes, so asynchronous launches are charged to their window.
    """
    pol = policy or RepeatPolicy()
    wait = sync if sync is not None else device.synchronize
    started = _utc_now()
    min_window = pol.min_window_s if pol.min_window_s is not None else 10 * meter.sensor_period_s

    # Calibrate: time one invocation (it also counts as warm-up).
    wait()
    t0 = meter.mark()
    run()
    wait()
    single = meter.mark() - t0
    k = max(1, math.ceil(min_window / single)) if single > 0 else 1
    k = min(k, pol.max_inner_repeats)

    def one_window() -> tuple[float, float]:
        wait()
        a = meter.mark()
        for _ in range(k):
            run()
        wait()
        return a, meter.mark()

    for _ in range(pol.warmup - 1):
        one_window()
    singles: list[float] = []
    if pol.warmup >= 1:
        # The last warm-up window times each invocation on its own: the spread of single
        # runs, which windows of k runs average away (see signature_from_runs).
        clock = device.clock
        timed = min(k, _MAX_TIMED_RUNS)
        for _ in range(timed):
            wait()
            a = clock.now()
            run()
            wait()
            singles.append(clock.now() - a)
        for _ in range(k - timed):
            run()

    marks: list[tuple[float, float]] = []
    measured = 0.0
    budget = False
    while True:
        if pol.cooldown_s > 0 and marks:
            device.clock.sleep(pol.cooldown_s)
        a, b = one_window()
        marks.append((a, b))
        measured += b - a
        if len(marks) >= pol.min_runs and measured >= pol.min_time_s:
            break
        if len(marks) >= pol.max_runs or measured >= pol.max_time_s:
            budget = True
            break

    windows = tuple(meter.energy(a, b) for a, b in marks)
    return CellRuns(
        time_s=np.array([w.duration_s / k for w in windows]),
        energy_j=np.array([w.energy_j / k for w in windows]),
        inner_repeats=k,
        windows=windows,
        warmup_windows=pol.warmup,
        budget_reached=budget,
        started_at=started,
        finished_at=_utc_now(),
        meter=meter.describe(),
        single_times_s=np.array(singles if k > 1 else []),
    )


def _flag(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"code": code, "message": message, **details}


def _quality_flags(runs: CellRuns, pol: RepeatPolicy, sensor_period_s: float) -> list[dict]:
    """Drift, state change, budget and resolution flags (never drops a run)."""
    flags: list[dict[str, Any]] = []
    for quantity, values in (("time", runs.time_s), ("energy", runs.energy_j)):
        drift = detect_warmup_drift(values, alpha=pol.alpha, min_effect=pol.min_effect)
        if drift.detected:
            flags.append(
                _flag(
                    "warmup_drift",
                    f"{quantity} trends by {drift.relative_change:+.1%} over the first "
                    f"{drift.runs} runs (p={drift.p_value:.2g}); more warm-up may be needed",
                    quantity=quantity,
                    runs=drift.runs,
                    relative_change=drift.relative_change,
                    p_value=drift.p_value,
                )
            )
        change = detect_state_change(
            values, alpha=pol.alpha, min_effect=pol.min_effect, seed=pol.seed
        )
        if change.detected:
            blocks = ", ".join(
                f"runs {s.start}–{s.stop - 1}: {s.mean:.4g}" for s in change.segments
            )
            flags.append(
                _flag(
                    "state_change",
                    f"{quantity} differs between blocks of runs ({blocks}); the machine "
                    "state changed during the cell — all runs are kept in the statistics",
                    quantity=quantity,
                    segments=[s.to_dict() for s in change.segments],
                    p_values=list(change.p_values),
                )
            )
    if runs.budget_reached:
        flags.append(
            _flag(
                "budget_reached",
                f"stopped after {len(runs.windows)} windows: max_runs or max_time_s reached "
                "before min_runs and min_time_s",
            )
        )
    short = sum(1 for w in runs.windows if w.short)
    rel_error = float(np.mean([w.relative_error for w in runs.windows]))
    if not short and rel_error > 0.02:
        flags.append(
            _flag(
                "large_energy_error",
                f"energy error estimated at ±{rel_error:.1%} per window: the load changes "
                f"faster than the {runs.meter.get('power_field')} power field resolves; use "
                "the energy counter or an averaging power field where the GPU has one",
                relative_error=rel_error,
            )
        )
    if short and runs.windows[0].method == "sampler":
        rel = float(np.mean([w.relative_error for w in runs.windows]))
        flags.append(
            _flag(
                "short_window",
                f"{short} of {len(runs.windows)} windows are shorter than ten sensor periods "
                f"({10 * sensor_period_s:.3g} s); energy error up to ±{rel:.1%} per window",
                relative_error=rel,
            )
        )
    if runs.inner_repeats >= pol.max_inner_repeats:
        flags.append(
            _flag(
                "inner_repeats_capped",
                f"one invocation is so short that a window holds the most allowed, "
                f"{pol.max_inner_repeats} invocations ({runs.time_s.mean() * 1e6:.3g} µs "
                "each); windows are shorter than asked; measure a larger workload",
                inner_repeats=runs.inner_repeats,
            )
        )
    return flags


def _single_run_variances(
    runs: CellRuns, t_sum: Summary, e_sum: Summary
) -> tuple[float, float, dict[str, Any]]:
    """Single-run variances of time and energy from windows of ``k`` runs.

    A window's per-run mean varies by the within-window spread of single runs over ``k``
    plus any slower, window-level variation (thermal state, clocks):
    ``Var(window mean) = within / k + between``. A single run varies by
    ``within + between``. ``within`` comes from the individually timed runs of the last
    warm-up window; for energy, which a sensor cannot resolve per run, it is taken as the
    time spread at the mean power (``P̄² · within_T``: a run that takes longer at the same
    power spends proportionally more). Without timed runs, runs are assumed independent
    (``k · Var(window mean)``).
    """
    k = runs.inner_repeats
    if k == 1:
        return t_sum.var, e_sum.var, {"model": "single runs", "k": 1}
    singles = runs.single_times_s
    if singles.size < 2:
        return (
            k * t_sum.var,
            k * e_sum.var,
            {"model": "independent runs: k × Var(window mean)", "k": k},
        )
    within_t = float(np.var(singles, ddof=1))
    power = e_sum.mean / t_sum.mean if t_sum.mean > 0 else 0.0
    within_e = power**2 * within_t
    between_t = max(0.0, t_sum.var - within_t / k)
    between_e = max(0.0, e_sum.var - within_e / k)
    return (
        within_t + between_t,
        within_e + between_e,
        {
            "model": "within + between windows",
            "k": k,
            "timed_runs": int(singles.size),
            "within_time_s2": within_t,
            "between_time_s2": between_t,
            "within_energy_j2": within_e,
            "between_energy_j2": between_e,
        },
    )


def signature_from_runs(
    name: str,
    runs: CellRuns,
    static: StaticPower,
    *,
    device: Device,
    impl: str = "default",
    workload: Mapping[str, Any] | None = None,
    op_point: OperatingPoint | None = None,
    policy: RepeatPolicy | None = None,
    backend: str | None = None,
    extra_meta: Mapping[str, Any] | None = None,
) -> Signature:
    """Turn repeated runs and a static-power reading into a :class:`Signature`.

    ``time`` and ``dynamic_energy`` are per invocation; single-run variances come from
    :func:`_single_run_variances` (the plain sample variances when ``k = 1``). A negative
    raw ``d`` (static power measured above the kernel's mean power, e.g. sensor noise on a
    tiny kernel) is clamped to 0 and flagged.
    """
    pol = policy or RepeatPolicy()
    k = runs.inner_repeats
    t_sum: Summary = summarize(runs.time_s, pol.confidence, pol.n_boot, pol.seed)
    e_sum: Summary = summarize(runs.energy_j, pol.confidence, pol.n_boot, pol.seed + 2)
    flags = _quality_flags(runs, pol, runs.meter.get("sensor_period_s", 0.1))
    raw_d = e_sum.mean - static.power_w * t_sum.mean
    if raw_d < 0:
        flags.append(
            _flag(
                "negative_dynamic_energy",
                f"raw dynamic energy {raw_d:.4g} J < 0 (static power {static.power_w:.4g} W "
                f"above the kernel's mean power); clamped to 0",
                raw_dynamic_energy_j=raw_d,
            )
        )
    error_j = float(np.mean([w.error_j for w in runs.windows])) / k
    var_time, var_energy, variance = _single_run_variances(runs, t_sum, e_sum)
    meta: dict[str, Any] = {
        **runs.meter,
        "backend": backend if backend is not None else getattr(device, "backend", None),
        "device_model": getattr(device, "model", None),
        "n": t_sum.n,
        "inner_repeats": k,
        "warmup_windows": runs.warmup_windows,
        "time": t_sum.to_dict(),
        "energy": e_sum.to_dict(),
        "median_time_s": t_sum.median,
        "median_energy_j": e_sum.median,
        "ci_time_s": list(t_sum.ci_mean),
        "ci_energy_j": list(e_sum.ci_mean),
        "energy_error_j": error_j,
        "static": static.to_meta(),
        "raw_dynamic_energy_j": raw_d,
        "runs": {"time_s": runs.time_s.tolist(), "energy_j": runs.energy_j.tolist()},
        "variance": variance,
        "flags": flags,
        "started_at": runs.started_at,
        "finished_at": runs.finished_at,
    }
    if meta["backend"] is None:
        del meta["backend"]
    if extra_meta:
        meta.update(extra_meta)
    return Signature(
        name=name,
        static_power=static.power_w,
        time=t_sum.mean,
        dynamic_energy=max(0.0, raw_d),
        var_time=var_time,
        var_energy=var_energy,
        devices=(device.name,),
        workload=dict(workload or {}),
        impl=impl,
        op_point=op_point if op_point is not None else device.current_operating_point(),
        meta=meta,
    )


def measure_signature(
    name: str,
    run: Callable[[], object],
    device: Device,
    meter: Meter,
    *,
    impl: str = "default",
    workload: Mapping[str, Any] | None = None,
    op_point: OperatingPoint | None = None,
    policy: RepeatPolicy | None = None,
    sync: Callable[[], object] | None = None,
    static: StaticPower | None = None,
    backend: str | None = None,
    extra_meta: Mapping[str, Any] | None = None,
) -> Signature:
    """Measure one cell: static power (unless given), repeats, statistics → Signature.

    The device must already be at the operating point; ``op_point`` is what the signature
    records (default: the device's current point).

    Example:
        >>> with Meter(device) as meter:  # doctest: +SKIP
        ...     sig = measure_signature("gemm", lambda: device.launch(k, "cublas", {}),
        ...                             device, meter, impl="cublas")
    """
    pol = policy or RepeatPolicy()
    if static is None:
        static = measure_static_power(device, meter, pol.static_idle_s, pol.settle_s)
    runs = run_repeats(device, meter, run, pol, sync)
    return signature_from_runs(
        name,
        runs,
        static,
        device=device,
        impl=impl,
        workload=workload,
        op_point=op_point,
        policy=pol,
        backend=backend,
        extra_meta=extra_meta,
    )
