"""Characterize a program in place: one signature per element kind and operating point.

``eopt profile -- CMD`` runs a program whose parts are marked with :func:`eopt.element`
(or a Kokkos program, whose regions are the elements) and turns the element calls it
sees into ``eopt.signature/1`` lines, one per element *kind* and operating point:

* time ``T``: the mean of the calls' durations, in s; ``var_time``: their variance;
* static power ``s``: the ready GPU's draw at the point, measured on an idle window
  before the program runs (:func:`eopt.runs.repeat.measure_static_power`), in W;
* dynamic energy ``d = E − s·T`` (≥ 0) from the calls' mean energy ``E``;
  ``var_energy``: the variance of the calls' energies;
* ``meta``: ``n`` (calls), ``method`` (how the calls' energies were read: energy-counter
  deltas at element edges where the counter refreshes fast enough, else the meter's power
  trace), ``device_model`` (as a sweep writes it), ``static`` (the static window),
  ``flags`` (``short_element`` where calls are shorter than ten of the reading's periods)
  and ``profile`` (mode, points, calls per point).

Two ways to reach each point (:class:`ProfilePlan`): by default the program runs once per
operating point, locked for the whole run; ``every_steps=K`` (``--in-run``) switches to the
next point every K calls of :func:`eopt.step` within one run. On a real GPU each run is
watched by ``eopt measure``'s machinery (:func:`eopt.measure.command.measure_command`)
inside the devices layer's guard, which restores the GPU however the profile ends; on
the simulator the program's child holds a simulated GPU (:mod:`eopt.runs.profile_child`).
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature

__all__ = [
    "ElementCall",
    "ProfileError",
    "ProfilePlan",
    "ProfileRun",
    "profile_on_device",
    "profile_on_sim",
    "signatures_from_calls",
]

#: ``$EOPT_ELEMENT_HOOK`` of an ``--in-run`` program on a real GPU.
IN_RUN_HOOK = "eopt.runs.profile_child:in_run_hook"
#: Calls shorter than this many reading periods are flagged ``short_element``.
SHORT_PERIODS = 10


class ProfileError(RuntimeError):
    """The program cannot be profiled as asked (no element marked, command not found …)."""


@dataclass(frozen=True)
class ElementCall:
    """One element call as seen by the meter.

    Attributes:
        name: The element's name.
        kind: Its element type.
        point: Index of the operating point it ran at.
        time_s: Its duration, in s.
        energy_j: Its energy (inclusive of nested elements), in J.
    """

    name: str
    kind: str
    point: int
    time_s: float
    energy_j: float


@dataclass(frozen=True)
class ProfilePlan:
    """What to profile and how.

    Attributes:
        command: Program and arguments.
        points: Operating points; empty: the GPU as it is (``--no-control``).
        every_steps: Switch to the next point every this many ``eopt.step()`` calls,
            within one run (``--in-run``); None: one run per point.
        static_idle_s: Length of each point's static-power window, in s (None: ten
            sensor periods).
    """

    command: tuple[str, ...]
    points: tuple[OperatingPoint, ...] = ()
    every_steps: int | None = None
    static_idle_s: float | None = None


@dataclass
class ProfileRun:
    """Everything the runs of a profile saw.

    Attributes:
        calls: Every element call.
        static: Per point index, its static window (``Signature.meta["static"]``).
        points: The operating points (index → point).
        meter: The meter's description (the last run's).
        device: The GPU's name.
        model: The GPU's model.
        mode: ``sim`` or ``device``.
        returncodes: Each run's exit status.
        controlled: Whether eopt set the points (False: ``--no-control``).
    """

    calls: list[ElementCall] = field(default_factory=list)
    static: dict[int, dict[str, Any]] = field(default_factory=dict)
    points: list[OperatingPoint] = field(default_factory=list)
    meter: dict[str, Any] = field(default_factory=dict)
    device: str = ""
    model: str = ""
    mode: str = "device"
    returncodes: list[int] = field(default_factory=list)
    controlled: bool = True
    in_run: bool = False


Progress = Callable[[str], None]


# Signatures ----------------------------------------------------------------------------------
def _resolution_s(meter: Mapping[str, Any]) -> float:
    """The period that resolves an element's energy: the counter's refresh where the
    counter is read (0: exact at every edge), else the power sensor's."""
    if meter.get("method") == "counter":
        return float(meter.get("counter_period_s") or 0.0)
    return max(float(meter.get("sensor_period_s") or 0.0), float(meter.get("averaging_s") or 0))


