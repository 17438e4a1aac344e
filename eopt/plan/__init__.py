"""Plans: DAGs of elements on devices, their generators, and solving them.

* :mod:`eopt.model.planfile` — plan files (``eopt.plan/1``).
* :mod:`eopt.plan.pipeline` — 1F1B / GPipe training iterations.
* :mod:`eopt.plan.perseus` — Perseus/Zeus stage profiles → signature libraries.
* :mod:`eopt.plan.problem` — plan + libraries → ``solvers.Problem`` (a same-device parallel
  group becomes one task priced as ``par`` of its members).
* :mod:`eopt.plan.solve` — solve, plan frontier, solution → schedule.
* :mod:`eopt.model.schedule` — schedule files (``eopt.schedule/1``).

Every name here loads on first use: generating a pipeline plan should not wait for the
solvers, and reading a plan file should not wait for the pipeline generators.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eopt.model.lazy import lazy_attributes

if TYPE_CHECKING:
    from eopt.model.planfile import Plan, PlanDevice, PlanElement, PlanError, read_plan, write_plan
    from eopt.plan.perseus import ProfileError, read_perseus_profile
    from eopt.plan.pipeline import gpipe_order, one_f_one_b_order, pipeline_plan
    from eopt.plan.problem import PlanProblem, PlanTask, build_problem, load_plan_library
    from eopt.plan.solve import plan_frontier, schedule_from_solution, solve_plan

_LAZY = {
    "Plan": "eopt.model.planfile",
    "PlanDevice": "eopt.model.planfile",
    "PlanElement": "eopt.model.planfile",
    "PlanError": "eopt.model.planfile",
    "read_plan": "eopt.model.planfile",
    "write_plan": "eopt.model.planfile",
    "ProfileError": "eopt.plan.perseus",
    "read_perseus_profile": "eopt.plan.perseus",
    "gpipe_order": "eopt.plan.pipeline",
    "one_f_one_b_order": "eopt.plan.pipeline",
    "pipeline_plan": "eopt.plan.pipeline",
    "PlanProblem": "eopt.plan.problem",
    "PlanTask": "eopt.plan.problem",
    "build_problem": "eopt.plan.problem",
    "load_plan_library": "eopt.plan.problem",
    "plan_frontier": "eopt.plan.solve",
    "schedule_from_solution": "eopt.plan.solve",
    "solve_plan": "eopt.plan.solve",
}

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


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
