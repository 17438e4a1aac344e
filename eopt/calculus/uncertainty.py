"""Using propagated uncertainty: intervals, comparisons and the paper's consistency tests.

Pure functions over signatures (or plain ``(energy J, σ J)`` pairs), each returning a small
result object that says whether the check passed and carries the numbers behind it
(paper §4.1, §4.2, §5.2, Appendices B, C, D and G).

All tests use the two-sided Gaussian multiplier c_α, the (1 − α/2) quantile of the
standard normal (1.96 at 95 % confidence).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from eopt.model.confidence import DEFAULT_CONFIDENCE, c_alpha
from eopt.model.signature import Signature

__all__ = [
    "DEFAULT_CONFIDENCE",
    "BiasBound",
    "Comparison",
    "DeviationResult",
    "InsensitivityResult",
    "Interval",
    "RefinementResult",
    "accumulated_bias",
    "c_alpha",
    "chain_bias",
    "compare",
    "deviation_test",
    "history_insensitivity",
    "interference_insensitivity",
    "mean_interval",
    "padded_pair_bias",
    "prediction_interval",
    "reduction_bias",
    "reduction_multipliers",
    "refinement_check",
]


Estimate = Signature | tuple[float, float]
"""A signature, or an ``(energy J, standard deviation J)`` pair."""


def _estimate(x: Estimate, what: str) -> tuple[float, float]:
    """(E, σ_E) of a signature or a pair, validated."""
    if isinstance(x, Signature):
        return x.energy, x.std_energy
    try:
        energy, std = (float(v) for v in x)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a Signature or (energy J, std J), got {x!r}") from None
    if not (math.isfinite(energy) and math.isfinite(std)) or std < 0:
        raise ValueError(f"{what}: energy and std must be finite and std ≥ 0, got {x!r}")
    return energy, std


# Intervals and comparison -----------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """A prediction interval ``center ± half_width`` (J) at a confidence level."""

    center: float
    half_width: float
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def low(self) -> float:
        """Lower end, J."""
        return self.center - self.half_width

    @property
    def high(self) -> float:
        """Upper end, J."""
        return self.center + self.half_width

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the closed interval."""
        return self.low <= value <= self.high

    def __str__(self) -> str:
        return (
            f"{self.center:.6g} ± {self.half_width:.3g} J "
            f"({self.confidence:.0%}: {self.low:.6g} – {self.high:.6g} J)"
        )


def prediction_interval(
    estimate: Estimate, confidence: float = DEFAULT_CONFIDENCE, n_runs: int = 1
) -> Interval:
    """Interval ``E ± c_α·σ_E/√n`` covering a run (or the mean of ``n_runs`` runs).

    Args:
        estimate: A (composed) signature or ``(E, σ_E)``.
        confidence: 1 − α.
        n_runs: Number of runs averaged (1: a single run, paper §5.2.2).

    Example:
        >>> str(prediction_interval((10.0, 1.0)))
        '10 ± 1.96 J (95%: 8.04004 – 11.96 J)'
    """
    if isinstance(n_runs, bool) or not isinstance(n_runs, int) or n_runs < 1:
        raise ValueError(f"n_runs must be a positive integer, got {n_runs!r}")
    energy, std = _estimate(estimate, "prediction_interval")
    return Interval(energy, c_alpha(confidence) * std / math.sqrt(n_runs), confidence)


def mean_interval(
    predicted: float,
    standard_error: float,
    single_run_std: float,
    n_runs: int,
    confidence: float = DEFAULT_CONFIDENCE,
    characterization_runs: int | None = None,
) -> Interval:
    """Where the mean of ``n_runs`` fresh runs should fall: Ê ± q·√(SE² + σ̂²/n).

    A composed prediction is an estimate too: SE is the error it inherits from its
    elements' characterization (:func:`eopt.calculus.sensitivity.prediction_error`), σ̂
    its propagated single-run spread; the two are independent (docs/uncertainty.md).
    Both come from sample spreads; given the runs behind them, q is Student's t
    quantile at the Welch–Satterthwaite degrees of freedom (each part with
    ``characterization_runs − 1``), else the Gaussian c_α. The same for a time, in s.

    Args:
        predicted: Ê, the predicted mean (J or s).
        standard_error: SE of Ê (J or s), ≥ 0.
        single_run_std: σ̂ of one run (J or s), ≥ 0.
        n_runs: Runs the measured mean averages.
        confidence: 1 − α.
        characterization_runs: Runs per element behind SE and σ̂ (None: known spreads).

    Example:
        >>> str(mean_interval(10.0, 0.3, 2.0, 100))  # √(0.09 + 0.04) = 0.36
        '10 ± 0.707 J (95%: 9.29332 – 10.7067 J)'
    """
    if isinstance(n_runs, bool) or not isinstance(n_runs, int) or n_runs < 1:
        raise ValueError(f"n_runs must be a positive integer, got {n_runs!r}")
    values = (predicted, standard_error, single_run_std)
    if not all(math.isfinite(v) for v in values) or min(standard_error, single_run_std) < 0:
        raise ValueError(f"mean_interval: finite values and spreads ≥ 0 needed, got {values}")
    a, b = standard_error**2, single_run_std**2 / n_runs
    scale = math.sqrt(a + b)
    q = c_alpha(confidence)
    if characterization_runs is not None and characterization_runs > 1 and scale > 0:
        from scipy import stats  # loaded on first use: keeps `import eopt` fast

        df = (a + b) ** 2 / ((a * a + b * b) / (characterization_runs - 1))
        q = float(stats.t.ppf(1.0 - (1.0 - confidence) / 2.0, df))
    return Interval(predicted, q * scale, confidence)


