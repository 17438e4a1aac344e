"""Where does the relax/auto gap live on 8 × 32? A long exact MILP run, traced.

For each deadline D = factor × T_allmax on ``lowtime_bench/s8_m32_u1ms`` (512 tasks,
10 clocks, idle power 75 W) this script

1. solves the convex-hull LP (the bound `solvers` reports),
2. finds the best plan `solvers.solve(method="auto")` gives in `--start-limit` s,
3. runs HiGHS's MILP on the exact model (Pareto modes only, single thread), warm
   started from that plan, for `--time-limit` s, and records the incumbent and the
   proven bound over time (HiGHS callbacks).

If the proven bound climbs well above the LP bound, the LP bound is loose; if the
incumbent drops well below the start plan, the plans are weak. The numbers go to
``benchmarks/results/solver_gap_<tag>.json``.

Examples:
    python3 benchmarks/solver_gap_study.py --factors 1.05 --time-limit 420 --tag 8x32_105
    python3 benchmarks/solver_gap_study.py --factors 1.05,1.2 --time-limit 30 --no-save
    python3 benchmarks/solver_gap_study.py --factors 1.0,1.05,1.1,1.2,1.3 --no-milp --tag 8x32_auto
    python3 benchmarks/solver_gap_study.py --factors 1.05 --no-milp --no-save --write-mps /tmp
    python3 benchmarks/solver_gap_study.py --smoke   # 4 × 8 of tests/data, 2-s MILP

``--write-mps DIR`` also writes each exact model (the one ``method="milp"`` builds) as
``DIR/8x32_<factor>.mps``, so that another MILP solver can check the proven bound
independently, e.g. CBC: ``cbc /tmp/8x32_1.05.mps -sec 60 -threads 1 -solve``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

IDLE_POWER_W = 75.0
CASE = "s8_m32_u1ms"
# --smoke: the case shipped in tests/data, one deadline, seconds of MILP.
SMOKE = {"case": "s4_m8_u1ms", "factors": [1.05], "time_limit": 2.0, "start_limit": 1.0}


def traced_milp(ip: Any, deadline: float, warm: list[int], time_limit: float) -> dict[str, Any]:
    """Run HiGHS's MILP from `warm`; return the incumbent/bound trace and the result."""
    from solvers.milp import ExactModel

    mip = ExactModel(ip, deadline)
    mip.model.set_option("mip_rel_gap", 1e-6)
    mip.model.set_option("time_limit", float(time_limit))
    mip.start(warm)
    # The study records HiGHS's own callbacks, so it holds the HiGHS instance itself.
    h = mip.model.highs
    offset = mip.model.offset
    trace: list[dict[str, float]] = []
    t0 = time.perf_counter()

    def record(event: Any) -> None:
        out = event.data_out
        point = {
            "t_s": time.perf_counter() - t0,
            "incumbent_j": float(out.mip_primal_bound) + offset,
            "bound_j": float(out.mip_dual_bound) + offset,
            "nodes": float(out.mip_node_count),
        }
        if not trace or (
            point["incumbent_j"] != trace[-1]["incumbent_j"]
            or point["bound_j"] > trace[-1]["bound_j"] + 1e-9
        ):
            trace.append(point)

    h.cbMipInterrupt.subscribe(record)
    h.cbMipImprovingSolution.subscribe(record)
    h.run()
    info = h.getInfo()
    final = {
        "status": h.modelStatusToString(h.getModelStatus()),
        "incumbent_j": float(info.objective_function_value) + offset,
        "bound_j": float(info.mip_dual_bound) + offset,
        "nodes": int(info.mip_node_count),
        "wall_s": time.perf_counter() - t0,
    }
    return {"trace": trace, "final": final}


