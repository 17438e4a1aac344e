"""Units for the models: a problem in powers of two of its own makespan and energy.

HiGHS's tolerances are absolute (1e-7 on a constraint, 1e-6 on the MIP gap). Problems
whose all-fastest makespan or energy lies far from 1 s and 1 J are modelled in units
about their own size, so that the tolerances mean the same for elements of
microseconds and of hours; powers of two keep plans and ties exact.
"""

from __future__ import annotations

import math

import numpy as np

from solvers.indexed import IndexedProblem

#: Makespans (s) and energies (J) at which HiGHS's absolute tolerances are already fine
#: relative to the problem: plans of 0.125 s to 2.3 h and 1 J to 1 GJ are modelled in
#: seconds and joules as given, so that the usual problems solve exactly as they
#: always did.
WELL_SCALED_S = (2.0**-3, 2.0**13)
WELL_SCALED_J = (2.0**0, 2.0**30)


def _unit(x: float, well: tuple[float, float]) -> float:
    """1 when |x| lies in `well`, else the power of two nearest to |x| (1 for 0 or nan)."""
    x = abs(x)
    if not (math.isfinite(x) and x > 0) or well[0] <= x <= well[1]:
        return 1.0
    return 2.0 ** round(math.log2(x))


def all_fastest(ip: IndexedProblem) -> list[int]:
    """Every task's fastest mode (ties: the cheapest)."""
    return [int(np.lexsort((ip.costs[i], ip.durations[i]))[0]) for i in range(ip.n)]


def scaled(ip: IndexedProblem) -> IndexedProblem:
    """`ip` in units about the all-fastest plan's makespan and energy (powers of two)
    where those lie outside `WELL_SCALED_S` / `WELL_SCALED_J`, so that every model built
    from it has numbers HiGHS's tolerances suit (`IndexedProblem.rescaled`).

    Built once and kept on `ip`.
    """
    cached = ip.__dict__.get("_scaled")
    if cached is None:
        ev = ip.evaluate(all_fastest(ip))
        longest = max((float(np.max(d)) for d in ip.durations if len(d)), default=0.0)
        time_unit = _unit(ev.makespan or longest, WELL_SCALED_S)
        reference = max(abs(ev.energy), ev.task_energy, ip.idle_total_w * ev.makespan)
        energy_unit = _unit(reference, WELL_SCALED_J)
        cached = ip if time_unit == energy_unit == 1.0 else ip.rescaled(time_unit, energy_unit)
        ip._scaled = cached  # type: ignore[attr-defined]
    return cached  # type: ignore[no-any-return]
