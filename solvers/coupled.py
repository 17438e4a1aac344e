"""The relax method for coupled problems: groups sharing a setting, transition costs.

The bound is the LP relaxation of the exact model (`solvers.milp.ExactModel` with
continuous variables). Plans come from fixing the coupling — one setting per group, and
per costed device either one setting for all its tasks (no changes, nothing to pay) or
the settings left free with their costs checked afterwards — and solving the remaining
uncoupled problem with the hull LP and diving (`solvers.relax`). A local search with
exact evaluation (single tasks, whole groups) polishes the best plan.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from solvers.budget import Budget
from solvers.indexed import IndexedProblem, meets
from solvers.lp import HullLP
from solvers.milp import ExactModel, candidate_modes
from solvers.problem import Mode, Problem, Task
from solvers.relax import relax_assign
from solvers.stopping import Watch

#: Solver description of the coupled relax stage.
COUPLED_SOLVER = "HiGHS LP relaxation + fixed settings + local search"


def _restricted(
    ip: IndexedProblem, allowed: Sequence[Sequence[int]], keep_transitions: bool
) -> tuple[IndexedProblem, list[list[int]]]:
    """An uncoupled problem whose task i may use only the modes `allowed[i]`.

    Built from `ip`'s arrays, so in `ip`'s units (see `IndexedProblem.rescaled`).
    """
    p = ip.problem
    tasks = tuple(
        Task(
            t.name,
            t.device,
            tuple(
                Mode(float(ip.durations[i][k]), float(ip.energies[i][k]), setting=ip.settings[i][k])
                for k in allowed[i]
            ),
        )
        for i, t in enumerate(ip.tasks)
    )
    sub = Problem(
        tasks=tasks,
        edges=p.edges,
        idle_power={dev: float(w) for dev, w in zip(ip.devices, ip.idle_w, strict=True)},
        groups=(),
        transition=ip.transition_costs() if keep_transitions else {},
        hold=p.hold,
    )
    return IndexedProblem(sub), [list(a) for a in allowed]


def _solve_fixed_settings(
    ip: IndexedProblem,
    task_setting: Sequence[Hashable | None],
    deadline: float | None,
    budget: Budget,
) -> list[int] | None:
    """Best plan (by relax) when each task is limited to one setting (None: any)."""
    allowed = []
    for i in range(ip.n):
        s = task_setting[i]
        ks = [k for k in range(len(ip.durations[i])) if s is None or ip.settings[i][k] == s]
        if not ks:
            return None
        allowed.append(ks)
    sub, back = _restricted(ip, allowed, keep_transitions=False)
    res = relax_assign(HullLP(sub), deadline, budget)
    if res is None:
        return None
    return [back[i][m] for i, m in enumerate(res.modes)]


def _group_move(
    ip: IndexedProblem, modes: list[int], members: Sequence[int], s: Hashable
) -> list[int]:
    """Move tasks to setting s: each takes its cheapest mode at s no slower than its
    current one, or its fastest mode at s (unchanged when it has no mode at s)."""
    out = list(modes)
    for i in members:
        d_now = ip.durations[i][modes[i]]
        ks = [k for k in range(len(ip.durations[i])) if ip.settings[i][k] == s]
        if not ks:
            continue
        fit = [k for k in ks if ip.durations[i][k] <= d_now]
        if fit:
            out[i] = min(fit, key=lambda k: (ip.costs[i][k], ip.durations[i][k]))
        else:
            out[i] = min(ks, key=lambda k: (ip.durations[i][k], ip.costs[i][k]))
    return out


def groups_consistent(ip: IndexedProblem, modes: Sequence[int]) -> bool:
    """True when every group's members run at one setting."""
    return all(len({ip.settings[i][modes[i]] for i in members}) == 1 for members in ip.groups)


def local_search(
    ip: IndexedProblem,
    modes: Sequence[int],
    deadline: float | None,
    budget: Budget,
    watch: Watch | None = None,
) -> list[int]:
    """First-improvement search over single-task and whole-group moves, exact evaluation.

    `watch` (optional) receives every cheaper plan and can end the search early."""
    best = list(modes)
    best_e = ip.evaluate(best, deadline).energy
    cands = candidate_modes(ip)
    by_device: dict[int, list[int]] = {}
    for a, b in ip.chain_pairs:
        for i in (a, b):
            lst = by_device.setdefault(int(ip.task_device[i]), [])
            if i not in lst:
                lst.append(i)
    chains = list(by_device.values())
    improved = True
    while improved and not budget.expired():
        improved = False
        moves: list[list[int]] = []
        for i in range(ip.n):
            if ip.group_of[i] >= 0:
                continue
            for k in cands[i]:
                if k != best[i]:
                    m = list(best)
                    m[i] = k
                    moves.append(m)
        for g in range(len(ip.groups)):
            for s in ip.group_settings[g]:
                moves.append(_group_move(ip, best, ip.groups[g], s))
        # A costed device as a whole to one setting (no changes left to pay for).
        for members in chains:
            for s in dict.fromkeys(x for i in members for x in ip.settings[i]):
                moves.append(_group_move(ip, best, members, s))
        for m in moves:
            if budget.expired():
                break
            if watch is not None and watch.should_stop():
                return best
            if not groups_consistent(ip, m):
                continue
            ev = ip.evaluate(m, deadline)
            if meets(ev.makespan, deadline) and ev.energy < best_e - 1e-12 * max(1.0, abs(best_e)):
                best, best_e = m, ev.energy
                improved = True
                if watch is not None:
                    watch.offer(best_e, best)
    return best


