"""Integer-indexed form of a validated `Problem`, shared by every algorithm.

Tasks become integers in a fixed topological order; modes become numpy arrays of
duration, energy and effective cost. The effective cost of a mode is its energy minus
the idle energy its device would draw over the same time, c = E − s̄·d, so that

    E(assignment) = Σ_i c_i(m_i) + Σ_(changes) (ε − s̄·τ) + S̄ · H,   S̄ = Σ_dev s̄_dev,

which is the form the LP and the MILP minimize.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from solvers.deadline import DEADLINE_RTOL, meets
from solvers.problem import Problem, device_chain

__all__ = ["DEADLINE_RTOL", "Evaluation", "IndexedProblem", "indexed", "meets"]


@dataclass
class Evaluation:
    """Exact time and energy of one assignment (see `IndexedProblem.evaluate`)."""

    starts: np.ndarray  # s, earliest start per task
    durations: np.ndarray  # s
    makespan: float  # s
    horizon: float  # s, H used in the accounting
    energy: float  # J
    task_energy: float  # J, Σ E_i
    idle_energy: float  # J, Σ_dev s̄ (H − busy)
    transition_energy: float  # J
    transitions: int
    busy: np.ndarray  # s per device


def indexed(problem: Problem) -> IndexedProblem:
    """The `IndexedProblem` of `problem`, built once and kept on the problem object.

    Validation and indexing take seconds on thousands of tasks; `fastest_makespan`,
    `solve` and `evaluate` on one problem share the one built here, so that a time limit
    is not spent building the same arrays three times.
    """
    cached = problem.__dict__.get("_indexed")
    if cached is None:
        cached = IndexedProblem(problem)
        # A derived value cached on a frozen dataclass (as functools.cached_property does).
        object.__setattr__(problem, "_indexed", cached)
    return cached  # type: ignore[no-any-return]


class IndexedProblem:
    """A validated problem in arrays; build with `IndexedProblem(problem)`.

    Assumptions:
        `problem.validate()` has passed (the constructor calls it).
    """

    def __init__(self, problem: Problem) -> None:
        problem.validate()
        self.problem = problem
        g = problem.graph()
        order = list(nx.lexicographical_topological_sort(g))
        self.names: list[str] = order
        self.index: dict[str, int] = {name: i for i, name in enumerate(order)}
        self.n = len(order)
        by_name = {t.name: t for t in problem.tasks}
        self.tasks = [by_name[name] for name in order]
        self.devices: list[str] = list(problem.idle_power)
        dev_index = {d: k for k, d in enumerate(self.devices)}
        self.idle_w = np.array([float(problem.idle_power[d]) for d in self.devices])
        self.idle_total_w = float(self.idle_w.sum())
        self.task_device = np.array([dev_index[t.device] for t in self.tasks], dtype=np.int64)
        self.task_idle_w = self.idle_w[self.task_device]
        self.durations = [np.array([m.duration for m in t.modes], float) for t in self.tasks]
        self.energies = [np.array([m.energy for m in t.modes], float) for t in self.tasks]
        self.costs = [
            e - s * d
            for e, d, s in zip(self.energies, self.durations, self.task_idle_w, strict=False)
        ]
        self.settings: list[list[Hashable | None]] = [
            [m.setting for m in t.modes] for t in self.tasks
        ]
        self.preds: list[list[int]] = [[] for _ in range(self.n)]
        self.succs: list[list[int]] = [[] for _ in range(self.n)]
        for a, b in set(problem.edges):
            ia, ib = self.index[a], self.index[b]
            self.preds[ib].append(ia)
            self.succs[ia].append(ib)
        for lst in (*self.preds, *self.succs):
            lst.sort()
        self.sinks = [i for i in range(self.n) if not self.succs[i]]
        self.edge_u = np.array([u for v in range(self.n) for u in self.preds[v]], dtype=np.int64)
        self.edge_v = np.array([v for v in range(self.n) for _ in self.preds[v]], dtype=np.int64)
        # Transition chains: the previous task on the same device, for costed devices.
        self.chain_prev = [-1] * self.n
        self.trans_time = np.zeros(self.n)
        self.trans_energy = np.zeros(self.n)
        self.chain_pairs: list[tuple[int, int]] = []
        for dev, (tau, eps) in problem.transition.items():
            if float(tau) == 0 and float(eps) == 0:
                continue
            chain = [self.index[v] for v in device_chain(problem, g, dev)]
            for a, b in itertools.pairwise(chain):
                self.chain_prev[b] = a
                self.trans_time[b] = float(tau)
                self.trans_energy[b] = float(eps)
                self.chain_pairs.append((a, b))
        self.group_of = np.full(self.n, -1, dtype=np.int64)
        self.groups: list[list[int]] = []
        self.group_settings: list[list[Hashable]] = []
        for gi, group in enumerate(problem.groups):
            members = [self.index[name] for name in group]
            self.groups.append(members)
            common = set(self.settings[members[0]])
            for i in members[1:]:
                common &= set(self.settings[i])
            # Keep a deterministic order: first appearance in the first task's modes.
            self.group_settings.append(
                [s for s in dict.fromkeys(self.settings[members[0]]) if s in common]
            )
            self.group_of[members] = gi
        self.coupled = bool(self.groups or self.chain_pairs)
        #: s and J that one unit of this object's times and energies stands for (1 and 1
        #: unless made by `rescaled`).
        self.time_unit = 1.0
        self.energy_unit = 1.0

    def rescaled(self, time_unit: float, energy_unit: float) -> IndexedProblem:
        """The same problem with times counted in `time_unit` s and energies in
        `energy_unit` J (idle powers in energy_unit / time_unit W).

        Solvers work on models whose numbers are about 1: HiGHS's tolerances are absolute
        (1e-7 on a constraint, 1e-6 on the MIP gap), so a plan of tens of µs solved in
        seconds and joules misses its deadline "within tolerance" and stops at the
        all-fastest plan "within the gap". Powers of two keep the scaling exact in
        floating point, so plans compare and tie exactly as in the original units.

        The copy shares the structure (order, edges, groups) and has its own caches. Its
        `problem` and `tasks` are the original objects (names, devices, labels, hold):
        every number an algorithm uses comes from the scaled arrays (`durations`,
        `energies`, `costs`, `idle_w`, `trans_time`, `trans_energy`), and
        `transition_costs` gives the per-device costs in the scaled units.

        Args:
            time_unit: s per unit of time; a power of two.
            energy_unit: J per unit of energy; a power of two.
        """
        out = object.__new__(IndexedProblem)
        # Attributes starting with "_" are caches of derived arrays (Pareto tables, the
        # repeated structure): the copy computes its own.
        out.__dict__.update({k: v for k, v in self.__dict__.items() if not k.startswith("_")})
        ts, es = float(time_unit), float(energy_unit)
        ps = es / ts  # W per unit of power
        out.time_unit, out.energy_unit = self.time_unit * ts, self.energy_unit * es
        out.durations = [d / ts for d in self.durations]
        out.energies = [e / es for e in self.energies]
        out.idle_w = self.idle_w / ps
        out.idle_total_w = float(out.idle_w.sum())
        out.task_idle_w = out.idle_w[self.task_device]
        out.costs = [
            e - s * d for e, d, s in zip(out.energies, out.durations, out.task_idle_w, strict=False)
        ]
        out.trans_time = self.trans_time / ts
        out.trans_energy = self.trans_energy / es
        return out

    def transition_costs(self) -> dict[str, tuple[float, float]]:
        """Per device, (time, energy) of one setting change in this object's units."""
        return {
            dev: (float(t) / self.time_unit, float(e) / self.energy_unit)
            for dev, (t, e) in self.problem.transition.items()
        }

    # ----------------------------------------------------------------- evaluation
    def mode_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Durations, energies and effective costs of every mode in (n, K) arrays (rows
        padded with zeros), built once: evaluating a plan is then one lookup per array.
        """
        cached = self.__dict__.get("_mode_tables")
        if cached is None:
            k = max((len(d) for d in self.durations), default=1)
            cached = tuple(np.zeros((self.n, k)) for _ in range(3))
            for i in range(self.n):
                m = len(self.durations[i])
                cached[0][i, :m] = self.durations[i]
                cached[1][i, :m] = self.energies[i]
                cached[2][i, :m] = self.costs[i]
            self._mode_tables = cached
        return cached  # type: ignore[no-any-return]

    def _pick(self, table: np.ndarray, modes: Sequence[int]) -> np.ndarray:
        return table[np.arange(self.n), np.asarray(modes, dtype=np.int64)]

    def durations_of(self, modes: Sequence[int]) -> np.ndarray:
        """Durations (s) of the tasks under an assignment of mode indices."""
        return self._pick(self.mode_tables()[0], modes)

    def costs_of(self, modes: Sequence[int]) -> np.ndarray:
        """Effective costs (J) of the tasks under an assignment of mode indices."""
        return self._pick(self.mode_tables()[2], modes)

    def changes(self, modes: Sequence[int]) -> np.ndarray:
        """Per task: 1 when its device's setting changes just before it, else 0."""
        z = np.zeros(self.n)
        for a, b in self.chain_pairs:
            if self.settings[a][modes[a]] != self.settings[b][modes[b]]:
                z[b] = 1.0
        return z

    def earliest_starts(self, dur: np.ndarray, gap: np.ndarray | None = None) -> np.ndarray:
        """Earliest start times (s) with durations `dur` and extra chain gaps `gap` (s).

        `gap[b]` is the transition time paid between `chain_prev[b]` and `b`.
        """
        start = [0.0] * self.n
        end = [0.0] * self.n
        d = dur.tolist()
        preds = self.preds
        chain_prev = self.chain_prev
        g = gap.tolist() if gap is not None else None
        for v in range(self.n):
            s = 0.0
            for u in preds[v]:
                if end[u] > s:
                    s = end[u]
            if g is not None and chain_prev[v] >= 0 and g[v] > 0:
                t = end[chain_prev[v]] + g[v]
                if t > s:
                    s = t
            start[v] = s
            end[v] = s + d[v]
        return np.array(start)

    def tails(self, dur: np.ndarray, gap: np.ndarray | None = None) -> np.ndarray:
        """Longest time (s) from each task's end to the end of the schedule."""
        tail = [0.0] * self.n
        d = dur.tolist()
        succs = self.succs
        g = gap.tolist() if gap is not None else None
        chain_next = [-1] * self.n
        if g is not None:
            for a, b in self.chain_pairs:
                chain_next[a] = b
        for v in range(self.n - 1, -1, -1):
            t = 0.0
            for w in succs[v]:
                x = d[w] + tail[w]
                if x > t:
                    t = x
            if g is not None and chain_next[v] >= 0:
                w = chain_next[v]
                x = g[w] + d[w] + tail[w]
                if x > t:
                    t = x
            tail[v] = t
        return np.array(tail)

    def evaluate(self, modes: Sequence[int], deadline: float | None = None) -> Evaluation:
        """Exact makespan and energy of an assignment, with real durations.

        Args:
            modes: mode index per task, in this object's task order.
            deadline: s; sets the horizon when the problem holds devices to the deadline.
        """
        dur = self.durations_of(modes)
        z = self.changes(modes) if self.chain_pairs else np.zeros(self.n)
        gap = z * self.trans_time
        starts = self.earliest_starts(dur, gap if self.chain_pairs else None)
        makespan = float(np.max(starts + dur)) if self.n else 0.0
        horizon = self.horizon(makespan, deadline)
        task_energy, idle_energy, busy = self._energies(modes, dur + gap, horizon)
        trans_energy = float(np.dot(z, self.trans_energy))
        return Evaluation(
            starts=starts,
            durations=dur,
            makespan=makespan,
            horizon=horizon,
            energy=task_energy + trans_energy + idle_energy,
            task_energy=task_energy,
            idle_energy=idle_energy,
            transition_energy=trans_energy,
            transitions=int(z.sum()),
            busy=busy,
        )

    def horizon(self, makespan: float, deadline: float | None) -> float:
        """s the devices are held for: the makespan, or the deadline when the problem
        holds them to it."""
        if self.problem.hold == "deadline" and deadline is not None:
            return max(float(deadline), makespan)
        return makespan

    def energy_at(self, modes: Sequence[int], makespan: float, deadline: float | None) -> float:
        """`evaluate(modes, deadline).energy` of an uncoupled problem whose makespan the
        caller already knows (J), by the same operations: no schedule pass."""
        horizon = self.horizon(makespan, deadline)
        task_energy, idle_energy, _ = self._energies(modes, self.durations_of(modes), horizon)
        return task_energy + idle_energy

    def _energies(
        self, modes: Sequence[int], held: np.ndarray, horizon: float
    ) -> tuple[float, float, np.ndarray]:
        """(Σ E_i J, idle energy J, busy s per device) of `modes`, each task holding its
        device for `held` s (its duration and any transition before it)."""
        busy = np.zeros(len(self.devices))
        np.add.at(busy, self.task_device, held)
        task_energy = float(np.sum(self._pick(self.mode_tables()[1], modes)))
        idle_energy = float(np.dot(self.idle_w, horizon - busy))
        return task_energy, idle_energy, busy