def _method(meter: Mapping[str, Any], shortest_s: float) -> str:
    if meter.get("method") == "counter" and shortest_s >= SHORT_PERIODS * _resolution_s(meter):
        return "counter deltas at element edges"
    return "power trace over each element"


def _var(values: Sequence[float]) -> float:
    return statistics.variance(values) if len(values) > 1 else 0.0


def signatures_from_calls(run: ProfileRun) -> list[Signature]:
    """One signature per (element kind, operating point), in first-seen order.

    Raises:
        ProfileError: when the runs saw no element call.
    """
    if not run.calls:
        raise ProfileError(
            "the program marked no element: mark its parts with "
            "`with eopt.element(name, kind=...):` (or profile a Kokkos program with --kokkos)"
        )
    groups: dict[tuple[str, int], list[ElementCall]] = {}
    for call in run.calls:
        groups.setdefault((call.kind, call.point), []).append(call)
    resolution = _resolution_s(run.meter)
    out = []
    for (kind, index), calls in groups.items():
        times = [c.time_s for c in calls]
        energies = [c.energy_j for c in calls]
        t, e = statistics.fmean(times), statistics.fmean(energies)
        static = run.static.get(index, {})
        s = float(static.get("power_w", 0.0))
        short = sum(1 for x in times if x < SHORT_PERIODS * resolution * (1 - 1e-9))
        flags = []
        if short:
            flags.append(
                {
                    "code": "short_element",
                    "message": f"{short} of {len(calls)} calls are shorter than "
                    f"{SHORT_PERIODS} periods of the reading ({resolution:g} s): their "
                    "energies are poorly resolved",
                    "calls": short,
                    "resolution_s": resolution,
                }
            )
        point = run.points[index] if index < len(run.points) else OperatingPoint()
        meta: dict[str, Any] = {
            "n": len(calls),
            "method": _method(run.meter, min(times)),
            "meter_method": run.meter.get("method"),
            "device_model": run.model,
            "backend": "sim" if run.mode == "sim" else "device",
            "static": static,
            "flags": flags,
            "energy": {"mean": e, "var": _var(energies), "n": len(calls)},
            "time": {"mean": t, "var": _var(times), "n": len(calls)},
            "sensor_period_s": run.meter.get("sensor_period_s"),
            "counter_period_s": run.meter.get("counter_period_s"),
            "op_point_set": run.controlled,
            "profile": {
                "mode": "in-run" if run.in_run else "one run per point",
                "elements": sorted({c.name for c in calls}),
            },
            "recorded_by": "eopt profile",
        }
        out.append(
            Signature(
                name=kind,
                static_power=s,
                time=t,
                dynamic_energy=max(0.0, e - s * t),
                var_time=_var(times),
                var_energy=_var(energies),
                devices=(run.device,) if run.device else (),
                op_point=point,
                meta=meta,
            )
        )
    return out


# On the simulator ----------------------------------------------------------------------------
def profile_on_sim(
    plan: ProfilePlan,
    kernels: Mapping[str, Mapping[str, Any]],
    *,
    model: str = "A100-SXM4-40GB",
    seed: int = 0,
    kernels_file: str = "--kernels",
    progress: Progress | None = None,
    env: Mapping[str, str] | None = None,
    stdout: Any = None,
) -> ProfileRun:
    """Profile ``plan.command`` with a simulated GPU in its child process.

    Args:
        plan: The command and points (at least one: the simulator has no "as it is").
        kernels: Element kind → its simulated kernel (``--kernels``, as
            :class:`eopt.check.runner.SimElement` fields).
        model: The simulated GPU's profile.
        seed: Seed of the simulator's noise; run ``r`` uses ``seed + r``.
        kernels_file: How to name the kernels' file in messages.
        progress: Called with a line after each run.
        env: Extra environment variables for the child.
        stdout: Where the program's standard output goes (None: this process's).

    Raises:
        ProfileError: for a command that cannot start or marks no element, or a kind
            without a kernel.
    """
    from eopt.runs.profile_child import ChildError, read_records, write_config

    points = list(plan.points) or [OperatingPoint()]
    runs = [list(range(len(points)))] if plan.every_steps else [[i] for i in range(len(points))]
    result = ProfileRun(points=points, mode="sim", in_run=bool(plan.every_steps))
    with tempfile.TemporaryDirectory(prefix="eopt-profile-") as tmp:
        for r, indices in enumerate(runs):
            config = {
                "records": str(Path(tmp) / f"run{r}.json"),
                "model": model,
                "seed": seed + r,
                "kernels": {k: dict(v) for k, v in kernels.items()},
                "kernels_file": kernels_file,
                "points": [points[i].to_dict() for i in indices],
                "every_steps": plan.every_steps,
                "static_idle_s": plan.static_idle_s,
            }
            child_env = write_config(Path(tmp) / f"config{r}.json", config)
            code = _run(plan.command, {**(env or {}), **child_env}, stdout)
            try:
                per_process = read_records(config["records"])
            except ChildError as exc:
                raise ProfileError(str(exc)) from None
            result.returncodes.append(code)
            calls: list[Any] = []
            for records in per_process:
                result.device, result.model = records["device"], records["model"]
                result.meter = records["report"]["meter"]
                for s in records["static"]:
                    static = {k: v for k, v in s.items() if k != "point"}
                    result.static.setdefault(indices[s["point"]], static)
                calls.extend(records["calls"])
            for c in calls:
                result.calls.append(
                    ElementCall(
                        c["name"], c["kind"], indices[c["point"]], c["time_s"], c["energy_j"]
                    )
                )
            if progress is not None:
                progress(_progress_line(r, len(runs), points, indices, calls, code))
    return result


