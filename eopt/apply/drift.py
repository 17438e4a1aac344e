"""How far a training loop strays from the schedule the runtime controller follows.

The controller switches clocks by element name, so a loop that runs another order (GPipe
instead of 1F1B), runs elements far slower than planned, or never enters some elements
still gets switched — but the schedule's deadline and energy no longer describe the run,
and clocks chosen for one element run under another's work. :class:`DriftTracker`
records, per plan device, the order of ``enter`` calls against the schedule's order and
each ``with controller.element(...)`` block's duration against the element's planned
duration; :class:`DriftReport` summarizes both, and the tracker warns
(:class:`PlanDriftWarning`) once per kind and device when the drift passes a threshold.

Assumptions:
    The loop runs the schedule's elements of a device in its start order, once per
    iteration (the schedule describes one training iteration; iterations repeat it).
    A block's duration is the time the host spends in it: with asynchronous GPU work
    (CUDA) it is the time to issue the work, not to run it, unless the block waits for
    it. Only blocks slower than planned are warned about for that reason.
"""

from __future__ import annotations

import math
import statistics
import threading
import warnings
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eopt.model.schedule import Schedule

__all__ = ["DeviceDrift", "DriftReport", "DriftTracker", "PlanDriftWarning"]

_RATIOS_KEPT = 4096  # per device: a median over the most recent blocks, bounded memory
_NAMES_SHOWN = 3


class PlanDriftWarning(UserWarning):
    """The training loop does not run what the schedule planned (order, time, elements)."""


