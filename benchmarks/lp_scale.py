"""The hull LP relaxation at scale: the network method against HiGHS, 256 to 65 536 tasks.

Synthetic 1F1B pipelines as ``benchmarks/solver_scale.py`` builds them (seeded profile,
30 SM clocks, idle power 75 W), sizes 4 × 32, 8 × 64, 16 × 128, 32 × 256 and 64 × 512
(stages × microbatches; 256 … 65 536 tasks), each at the deadline 1.10 × its fastest
makespan. For each size the LP (`solvers.lp.HullLP`) is built and solved cold by the
network method (`solvers.network`) and by HiGHS, in alternating runs; times are CPU
seconds (`time.process_time`) of the solve alone (the build is shown apart), the
fastest of the runs, with the spread (slowest / fastest) as a measure of the noise.
The bounds must agree to 1e-6 relative; the fitted exponent is the least-squares slope
of log CPU against log tasks.

Examples:
    python3 benchmarks/lp_scale.py
    python3 benchmarks/lp_scale.py --smoke
    python3 benchmarks/lp_scale.py --highs-max-tasks 16384 --repeats 2

Targets: 16 384 tasks in ≤ 3 s CPU; exponent ≤ 1.2 from 256 to 65 536 tasks; the
bound equal to HiGHS's to 1e-6 relative at every size.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common
from solver_scale import IDLE_POWER_W, synthetic_profile

#: (stages, microbatches) per size.
SIZES = ((4, 32), (8, 64), (16, 128), (32, 256), (64, 512))
CLOCKS = 30
DEADLINE_FACTOR = 1.10
TARGET_TASKS = 16_384
TARGET_S = 3.0
TARGET_EXPONENT = 1.2
TARGET_AGREEMENT = 1e-6


def build(stages: int, microbatches: int, seed: int) -> tuple[Any, float]:
    """The scaled indexed problem of one pipeline and its deadline (scaled units)."""
    from solvers.indexed import indexed
    from solvers.scaling import scaled
    from solvers.solve import fastest_plan

    profile = synthetic_profile(stages, CLOCKS, seed)
    dag = common.build_1f1b_dag(stages, microbatches)
    problem = common.build_problem(dag, profile, IDLE_POWER_W).problem
    ip = indexed(problem)
    t_fast, _ = fastest_plan(ip)
    sip = scaled(ip)
    return sip, DEADLINE_FACTOR * t_fast / sip.time_unit


def run_once(ip: Any, deadline: float, method: str) -> dict[str, float]:
    """Build and solve the LP once; CPU seconds of each and the bound (J)."""
    from solvers.lp import HullLP

    started = time.process_time()
    lp = HullLP(ip, method=method)
    built = time.process_time()
    lp.set_deadline(deadline)
    point = lp.solve()
    solved = time.process_time()
    if point is None:
        raise RuntimeError(f"{method}: the LP says the deadline {deadline:g} is infeasible")
    bound = point.energy_bound(ip, deadline) * ip.energy_unit
    return {"build_s": built - started, "solve_s": solved - built, "bound_j": bound}


def fitted_exponent(tasks: list[int], seconds: list[float]) -> float:
    """Least-squares slope of log seconds against log tasks."""
    if len(tasks) < 2:
        return math.nan
    return float(np.polyfit(np.log(tasks), np.log(seconds), 1)[0])


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    parser = common.argument_parser(__doc__, 3)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the two smallest sizes only, no targets, nothing written",
    )
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per size")
    parser.add_argument(
        "--highs-max-tasks",
        type=int,
        default=65_536,
        help="solve with HiGHS only up to this many tasks (its 65 536 take many minutes)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strict", action="store_true", help="exit 1 when any line FAILs")
    parser.add_argument(
        "--no-save", action="store_true", help="do not write benchmarks/results/lp_scale.json"
    )
    args = parser.parse_args(argv)
    missing = common.solvers_available()
    verdicts = common.Verdicts()
    if missing:
        verdicts.check(False, f"eopt solvers not available: {missing}")
        verdicts.summary()
        return 0 if args.smoke else verdicts.exit_status(args.strict)
    sizes = SIZES[:2] if args.smoke else SIZES
    if args.smoke:
        print("smoke run: the two smallest sizes, no targets, nothing written")
    rows, runs = [], []
    for stages, microbatches in sizes:
        ip, deadline = build(stages, microbatches, args.seed)
        n = ip.n
        methods = ["network"] + (["highs"] if n <= args.highs_max_tasks else [])
        # HiGHS's cold solve of tens of thousands of tasks takes minutes: once there.
        repeats = max(1, args.repeats if n <= 4096 else 1)
        found: dict[str, list[dict[str, float]]] = {m: [] for m in methods}
        for _ in range(repeats):
            for method in methods:  # alternating, so that a load change hits both
                found[method].append(run_once(ip, deadline, method))
        best = {m: min(found[m], key=lambda r: r["solve_s"]) for m in methods}
        spread = {
            m: max(r["solve_s"] for r in found[m]) / max(best[m]["solve_s"], 1e-9) for m in methods
        }
        net = best["network"]
        highs = best.get("highs")
        agreement = (
            abs(net["bound_j"] - highs["bound_j"]) / abs(highs["bound_j"]) if highs else math.nan
        )
        ratio = highs["solve_s"] / net["solve_s"] if highs else math.nan
        rows.append(
            (
                n,
                f"{stages} × {microbatches}",
                f"{net['build_s']:.3f}",
                f"{net['solve_s']:.3f}",
                f"{spread['network']:.2f}",
                "—" if highs is None else f"{highs['solve_s']:.3f}",
                "—" if highs is None else f"{spread['highs']:.2f}",
                "—" if highs is None else f"{ratio:.1f}×",
                f"{net['bound_j']:.6f}",
                "—" if highs is None else f"{agreement:.1e}",
            )
        )
        runs.append(
            {
                "tasks": n,
                "stages": stages,
                "microbatches": microbatches,
                "deadline_scaled": deadline,
                "runs": found,
                "network_solve_s": net["solve_s"],
                "highs_solve_s": None if highs is None else highs["solve_s"],
                "ratio": None if highs is None else ratio,
                "bound_j": net["bound_j"],
                "highs_bound_j": None if highs is None else highs["bound_j"],
                "agreement": None if highs is None else agreement,
            }
        )
        print(f"{n} tasks done", flush=True)
    common.print_table(
        [
            "tasks",
            "S × M",
            "build s",
            "network s",
            "spread",
            "HiGHS s",
            "spread",
            "ratio",
            "bound J",
            "agreement",
        ],
        rows,
        f"hull LP at 1.10 × the fastest makespan, CPU s (fastest of alternating runs; "
        f"spread = slowest / fastest), seed {args.seed}",
    )
    tasks = [r["tasks"] for r in runs]
    exponent = fitted_exponent(tasks, [r["network_solve_s"] for r in runs])
    highs_runs = [r for r in runs if r["highs_solve_s"] is not None]
    highs_exponent = fitted_exponent(
        [r["tasks"] for r in highs_runs], [r["highs_solve_s"] for r in highs_runs]
    )
    print(
        f"\nfitted exponent {tasks[0]}…{tasks[-1]} tasks: network {exponent:.2f}, "
        f"HiGHS {highs_exponent:.2f}"
    )
    if not args.smoke:
        at = next((r for r in runs if r["tasks"] == TARGET_TASKS), None)
        if at is not None:
            verdicts.check(
                at["network_solve_s"] <= TARGET_S,
                f"{TARGET_TASKS} tasks: {at['network_solve_s']:.2f} s CPU (≤ {TARGET_S:g} s)",
            )
        verdicts.check(
            exponent <= TARGET_EXPONENT and tasks[-1] >= 65_536,
            f"exponent {exponent:.2f} from {tasks[0]} to {tasks[-1]} tasks "
            f"(≤ {TARGET_EXPONENT}, to 65 536)",
        )
        for r in runs:
            if r["agreement"] is None:
                verdicts.check(False, f"{r['tasks']} tasks: no HiGHS bound to compare with")
            else:
                verdicts.check(
                    r["agreement"] <= TARGET_AGREEMENT,
                    f"{r['tasks']} tasks: bound agrees with HiGHS to {r['agreement']:.1e} "
                    f"(≤ {TARGET_AGREEMENT:g})",
                )
        verdicts.summary()
    if not (args.no_save or args.smoke):
        path = common.write_results(
            "lp_scale",
            {
                "clocks": CLOCKS,
                "deadline_factor": DEADLINE_FACTOR,
                "seed": args.seed,
                "repeats": args.repeats,
                "sizes": runs,
                "exponent": exponent,
                "highs_exponent": highs_exponent,
                "verdicts": verdicts.lines,
            },
        )
        print(f"numbers written to {path.relative_to(common.REPO_DIR)}")
    return 0 if args.smoke else verdicts.exit_status(args.strict)


if __name__ == "__main__":
    common.run_main(main)
