"""Composing a placed schedule into one signature (paper §3.3.4, Eq. (9), Figure 2).

A schedule is a set of placed elements: a signature, the device it runs on and its start
time. :func:`compose_schedule` turns it into an operator term over ⊗, ⊕ and ⊕multi:

1. On each device, elements whose intervals chain-overlap form one cluster, merged with
   ``par``; every operand that starts after the cluster is prefixed with an idle element
   (``ι ⊗ AR``), so all operands co-start, as ⊕ requires.
2. Every period in which a device runs nothing becomes an idle element, including the
   gaps before the device's first element and after its last, so each device is covered
   from the schedule's origin to its makespan.
3. Each device's elements are composed with ``seq`` in time order, and the devices with
   ``par_multi``.

Every instant on every device belongs to exactly one element, parallel group or idle
element, so the composed energy is exact: Σ_dev (static draw over the makespan) + Σ d.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import yaml

from eopt.calculus.operators import (
    CompositionError,
    idle,
    max_moments,
    max_probabilities,
    par,
    par_multi,
    seq,
)
from eopt.calculus.uncertainty import BiasBound, accumulated_bias
from eopt.model.fileformats import (
    KINDS,
    FileFormatError,
    Where,
    guard,
    parse_json,
    parse_yaml,
    read_text,
    refuse_other_kind,
    string,
    within_run,
)
from eopt.model.signature import Signature

__all__ = [
    "DeviceUsage",
    "Placement",
    "PlacementFile",
    "PlacementsError",
    "compose_schedule",
    "device_timelines",
    "idle_windows",
    "read_placements",
    "schedule_bias",
    "schedule_breakdown",
    "solved_placements",
]

# Start/end differences below this many seconds are rounding, not gaps or overlaps
# (1 ps: far below any measurable kernel time).
_TIME_EPS_S = 1e-12

IdlePower = float | Mapping[str, float] | None


@dataclass(frozen=True)
class Placement:
    """One element placed in a schedule.

    Attributes:
        signature: The element's signature.
        device: The device it runs on.
        start: Start time in s, on the schedule's clock (any origin).
    """

    signature: Signature
    device: str
    start: float

    @property
    def end(self) -> float:
        """End time in s: start + the signature's time."""
        return self.start + self.signature.time


def _as_placement(item: Any, index: int) -> Placement:
    """Accept a :class:`Placement`, a ``(signature, device, start)`` tuple or a dict."""
    device: Any
    if isinstance(item, Placement):
        sig, device, start = item.signature, item.device, item.start
    elif isinstance(item, Mapping):
        missing = [k for k in ("signature", "start") if k not in item]
        if missing:
            raise ValueError(
                f"placements[{index}]: missing key(s) {missing}; "
                "expected {'signature': Signature, 'device': str, 'start': seconds}"
            )
        sig, device, start = item["signature"], item.get("device"), item["start"]
    elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 3:
        sig, device, start = item
    else:
        raise ValueError(
            f"placements[{index}]: expected (signature, device, start) or a dict with those "
            f"keys, got {item!r}"
        )
    if not isinstance(sig, Signature):
        raise ValueError(f"placements[{index}]: signature must be a Signature, got {sig!r}")
    if device is None:
        if len(sig.devices) != 1:
            raise ValueError(
                f"placements[{index}] ({sig.name!r}): no device given and the signature is on "
                f"{list(sig.devices) or 'no device'}; give the device to run it on"
            )
        device = sig.devices[0]
    if isinstance(start, bool) or not isinstance(start, (int, float)) or not math.isfinite(start):
        raise ValueError(f"placements[{index}] ({sig.name!r}): start must be a finite number of s")
    return Placement(sig.on(str(device)), str(device), float(start))


def _gap_power(device: str, idle_power: IdlePower, neighbour: Signature) -> float:
    """Draw of an idle gap on ``device``, in W."""
    if idle_power is None:
        # The device stays ready at the operating point it was left in (the previous
        # element's; the next one's before the first element).
        return neighbour.static_power
    if isinstance(idle_power, Mapping):
        return float(idle_power[device])  # every device checked by compose_schedule
    return float(idle_power)


