"""Running a placed schedule, or a piece of it, repeatedly: what ``eopt check`` measures.

A :class:`ScheduleRunner` runs *jobs* (element types placed on devices at start times) and
returns, per run, the energy of every device over the schedule's span, the makespan, and
what each job met: its duration and energy, the entry context φ it inherited and the
runtime context ρ it shared. :class:`SimRunner` does it on simulated GPUs; every run starts
on a fresh node, so every run starts at the null context (paper Axiom M2) and runs are
independent draws.

Jobs whose planned intervals chain-overlap on a device form a group that co-runs; the
group's members keep their planned offsets from its first start. A group starts when
every job of the group before it on its device has ended, after the planned gap, as a
program launches a kernel when what it waits for is done; a device's first group starts
at its planned time. This is the timing the calculus composes (docs/uncertainty.md):
gaps are planned, ends inherit the elements' time noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

__all__ = [
    "Job",
    "JobRecord",
    "RunSet",
    "ScheduleRunner",
    "SimElement",
    "SimRunner",
    "check_run_args",
    "first_jobs",
    "parse_jitter",
]

# Planned intervals closer than this are back to back, not overlapping (1 ns).
_OVERLAP_EPS_S = 1e-9
# Lead-in that lets a device's first clock setting settle before the origin, in s
# (the simulator's clocks settle in 20 ms).
_PRESETTLE_S = 0.05


@dataclass(frozen=True)
class Job:
    """One placed element to run.

    Attributes:
        element: Element type (a name in the library and in the runner's element table).
        device: Device name, as in the schedule.
        start_s: Planned start, in s from the schedule's origin.
        end_s: Planned end, in s (the start plus its null-context time): jobs whose planned
            intervals overlap on one device co-run.
        cold_data: Run it on buffers of its own instead of the ones the schedule shares
            (the cache protocol's "vary the preceding element's data").
        settle_before_s: Set its operating point this long before its start (the clock
            protocol's idle gap), in s; 0 sets it at the start.
    """

    element: str
    device: str
    start_s: float
    end_s: float
    cold_data: bool = False
    settle_before_s: float = 0.0


@dataclass(frozen=True)
class JobRecord:
    """What one job met in one run.

    Attributes:
        element: Element type.
        device: Device name.
        start_s: Actual start, in s from the run's origin.
        time_s: Duration, in s.
        energy_j: Energy of the device while it ran, in J (co-runners included).
        entry: The entry context φ the device reported at its start.
        co_runners: Element types it overlapped with (runtime context ρ).
        throttled: Whether the device reported a power throttle while it ran.
        sm_clock_mhz: Its mean effective SM clock, in MHz (NaN: not reported). A power
            limit or budget that bites lowers it; a shared SM, memory or link does not.
    """

    element: str
    device: str
    start_s: float
    time_s: float
    energy_j: float
    entry: Mapping[str, Any]
    co_runners: tuple[str, ...]
    throttled: bool
    sm_clock_mhz: float = math.nan


@dataclass(frozen=True)
class RunSet:
    """Repeated runs of one set of jobs.

    Attributes:
        energy_j: Per run, the energy of the devices the jobs use over the run's span,
            summed, in J.
        time_s: Per run, the makespan, in s.
        device_energy_j: Per device, per run, its energy over the span, in J.
        jobs: Per run, one record per job, in the order the jobs were given.
    """

    energy_j: np.ndarray
    time_s: np.ndarray
    device_energy_j: Mapping[str, np.ndarray]
    jobs: tuple[tuple[JobRecord, ...], ...]

    @property
    def runs(self) -> int:
        """Number of runs."""
        return int(self.energy_j.size)

    def job_values(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(energy in J, time in s) of job ``index`` over the runs."""
        e = np.array([run[index].energy_j for run in self.jobs])
        t = np.array([run[index].time_s for run in self.jobs])
        return e, t


class ScheduleRunner(Protocol):
    """Runs jobs repeatedly (simulated or real GPUs)."""

    def run(self, jobs: Sequence[Job], runs: int, seed: int = 0) -> RunSet:
        """Run ``jobs`` ``runs`` times from the null context; see :class:`RunSet`."""
        ...

    def static_power_w(self, element: str) -> float:
        """Static power of the ready device at the element's operating point, in W."""
        ...

    def idle_power_w(self, sm_clock_mhz: float | None = None) -> float:
        """Draw of an idle device at an SM clock setting, in W (what gaps cost)."""
        ...


@dataclass(frozen=True)
class SimElement:
    """How an element type runs on the simulated GPU.

    Attributes:
        kernel: Simulated kernel (see ``eopt.sim.kernels.kernel_names``).
        impl: Implementation (the kernel's default when None).
        workload: θ, completed with the kernel's defaults.
        reads: Buffers it reads (a buffer written just before is warm: cache mechanism).
        writes: Buffers it writes.
        sm_share: ω_elem, the fraction of SMs it is confined to; None shares by demand.
        sm_clock_mhz: Its SM clock, in MHz (None: the device's default).
    """

    kernel: str
    impl: str | None = None
    workload: Mapping[str, Any] | None = None
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    sm_share: float | None = None
    sm_clock_mhz: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> SimElement:
        """Read ``{kernel, impl, workload, reads, writes, sm_share, sm_clock_mhz}``.

        Raises:
            ValueError: naming ``where``, for an unknown key or a value of the wrong kind.
        """
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; expected {sorted(known)}")
        if not isinstance(data.get("kernel"), str):
            raise ValueError(f"{where}: 'kernel' must name a simulated kernel")
        values: dict[str, Any] = dict(data)
        for key in ("reads", "writes"):
            raw = values.get(key, ())
            if isinstance(raw, str) or not all(isinstance(b, str) for b in raw):
                raise ValueError(f"{where}: '{key}' must be a list of buffer names")
            values[key] = tuple(raw)
        for key in ("sm_share", "sm_clock_mhz"):
            raw = values.get(key)
            if raw is not None and (isinstance(raw, bool) or not isinstance(raw, (int, float))):
                raise ValueError(f"{where}: '{key}' must be a number")
        if values.get("workload") is not None and not isinstance(values["workload"], Mapping):
            raise ValueError(f"{where}: 'workload' must be a mapping of sizes")
        return cls(**values)


class SimRunner:
    """Runs jobs on a fresh :class:`~eopt.sim.node.SimulatedNode` per run.

    Args:
        elements: Element type → how it runs on the simulator.
        devices: Device names of the schedule, in order (GPU i of the node is the i-th).
        model: Simulated GPU profile.
        mechanisms: Interaction mechanisms on (``"all"``, ``"none"`` or a comma list; see
            :class:`~eopt.sim.mechanisms.Mechanisms`). Run-to-run noise is on
            unless ``noise=False``, whatever the list says: it is not an interaction.
        noise: Run-to-run noise on.
        power_limit_w: Power limit of every GPU, in W (None: the profile's default).
        power_budget_w: The node's power budget, in W (None: none).
        params: Mechanism parameters (:class:`~eopt.sim.mechanisms.MechanismParams`).
        jitter: Launch-time noise: the relative standard deviation of every kernel's
            duration (0.02 for 2 %), in place of the profile's; None: the profile's.
    """

    def __init__(
        self,
        elements: Mapping[str, SimElement],
        devices: Sequence[str],
        *,
        model: str = "A100-SXM4-40GB",
        mechanisms: Any = "all",
        noise: bool = True,
        power_limit_w: float | None = None,
        power_budget_w: float | None = None,
        params: Any = None,
        jitter: float | None = None,
    ) -> None:
        from eopt.sim.mechanisms import Mechanisms, NoiseModel

        self.elements = dict(elements)
        self.devices = list(dict.fromkeys(devices))
        if not self.devices:
            raise ValueError("SimRunner needs at least one device")
        from eopt.sim.profiles import load_profile

        load_profile(model)  # an unknown model fails here, before any run
        self.model = model
        self.mechanisms = replace(Mechanisms.parse(mechanisms), noise=noise)
        self.noise = noise
        self.power_limit_w = power_limit_w
        self.power_budget_w = power_budget_w
        self.params = params
        self.jitter = jitter
        self.noise_model = NoiseModel(time_jitter=jitter)  # refuses a jitter out of range
        self._static: dict[str, float] = {}
        self._idle: dict[float | None, float] = {}

    def _node(self, seed: int) -> Any:
        from eopt.sim.node import SimulatedNode

        node = SimulatedNode(
            self.model,
            gpus=len(self.devices),
            seed=seed,
            mechanisms=self.mechanisms,
            params=self.params,
            power_budget_w=self.power_budget_w,
            noise=self.noise,
            noise_model=self.noise_model,
        )
        if self.power_limit_w is not None:
            for gpu in node:
                point = gpu.current_operating_point()
                gpu.set_operating_point(replace(point, power_limit_w=self.power_limit_w))
        return node

    def element(self, name: str) -> SimElement:
        """The simulator description of element type ``name``."""
        try:
            return self.elements[name]
        except KeyError:
            raise ValueError(
                f"element {name!r} has no simulated kernel; give one (element: {{kernel: …}})"
            ) from None

    def static_power_w(self, element: str) -> float:
        """Static power s of the ready device at the element's SM clock, in W.

        The paper's s is the draw of a device ready to run (clocks up, Axiom P2), which
        co-running elements share once; an idle device draws less (:meth:`idle_power_w`).
        """
        if element not in self._static:
            from eopt.sim.physics import static_power_w

            gpu = self._node(0)[0]
            f_max = gpu.profile.max_sm_clock_mhz
            # Unlocked, a ready GPU boosts to its top clock.
            clock = self.element(element).sm_clock_mhz or f_max
            self._static[element] = float(
                static_power_w(gpu.profile.physics, clock, f_max, gpu.temperature_c)
            )
        return self._static[element]

    def idle_power_w(self, sm_clock_mhz: float | None = None) -> float:
        """Draw of an idle GPU with its SM clock set to ``sm_clock_mhz``, in W.

        None: the default (unlocked) setting. A locked clock keeps an idle GPU's draw up.
        """
        if sm_clock_mhz not in self._idle:
            gpu = self._node(0)[0]
            if sm_clock_mhz is not None:
                _set_clock(gpu, sm_clock_mhz)
                gpu.idle(_PRESETTLE_S)
            self._idle[sm_clock_mhz] = float(gpu.static_power_w())
        return self._idle[sm_clock_mhz]

    def element_clock_mhz(self, element: str) -> float | None:
        """The SM clock an element runs at (None: the default setting)."""
        spec = self.elements.get(element)
        return spec.sm_clock_mhz if spec is not None else None

    def run(self, jobs: Sequence[Job], runs: int, seed: int = 0) -> RunSet:
        """Run ``jobs`` ``runs`` times, each from a fresh node (the null context).

        Args:
            jobs: The jobs, starts relative to one origin.
            runs: Number of runs (≥ 2).
            seed: Base seed; run ``r`` uses ``seed + r``.

        Raises:
            ValueError: no jobs, fewer than two runs, or an unknown device or element.
        """
        check_run_args(jobs, runs)
        for job in jobs:
            if job.device not in self.devices:
                raise ValueError(f"job {job.element!r}: unknown device {job.device!r}")
            self.element(job.element)
        energies, times, per_run = [], [], []
        per_device: dict[str, list[float]] = {d: [] for d in self.devices}
        for r in range(runs):
            total, span, dev_e, records = self._run_once(jobs, seed + r)
            energies.append(total)
            times.append(span)
            for d, e in dev_e.items():
                per_device[d].append(e)
            per_run.append(records)
        return RunSet(
            np.array(energies),
            np.array(times),
            {d: np.array(v) for d, v in per_device.items()},
            tuple(per_run),
        )

    def _launch(self, gpu: Any, job: Job, i: int, stream: str, clock_set: bool) -> None:
        spec = self.element(job.element)
        if spec.sm_clock_mhz is not None and not clock_set:
            _set_clock(gpu, spec.sm_clock_mhz)
        reads = tuple(f"{b}#cold{i}" for b in spec.reads) if job.cold_data else spec.reads
        gpu.enqueue(
            spec.kernel,
            spec.impl,
            spec.workload,
            stream=stream,
            reads=reads,
            writes=spec.writes,
            sm_share=spec.sm_share,
        )

    def _run_once(
        self, jobs: Sequence[Job], seed: int
    ) -> tuple[float, float, dict[str, float], tuple[JobRecord, ...]]:
        node = self._node(seed)
        gpus = {d: node[i] for i, d in enumerate(self.devices)}
        clock = node.clock
        # The null context includes a settled clock: each device starts at its first
        # job's clock, set a lead-in before the origin (the span is measured from the
        # origin). The same lead-in lets a job's clock settle "before its start".
        firsts = first_jobs(jobs)
        presettle = any(self.element(j.element).sm_clock_mhz is not None for j in firsts.values())
        origin_lead = max(
            [j.settle_before_s for j in jobs] + ([_PRESETTLE_S] if presettle else [0.0])
        )
        for device, job in firsts.items():
            clock_mhz = self.element(job.element).sm_clock_mhz
            if clock_mhz is not None:
                _set_clock(gpus[device], clock_mhz)
        t0 = clock.now() + origin_lead
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].start_s, i))
        # Each job waits for the whole group before its own on its device (its anchor) and
        # starts the planned gap after that group's last end: a program launches a kernel
        # when what it waits for is done, not at a wall-clock time. The first group starts
        # at its planned time. Jobs get streams of their own, so a group co-runs.
        stream_of = {i: f"j{i}" for i in order}  # launches are timed here, never queued
        anchor = _previous_groups(jobs, order)
        if clock.now() < t0:
            clock.advance_to(t0)
        counters0 = {d: _energy(gpu) for d, gpu in gpus.items()}
        records_before = {d: len(gpu.kernel_records()) for d, gpu in gpus.items()}
        launched: set[int] = set()
        clock_set: set[int] = set()
        pending = list(order)

        def records() -> dict[int, Any]:
            """Each launched job's record (a job has a stream of its own)."""
            out: dict[int, Any] = {}
            for d, gpu in gpus.items():
                on_stream = {r.stream: r for r in gpu.kernel_records()[records_before[d] :]}
                out.update((k, on_stream[stream_of[k]]) for k in launched if jobs[k].device == d)
            return out

        while pending:
            now = clock.now()
            rec_of = records()
            due: list[tuple[float, int]] = []
            # Never step past the next event on any GPU: rates change there, and a
            # predicted end read before it may move (a partner finishing lets a throttled
            # kernel speed up), so a launch timed on it would start late.
            horizon = clock.next_device_event_s()
            for i in pending:
                job = jobs[i]
                waits = anchor[i]
                if not waits:
                    t_launch = t0 + job.start_s
                elif all(a in launched for a in waits):
                    ends = [rec_of[a].start_s + rec_of[a].duration_s for a in waits]
                    if max(ends) > now + 1e-15:
                        continue  # the horizon already stops at the next end
                    planned_end = max(jobs[a].end_s for a in waits)
                    t_launch = max(ends) + max(job.start_s - planned_end, 0.0)
                else:
                    continue
                t_clock = t_launch - job.settle_before_s
                if job.settle_before_s > 0 and i not in clock_set:
                    if t_clock <= now + 1e-15:
                        spec = self.element(job.element)
                        if spec.sm_clock_mhz is not None:
                            _set_clock(gpus[job.device], spec.sm_clock_mhz)
                        clock_set.add(i)
                    else:
                        horizon = min(horizon, t_clock)
                if t_launch <= now + 1e-15:
                    due.append((t_launch, i))
                else:
                    horizon = min(horizon, t_launch)
            for _, i in sorted(due):
                self._launch(gpus[jobs[i].device], jobs[i], i, stream_of[i], i in clock_set)
                launched.add(i)
                pending.remove(i)
            if due:
                continue
            if not math.isfinite(horizon):
                raise RuntimeError("jobs wait on one another in a cycle")  # cannot happen
            clock.advance_to(max(horizon, now))
        node.synchronize()
        dev_e = {d: _energy(gpu) - counters0[d] for d, gpu in gpus.items()}
        kernel_of = records()
        # ρ from the actual intervals, across devices too (a device reports only its own).
        spans = {i: (rec.start_s, rec.start_s + rec.duration_s) for i, rec in kernel_of.items()}
        out: list[JobRecord] = []
        for i in range(len(jobs)):
            rec = kernel_of[i]
            lo, hi = spans[i]
            others = {
                jobs[j].element
                for j, (a, b) in spans.items()
                if j != i and a < hi - _OVERLAP_EPS_S and b > lo + _OVERLAP_EPS_S
            }
            out.append(
                JobRecord(
                    element=jobs[i].element,
                    device=jobs[i].device,
                    start_s=rec.start_s - t0,
                    time_s=rec.duration_s,
                    energy_j=rec.power_w * rec.duration_s,
                    entry=dict(rec.entry_context),
                    co_runners=tuple(sorted(others)),
                    throttled=bool(rec.throttled),
                    sm_clock_mhz=float(rec.sm_clock_mhz),
                )
            )
        last_end = max(hi for _, hi in spans.values())
        # Composition holds only the devices a piece uses; an idle GPU beside it is not
        # part of it.
        total = float(sum(dev_e[d] for d in dict.fromkeys(j.device for j in jobs)))
        return total, float(last_end - t0), dev_e, tuple(out)