Verdict = Literal["cheaper", "costlier", "indistinguishable"]


@dataclass(frozen=True)
class Comparison:
    """Outcome of comparing A with B by their prediction intervals.

    Attributes:
        verdict: ``"cheaper"`` when A's interval lies wholly below B's, ``"costlier"``
            when wholly above, else ``"indistinguishable"``.
        a: A's interval.
        b: B's interval.
        difference: E_A − E_B, J.
        gap: Distance between the intervals in J (negative: they overlap by that much).
    """

    verdict: Verdict
    a: Interval
    b: Interval
    difference: float
    gap: float

    @property
    def separated(self) -> bool:
        """Whether the intervals separate (a decision is possible)."""
        return self.verdict != "indistinguishable"


def compare(
    a: Estimate, b: Estimate, confidence: float = DEFAULT_CONFIDENCE, n_runs: int = 1
) -> Comparison:
    """Compare two configurations: A is cheaper only when the intervals separate (§5.2.2).

    Example:
        >>> compare((10.0, 0.5), (13.0, 0.5)).verdict
        'cheaper'
        >>> compare((10.0, 1.0), (12.0, 1.0)).verdict
        'indistinguishable'
    """
    ia = prediction_interval(a, confidence, n_runs)
    ib = prediction_interval(b, confidence, n_runs)
    verdict: Verdict
    if ia.high < ib.low:
        verdict, gap = "cheaper", ib.low - ia.high
    elif ib.high < ia.low:
        verdict, gap = "costlier", ia.low - ib.high
    else:
        verdict, gap = "indistinguishable", -(min(ia.high, ib.high) - max(ia.low, ib.low))
    return Comparison(verdict, ia, ib, ia.center - ib.center, gap)


# Deviation test (Eq. 23) ------------------------------------------------------------------
@dataclass(frozen=True)
class DeviationResult:
    """Composed prediction vs direct measurement (Eq. 23).

    Attributes:
        passed: True when they agree: |E_pred − E_meas| ≤ threshold.
        deviation: |E_pred − E_meas|, J.
        threshold: c_α·√(σ_pred² + σ_meas²), J.
        z: deviation / √(σ_pred² + σ_meas²) (inf when both σ are 0 and they differ).
        c_alpha: The multiplier used.
        confidence: 1 − α.
    """

    passed: bool
    deviation: float
    threshold: float
    z: float
    c_alpha: float
    confidence: float

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        verdict = "agree" if self.passed else "DEVIATE"
        return (
            f"{verdict}: |ΔE| = {self.deviation:.4g} J vs {self.threshold:.4g} J "
            f"(z = {self.z:.3g}, c_α = {self.c_alpha:.3g})"
        )


def deviation_test(
    predicted: Estimate, measured: Estimate, confidence: float = DEFAULT_CONFIDENCE
) -> DeviationResult:
    """Flag a composed prediction that a direct measurement contradicts (Eq. 23).

    The two disagree when |E_pred − E_meas| > c_α·√(σ_pred² + σ_meas²). Under a correct
    model the test still fires with probability α; act on persistent deviations.

    Args:
        predicted: The composed signature (or ``(E, σ)``), σ from propagation.
        measured: The direct measurement of the same composition (or ``(E, σ)``).
        confidence: 1 − α.
    """
    ep, sp = _estimate(predicted, "predicted")
    em, sm = _estimate(measured, "measured")
    c = c_alpha(confidence)
    sigma = math.hypot(sp, sm)
    dev = abs(ep - em)
    z = dev / sigma if sigma > 0 else (0.0 if dev == 0 else math.inf)
    return DeviationResult(dev <= c * sigma, dev, c * sigma, z, c, confidence)