_T = TypeVar("_T")


def _clusters(placed: Sequence[_T], placement: Callable[[_T], Placement]) -> list[list[_T]]:
    """Group a device's items (sorted by start) into chain-overlapping clusters.

    Args:
        placed: The items, in start order.
        placement: Each item's placement.
    """
    clusters: list[list[_T]] = []
    cluster_end = -math.inf
    for item in placed:
        p = placement(item)
        if clusters and p.start < cluster_end - _TIME_EPS_S:
            clusters[-1].append(item)
            cluster_end = max(cluster_end, p.end)
        else:
            clusters.append([item])
            cluster_end = p.end
    return clusters


def _merge_cluster(device: str, cluster: list[Placement], time_mean: str) -> Signature:
    """One cluster as an element: a single placement, or ⊕ of idle-prefixed operands."""
    if len(cluster) == 1:
        return cluster[0].signature
    t0 = cluster[0].start
    base = cluster[0].signature
    operands: list[Signature] = []
    for p in cluster:
        if not math.isclose(p.signature.static_power, base.static_power, rel_tol=1e-9):
            raise CompositionError(
                f"device {device!r}: {base.name!r} [{t0:g}, {cluster[0].end:g}] s at "
                f"{base.static_power:g} W overlaps {p.signature.name!r} "
                f"[{p.start:g}, {p.end:g}] s at {p.signature.static_power:g} W; elements "
                "that overlap on one device share its device-wide operating point, so give "
                "them signatures with the same static power (or move them apart)"
            )
        lead = p.start - t0
        if lead > _TIME_EPS_S:
            # The prefix only shifts the operand's start inside the group; the device is
            # busy, so it draws the group's static power, which ⊕ counts once anyway.
            operands.append(seq(idle(lead, p.signature.static_power, device), p.signature))
        else:
            operands.append(p.signature)
    return par(operands, time_mean=time_mean)


def device_timelines(
    placements: Iterable[Any],
) -> dict[str, list[list[Placement]]]:
    """Placements grouped by device (first-seen order), each as time-ordered clusters.

    A cluster is a maximal run of placements whose intervals chain-overlap; a single
    element is a cluster of one.
    """
    items = [_as_placement(item, i) for i, item in enumerate(placements)]
    by_device: dict[str, list[Placement]] = {}
    for p in items:
        by_device.setdefault(p.device, []).append(p)
    # Stable sort: co-starting elements keep the order they were given in.
    return {
        d: _clusters(sorted(ps, key=lambda p: p.start), lambda p: p) for d, ps in by_device.items()
    }


@dataclass(frozen=True)
class _DeviceTimeline:
    """One device of a schedule as the calculus composes it.

    Attributes:
        parts: Its elements, ⊕ groups and idle gaps from the schedule's origin to the end
            of its last element, in time order (the gaps' lengths are planned: what
            comes after an element starts when it ends, plus the planned gap).
        tail_w: Its draw after its last element, until the schedule's end, in W.
        tail_s: That tail's planned length, in s (0 for the device that ends last).
    """

    parts: list[Signature]
    tail_w: float
    tail_s: float


def _device_parts(
    placements: Iterable[Any], idle_power: IdlePower, time_mean: str = "max_of_means"
) -> dict[str, _DeviceTimeline]:
    """Each device's elements, ⊕ groups and idle gaps, and what it draws after its last."""
    timelines = device_timelines(placements)
    if not timelines:
        raise ValueError("compose_schedule needs at least one placed element")
    if isinstance(idle_power, Mapping):
        missing = [d for d in timelines if d not in idle_power]
        if missing:
            raise ValueError(
                f"idle_power has no entry for device {missing[0]!r} (it has "
                f"{sorted(idle_power)}); give every device of the schedule a draw"
            )
    origin = min(c[0].start for clusters in timelines.values() for c in clusters)
    horizon = max(p.end for clusters in timelines.values() for c in clusters for p in c)
    out: dict[str, _DeviceTimeline] = {}
    for device, clusters in timelines.items():
        parts: list[Signature] = []
        cursor = origin
        previous: Signature | None = None
        for cluster in clusters:
            merged = _merge_cluster(device, cluster, time_mean)
            gap = cluster[0].start - cursor
            if gap > _TIME_EPS_S:
                draw = _gap_power(device, idle_power, previous or merged)
                parts.append(idle(gap, draw, device))
            parts.append(merged)
            cursor = max(cursor, max(p.end for p in cluster))
            previous = merged
        assert previous is not None  # every device has a cluster
        tail = horizon - cursor
        out[device] = _DeviceTimeline(
            parts, _gap_power(device, idle_power, previous), tail if tail > _TIME_EPS_S else 0.0
        )
    return out


