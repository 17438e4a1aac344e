"""The field note's DBSCAN comparison, recomputed by eopt from the raw H100 runs.

ArborX DBSCAN, ``fdbscan`` against ``fdbscan-dense``, region ``DBSCANCalculation``: the
first 34 of each variant's 64 runs (``kokkos_dbscan_h100/`` in the shared data). Prints
the medians under both edge conventions, the reductions with their bootstrap CIs, the
machine-state block and the comparison without it, next to the figures computed
independently by the note's method on the same 34 + 34 runs, and PASS/FAIL per figure.

    python3 benchmarks/kokkos_dbscan_compare.py            # ../shared/data or EOPT_DATA_DIR
    python3 benchmarks/kokkos_dbscan_compare.py --data DIR  # a folder with the two variants
    python3 benchmarks/kokkos_dbscan_compare.py --smoke     # the tests/data copy
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

from eopt.runs.compare import compare_runs
from eopt.runs.variants import load_variant

REPO = Path(__file__).resolve().parent.parent
REGION = "DBSCANCalculation"
# The reference: medians and reductions by the note's method on these 34 + 34 runs.
REFERENCE = {
    "a time s": 2.686,
    "a energy J": 777.4,
    "a power W": 289.0,
    "b time s": 2.299,
    "b energy J": 601.5,
    "b power W": 258.0,
    "time reduction": 0.14,
    "energy reduction": 0.23,
    "power reduction": 0.11,
}


def find_data(explicit: str | None) -> Path:
    """The folder holding ``fdbscan/`` and ``fdbscan-dense/`` (a smoke run: the copy in
    ``tests/data`` only)."""
    candidates = [Path(explicit)] if explicit else []
    if common.is_smoke():
        candidates = [common.TEST_DATA_DIR / "kokkos_dbscan_h100"]
    else:
        if env := os.environ.get("EOPT_DATA_DIR"):
            candidates.append(Path(env) / "kokkos_dbscan_h100")
        candidates += [
            REPO.parent / "shared" / "data" / "kokkos_dbscan_h100",
            common.TEST_DATA_DIR / "kokkos_dbscan_h100",
        ]
    for c in candidates:
        if (c / "fdbscan").is_dir() and (c / "fdbscan-dense").is_dir():
            return c
    sys.exit(f"no kokkos_dbscan_h100 data in {', '.join(map(str, candidates))}; use --data")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="folder with fdbscan/ and fdbscan-dense/")
    parser.add_argument("--resamples", type=int, default=2000)
    common.add_smoke_option(parser)
    args = parser.parse_args()
    common.enter_smoke(args)  # the same run, on the copy in tests/data
    data = find_data(args.data)
    t0 = time.perf_counter()
    results = {}
    for edges in ("inside", "interpolate"):
        a = load_variant(data / "fdbscan", REGION, edges=edges)  # type: ignore[arg-type]
        b = load_variant(data / "fdbscan-dense", REGION, edges=edges)  # type: ignore[arg-type]
        results[edges] = compare_runs(
            a, b, region=REGION, names=("fdbscan", "fdbscan-dense"), resamples=args.resamples
        )
    elapsed = time.perf_counter() - t0
    inside, interp = results["inside"], results["interpolate"]
    print(f"data: {data}  ({inside.a.n} + {inside.b.n} runs; {elapsed:.1f} s for both passes)\n")
    print(f"{'figure':<18}{'reference':>11}{'eopt inside':>13}{'eopt interp.':>14}  check")
    rows = [
        ("a time s", inside.a.median.time_s, interp.a.median.time_s, 0.0005),
        ("a energy J", inside.a.median.energy_j, interp.a.median.energy_j, 0.05),
        ("a power W", inside.a.median.power_w, interp.a.median.power_w, 0.5),
        ("b time s", inside.b.median.time_s, interp.b.median.time_s, 0.0005),
        ("b energy J", inside.b.median.energy_j, interp.b.median.energy_j, 0.05),
        ("b power W", inside.b.median.power_w, interp.b.median.power_w, 0.5),
        ("time reduction", inside.reduction.time.value, interp.reduction.time.value, 0.005),
        ("energy reduction", inside.reduction.energy.value, interp.reduction.energy.value, 0.005),
        ("power reduction", inside.reduction.power.value, interp.reduction.power.value, 0.005),
    ]
    failed = 0
    for name, got_inside, got_interp, tol in rows:
        ref = REFERENCE[name]
        ok = got_inside is not None and abs(got_inside - ref) <= tol
        failed += not ok
        print(
            f"{name:<18}{ref:>11.4g}{got_inside:>13.4g}{got_interp:>14.4g}  "
            f"{'PASS' if ok else 'FAIL'}"
        )
    print("\nreductions of the medians, 95 % bootstrap CIs (interpolated edges):")
    for what in ("time", "energy", "power"):
        r = getattr(interp.reduction, what)
        print(f"  {what:<7}{r.value:>8.1%}   CI {r.ci[0]:+.1%} … {r.ci[1]:+.1%}")
    for block in interp.state_blocks:
        runs = f"{block.runs[0]}–{block.runs[-1]}" if len(block.runs) > 1 else str(block.runs[0])
        print(
            f"\nstate block: {block.variant} runs {runs} ({len(block.runs)} runs): median "
            f"{block.median_time_s:.3f} s, mean {block.mean_power_w:.1f} W "
            f"({block.time_ratio:.2f}× time, {block.power_ratio:.2f}× power of the other runs)"
        )
    wb = interp.without_blocks
    if wb is not None:
        print(f"without the block ({wb.a.n} + {wb.b.n} runs):")
        for what in ("time", "energy", "power"):
            r = getattr(wb.reduction, what)
            print(f"  {what:<7}{r.value:>8.1%}   CI {r.ci[0]:+.1%} … {r.ci[1]:+.1%}")
        print(
            "  (the note's 64-run reference: 19 % time, 25 % energy; CIs 17.6–19.3 %, 24.9–26.0 %)"
        )
    print(f"\n{len(rows) - failed} passed, {failed} failed")
    if common.is_smoke():
        print(common.SMOKE_VERDICTS)
        return 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
