"""Energy breakdown of a schedule and its savings against the all-fastest baseline.

Accounting (design.md): E = Σ_i (s_i·T_i + d_i) + Σ_dev s̄_dev·(H − busy_dev), plus the
energy of setting changes where a device pays for them (busy then includes their time).
The static part over the makespan is the elements' static energy s_i·T_i plus the idle
energy s̄·(H − busy) of the gaps; the dynamic part d_i is shown per element type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eopt.model.schedule import Schedule

__all__ = ["Baseline", "EnergyBreakdown", "baseline_of", "energy_breakdown"]


@dataclass(frozen=True)
class EnergyBreakdown:
    """Where a schedule's predicted energy goes, in J.

    Attributes:
        dynamic_by_type: Σ d_i per element type.
        static_busy_j: Σ s_i·T_i of elements (static draw while they run).
        unsplit_j: Energy of elements whose d is unknown (not split into static/dynamic).
        idle_j: Σ_dev s̄·(H − busy).
        transitions_j: Energy paid for device-wide setting changes.
        transitions: Number of setting changes over all devices.
        total_j: The sum of the parts.
        predicted_j: The schedule's own predicted energy (should equal ``total_j``).
    """

    dynamic_by_type: Mapping[str, float]
    static_busy_j: float
    unsplit_j: float
    idle_j: float
    transitions_j: float
    transitions: int
    total_j: float
    predicted_j: float

    @property
    def dynamic_j(self) -> float:
        """Σ of the dynamic parts."""
        return sum(self.dynamic_by_type.values())

    @property
    def static_over_makespan_j(self) -> float:
        """Static draw over the whole makespan: while busy plus while idle."""
        return self.static_busy_j + self.idle_j


@dataclass(frozen=True)
class Baseline:
    """The all-fastest reference and the savings against it.

    Attributes:
        energy_j: Baseline energy, in J.
        makespan_s: Baseline makespan, in s.
        label: What the baseline is.
        saved_j: Baseline − schedule energy, in J.
        saved_fraction: saved / baseline.
        time_added_s: Schedule − baseline makespan, in s.
        time_added_fraction: time added / baseline makespan.
    """

    energy_j: float
    makespan_s: float
    label: str
    saved_j: float
    saved_fraction: float
    time_added_s: float
    time_added_fraction: float


def energy_breakdown(schedule: Schedule) -> EnergyBreakdown:
    """Split the schedule's predicted energy into dynamic, static-while-busy and idle."""
    dynamic: dict[str, float] = {}
    unsplit = 0.0
    for e in schedule.elements:
        if e.dynamic_energy is None:
            unsplit += e.energy
            continue
        dynamic[e.type] = dynamic.get(e.type, 0.0) + e.dynamic_energy
    # Overlapping elements on one device draw static power once (the schedule knows how).
    static_busy = schedule.element_energy() - unsplit - sum(dynamic.values())
    idle = schedule.idle_energy()
    transitions_j = schedule.transition_energy()
    total = sum(dynamic.values()) + static_busy + unsplit + idle + transitions_j
    return EnergyBreakdown(
        dynamic_by_type=dict(sorted(dynamic.items())),
        static_busy_j=static_busy,
        unsplit_j=unsplit,
        idle_j=idle,
        transitions_j=transitions_j,
        transitions=sum(schedule.transitions(d.name) for d in schedule.devices),
        total_j=total,
        predicted_j=schedule.energy,
    )


def baseline_of(schedule: Schedule) -> Baseline | None:
    """The savings against the schedule's recorded all-fastest baseline (None: none)."""
    raw: Mapping[str, Any] | None = schedule.baseline
    if not raw:
        return None
    energy = _first_number(raw, ("energy", "energy_j", "predicted"))
    makespan = _first_number(raw, ("makespan", "makespan_s", "time_s"))
    if energy is None or makespan is None or energy <= 0 or makespan <= 0:
        return None
    saved = energy - schedule.energy
    added = schedule.makespan - makespan
    return Baseline(
        energy_j=energy,
        makespan_s=makespan,
        label=str(raw.get("label", "all elements at their fastest setting")),
        saved_j=saved,
        saved_fraction=saved / energy,
        time_added_s=added,
        time_added_fraction=added / makespan,
    )


def _first_number(raw: Mapping[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = raw.get(key)
        if isinstance(value, Mapping):
            value = value.get("predicted")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None