def _progress_line(
    r: int, n: int, points: Sequence[OperatingPoint], indices: Sequence[int], calls: Any, code: int
) -> str:
    where = ", ".join(points[i].text("the current setting") for i in indices)
    status = "" if code == 0 else f", exit status {code}"
    return f"run {r + 1}/{n} at {where}: {len(calls)} element calls{status}"


def _run(command: Sequence[str], env: Mapping[str, str], stdout: Any = None) -> int:
    from eopt.measure.command import run_program

    return run_program(command, env, ProfileError, stdout)


# On a GPU ------------------------------------------------------------------------------------
def profile_on_device(
    plan: ProfilePlan,
    device: Any,
    *,
    control: bool = True,
    method: str = "auto",
    settle_s: float = 0.5,
    kokkos_library: str | None = None,
    progress: Progress | None = None,
    stdout: Any = None,
    opener: str | None = None,
) -> ProfileRun:
    """Profile ``plan.command`` on a GPU on the wall clock, one run per operating point
    (or, with ``plan.every_steps``, one run that switches at ``eopt.step()``).

    Each point is locked for its whole run, inside the devices layer's guard (the GPU's
    settings come back however the profile ends); the ready GPU's static power is
    measured first, then the run is watched as ``eopt measure`` watches it.

    Args:
        plan: The command and points (empty: the GPU as it is).
        device: An NVML GPU (or a test's fake).
        control: False never changes a setting (``--no-control``); then ``plan.points``
            must be empty.
        method: Meter method (``auto``: the energy counter where the GPU has one).
        settle_s: Idle before each static window, in s.
        kokkos_library: The Kokkos Tools connector: its regions are the elements.
        progress: Called with a line after each run.
        stdout: Where the program's standard output goes (None: this process's).
        opener: ``module:function`` that opens the GPU in the program's process for
            ``--in-run`` (as :func:`eopt.devices.open_devices`; tests pass a fake's).

    Raises:
        ProfileError: a command that cannot start; points with ``control=False``.
    """
    from eopt.measure.meter import Meter
    from eopt.runs.repeat import measure_static_power

    if plan.every_steps and kokkos_library:
        raise ProfileError("--in-run switches at eopt.step(), which a Kokkos program lacks")
    if not control and plan.points:
        raise ProfileError("--no-control changes no setting: drop --clocks/--power-limits")
    points = list(plan.points) or [device.current_operating_point()]
    result = ProfileRun(
        points=points, controlled=control and bool(plan.points), in_run=bool(plan.every_steps)
    )
    result.device, result.model = device.name, device.model
    guard: Any = contextlib.nullcontext()
    if result.controlled:
        from eopt.devices.guard import restoring_on_exit

        guard = restoring_on_exit([device])
    with guard:
        # Each point's static power, at that point, before the program runs there.
        for i, point in enumerate(points):
            if result.controlled:
                device.set_operating_point(point)
            with Meter(device, method=method) as meter:  # type: ignore[arg-type]
                static = measure_static_power(device, meter, plan.static_idle_s, settle_s)
            result.static[i] = static.to_meta()
            if plan.every_steps:
                continue
            run, calls = _run_once(plan, device, method, kokkos_library, stdout, {})
            result.returncodes.append(run.returncode)
            result.meter = dict(run.report.meter)
            result.calls.extend(
                _charge(calls, run, i) if calls is not None else _event_calls(run, i, [])
            )
            if progress is not None:
                n = sum(1 for c in result.calls if c.point == i)
                progress(_progress_line(i, len(points), points, [i], range(n), run.returncode))
        if plan.every_steps:
            device.set_operating_point(points[0])
            run, switches = _run_in_run(plan, device, method, opener, stdout)
            result.returncodes.append(run.returncode)
            result.meter = dict(run.report.meter)
            result.calls.extend(_event_calls(run, 0, switches))
            if progress is not None:
                line = _progress_line(0, 1, points, range(len(points)), result.calls, 0)
                progress(line)
    return result


