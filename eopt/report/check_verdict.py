"""What ``eopt check`` concluded about its refined prediction, in words, for the terminal
and the HTML report alike.

A check asks two questions of the refined prediction, and they can answer differently:

- do the means agree, by their standard errors (the test that found the deviation)?
- does the prediction's interval for one run cover the measured mean?

With 30 runs the first is far finer: a refined prediction can still deviate by its
means while its one-run interval covers the measurement. A reader must hear both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eopt.report.svg import fmt_num

__all__ = ["RefinedVerdict", "refined_verdict"]


@dataclass(frozen=True)
class RefinedVerdict:
    """The check's last word on a deviation.

    Attributes:
        energy_j: The prediction judged (the refined one, else the first), in J.
        refined: Whether a refinement ran (an interaction was found and added).
        means_agree: Whether the refined prediction's mean agrees with the measured mean
            by their standard errors (None: no refinement ran).
        interval_covers: Whether the prediction's one-run interval covers the measured
            mean (None: not computed).
    """

    energy_j: float | None
    refined: bool
    means_agree: bool | None
    interval_covers: bool | None

    @property
    def resolved(self) -> bool:
        """Whether nothing is left to explain: the means agree (after refinement)."""
        return bool(self.means_agree)

    def words(self) -> str:
        """One sentence with both answers, e.g. "the refined prediction (5753 J) still
        deviates from the measured mean by its standard errors, though its one-run
        interval covers the measurement"."""
        energy = (
            f" ({fmt_num(self.energy_j)} J)"
            if self.energy_j is not None and math.isfinite(self.energy_j)
            else ""
        )
        covers = {
            True: "its one-run interval covers the measurement",
            False: "its one-run interval does not cover the measurement",
            None: "",
        }[self.interval_covers]
        if not self.refined:
            head = "no interaction was found to refine the prediction"
            if covers:
                head += f"; the first prediction{energy}: {covers}"
            return head
        if self.means_agree:
            head = f"the refined prediction{energy} agrees with the measured mean"
            return head + (f", and {covers}" if covers else "")
        head = f"the refined prediction{energy} still deviates from the measured mean by its "
        head += "standard errors"
        if self.interval_covers:
            return head + f", though {covers}: the deviation left is smaller than one run's spread"
        return head + (f", and {covers}" if covers else "")


def refined_verdict(data: Mapping[str, Any]) -> RefinedVerdict | None:
    """The verdict on an ``eopt.check/1`` result's refinement; None when the first
    prediction did not deviate (there is nothing to refine)."""
    if not data.get("deviation"):
        return None
    refined = data.get("refined")
    refined = refined if isinstance(refined, Mapping) else None
    test = refined.get("test") if refined is not None else None
    passed = test.get("passed") if isinstance(test, Mapping) else None
    source = refined if refined is not None else data.get("predicted")
    energy = source.get("energy_j") if isinstance(source, Mapping) else None
    covers = data.get("refined_covers")
    return RefinedVerdict(
        energy_j=float(energy) if isinstance(energy, (int, float)) else None,
        refined=refined is not None,
        means_agree=bool(passed) if isinstance(passed, bool) else None,
        interval_covers=covers if isinstance(covers, bool) else None,
    )