# Context-insensitivity tests (Eq. 11, 12; Appendix B) -------------------------------------
@dataclass(frozen=True)
class InsensitivityResult:
    """A history- or interference-insensitivity test (Eq. 11 / Eq. 12).

    Attributes:
        passed: True when the worst bound ≤ threshold for every compared context.
        bound: The worst (largest) left-hand side Δs·T + ΔT·s + Δs·ΔT + Δd, J.
        threshold: c_α·σ_E of the element, J.
        terms: The worst case's four summands, J (keys ``ds_T``, ``dT_s``, ``ds_dT``,
            ``dd``).
        worst: Index of the worst context in the list passed in (for history tests the
            pair ``(i, j)`` of contexts, 0 being the reference).
        bounds: The left-hand side per compared context (or pair), J.
        c_alpha: The multiplier used.
        confidence: 1 − α.
    """

    passed: bool
    bound: float
    threshold: float
    terms: dict[str, float]
    worst: int | tuple[int, int]
    bounds: tuple[float, ...]
    c_alpha: float
    confidence: float

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        verdict = "insensitive" if self.passed else "SENSITIVE"
        parts = ", ".join(f"{k}={v:.3g}" for k, v in self.terms.items())
        return f"{verdict}: {self.bound:.4g} J vs c_α·σ_E = {self.threshold:.4g} J ({parts})"


def _shift_terms(at: Signature, ref: Signature) -> dict[str, float]:
    """The Appendix B expansion of |E(at) − E(ref)|, multipliers taken at ``ref``."""
    ds = abs(at.static_power - ref.static_power)
    dt = abs(at.time - ref.time)
    dd = abs(at.dynamic_energy - ref.dynamic_energy)
    return {"ds_T": ds * ref.time, "dT_s": dt * ref.static_power, "ds_dT": ds * dt, "dd": dd}


def _sigma_threshold(ref: Signature, sigma_energy: float | None, c: float) -> float:
    sigma = ref.std_energy if sigma_energy is None else float(sigma_energy)
    if not math.isfinite(sigma) or sigma < 0:
        raise ValueError(f"sigma_energy must be finite and ≥ 0, got {sigma_energy!r}")
    return c * sigma


def history_insensitivity(
    reference: Signature,
    contexts: Signature | Sequence[Signature],
    confidence: float = DEFAULT_CONFIDENCE,
    sigma_energy: float | None = None,
) -> InsensitivityResult:
    """Is an element history-insensitive over a set of entry contexts? (Definition 4.1)

    Checks Eq. (11), Δs·T(φ') + ΔT·s(φ') + Δs·ΔT + Δd ≤ c_α·σ_E, for every ordered pair
    (φ, φ') of the contexts {reference, *contexts}; the multipliers T(φ'), s(φ') come
    from the second context of each pair.

    Args:
        reference: The element characterized at the null context φ₀ (its σ_E sets the
            threshold unless ``sigma_energy`` is given).
        contexts: The same element characterized at other entry contexts (e.g. after a
            hot predecessor).
        confidence: 1 − α.
        sigma_energy: σ_E of the element, J (default: the reference's).
    """
    others = [contexts] if isinstance(contexts, Signature) else list(contexts)
    if not others:
        raise ValueError("history_insensitivity needs at least one other entry context")
    sigs = [reference, *others]
    c = c_alpha(confidence)
    threshold = _sigma_threshold(reference, sigma_energy, c)
    pairs = [(i, j) for i in range(len(sigs)) for j in range(len(sigs)) if i != j]
    terms = [_shift_terms(sigs[i], sigs[j]) for i, j in pairs]
    bounds = tuple(sum(t.values()) for t in terms)
    k = max(range(len(bounds)), key=bounds.__getitem__)
    return InsensitivityResult(
        bounds[k] <= threshold, bounds[k], threshold, terms[k], pairs[k], bounds, c, confidence
    )