@dataclass(frozen=True)
class DeviceUsage:
    """How one device of a schedule spends its time and energy.

    Attributes:
        device: The device.
        busy_s: Time running elements (⊕ groups counted once), s.
        idle_s: Time in idle elements, s.
        busy_static_j: Static energy while busy, J.
        idle_j: Energy of the idle elements, J.
        dynamic_j: Dynamic energy of its elements, J.
    """

    device: str
    busy_s: float
    idle_s: float
    busy_static_j: float
    idle_j: float
    dynamic_j: float

    @property
    def energy_j(self) -> float:
        """The device's total energy over the schedule, J."""
        return self.busy_static_j + self.idle_j + self.dynamic_j


def schedule_breakdown(
    placements: Iterable[Any], idle_power: IdlePower = None
) -> list[DeviceUsage]:
    """Per-device busy and idle time and energy of a schedule (devices in first-seen order).

    The planned times, so the devices' energies add up to :func:`compose_schedule`'s
    energy at ``time_mean="max_of_means"``; the idle share is the static energy a
    schedule spends waiting (pipeline bubbles, stragglers).
    """
    usage = []
    for device, timeline in _device_parts(placements, idle_power).items():
        idles = [p for p in timeline.parts if p.meta.get("idle")]
        busy = [p for p in timeline.parts if not p.meta.get("idle")]
        usage.append(
            DeviceUsage(
                device=device,
                busy_s=sum(p.time for p in busy),
                idle_s=sum(p.time for p in idles) + timeline.tail_s,
                busy_static_j=sum(p.static_energy for p in busy),
                idle_j=sum(p.energy for p in idles) + timeline.tail_w * timeline.tail_s,
                dynamic_j=sum(p.dynamic_energy for p in busy),
            )
        )
    return usage


def compose_schedule(
    placements: Iterable[Any],
    idle_power: IdlePower = None,
    name: str = "schedule",
    time_mean: str = "max_of_means",
) -> Signature:
    """Compose a schedule of placed elements into one signature (paper §3.3.4).

    Same-device overlaps merge with ``par`` (later starters idle-prefixed), every gap and
    the time before a device's first element become idle elements, each device is
    composed with ``seq`` and the devices with ``par_multi``, which holds each device at
    its idle draw from its last element to the makespan. The result's ``.term`` is the
    operator expression, e.g. for Figure 2 of the paper::

        ((F1 ⊗ F2 ⊗ ι ⊗ B1 ⊗ ι ⊗ (B2 ⊕ (ι ⊗ AR))) ⊕multi (ι ⊗ F1 ⊗ … ⊗ ι))

    Its time and energy are the means of the makespan and of the energy under the
    uncertainty model of docs/uncertainty.md, and its variances those of one run.

    Assumptions:
        The context-independent algebra: each element keeps its signature wherever it is
        placed. The schedule's origin is the earliest start over all placements, its end
        the latest end; every device that appears is held over that whole span. A
        device's first element starts at its placement; each later part of a device
        starts when the one before it ends, plus the planned gap (the gaps are planned,
        the device's end and so every idle tail inherits the elements' time noise).

    Args:
        placements: ``Placement`` objects, ``(signature, device, start)`` tuples or dicts
            with keys ``signature``, ``device`` (optional when the signature sits on one
            device) and ``start`` (s).
        idle_power: Draw of idle gaps in W: ``None`` for the static power of the element
            before the gap (after it, for a leading gap), one value for every device, or
            a mapping device → W (which must name every device).
        name: Name of the composite signature.
        time_mean: ``"max_of_means"`` (default, the paper's convention: the planned
            makespan, what a solver's schedule reports) or ``"expected_max"``
            (makespans at their mean E[max]: what measurements average to, and what
            ``eopt check`` compares them with).

    Returns:
        The composite signature; ``.devices`` lists the devices in first-seen order.

    Raises:
        CompositionError: when elements that overlap on one device have different
            static powers.
        ValueError: for malformed placements or an ``idle_power`` mapping that misses a
            device.

    Example:
        >>> from eopt.calculus import Signature
        >>> a = Signature("a", static_power=50.0, time=2.0, dynamic_energy=10.0)
        >>> b = Signature("b", static_power=50.0, time=1.0, dynamic_energy=4.0)
        >>> s = compose_schedule([(a, "gpu0", 0.0), (b, "gpu1", 0.5)])
        >>> s.term, s.energy  # 2 devices x 50 W x 2 s + 14 J
        ('(a ⊕multi (ι ⊗ b ⊗ ι))', 214.0)
    """
    devices = _device_parts(placements, idle_power, time_mean)
    per_device = [seq(t.parts, name=f"{name}@{device}") for device, t in devices.items()]
    if len(per_device) == 1:
        return per_device[0].with_(name=name)
    tails = {device: t.tail_w for device, t in devices.items()}
    return par_multi(per_device, idle_power=tails, name=name, time_mean=time_mean)