@dataclass(frozen=True)
class DeviceDrift:
    """One plan device's drift from the schedule.

    Attributes:
        device: Plan device name.
        entered: ``enter`` calls for its elements.
        iterations: Iterations run: one is counted when the loop returns to an element
            it already passed in it (the next iteration starts), and the last one when
            the controller closes.
        out_of_order: Enters of an element other than the one the schedule runs next.
        first_out_of_order: (expected, entered) at the first such enter.
        never_entered: Elements of the device no ``enter`` named (reported once an
            iteration is complete or the controller is closed; empty before).
        timed: ``with controller.element(...)`` blocks timed.
        median_ratio: Median of measured / planned duration over the recent blocks
            (NaN when none were timed).
        max_ratio: The largest ratio seen (NaN when none).
        slowest: The element with ``max_ratio``.
    """

    device: str
    entered: int
    iterations: int
    out_of_order: int
    first_out_of_order: tuple[str, str] | None
    never_entered: tuple[str, ...]
    timed: int
    median_ratio: float
    max_ratio: float
    slowest: str | None

    def findings(self, slow_factor: float) -> list[str]:
        """What drifted, one phrase each (empty when the loop follows the schedule)."""
        out = []
        if self.out_of_order:
            expected, got = self.first_out_of_order or ("?", "?")
            out.append(
                f"{self.out_of_order} enter(s) out of the schedule's order (first: {got} "
                f"where the schedule runs {expected})"
            )
        if self.never_entered:
            shown = ", ".join(self.never_entered[:_NAMES_SHOWN])
            more = len(self.never_entered) - _NAMES_SHOWN
            out.append(
                f"{len(self.never_entered)} element(s) never entered ({shown}"
                + (f" and {more} more" if more > 0 else "")
                + ")"
            )
        if self.timed and self.median_ratio >= slow_factor:
            out.append(
                f"elements took {self.median_ratio:.3g}× their planned time (median of "
                f"{min(self.timed, _RATIOS_KEPT)}; slowest {self.slowest} at "
                f"{self.max_ratio:.3g}×)"
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (NaN → None)."""

        def clean(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {
            "device": self.device,
            "entered": self.entered,
            "iterations": self.iterations,
            "out_of_order": self.out_of_order,
            "first_out_of_order": list(self.first_out_of_order)
            if self.first_out_of_order
            else None,
            "never_entered": list(self.never_entered),
            "timed": self.timed,
            "median_ratio": clean(self.median_ratio),
            "max_ratio": clean(self.max_ratio),
            "slowest": self.slowest,
        }


@dataclass(frozen=True)
class DriftReport:
    """Drift of every controlled device (see :class:`DeviceDrift`).

    Attributes:
        devices: One entry per controlled plan device.
        slow_factor: Blocks count as slow from this many times their planned duration.
    """

    devices: tuple[DeviceDrift, ...]
    slow_factor: float

    @property
    def drifted(self) -> bool:
        """True when some device strays from the schedule."""
        return any(d.findings(self.slow_factor) for d in self.devices)

    def summary(self) -> str:
        """``follows the schedule`` or, per device, what drifted."""
        parts = [
            f"{d.device}: {'; '.join(found)}"
            for d in self.devices
            if (found := d.findings(self.slow_factor))
        ]
        return "drift: " + " | ".join(parts) if parts else "follows the schedule"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "drifted": self.drifted,
            "slow_factor": self.slow_factor,
            "devices": [d.to_dict() for d in self.devices],
        }


class _DeviceTrack:
    def __init__(self, device: str, names: Sequence[str], planned_s: Sequence[float]) -> None:
        self.device = device
        self.order = list(names)
        self.position = {name: i for i, name in enumerate(self.order)}
        self.planned_s = dict(zip(names, planned_s, strict=True))
        self.next = 0  # index of the element the schedule runs next
        self.last: int | None = None  # index of the element entered last in this iteration
        self.entered = 0
        self.iterations = 0
        self.out_of_order = 0
        self.first_out_of_order: tuple[str, str] | None = None
        self.seen: set[str] = set()
        self.ratios: deque[float] = deque(maxlen=_RATIOS_KEPT)
        self.iteration_ratios: list[float] = []
        self.timed = 0
        self.max_ratio = math.nan
        self.slowest: str | None = None
        self.warned: set[str] = set()


class DriftTracker:
    """Records enters and block durations of a controller's devices against a schedule.

    Thread-safe: ranks driven from threads of one process may call it concurrently.

    Args:
        schedule: The schedule the controller follows.
        devices: The controlled plan devices.
        slow_factor: Blocks count as slow from this many times their planned duration
            (median over an iteration).
        warn: Warn (:class:`PlanDriftWarning`) once per kind and device; False only
            records (see :meth:`report`).
    """

    def __init__(
        self,
        schedule: Schedule,
        devices: Sequence[str],
        slow_factor: float = 2.0,
        warn: bool = True,
    ) -> None:
        if not slow_factor > 1.0:
            raise ValueError(f"slow_factor must be > 1 (a factor), got {slow_factor!r}")
        self.slow_factor = slow_factor
        self.warn = warn
        self._tracks: dict[str, _DeviceTrack] = {}
        for device in devices:
            on = schedule.elements_on(device)
            self._tracks[device] = _DeviceTrack(
                device, [e.name for e in on], [e.duration for e in on]
            )
        self._lock = threading.Lock()
        self._closed = False

    def entered(self, device: str, name: str) -> None:
        """Element ``name`` of ``device`` is entered now."""
        with self._lock:
            track = self._tracks[device]
            index = track.position[name]
            # Back at an element already passed: the next iteration starts. A device runs
            # one element at a time, so every block of the last one has finished by now.
            if track.last is not None and index <= track.last:
                self._iteration_done(track)
            track.entered += 1
            track.seen.add(name)
            expected = track.order[track.next]
            track.last = index
            track.next = (index + 1) % len(track.order)
            if name == expected:
                return
            track.out_of_order += 1
            if track.first_out_of_order is None:
                track.first_out_of_order = (expected, name)
            self._warn(
                track,
                "order",
                f"{device}: entered {name} where the schedule runs {expected} next. The "
                "controller still switches to each element's setting, but the schedule's "
                "timing and energy assume its own order: run the loop in the schedule's "
                "order (eopt.plan.pipeline.stage_steps for generated pipelines), or "
                "solve a plan of the order you run",
            )

    def finished(self, device: str, name: str, duration_s: float) -> None:
        """The block of element ``name`` took ``duration_s`` seconds (host time)."""
        with self._lock:
            track = self._tracks[device]
            planned = track.planned_s.get(name, 0.0)
            if not planned > 0.0 or not math.isfinite(duration_s):
                return
            ratio = duration_s / planned
            track.timed += 1
            track.ratios.append(ratio)
            track.iteration_ratios.append(ratio)
            if math.isnan(track.max_ratio) or ratio > track.max_ratio:
                track.max_ratio, track.slowest = ratio, name

    def close(self, warn: bool = True) -> None:
        """The loop has ended: warn about elements never entered and slow blocks.

        Args:
            warn: False when the loop ended with an error (its drift is not news then).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for track in self._tracks.values():
                if track.last is not None:
                    self._iteration_done(track, warn=warn)  # the last one, whole or not
            if not warn:
                return
            for track in self._tracks.values():
                missing = [n for n in track.order if n not in track.seen]
                if missing:
                    shown = ", ".join(missing[:_NAMES_SHOWN])
                    more = len(missing) - _NAMES_SHOWN
                    self._warn(
                        track,
                        "missing",
                        f"{track.device}: {len(missing)} element(s) of the schedule were "
                        f"never entered ({shown}{f' and {more} more' if more > 0 else ''}): "
                        "their work ran at the setting of the element entered before "
                        "them. Enter every element of the schedule (e.g. the demo's "
                        "AR[s…] all-reduce before optimizer.step())",
                    )

    def report(self) -> DriftReport:
        """The drift so far."""
        with self._lock:
            devices = []
            for t in self._tracks.values():
                complete = self._closed or t.iterations > 0
                missing = tuple(n for n in t.order if n not in t.seen) if complete else ()
                devices.append(
                    DeviceDrift(
                        device=t.device,
                        entered=t.entered,
                        iterations=t.iterations,
                        out_of_order=t.out_of_order,
                        first_out_of_order=t.first_out_of_order,
                        never_entered=missing,
                        timed=t.timed,
                        median_ratio=statistics.median(t.ratios) if t.ratios else math.nan,
                        max_ratio=t.max_ratio,
                        slowest=t.slowest,
                    )
                )
            return DriftReport(tuple(devices), self.slow_factor)

    # internals (called with the lock held) -----------------------------------------------
    def _iteration_done(self, track: _DeviceTrack, warn: bool = True) -> None:
        track.iterations += 1
        if track.iteration_ratios and warn:
            self._check_slow(track, track.iteration_ratios)
        track.iteration_ratios = []
        track.last = None

    def _check_slow(self, track: _DeviceTrack, ratios: Sequence[float]) -> None:
        median = statistics.median(ratios)
        if median >= self.slow_factor:
            self._warn(
                track,
                "slow",
                f"{track.device}: elements took {median:.3g}× their planned time (median "
                f"of {len(ratios)} in one iteration; slowest so far {track.slowest} at "
                f"{track.max_ratio:.3g}×): the schedule's deadline and energy do not "
                "describe this run. Profile the stages as they run here and solve again",
            )

    def _warn(self, track: _DeviceTrack, kind: str, message: str) -> None:
        if not self.warn or kind in track.warned:
            return
        track.warned.add(kind)
        warnings.warn(message, PlanDriftWarning, stacklevel=4)
