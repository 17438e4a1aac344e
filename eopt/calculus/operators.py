"""The three composition operators of energy calculus and the idle element.

Sequential ⊗ (:func:`seq`), same-device parallel ⊕ (:func:`par`) and cross-device parallel
⊕multi (:func:`par_multi`), in the context-independent form of the paper (§4.3, §5), with
variances propagated per Property 5.6 and Appendix F (the covariance forms, Eq. 47–48).

Every composite carries, besides σ_T² and σ_E², the covariance Cov(E, T) of one run
(``meta["cov_energy_time"]``, J·s): what a later parallel composition needs to turn its
operands' time noise into energy noise through each operand's own static power, so E.3's
closure caveat never applies (docs/uncertainty.md). A measured element without one is
taken to have times independent of its dynamic energy (Property 5.6): Cov(E, T) = s·σ_T².
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature, SignatureError

__all__ = [
    "COV_KEY",
    "TIME_MEANS",
    "CompositionError",
    "clark_max",
    "energy_time_cov",
    "idle",
    "max_moments",
    "max_probabilities",
    "par",
    "par_multi",
    "seq",
]

IDLE_SYMBOL = "ι"
SEQ_SYMBOL = "⊗"
PAR_SYMBOL = "⊕"
MULTI_SYMBOL = "⊕multi"

_REL_TOL = 1e-9

#: Makespan conventions: the paper's max of the operands' mean times (the default, under
#: which the algebra's identities hold exactly and a solver's planned energy is
#: reproduced) or the mean of the makespan E[max T], what measurements average to (what
#: ``eopt check`` compares them with; docs/uncertainty.md).
TIME_MEANS = ("max_of_means", "expected_max")

#: ``Signature.meta`` key of the covariance Cov(E, T) of one run, in J·s.
COV_KEY = "cov_energy_time"
_SQRT2 = math.sqrt(2.0)
_SQRT_2PI = math.sqrt(2.0 * math.pi)


class CompositionError(SignatureError):
    """Operands that the operator cannot compose (device or static-power mismatch)."""


# Var(max) of Gaussian times --------------------------------------------------------------
# Beyond this many standard deviations apart, the lower operand changes neither moment of
# the maximum at double precision (Φ(−38) ≈ 3e-316), and α·Φ(−α) would be ∞·0 at α = ∞.
_CLARK_ALPHA_MAX = 38.0


def _clark_standardized(
    alpha: Any, theta: Any, var_hi: Any, var_lo: Any, tail: Any, pdf: Any
) -> tuple[Any, Any]:
    """Clark's moments of max(X_hi, X_lo) in units standardized to the higher mean.

    With α = (μ_hi − μ_lo)/θ ≥ 0, θ² = σ_hi² + σ_lo², tail = Φ(−α) and pdf = φ(α):
    E[max] − μ_hi = θ·g with g = φ(α) − α·Φ(−α), and
    Var[max] = σ_hi²·Φ(α) + σ_lo²·Φ(−α) + θ²·(α²·Φ(−α) − α·φ(α) − g²).
    No term holds a mean, so nothing cancels for long times with tiny spreads (the raw
    form E[max²] − E[max]² loses every digit of 3600 s ± 1e-4 s). Plain arithmetic only:
    the same lines serve floats and numpy arrays.
    """
    g = pdf - alpha * tail
    var = (
        var_hi * (1.0 - tail)
        + var_lo * tail
        + theta * theta * (alpha * (alpha * tail - pdf) - g * g)
    )
    return theta * g, var


def clark_max(mu1: Any, var1: Any, mu2: Any, var2: Any) -> tuple[Any, Any]:
    """Mean and variance of max(X₁, X₂) for independent Gaussians (Clark, 1961), exact.

    The one implementation of E[max]/Var[max] of two operands: ``par``, ``par_multi``,
    :func:`max_moments` and the frontier compositions all use it. Numerically stable at
    every scale: computed in units of θ = √(σ₁² + σ₂²) about the larger mean, exactly
    (max(μ₁, μ₂), 0) when θ = 0, and exactly the larger operand's moments when the
    operands lie more than 38 θ apart.

    Args:
        mu1: μ₁ (e.g. a time in s); a float or a numpy array.
        var1: σ₁² (s²), ≥ 0.
        mu2: μ₂ (s), broadcastable against ``mu1``.
        var2: σ₂² (s²), ≥ 0.

    Returns:
        (E[max], Var[max]) — floats for float inputs, arrays for array inputs.

    Assumptions:
        X₁ and X₂ are independent and Gaussian; variances are ≥ 0.

    Example:
        >>> mean, var = clark_max(1.0, 1.0, 1.0, 1.0)
        >>> round(mean - 1.0, 4), round(var, 4)  # 1/√π, 1 − 1/π
        (0.5642, 0.6817)
    """
    if all(isinstance(v, numbers.Real) for v in (mu1, var1, mu2, var2)):
        return _clark_max_scalar(float(mu1), float(var1), float(mu2), float(var2))
    return _clark_max_array(mu1, var1, mu2, var2)


def _clark_max_scalar(mu1: float, var1: float, mu2: float, var2: float) -> tuple[float, float]:
    if mu2 > mu1:
        mu1, var1, mu2, var2 = mu2, var2, mu1, var1
    theta2 = var1 + var2
    if theta2 <= 0.0:
        return mu1, 0.0
    theta = math.sqrt(theta2)
    alpha = (mu1 - mu2) / theta
    if alpha > _CLARK_ALPHA_MAX:
        return mu1, var1
    # Normal tail and density from math: scipy.stats would slow `import eopt` by ~1 s.
    tail = 0.5 * math.erfc(alpha / _SQRT2)
    pdf = math.exp(-0.5 * alpha * alpha) / _SQRT_2PI
    excess, var = _clark_standardized(alpha, theta, var1, var2, tail, pdf)
    return mu1 + excess, max(0.0, var)


def _clark_max_array(mu1: Any, var1: Any, mu2: Any, var2: Any) -> tuple[Any, Any]:
    import numpy as np
    from scipy.special import ndtr  # loaded on first use: keeps `import eopt` fast

    mu1, var1, mu2, var2 = np.broadcast_arrays(
        *(np.asarray(v, dtype=float) for v in (mu1, var1, mu2, var2))
    )
    first_higher = mu1 >= mu2
    mu_hi, mu_lo = np.where(first_higher, mu1, mu2), np.where(first_higher, mu2, mu1)
    var_hi, var_lo = np.where(first_higher, var1, var2), np.where(first_higher, var2, var1)
    theta = np.sqrt(var_hi + var_lo)
    spread = theta > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.where(spread, (mu_hi - mu_lo) / np.where(spread, theta, 1.0), np.inf)
    near = alpha <= _CLARK_ALPHA_MAX
    a = np.where(near, alpha, 0.0)  # far pairs take the exact branch below
    excess, var = _clark_standardized(
        a, theta, var_hi, var_lo, ndtr(-a), np.exp(-0.5 * a * a) / _SQRT_2PI
    )
    mean = np.where(near, mu_hi + excess, mu_hi)
    var = np.where(near, np.maximum(0.0, var), np.where(spread, var_hi, 0.0))
    return mean, var


def _clark_recursion(means: Sequence[float], variances: Sequence[float]) -> tuple[float, float]:
    """Clark's pairwise recursion: each partial maximum is taken as a Gaussian.

    Smallest variance first: merging the widest operands last keeps the Gaussian
    approximation of the partial maxima tightest (checked against exact integration).
    """
    order = sorted(range(len(means)), key=lambda i: (variances[i], means[i]))
    mu, var = float(means[order[0]]), float(variances[order[0]])
    for i in order[1:]:
        mu, var = _clark_max_scalar(mu, var, float(means[i]), float(variances[i]))
    return mu, var


# Gauss–Legendre nodes per segment; segments are at most one σ of any operand that is
# not flat there, where 16 nodes integrate the CDFs to rounding error.
_NODES_PER_SEGMENT = 16
# Operands farther than this many standard deviations below the sure part of the maximum
# cannot be the maximum (probability < 1e-19) and are dropped.
_TAIL_SIGMAS = 9


def _exact_max_moments(means: Sequence[float], variances: Sequence[float]) -> tuple[float, float]:
    """E[max] and Var[max] of independent Gaussians by quadrature of the product of CDFs.

    For X = max_i X_i ≥ L almost surely, E[g(X)] = g(L) + ∫_L^∞ g'(x)·(1 − F(x)) dx with
    F = Π Φ((x − μ_i)/σ_i). The integral is split at μ_i + kσ_i (k = −9 … 9) of every
    operand, so each piece is smooth on the scale of its nodes however different the σ_i
    are, and computed in standardized units around the largest mean so that tiny
    variances of long times do not cancel.
    """
    import numpy as np
    from scipy.special import ndtr  # loaded on first use: keeps `import eopt` fast

    mus = np.asarray(means, dtype=float)
    sds = np.sqrt(np.asarray(variances, dtype=float))
    fixed = sds == 0
    if fixed.all():
        return float(mus.max()), 0.0
    floor = float(mus[fixed].max()) if fixed.any() else -math.inf
    lower = max(floor, float((mus - _TAIL_SIGMAS * sds)[~fixed].max()))
    live = ~fixed & (mus + _TAIL_SIGMAS * sds > lower)
    if not live.any():
        return lower, 0.0
    center, scale = float(mus[live].max()), float(sds[live].max())
    z_mu, z_sd = (mus[live] - center) / scale, sds[live] / scale
    lo = (lower - center) / scale
    hi = float((z_mu + _TAIL_SIGMAS * z_sd).max())
    if hi <= lo:
        return lower, 0.0
    ks = np.arange(-_TAIL_SIGMAS, _TAIL_SIGMAS + 1, dtype=float)
    cuts = np.concatenate([[lo, hi], (z_mu[:, None] + z_sd[:, None] * ks[None, :]).ravel()])
    cuts = np.unique(np.clip(cuts, lo, hi))
    nodes, weights = np.polynomial.legendre.leggauss(_NODES_PER_SEGMENT)
    half, mid = (cuts[1:] - cuts[:-1]) / 2.0, (cuts[1:] + cuts[:-1]) / 2.0
    x = (mid[:, None] + half[:, None] * nodes[None, :]).ravel()
    w = (half[:, None] * weights[None, :]).ravel()
    survival = 1.0 - np.prod(ndtr((x[:, None] - z_mu[None, :]) / z_sd[None, :]), axis=1)
    m1 = lo + float(w @ survival)
    m2 = lo * lo + float(w @ (2.0 * x * survival))
    return center + scale * m1, max(0.0, scale * scale * (m2 - m1 * m1))


def max_moments(
    means: Sequence[float], variances: Sequence[float], method: str = "auto"
) -> tuple[float, float]:
    """Mean and variance of the maximum of independent Gaussian variables.

    Two variables: Clark's formulas, exact. More: by default numerical integration of the
    product of the CDFs (exact up to rounding and a 1e-19 tail); ``method="clark"``
    uses Clark's pairwise recursion instead, which approximates each partial maximum by a
    Gaussian and underestimates Var(max) (by about 2 % for three equal operands, 10 % for
    eight, more for close means with unequal variances).

    Args:
        means: Means μ_i (e.g. element times in s).
        variances: Variances σ_i² (s²).
        method: ``"auto"`` (Clark for two, quadrature for more), ``"clark"`` or
            ``"exact"``.

    Returns:
        (E[max], Var[max]).

    Example:
        >>> round(max_moments([1.0, 1.0], [1.0, 1.0])[1], 4)  # 1 - 1/π
        0.6817
    """
    if len(means) != len(variances) or not means:
        raise ValueError("max_moments needs equally many means and variances (at least one)")
    if method not in ("auto", "clark", "exact"):
        raise ValueError(f"max_moments method must be 'auto', 'clark' or 'exact', got {method!r}")
    if len(means) == 1:
        return float(means[0]), float(variances[0])
    if method == "clark" or (method == "auto" and len(means) == 2):
        return _clark_recursion(means, variances)
    return _exact_max_moments(means, variances)


def max_probabilities(means: Sequence[float], variances: Sequence[float]) -> list[float]:
    """P(X_i is the largest) for independent Gaussians X_i, each operand's share of the max.

    By Stein's lemma this is ∂E[max]/∂μ_i, and Cov(Y, max) = Σ_i Cov(Y, X_i)·P(X_i is the
    largest) for any Y jointly Gaussian with the X_i: what turns an operand's noise into
    the makespan's. Two operands: Φ((μ_i − μ_j)/θ), exact; more: quadrature of
    φ_i·Π_{j≠i} Φ_j over the same segments as :func:`max_moments`. Operands of zero
    variance are steps; equal fixed maxima share their probability.

    Args:
        means: Means μ_i (s).
        variances: Variances σ_i² (s²), ≥ 0.

    Returns:
        One probability per operand, summing to 1.

    Example:
        >>> [round(p, 4) for p in max_probabilities([1.0, 1.0], [1.0, 4.0])]
        [0.5, 0.5]
        >>> [round(p, 4) for p in max_probabilities([2.0, 1.0], [0.0, 0.0])]
        [1.0, 0.0]
    """
    if len(means) != len(variances) or not means:
        raise ValueError("max_probabilities needs equally many means and variances")
    n = len(means)
    if n == 1:
        return [1.0]
    mus = [float(m) for m in means]
    vs = [max(0.0, float(v)) for v in variances]
    if n == 2:
        theta2 = vs[0] + vs[1]
        if theta2 <= 0.0:
            if mus[0] == mus[1]:
                return [0.5, 0.5]
            return [1.0, 0.0] if mus[0] > mus[1] else [0.0, 1.0]
        p0 = 0.5 * math.erfc(-(mus[0] - mus[1]) / math.sqrt(2.0 * theta2))
        return [p0, 1.0 - p0]
    return _quadrature_probabilities(mus, vs)


def _quadrature_probabilities(mus: list[float], vs: list[float]) -> list[float]:
    import numpy as np
    from scipy.special import ndtr  # loaded on first use: keeps `import eopt` fast

    mu = np.asarray(mus)
    sd = np.sqrt(np.asarray(vs))
    fixed = sd == 0
    out = np.zeros(len(mus))
    floor = float(mu[fixed].max()) if fixed.any() else -math.inf
    live = ~fixed & (mu + _TAIL_SIGMAS * sd > floor)
    if not live.any():
        top = np.flatnonzero(fixed & (mu == floor))
        out[top] = 1.0 / top.size
        return out.tolist()
    center, scale = float(mu[live].max()), float(sd[live].max())
    z_mu, z_sd = (mu[live] - center) / scale, sd[live] / scale
    lo = max((floor - center) / scale, float((z_mu - _TAIL_SIGMAS * z_sd).max()))
    hi = float((z_mu + _TAIL_SIGMAS * z_sd).max())
    ks = np.arange(-_TAIL_SIGMAS, _TAIL_SIGMAS + 1, dtype=float)
    cuts = np.concatenate([[lo, hi], (z_mu[:, None] + z_sd[:, None] * ks[None, :]).ravel()])
    cuts = np.unique(np.clip(cuts, lo, hi))
    nodes, weights = np.polynomial.legendre.leggauss(_NODES_PER_SEGMENT)
    half, mid = (cuts[1:] - cuts[:-1]) / 2.0, (cuts[1:] + cuts[:-1]) / 2.0
    x = (mid[:, None] + half[:, None] * nodes[None, :]).ravel()
    w = (half[:, None] * weights[None, :]).ravel()
    z = (x[:, None] - z_mu[None, :]) / z_sd[None, :]
    cdf = np.clip(ndtr(z), 1e-300, 1.0)
    with np.errstate(over="ignore", under="ignore"):  # far tails: exp(−∞) = 0 is right
        pdf = np.exp(-0.5 * z * z) / (_SQRT_2PI * z_sd[None, :])
        log_cdf = np.log(cdf)
        # Π_{j≠i} Φ_j = Π_j Φ_j / Φ_i, in logs so that far tails do not underflow.
        dens = pdf * np.exp(log_cdf.sum(axis=1, keepdims=True) - log_cdf)
    live_p = w @ dens
    # The fixed operands' share: every random one below the largest fixed value.
    below = float(np.exp(np.log(np.clip(ndtr((floor - mu[live]) / sd[live]), 1e-300, 1.0)).sum()))
    if fixed.any() and below > 0:
        top = np.flatnonzero(fixed & (mu == floor))
        out[top] = below / top.size
    out[live] = live_p
    total = float(out.sum())
    return (out / total).tolist() if total > 0 else out.tolist()


def energy_time_cov(sig: Signature) -> float:
    """Cov(E, T) of one run of ``sig``, in J·s (docs/uncertainty.md).

    The carried value (``meta["cov_energy_time"]``, from characterization or an earlier
    composition), held to |Cov| ≤ σ_E·σ_T, when there is one; otherwise s·σ_T², the
    value of Property 5.6's assumption that times are independent of dynamic energies
    (with which every operator reduces to the paper's formulas, σ_d² = σ_E² − s²σ_T²
    clamped at 0 included).
    """
    raw = sig.meta.get(COV_KEY)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw):
        bound = math.sqrt(sig.var_energy * sig.var_time)
        return min(bound, max(-bound, float(raw)))
    return sig.static_power * sig.var_time


def _dynamic_var(sig: Signature, static_power: float) -> float:
    """Var(E − s·T) of one run: the part of σ_E² no static draw carries, in J²."""
    cov = energy_time_cov(sig)
    return max(0.0, sig.var_energy - 2.0 * static_power * cov + static_power**2 * sig.var_time)


# Terms ------------------------------------------------------------------------------------
def _top_operator(term: str) -> str | None:
    """The operator at paren depth 0 of a term, or None for an atom / parenthesized term."""
    depth = 0
    i = 0
    while i < len(term):
        ch = term[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and term.startswith(" " + MULTI_SYMBOL + " ", i):
            return MULTI_SYMBOL
        elif depth == 0 and term.startswith(" " + SEQ_SYMBOL + " ", i):
            return SEQ_SYMBOL
        elif depth == 0 and term.startswith(" " + PAR_SYMBOL + " ", i):
            return PAR_SYMBOL
        i += 1
    return None


def _join(symbol: str, sigs: Sequence[Signature], wrap: bool) -> str:
    parts = []
    for sig in sigs:
        top = _top_operator(sig.term)
        parts.append(sig.term if top is None or top == symbol else f"({sig.term})")
    joined = f" {symbol} ".join(parts)
    return f"({joined})" if wrap and len(parts) > 1 else joined


def _name(symbol: str, sigs: Sequence[Signature]) -> str:
    names = [s.name for s in sigs]
    return names[0] if len(names) == 1 else f"{symbol}[{', '.join(names)}]"


def _flatten(sigs: Iterable[Signature | Iterable[Signature]]) -> list[Signature]:
    out: list[Signature] = []
    for s in sigs:
        if isinstance(s, Signature):
            out.append(s)
        else:
            out.extend(_flatten(s))
    return out


def _device_union(sigs: Sequence[Signature]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(d for s in sigs for d in s.devices))


def _require_same_devices(op: str, sigs: Sequence[Signature]) -> None:
    placed = [s for s in sigs if s.devices]
    for s in placed[1:]:
        if set(s.devices) != set(placed[0].devices):
            raise CompositionError(
                f"{op} needs operands on the same device(s): {placed[0].name!r} is on "
                f"{list(placed[0].devices)}, {s.name!r} on {list(s.devices)}"
                + ("; use par_multi for different devices" if op == "par" else "")
            )


# Operators --------------------------------------------------------------------------------
def idle(duration: float, static_power: float, device: str | Iterable[str] = ()) -> Signature:
    """The idle element ι: a device drawing ``static_power`` W for ``duration`` s, no work.

    Args:
        duration: Length of the idle period, in s.
        static_power: Draw while idle, in W (the ready state's static power by default in
            schedules; a deeper idle state can be given).
        device: The idling device.
    """
    return Signature(
        name="idle",
        static_power=static_power,
        time=duration,
        dynamic_energy=0.0,
        devices=(device,) if isinstance(device, str) else tuple(device),
        meta={"idle": True},
        term=IDLE_SYMBOL,
    )


def seq(*sigs: Signature | Iterable[Signature], name: str | None = None) -> Signature:
    """Sequential composition E₁ ⊗ E₂ ⊗ … on one device set.

    Times and dynamic energies add; the composite static power is the time-weighted mean
    (E − d)/T; time and energy variances add, and so do the covariances Cov(E, T)
    (independent errors, Appendix F.1).

    Args:
        *sigs: Signatures (or iterables of them) in execution order.
        name: Name of the composite; defaults to ``⊗[a, b, …]``.

    Raises:
        CompositionError: when operands sit on different device sets.
    """
    operands = _flatten(sigs)
    if not operands:
        raise CompositionError("seq needs at least one operand")
    if len(operands) == 1 and name is None:
        return operands[0]
    _require_same_devices("seq", operands)
    time = sum(s.time for s in operands)
    dynamic = sum(s.dynamic_energy for s in operands)
    static_energy = sum(s.static_energy for s in operands)
    static_power = static_energy / time if time > 0 else max(s.static_power for s in operands)
    return Signature(
        name=name or _name(SEQ_SYMBOL, operands),
        static_power=static_power,
        time=time,
        dynamic_energy=dynamic,
        var_time=sum(s.var_time for s in operands),
        var_energy=sum(s.var_energy for s in operands),
        devices=_device_union(operands),
        op_point=_common_op_point(operands),
        meta={
            "composite": "seq",
            "operands": len(operands),
            COV_KEY: sum(energy_time_cov(s) for s in operands),
        },
        term=_join(SEQ_SYMBOL, operands, wrap=False),
    )


def par(
    *sigs: Signature | Iterable[Signature],
    name: str | None = None,
    time_mean: str = "max_of_means",
) -> Signature:
    """Same-device parallel composition E₁ ⊕ E₂ ⊕ … (co-starting elements).

    Static power is drawn once over the makespan; dynamic energies add:
    E = s·max(T_i) + Σd_i. σ_E² = Σσ_d,i² + s²·Var(max T) + 2s·C_max (Property 5.6,
    Eq. 48), with σ_d,i² = Var(E_i − s·T_i) and C_max = Σ_i P(T_i is the max)·Cov(d_i, T_i),
    which vanishes when times are independent of dynamic energies.

    Args:
        *sigs: Signatures (or iterables of them) on one device, at one static power.
        name: Name of the composite; defaults to ``⊕[a, b, …]``.
        time_mean: The composite's time T (and so its static energy s·T):
            ``"max_of_means"`` (default, the paper's max_i T_i, under which ⊕ is exactly
            associative) or ``"expected_max"`` (E[max_i T_i] of Gaussian times, Clark for
            two operands, exact quadrature for more: the mean of measurements, which the
            max of the means underestimates whenever times vary).

    Raises:
        CompositionError: when operands sit on different devices or have different static
            power (they must share the device-wide operating point), or for an unknown
            ``time_mean``.

    Example:
        >>> a = Signature("a", static_power=100.0, time=1.0, dynamic_energy=5.0, var_time=0.01)
        >>> par(a, a.with_(name="b")).energy  # 100 W · 1 s + 10 J
        110.0
        >>> round(par(a, a.with_(name="b"), time_mean="expected_max").energy, 3)  # + 100·0.1/√π
        115.642
    """
    operands = _flatten(sigs)
    if not operands:
        raise CompositionError("par needs at least one operand")
    if len(operands) == 1 and name is None:
        return operands[0]
    _require_same_devices("par", operands)
    s0 = operands[0].static_power
    for s in operands[1:]:
        if not math.isclose(s.static_power, s0, rel_tol=_REL_TOL, abs_tol=1e-12):
            raise CompositionError(
                f"par needs one shared static power (one device-wide operating point): "
                f"{operands[0].name!r} has {s0:g} W, {s.name!r} has {s.static_power:g} W"
            )
    makespan, var_max = _makespan_moments(operands, time_mean)
    share = max_probabilities([s.time for s in operands], [s.var_time for s in operands])
    # Cov(d_i, T_i) of each operand: its dynamic energy's part in the makespan's noise.
    cov_dt = [energy_time_cov(s) - s0 * s.var_time for s in operands]
    c_max = sum(p * c for p, c in zip(share, cov_dt, strict=True))
    var_energy = sum(_dynamic_var(s, s0) for s in operands) + s0**2 * var_max + 2 * s0 * c_max
    return Signature(
        name=name or _name(PAR_SYMBOL, operands),
        static_power=s0,
        time=makespan,
        dynamic_energy=sum(s.dynamic_energy for s in operands),
        var_time=var_max,
        var_energy=max(0.0, var_energy),
        devices=_device_union(operands),
        op_point=_common_op_point(operands),
        meta={
            "composite": "par",
            "operands": len(operands),
            COV_KEY: s0 * var_max + c_max,
        },
        term=_join(PAR_SYMBOL, operands, wrap=True),
    )


def par_multi(
    *sigs: Signature | Iterable[Signature],
    idle_power: float | Mapping[str, float] | None = None,
    name: str | None = None,
    time_mean: str = "max_of_means",
) -> Signature:
    """Cross-device parallel composition E₁ ⊕multi E₂ ⊕multi … on disjoint devices.

    Every device is held to the makespan M = max_i T_i: an operand that ends earlier
    idles at its device's idle draw p_i until then (an idle element whose duration
    M − T_i inherits the variance of the times that set it, App. D). So
    E = Σ_i (E_i − p_i·T_i) + P·M with P = Σ_i p_i, and to first order in the Gaussian
    model (docs/uncertainty.md)

        σ_E² = Σ_i Var(E_i − p_i·T_i) + P²·Var(M) + 2P·Σ_i π_i·Cov(E_i − p_i·T_i, T_i),

    π_i = P(T_i is the max). Idling at each operand's own static power with times
    independent of dynamic energies, this is the paper's Σσ_d,i² + (Σs_i)²·Var(max T)
    (Eq. 22).

    Args:
        *sigs: Signatures on pairwise disjoint device sets.
        idle_power: Idle draw in W while padding: one value for all, a mapping from device
            name to W, or ``None`` for each operand's own static power (for a composite of
            elements at different operating points, their time-weighted mean; pass the
            device's ready draw explicitly in that case).
        name: Name of the composite.
        time_mean: The makespan the devices are held to: ``"max_of_means"`` (default,
            the paper's max_i T_i) or ``"expected_max"`` (E[max_i T_i], see :func:`par`;
            every operand, the longest included, is padded to it).

    Raises:
        CompositionError: when two operands share a device, or for an unknown
            ``time_mean``.
    """
    operands = _flatten(sigs)
    if not operands:
        raise CompositionError("par_multi needs at least one operand")
    if len(operands) == 1 and name is None:
        return operands[0]
    seen: dict[str, str] = {}
    for s in operands:
        for d in s.devices:
            if d in seen:
                raise CompositionError(
                    f"par_multi needs disjoint devices: {seen[d]!r} and {s.name!r} are both "
                    f"on {d!r}; use par for elements sharing a device"
                )
            seen[d] = s.name
    makespan, var_max = _makespan_moments(operands, time_mean)
    share = max_probabilities([s.time for s in operands], [s.var_time for s in operands])
    draws = [_idle_draw(s, idle_power) for s in operands]
    held = sum(draws)
    padded: list[Signature] = []
    for s, draw in zip(operands, draws, strict=True):
        gap = makespan - s.time
        # Differences at rounding level are not idle periods (they would add ι terms).
        if gap > _REL_TOL * makespan:
            padded.append(seq(s, idle(gap, draw, s.devices), name=s.name))
        else:
            padded.append(s)
    dynamic = sum(s.dynamic_energy for s in operands)
    # Each operand's energy net of the idle draw its own time displaces: E_i − p_i·T_i.
    var_net = [
        s.var_energy - 2.0 * p * energy_time_cov(s) + p * p * s.var_time
        for s, p in zip(operands, draws, strict=True)
    ]
    cov_net = [energy_time_cov(s) - p * s.var_time for s, p in zip(operands, draws, strict=True)]
    c_max = sum(pi * c for pi, c in zip(share, cov_net, strict=True))
    var_energy = sum(max(0.0, v) for v in var_net) + held**2 * var_max + 2.0 * held * c_max
    # Summed directly, not as E − d, which cancels when d dwarfs the static part.
    static_energy = sum(
        s.static_energy + p * (makespan - s.time) for s, p in zip(operands, draws, strict=True)
    )
    sum_static = sum(s.static_power for s in operands)
    return Signature(
        name=name or _name(MULTI_SYMBOL, operands),
        static_power=static_energy / makespan if makespan > 0 else sum_static,
        time=makespan,
        dynamic_energy=dynamic,
        var_time=var_max,
        var_energy=max(0.0, var_energy),
        devices=_device_union(operands),
        meta={
            "composite": "par_multi",
            "operands": len(operands),
            COV_KEY: held * var_max + c_max,
        },
        term=_join(MULTI_SYMBOL, padded, wrap=True),
    )


def _makespan_moments(operands: Sequence[Signature], time_mean: str) -> tuple[float, float]:
    """The composite's time (per ``time_mean``) and Var(max T), in s and s²."""
    if time_mean not in TIME_MEANS:
        raise CompositionError(f"time_mean must be one of {list(TIME_MEANS)}, got {time_mean!r}")
    expected, var_max = max_moments([s.time for s in operands], [s.var_time for s in operands])
    # E[max] ≥ max of the means in exact arithmetic; quadrature rounding must not
    # make a composite shorter than its longest operand.
    longest = max(s.time for s in operands)
    return (longest if time_mean == "max_of_means" else max(longest, expected)), var_max


def _idle_draw(sig: Signature, idle_power: float | Mapping[str, float] | None) -> float:
    if idle_power is None:
        return sig.static_power
    if isinstance(idle_power, Mapping):
        if sig.devices and all(d in idle_power for d in sig.devices):
            return float(sum(idle_power[d] for d in sig.devices))
        return sig.static_power
    return float(idle_power) * max(1, len(sig.devices))


def _common_op_point(sigs: Sequence[Signature]) -> OperatingPoint:
    """The operands' operating point when they all share it, else the default point."""
    points = {s.op_point for s in sigs if not s.meta.get("idle")}
    return points.pop() if len(points) == 1 else OperatingPoint()
