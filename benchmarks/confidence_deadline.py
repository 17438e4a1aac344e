"""Variance-aware deadlines: `eopt solve --confidence q` on random plans and on Perseus's
pipelines (GPT-3 175B and BLOOM on A100-SXM and A40, 8 stages, 1F1B, M = 12).

A plan solved on mean durations for a deadline D (here the fastest makespan + 5 %) meets
it only when the noise is kind. For each plan and each confidence q this runs
`eopt.plan.confidence.solve_with_confidence` and then checks the chosen plan with an
independent Monte Carlo run (100 000 makespans, durations drawn per element, every
device's order and every precedence kept). Printed: the requested q, the achieved
on-time probability (± its standard error) and Clark's analytic value, how often the
mean-deadline plan is on time, the energy at the mean deadline and at q, the premium,
the solves of the search and the wall time.

Time variances. Perseus's profiles carry none; every cell gets a coefficient of
variation (--cv, default 3 %: the single-run jitter of a training step's forward or
backward on a dedicated GPU is of that order). The random plans draw their own CVs
(2-8 % per element type).

Examples:
    python3 benchmarks/confidence_deadline.py                  # 4 random plans + 4 Perseus
    python3 benchmarks/confidence_deadline.py --random 0 --config gpt3-175b+a100_sxm
    python3 benchmarks/confidence_deadline.py --confidences 0.9,0.99 --cv 0.05
    python3 benchmarks/confidence_deadline.py --smoke   # 1 random + GPT-3/A100, q = 0.9

``--smoke``: one random plan and GPT-3 175B on the A100 (the profile in ``tests/data``)
with M = 4, q = 0.9 only, the independent check on 10 000 samples.

Target: achieved (independent Monte Carlo) ≥ requested for every plan and q, up to two
standard errors of that estimate (how many point estimates reach q is printed too); the
premium over the mean-deadline plan is shown, not judged.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common
import numpy as np

from eopt.model.library import Library
from eopt.model.operating_point import OperatingPoint
from eopt.model.planfile import Plan, PlanDevice, PlanElement
from eopt.model.signature import Signature
from eopt.plan.confidence import on_time, solve_with_confidence, timed_dag
from eopt.plan.perseus import read_perseus_profile
from eopt.plan.pipeline import pipeline_plan
from eopt.plan.problem import build_problem

CONFIDENCES = (0.9, 0.95, 0.99)
NUM_STAGES = 8
MICROBATCHES = 12
# GPU → P_block (W), as in lowtime_perseus.py.
P_BLOCK_W = {"a100_sxm": 83.64, "a40": 70.38}
MODELS = ("gpt3-175b", "bloom")
CHECK_SAMPLES = 100_000
CHECK_SEED = 2024
SMOKE = {
    "random": 1,
    "configs": ["gpt3-175b+a100_sxm"],
    "confidences": [0.9],
    "microbatches": 4,
    "check_samples": 10_000,
    "time_limit": 2.0,
}


def random_plan(seed: int) -> tuple[str, Plan, Library]:
    """Four devices, 40 elements with random precedence, six clocks per element type."""
    rng = np.random.default_rng(seed)
    devices = [f"gpu{d}" for d in range(4)]
    idle_w = 70.0
    elements, sigs = [], []
    for i in range(40):
        # Mostly recent predecessors: long chains with merges, like real workloads.
        after = tuple(f"x{j}" for j in range(max(0, i - 8), i) if rng.random() < 0.2)
        elements.append(PlanElement(f"x{i}", devices[int(rng.integers(4))], f"t{i}", after))
        t0, cv = rng.uniform(0.01, 0.1), rng.uniform(0.02, 0.08)
        d0 = t0 * rng.uniform(250.0, 450.0)
        for f in (1410, 1290, 1170, 1050, 930, 810):
            t = t0 * (1410 / f) ** rng.uniform(0.6, 1.0)
            d = d0 * (0.45 + 0.55 * (f / 1410) ** 2)
            sigs.append(
                Signature(f"t{i}", idle_w, t, d, var_time=(cv * t) ** 2, op_point=OperatingPoint(f))
            )
    plan = Plan(tuple(PlanDevice(d, idle_w) for d in devices), tuple(elements))
    return f"random #{seed} (4 GPUs × 40)", plan, Library(sigs)


def perseus_plan(
    model: str, gpu: str, cv: float, microbatches: int = MICROBATCHES
) -> tuple[str, Plan, Library]:
    """Perseus's 8-stage 1F1B pipeline of ``microbatches`` microbatches (its M = 12 by
    default), with a CV of ``cv`` on every cell."""
    p_block = P_BLOCK_W[gpu]
    profile = common.data_dir() / "perseus_sosp24" / "stage_profile" / f"{model}+{gpu}_bf16.csv"
    sigs = [
        Signature(
            s.name,
            s.static_power,
            s.time,
            s.dynamic_energy,
            var_time=(cv * s.time) ** 2,
            op_point=s.op_point,
            meta=s.meta,
        )
        for s in read_perseus_profile(profile, p_block)
    ]
    plan = pipeline_plan(NUM_STAGES, microbatches, p_block)
    return f"{model} {gpu} 8×{microbatches}", plan, Library(sigs)


def independent_check(
    plan: Plan, library: Library, schedule: Any, deadline_s: float, samples: int = CHECK_SAMPLES
) -> Any:
    """The chosen plan's on-time probability from ``samples`` fresh samples (not the
    search's)."""
    pp = build_problem(plan, library)
    placed = {e.name: (e.impl, e.op_point) for e in schedule.elements}
    modes = {}
    for name, task in pp.tasks.items():
        want = tuple(placed[m] for m in task.members)
        modes[name] = next(
            k
            for k, cells in enumerate(task.choices)
            if tuple((c.impl, c.op_point) for c in cells) == want
        )
    return on_time(timed_dag(pp, modes), deadline_s, samples, CHECK_SEED)


