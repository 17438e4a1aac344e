"""The three composition operators of energy calculus and the idle element.

Sequential ⊗ (:func:`seq`), same-device parallel ⊕ (:func:`par`) and cross-device parallel
⊕multi (:func:`par_multi`), in the context-independent form of the paper (§4.3, §5), with
variances propagated per Property 5.6 and Appendix F.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from eopt.calculus.signature import Signature, SignatureError
from eopt.devices.operating_point import OperatingPoint

__all__ = [
    "CompositionError",
    "idle",
    "max_moments",
    "par",
    "par_multi",
    "seq",
]

IDLE_SYMBOL = "ι"
SEQ_SYMBOL = "⊗"
PAR_SYMBOL = "⊕"
MULTI_SYMBOL = "⊕multi"

_REL_TOL = 1e-9
_SQRT2 = math.sqrt(2.0)
_SQRT_2PI = math.sqrt(2.0 * math.pi)


class CompositionError(SignatureError):
    """Operands that the operator cannot compose (device or static-power mismatch)."""


# Var(max) of Gaussian times --------------------------------------------------------------
def _clark_pair(mu1: float, var1: float, mu2: float, var2: float) -> tuple[float, float]:
    """Mean and variance of max(X, Y) for independent Gaussians (Clark, 1961), exact."""
    a2 = var1 + var2
    if a2 <= 0.0:
        return max(mu1, mu2), 0.0
    a = math.sqrt(a2)
    alpha = (mu1 - mu2) / a
    # Standard normal CDF and PDF from math (scipy.stats would slow `import eopt` by ~1 s).
    cdf, cdf_neg = 0.5 * math.erfc(-alpha / _SQRT2), 0.5 * math.erfc(alpha / _SQRT2)
    pdf = math.exp(-0.5 * alpha * alpha) / _SQRT_2PI
    # Moments about the larger mean: the variance is shift-invariant, and m2 − m1² would
    # cancel catastrophically for long times with tiny spreads (100 s ± 1e-7 s).
    ref = max(mu1, mu2)
    d1, d2 = mu1 - ref, mu2 - ref
    m1 = d1 * cdf + d2 * cdf_neg + a * pdf
    m2 = (d1**2 + var1) * cdf + (d2**2 + var2) * cdf_neg + (d1 + d2) * a * pdf
    return float(ref + m1), float(max(0.0, m2 - m1**2))


def _clark_recursion(means: Sequence[float], variances: Sequence[float]) -> tuple[float, float]:
    """Clark's pairwise recursion: each partial maximum is taken as a Gaussian.

    Smallest variance first: merging the widest operands last keeps the Gaussian
    approximation of the partial maxima tightest (checked against exact integration).
    """
    order = sorted(range(len(means)), key=lambda i: (variances[i], means[i]))
    mu, var = float(means[order[0]]), float(variances[order[0]])
    for i in order[1:]:
        mu, var = _clark_pair(mu, var, float(means[i]), float(variances[i]))
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
    (E − d)/T; time and energy variances add (independent errors, Appendix F.1).

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
        meta={"composite": "seq", "operands": len(operands)},
        term=_join(SEQ_SYMBOL, operands, wrap=False),
    )


def par(*sigs: Signature | Iterable[Signature], name: str | None = None) -> Signature:
    """Same-device parallel composition E₁ ⊕ E₂ ⊕ … (co-starting elements).

    Static power is drawn once over the makespan; dynamic energies add:
    E = s·max(T_i) + Σd_i. σ_E² = Σσ_d,i² + s²·Var(max T) (Property 5.6).

    Raises:
        CompositionError: when operands sit on different devices or have different static
            power (they must share the device-wide operating point).
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
    _, var_max = max_moments([s.time for s in operands], [s.var_time for s in operands])
    return Signature(
        name=name or _name(PAR_SYMBOL, operands),
        static_power=s0,
        time=max(s.time for s in operands),
        dynamic_energy=sum(s.dynamic_energy for s in operands),
        var_time=var_max,
        var_energy=sum(s.var_dynamic for s in operands) + s0**2 * var_max,
        devices=_device_union(operands),
        op_point=_common_op_point(operands),
        meta={"composite": "par", "operands": len(operands)},
        term=_join(PAR_SYMBOL, operands, wrap=True),
    )


def par_multi(
    *sigs: Signature | Iterable[Signature],
    idle_power: float | Mapping[str, float] | None = None,
    name: str | None = None,
) -> Signature:
    """Cross-device parallel composition E₁ ⊕multi E₂ ⊕multi … on disjoint devices.

    Shorter operands are padded with idle elements up to the longest duration, so every
    device is covered to the makespan. σ_E² = Σσ_d,i² + (Σs_i)²·Var(max T).

    Args:
        *sigs: Signatures on pairwise disjoint device sets.
        idle_power: Idle draw in W while padding: one value for all, a mapping from device
            name to W, or ``None`` for each operand's own static power (for a composite of
            elements at different operating points, their time-weighted mean; pass the
            device's ready draw explicitly in that case).
        name: Name of the composite.

    Raises:
        CompositionError: when two operands share a device.
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
    makespan = max(s.time for s in operands)
    padded: list[Signature] = []
    for s in operands:
        gap = makespan - s.time
        # Differences at rounding level are not idle periods (they would add ι terms).
        if gap > _REL_TOL * makespan:
            draw = _idle_draw(s, idle_power)
            padded.append(seq(s, idle(gap, draw, s.devices), name=s.name))
        else:
            padded.append(s)
    dynamic = sum(s.dynamic_energy for s in operands)
    # Summed directly, not as E − d, which cancels when d dwarfs the static part.
    static_energy = sum(p.static_energy for p in padded)
    sum_static = sum(s.static_power for s in operands)
    _, var_max = max_moments([s.time for s in operands], [s.var_time for s in operands])
    return Signature(
        name=name or _name(MULTI_SYMBOL, operands),
        static_power=static_energy / makespan if makespan > 0 else sum_static,
        time=makespan,
        dynamic_energy=dynamic,
        var_time=var_max,
        var_energy=sum(s.var_dynamic for s in operands) + sum_static**2 * var_max,
        devices=_device_union(operands),
        meta={"composite": "par_multi", "operands": len(operands)},
        term=_join(MULTI_SYMBOL, padded, wrap=True),
    )


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
