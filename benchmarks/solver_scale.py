"""eopt's solvers at scale: 16 stages × 128 microbatches × 30 clocks (4096 tasks).

The profile is synthetic, generated (seeded) the way ``lowtime_bench/README.md``
describes its own: t(f) = t_ref · (α · 1410/f + 1 − α) with α = 0.85 forward /
0.90 backward, P(f) = 105 W + P_dyn · (f/1410)^2.4 with P_dyn = 245 / 270 W,
±1 % noise on every measured time and power, per-stage imbalance (±5 % on t_ref,
+5 % on the first stage for the embedding, +20 % on the last for the LM head).
30 SM clocks from 1410 MHz down to 780 MHz; idle power 75 W on every GPU.

Each deadline D = factor × T_allmax is solved once per method; the table shows the
true energy and makespan (re-evaluated from the profile), the certified lower
bound, the gap and the wall time.

With ``--large``: 32 stages × 256 microbatches × 30 clocks (16 384 tasks), solved with a
110-s limit. Peak memory (the process's maximum resident set, `resource.getrusage`) is
reported for every run.

Examples:
    python3 benchmarks/solver_scale.py
    python3 benchmarks/solver_scale.py --large --methods relax
    python3 benchmarks/solver_scale.py --factors 1.05,1.1,1.2 --methods relax
    python3 benchmarks/solver_scale.py --stages 8 --microbatches 32 --clocks 10
    python3 benchmarks/solver_scale.py --smoke     # 4 × 8 × 5 clocks, relax, seconds

Targets: single deadline within 0.5 % of its lower bound in ≤ 60 s (16 × 128 × 30), in
≤ 120 s (32 × 256 × 30, `--large`); peak memory ≤ 4 GB.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

MAX_CLOCK_MHZ = 1410
MIN_CLOCK_MHZ = 780
IDLE_POWER_W = 75.0
T_REF_FORWARD_S = 0.042  # forward of one microbatch at 1410 MHz (as lowtime_bench)
BACKWARD_OVER_FORWARD = 2.0
ALPHA = {"forward": 0.85, "backward": 0.90}  # compute-bound share of the time
P_STATIC_W = 105.0
P_DYN_W = {"forward": 245.0, "backward": 270.0}
NOISE = 0.01
TARGET_GAP = 0.005
TARGET_S = 60.0
LARGE = {"stages": 32, "microbatches": 256, "clocks": 30, "time_limit": 110.0}
LARGE_TARGET_S = 120.0
TARGET_PEAK_BYTES = 4 * 2**30
SMOKE = {"stages": 4, "microbatches": 8, "clocks": 5, "methods": ["relax"], "large": False}
SMOKE_TIME_LIMIT_S = 10.0


def peak_rss_bytes() -> int:
    """The process's peak resident set so far, bytes (Linux reports KiB)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(kib) * (1 if sys.platform == "darwin" else 1024)


