"""Minimum-energy mode assignment for task DAGs under a deadline.

A standalone package: tasks with alternative modes (duration, energy) on devices,
precedence edges, per-device idle power. It finds the assignment that spends the least
energy with the makespan under a deadline (`solve`), the whole time–energy frontier
(`frontier`), and evaluates given assignments exactly (`evaluate`).

Energy accounting (devices held until the horizon H — the makespan, or the deadline):

    E = Σ_i E_i(m_i) + Σ_dev s̄_dev · (H − busy_dev)
"""

from solvers.exceptions import CycleError, InfeasibleDeadline, ProblemError, SolverError
from solvers.frontier import frontier, pareto_filter
from solvers.problem import Mode, Problem, Task
from solvers.solution import Solution
from solvers.solve import evaluate, fastest_makespan, solve

__all__ = [
    "CycleError",
    "InfeasibleDeadline",
    "Mode",
    "Problem",
    "ProblemError",
    "Solution",
    "SolverError",
    "Task",
    "evaluate",
    "fastest_makespan",
    "frontier",
    "pareto_filter",
    "solve",
]
