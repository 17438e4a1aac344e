"""Per-task mode pruning: Pareto-minimal modes and their lower convex hull.

A mode is dominated when another mode of the same task is no slower and has no larger
effective cost c = E − s̄·d: the faster, cheaper mode keeps every schedule feasible and
never raises the makespan, so the dominated one is never needed (unless the two differ
in a device-wide setting that a group or a transition cost cares about).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from solvers.indexed import IndexedProblem


def pareto_modes(durations: np.ndarray, costs: np.ndarray) -> list[int]:
    """Indices of the non-dominated modes, by increasing duration (strictly falling cost).

    Ties (same duration and cost) keep the lowest index.
    """
    order = sorted(range(len(durations)), key=lambda k: (durations[k], costs[k], k))
    kept: list[int] = []
    best = np.inf
    for k in order:
        if costs[k] < best and (not kept or durations[k] > durations[kept[-1]]):
            kept.append(k)
            best = costs[k]
    return kept


def pareto_modes_by_setting(
    durations: np.ndarray, costs: np.ndarray, settings: Sequence[Hashable | None]
) -> list[int]:
    """Non-dominated modes within each setting (for grouped or transition-costed tasks)."""
    kept: list[int] = []
    for s in dict.fromkeys(settings):
        idx = [k for k, sk in enumerate(settings) if sk == s]
        sub = pareto_modes(durations[idx], costs[idx])
        kept.extend(idx[j] for j in sub)
    return sorted(kept, key=lambda k: (durations[k], costs[k], k))


def lower_hull(durations: np.ndarray, costs: np.ndarray, pareto: Sequence[int]) -> list[int]:
    """Vertices of the lower convex hull of the Pareto modes, by increasing duration.

    Assumptions:
        `pareto` comes from `pareto_modes` (increasing duration, falling cost), so the
        hull is a convex, decreasing, piecewise-linear cost-of-duration curve.
    """
    hull: list[int] = []
    for k in pareto:
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # Drop b when it lies on or above the segment a–k (cross product >= 0).
            cross = (durations[b] - durations[a]) * (costs[k] - costs[a]) - (
                costs[b] - costs[a]
            ) * (durations[k] - durations[a])
            if cross <= 0:
                hull.pop()
            else:
                break
        hull.append(k)
    return hull


def task_pareto(ip: IndexedProblem) -> list[list[int]]:
    """`pareto_modes` of every task, cached on `ip` (the lists are shared: read only).

    Tasks with the same modes (every microbatch of a pipeline stage) share one
    computation, and one list: on 64 × 512 × 30 there are 128 different mode tables
    among 65 536 tasks, and computing each task's took 3.5 s, three times over (the
    LP's hulls, the local searches' tables, the MILP's columns).
    """
    cached = ip.__dict__.get("_task_pareto")
    if cached is None:
        seen: dict[tuple[bytes, bytes], list[int]] = {}
        cached = []
        for d, c in zip(ip.durations, ip.costs, strict=True):
            key = (d.tobytes(), c.tobytes())
            if key not in seen:
                seen[key] = pareto_modes(d, c)
            cached.append(seen[key])
        ip._task_pareto = cached  # type: ignore[attr-defined]
    return cached  # type: ignore[no-any-return]


def task_hulls(ip: IndexedProblem) -> list[list[int]]:
    """`lower_hull` of every task's Pareto modes, cached on `ip` and shared like
    `task_pareto` (one hull per shared Pareto list)."""
    cached = ip.__dict__.get("_task_hulls")
    if cached is None:
        by_list: dict[int, list[int]] = {}
        cached = []
        for i, pareto in enumerate(task_pareto(ip)):
            if id(pareto) not in by_list:
                by_list[id(pareto)] = lower_hull(ip.durations[i], ip.costs[i], pareto)
            cached.append(by_list[id(pareto)])
        ip._task_hulls = cached  # type: ignore[attr-defined]
    return cached  # type: ignore[no-any-return]
