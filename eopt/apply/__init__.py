"""Acting on a schedule: lock GPU settings (static) or switch them per element (runtime).

``plan_apply`` works out what each GPU needs and checks it against what the GPU
supports; ``apply_locked`` / ``run_with_settings`` set one lock per GPU;
``RuntimeController`` switches per element off the caller's thread and records how the
loop drifts from the schedule. Every change runs inside the devices layer's state guard,
so the original state comes back on every exit.
"""

from eopt.apply.controller import RuntimeController
from eopt.apply.drift import DriftReport, PlanDriftWarning
from eopt.apply.latency import SwitchStats
from eopt.apply.settings import (
    ApplyError,
    DevicePlan,
    check_setting,
    device_plans,
    gpu_resolver,
    nvml_calls,
    parse_gpu_map,
    resolve_gpu_map,
)
from eopt.apply.static import ApplyPlan, apply_locked, plan_apply, run_with_settings

__all__ = [
    "ApplyError",
    "ApplyPlan",
    "DevicePlan",
    "DriftReport",
    "PlanDriftWarning",
    "RuntimeController",
    "SwitchStats",
    "apply_locked",
    "check_setting",
    "device_plans",
    "gpu_resolver",
    "nvml_calls",
    "parse_gpu_map",
    "plan_apply",
    "resolve_gpu_map",
    "run_with_settings",
]
