"""A deviation test with power: prediction vs measurement, in energy and in time.

The paper's Eq. (23) compares a prediction with *one* run: the spread on both sides is
the single-run σ, so a persistent bias must exceed c_α·√(σ_pred² + σ_meas²) — about 1.1 %
at a 0.4 % coefficient of variation — before the test can see it. A context effect of
0.1–1 % slips through on every run (paper footnote 9: averaging does not remove a bias).

Here each side is a *mean* over runs, and the test compares means with their standard
errors σ/√n (Welch's t test, Welch–Satterthwaite degrees of freedom), for energy and
for time: a context effect may move either. Each result says which spread it used, and
the smallest deviation it could have detected at the given numbers of runs:

    δ_min = (t_{1−α/2, ν} + t_{power, ν}) · SE,   SE = √(σ_p²/n_p + σ_m²/n_m)

(the normal-approximation power formula with t quantiles). ``spread="single"`` gives
Eq. (23)'s single-run comparison with the same report, for one run against a
prediction.

Assumptions:
    Runs are independent draws with Gaussian-like means (n ≳ 10 per side, or Gaussian
    runs); prediction and measurement come from independent runs. A side with no runs
    count (``n=None``) is taken as exact (no standard error), e.g. a model value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from eopt.calculus.uncertainty import DEFAULT_CONFIDENCE
from eopt.model.signature import Signature

__all__ = [
    "DEFAULT_POWER",
    "DeviationReport",
    "MeanEstimate",
    "QuantityTest",
    "Runs",
    "deviation_report",
    "minimum_detectable_deviation",
]

DEFAULT_POWER = 0.8

Spread = Literal["means", "single"]
Quantity = Literal["energy", "time"]


@dataclass(frozen=True)
class MeanEstimate:
    """A mean over runs with its single-run spread.

    Attributes:
        mean: The mean (J or s).
        std: The single-run standard deviation (same unit).
        n: Runs averaged; None for an exact value (no standard error).
    """

    mean: float
    std: float
    n: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mean) and math.isfinite(self.std) and self.std >= 0):
            raise ValueError(f"mean and std must be finite, std ≥ 0; got {self.mean}, {self.std}")
        if self.n is not None and (isinstance(self.n, bool) or int(self.n) != self.n or self.n < 1):
            raise ValueError(f"n must be a positive number of runs or None, got {self.n!r}")

    @property
    def sem(self) -> float:
        """Standard error of the mean, σ/√n (0 for an exact value)."""
        return 0.0 if self.n is None else self.std / math.sqrt(self.n)

    @classmethod
    def of(cls, values: Sequence[float]) -> MeanEstimate:
        """Mean and sample standard deviation (ddof = 1) of repeated runs.

        Raises:
            ValueError: fewer than two runs, or a value that is not finite.
        """
        x = np.asarray(values, dtype=float)
        if x.ndim != 1 or x.size < 2:
            raise ValueError(f"need at least two runs to estimate a spread, got {x.size}")
        if not np.all(np.isfinite(x)):
            raise ValueError("runs must be finite numbers")
        return cls(float(x.mean()), float(x.std(ddof=1)), int(x.size))


@dataclass(frozen=True)
class Runs:
    """Repeated runs of one composition: per-run energy (J) and time (s)."""

    energy_j: Sequence[float]
    time_s: Sequence[float] | None = None

    def estimates(self) -> tuple[MeanEstimate, MeanEstimate | None]:
        """(energy, time) mean estimates."""
        time = MeanEstimate.of(self.time_s) if self.time_s is not None else None
        return MeanEstimate.of(self.energy_j), time


Side = Runs | Signature | MeanEstimate | tuple[MeanEstimate, MeanEstimate | None]


def _estimates(x: Side, n: int | None, what: str) -> tuple[MeanEstimate, MeanEstimate | None]:
    if isinstance(x, Runs):
        return x.estimates()
    if isinstance(x, MeanEstimate):
        return x, None
    if isinstance(x, Signature):
        runs = n if n is not None else x.meta.get("n")
        if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int)):
            raise ValueError(f"{what}: meta['n'] of {x.name!r} is not a number of runs")
        if runs is None:
            raise ValueError(
                f"{what}: {x.name!r} does not say over how many runs its values are means "
                f"(no meta['n']); pass n_{what}=RUNS, or pass the runs themselves"
            )
        return (
            MeanEstimate(x.energy, x.std_energy, runs),
            MeanEstimate(x.time, x.std_time, runs),
        )
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], MeanEstimate):
        return x
    raise ValueError(f"{what}: expected Runs, a Signature or MeanEstimate(s), got {x!r}")


@dataclass(frozen=True)
class QuantityTest:
    """Prediction vs measurement of one quantity.

    Attributes:
        quantity: ``"energy"`` or ``"time"``.
        unit: ``"J"`` or ``"s"``.
        predicted: The prediction.
        measured: The measurement.
        difference: measured − predicted (J or s).
        spread: ``"standard errors of the means"`` or ``"single-run spreads"``.
        scale: The difference's standard deviation under no bias (J or s).
        statistic: difference / scale.
        df: Degrees of freedom (inf: Gaussian).
        critical: The two-sided critical value at 1 − α.
        passed: True when |statistic| ≤ critical (no deviation detected).
        p_value: Two-sided p-value.
        min_detectable: Smallest |bias| detected with probability ``power`` (J or s).
        power: The power ``min_detectable`` refers to.
        confidence: 1 − α.
    """

    quantity: Quantity
    unit: str
    predicted: MeanEstimate
    measured: MeanEstimate
    difference: float
    spread: str
    scale: float
    statistic: float
    df: float
    critical: float
    passed: bool
    p_value: float
    min_detectable: float
    power: float
    confidence: float

    @property
    def relative(self) -> float:
        """difference / predicted (nan for a zero prediction)."""
        return self.difference / self.predicted.mean if self.predicted.mean else math.nan

    @property
    def threshold(self) -> float:
        """|difference| above which the test fires (J or s)."""
        return self.critical * self.scale

    def __str__(self) -> str:
        verdict = "agrees" if self.passed else "DEVIATES"
        rel = f" ({self.relative:+.3%})" if math.isfinite(self.relative) else ""
        mdd = self.min_detectable / abs(self.predicted.mean) if self.predicted.mean else math.nan
        return (
            f"{self.quantity} {verdict}: Δ = {self.difference:+.4g} {self.unit}{rel} vs "
            f"±{self.threshold:.3g} {self.unit} ({self.spread}; p = {self.p_value:.3g}); "
            f"detects ≥ {self.min_detectable:.3g} {self.unit} ({mdd:.2%}) with "
            f"{self.power:.0%} power"
        )


@dataclass(frozen=True)
class DeviationReport:
    """The deviation test on energy and, where both sides give it, time.

    Attributes:
        energy: The energy test.
        time: The time test (None when a side has no times).
        confidence: 1 − α of each test.
    """

    energy: QuantityTest
    time: QuantityTest | None
    confidence: float

    @property
    def passed(self) -> bool:
        """True when neither quantity deviates."""
        return self.energy.passed and (self.time is None or self.time.passed)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        lines = [str(self.energy)] + ([str(self.time)] if self.time is not None else [])
        return "\n".join(lines)


def _stats() -> Any:
    """``scipy.stats``, imported on first use (it costs about 1 s; ``import eopt`` does
    not need it)."""
    from scipy import stats

    return stats


def _quantiles(confidence: float, power: float, df: float) -> tuple[float, float]:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be strictly between 0 and 1, got {power!r}")
    upper = 1.0 - (1.0 - confidence) / 2.0
    if math.isinf(df):
        return float(_stats().norm.ppf(upper)), float(_stats().norm.ppf(power))
    return float(_stats().t.ppf(upper, df)), float(_stats().t.ppf(power, df))


def _welch(p: MeanEstimate, m: MeanEstimate) -> tuple[float, float]:
    """(standard error of m − p, Welch–Satterthwaite degrees of freedom)."""
    parts = [(x.sem**2, x.n) for x in (p, m) if x.n is not None and x.sem > 0]
    se2 = sum(v for v, _ in parts)
    if se2 == 0:
        return 0.0, math.inf
    small = [(v, n) for v, n in parts if n is not None and n < 2]
    if small:  # a single run carries no spread estimate of its own: trust the given σ
        return math.sqrt(se2), math.inf
    df = se2**2 / sum(v**2 / (n - 1) for v, n in parts if n is not None)
    return math.sqrt(se2), df


def minimum_detectable_deviation(
    predicted: MeanEstimate,
    measured: MeanEstimate,
    confidence: float = DEFAULT_CONFIDENCE,
    power: float = DEFAULT_POWER,
    spread: Spread = "means",
) -> float:
    """The smallest |bias| the test detects with probability ``power`` (J or s).

    Example:
        >>> p = MeanEstimate(100.0, 0.4, 30)
        >>> round(minimum_detectable_deviation(p, MeanEstimate(100.0, 0.4, 30)), 2)
        0.29
    """
    if spread == "single":
        scale, df = math.hypot(predicted.std, measured.std), math.inf
    else:
        scale, df = _welch(predicted, measured)
    crit, beta = _quantiles(confidence, power, df)
    return (crit + beta) * scale


def _test(
    quantity: Quantity,
    p: MeanEstimate,
    m: MeanEstimate,
    confidence: float,
    power: float,
    spread: Spread,
) -> QuantityTest:
    if spread == "single":
        scale, df, label = math.hypot(p.std, m.std), math.inf, "single-run spreads"
    elif spread == "means":
        scale, df = _welch(p, m)
        label = "standard errors of the means"
    else:
        raise ValueError(f"spread must be 'means' or 'single', got {spread!r}")
    crit, beta = _quantiles(confidence, power, df)
    diff = m.mean - p.mean
    if scale > 0:
        stat = diff / scale
        pval = float(
            2 * (_stats().norm.sf(abs(stat)) if math.isinf(df) else _stats().t.sf(abs(stat), df))
        )
    else:
        stat = 0.0 if diff == 0 else math.copysign(math.inf, diff)
        pval = 1.0 if diff == 0 else 0.0
    return QuantityTest(
        quantity,
        "J" if quantity == "energy" else "s",
        p,
        m,
        diff,
        label,
        scale,
        stat,
        df,
        crit,
        abs(stat) <= crit,
        pval,
        (crit + beta) * scale,
        power,
        confidence,
    )


def deviation_report(
    predicted: Side,
    measured: Side,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    power: float = DEFAULT_POWER,
    spread: Spread = "means",
    n_predicted: int | None = None,
    n_measured: int | None = None,
) -> DeviationReport:
    """Test a prediction against measurements, in energy and time, with its power.

    Args:
        predicted: The prediction: its runs, a signature (means over ``n_predicted``
            runs, default its ``meta["n"]``) or mean estimates.
        measured: The direct measurement, in the same forms.
        confidence: 1 − α of each test (energy and time are tested separately).
        power: The power the reported minimum detectable deviation refers to.
        spread: ``"means"`` compares means by their standard errors (Welch);
            ``"single"`` compares by single-run spreads, as Eq. (23).
        n_predicted: Runs behind a predicted signature.
        n_measured: Runs behind a measured signature.

    Returns:
        The report; ``report.passed`` is False when energy or time deviates.

    Example:
        >>> pred = (MeanEstimate(100.0, 0.4, 30), MeanEstimate(1.0, 0.004, 30))
        >>> meas = (MeanEstimate(100.5, 0.4, 30), MeanEstimate(1.0, 0.004, 30))
        >>> r = deviation_report(pred, meas)
        >>> r.energy.passed, r.time.passed
        (False, True)
    """
    pe, pt = _estimates(predicted, n_predicted, "predicted")
    me, mt = _estimates(measured, n_measured, "measured")
    energy = _test("energy", pe, me, confidence, power, spread)
    time = None
    if pt is not None and mt is not None:
        time = _test("time", pt, mt, confidence, power, spread)
    return DeviationReport(energy, time, confidence)