@dataclass(frozen=True)
class IdleWindows:
    """What App. D adds for the idle windows of a multi-device schedule.

    Attributes:
        gate: Per element (device, start s, name), the factor 1 + w·P′/s on its bias
            tolerances: w is the probability its end sets the makespan, P′ the idle
            draw of every other device, W, s its static power — while it stretches, the
            devices waiting for it keep drawing (the power ratio after Eq. 38).
        tails: Per device that can end before the makespan, ``(label, 2, σ_Eι)`` with
            σ_Eι = p·√Var(M − end), J: the tail idle element, whose duration inherits
            the variance of the times that set it, carrying its two substitutions.
    """

    gate: dict[tuple[str, float, str], float]
    tails: tuple[tuple[str, float, float], ...]


def idle_windows(placements: Iterable[Any], idle_power: IdlePower = None) -> IdleWindows:
    """The idle-window terms of App. D (after Eq. 38) for a schedule's bias bound.

    One device: none (its gaps are planned, of schedule-set duration and no variance).
    Several: each device idles from its last end to the makespan M; to first order in
    the Gaussian model of docs/uncertainty.md, Var(M − end_d) = Var(end_d)·(1 − 2π_d) +
    Var(M) with π_d the probability that device d ends last, which for the padded pair of
    App. D is the paper's σ_Eι² = s₁²(σ_T1² + σ_T2²).
    """
    parts = _device_parts(placements, idle_power)
    if len(parts) < 2:
        return IdleWindows({}, ())
    chains = {d: seq(t.parts, name=d) for d, t in parts.items()}
    ends = [c.time for c in chains.values()]
    end_vars = [c.var_time for c in chains.values()]
    last = max_probabilities(ends, end_vars)
    _, var_m = max_moments(ends, end_vars)
    draw = {d: t.tail_w for d, t in parts.items()}
    total = sum(draw.values())
    spreads = [
        (d, draw[d] * math.sqrt(max(0.0, v * (1.0 - 2.0 * pi) + var_m)))
        for d, v, pi in zip(chains, end_vars, last, strict=True)
    ]
    tails = tuple((f"ι after {d}", 2.0, sd) for d, sd in spreads if sd > 0.0)
    gate: dict[tuple[str, float, str], float] = {}
    for (device, clusters), pi_dev in zip(device_timelines(placements).items(), last, strict=True):
        others = total - draw[device]
        for cluster in clusters:
            t0 = cluster[0].start
            ends_in = [p.end - t0 for p in cluster]
            share = max_probabilities(ends_in, [p.signature.var_time for p in cluster])
            for p, pi in zip(cluster, share, strict=True):
                s_p = p.signature.static_power
                factor = 1.0 + pi_dev * pi * others / s_p if s_p > 0 else 1.0
                gate[(device, p.start, p.signature.name)] = factor
    return IdleWindows(gate, tails)