def run_plan(
    label: str, plan: Plan, library: Library, args: argparse.Namespace, verdicts: common.Verdicts
) -> list[dict[str, Any]]:
    """Every confidence on one plan; print its table and verdicts."""
    rows, out = [], []
    for q in args.confidences:
        started = time.perf_counter()
        schedule, result = solve_with_confidence(
            plan,
            q,
            slowdown=args.slowdown,
            library=library,
            method=args.method,
            time_limit=args.time_limit,
        )
        wall = time.perf_counter() - started
        check = independent_check(plan, library, schedule, result.deadline_s, args.check_samples)
        # A shortfall counts only beyond sampling error (2 standard errors).
        verdicts.check(
            check.monte_carlo + 2 * check.stderr >= q,
            f"{label} q={q:g}: achieved {check.monte_carlo:.4f} ± {check.stderr:.4f} ≥ requested",
        )
        rows.append(
            (
                f"{q:g}",
                f"{check.monte_carlo:.4f} ± {check.stderr:.4f}",
                f"{check.analytic:.4f}",
                f"{result.mean_plan.monte_carlo:.3f}",
                common.fmt_j(result.mean_plan_energy_j),
                common.fmt_j(result.energy_j),
                common.fmt_pct(result.premium, 2),
                f"{result.tightened_deadline_s / result.deadline_s:.4f}",
                result.solves,
                f"{wall:.1f}",
            )
        )
        out.append(
            {
                "plan": label,
                "confidence": q,
                "deadline_s": result.deadline_s,
                "tightened_deadline_s": result.tightened_deadline_s,
                "achieved_monte_carlo": check.monte_carlo,
                "achieved_stderr": check.stderr,
                "achieved_analytic": check.analytic,
                "search_monte_carlo": result.plan.monte_carlo,
                "mean_plan_on_time": result.mean_plan.monte_carlo,
                "mean_plan_energy_j": result.mean_plan_energy_j,
                "energy_j": result.energy_j,
                "premium": result.premium,
                "solves": result.solves,
                "wall_s": wall,
            }
        )
    common.print_table(
        [
            "q",
            "achieved (MC)",
            "Clark",
            "mean plan on time",
            "E @mean D, J",
            "E @q, J",
            "premium",
            "D'/D",
            "solves",
            "time s",
        ],
        rows,
        f"{label}: deadline = fastest + {100 * args.slowdown:g} %",
    )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    parser = common.argument_parser(__doc__, 3)
    parser.add_argument(
        "--confidences",
        type=lambda s: [float(x) for x in s.split(",")],
        default=list(CONFIDENCES),
        help="requested on-time probabilities, comma-separated (default 0.9,0.95,0.99)",
    )
    parser.add_argument("--random", type=int, default=4, help="random plans (default 4)")
    parser.add_argument(
        "--config",
        action="append",
        dest="configs",
        help="MODEL+GPU, e.g. gpt3-175b+a100_sxm (repeatable; default all four)",
    )
    parser.add_argument("--cv", type=float, default=0.03, help="Perseus cells' CV (0.03)")
    parser.add_argument(
        "--slowdown", type=float, default=0.05, help="deadline over the fastest (0.05)"
    )
    parser.add_argument("--method", default="relax", help="solver method (default relax)")
    common.add_report_options(parser, "confidence_deadline")
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    vars(args).update(microbatches=MICROBATCHES, check_samples=CHECK_SAMPLES)
    if common.enter_smoke(args):
        vars(args).update(SMOKE)
    args.time_limit = args.time_limit or 30.0
    bad = [q for q in args.confidences if not 0 < q < 1]
    if bad:
        parser.error(f"--confidences: each must lie in (0, 1), got {bad}")

    plans = [random_plan(seed) for seed in range(args.random)]
    configs = args.configs or [f"{m}+{g}" for g in P_BLOCK_W for m in MODELS]
    for config in configs:
        model, _, gpu = config.partition("+")
        if model not in MODELS or gpu not in P_BLOCK_W:
            parser.error(
                f"--config {config!r}: use MODEL+GPU with MODEL in {MODELS}, "
                f"GPU in {tuple(P_BLOCK_W)}"
            )
        plans.append(perseus_plan(model, gpu, args.cv, args.microbatches))
    verdicts = common.Verdicts()
    runs: list[dict[str, Any]] = []
    for label, plan, library in plans:
        print(f"\n=== {label}: {len(plan.elements)} elements", flush=True)
        runs += run_plan(label, plan, library, args, verdicts)
    reached = sum(1 for r in runs if r["achieved_monte_carlo"] >= r["confidence"])
    print(f"\npoint estimates at or above the requested probability: {reached} of {len(runs)}")
    verdicts.summary()
    if runs and not args.no_save:
        payload = {"runs": runs, "verdicts": verdicts.lines, "cv": args.cv}
        path = common.write_results("confidence_deadline", payload)
        print(f"numbers written to {path.relative_to(common.REPO_DIR)}")
    return verdicts.exit_status(args.strict)


if __name__ == "__main__":
    common.run_main(main)
