"""eopt's solvers vs lowtime 0.3.0 on the synthetic 1F1B inputs of ``lowtime_bench/``.

For each case (default ``s4_m8_u1ms`` and ``s8_m32_u1ms``) on the SAME DAG and
profile: eopt's plan frontier (``solvers.frontier``) and single-deadline solves
(``solvers.solve``, methods ``relax`` and ``auto``) at D = factor × T_allmax, beside
lowtime's best plan (oracle: lowest true energy among lowtime plans whose TRUE
makespan ≤ D), lowtime's lookup plan (the slowest plan whose PREDICTED makespan ≤ D,
what a Perseus user deploys; late when its true makespan exceeds D) and the exact
MILP reference of the data README. Every eopt plan is re-evaluated here from the
measured profile, independently of the solver's own numbers.

By default lowtime's frontier is the stored ``frontier.csv`` (lowtime's measured
output, true numbers recomputed from the profile); ``--rerun-lowtime`` runs lowtime
itself in ``benchmarks/.venv-lowtime`` (≈ 5 s on 4 × 8, ≈ 300 s on 8 × 32).

``--smoke`` solves the 4 × 8 case of ``tests/data`` at two deadlines with ``relax``
(a 20-point frontier), against lowtime's stored deadline table (``summary.json``; the
stored ``frontier.csv`` is not in ``tests/data``).

Examples:
    python3 benchmarks/lowtime_synthetic.py
    python3 benchmarks/lowtime_synthetic.py --case s4_m8_u1ms --rerun-lowtime
    python3 benchmarks/lowtime_synthetic.py --strict      # exit 1 on any FAIL
    python3 benchmarks/lowtime_synthetic.py --smoke       # seconds, repository data only

Targets (8 × 32): frontier ≥ 100 points from the fastest to the energy-minimizing
makespan in ≤ 3 s of CPU, never late, energy ≤ lowtime's best plan at every deadline; single
deadline within 0.25 % of the best certified bound (the larger of the solves' own bounds
and the MILP bounds proven by ``solver_gap_study.py``, ``results/solver_gap_*.json``)
in ≤ 10 s.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

FACTORS = (1.00, 1.02, 1.05, 1.10, 1.20, 1.30, 1.50)
DEFAULT_CASES = ("s4_m8_u1ms", "s8_m32_u1ms")
TARGET_CASE = "s8_m32"  # the case the targets are stated for
FRONTIER_MIN_POINTS = 100
FRONTIER_MAX_S = 3.0
SOLVE_MAX_GAP = 0.0025
SOLVE_MAX_S = 10.0
# --smoke: the case shipped in tests/data, two deadlines of its stored lowtime table.
SMOKE = {"cases": ["s4_m8_u1ms"], "factors": [1.00, 1.20], "methods": ["relax"]}
SMOKE_FRONTIER_POINTS = 20
SMOKE_TIME_LIMIT_S = 10.0


def proven_bounds(case: str) -> dict[float, float]:
    """MILP bounds proven by ``solver_gap_study.py`` runs (``results/solver_gap_*.json``)
    for `case`: deadline factor → bound, J (the highest where several runs exist)."""
    out: dict[float, float] = {}
    for path in sorted((common.REPO_DIR / "benchmarks" / "results").glob("solver_gap_*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if data.get("case") != case:
            continue
        for run in data.get("runs", []):
            bound = (run.get("milp") or {}).get("bound_j")
            if isinstance(bound, (int, float)) and math.isfinite(bound):
                key = round(float(run["factor"]), 4)
                out[key] = max(out.get(key, -math.inf), float(bound))
    return out


def stored_lowtime(case_dir: Path) -> common.LowtimeRun:
    """lowtime's stored frontier (``frontier.csv``): predicted and true numbers per iteration."""
    path = case_dir / "frontier.csv"
    plans = []
    with path.open(newline="", encoding="utf-8") as handle:
        for lineno, row in enumerate(csv.DictReader(handle), start=2):
            try:
                true = common.TrueResult(
                    float(row["true_makespan_s"]),
                    float(row["true_total_energy_j"]),
                    float(row["true_compute_energy_j"]),
                )
                plans.append(
                    common.LowtimePlan(
                        int(row["iteration"]),
                        float(row["lowtime_pred_makespan_s"]),
                        float(row["lowtime_pred_total_energy_j"]),
                        None,
                        true,
                    )
                )
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{path}:{lineno}: {exc!r}") from None
    summary = json.loads((case_dir / "summary.json").read_text(encoding="utf-8"))
    return common.LowtimeRun(
        plans,
        fit_s=summary.get("fit_seconds", math.nan),
        solve_s=summary.get("solve_seconds", math.nan),
        origin=f"stored lowtime {summary.get('lowtime_version', '?')} output ({path.name})",
    )