def relax_coupled(
    ip: IndexedProblem,
    deadline: float | None,
    fallback: Sequence[int],
    budget: Budget,
    *,
    watch: Watch | None = None,
) -> tuple[list[int], float]:
    """Relax method for coupled problems.

    Args:
        ip: the problem (with groups and/or transition costs).
        deadline: s, or None.
        fallback: a feasible assignment (e.g. the fastest plan).
        budget: the time allowed.
        watch: receives the bound and every cheaper plan; can end the search early.

    Returns:
        (modes, bound): the best feasible plan found and the LP relaxation bound, J.
    """
    relaxation = ExactModel(ip, deadline, relax=True)
    status = relaxation.model.run(budget.remaining(), budget=budget)
    if status != "optimal":
        bound = float("nan")
        lp_setting: list[Hashable | None] = [ip.settings[i][fallback[i]] for i in range(ip.n)]
    else:
        bound = relaxation.model.objective()
        # Settings suggested by the relaxation: per group its heaviest y, per task its
        # heaviest setting.
        lp_setting = []
        for i, xi in enumerate(relaxation.task_weights()):
            weight: dict[Hashable | None, float] = {}
            for k, v in xi.items():
                weight[ip.settings[i][k]] = weight.get(ip.settings[i][k], 0.0) + v
            lp_setting.append(max(weight, key=lambda s: weight[s]))
        for g, yg in enumerate(relaxation.group_weights()):
            s = max(yg, key=lambda key: yg[key])
            for i in ip.groups[g]:
                lp_setting[i] = s
    fast_setting = [ip.settings[i][fallback[i]] for i in range(ip.n)]
    candidates: list[list[int]] = [list(fallback)]
    on_chain = np.zeros(ip.n, dtype=bool)
    for a, b in ip.chain_pairs:
        on_chain[[a, b]] = True
    each = max(0.1, budget.remaining() / 8)
    for base in (lp_setting, fast_setting):
        # Variant 1: groups fixed, chain tasks free (their changes priced afterwards).
        free_chain = [None if on_chain[i] and ip.group_of[i] < 0 else base[i] for i in range(ip.n)]
        grouped_only = [free_chain[i] if ip.group_of[i] >= 0 else None for i in range(ip.n)]
        for setting in (grouped_only, _one_setting_per_device(ip, base, on_chain)):
            m = _solve_fixed_settings(ip, setting, deadline, budget.child(each))
            if m is not None:
                candidates.append(m)
    feasible = []
    for m in candidates:
        if not groups_consistent(ip, m):
            continue
        ev = ip.evaluate(m, deadline)
        if meets(ev.makespan, deadline):
            feasible.append((ev.energy, m))
    feasible.sort(key=lambda em: em[0])
    best = feasible[0][1] if feasible else list(fallback)
    if watch is not None:
        watch.offer_bound(bound)
        if feasible:
            watch.offer(feasible[0][0], best)
        watch.arm()  # the local search only improves a finished plan
    best = local_search(ip, best, deadline, budget, watch=watch)
    return best, bound


def _one_setting_per_device(
    ip: IndexedProblem, base: Sequence[Hashable | None], on_chain: np.ndarray
) -> list[Hashable | None]:
    """Give every task of a costed device (and its groups) that device's majority setting."""
    out = [base[i] if ip.group_of[i] >= 0 else None for i in range(ip.n)]
    by_dev: dict[int, list[int]] = {}
    for i in np.flatnonzero(on_chain):
        by_dev.setdefault(int(ip.task_device[i]), []).append(int(i))
    for members in by_dev.values():
        votes: dict[Hashable | None, int] = {}
        for i in members:
            votes[base[i]] = votes.get(base[i], 0) + 1
        for s in sorted(votes, key=lambda s: -votes[s]):
            if all(s in ip.settings[i] for i in members):
                for i in members:
                    out[i] = s
                break
    return out
