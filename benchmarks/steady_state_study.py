"""How much energy can any plan lose in a 1F1B pipeline's steady state? A cyclic MILP.

`solver_scale.py` at 1.05 × T_allmax (16 × 128 × 30) leaves relax about 0.6 % above
the convex-hull LP bound, and most of that loss sits in the steady state (the
microbatches that every stage runs in its alternating F/B phase). This study asks what
the steady state alone allows, away from the warm-up and cool-down:

1. Solve the hull LP of the whole problem at D = factor × T_allmax and find the DAG's
   repeated pattern (`solvers.periodic.find_repetition`: for 1F1B, one class per
   stage and kind, ranked by microbatch); read the LP's period p (s per microbatch)
   from the start times of the steady microbatches (`steady_period`).
2. Build the *cyclic* model of a block of P consecutive microbatches
   (`solvers.periodic.cyclic_model`): one task per (stage, kind, r < P), the
   pattern's edges folded onto the block, the block's period Π ≤ P · p, and the
   objective per block Σ (E − s̄ · d) + S̄ · Π — the design's accounting, per period.
   relax tiles the P = 1 plan (`solvers.periodic.tiled_plans`).
3. Solve its LP relaxation (the steady state of the hull LP) and the MILP with HiGHS.

Per microbatch, MILP − LP is the loss a P-periodic plan must take in the steady state;
the MILP's proven bound is a lower limit on that loss for P-periodic plans, the
incumbent an upper one. Multiplied by the steady microbatches it is comparable with
relax's whole gap (printed alongside when ``--relax-limit`` > 0).

Examples:
    python3 benchmarks/steady_state_study.py
    python3 benchmarks/steady_state_study.py --blocks 1,2 --time-limit 60 --relax-limit 0
    python3 benchmarks/steady_state_study.py --smoke   # 4 × 16 × 5, P = 1, seconds
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common
import solver_scale

SMOKE = {
    "stages": 4,
    "microbatches": 16,
    "clocks": 5,
    "blocks": [1],
    "time_limit": 2.0,
    "relax_limit": 1.0,
}


def main(argv: list[str] | None = None) -> int:
    """Run the study; return the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Examples:" + __doc__.split("Examples:")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stages", type=int, default=16)
    parser.add_argument("--microbatches", type=int, default=128)
    parser.add_argument("--clocks", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--factor", type=float, default=1.05, help="D = factor × T_allmax")
    parser.add_argument(
        "--blocks", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3]
    )
    parser.add_argument("--time-limit", type=float, default=120.0, help="MILP seconds per block")
    parser.add_argument(
        "--relax-limit", type=float, default=60.0, help="solve the whole problem too (0: skip)"
    )
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    if common.enter_smoke(args):
        vars(args).update(SMOKE)

    import solvers
    from solvers.indexed import IndexedProblem
    from solvers.lp import HullLP
    from solvers.periodic import cyclic_model, find_repetition, steady_period

    S, M = args.stages, args.microbatches
    profile = solver_scale.synthetic_profile(S, args.clocks, args.seed)
    dag = common.pipeline_dag(S, M)
    evaluator = common.PlanEvaluator(dag, profile, solver_scale.IDLE_POWER_W)
    deadline = args.factor * evaluator.uniform(solver_scale.MAX_CLOCK_MHZ).makespan_s
    built = common.build_problem(dag, profile, solver_scale.IDLE_POWER_W)
    ip = IndexedProblem(built.problem)
    rep = find_repetition(ip)
    if rep is None:
        parser.error(f"{S} × {M}: no steady state to study (too few microbatches)")
    lp = HullLP(ip)
    lp.set_deadline(deadline)
    point = lp.solve()
    bound = point.energy_bound(ip, deadline)
    period = steady_period(rep, point.starts)
    steady = int(np.unique(rep.rank[rep.interior]).size)
    print(
        f"=== {S} × {M} × {args.clocks} clocks, D = {args.factor:.2f} × T_allmax = "
        f"{deadline:.4f} s\nLP bound {bound:.1f} J; LP period {period * 1e3:.3f} ms per "
        f"microbatch; {steady} steady microbatches"
    )
    if args.relax_limit > 0:
        sol = solvers.solve(built.problem, deadline, method="relax", time_limit=args.relax_limit)
        print(
            f"relax ({args.relax_limit:.0f} s): {sol.energy:.1f} J, {sol.energy - bound:.1f} J "
            f"({(sol.energy - bound) / sol.energy:.3%}) above the LP bound"
        )
    rows = []
    for block in args.blocks:
        results = []
        for integer in (False, True):
            h = cyclic_model(ip, rep, block * period, block=block, integer=integer).highs
            h.setOptionValue("time_limit", args.time_limit)
            t0 = time.perf_counter()
            h.run()
            info = h.getInfo()
            results.append(
                (
                    info.objective_function_value / block,
                    (info.mip_dual_bound if integer else info.objective_function_value) / block,
                    h.modelStatusToString(h.getModelStatus()),
                    time.perf_counter() - t0,
                )
            )
        (lp_j, _, _, _), (best_j, proven_j, status, wall) = results
        rows.append(
            (
                block,
                f"{lp_j:.3f}",
                f"{best_j:.3f}",
                f"{proven_j:.3f}",
                f"{best_j - lp_j:.3f} / {max(0.0, proven_j - lp_j):.3f}",
                f"{(best_j - lp_j) * steady:.0f} J ({(best_j - lp_j) * steady / bound:.3%})",
                f"{status}, {wall:.0f} s",
            )
        )
    common.print_table(
        (
            "P",
            "LP J/mb",
            "best P-periodic J/mb",
            "proven J/mb",
            "loss/mb best / proven",
            "best loss × steady",
            "MILP",
        ),
        rows,
        title="Cyclic steady state (per microbatch)",
    )
    return 0


if __name__ == "__main__":
    common.run_main(lambda: main())