def _previous_groups(jobs: Sequence[Job], order: Sequence[int]) -> dict[int, list[int]]:
    """Each job's anchor: the jobs of the group before its own on its device.

    A group is a maximal run of jobs whose planned intervals chain-overlap (as the
    calculus clusters a schedule); its members keep their offsets from its first start,
    so each one waits for the previous group, not for a member of its own.
    """
    anchor: dict[int, list[int]] = {}
    groups: dict[str, list[list[int]]] = {}
    group_end: dict[str, float] = {}
    for i in order:
        job = jobs[i]
        device_groups = groups.setdefault(job.device, [])
        # The calculus's rule (eopt.calculus.schedule): overlaps below 1 ps are rounding.
        if device_groups and job.start_s < group_end[job.device] - 1e-12:
            device_groups[-1].append(i)
            group_end[job.device] = max(group_end[job.device], job.end_s)
        else:
            device_groups.append([i])
            group_end[job.device] = job.end_s
        anchor[i] = list(device_groups[-2]) if len(device_groups) > 1 else []
    return anchor


def parse_jitter(text: str | float | None, what: str = "jitter") -> float | None:
    """A launch-time jitter for :class:`SimRunner` from ``"2%"`` or ``"0.02"``.

    Args:
        text: The relative spread of every kernel's duration; None: the profile's own.
        what: How errors name the place (e.g. ``"--jitter"``).

    Raises:
        ValueError: one line naming ``what``, what was read and how to write it.

    Example:
        >>> parse_jitter("2%"), parse_jitter(None)
        (0.02, None)
    """
    from eopt.model.units import parse_fraction
    from eopt.sim.mechanisms import MAX_TIME_JITTER

    if text is None:
        return None
    return parse_fraction(text, what=what, maximum=MAX_TIME_JITTER)


