"""Composing a schedule with the interaction graph (paper §4.4, Appendix D).

Pairs recorded in the interaction graph compose with their characterized values; every
other element composes at the null context in isolation and contributes its Reduction
Theorem tolerance to the accumulated bias bound:

* **Entry edge A → B**: a B placed right after an A on the same device (no other element
  between, gap ≤ ``adjacency_s``) takes the values the edge's signature holds at the
  edge's characterized entry context, in place of its null-context values. Its
  entry-state substitution is then exact and adds no bias.
* **Runtime edge A ↔ B**: an A and a B that overlap on one device (in one ⊕ cluster) take
  the pair's co-run values: either the pair's composite signature in place of ``A ⊕ B``,
  or each endpoint's co-run values, at the realized offset between their starts. Their
  isolation substitution with respect to each other is then exact.

Everything else, and every substitution the graph does not cover, is counted as in
:func:`eopt.calculus.schedule.schedule_bias`. With an empty graph the result is exactly
:func:`eopt.calculus.schedule.compose_schedule` and ``schedule_bias``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from eopt.calculus.contextual import (
    OFFSET_TOL_S,
    ContextOutsideError,
    ContextualSignature,
    ContextWarning,
    OutsidePolicy,
    contextual_signatures,
)
from eopt.calculus.interactions import EntryEdge, InteractionGraph, RuntimeEdge
from eopt.calculus.schedule import (
    _TIME_EPS_S,
    IdlePower,
    IdleWindows,
    Placement,
    _clusters,
    compose_schedule,
    device_timelines,
    idle_windows,
)
from eopt.calculus.uncertainty import DEFAULT_CONFIDENCE, BiasBound, accumulated_bias
from eopt.model.context import EntryContext, RuntimeContext
from eopt.model.signature import Signature

__all__ = ["ContextualComposition", "Substitution", "compose_with_interactions"]


@dataclass(frozen=True)
class Substitution:
    """Where the composition used characterized values instead of null-context ones.

    Attributes:
        edge: The graph edge (``A → B`` or ``A ↔ B``).
        device: The device.
        start_s: Start of the substituted element (the pair's earlier start), in s.
        elements: The element types replaced (one, or the pair).
        context: The realized context the values were taken at, printed.
        energy_shift_j: Characterized minus null-context energy of what was replaced, J
            (for a pair: the composite minus ``A ⊕ B``'s ``s·max(T) + d₁ + d₂``).
    """

    edge: str
    device: str
    start_s: float
    elements: tuple[str, ...]
    context: str
    energy_shift_j: float


@dataclass(frozen=True)
class ContextualComposition:
    """A schedule composed with the interaction graph.

    Attributes:
        signature: The composed signature (``.term`` shows substituted elements as
            ``B⟨after A⟩``, ``A⟨with B⟩`` or the pair's composite name).
        bias: Accumulated bias bound of everything composed context-independently.
        substitutions: Every use of characterized values.
        placements: The placements actually composed (after substitution).
        notes: Edges that matched but could not be used (outside their characterized
            set with ``outside="warn"``); those elements count in the bias.
    """

    signature: Signature
    bias: BiasBound
    substitutions: tuple[Substitution, ...]
    placements: tuple[Placement, ...]
    notes: tuple[str, ...] = ()


@dataclass
class _Slot:
    """A placement being composed, with what its characterized values cover."""

    placement: Placement
    entry_covered: bool = False
    partners: set[int] = field(default_factory=set)  # ids of slots whose co-run is covered
    runtime_done: bool = False


def _lookup(
    index: dict[str, list[ContextualSignature]],
    name: str,
    like: Signature,
    edge: str,
    composite: bool = False,
) -> ContextualSignature:
    """The contextual signature ``name`` at ``like``'s κ and ω.

    A pair's composite has its own κ and per-element ω: only its device-wide ω must
    agree with the pair's.
    """
    found = index.get(name, [])
    if composite:
        key = like.op_point.device_key
        match = [c for c in found if c.points[0].op_point.device_key == key]
    else:
        match = [
            c
            for c in found
            if c.points[0].impl == like.impl and c.points[0].op_point == like.op_point
        ]
    if match:
        return match[0]
    have = "; ".join(f"{c.points[0].impl} at {c.points[0].op_point.label()}" for c in found)
    raise ValueError(
        f"interaction {edge}: the libraries hold no signature {name!r} with a context at "
        f"{like.impl} / {like.op_point.label()} (they hold: {have or 'none'}); add the "
        "characterized signatures (with their 'context') to the libraries passed in"
    )


def _warn_or_raise(exc: ContextOutsideError, outside: OutsidePolicy, notes: list[str]) -> None:
    if outside == "error":
        raise exc
    note = f"{exc}; composed at the null context instead (counted in the bias bound)"
    warnings.warn(note, ContextWarning, stacklevel=3)
    notes.append(note)


def _pair_offset(edge: RuntimeEdge, offset: float) -> bool:
    return any(math.isclose(offset, x, abs_tol=OFFSET_TOL_S) for x in edge.offsets_s)


def _runtime_pass(
    slots: list[_Slot],
    device: str,
    graph: InteractionGraph,
    index: dict[str, list[ContextualSignature]],
    outside: OutsidePolicy,
    subs: list[Substitution],
    notes: list[str],
) -> list[_Slot]:
    """Substitute the co-run values of overlapping graph pairs in one cluster."""
    out = list(slots)
    for i, a in enumerate(slots):
        for b in slots[i + 1 :]:
            if a.runtime_done or b.runtime_done:
                continue
            pa, pb = a.placement, b.placement
            edge = graph.runtime_edge(pa.signature.name, pb.signature.name)
            if edge is None:
                continue
            first, second = (pa, pb) if pa.start <= pb.start else (pb, pa)
            offset = second.start - first.start
            names = (first.signature.name, second.signature.name)
            if not _pair_offset(edge, offset):
                shown = ", ".join(f"{x:g}" for x in edge.offsets_s)
                _warn_or_raise(
                    ContextOutsideError(
                        f"interaction {edge.label} on {device}: {names[1]} starts {offset:g} s "
                        f"after {names[0]}, but the pair was characterized at offsets "
                        f"{shown} s"
                    ),
                    outside,
                    notes,
                )
                continue
            try:
                if edge.composite:
                    runtime = RuntimeContext(corunners=edge.pair, offset_s=offset)
                    values = _lookup(
                        index, edge.signature, first.signature, edge.label, composite=True
                    )
                    sig = values.at(runtime=runtime, outside=outside)
                    null = pa.signature.static_power * max(pa.signature.time, pb.signature.time)
                    null += pa.signature.dynamic_energy + pb.signature.dynamic_energy
                    merged = _Slot(Placement(sig.on(device), device, first.start))
                    merged.runtime_done = True
                    out = [s for s in out if s is not a and s is not b] + [merged]
                    shift = sig.energy - null
                else:
                    new: list[Signature] = []
                    for p, partner in ((first, second), (second, first)):
                        runtime = RuntimeContext(
                            corunners=(partner.signature.name,), offset_s=p.start - first.start
                        )
                        ref = edge.signatures[p.signature.name]
                        values = _lookup(index, ref, p.signature, edge.label)
                        sig = values.at(runtime=runtime, outside=outside)
                        new.append(sig.with_(term=f"{p.signature.name}⟨{runtime}⟩"))
                    shift = sum(s.energy for s in new) - first.signature.energy
                    shift -= second.signature.energy
                    slot_first = a if a.placement is first else b
                    slot_second = b if slot_first is a else a
                    for slot, sig, p in (
                        (slot_first, new[0], first),
                        (slot_second, new[1], second),
                    ):
                        slot.placement = Placement(sig.on(device), device, p.start)
                        slot.runtime_done = True
                    slot_first.partners.add(id(slot_second))
                    slot_second.partners.add(id(slot_first))
            except ContextOutsideError as exc:
                _warn_or_raise(exc, outside, notes)
                continue
            a.runtime_done = b.runtime_done = True
            subs.append(
                Substitution(
                    edge.label, device, first.start, names, f"co-run, offset {offset:g} s", shift
                )
            )
    return out


def _entry_pass(
    slots: list[_Slot],
    device: str,
    graph: InteractionGraph,
    index: dict[str, list[ContextualSignature]],
    outside: OutsidePolicy,
    adjacency_s: float,
    subs: list[Substitution],
    notes: list[str],
) -> None:
    """Substitute a consumer's values after its producer (in start order, in place)."""
    ordered = sorted(slots, key=lambda s: s.placement.start)
    # Of the slots before this one (as substituted), the one that ends last: tracked in
    # one pass instead of rescanning every earlier slot for each consumer.
    latest: Placement | None = None
    for k, slot in enumerate(ordered):
        if k:
            done = ordered[k - 1].placement
            latest = done if latest is None or done.end > latest.end else latest
        c = slot.placement
        if latest is None or latest.end > c.start + _TIME_EPS_S:
            continue  # first on the device, or something still runs when c starts
        p = latest
        if c.start - p.end > adjacency_s + _TIME_EPS_S or slot.runtime_done:
            continue
        edge: EntryEdge | None = graph.entry_edge(p.signature.name, c.signature.name)
        if edge is None:
            continue
        if len(edge.characterized) != 1:
            raise ValueError(
                f"interaction {edge.label}: characterized at {len(edge.characterized)} entry "
                "contexts, and a schedule does not say which one it realizes; keep the one "
                "the schedule realizes in the graph (or characterize the pair as a composite)"
            )
        realized: EntryContext = edge.characterized[0]
        try:
            values = _lookup(index, edge.signature, c.signature, edge.label)
            sig = values.at(entry=realized, outside=outside)
        except ContextOutsideError as exc:
            _warn_or_raise(exc, outside, notes)
            continue
        sig = sig.with_(name=c.signature.name, term=f"{c.signature.name}⟨{realized}⟩")
        slot.placement = Placement(sig.on(device), device, c.start)
        slot.entry_covered = True
        subs.append(
            Substitution(
                edge.label,
                device,
                c.start,
                (c.signature.name,),
                str(realized),
                sig.energy - c.signature.energy,
            )
        )


def _chain_clusters(slots: list[_Slot]) -> list[list[_Slot]]:
    """Chain-overlapping clusters of one device's slots (as ``compose_schedule`` forms)."""
    return _clusters(sorted(slots, key=lambda s: s.placement.start), lambda s: s.placement)


def compose_with_interactions(
    placements: Iterable[Any],
    library: Iterable[Signature],
    graph: InteractionGraph,
    idle_power: IdlePower = None,
    *,
    name: str = "schedule",
    confidence: float = DEFAULT_CONFIDENCE,
    starts_at_null: bool = True,
    outside: OutsidePolicy = "error",
    adjacency_s: float = 0.0,
    time_mean: str = "max_of_means",
) -> ContextualComposition:
    """Compose a schedule using characterized values for the pairs in ``graph``.

    Assumptions:
        Placements fix every start: an element whose characterized time differs from its
        null-context time keeps its start, and what follows keeps its own. Runtime pairs
        are matched on one device within one ⊕ cluster, each element in at most one pair;
        an element given co-run values keeps its null-context entry values.

    Args:
        placements: As for :func:`eopt.calculus.schedule.compose_schedule`.
        library: Signatures holding the characterized values the edges point to (those
            with a ``context``); others are ignored here.
        graph: The interaction graph (an empty one composes exactly as
            ``compose_schedule``).
        idle_power: Draw of idle gaps, as for ``compose_schedule``.
        name: Name of the composite signature.
        confidence: 1 − α of the bias bound.
        starts_at_null: Whether the schedule starts at the null context (its first
            elements then need no entry-state substitution).
        outside: ``"error"``: a matched pair realized outside its characterized set is an
            error; ``"warn"``: a :class:`ContextWarning`, and the pair composes at the
            null context with its bias counted.
        adjacency_s: Largest gap, in s, after which a producer still counts as "right
            before" its consumer.
        time_mean: The makespans' convention, as for ``compose_schedule``.

    Raises:
        ContextOutsideError: ``outside="error"`` and a pair realized outside its
            characterized set.
        ValueError: an edge whose signatures the libraries lack, or malformed placements.
    """
    if not (adjacency_s >= 0 and math.isfinite(adjacency_s)):
        raise ValueError(f"adjacency_s must be a finite number of s ≥ 0, got {adjacency_s!r}")
    timelines = device_timelines(placements)
    if not timelines:
        raise ValueError("compose_with_interactions needs at least one placed element")
    index: dict[str, list[ContextualSignature]] = {}
    if not graph.empty:
        for cs in contextual_signatures(library):
            index.setdefault(cs.name, []).append(cs)
    subs: list[Substitution] = []
    notes: list[str] = []
    per_device: dict[str, list[_Slot]] = {}
    for device, clusters in timelines.items():
        slots: list[_Slot] = []
        for cluster in clusters:
            group = [_Slot(p) for p in cluster]
            if len(group) > 1 and graph.runtime:
                group = _runtime_pass(group, device, graph, index, outside, subs, notes)
            slots.extend(group)
        if graph.entry:
            _entry_pass(slots, device, graph, index, outside, adjacency_s, subs, notes)
        per_device[device] = slots
    final = [s.placement for slots in per_device.values() for s in slots]
    signature = compose_schedule(final, idle_power, name=name, time_mean=time_mean)
    bias = _bias(per_device, confidence, starts_at_null, idle_windows(final, idle_power))
    return ContextualComposition(signature, bias, tuple(subs), tuple(final), tuple(notes))


def _bias(
    per_device: dict[str, list[_Slot]],
    confidence: float,
    starts_at_null: bool,
    windows: IdleWindows,
) -> BiasBound:
    """Appendix D over what stayed context-independent (``schedule_bias``'s counting)."""
    all_slots = [s for slots in per_device.values() for s in slots]
    origin = min(s.placement.start for s in all_slots)
    multi = len(per_device) > 1
    contributions: list[tuple[str, float, float]] = []
    for slots in per_device.values():
        for cluster in _chain_clusters(slots):
            ids = {id(s) for s in cluster}
            for s in cluster:
                p = s.placement
                at_start = starts_at_null and p.start - origin <= _TIME_EPS_S
                others = len(ids - {id(s)} - s.partners)
                corun = multi or others > 0
                m = (0.0 if at_start or s.entry_covered else 1.0) + (1.0 if corun else 0.0)
                m *= windows.gate.get((p.device, p.start, p.signature.name), 1.0)
                contributions.append((p.signature.name, m, p.signature.std_energy))
    return accumulated_bias([*contributions, *windows.tails], confidence)