def _run_once(
    plan: ProfilePlan,
    device: Any,
    method: str,
    kokkos_library: str | None,
    stdout: Any,
    env: Mapping[str, str],
) -> tuple[Any, list[Any] | None]:
    """One watched run; the Kokkos connector's regions when it is attached."""
    from eopt.measure.command import MeasureError, measure_command

    try:
        with _kokkos_env(kokkos_library) as extra:
            run = measure_command(
                plan.command,
                device,
                method=method,  # type: ignore[arg-type]
                env={**env, **extra},
                stdout=stdout,
            )
            calls = _kokkos_calls(extra) if kokkos_library else None
    except MeasureError as exc:
        raise ProfileError(str(exc)) from None
    return run, calls


def _run_in_run(
    plan: ProfilePlan, device: Any, method: str, opener: str | None, stdout: Any
) -> tuple[Any, list[tuple[int, int]]]:
    """One run whose program switches the points itself (:class:`~eopt.runs.profile_child.
    InRunChild`); the switches it noted."""
    from eopt.runs.profile_child import read_switches, write_config

    with tempfile.TemporaryDirectory(prefix="eopt-profile-in-run-") as tmp:
        config = {
            "points": [p.to_dict() for p in plan.points],
            "every_steps": plan.every_steps,
            "switches": str(Path(tmp) / "switches.jsonl"),
            "gpu": int(getattr(device, "index", 0) or 0),
            "backend": "nvml",
            "open": opener,
        }
        env = write_config(Path(tmp) / "config.json", config, IN_RUN_HOOK)
        run, _ = _run_once(plan, device, method, None, stdout, env)
        return run, read_switches(config["switches"])


def _event_calls(run: Any, point: int, switches: Sequence[tuple[int, int]]) -> list[ElementCall]:
    """The run's element calls; with ``switches`` (unix ns, point), each at the point in
    force when it started."""
    import bisect

    times = [t for t, _ in switches]
    out = []
    for e in run.report.events:
        p = point
        if switches:
            k = bisect.bisect_right(times, run.start_unix_ns + round(e.start_s * 1e9)) - 1
            p = switches[k][1] if k >= 0 else point
        out.append(ElementCall(e.name, e.kind or e.name, p, e.end_s - e.start_s, e.energy_j))
    return out


@contextlib.contextmanager
def _kokkos_env(library: str | None) -> Any:
    """The Kokkos connector's environment, writing into a temporary folder."""
    if library is None:
        yield {}
        return
    from eopt.measure.kokkos import connector_env

    with tempfile.TemporaryDirectory(prefix="eopt-profile-kokkos-") as tmp:
        env = dict(connector_env(library, Path(tmp)))
        env["_EOPT_PROFILE_KOKKOS_DIR"] = tmp
        yield env


def _kokkos_calls(env: Mapping[str, str]) -> list[Any]:
    """The connector's region calls (its ``USER_REGION`` events, ns since the epoch)."""
    from eopt.model.trace_io import read_events

    path = Path(env["_EOPT_PROFILE_KOKKOS_DIR"]) / "events.csv"
    if not path.exists():
        return []
    return [e for e in read_events(path) if e.category == "USER_REGION"]


def _charge(regions: Sequence[Any], run: Any, point: int) -> list[ElementCall]:
    """Each Kokkos region call's energy from the run's power series (the one engine's
    rule), a region's parent being the region that encloses it."""
    from eopt.attribute.engine import attribute
    from eopt.model.trace import Trace

    if not regions:
        return []
    measured = run.to_trace()
    att = attribute(Trace(tuple(regions), measured.series, {}, "eopt profile --kokkos"))
    return [
        ElementCall(
            c.event.name,
            c.event.name,
            point,
            (c.event.end_ns - c.event.start_ns) * 1e-9,
            c.inclusive_energy_j or 0.0,
        )
        for c in att.calls
    ]