def check_run_args(jobs: Sequence[Job], runs: int) -> None:
    """Refuse what no runner can measure: no jobs, or too few runs for a spread.

    Args:
        jobs: The jobs asked for.
        runs: The number of runs asked for.

    Raises:
        ValueError: no jobs, or fewer than two runs.
    """
    if not jobs:
        raise ValueError("nothing to run: no jobs")
    if runs < 2:
        raise ValueError(f"runs must be ≥ 2 to estimate a spread, got {runs}")


def first_jobs(jobs: Sequence[Job]) -> dict[str, Job]:
    """Each device's first job by planned start: whose clock the null context settles.

    Args:
        jobs: The jobs of a run.

    Returns:
        Device name → its earliest job (the one given first among equal starts).
    """
    firsts: dict[str, Job] = {}
    for job in sorted(jobs, key=lambda j: j.start_s):
        firsts.setdefault(job.device, job)
    return firsts


def _energy(gpu: Any) -> float:
    # The simulator's exact integral: its 1 mJ counter would quantize a 0.1 J element
    # by 1 %, more than the run-to-run noise the check must resolve.
    return float(gpu.true_energy_j())


def _set_clock(gpu: Any, mhz: float) -> None:
    point = gpu.current_operating_point()
    if point.sm_clock_mhz != mhz:
        gpu.set_operating_point(replace(point, sm_clock_mhz=float(mhz)))