def stored_lowtime_table(case_dir: Path) -> common.LowtimeRun:
    """lowtime's plans named in ``summary.json``'s deadline table: per deadline its best
    plan (true numbers only) and its lookup plan (predicted makespan and true numbers).

    ``best_within`` and ``lookup`` give the stored answers at the table's own deadlines:
    each stored best is the lowest true energy among all lowtime plans within its
    deadline, and each lookup the slowest predicted plan, so no other stored plan beats
    them there. At other deadlines they only bound lowtime's answer.
    """
    path = case_dir / "summary.json"
    summary = json.loads(path.read_text(encoding="utf-8"))
    plans: list[common.LowtimePlan] = []
    for index, row in enumerate(summary.get("deadlines", [])):
        try:
            plans += _table_plans(row)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"{path}: deadlines[{index}]: {exc!r}; expected lowtime_bench's summary.json"
            ) from None
    return common.LowtimeRun(
        plans,
        fit_s=summary.get("fit_seconds", math.nan),
        solve_s=summary.get("solve_seconds", math.nan),
        origin=(
            f"stored lowtime {summary.get('lowtime_version', '?')} deadline table "
            f"({path.name}: {len(plans) // 2} deadlines' best and lookup plans)"
        ),
    )


def _table_plans(row: dict[str, Any]) -> list[common.LowtimePlan]:
    """One deadline row of ``summary.json``: lowtime's best plan and its lookup plan."""
    best = common.TrueResult(
        float(row["lowtime_best_true_T_s"]), float(row["lowtime_best_true_E_j"]), math.nan
    )
    look = common.TrueResult(float(row["lookup_true_T_s"]), float(row["lookup_true_E_j"]), math.nan)
    return [
        # A best plan's predicted makespan is not stored: lookup must never pick it.
        common.LowtimePlan(int(row["lowtime_best_iter"]), math.inf, math.nan, None, best),
        common.LowtimePlan(
            int(row["lookup_iter"]), float(row["lookup_pred_T_s"]), math.nan, None, look
        ),
    ]


def milp_reference(case_dir: Path) -> dict[float, str]:
    """factor → the README's MILP column ("2033.7 J (optimal)"), or summary.json's MILP."""
    out: dict[float, str] = {}
    summary = json.loads((case_dir / "summary.json").read_text(encoding="utf-8"))
    for row in summary.get("deadlines", []):
        milp = row.get("milp")
        if milp:
            gap = (milp["objective_j"] - milp["dual_bound_j"]) / milp["objective_j"]
            out[round(row["factor"], 4)] = f"{milp['total_energy_j']:.1f} J (gap {gap:.2%})"
    s, m = (int(x) for x in re.findall(r"s(\d+)_m(\d+)", case_dir.name)[0])
    readme = (case_dir.parent / "README.md").read_text(encoding="utf-8")
    section = re.search(rf"^{s} × {m} \(.*?(?=^\S.*\(T_allmax|\Z)", readme, re.M | re.S)
    if section:
        for line in section.group(0).splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 4 and cells[0].endswith("×"):
                try:
                    factor = round(float(cells[0].rstrip("×")), 4)
                except ValueError:
                    continue
                out.setdefault(factor, cells[3])
    return out


def milp_energy(text: str | None) -> float | None:
    """The energy (J) in a MILP reference cell."""
    found = re.match(r"\s*([\d.]+) J", text or "")
    return float(found.group(1)) if found else None


