"""Interaction mechanisms of the simulated GPU (the energy-calculus paper's Table 1).

Two channels carry one kernel's influence on another's energy (paper §3.1, §3.4):

* **Entry context** φ, state inherited from earlier work on the same device: ``thermal``
  (temperature raises leakage), ``cache`` (a kernel reading a buffer its predecessor wrote
  finds part of it in L2 and moves fewer DRAM bytes) and ``clock_state`` (after a clock
  change the clock is not at its target for a settling interval).
* **Runtime context** ρ, company kept while running: ``contention`` (co-running kernels on
  one device share its SMs and DRAM bandwidth), ``power_cap`` (their summed power reaching
  the limit throttles the one device clock for all of them), ``interconnect`` (collectives
  on several GPUs of a node share the fabric) and ``node_power`` (a node power budget
  throttles every busy GPU).

``noise`` is the run-to-run variation (and the occasional block of runs in another machine
state) that any measurement of the above must see through.

:class:`Mechanisms` switches each on or off; the pure functions here compute what a set
of co-running kernels does at a device setting. :mod:`eopt.sim.gpu` runs them on
virtual time.

Contention model (explicit, no fixed point): every kernel *demands* the share of each
resource it uses when it runs alone at its own clock; a resource whose summed demand
exceeds its capacity is shared in proportion to demand, so every user's part that needs it
stretches by ``summed demand / capacity``. The stretched compute and memory parts combine
with the kernel's own overlap exponent (the single-kernel roofline of
:mod:`eopt.sim.physics`).

Assumptions:
    Kernels on different streams start on whatever SMs are free and share them by demand
    unless given an SM share ω_elem (a fraction of the SMs, as Kareus allocates them to
    its communication kernels). A communication kernel occupies at least
    ``MechanismParams.comm_sm_fraction`` of the SMs while it runs (NCCL's channels), which
    is why compute and communication overlap only partially.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from eopt.sim.physics import GpuPhysics, static_power_w, voltage_rel

__all__ = [
    "MAX_TIME_JITTER",
    "CoRunKernel",
    "CoRunResult",
    "MechanismParams",
    "Mechanisms",
    "NoiseModel",
    "co_run",
    "fabric_stretch",
    "l2_bytes",
    "link_demand",
    "model_time_s",
    "warmth_after_idle",
    "warmth_after_traffic",
]

_BISECTION_STEPS = 40


@dataclass(frozen=True)
class Mechanisms:
    """Which interaction mechanisms the simulator applies (each True = on).

    Attributes:
        thermal: Temperature follows the thermal RC model and raises leakage (off: the
            die stays at its idle temperature).
        contention: Co-running kernels on one device share SMs and DRAM/link bandwidth
            (off: each runs as if alone).
        power_cap: Co-running kernels whose summed power exceeds the power limit throttle
            the one device clock together (off: the sum may exceed the limit; a lone
            kernel still throttles, that is single-kernel physics).
        cache: A kernel reading a buffer written shortly before on the same device moves
            fewer DRAM bytes.
        clock_state: A clock change takes ``MechanismParams.clock_settle_s`` to reach its
            target; the clock stays at the old value meanwhile.
        interconnect: Concurrent collectives on a node share the fabric bandwidth.
        node_power: A node power budget throttles the busy GPUs when their sum exceeds it.
        noise: Run-to-run jitter, sensor noise and machine-state blocks.
    """

    thermal: bool = True
    contention: bool = True
    power_cap: bool = True
    cache: bool = True
    clock_state: bool = True
    interconnect: bool = True
    node_power: bool = True
    noise: bool = True

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The mechanisms' names, in declaration order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def all(cls) -> Mechanisms:
        """Every mechanism on (the simulator's default)."""
        return cls()

    @classmethod
    def none(cls) -> Mechanisms:
        """Every mechanism off: kernels run as if alone, at a fixed temperature, exactly."""
        return cls(**dict.fromkeys(cls.names(), False))

    @classmethod
    def parse(cls, spec: str | Mechanisms | None) -> Mechanisms:
        """Mechanisms from ``"all"``, ``"none"`` or a comma list of names to turn on.

        Args:
            spec: ``"all"``, ``"none"``, e.g. ``"thermal,contention"`` (only those on), or
                a :class:`Mechanisms` (returned as is); None means all.

        Raises:
            ValueError: naming the unknown name and the valid ones.
        """
        if spec is None:
            return cls.all()
        if isinstance(spec, Mechanisms):
            return spec
        if not isinstance(spec, str):
            raise ValueError(
                f"mechanisms must be 'all', 'none' or a comma list of names, got {spec!r}"
            )
        text = spec.strip().lower()
        if text == "all":
            return cls.all()
        if text in ("none", ""):
            return cls.none()
        wanted = [w.strip() for w in text.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in cls.names()]
        if unknown:
            raise ValueError(
                f"unknown simulator mechanism(s) {', '.join(map(repr, unknown))} in "
                f"{spec!r}; valid: all, none, or a comma list of {', '.join(cls.names())}"
            )
        return cls(**{n: n in wanted for n in cls.names()})

    def enabled(self) -> tuple[str, ...]:
        """Names of the mechanisms that are on."""
        return tuple(n for n in self.names() if getattr(self, n))

    def label(self) -> str:
        """``"all"``, ``"none"`` or the comma list of the ones on (parseable)."""
        on = self.enabled()
        if len(on) == len(self.names()):
            return "all"
        return ",".join(on) if on else "none"


@dataclass(frozen=True)
class MechanismParams:
    """Physical parameters of the interaction mechanisms (beyond ``GpuPhysics``).

    Attributes:
        comm_sm_fraction: Fraction of the SMs a communication (link) kernel occupies
            while it runs when given no SM share (NCCL's channels: about 16 of 108 SMs).
        cache_reuse_fraction: Fraction of a consumer's DRAM traffic saved when its input
            is fully resident in L2 (the input is about half of what it moves).
        cache_idle_decay_s: Time constant of L2 warmth decaying while the device idles
            (other traffic, flushes), in s.
        clock_settle_s: How long an SM-clock change takes to reach its target, in s.
        fabric_links: Capacity of a node's shared fabric, in units of one GPU's link
            bandwidth; None: half the GPUs (a 2:1 oversubscribed fabric).
    """

    comm_sm_fraction: float = 0.15
    cache_reuse_fraction: float = 0.5
    cache_idle_decay_s: float = 0.01
    clock_settle_s: float = 0.02
    fabric_links: float | None = None

    def __post_init__(self) -> None:
        checks = (
            ("comm_sm_fraction", 0.0 <= self.comm_sm_fraction < 1.0),
            ("cache_reuse_fraction", 0.0 <= self.cache_reuse_fraction <= 1.0),
            ("cache_idle_decay_s", self.cache_idle_decay_s > 0),
            ("clock_settle_s", 0.0 <= self.clock_settle_s <= 1.0),
            ("fabric_links", self.fabric_links is None or self.fabric_links > 0),
        )
        for name, ok in checks:
            if not ok:
                raise ValueError(
                    f"MechanismParams.{name}={getattr(self, name)!r} is out of range "
                    "(see the class docstring for the valid values)"
                )


#: The largest launch-time jitter a :class:`NoiseModel` takes (relative SD of a duration):
#: beyond it the clipped Gaussian (durations ≥ half their mean) is no longer one.
MAX_TIME_JITTER = 0.2


#: The fields of :class:`NoiseModel` that carry noise from one launch to the next (the
#: slow wander and the warm-up drift), each a relative size.
_SLOW_NOISE = (
    "wander_power_locked",
    "wander_power_unlocked",
    "wander_time_locked",
    "wander_time_unlocked",
    "warmup_power_locked",
    "warmup_power_unlocked",
    "warmup_time_locked",
    "warmup_time_unlocked",
)


@dataclass(frozen=True)
class NoiseModel:
    """Run-to-run variation beyond the profile's ``time_jitter``/``activity_jitter``.

    Three layers, fitted to the Kareus A100 repeats (``data/dvfs/kareus_attention_overlap/
    tp2-bs4-seq4096_{1200,default}_energy_results.csv``: three back-to-back repeats of
    each configuration, each a mean over many iterations; summarised in
    ``eopt/sim/data/kareus-a100-repeats.yaml``):

    * **Per launch**: the profile's jitter, plus an unlocked extra (the boost clock
      wanders launch to launch). It averages out over a measurement window of many
      launches, so alone it gives a window-level CV far below the data's.
    * **Wander**: a slow machine-state wander of dynamic power and of time, an
      Ornstein–Uhlenbeck process in virtual time with correlation ``wander_tau_s``. It
      starts at zero on a new device (the nominal state), so a schedule of milliseconds
      on a fresh device sees almost none of it, while windows seconds apart see its
      stationary spread. This is the repeats' random part (repeats 1 and 2 differ by a
      CV of 0.23 % locked and 0.40 % at the default clock).
    * **Warm-up drift**: after an idle spell the device has cooled and, unlocked, its
      boost clock and voltage ramp back: its dynamic power is lower and (unlocked) its
      launches are slower until it has been busy a few ``warm_tau_s``. Warmth decays
      while idle with ``cool_tau_s`` and is full on a new device. In the data the first
      repeat has 2.2 % less energy than the other two at the default clock (0.4 %
      locked) and is the slowest in 99 % of configurations at the default clock.

    Machine-state blocks: the first 16 of 34 consecutive ArborX DBSCAN runs on an H100 in
    ``data/kokkos_dbscan_h100/fdbscan-dense`` took 1.66x the time (3.65 s vs 2.20 s) at
    0.84x the power (223 W vs 265 W). Here a block starts at a launch with probability
    ``state_block_rate`` and lasts ``state_block_runs`` launches.

    Attributes:
        unlocked_power_jitter: Extra relative SD of a launch's power with clocks unlocked.
        unlocked_time_jitter: Extra relative SD of a launch's duration, clocks unlocked.
        time_jitter: When set, the relative SD of every launch's duration, in place of
            the profile's ``time_jitter`` and the unlocked extra (``eopt check
            --jitter``: launch-time noise of a chosen size); None: the profile's.
        wander_power_locked: Stationary relative SD of the power wander, clocks locked.
        wander_power_unlocked: The same with clocks unlocked.
        wander_time_locked: Stationary relative SD of the duration wander, locked
            (locked clocks hold the time: the data's locked time CV is 0.016 %).
        wander_time_unlocked: The same with clocks unlocked.
        wander_tau_s: Correlation time of the wander, in s.
        warmup_power_locked: Relative power deficit of a fully cooled device, locked.
        warmup_power_unlocked: The same, unlocked.
        warmup_time_locked: Relative slowdown of a fully cooled device, locked.
        warmup_time_unlocked: The same, unlocked.
        warm_tau_s: Busy time over which a cooled device warms up, in s.
        cool_tau_s: Idle time over which a warm device cools, in s.
        state_block_rate: Probability that a launch starts a machine-state block (0: none,
            the default, so seeded measurements never contain one unless asked).
        state_block_runs: Launches in a block.
        state_time_factor: Duration multiplier inside a block.
        state_power_factor: Power multiplier inside a block.
    """

    unlocked_power_jitter: float = 0.012
    unlocked_time_jitter: float = 0.0015
    state_block_rate: float = 0.0
    state_block_runs: int = 16
    state_time_factor: float = 1.66
    state_power_factor: float = 0.84
    time_jitter: float | None = None
    wander_power_locked: float = 0.006
    wander_power_unlocked: float = 0.007
    wander_time_locked: float = 0.00025
    wander_time_unlocked: float = 0.0003
    wander_tau_s: float = 2.0
    warmup_power_locked: float = 0.02
    warmup_power_unlocked: float = 0.08
    warmup_time_locked: float = 0.0003
    warmup_time_unlocked: float = 0.008
    warm_tau_s: float = 0.6
    cool_tau_s: float = 2.0

    @classmethod
    def launch_only(cls, **changes: Any) -> NoiseModel:
        """Per-launch jitter only: no wander and no warm-up drift (independent launches).

        Args:
            **changes: Other fields to set (e.g. ``time_jitter``).
        """
        quiet = dict.fromkeys(_SLOW_NOISE, 0.0)
        return cls(**{**quiet, **changes})

    def __post_init__(self) -> None:
        if not 0.0 <= self.state_block_rate <= 1.0:
            raise ValueError(
                f"NoiseModel.state_block_rate={self.state_block_rate!r} must be a "
                "probability per launch in [0, 1]"
            )
        if self.state_block_runs < 1:
            raise ValueError(
                f"NoiseModel.state_block_runs={self.state_block_runs!r} must be ≥ 1 launch"
            )
        for name in ("unlocked_power_jitter", "unlocked_time_jitter", *_SLOW_NOISE):
            if not 0.0 <= getattr(self, name) < 0.2:
                raise ValueError(
                    f"NoiseModel.{name}={getattr(self, name)!r} must be a relative size "
                    "in [0, 0.2) (0.01 for 1 %)"
                )
        if self.time_jitter is not None and not 0.0 <= self.time_jitter <= MAX_TIME_JITTER:
            raise ValueError(
                f"NoiseModel.time_jitter={self.time_jitter!r} must be a relative standard "
                f"deviation in [0, {MAX_TIME_JITTER:g}] (0.02 for 2 %), or None for the "
                "profile's"
            )
        for name in (
            "state_time_factor",
            "state_power_factor",
            "wander_tau_s",
            "warm_tau_s",
            "cool_tau_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"NoiseModel.{name}={getattr(self, name)!r} must be positive")


def l2_bytes(model: str) -> float:
    """L2 cache size of a GPU model, in bytes (A100: 40 MB; Hopper: 50 MB)."""
    return 50e6 if model.startswith(("H100", "H200", "GH200")) else 40e6


@dataclass(frozen=True)
class CoRunKernel:
    """One running kernel as the co-run model sees it.

    Attributes:
        compute_s: Compute-pipe time at the top SM clock, in s.
        memory_s: Memory (DRAM or link) time, in s.
        overlap_p: p-norm exponent combining compute and memory time.
        launch_s: Fixed overhead, in s.
        activity: Core activity (dynamic power scale).
        mem_activity: Memory-system activity.
        iso_clock_mhz: The SM clock it runs at alone at the device's setting, in MHz.
        dram_fraction: Share of the DRAM bandwidth it draws while its memory pipe is busy.
        link_fraction: Share of its GPU link it draws while its memory pipe is busy (0 for
            kernels that do not communicate).
        sm_share: ω_elem, the fraction of SMs it is confined to; None: shared by demand.
        sm_floor: Fraction of SMs it occupies regardless of its arithmetic.
        power_scale: Its launch's power jitter (multiplies its dynamic power).
        excess_w: Its power alone above the ready device's static draw at the set clock,
            in W (jitter included); None: the co-run model's own dynamic power. Given,
            the co-run model is anchored to it: unstretched and uncapped, the kernel adds
            exactly this, so a co-run without contention draws the sum of the kernels'
            excesses over one static draw (the ⊕ of the context-independent algebra).
    """

    compute_s: float
    memory_s: float
    overlap_p: float
    launch_s: float
    activity: float
    mem_activity: float
    iso_clock_mhz: float
    dram_fraction: float
    link_fraction: float = 0.0
    sm_share: float | None = None
    sm_floor: float = 0.0
    power_scale: float = 1.0
    excess_w: float | None = None


@dataclass(frozen=True)
class CoRunResult:
    """How a set of co-running kernels runs on one device.

    Attributes:
        slowdown: Per kernel, its time under co-running over its modelled time alone at
            its own clock (≥ 1 unless a power budget raised nothing: always ≥ 1).
        clock_mhz: Per kernel, the SM clock it runs at, in MHz.
        device_clock_mhz: The device's clock (the highest of them), in MHz.
        dynamic_w: Summed dynamic power of the kernels, in W (static comes on top once).
        throttled: Per kernel, whether the summed power lowered its clock.
        static_clock_mhz: The clock the one static draw is taken at, in MHz: the set
            clock, or the cap's when the summed power lowered it (the device clock when
            no set clock was given).
    """

    slowdown: tuple[float, ...]
    clock_mhz: tuple[float, ...]
    device_clock_mhz: float
    dynamic_w: float
    throttled: tuple[bool, ...]
    static_clock_mhz: float = math.nan


def model_time_s(
    k: CoRunKernel, f_mhz: float, f_max_mhz: float, compute_stretch: float, memory_stretch: float
) -> float:
    """Modelled time of ``k`` at clock ``f_mhz`` with its parts stretched, in s."""
    tc = k.compute_s * f_max_mhz / f_mhz * compute_stretch
    tm = k.memory_s * memory_stretch
    p = k.overlap_p
    if tc <= 0.0 and tm <= 0.0:
        return k.launch_s
    big = max(tc, tm)
    # Scaled p-norm: no overflow for large p.
    busy = big * ((tc / big) ** p + (tm / big) ** p) ** (1.0 / p)
    return busy + k.launch_s


def _stretches(
    kernels: Sequence[CoRunKernel],
    alone: Sequence[float],
    f_max_mhz: float,
    contention: bool,
    link_stretch: Sequence[float],
) -> tuple[list[float], list[float]]:
    n = len(kernels)
    if not contention:
        return [1.0] * n, [max(1.0, s) for s in link_stretch]
    need = [
        max(k.compute_s * f_max_mhz / k.iso_clock_mhz / t, k.sm_floor)
        for k, t in zip(kernels, alone, strict=True)
    ]
    reserved = sum(k.sm_share for k in kernels if k.sm_share is not None)
    free = max(1.0 - reserved, 1e-9)
    shared_need = sum(nd for k, nd in zip(kernels, need, strict=True) if k.sm_share is None)
    sigma_sm = max(1.0, shared_need / free)
    compute = [
        max(1.0, nd / k.sm_share) if k.sm_share is not None else sigma_sm
        for k, nd in zip(kernels, need, strict=True)
    ]
    # Demanded shares of DRAM and of the device's link while running alone.
    dram = sum(k.memory_s * k.dram_fraction / t for k, t in zip(kernels, alone, strict=True))
    link = sum(k.memory_s * k.link_fraction / t for k, t in zip(kernels, alone, strict=True))
    sigma_dram, sigma_link = max(1.0, dram), max(1.0, link)
    memory = [
        max(sigma_dram, sigma_link, s) if k.link_fraction > 0 else sigma_dram
        for k, s in zip(kernels, link_stretch, strict=True)
    ]
    return compute, memory


def link_demand(k: CoRunKernel, f_max_mhz: float) -> float:
    """Share of one GPU link ``k`` demands when running alone (0 for non-collectives)."""
    if k.link_fraction <= 0.0:
        return 0.0
    return k.memory_s * k.link_fraction / model_time_s(k, k.iso_clock_mhz, f_max_mhz, 1.0, 1.0)


def dynamic_power_w(
    phys: GpuPhysics,
    k: CoRunKernel,
    f_mhz: float,
    f_max_mhz: float,
    time_s: float,
) -> float:
    """Dynamic power of ``k`` running ``time_s`` at ``f_mhz`` in the co-run model, in W."""
    # Utilisations as fractions of the device: stretched parts wait, they do not work.
    u_c = k.compute_s * f_max_mhz / f_mhz / time_s
    u_m = k.memory_s / time_s
    v = float(voltage_rel(phys, f_mhz, f_max_mhz))
    core = phys.p_core_w * k.activity * u_c * v * v * f_mhz / f_max_mhz
    return (core + phys.p_mem_w * k.mem_activity * u_m) * k.power_scale


def co_run(
    phys: GpuPhysics,
    kernels: Sequence[CoRunKernel],
    f_max_mhz: float,
    f_min_mhz: float,
    limit_w: float,
    temp_c: float,
    *,
    contention: bool = True,
    power_cap: bool = True,
    link_stretch: Sequence[float] | None = None,
    set_clock_mhz: float | None = None,
) -> CoRunResult:
    """How ``kernels`` run together on one device.

    Args:
        phys: The device's physics.
        kernels: The co-running kernels (at least one).
        f_max_mhz: The device's top SM clock, in MHz.
        f_min_mhz: The lowest clock the power controller drops to, in MHz.
        limit_w: The power limit, in W.
        temp_c: Die temperature, in °C (static power of the cap check).
        contention: Share SMs and bandwidth (off: every kernel as if alone).
        power_cap: Lower the common clock until static + summed dynamic power fits
            ``limit_w``.
        link_stretch: Per kernel, a stretch of its link traffic imposed from outside the
            device (a shared node fabric); 1 where None.
        set_clock_mhz: The device's requested SM clock, in MHz: where the one static
            draw is taken unless the cap lowers it (kernels that throttle alone run
            below it). None: the highest of the kernels' own clocks.

    Assumptions:
        Device power rises with the clock (so bisection finds the highest clock that fits);
        rates are constant while the set of kernels is (piecewise-constant rates).
    """
    if not kernels:
        raise ValueError("co_run needs at least one kernel")
    outside = list(link_stretch) if link_stretch is not None else [1.0] * len(kernels)
    alone = [model_time_s(k, k.iso_clock_mhz, f_max_mhz, 1.0, 1.0) for k in kernels]
    compute, memory = _stretches(kernels, alone, f_max_mhz, contention, outside)

    # Kernels anchored to their power alone add that power's excess, scaled by how the
    # co-run model's dynamic power moves from running alone to running here.
    anchor = [
        None
        if k.excess_w is None
        else (k.excess_w, dynamic_power_w(phys, k, k.iso_clock_mhz, f_max_mhz, t))
        for k, t in zip(kernels, alone, strict=True)
    ]

    def evaluate(cap_mhz: float) -> tuple[list[float], list[float], float]:
        clocks = [min(k.iso_clock_mhz, cap_mhz) for k in kernels]
        times = [
            model_time_s(k, f, f_max_mhz, a, b)
            for k, f, a, b in zip(kernels, clocks, compute, memory, strict=True)
        ]
        dyn = 0.0
        for k, f, t, ref in zip(kernels, clocks, times, anchor, strict=True):
            model = dynamic_power_w(phys, k, f, f_max_mhz, t)
            if ref is None:
                dyn += model
            else:
                excess, alone_w = ref
                dyn += excess * model / alone_w if alone_w > 0 else excess
        return clocks, times, dyn

    top = max(k.iso_clock_mhz for k in kernels)
    ready = top if set_clock_mhz is None else max(float(set_clock_mhz), top)
    clocks, times, dyn = evaluate(ready)

    def total_w(f_dev: float, dyn_w: float) -> float:
        return float(static_power_w(phys, f_dev, f_max_mhz, temp_c)) + dyn_w

    throttled = [False] * len(kernels)
    static_clock = ready
    if power_cap and total_w(ready, dyn) > limit_w:
        lo, hi = min(f_min_mhz, top), ready
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            _, _, d = evaluate(mid)
            if total_w(mid, d) <= limit_w:
                lo = mid
            else:
                hi = mid
        clocks, times, dyn = evaluate(lo)
        static_clock = lo
        throttled = [f < k.iso_clock_mhz - 1e-9 for k, f in zip(kernels, clocks, strict=True)]
    slowdown = tuple(t / a for t, a in zip(times, alone, strict=True))
    return CoRunResult(
        slowdown=slowdown,
        clock_mhz=tuple(clocks),
        device_clock_mhz=max(clocks),
        dynamic_w=dyn,
        throttled=tuple(throttled),
        static_clock_mhz=static_clock,
    )


def fabric_stretch(demands: Sequence[float], capacity_links: float) -> float:
    """Stretch of every collective's link traffic on a shared fabric (≥ 1).

    Args:
        demands: Per running collective kernel on the node, the share of one GPU link it
            demands alone.
        capacity_links: The fabric's capacity, in GPU links.
    """
    total = float(np.sum(demands)) if len(demands) else 0.0
    return max(1.0, total / capacity_links)


def warmth_after_traffic(warmth: float, bytes_moved: float, l2_size_bytes: float) -> float:
    """L2 warmth of a buffer after ``bytes_moved`` of other traffic (displacement model)."""
    return warmth * math.exp(-max(bytes_moved, 0.0) / l2_size_bytes)


def warmth_after_idle(warmth: float, idle_s: float, decay_s: float) -> float:
    """L2 warmth of a buffer after ``idle_s`` of device idleness."""
    return warmth * math.exp(-max(idle_s, 0.0) / decay_s)
