"""Minimum-energy mode assignment for task DAGs under a deadline.

A standalone package: tasks with alternative modes (duration, energy) on devices,
precedence edges, per-device idle power. It finds the assignment that spends the least
energy with the makespan under a deadline (`solve`), the whole time–energy frontier
(`frontier`), and evaluates given assignments exactly (`evaluate`). A solve stops at its
budget of work (by default: counted in work done, so one input gives one plan on any
machine at any load) or at an explicit wall-clock time limit, or earlier by a `StopRule`
(a small enough certified gap, a stall), or on Ctrl-C with the best plan found;
`Solution.stop_reason` says which.

Energy accounting (devices held until the horizon H — the makespan, or the deadline):

    E = Σ_i E_i(m_i) + Σ_dev s̄_dev · (H − busy_dev)
"""

from solvers.budget import Budget
from solvers.deadline import check_deadline
from solvers.exceptions import CycleError, InfeasibleDeadline, ProblemError, SolverError
from solvers.frontier import frontier, pareto_filter
from solvers.problem import Mode, Problem, Task
from solvers.solution import Solution
from solvers.solve import METHODS, evaluate, fastest_makespan, solve
from solvers.stopping import RUN_TO_LIMIT, StopRule

__all__ = [
    "METHODS",
    "RUN_TO_LIMIT",
    "Budget",
    "CycleError",
    "InfeasibleDeadline",
    "Mode",
    "Problem",
    "ProblemError",
    "Solution",
    "SolverError",
    "StopRule",
    "Task",
    "check_deadline",
    "evaluate",
    "fastest_makespan",
    "frontier",
    "pareto_filter",
    "solve",
]