def run_case(case: str, args: argparse.Namespace, verdicts: common.Verdicts) -> dict[str, Any]:
    """Benchmark one ``lowtime_bench`` case; print tables and verdicts; return the numbers."""
    case_dir = common.data_dir() / "lowtime_bench" / case
    dag = common.read_lowtime_dag(case_dir / "dag.json")
    meta = json.loads((case_dir / "dag.json").read_text(encoding="utf-8"))
    p_block, unit = float(meta["p2p_power_w"]), float(meta["unit_time_s"])
    profile = common.read_stage_profile(case_dir / "profile.csv")
    evaluator = common.PlanEvaluator(dag, profile, p_block)
    allmax = evaluator.uniform(evaluator.max_clock())
    label = f"{dag.num_stages} × {dag.num_microbatches} ({case})"
    is_target = case.startswith(TARGET_CASE)
    print(f"\n=== {label}: {len(dag.ops)} ops, {len(dag.edges)} edges, P_block {p_block} W")
    print(f"T_allmax = {allmax.makespan_s:.4f} s, E_allmax = {allmax.energy_j:.1f} J")
    own = common.build_1f1b_dag(dag.num_stages, dag.num_microbatches)
    verdicts.check(
        own.keyed_edges() == dag.keyed_edges(),
        f"{label}: dag.json is the design's 1F1B DAG (same precedence edges)",
    )

    # ---- lowtime ------------------------------------------------------------------
    if common.is_smoke() and not (case_dir / "frontier.csv").exists():
        common.smoke_skip(
            "lowtime's whole stored frontier",
            f"no frontier.csv in {case_dir}; its deadline table instead",
        )
        lowtime = stored_lowtime_table(case_dir)
    else:
        lowtime = stored_lowtime(case_dir)
    if args.rerun_lowtime:
        print(f"running lowtime on {case} (unit {unit * 1e3:g} ms) …", flush=True)
        rerun = common.run_lowtime(dag, case_dir / "profile.csv", p_block, unit, evaluator)
        if rerun.error:
            print(f"lowtime failed: {rerun.error}")
        same = len(rerun.plans) == len(lowtime.plans) and all(
            math.isclose(a.true.energy_j, b.true.energy_j, rel_tol=1e-9)
            and math.isclose(a.pred_makespan_s, b.pred_makespan_s, rel_tol=1e-9)
            for a, b in zip(rerun.plans, lowtime.plans, strict=False)
        )
        print(
            f"lowtime here: {len(rerun.plans)} plans, fit {rerun.fit_s:.2f} s, "
            f"solve {rerun.solve_s:.1f} s; stored: {len(lowtime.plans)} plans, "
            f"solve {lowtime.solve_s:.1f} s"
        )
        verdicts.check(same, f"{label}: lowtime rerun reproduces the stored frontier.csv")
        lowtime = rerun
    print(f"lowtime: {lowtime.origin}, {len(lowtime.plans)} plans")
    milp = milp_reference(case_dir)
    factors = args.factors

    result: dict[str, Any] = {
        "case": case,
        "t_allmax_s": allmax.makespan_s,
        "e_allmax_j": allmax.energy_j,
        "lowtime": {
            "origin": lowtime.origin,
            "plans": len(lowtime.plans),
            "solve_s": lowtime.solve_s,
        },
        "deadlines": [],
    }
    ref_rows = []
    for f in factors:
        deadline = f * allmax.makespan_s
        best, look = lowtime.best_within(deadline), lowtime.lookup(deadline)
        ref_rows.append((f, deadline, best, look, milp.get(round(f, 4))))

    # ---- eopt ---------------------------------------------------------------------
    missing = common.solvers_available()
    if missing:
        verdicts.check(False, f"{label}: eopt solvers not available: {missing}")
        _print_reference(label, ref_rows)
        return result
    import solvers

    built = common.build_problem(dag, profile, p_block)
    problem = built.problem
    fastest, fastest_s = common.timed(lambda: solvers.fastest_makespan(problem))
    emin, emin_s = common.timed(lambda: solvers.solve(problem, None, method="relax"))
    emin_true = evaluator.evaluate(built.freqs_of(emin.modes))
    print(
        f"eopt: fastest makespan {fastest:.4f} s ({fastest_s:.2f} s); energy-minimizing plan "
        f"{emin_true.energy_j:.1f} J at {emin_true.makespan_s:.4f} s ({emin_s:.2f} s, "
        f"{emin.status}, LB {emin.lower_bound:.1f} J)"
    )

    # The target is CPU seconds (the machines are shared); wall time is reported beside.
    cpu_started = time.process_time()
    frontier, frontier_wall_s = common.timed(
        lambda: solvers.frontier(problem, num_points=args.frontier_points, method="relax")
    )
    frontier_s = time.process_time() - cpu_started
    points = [(p, evaluator.evaluate(built.freqs_of(p.modes))) for p in frontier]
    mismatch = max(
        (
            abs(t.energy_j - p.energy) / t.energy_j + abs(t.makespan_s - p.makespan) / t.makespan_s
            for p, t in points
        ),
        default=0.0,
    )
    print(
        f"eopt frontier: {len(points)} points in {frontier_s:.2f} s CPU "
        f"({frontier_wall_s:.2f} s wall), makespans "
        f"{points[0][1].makespan_s:.4f} … {points[-1][1].makespan_s:.4f} s, energies "
        f"{points[0][1].energy_j:.1f} … {points[-1][1].energy_j:.1f} J"
        if points
        else f"eopt frontier: no points ({frontier_s:.2f} s CPU)"
    )
    result["frontier"] = {
        "points": len(points),
        "cpu_s": frontier_s,
        "wall_s": frontier_wall_s,
        "makespans_s": [t.makespan_s for _, t in points],
        "energies_j": [t.energy_j for _, t in points],
    }

    # Whole-frontier comparison: every lowtime plan vs the best eopt point not slower.
    excess = []
    for plan in lowtime.plans:
        ok = [t.energy_j for _, t in points if t.makespan_s <= plan.true.makespan_s * (1 + 1e-12)]
        if ok:
            excess.append(min(ok) - plan.true.energy_j)
    beaten = sum(1 for e in excess if e <= 1e-6)
    if excess:
        print(
            f"every lowtime plan vs the best eopt frontier point no slower: eopt lower or "
            f"equal for {beaten}/{len(excess)}, worst eopt excess {max(excess):+.1f} J, "
            f"median {sorted(excess)[len(excess) // 2]:+.1f} J"
        )

    methods = args.methods
    proven = proven_bounds(case)
    solve_rows, cmp_rows = [], []
    worst: dict[str, tuple[float, float, float]] = {}  # method → (gap, wall, factor)
    late_any, above_lowtime = [], []
    for f, deadline, best, look, milp_text in ref_rows:
        entry: dict[str, Any] = {"factor": f, "deadline_s": deadline}
        on_front = [t for _, t in points if t.makespan_s <= deadline * (1 + 1e-12)]
        front_best = min(on_front, key=lambda t: t.energy_j) if on_front else None
        entry["frontier_energy_j"] = front_best.energy_j if front_best else None
        solved: dict[str, common.TrueResult] = {}
        for method in methods:
            try:
                sol, wall = common.timed(
                    lambda d=deadline, m=method: common.solve(problem, d, m, args.time_limit)
                )
            except solvers.SolverError as exc:
                solve_rows.append((f"{f:.2f}×", method, f"error: {exc}", "", "", "", "", "", ""))
                verdicts.check(False, f"{label} {f:.2f}× {method}: solver error {exc}")
                continue
            true = evaluator.evaluate(built.freqs_of(sol.modes))
            solved[method] = true
            gap = true.gap_to(sol.lower_bound)
            late = common.is_late(true.makespan_s, deadline)
            if late:
                late_any.append(f"{f:.2f}× {method}")
            solve_rows.append(
                (
                    f"{f:.2f}×",
                    method,
                    common.fmt_j(true.energy_j),
                    f"{true.makespan_s:.4f}",
                    common.lateness(true.makespan_s, deadline),
                    common.fmt_j(sol.lower_bound),
                    common.fmt_pct(gap),
                    f"{wall:.2f}",
                    sol.status,
                )
            )
            entry[method] = {
                "energy_j": true.energy_j,
                "makespan_s": true.makespan_s,
                "late": late,
                "lower_bound_j": sol.lower_bound,
                "gap": gap,
                "wall_s": wall,
                "status": sol.status,
                "solver": sol.solver,
                "reported_energy_j": sol.energy,
            }
        # The best certified bound at this deadline: the solves' own (LP, or LP and the
        # MILP's proven bound for auto) and any stored MILP proof.
        bounds = [entry[m]["lower_bound_j"] for m in solved if m in entry]
        bounds.append(proven.get(round(f, 4), math.nan))
        finite = [b for b in bounds if math.isfinite(b)]
        best_bound = max(finite) if finite else math.nan
        entry["best_bound_j"] = best_bound
        for method, true in solved.items():
            to_best = true.gap_to(best_bound)
            entry[method]["gap_to_best_bound"] = to_best
            wall = entry[method]["wall_s"]
            prev = worst.get(method, (-1.0, 0.0, f))
            worst[method] = (
                max(prev[0], to_best),
                max(prev[1], wall),
                f if to_best > prev[0] else prev[2],
            )
        eopt_best = min((t.energy_j for t in solved.values()), default=None)
        if best is not None:
            for what, energy in (("frontier", entry["frontier_energy_j"]), ("solve", eopt_best)):
                if energy is None or energy > best.true.energy_j + 1e-6:
                    above_lowtime.append(f"{f:.2f}× {what}")
        cmp_rows.append(
            (
                f"{f:.2f}×",
                f"{deadline:.4f}",
                common.fmt_j(entry["frontier_energy_j"]),
                common.fmt_j(eopt_best),
                common.fmt_best(best),
                common.fmt_lookup(look, deadline),
                milp_text or "—",
                common.fmt_pct((eopt_best - best.true.energy_j) / best.true.energy_j, 2)
                if best and eopt_best
                else "—",
            )
        )
        entry["lowtime_best_j"] = best.true.energy_j if best else None
        entry["lowtime_lookup"] = (
            {
                "energy_j": look.true.energy_j,
                "makespan_s": look.true.makespan_s,
                "late": common.is_late(look.true.makespan_s, deadline),
            }
            if look
            else None
        )
        entry["milp_reference"] = milp_text
        result["deadlines"].append(entry)

    common.print_table(
        ["D", "method", "energy J", "makespan s", "late", "LB J", "gap", "wall s", "status"],
        solve_rows,
        f"{label}: eopt single-deadline solves (true numbers from the profile)",
    )
    common.print_table(
        [
            "D",
            "D s",
            "eopt frontier J",
            "eopt solve J",
            "lowtime best J @T",
            "lowtime lookup J (late)",
            "MILP ref (README)",
            "eopt vs lowtime best",
        ],
        cmp_rows,
        f"{label}: eopt vs lowtime (energy at each deadline)",
    )

    # ---- verdicts -----------------------------------------------------------------
    tag = "target" if is_target else "same target, informative"
    verdicts.check(
        mismatch < 1e-6,
        f"{label}: frontier points' reported makespan/energy equal the independent "
        f"evaluation (max rel. diff {mismatch:.1e})",
    )
    # A frontier is sorted by makespan and Pareto: each slower point costs less energy.
    front_late = [
        i
        for i in range(1, len(points))
        if not (
            points[i][1].makespan_s > points[i - 1][1].makespan_s
            and points[i][1].energy_j < points[i - 1][1].energy_j
        )
    ]
    spans = bool(points) and (
        math.isclose(points[0][1].makespan_s, fastest, rel_tol=1e-6)
        and points[-1][1].energy_j <= emin_true.energy_j * (1 + 1e-4)
    )
    verdicts.check(
        len(points) >= FRONTIER_MIN_POINTS
        and spans
        and frontier_s <= FRONTIER_MAX_S
        and not front_late,
        f"{label} [{tag}]: frontier {len(points)} points ({len(front_late)} out of order or "
        f"dominated) (≥ {FRONTIER_MIN_POINTS}) from the "
        f"fastest {fastest:.4f} s to the energy-minimizing plan "
        f"({'reached' if spans else 'NOT reached'}) in {frontier_s:.2f} s CPU "
        f"(≤ {FRONTIER_MAX_S:g} s)",
    )
    if lowtime.plans:
        verdicts.check(
            not above_lowtime,
            f"{label} [{tag}]: eopt energy ≤ lowtime's best plan at every deadline"
            + (f" (above at {', '.join(above_lowtime)})" if above_lowtime else ""),
        )
    verdicts.check(
        not late_any,
        f"{label} [{tag}]: never late (true makespan ≤ D for every solve and frontier pick)"
        + (f" (late: {', '.join(late_any)})" if late_any else ""),
    )
    for method, (gap, wall, f) in worst.items():
        verdicts.check(
            gap <= SOLVE_MAX_GAP and wall <= SOLVE_MAX_S,
            f"{label} [{tag}]: single deadline ({method}) worst gap to the best certified "
            f"bound {gap:.3%} at {f:.2f}× (≤ {SOLVE_MAX_GAP:.2%}), slowest solve {wall:.2f} s "
            f"(≤ {SOLVE_MAX_S:g} s)",
        )
    return result


