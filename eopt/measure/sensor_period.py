"""How often a device's power reading (or energy counter) actually refreshes.

NVML does not state the refresh period of its power fields per board; eopt assumes
100 ms (``NvmlGPU.power_update_period_s``). :func:`estimate_power_update_period` measures
it: it polls one reading much faster than it can refresh and times the changes. A reading
that refreshes to the same value hides that refresh, so the gaps between changes are
whole multiples of the period; the estimate divides the polled time by the number of
periods the gaps hold::

    from eopt.measure.sensor_period import estimate_power_update_period

    found = estimate_power_update_period(gpu, field="instant", duration_s=2.0)
    if found.period_s is not None:
        gpu.power_update_period_s = found.period_s
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eopt.devices.base import Device

__all__ = ["UpdatePeriodEstimate", "estimate_power_update_period", "period_from_changes"]


@dataclass(frozen=True)
class UpdatePeriodEstimate:
    """What polling one reading showed about its refresh period.

    Attributes:
        field: What was polled (a power field name, ``power`` for ``device.power()``, or
            the caller's label for a custom reader).
        period_s: The estimated refresh period, in s; None when fewer than
            ``min_changes`` changes were seen (a steady reading hides its refreshes).
        changes: Value changes seen.
        polls: Readings taken.
        duration_s: Time spent polling, in s.
        poll_period_s: Mean time between polls actually achieved, in s (the resolution
            of every change time).
        min_gap_s: Shortest gap between two changes, in s (None without two changes).
        median_gap_s: Median gap between changes, in s.
        at_poll_limit: True when the reading changed about as often as it was polled:
            it refreshes at least that fast, and ``period_s`` is only an upper bound.
    """

    field: str
    period_s: float | None
    changes: int
    polls: int
    duration_s: float
    poll_period_s: float
    min_gap_s: float | None
    median_gap_s: float | None
    at_poll_limit: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "field": self.field,
            "period_s": self.period_s,
            "changes": self.changes,
            "polls": self.polls,
            "duration_s": self.duration_s,
            "poll_period_s": self.poll_period_s,
            "min_gap_s": self.min_gap_s,
            "median_gap_s": self.median_gap_s,
            "at_poll_limit": self.at_poll_limit,
        }


def period_from_changes(change_times_s: list[float]) -> float | None:
    """The refresh period that the instants of value changes imply, in s.

    Each gap between changes spans a whole number of refresh periods (a refresh to an
    unchanged value is invisible). The shortest gaps are single periods; every gap is
    counted as that many periods, and the period is the total time over the total count.

    Assumptions:
        The reading refreshes on a regular schedule; at least a quarter of the gaps are
        single periods (any noisy or changing load gives far more).

    Returns:
        None with fewer than two gaps.
    """
    gaps = [b - a for a, b in itertools.pairwise(change_times_s) if b > a]
    if len(gaps) < 2:
        return None
    ordered = sorted(gaps)
    quartile = ordered[len(ordered) // 4]  # a single period: the lower quartile
    # Start from the median of the gaps near it (one gap read a poll early or late would
    # be off by that poll), then count ever longer gaps: a gap of n periods needs the
    # period to better than 1/(2n) to be counted right, so short gaps sharpen it first.
    singles = [g for g in ordered if 0.75 * quartile <= g <= 1.25 * quartile]
    period = singles[len(singles) // 2]
    limit = 2.0
    while True:
        used = [g for g in gaps if g <= (limit + 0.5) * period]
        counts = [max(1, round(g / period)) for g in used]
        period = sum(used) / sum(counts)
        if len(used) == len(gaps):
            break
        limit *= 2
    for _ in range(2):  # every gap counted: settle the counts
        counts = [max(1, round(g / period)) for g in gaps]
        period = sum(gaps) / sum(counts)
    return period


def estimate_power_update_period(
    device: Device,
    *,
    field: str | None = None,
    read: Callable[[], float | None] | None = None,
    label: str | None = None,
    poll_s: float = 0.001,
    duration_s: float = 2.0,
    min_changes: int = 5,
) -> UpdatePeriodEstimate:
    """Poll a reading every ``poll_s`` for ``duration_s`` and estimate its refresh period.

    Only reads the device (no setting is touched). Time comes from the device's clock, so
    on the simulated GPU the polling runs in virtual time.

    Args:
        device: The device to read.
        field: A power field from ``device.power_fields()`` (NVML: ``instant``,
            ``average_1s``, ``usage``; the simulator: ``instant``, ``average``). Default:
            ``device.power()``.
        read: Any other reading to time instead, e.g. ``device.energy_counter_j``.
        label: Name recorded for ``read`` (default ``custom``).
        poll_s: Polling period, in s (make it far shorter than the expected period).
        duration_s: How long to poll, in s (several periods; more under a steady load).
        min_changes: Fewest changes for an estimate; fewer give ``period_s=None``.

    Raises:
        ValueError: for a non-positive ``poll_s`` or ``duration_s``, or a ``field`` the
            device does not offer (naming the fields it has).
    """
    if not poll_s > 0 or not duration_s > 0:
        raise ValueError(
            f"poll_s and duration_s must be positive, got poll_s={poll_s}, duration_s={duration_s}"
        )
    reader, name = _reader(device, field, read, label)
    clock = device.clock
    start = clock.now()
    last: float | None = None
    changes: list[float] = []
    polls = 0
    now = start
    while now - start < duration_s:
        value = reader()
        now = clock.now()
        polls += 1
        if last is not None and value != last:
            changes.append(now)
        last = value
        clock.sleep(poll_s)
        now = clock.now()
    elapsed = now - start
    poll_period = elapsed / polls if polls else poll_s
    gaps = [b - a for a, b in itertools.pairwise(changes)]
    period = period_from_changes(changes) if len(changes) >= min_changes else None
    at_limit = bool(period is not None and period < 2.0 * poll_period)  # never a NumPy bool
    return UpdatePeriodEstimate(
        field=name,
        period_s=period,
        changes=len(changes),
        polls=polls,
        duration_s=elapsed,
        poll_period_s=poll_period,
        min_gap_s=min(gaps) if gaps else None,
        median_gap_s=statistics.median(gaps) if gaps else None,
        at_poll_limit=at_limit,
    )


def _reader(
    device: Device,
    field: str | None,
    read: Callable[[], float | None] | None,
    label: str | None,
) -> tuple[Callable[[], float | None], str]:
    if read is not None:
        return read, label or "custom"
    if field is None:
        return (lambda: device.power().power_w), "power"
    fields_of = getattr(device, "power_fields", None)
    offered = sorted(fields_of()) if callable(fields_of) else []
    if field not in offered:
        raise ValueError(
            f"{device.name} has no power field {field!r}; it offers "
            f"{', '.join(offered) or 'only device.power() (pass field=None)'}"
        )

    def read_field() -> float:
        return fields_of()[field].power_w  # type: ignore[misc]

    return read_field, field