def interference_insensitivity(
    isolated: Signature,
    corun: Signature | Sequence[Signature],
    confidence: float = DEFAULT_CONFIDENCE,
    sigma_energy: float | None = None,
) -> InsensitivityResult:
    """Is an element interference-insensitive to its co-runners? (Definition 4.3)

    Checks Eq. (12), Δs·T_e + ΔT·s_e + Δs·ΔT + Δd ≤ c_α·σ_E, with Δx the shift between
    the element's values measured while co-running and in isolation, and the multipliers
    T_e, s_e the isolation values.

    Args:
        isolated: The element measured alone at an entry context.
        corun: The same element's values measured while co-running, one per runtime
            context (same entry context).
        confidence: 1 − α.
        sigma_energy: σ_E of the element, J (default: the isolated signature's).
    """
    runs = [corun] if isinstance(corun, Signature) else list(corun)
    if not runs:
        raise ValueError("interference_insensitivity needs at least one co-run signature")
    c = c_alpha(confidence)
    threshold = _sigma_threshold(isolated, sigma_energy, c)
    terms = [_shift_terms(r, isolated) for r in runs]
    bounds = tuple(sum(t.values()) for t in terms)
    k = max(range(len(bounds)), key=bounds.__getitem__)
    return InsensitivityResult(
        bounds[k] <= threshold, bounds[k], threshold, terms[k], k, bounds, c, confidence
    )


# Reduction bias (Eq. 13, Appendix D, Eq. 39) -----------------------------------------------
Operator = Literal["seq", "par", "par_multi"]
_OPERATOR_ALIASES = {
    "seq": "seq", "⊗": "seq",
    "par": "par", "⊕": "par",
    "par_multi": "par_multi", "⊕multi": "par_multi",
}  # fmt: skip


def reduction_multipliers(op: str, starts_at_null: bool = False) -> tuple[int, int]:
    """The Reduction Theorem's multipliers (m₁, m₂) of Eq. (13).

    ⊗: (1, 1); ⊕ and ⊕multi: (2, 2). When the composition itself starts at the null
    context, elements that start with it skip the entry-state substitution: ⊗ → (0, 1),
    ⊕ and ⊕multi → (1, 1).

    Args:
        op: ``"seq"``/``"⊗"``, ``"par"``/``"⊕"`` or ``"par_multi"``/``"⊕multi"``.
        starts_at_null: Whether the composition starts at the null context.
    """
    kind = _OPERATOR_ALIASES.get(op)
    if kind is None:
        raise ValueError(f"unknown operator {op!r}; expected one of {sorted(_OPERATOR_ALIASES)}")
    if kind == "seq":
        return (0, 1) if starts_at_null else (1, 1)
    return (1, 1) if starts_at_null else (2, 2)


@dataclass(frozen=True)
class BiasBound:
    """A worst-case bias bound of context-independent composition (Eq. 13, 36–39).

    Attributes:
        bias: Σ m_i·c_α·σ_E,i, J: the largest systematic offset reduction can introduce.
        contributions: Per element ``(label, m_i, σ_E,i)``.
        c_alpha: The multiplier used.
        confidence: 1 − α.
    """

    bias: float
    contributions: tuple[tuple[str, float, float], ...]
    c_alpha: float
    confidence: float

    def total_interval(self, composed: Estimate) -> Interval:
        """Eq. (39): E⁽⁰⁾ ± (bias + c_α·σ_E⁽⁰⁾), the interval that also covers the bias."""
        energy, std = _estimate(composed, "composed")
        return Interval(energy, self.bias + self.c_alpha * std, self.confidence)


def accumulated_bias(
    contributions: Iterable[tuple[str, float, float]],
    confidence: float = DEFAULT_CONFIDENCE,
) -> BiasBound:
    """Sum per-element bias tolerances over a composition (Appendix D).

    Multipliers do not compound across levels: the total is a sum over elements of
    m_i·c_α·σ_E,i.

    Args:
        contributions: ``(label, multiplier m_i, σ_E,i in J)`` per element.
        confidence: 1 − α.
    """
    items = tuple((str(n), float(m), float(s)) for n, m, s in contributions)
    for label, m, s in items:
        if not (m >= 0 and s >= 0 and math.isfinite(m) and math.isfinite(s)):
            raise ValueError(f"bias contribution {label!r}: multiplier and σ must be ≥ 0")
    c = c_alpha(confidence)
    return BiasBound(sum(m * c * s for _, m, s in items), items, c, confidence)


def reduction_bias(
    op: str,
    first: Estimate,
    second: Estimate,
    confidence: float = DEFAULT_CONFIDENCE,
    starts_at_null: bool = False,
) -> BiasBound:
    """Eq. (13): |E₁ op E₂ − E₁ op⁽⁰⁾ E₂| ≤ m₁·c_α·σ_E1 + m₂·c_α·σ_E2.

    Example:
        >>> round(reduction_bias("par", (1.0, 0.1), (2.0, 0.2)).bias, 4)  # 2·1.96·0.3
        1.176
    """
    m1, m2 = reduction_multipliers(op, starts_at_null)
    _, s1 = _estimate(first, "first")
    _, s2 = _estimate(second, "second")
    return accumulated_bias([("e1", m1, s1), ("e2", m2, s2)], confidence)


