"""`solvers.paths.PathTimes`: updated longest-path times equal fresh ones, bit for bit."""

from __future__ import annotations

import random

import networkx as nx
import numpy as np
import pytest

from solvers import Mode
from solvers.indexed import IndexedProblem
from solvers.paths import PathTimes


def _fresh(ip: IndexedProblem, durations: list[float]) -> tuple[list, list, list]:
    """Earliest starts, ends and tails from first principles (networkx longest paths)."""
    g = nx.DiGraph()
    g.add_nodes_from(range(ip.n))
    g.add_edges_from((u, v) for v in range(ip.n) for u in ip.preds[v])
    start = [0.0] * ip.n
    for v in nx.topological_sort(g):
        start[v] = max((start[u] + durations[u] for u in g.predecessors(v)), default=0.0)
    tail = [0.0] * ip.n
    for v in reversed(list(nx.topological_sort(g))):
        tail[v] = max((durations[w] + tail[w] for w in g.successors(v)), default=0.0)
    return start, [s + d for s, d in zip(start, durations, strict=True)], tail


@pytest.mark.parametrize("seed", range(6))
def test_changed_times_equal_fresh_ones_on_random_dags(bf, seed: int) -> None:
    problem = bf.random_problem(seed, max_tasks=12, max_modes=4, max_assignments=10**9)
    ip = IndexedProblem(problem)
    rng = random.Random(seed)
    durations = [float(ip.durations[i][0]) for i in range(ip.n)]
    times = PathTimes.of(ip, np.array(durations))
    for _ in range(40):
        tasks = rng.sample(range(ip.n), rng.randint(1, min(4, ip.n)))
        new = [float(rng.choice(list(ip.durations[i]))) for i in tasks]
        before = (list(times.starts), list(times.tails))
        updated = times.changed(tasks, new)
        assert (times.starts, times.tails) == before  # the original is left as it was
        for i, x in zip(tasks, new, strict=True):
            durations[i] = x
        start, end, tail = _fresh(ip, durations)
        assert updated.starts == pytest.approx(start, abs=1e-12)
        assert updated.ends == pytest.approx(end, abs=1e-12)
        assert updated.tails == pytest.approx(tail, abs=1e-12)
        assert updated.makespan == pytest.approx(max(end), abs=1e-12)
        times = updated


def test_updates_are_bit_identical_to_full_passes_on_a_pipeline(bf) -> None:
    problem = bf.one_f_one_b(
        4, 8, lambda s, k: tuple(Mode(1.0 + 0.1 * s + 0.07 * j, 100.0 - j) for j in range(5))
    )
    ip = IndexedProblem(problem)
    rng = np.random.default_rng(3)
    durations = np.array([d[0] for d in ip.durations])
    times = PathTimes.of(ip, durations)
    for _ in range(100):
        tasks = rng.choice(ip.n, int(rng.integers(1, 9)), replace=False)
        new = [ip.durations[i][int(rng.integers(5))] for i in tasks]
        trial = times.changed(tasks, new, tails=False)
        times = trial.with_tails(tasks)
        durations[tasks] = new
        full = PathTimes.of(ip, durations)
        # The same expressions on the same inputs: equal, not merely close.
        assert times.starts == full.starts
        assert times.ends == full.ends
        assert times.tails == full.tails


@pytest.mark.parametrize("seed", range(5))
def test_arrays_follow_the_lists_through_any_order_of_calls(bf, seed: int) -> None:
    """The arrays an updated object hands out (kept from its parent's and the tasks its
    waves touched) equal the ones a full pass gives, whenever they are asked for: after
    a trial without tails, after `with_tails`, after a branch that is dropped."""
    problem = bf.one_f_one_b(
        5, 12, lambda s, k: tuple(Mode(1.0 + 0.1 * s + 0.07 * j, 100.0 - j) for j in range(5))
    )
    ip = IndexedProblem(problem)
    rng = np.random.default_rng(seed)
    durations = np.array([d[int(rng.integers(5))] for d in ip.durations])
    times = PathTimes.of(ip, durations)
    for step in range(120):
        tasks = rng.choice(ip.n, int(rng.integers(1, 40 if step % 7 == 0 else 6)), replace=False)
        new = [ip.durations[i][int(rng.integers(5))] for i in tasks]
        trial = times.changed(tasks, new, tails=bool(rng.integers(2)))
        if rng.integers(3) == 0:
            trial.makespan  # noqa: B018 (materializes the arrays before the tails)
        if rng.integers(4) == 0:
            continue  # the trial is dropped; its parent must be untouched
        times = trial.with_tails(tasks)
        durations[tasks] = new
        if rng.integers(2) == 0:
            continue  # arrays asked for later, after more changes
        full = PathTimes.of(ip, durations)
        for got, want in zip(times.arrays(), full.arrays(), strict=True):
            assert np.array_equal(got, want)
        assert times.makespan == full.makespan
        assert not times.arrays()[1].flags.writeable


@pytest.mark.parametrize("hold", ["makespan", "deadline"])
@pytest.mark.parametrize("seed", range(4))
def test_energy_at_a_known_makespan_is_evaluates_energy(bf, seed: int, hold: str) -> None:
    problem = bf.random_problem(seed, max_tasks=10, max_modes=4, max_assignments=10**9, hold=hold)
    ip = IndexedProblem(problem)
    rng = random.Random(seed)
    for _ in range(20):
        modes = [rng.randrange(len(ip.durations[i])) for i in range(ip.n)]
        times = PathTimes.of(ip, ip.durations_of(modes))
        ev = ip.evaluate(modes, None)
        deadline = rng.choice([None, ev.makespan * rng.uniform(1.0, 1.5)])
        # Equal, not merely close: searches compare these energies with each other.
        assert ip.energy_at(modes, times.makespan, deadline) == ip.evaluate(modes, deadline).energy
        # And against first principles (the conftest's independent accounting).
        assign = {name: modes[ip.index[name]] for name in ip.names}
        _, energy = bf.true_evaluate(problem, assign, deadline)
        assert ip.energy_at(modes, times.makespan, deadline) == pytest.approx(energy, rel=1e-12)
