"""Confidence levels: the default level and the Gaussian multiplier of an interval.

Kept with the nouns because files carry intervals (a schedule's ``interval``), while the
calculus that propagates the variances behind them sits a layer up.
"""

from __future__ import annotations

from statistics import NormalDist

__all__ = ["DEFAULT_CONFIDENCE", "c_alpha"]

#: The confidence level of intervals and tests when none is given (1 − α).
DEFAULT_CONFIDENCE = 0.95


def c_alpha(confidence: float = DEFAULT_CONFIDENCE) -> float:
    """Two-sided Gaussian multiplier c_α for a confidence level 1 − α.

    Args:
        confidence: 1 − α, strictly between 0 and 1 (0.95 → 1.96).

    Raises:
        ValueError: outside (0, 1).

    Example:
        >>> round(c_alpha(0.95), 2)
        1.96
    """
    if isinstance(confidence, bool) or not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")
    return NormalDist().inv_cdf(1.0 - (1.0 - float(confidence)) / 2.0)
