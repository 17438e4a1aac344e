"""eopt's plan path on the real GPT-3 175B / A100 profile vs the quoted exact optima.

Builds the 8-stage × 12-microbatch 1F1B plan with ``eopt.plan`` (Perseus CSV import,
P_block = s̄ = 83.64 W), solves it through ``eopt.plan.solve_plan`` with each method, and
prints energy, makespan, certified lower bound and time next to the reference numbers in
``shared/data/README.md`` section 1: the exact discrete optimum 5719.9 J at T ≤ 3.0 s and
5928.9 J at T ≤ 2.9 s (MILP gap 0.1 %), and Perseus's published frontier 5751.1 J / 5923.0 J.

Examples:
    python3 benchmarks/perseus_reference.py
    python3 benchmarks/perseus_reference.py --methods relax --time-limit 30
    python3 benchmarks/perseus_reference.py --smoke   # relax only, the tests/data profile

Target: every plan within its deadline and within 0.5 % of the exact optimum.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

from eopt.model.library import Library
from eopt.plan.perseus import read_perseus_profile
from eopt.plan.pipeline import pipeline_plan
from eopt.plan.solve import solve_plan

# deadline s → (exact optimum J, Perseus frontier J), from the data README, section 1.
REFERENCE = {3.0: (5719.9, 5751.1), 2.9: (5928.9, 5923.0)}
P_BLOCK_W = 83.64
SMOKE = {"methods": "relax", "time_limit": 2.0}


def _profile() -> Path:
    base = common.data_dir()
    return base / "perseus_sosp24" / "stage_profile" / "gpt3-175b+a100_sxm_bf16.csv"


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print one table row per (deadline, method); returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="relax,milp", help="comma-separated methods")
    parser.add_argument("--time-limit", type=float, default=60.0, help="s per solve")
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    if common.enter_smoke(args):
        vars(args).update(SMOKE)
    lib = Library(read_perseus_profile(_profile(), P_BLOCK_W))
    plan = pipeline_plan(8, 12, P_BLOCK_W)
    header = (
        f"{'T ≤ s':>6} {'method':>6} {'energy J':>10} {'vs exact':>9} {'makespan s':>11} "
        f"{'bound J':>10} {'status':>10} {'wall s':>7} {'Perseus J':>10}"
    )
    print(header)
    print("-" * len(header))
    worst = 0.0
    for deadline, (exact, perseus) in REFERENCE.items():
        for method in args.methods.split(","):
            start = time.perf_counter()
            sched = solve_plan(
                plan, deadline=deadline, method=method, time_limit=args.time_limit, library=lib
            )
            wall = time.perf_counter() - start
            excess = sched.energy / exact - 1.0
            worst = max(worst, excess)
            bound = f"{sched.lower_bound:.1f}" if sched.lower_bound is not None else "—"
            print(
                f"{deadline:>6.2f} {method:>6} {sched.energy:>10.1f} {excess:>+9.3%} "
                f"{sched.makespan:>11.5f} {bound:>10} {sched.solver['status']:>10} "
                f"{wall:>7.1f} {perseus:>10.1f}"
            )
    verdict = "PASS" if worst <= 0.005 else "FAIL"
    print(f"\n{verdict}: worst excess over the exact optimum {worst:+.3%} (target ≤ +0.5 %)")
    return 0


if __name__ == "__main__":
    common.run_main(main)