def schedule_bias(
    placements: Iterable[Any],
    confidence: float = 0.95,
    starts_at_null: bool = True,
    idle_power: IdlePower = None,
) -> BiasBound:
    """Worst-case reduction bias of composing a schedule context-independently (App. D).

    Each element carries the Eq. (13) tolerances of the substitutions it needs, as in
    :func:`eopt.calculus.expression.expression_bias` for the schedule's Eq. (9) term: one
    for the entry-state substitution unless it starts at the schedule's origin (and the
    schedule starts at the null context), and one for the isolation substitution when it
    co-runs (it shares a ⊕ group, or the schedule spans several devices, joined by
    ⊕multi). Across devices, App. D's idle windows add (:func:`idle_windows`): an element
    that can set the makespan scales its tolerances by the power ratio of the devices
    waiting for it, and each device's idle tail carries two tolerances of its own. Gaps
    inside a device are planned: schedule-set durations, not counted.

    Args:
        placements: As for :func:`compose_schedule`.
        confidence: 1 − α.
        starts_at_null: Whether the schedule starts at the null context.
        idle_power: The idle draw, as for :func:`compose_schedule` (it weighs the idle
            windows).
    """
    timelines = device_timelines(placements)
    if not timelines:
        raise ValueError("schedule_bias needs at least one placed element")
    origin = min(c[0].start for clusters in timelines.values() for c in clusters)
    multi = len(timelines) > 1
    windows = idle_windows(placements, idle_power)
    contributions: list[tuple[str, float, float]] = []
    for device, clusters in timelines.items():
        for cluster in clusters:
            for p in cluster:
                at_start = starts_at_null and p.start - origin <= _TIME_EPS_S
                corun = multi or len(cluster) > 1
                m = (0.0 if at_start else 1.0) + (1.0 if corun else 0.0)
                m *= windows.gate.get((device, p.start, p.signature.name), 1.0)
                contributions.append((p.signature.name, m, p.signature.std_energy))
    return accumulated_bias([*contributions, *windows.tails], confidence)


# Placement files ----------------------------------------------------------------------------
@dataclass(frozen=True)
class PlacementFile:
    """A placements file read against a library.

    Attributes:
        placements: The placed signatures.
        idle_power: The file's ``idle_power`` (None when absent).
        source: The file's path.
    """

    placements: tuple[Placement, ...]
    idle_power: float | dict[str, float] | None
    source: str


_PLACEMENT_KEYS = {"element", "device", "start"}


