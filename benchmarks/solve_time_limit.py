"""Does `eopt solve --time-limit L` keep its promise on a large plan?

A chain of N elements on one GPU (default 8000), alternating GPT-3 stage-0 forward and
backward cells of Perseus's A100 profile (38 clocks each, `examples/gpt3-a100.csv`),
is written as a plan and solved with `eopt solve --slowdown 5% --time-limit L` in a
fresh process for each L. The table shows the whole command's wall time (Python start
and imports included), the part `eopt solve` charges to its limit, the status, the
energy and the gap; a refused run shows its one-line message.

The second table breaks the fixed costs down in-process: reading the plan file, building
the problem, indexing it (validation) and building the LP relaxation. These cannot be
interrupted; `eopt solve` checks its budget between them and refuses a limit they
exhaust, naming the limit that would do.

Examples:
    python3 benchmarks/solve_time_limit.py
    python3 benchmarks/solve_time_limit.py --elements 4000 --limits 2,5,20
    python3 benchmarks/solve_time_limit.py --smoke    # 200 elements, one 10-s limit
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "examples" / "gpt3-a100.csv"
IDLE_W = 83.64
SMOKE = {"elements": 200, "limits": [10.0]}


def write_chain(folder: Path, elements: int) -> Path:
    """The chain plan (YAML, as `eopt plan` writes plans) and its library; returns the plan."""
    from eopt.model.library import write_library
    from eopt.model.planfile import Plan, PlanDevice, PlanElement, write_plan
    from eopt.plan.perseus import read_perseus_profile

    types = ("stage0.forward", "stage0.backward")
    sigs = [s for s in read_perseus_profile(PROFILE, IDLE_W) if s.name in types]
    write_library(folder / "chain.signatures.jsonl", sigs)
    chain = tuple(
        PlanElement(f"e{i}", "gpu0", types[i % 2], (f"e{i - 1}",) if i else ())
        for i in range(elements)
    )
    plan = Plan(
        devices=(PlanDevice("gpu0", IDLE_W, 0),),
        elements=chain,
        libraries=("chain.signatures.jsonl",),
        name=f"chain{elements}",
    )
    path = folder / f"chain{elements}.yaml"
    write_plan(path, plan)
    return path


def run_cli(plan: Path, limit: float) -> dict[str, object]:
    """One `eopt solve` in a fresh process; its wall time and what it reported."""
    out = plan.with_name(f"schedule-{limit:g}.json")
    argv = [
        sys.executable, "-c", "from eopt.cli import main; main()",
        "solve", str(plan), "--slowdown", "5%", "--time-limit", f"{limit:g}s",
        "-o", str(out), "--force", "-q",
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    row: dict[str, object] = {"limit_s": limit, "wall_s": wall, "rc": done.returncode}
    if done.returncode == 0:
        data = json.loads(out.read_text(encoding="utf-8"))
        row.update(
            charged_s=data["meta"].get("wall_time_s"),
            status=data["solver"]["status"],
            energy_j=data["energy"]["predicted"],
            gap=data["gap"],
        )
    else:
        row["error"] = " ".join(done.stderr.split())
    return row


def fixed_costs(plan_path: Path) -> list[tuple[str, float]]:
    """Seconds of each stage that runs before any solver can stop on its own."""
    from eopt.model.planfile import read_plan
    from eopt.plan.problem import build_problem
    from solvers.indexed import indexed
    from solvers.lp import HullLP

    stages = []
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        stages.append((name, now - t))
        t = now

    plan = read_plan(plan_path)
    lap("read the plan (YAML)")
    pp = build_problem(plan)
    lap("build the problem")
    ip = indexed(pp.problem)
    lap("index and validate it")
    HullLP(ip)
    lap("build the LP relaxation")
    return stages


def main(argv: list[str] | None = None) -> int:
    """Print both tables; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=8000, help="chain length")
    parser.add_argument(
        "--limits",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[3.0, 10.0, 30.0],
        help="time limits in s, comma-separated (default 3,10,30)",
    )
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    if common.enter_smoke(args):
        vars(args).update(SMOKE)
    with tempfile.TemporaryDirectory() as tmp:
        plan = write_chain(Path(tmp), args.elements)
        print(f"=== {args.elements}-element chain, 38 clocks per element, --slowdown 5%")
        print(f"{'limit':>7} {'wall':>8} {'charged':>8}  {'status':<11} {'energy J':>10} gap")
        for limit in args.limits:
            row = run_cli(plan, limit)
            if row["rc"] != 0:
                print(f"{limit:>6g}s {row['wall_s']:>7.2f}s {'':>8}  refused: {row['error']}")
                continue
            gap = row["gap"]
            print(
                f"{limit:>6g}s {row['wall_s']:>7.2f}s {row['charged_s']:>7.2f}s  "
                f"{row['status']:<11} {row['energy_j']:>10.1f} "
                f"{'n/a' if gap is None else f'{gap:.4%}'}"
            )
        print("\nFixed costs before any solver can stop (in-process):")
        for name, seconds in fixed_costs(plan):
            print(f"  {name:<26} {seconds:6.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