def chain_bias(
    elements: Sequence[Estimate],
    confidence: float = DEFAULT_CONFIDENCE,
    starts_at_null: bool = True,
) -> BiasBound:
    """Bias of a same-device chain e₁ ⊗ … ⊗ e_n (Eq. 36): c_α·Σ_{i≥2} σ_E,i.

    The first element carries no term when the chain starts at the null context; else
    it carries one tolerance like the rest.
    """
    contributions = []
    for i, e in enumerate(elements):
        label = e.name if isinstance(e, Signature) else f"e{i + 1}"
        _, sigma = _estimate(e, label)
        contributions.append((label, 0.0 if i == 0 and starts_at_null else 1.0, sigma))
    return accumulated_bias(contributions, confidence)


def padded_pair_bias(
    first: Signature, second: Signature, confidence: float = DEFAULT_CONFIDENCE
) -> BiasBound:
    """Bias of (e₁ ⊗ ι) ⊕multi e₂ with e₁ the shorter element (Appendix D, after Eq. 38).

    To first order: 2·c_α·σ_E1 + 2·(1 + s₁/s₂)·c_α·σ_E2 + 2·c_α·σ_Eι, with the idle
    element's σ_Eι² = s₁²·(σ_T1² + σ_T2²) inherited from the durations that set the gap.

    Raises:
        ValueError: when ``first`` is not the shorter element or ``second`` draws no
            static power.
    """
    if first.time > second.time:
        raise ValueError(
            f"padded_pair_bias: {first.name!r} ({first.time:g} s) must be the shorter "
            f"element; {second.name!r} takes {second.time:g} s — swap them"
        )
    if second.static_power <= 0:
        raise ValueError(f"padded_pair_bias: {second.name!r} needs a positive static power")
    ratio = first.static_power / second.static_power
    sigma_idle = first.static_power * math.sqrt(first.var_time + second.var_time)
    return accumulated_bias(
        [
            (first.name, 2.0, first.std_energy),
            (second.name, 2.0 * (1.0 + ratio), second.std_energy),
            ("idle", 2.0, sigma_idle),
        ],
        confidence,
    )


# Refinement–coarsening (Eq. 24, Appendix G) ------------------------------------------------
@dataclass(frozen=True)
class RefinementResult:
    """Refinement–coarsening consistency (Eq. 24).

    Attributes:
        passed: True when |E_e − Ê_e| ≤ bias + c_α·√(σ_E² + σ̂_E²).
        deviation: |E_e − Ê_e|, J.
        threshold: The right-hand side, J.
        bias: The accumulated bias bound used, J.
        noise: c_α·√(σ_E² + σ̂_E²), J.
        c_alpha: The multiplier used.
        confidence: 1 − α.
    """

    passed: bool
    deviation: float
    threshold: float
    bias: float
    noise: float
    c_alpha: float
    confidence: float

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        verdict = "consistent" if self.passed else "INCONSISTENT"
        return (
            f"{verdict}: |E − Ê| = {self.deviation:.4g} J vs bias {self.bias:.4g} J + "
            f"noise {self.noise:.4g} J"
        )


def refinement_check(
    measured: Estimate,
    composed: Estimate,
    bias: float | BiasBound = 0.0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> RefinementResult:
    """Does a refined (composed) signature agree with the coarse measurement? (Eq. 24)

    Args:
        measured: The element measured directly as one, S_e.
        composed: Its sub-elements composed, Ŝ_e.
        bias: The accumulated bias bound Σ m_i·c_α·σ_E,i (J or a :class:`BiasBound`);
            0 when every sub-element was characterized at the contexts the refinement
            realizes.
        confidence: 1 − α.
    """
    em, sm = _estimate(measured, "measured")
    ec, sc = _estimate(composed, "composed")
    bias_j = bias.bias if isinstance(bias, BiasBound) else float(bias)
    if not math.isfinite(bias_j) or bias_j < 0:
        raise ValueError(f"bias must be finite and ≥ 0, got {bias!r}")
    c = c_alpha(confidence)
    noise = c * math.hypot(sm, sc)
    dev = abs(em - ec)
    return RefinementResult(
        dev <= bias_j + noise, dev, bias_j + noise, bias_j, noise, c, confidence
    )
