"""How much energy can any plan lose in a 1F1B pipeline's steady state? A cyclic MILP.

`solver_scale.py` at 1.05 × T_allmax (16 × 128 × 30) leaves relax about 0.6 % above
the convex-hull LP bound, and most of that loss sits in the steady state (the
microbatches that every stage runs in its alternating F/B phase). This study asks what
the steady state alone allows, away from the warm-up and cool-down:

1. Solve the hull LP of the whole problem at D = factor × T_allmax; read the LP's
   period p (s per microbatch) from the start times of stage 0's forwards in the
   middle of the iteration.
2. Build the *cyclic* model of a block of P consecutive microbatches: one task per
   (stage, kind, r < P), the DAG's own edges between middle microbatches folded onto
   the block (an edge from microbatch m to microbatch m' becomes
   o_a + d_a ≤ o_b + (⌊m'/P⌋ − ⌊m/P⌋) · Π), the block's period Π ≤ P · p, and the
   objective per block Σ (E − s̄ · d) + S̄ · Π — the design's accounting, per period.
3. Solve its LP relaxation (the steady state of the hull LP) and the MILP with HiGHS.

Per microbatch, MILP − LP is the loss a P-periodic plan must take in the steady state;
the MILP's proven bound is a lower limit on that loss for P-periodic plans, the
incumbent an upper one. Multiplied by the steady microbatches it is comparable with
relax's whole gap (printed alongside when ``--relax-limit`` > 0).

Examples:
    python3 benchmarks/steady_state_study.py
    python3 benchmarks/steady_state_study.py --blocks 1,2 --time-limit 60 --relax-limit 0
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common
import solver_scale


def cyclic_model(
    ops: dict[int, common.PipelineOp],
    edges: list[tuple[int, int]],
    modes: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]],
    idle_total_w: float,
    block: int,
    period_max_s: float,
    *,
    integer: bool,
) -> Any:
    """The cyclic model of one block of `block` microbatches (see the module docstring).

    Args:
        ops: the DAG's ops by id.
        edges: edges whose tail op lies in the block's middle window.
        modes: per (stage, kind), the Pareto modes' durations (s) and costs E − s̄ · d (J).
        idle_total_w: S̄, W.
        block: P, microbatches per block.
        period_max_s: bound on the block's period Π, s.
        integer: a MILP (else its LP relaxation).

    Returns:
        A HiGHS instance holding the model (not yet run).
    """
    import highspy
    import scipy.sparse as sp

    from solvers.lp import highs_model

    keys = sorted({(ops[a].stage, ops[a].kind) for a, _ in edges})
    inst = [(s, k, r) for s, k in keys for r in range(block)]
    at = {x: j for j, x in enumerate(inst)}
    first, cost = [], []
    for s, k, _ in inst:
        first.append(len(cost))
        cost += modes[(s, k)][1].tolist()
    nx, n = len(cost), len(inst)
    offset, period = nx, nx + n
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    for j, (s, k, _) in enumerate(inst):  # one mode per task
        m = len(modes[(s, k)][0])
        rows += [len(lo)] * m
        cols += range(first[j], first[j] + m)
        vals += [1.0] * m
        lo.append(1.0)
        hi.append(1.0)
    seen = set()
    for a, b in edges:
        oa, ob = ops[a], ops[b]
        ja = at[(oa.stage, oa.kind, oa.microbatch % block)]
        jb = at[(ob.stage, ob.kind, ob.microbatch % block)]
        shift = ob.microbatch // block - oa.microbatch // block
        if (ja, jb, shift) in seen:
            continue
        seen.add((ja, jb, shift))
        r = len(lo)
        durations = modes[(oa.stage, oa.kind)][0]
        rows += [r] * (len(durations) + 3)
        cols += [*range(first[ja], first[ja] + len(durations)), offset + ja, offset + jb, period]
        vals += [*durations.tolist(), 1.0, -1.0, -float(shift)]
        lo.append(-highspy.kHighsInf)
        hi.append(0.0)
    ncol = period + 1
    matrix = sp.csc_matrix((vals, (rows, cols)), shape=(len(lo), ncol))
    matrix.sort_indices()
    col_lo = np.concatenate([np.zeros(nx), np.full(n, -highspy.kHighsInf), [0.0]])
    col_hi = np.concatenate([np.ones(nx), np.full(n, highspy.kHighsInf), [period_max_s]])
    col_lo[offset] = col_hi[offset] = 0.0  # start times are defined up to a translation
    objective = np.concatenate([cost, np.zeros(n), [idle_total_w]])
    return highs_model(
        objective,
        col_lo,
        col_hi,
        matrix,
        np.array(lo),
        np.array(hi),
        integer_columns=nx if integer else 0,
    )


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
    args = parser.parse_args(argv)

    import solvers
    from solvers.hull import pareto_modes
    from solvers.indexed import IndexedProblem
    from solvers.lp import HullLP

    S, M = args.stages, args.microbatches
    least = 2 * S + max(args.blocks)
    if least > M:
        parser.error(f"--microbatches must be at least 2 × stages + the largest block ({least})")
    profile = solver_scale.synthetic_profile(S, args.clocks, args.seed)
    dag = common.pipeline_dag(S, M)
    evaluator = common.PlanEvaluator(dag, profile, solver_scale.IDLE_POWER_W)
    deadline = args.factor * evaluator.uniform(solver_scale.MAX_CLOCK_MHZ).makespan_s
    built = common.build_problem(dag, profile, solver_scale.IDLE_POWER_W)
    ip = IndexedProblem(built.problem)
    lp = HullLP(ip)
    lp.set_deadline(deadline)
    point = lp.solve()
    bound = point.energy_bound(ip, deadline)

    ops = {op.id: op for op in dag.ops}
    index = {name: i for i, name in enumerate(ip.names)}
    by_key = {(op.stage, op.microbatch, op.kind): op for op in dag.ops}
    lo_m, hi_m = S, M - S  # every stage is in its steady phase for these microbatches
    start = point.starts[index[by_key[(0, lo_m, "forward")].name]]
    end = point.starts[index[by_key[(0, hi_m, "forward")].name]]
    period = (end - start) / (hi_m - lo_m)
    modes = {}
    for (s, m, k), op in by_key.items():
        if m == lo_m:
            i = index[op.name]
            keep = pareto_modes(ip.durations[i], ip.costs[i])
            modes[(s, k)] = (ip.durations[i][keep], ip.costs[i][keep])
    steady = M - 2 * (S - 1)
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
        middle = M // 2
        window = [(a, b) for a, b in dag.edges if middle <= ops[a].microbatch < middle + block]
        results = []
        for integer in (False, True):
            h = cyclic_model(
                ops, window, modes, ip.idle_total_w, block, block * period, integer=integer
            )
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
