"""The standard error a composed prediction inherits from its elements' characterization.

A prediction composed from signatures measured over n runs is itself an estimate: each
element type's mean energy Ē and mean time T̄ carry the sampling error of their runs, and
every instance of the type shares it. To first order the prediction's error is

    SE²(Ê) = Σ_types (g_E²·σ_E² + 2·g_E·g_T·Cov(E, T) + g_T²·σ_T²) / n_type,

with g_E = ∂Ê/∂Ē (at fixed T̄) and g_T = ∂Ê/∂T̄ (at fixed Ē: the dynamic energy takes up
the difference), summed over the type's instances by the composition itself; likewise for
the predicted time. The derivatives are taken by central differences through the very
composition that made the prediction, so they follow whatever it does: a makespan an
element does not set gives it no time weight, a device idling at another's end gives it
that device's idle draw (docs/uncertainty.md, "The prediction's own error").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from eopt.calculus.operators import energy_time_cov
from eopt.model.signature import Signature

__all__ = ["PredictionError", "prediction_error", "signature_key"]

# Relative step of the central differences: far above rounding (1e-16) and far below
# any curvature of E[max] on the scale of a time's spread.
_REL_STEP = 1e-6

Compose = Callable[[Callable[[Signature], Signature]], tuple[float, float]]
"""Composes the prediction with every signature passed through the given map;
returns its (energy J, time s)."""


def signature_key(sig: Signature) -> Hashable:
    """What identifies one characterized element type: its name and its context."""
    return sig.name, repr(sig.context)


@dataclass(frozen=True)
class PredictionError:
    """Standard errors of a prediction's mean energy and mean time.

    Attributes:
        energy_j: SE of the predicted energy, J.
        time_s: SE of the predicted time, s.
        cov_j_s: Their covariance, J·s.
        gradients: Per element type, (g_E, g_T in J/s, h_E in s/J, h_T) — the
            sensitivities of energy and time to the type's mean energy and mean time.
    """

    energy_j: float
    time_s: float
    cov_j_s: float
    gradients: Mapping[Hashable, tuple[float, float, float, float]]


def _shifted(sig: Signature, d_energy: float, d_time: float) -> Signature:
    """``sig`` with its mean energy and mean time moved (d absorbs the difference)."""
    time = sig.time + d_time
    dynamic = sig.dynamic_energy + d_energy - sig.static_power * d_time
    return sig.with_(time=time, dynamic_energy=max(dynamic, 0.0))


def prediction_error(
    compose: Compose,
    elements: Mapping[Hashable, Signature],
    runs_of: Callable[[Signature], int],
) -> PredictionError:
    """SE of a composed prediction from its element types' characterization.

    Args:
        compose: Composes the prediction through a map applied to every signature.
        elements: Element type → its characterized signature (σ_E², σ_T², Cov(E, T)).
        runs_of: Runs behind a signature's means (≥ 1).

    Returns:
        The standard errors; zero for a prediction from exact values.

    Example:
        >>> a = Signature("a", 50.0, 1.0, 10.0, var_time=0.01, var_energy=4.0)
        >>> def chain(f):
        ...     s = f(a)
        ...     return 3 * s.energy, 3 * s.time  # three instances of a
        >>> err = prediction_error(chain, {signature_key(a): a}, lambda s: 25)
        >>> round(err.energy_j, 6), round(err.time_s, 6)  # 3·2/5, 3·0.1/5
        (1.2, 0.06)
    """
    var_e = var_t = cov = 0.0
    gradients: dict[Hashable, tuple[float, float, float, float]] = {}
    for key, sig in elements.items():
        if sig.var_energy <= 0.0 and sig.var_time <= 0.0:
            continue
        n = max(int(runs_of(sig)), 1)
        h_e = _REL_STEP * max(abs(sig.energy), 1e-300)
        h_t = _REL_STEP * max(sig.time, 1e-300)
        # The time step may not push d below 0 (it would be clipped, biasing g_T).
        h_t = min(h_t, 0.5 * sig.dynamic_energy / sig.static_power) if sig.static_power else h_t
        g = _central(compose, key, sig, h_e, 0.0)
        k = _central(compose, key, sig, 0.0, h_t) if h_t > 0 else (0.0, 0.0)
        g_e, h_te = g[0] / h_e, g[1] / h_e
        g_t, h_tt = (k[0] / h_t, k[1] / h_t) if h_t > 0 else (0.0, 0.0)
        c = energy_time_cov(sig)
        var_e += (g_e**2 * sig.var_energy + 2 * g_e * g_t * c + g_t**2 * sig.var_time) / n
        var_t += (h_te**2 * sig.var_energy + 2 * h_te * h_tt * c + h_tt**2 * sig.var_time) / n
        cov += (
            g_e * h_te * sig.var_energy + (g_e * h_tt + g_t * h_te) * c + g_t * h_tt * sig.var_time
        ) / n
        gradients[key] = (g_e, g_t, h_te, h_tt)
    return PredictionError(math.sqrt(max(var_e, 0.0)), math.sqrt(max(var_t, 0.0)), cov, gradients)


def _central(
    compose: Compose, key: Hashable, sig: Signature, d_energy: float, d_time: float
) -> tuple[float, float]:
    """(f(x + h) − f(x − h))/2 of (energy, time) for one type's mean shifted by h."""

    def moved(sign: float) -> tuple[float, float]:
        def swap(s: Signature) -> Signature:
            return _shifted(s, sign * d_energy, sign * d_time) if signature_key(s) == key else s

        return compose(swap)

    up, down = moved(1.0), moved(-1.0)
    return (up[0] - down[0]) / 2.0, (up[1] - down[1]) / 2.0