def _item_lines(text: str) -> list[int]:
    """1-based line of each placement in the file, best effort (empty when unknown)."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return []
    if isinstance(root, yaml.MappingNode):
        root = next((v for k, v in root.value if getattr(k, "value", None) == "placements"), None)
    if not isinstance(root, yaml.SequenceNode):
        return []
    return [item.start_mark.line + 1 for item in root.value]


class PlacementsError(FileFormatError):
    """A placements file (or solved schedule) compose cannot use; names file and place."""


def read_placements(path: str | os.PathLike[str], library: Iterable[Signature]) -> PlacementFile:
    """Read a placements file (YAML or JSON) and look its elements up in ``library``.

    A schedule written by ``eopt solve`` (``"schema": "eopt.schedule/1"``) is read too:
    each element's type, κ and ω pick its signature, the devices' ``idle_power_w`` give
    the idle draw, and every change of a device-wide setting on a device with
    ``transition_time_s``/``transition_energy_j`` becomes an element of that time and
    energy (so the composed energy is the schedule's own).

    Otherwise the file is either a list of placements or a mapping with ``placements`` and
    an optional ``idle_power`` (W, or a mapping device → W). Each placement has ``element``
    (a name with an optional selector, e.g. ``gemm[impl=cutlass]``), ``device`` and
    ``start`` (s ≥ 0, or a string with a unit such as ``1.5ms``)::

        idle_power: 60W
        placements:
          - {element: F1, device: gpu1, start: 0}
          - {element: AR, device: gpu1, start: 8ms}

    When several signatures share a name, those on the placement's device are preferred.

    Raises:
        PlacementsError: (a ValueError) naming the file, the placement (index and line)
            and the fix; a file of another eopt kind is named for what it is.
    """
    source = str(path)
    at = Where(source, error=PlacementsError)
    try:
        with guard(at, what="a placements file"):
            return _read_placements(Path(path), at, library)
    except PlacementsError:
        refuse_other_kind(path, ("placements", "schedule"), at)
        raise


def _read_placements(path: Path, at: Where, library: Iterable[Signature]) -> PlacementFile:
    # Imported here: expression imports this module's siblings, not the other way round.
    from eopt.calculus.expression import resolve_element
    from eopt.model.units import parse_power_w, parse_time_s

    source = at.file
    text = read_text(path, at, what="a placements file")
    # A .json file (what `eopt solve` writes) is held to JSON: YAML would read a stray
    # `Infinity` token as text and let it pass.
    if path.suffix.lower() == ".json":
        data = parse_json(text, at)
    else:
        data = parse_yaml(text, at, language="YAML/JSON")
    idle_raw: Any = None
    if isinstance(data, Mapping) and data.get("schema") == KINDS["schedule"].schema:
        return _solved_schedule(data, library, at)
    if isinstance(data, Mapping):
        unknown = sorted(str(k) for k in data if k not in {"placements", "idle_power", "schema"})
        if unknown:
            at.fail(f"unknown key(s) {unknown}; expected 'placements' and optionally 'idle_power'")
        idle_raw = data.get("idle_power")
        data = data.get("placements")
    if not isinstance(data, list) or not data:
        at.fail(
            "expected a non-empty list of placements "
            "({element: NAME, device: DEV, start: SECONDS}), directly or under 'placements'"
        )
    idle_power: float | dict[str, float] | None = None
    try:
        if isinstance(idle_raw, Mapping):
            idle_power = {
                str(dev): parse_power_w(w, f"idle_power[{dev}]") for dev, w in idle_raw.items()
            }
        elif idle_raw is not None:
            idle_power = parse_power_w(idle_raw, "idle_power")
    except ValueError as exc:
        at.fail(str(exc))
    lines = _item_lines(text)
    placements: list[Placement] = []
    for i, item in enumerate(data):
        line = f":{lines[i]}" if i < len(lines) else ""
        where = f"{source}{line}: placement {i + 1}"
        if isinstance(item, Mapping) and isinstance(item.get("element"), (str, int)):
            where = f"{where} ({item['element']})"
        if not isinstance(item, Mapping):
            raise PlacementsError(
                f"{where}: expected a mapping {{element, device, start}}, got {item!r}"[:300]
            )
        unknown = sorted(str(k) for k in item if k not in _PLACEMENT_KEYS)
        missing = sorted(k for k in ("element", "start") if k not in item)
        if unknown or missing:
            problem = f"unknown key(s) {unknown}" if unknown else f"missing key(s) {missing}"
            raise PlacementsError(
                f"{where}: {problem}; each placement has element, device and start"
            )
        try:
            ref = string(item["element"], Where("element"), what="an element name")
            device = None
            if item.get("device") is not None:
                device = string(item["device"], Where("device"), what="a device name")
            sig = resolve_element(ref, library, device)
            start = parse_time_s(item["start"], "start")
            if device is None:
                if len(sig.devices) != 1:
                    raise ValueError(
                        f"no device given and the signature is on {list(sig.devices)}; "
                        "add 'device: NAME'"
                    )
                device = sig.devices[0]
            placements.append(Placement(sig.on(device), device, start))
        except ValueError as exc:
            raise PlacementsError(f"{where}: {exc}") from None
    return PlacementFile(tuple(placements), idle_power, source)


def solved_placements(
    data: Mapping[str, Any], library: Iterable[Signature], source: str = "<schedule>"
) -> PlacementFile:
    """The placements of a solved schedule (``Schedule.to_dict()``, the file `eopt solve`
    writes), each element at the library's signature for its κ and ω.

    Raises:
        PlacementsError: naming the element whose signature the library lacks.
    """
    return _solved_schedule(data, library, Where(source, error=PlacementsError))


def _solved_schedule(
    data: Mapping[str, Any], library: Iterable[Signature], at: Where
) -> PlacementFile:
    """Placements of an ``eopt.schedule/1`` file (the output of ``eopt solve``).

    The file is validated by the schedule format's own parser
    (:meth:`eopt.model.schedule.Schedule.from_dict`); each element's type, κ and ω then
    pick its signature, whose time must be the schedule's duration.
    """
    # Imported here: the plan layer builds on the calculus, not the other way round.
    from eopt.calculus.expression import selector_for
    from eopt.model.schedule import Schedule

    schedule = Schedule.from_dict(data, at.file, error=PlacementsError)
    if not schedule.elements:
        (at / "elements").fail("expected a non-empty list of elements")
    by_name: dict[str, list[Signature]] = {}  # one pass over the library, not one per element
    for s in library:
        by_name.setdefault(s.name, []).append(s)
    placements: list[Placement] = []
    for i, element in enumerate(schedule.elements):
        item = at / "elements" / i
        where = replace(item, path=f"{item.path} ({element.name})")
        named = by_name.get(element.type, [])
        found = [s for s in named if s.impl == element.impl and s.op_point == element.op_point]
        # Context-independent values first: characterized ones enter through a graph.
        found.sort(key=lambda s: s.context is not None)
        if not found:
            choices = "; ".join(selector_for(s, named) for s in named[:8]) or "none"
            where.fail(
                f"no signature {element.type!r} with impl={element.impl} at "
                f"{element.op_point.label()} in the libraries (signatures of "
                f"{element.type!r}: {choices}); pass the libraries the schedule was solved with"
            )
        sig = found[0]
        if not math.isclose(element.duration, sig.time, rel_tol=1e-6, abs_tol=1e-12):
            where.fail(
                f"the schedule says {element.duration:g} s but the library's signature takes "
                f"{sig.time:g} s; pass the libraries the schedule was solved with"
            )
        start = within_run(
            element.start, element.start + sig.time, schedule.makespan, where, run_name="makespan"
        )
        placements.append(Placement(sig.on(element.device), element.device, start))
    transition = {
        d.name: (d.transition_time_s, d.transition_energy_j)
        for d in schedule.devices
        if d.has_transition
    }
    placements += _setting_changes(placements, transition, at)
    idle_power = {d.name: d.idle_power_w for d in schedule.devices}
    return PlacementFile(tuple(placements), idle_power, at.file)


#: Name of the element that stands for a change of a device-wide setting.
SETTING_CHANGE = "setting change"


def _setting_changes(
    placements: Sequence[Placement], transition: Mapping[str, tuple[float, float]], at: Where
) -> list[Placement]:
    """An element for every change of a device-wide setting on a device that pays for one.

    `eopt solve` starts the element after a change τ s after its predecessor on the
    device ends, and prices the change at ε J with the device busy (not idle) over τ
    (``eopt.model.schedule.Schedule.transition_energy``). Composed as an idle gap, the
    change would cost s̄·τ instead of ε. So each change becomes an element of τ s and ε J
    (all of it dynamic: no static draw of its own) ending where the next element starts.
    Consecutive elements are compared in start order, as the schedule counts changes.

    Raises:
        PlacementsError: an element starts less than τ after its predecessor ends.
    """
    changes: list[Placement] = []
    for device, (tau, eps) in transition.items():
        row = sorted((p for p in placements if p.device == device), key=lambda p: p.start)
        for before, after in itertools.pairwise(row):
            if before.signature.op_point.device_key == after.signature.op_point.device_key:
                continue
            ready = max(p.end for p in row if p.start <= before.start)
            if after.start - tau < ready - _TIME_EPS_S * max(1.0, abs(ready)):
                at.fail(
                    f"on device {device!r}, {after.signature.name} starts "
                    f"{after.start - ready:.6g} s after the element before it ends, but "
                    f"changing the device's setting takes {tau:g} s (transition_time_s)"
                )
            sig = Signature(
                SETTING_CHANGE, static_power=0.0, time=tau, dynamic_energy=eps, devices=(device,)
            )
            changes.append(Placement(sig, device, after.start - tau))
    return changes