def main(argv: list[str] | None = None) -> int:
    """Run the study; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--factors", type=lambda s: [float(x) for x in s.split(",")], default=[1.05]
    )
    parser.add_argument("--time-limit", type=float, default=420.0, help="MILP seconds per factor")
    parser.add_argument("--start-limit", type=float, default=10.0, help="auto seconds (start plan)")
    parser.add_argument("--case", default=CASE, help="lowtime_bench folder (default s8_m32_u1ms)")
    parser.add_argument("--tag", default="8x32", help="results file solver_gap_<tag>.json")
    parser.add_argument(
        "--no-milp", action="store_true", help="only the LP bound and the auto plan (target A)"
    )
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument(
        "--write-mps", type=Path, metavar="DIR", help="also write each exact MILP as MPS here"
    )
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    if common.enter_smoke(args):
        vars(args).update(SMOKE)

    import solvers
    from solvers.indexed import IndexedProblem
    from solvers.lp import HullLP
    from solvers.milp import ExactModel

    base = common.data_dir() / "lowtime_bench" / args.case
    dag = common.read_lowtime_dag(base / "dag.json")
    profile = common.read_stage_profile(base / "profile.csv")
    evaluator = common.PlanEvaluator(dag, profile, IDLE_POWER_W)
    allmax = evaluator.uniform(evaluator.max_clock())
    built = common.build_problem(dag, profile, IDLE_POWER_W)
    ip = IndexedProblem(built.problem)
    runs = []
    for factor in args.factors:
        deadline = factor * allmax.makespan_s
        lp = HullLP(ip)
        lp.set_deadline(deadline)
        lp_bound = lp.solve().energy_bound(ip, deadline)
        if args.write_mps:
            args.write_mps.mkdir(parents=True, exist_ok=True)
            mps = args.write_mps / f"{args.tag}_{factor:.2f}.mps"
            exact = ExactModel(ip, deadline)
            exact.model.highs.writeModel(str(mps))
            print(f"exact MILP written to {mps} (objective + {exact.model.offset:g} J = energy)")
        start = solvers.solve(built.problem, deadline, method="auto", time_limit=args.start_limit)
        warm = [start.modes[name] for name in ip.names]
        print(
            f"{factor:.2f}× D={deadline:.4f} s: LP bound {lp_bound:.2f} J, auto "
            f"{start.energy:.2f} J (gap {start.gap:.3%}, {start.wall_time_s:.1f} s)",
            flush=True,
        )
        if args.no_milp:
            runs.append(
                {
                    "factor": factor,
                    "deadline_s": deadline,
                    "lp_bound_j": lp_bound,
                    "start_energy_j": start.energy,
                    "start_lower_bound_j": start.lower_bound,
                    "start_gap_vs_lp": (start.energy - lp_bound) / start.energy,
                    "start_gap": start.gap,
                    "start_solver": start.solver,
                    "start_wall_s": start.wall_time_s,
                }
            )
            continue
        res = traced_milp(ip, deadline, warm, args.time_limit)
        fin = res["final"]
        print(
            f"  MILP {fin['wall_s']:.0f} s: incumbent {fin['incumbent_j']:.2f} J, bound "
            f"{fin['bound_j']:.2f} J ({fin['status']}, {fin['nodes']} nodes)",
            flush=True,
        )
        for p in res["trace"][:: max(1, len(res["trace"]) // 25)]:
            print(
                f"    {p['t_s']:7.1f} s  incumbent {p['incumbent_j']:.2f}  bound {p['bound_j']:.2f}"
            )
        runs.append(
            {
                "factor": factor,
                "deadline_s": deadline,
                "lp_bound_j": lp_bound,
                "start_energy_j": start.energy,
                "start_solver": start.solver,
                "start_wall_s": start.wall_time_s,
                "milp_time_limit_s": args.time_limit,
                "milp": res["final"],
                "trace": res["trace"],
                "incumbent_below_start": (start.energy - fin["incumbent_j"]) / start.energy,
                "bound_above_lp": (fin["bound_j"] - lp_bound) / start.energy,
            }
        )
    if not args.no_save:
        path = common.write_results(
            f"solver_gap_{args.tag}",
            {
                "case": args.case,
                "t_allmax_s": allmax.makespan_s,
                "idle_power_w": IDLE_POWER_W,
                "runs": runs,
            },
        )
        print(f"numbers written to {path.relative_to(common.REPO_DIR)}")
    return 0


if __name__ == "__main__":
    common.run_main(main)