def synthetic_profile(num_stages: int, num_clocks: int, seed: int) -> common.StageProfile:
    """A seeded synthetic stage profile (see the module docstring for the model)."""
    rng = np.random.default_rng(seed)
    clocks = [round(f) for f in np.linspace(MAX_CLOCK_MHZ, MIN_CLOCK_MHZ, num_clocks)]
    imbalance = rng.uniform(0.95, 1.05, size=num_stages)
    imbalance[0] *= 1.05  # embedding
    imbalance[-1] *= 1.20  # LM head
    profile: common.StageProfile = {}
    for s in range(num_stages):
        for kind in common.KINDS:
            t_ref = (
                T_REF_FORWARD_S
                * imbalance[s]
                * (BACKWARD_OVER_FORWARD if kind == "backward" else 1.0)
            )
            options = []
            for f in clocks:
                a = ALPHA[kind]
                t = t_ref * (a * MAX_CLOCK_MHZ / f + 1 - a) * rng.uniform(1 - NOISE, 1 + NOISE)
                p = (P_STATIC_W + P_DYN_W[kind] * (f / MAX_CLOCK_MHZ) ** 2.4) * rng.uniform(
                    1 - NOISE, 1 + NOISE
                )
                options.append(common.OpOption(f, float(t), float(t * p)))
            profile[(s, kind)] = tuple(options)
    return profile


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    parser = common.argument_parser(__doc__, 3)
    parser.add_argument("--stages", type=int, default=16)
    parser.add_argument("--microbatches", type=int, default=128)
    parser.add_argument("--clocks", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--large",
        action="store_true",
        help="32 × 256 × 30 (16 384 tasks), 110-s limit, target 120 s",
    )
    parser.add_argument(
        "--factors",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[1.10],
        help="deadline factors × T_allmax (default 1.10)",
    )
    parser.add_argument(
        "--methods",
        type=lambda s: s.split(","),
        default=["relax", "auto"],
        help="solvers.solve methods, comma-separated (default relax,auto)",
    )
    parser.add_argument(
        "--save-profile", type=Path, help="also write the generated profile CSV here"
    )
    common.add_report_options(parser, "solver_scale")
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    if common.enter_smoke(args):
        vars(args).update(SMOKE)
        args.time_limit = args.time_limit or SMOKE_TIME_LIMIT_S
    target_s = TARGET_S
    if args.large:
        args.stages, args.microbatches, args.clocks = (
            LARGE["stages"],
            LARGE["microbatches"],
            LARGE["clocks"],
        )
        args.time_limit = args.time_limit or LARGE["time_limit"]
        target_s = LARGE_TARGET_S

    verdicts = common.Verdicts()
    (profile, dag), gen_s = common.timed(
        lambda: (
            synthetic_profile(args.stages, args.clocks, args.seed),
            common.pipeline_dag(args.stages, args.microbatches),
        )
    )
    if args.save_profile:
        common.write_stage_profile(args.save_profile, profile)
    evaluator = common.PlanEvaluator(dag, profile, IDLE_POWER_W)
    allmax = evaluator.uniform(MAX_CLOCK_MHZ)
    label = f"{args.stages} × {args.microbatches} × {args.clocks} clocks"
    print(
        f"=== {label}: {len(dag.ops)} tasks, {len(dag.edges)} edges (DAG from {dag.source}), "
        f"seed {args.seed}, built in {gen_s:.2f} s\n"
        f"T_allmax {allmax.makespan_s:.4f} s, E_allmax {allmax.energy_j:.1f} J"
    )
    missing = common.solvers_available()
    if missing:
        verdicts.check(False, f"{label}: eopt solvers not available: {missing}")
        verdicts.summary()
        return verdicts.exit_status(args.strict)
    import solvers

    built, build_s = common.timed(lambda: common.build_problem(dag, profile, IDLE_POWER_W))
    print(f"solvers.Problem built in {build_s:.2f} s")
    rows, runs = [], []
    for f in args.factors:
        deadline = f * allmax.makespan_s
        for method in args.methods:
            try:
                sol, wall = common.timed(
                    lambda d=deadline, m=method: common.solve(built.problem, d, m, args.time_limit)
                )
            except solvers.SolverError as exc:
                verdicts.check(False, f"{label} {f:.2f}× {method}: solver error {exc}")
                continue
            peak = peak_rss_bytes()
            true = evaluator.evaluate(built.freqs_of(sol.modes))
            gap = true.gap_to(sol.lower_bound)
            late = common.is_late(true.makespan_s, deadline)
            rows.append(
                (
                    f"{f:.2f}×",
                    f"{deadline:.4f}",
                    method,
                    common.fmt_j(true.energy_j),
                    f"{true.makespan_s:.4f}",
                    common.lateness(true.makespan_s, deadline),
                    common.fmt_j(sol.lower_bound),
                    common.fmt_pct(gap),
                    f"{wall:.1f}",
                    f"{peak / 2**30:.2f}",
                    sol.status,
                    sol.solver,
                )
            )
            run: dict[str, Any] = {
                "factor": f,
                "deadline_s": deadline,
                "method": method,
                "energy_j": true.energy_j,
                "makespan_s": true.makespan_s,
                "late": late,
                "lower_bound_j": sol.lower_bound,
                "gap": gap,
                "wall_s": wall,
                "peak_rss_bytes": peak,
                "status": sol.status,
                "solver": sol.solver,
                "message": sol.message,
            }
            runs.append(run)
            verdicts.check(
                gap <= TARGET_GAP and wall <= target_s and not late,
                f"{label} {f:.2f}× {method}: gap {gap:.3%} (≤ {TARGET_GAP:.1%}), "
                f"{wall:.1f} s (≤ {target_s:g} s), {'LATE' if late else 'on time'}",
            )
            verdicts.check(
                peak <= TARGET_PEAK_BYTES,
                f"{label} {f:.2f}× {method}: peak memory {peak / 2**30:.2f} GiB "
                f"(≤ {TARGET_PEAK_BYTES / 2**30:g} GiB)",
            )
    common.print_table(
        [
            "D",
            "D s",
            "method",
            "energy J",
            "makespan s",
            "late",
            "LB J",
            "gap",
            "wall s",
            "peak GiB",
            "status",
            "solver",
        ],
        rows,
        f"{label}: single-deadline solves (true numbers from the profile)",
    )
    verdicts.summary()
    if not args.no_save:
        path = common.write_results(
            "solver_scale_large" if args.large else "solver_scale",
            {
                "stages": args.stages,
                "microbatches": args.microbatches,
                "clocks": args.clocks,
                "seed": args.seed,
                "time_limit_s": args.time_limit,
                "t_allmax_s": allmax.makespan_s,
                "e_allmax_j": allmax.energy_j,
                "runs": runs,
                "verdicts": verdicts.lines,
            },
        )
        print(f"numbers written to {path.relative_to(common.REPO_DIR)}")
    return verdicts.exit_status(args.strict)


if __name__ == "__main__":
    common.run_main(main)
