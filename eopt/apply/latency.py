"""Switching-latency statistics of the runtime controller."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from eopt.apply.drift import DriftReport

__all__ = ["SwitchStats"]


@dataclass(frozen=True)
class SwitchStats:
    """How many operating-point switches ran and how long they took.

    Latency is measured from the caller's request (:meth:`RuntimeController.enter`) to the
    end of the device call on the worker thread, so it includes queueing behind a
    previous switch.

    Attributes:
        count: Switches carried out.
        coalesced: Requests superseded by a newer one before the worker reached them.
        skipped: Requests that asked for the setting already requested, or already on
            the GPU when the worker reached them (no switch).
        mean_s: Mean latency, in s (NaN when ``count`` is 0).
        p50_s: Median latency, in s.
        p99_s: 99th-percentile latency, in s.
        max_s: Largest latency, in s.
        drift: How the loop strayed from the schedule (order, durations, elements never
            entered); None where not recorded.
    """

    count: int
    coalesced: int
    skipped: int
    mean_s: float
    p50_s: float
    p99_s: float
    max_s: float
    drift: DriftReport | None = None

    def with_drift(self, drift: DriftReport | None) -> SwitchStats:
        """The same statistics carrying ``drift``."""
        return replace(self, drift=drift)

    @classmethod
    def from_latencies(
        cls, latencies_s: Sequence[float], *, coalesced: int = 0, skipped: int = 0
    ) -> SwitchStats:
        """Summarize raw latencies (in s)."""
        values = sorted(latencies_s)
        if not values:
            nan = math.nan
            return cls(0, coalesced, skipped, nan, nan, nan, nan)
        return cls(
            count=len(values),
            coalesced=coalesced,
            skipped=skipped,
            mean_s=sum(values) / len(values),
            p50_s=_percentile(values, 50.0),
            p99_s=_percentile(values, 99.0),
            max_s=values[-1],
        )

    def summary(self) -> str:
        """One line such as ``12 switches, mean 1.2 ms, p50 1.1 ms, p99 3.0 ms``, followed
        by what drifted from the schedule, if anything did."""
        if self.count == 0:
            text = "0 switches"
        else:
            text = (
                f"{self.count} switch{'es' if self.count != 1 else ''}, "
                f"mean {_ms(self.mean_s)}, p50 {_ms(self.p50_s)}, p99 {_ms(self.p99_s)}, "
                f"max {_ms(self.max_s)}"
            )
        extra = []
        if self.skipped:
            extra.append(f"{self.skipped} unchanged")
        if self.coalesced:
            extra.append(f"{self.coalesced} superseded")
        text += f" ({', '.join(extra)})" if extra else ""
        if self.drift is not None and self.drift.drifted:
            text += f"; {self.drift.summary()}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (NaN → None)."""

        def clean(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {
            "count": self.count,
            "coalesced": self.coalesced,
            "skipped": self.skipped,
            "mean_s": clean(self.mean_s),
            "p50_s": clean(self.p50_s),
            "p99_s": clean(self.p99_s),
            "max_s": clean(self.max_s),
            "drift": self.drift.to_dict() if self.drift is not None else None,
        }


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default) of sorted values."""
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    frac = pos - low
    return float(sorted_values[low] * (1.0 - frac) + sorted_values[high] * frac)


def _ms(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.2f} ms"
