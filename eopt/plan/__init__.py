"""Plans: DAGs of elements on devices, their generators, and solving them.

* :mod:`eopt.model.planfile` — plan files (``eopt.plan/1``).
* :mod:`eopt.plan.pipeline` — 1F1B / GPipe training iterations.
* :mod:`eopt.plan.perseus` — Perseus/Zeus stage profiles → signature libraries.
* :mod:`eopt.plan.problem` — plan + libraries → ``solvers.Problem`` (a same-device parallel
  group becomes one task priced as ``par`` of its members).
* :mod:`eopt.plan.solve` — solve, plan frontier, solution → schedule.
* :mod:`eopt.model.schedule` — schedule files (``eopt.schedule/1``).
"""

from __future__ import annotations

from eopt.model.planfile import Plan, PlanDevice, PlanElement, PlanError, read_plan, write_plan
from eopt.plan.perseus import ProfileError, read_perseus_profile
from eopt.plan.pipeline import gpipe_order, one_f_one_b_order, pipeline_plan
from eopt.plan.problem import PlanProblem, PlanTask, build_problem, load_plan_library
from eopt.plan.solve import plan_frontier, schedule_from_solution, solve_plan

__all__ = [
    "Plan",
    "PlanDevice",
    "PlanElement",
    "PlanError",
    "PlanProblem",
    "PlanTask",
    "ProfileError",
    "build_problem",
    "gpipe_order",
    "load_plan_library",
    "one_f_one_b_order",
    "pipeline_plan",
    "plan_frontier",
    "read_perseus_profile",
    "read_plan",
    "schedule_from_solution",
    "solve_plan",
    "write_plan",
]
