"""Shared helpers for the solver tests: random small problems and brute force.

The brute force here is independent of `solvers`: it walks the DAG with networkx and
applies the energy accounting E = Σ E_i + Σ ε·changes + Σ_dev s̄·(H − busy) directly.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from types import SimpleNamespace

import networkx as nx
import pytest

from solvers import Mode, Problem, Task


def true_evaluate(
    problem: Problem, assign: dict[str, int], deadline: float | None = None
) -> tuple[float, float]:
    """(makespan s, energy J) of an assignment, computed from first principles."""
    g = nx.DiGraph()
    g.add_nodes_from(t.name for t in problem.tasks)
    g.add_edges_from(problem.edges)
    task = {t.name: t for t in problem.tasks}
    mode = {n: task[n].modes[assign[n]] for n in task}
    prev_on_device: dict[str, str] = {}
    for dev in problem.transition:
        on = [n for n in task if task[n].device == dev]
        # Total order by precedence: sort by number of ancestors on the device.
        on.sort(key=lambda n: len(nx.ancestors(g, n) & set(on)))
        for a, b in itertools.pairwise(on):
            prev_on_device[b] = a
    end: dict[str, float] = {}
    changes: dict[str, int] = {}
    for n in nx.topological_sort(g):
        start = max((end[p] for p in g.predecessors(n)), default=0.0)
        if n in prev_on_device:
            a = prev_on_device[n]
            tau = problem.transition[task[n].device][0]
            if mode[a].setting != mode[n].setting:
                changes[n] = 1
                start = max(start, end[a] + tau)
        end[n] = start + mode[n].duration
    makespan = max(end.values())
    horizon = makespan
    if problem.hold == "deadline" and deadline is not None:
        horizon = max(deadline, makespan)
    energy = sum(m.energy for m in mode.values())
    busy = dict.fromkeys(problem.idle_power, 0.0)
    for n, m in mode.items():
        busy[task[n].device] += m.duration
    for n in changes:
        tau, eps = problem.transition[task[n].device]
        energy += eps
        busy[task[n].device] += tau
    energy += sum(problem.idle_power[d] * (horizon - busy[d]) for d in problem.idle_power)
    return makespan, energy


def all_assignments(problem: Problem) -> list[dict[str, int]]:
    """Every assignment of modes (respecting groups: one common setting per group)."""
    names = [t.name for t in problem.tasks]
    out = []
    for combo in itertools.product(*(range(len(t.modes)) for t in problem.tasks)):
        a = dict(zip(names, combo, strict=True))
        ok = True
        task = {t.name: t for t in problem.tasks}
        for group in problem.groups:
            if len({task[n].modes[a[n]].setting for n in group}) != 1:
                ok = False
                break
        if ok:
            out.append(a)
    return out


def brute_force(problem: Problem, deadline: float | None) -> tuple[float, float, float]:
    """(optimal energy J, fastest makespan s, makespan of the optimum s) by enumeration."""
    best = (float("inf"), float("inf"))
    fastest = float("inf")
    for a in all_assignments(problem):
        mk, e = true_evaluate(problem, a, deadline)
        fastest = min(fastest, mk)
        if deadline is None or mk <= deadline * (1 + 1e-9):
            best = min(best, (e, mk))
    return best[0], fastest, best[1]


def random_problem(
    seed: int,
    *,
    max_tasks: int = 7,
    max_modes: int = 3,
    max_assignments: int = 3000,
    settings: bool = False,
    hold: str = "makespan",
) -> Problem:
    """A random DAG problem small enough to enumerate."""
    rng = random.Random(seed)
    while True:
        n = rng.randint(1, max_tasks)
        counts = [rng.randint(1, max_modes) for _ in range(n)]
        total = 1
        for c in counts:
            total *= c
        if total <= max_assignments:
            break
    devices = [f"d{k}" for k in range(rng.randint(1, 3))]
    idle = {d: round(rng.uniform(0.0, 50.0), 3) for d in devices}
    tasks = []
    for i in range(n):
        modes = []
        for k in range(counts[i]):
            dur = round(rng.uniform(0.1, 3.0), 4)
            # Mostly faster-costs-more, with some noise so that dominated modes occur.
            energy = round(rng.uniform(20, 200) / (0.5 + dur) + rng.uniform(0, 40), 4)
            setting = rng.choice(["lo", "hi"]) if settings else None
            modes.append(Mode(dur, energy, label=(i, k), setting=setting))
        tasks.append(Task(f"t{i}", rng.choice(devices), tuple(modes)))
    edges = [(f"t{i}", f"t{j}") for i in range(n) for j in range(i + 1, n) if rng.random() < 0.35]
    return Problem(tuple(tasks), tuple(edges), idle, hold=hold)


def deadline_between(problem: Problem, seed: int) -> float:
    """A deadline between the fastest and the slowest all-same-index makespans."""
    rng = random.Random(seed + 10_000)
    fast = {
        t.name: min(range(len(t.modes)), key=lambda k: t.modes[k].duration) for t in problem.tasks
    }
    slow = {
        t.name: max(range(len(t.modes)), key=lambda k: t.modes[k].duration) for t in problem.tasks
    }
    lo = true_evaluate(problem, fast)[0]
    hi = true_evaluate(problem, slow)[0]
    return lo + rng.random() * (hi - lo)


def pipeline_problem(stages: int = 3, microbatches: int = 6) -> tuple[Problem, float]:
    """A small 1F1B-like pipeline with 5 convex modes per task, and a tight deadline."""
    tasks, edges = [], []
    for s in range(stages):
        order = []
        for m in range(microbatches):
            for kind, base in (("f", 1.0 + 0.1 * s), ("b", 2.0 + 0.15 * s)):
                modes = tuple(
                    Mode(base * (1 + 0.08 * k), base * 300 * (1 - 0.06 * k + 0.004 * k * k))
                    for k in range(5)
                )
                tasks.append(Task(f"s{s}.{kind}{m}", f"gpu{s}", modes))
            order += [f"s{s}.f{m}", f"s{s}.b{m}"]
        edges += list(itertools.pairwise(order))
        for m in range(microbatches):
            if s + 1 < stages:
                edges.append((f"s{s}.f{m}", f"s{s + 1}.f{m}"))
                edges.append((f"s{s + 1}.b{m}", f"s{s}.b{m}"))
    for m in range(microbatches):
        edges.append((f"s{stages - 1}.f{m}", f"s{stages - 1}.b{m}"))
    problem = Problem(tuple(tasks), tuple(set(edges)), {f"gpu{s}": 60.0 for s in range(stages)})
    fast = {t.name: 0 for t in problem.tasks}  # mode 0 is every task's fastest
    return problem, 1.06 * true_evaluate(problem, fast)[0]


def one_f_one_b(
    stages: int,
    microbatches: int,
    modes_of: Callable[[int, str], tuple[Mode, ...]],
    idle_w: float = 60.0,
) -> Problem:
    """A synchronous 1F1B iteration (the design's order): stage s runs S − s − 1 warm-up
    forwards, then one forward and one backward alternately, then the remaining
    backwards. Tasks are named ``s{stage}.{f|b}{microbatch}``; `modes_of(stage, kind)`
    gives each task's modes (kind ``"f"`` or ``"b"``)."""
    tasks, edges = [], []
    for s in range(stages):
        warmup = min(stages - s - 1, microbatches)
        order = [("f", m) for m in range(warmup)]
        nf, nb = warmup, 0
        while nf < microbatches:
            order += [("f", nf), ("b", nb)]
            nf, nb = nf + 1, nb + 1
        order += [("b", m) for m in range(nb, microbatches)]
        names = [f"s{s}.{k}{m}" for k, m in order]
        edges += list(itertools.pairwise(names))
        for k, m in order:
            tasks.append(Task(f"s{s}.{k}{m}", f"gpu{s}", modes_of(s, k)))
    for m in range(microbatches):
        for s in range(1, stages):
            edges.append((f"s{s - 1}.f{m}", f"s{s}.f{m}"))
            edges.append((f"s{s}.b{m}", f"s{s - 1}.b{m}"))
        edges.append((f"s{stages - 1}.f{m}", f"s{stages - 1}.b{m}"))
    return Problem(
        tuple(tasks), tuple(dict.fromkeys(edges)), {f"gpu{s}": idle_w for s in range(stages)}
    )


@pytest.fixture
def bf() -> SimpleNamespace:
    """The helpers above, for test modules (conftest is not importable by name)."""
    return SimpleNamespace(
        true_evaluate=true_evaluate,
        all_assignments=all_assignments,
        brute_force=brute_force,
        random_problem=random_problem,
        deadline_between=deadline_between,
        pipeline_problem=pipeline_problem,
        one_f_one_b=one_f_one_b,
    )