def _print_reference(label: str, ref_rows: list[Any]) -> None:
    rows = [
        (
            f"{f:.2f}×",
            f"{d:.4f}",
            f"{common.fmt_j(b.true.energy_j)} @{b.true.makespan_s:.3f}" if b else "none",
            f"{common.fmt_j(lk.true.energy_j)} ({common.lateness(lk.true.makespan_s, d)})"
            if lk
            else "none",
            m or "—",
        )
        for f, d, b, lk, m in ref_rows
    ]
    common.print_table(
        ["D", "D s", "lowtime best J @T", "lowtime lookup J (late)", "MILP ref"],
        rows,
        f"{label}: references only",
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    parser = common.argument_parser(__doc__, 3)
    parser.add_argument(
        "--case",
        action="append",
        dest="cases",
        help=f"lowtime_bench folder (repeatable; default {' '.join(DEFAULT_CASES)})",
    )
    parser.add_argument(
        "--rerun-lowtime",
        action="store_true",
        help="run lowtime itself instead of reading its stored frontier.csv",
    )
    parser.add_argument(
        "--factors",
        type=lambda s: [float(x) for x in s.split(",")],
        default=list(FACTORS),
        help="deadline factors × T_allmax, comma-separated",
    )
    parser.add_argument(
        "--methods",
        type=lambda s: s.split(","),
        default=["relax", "auto"],
        help="solvers.solve methods, comma-separated (default relax,auto)",
    )
    parser.add_argument(
        "--frontier-points",
        type=int,
        default=FRONTIER_MIN_POINTS,
        help="num_points asked of solvers.frontier (default 100)",
    )
    common.add_report_options(parser, "lowtime_synthetic")
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    if common.enter_smoke(args):
        vars(args).update(SMOKE, frontier_points=SMOKE_FRONTIER_POINTS)
        args.time_limit = args.time_limit or SMOKE_TIME_LIMIT_S
        if args.rerun_lowtime:
            common.smoke_skip("--rerun-lowtime", "a smoke run never runs lowtime")
            args.rerun_lowtime = False
    verdicts = common.Verdicts()
    results = [run_case(case, args, verdicts) for case in (args.cases or DEFAULT_CASES)]
    verdicts.summary()
    if not args.no_save:
        path = common.write_results(
            "lowtime_synthetic", {"cases": results, "verdicts": verdicts.lines}
        )
        print(f"numbers written to {path.relative_to(common.REPO_DIR)}")
    return verdicts.exit_status(args.strict)


if __name__ == "__main__":
    common.run_main(main)
