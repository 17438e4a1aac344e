"""Run docs/pytorch.md's loop as a user would: torchrun, gloo on the CPU, simulated GPUs.

For 2 and 4 ranks, docs/pytorch_1f1b.py, unchanged, under `torch.distributed.run` at every
stage: `eopt profile --sim` over three clocks, `eopt plan pipeline --library`, `eopt solve`,
`eopt apply --sim -o run.json` of one step, and `eopt check --measured`. Checks that the
library holds both kinds of every stage at every clock, that the run recorded every
element call of the schedule, that the loss fell over the profiled steps, and that the
check found no deviation. Needs PyTorch (`pip install torch`; the CPU build is enough).
Prints PASS/FAIL per rank count.

    python3 benchmarks/pytorch_guide_check.py
    python3 benchmarks/pytorch_guide_check.py --smoke    # 2 ranks only
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docs" / "pytorch_1f1b.py"
RANKS = (2, 4)
SMOKE_RANKS = (2,)


CLOCKS = "1410,1200,1005"
MICROBATCHES = 4


def _eopt(*argv: str, cwd: Path) -> tuple[int, str]:
    """``eopt ARGV`` in ``cwd`` (a subprocess, as a user types it); exit status and output."""
    proc = subprocess.run(
        [sys.executable, "-c", "from eopt.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
        env=_env(),
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }


def check(ranks: int, tmp: Path) -> list[str]:
    """The problems found with ``ranks`` ranks (empty: it works)."""
    here = tmp / f"ranks{ranks}"
    here.mkdir()
    kernels = "".join(
        f"stage{s}.{kind}: {{kernel: gemm, workload: {{m: 2048, n: {n}, k: 2048}}}}\n"
        for s in range(ranks)
        for kind, n in (("forward", 2048), ("backward", 4096))
    )
    (here / "k.yaml").write_text(kernels, encoding="utf-8")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={ranks}", str(SCRIPT)]  # fmt: skip
    sim = ("--sim", "--kernels", "k.yaml")
    steps = [
        ("profile", "profile", *sim, "--clocks", CLOCKS, "-o", "lib.jsonl", "--", *torchrun),
        ("plan", "plan", "pipeline", "--library", "lib.jsonl", "--stages", str(ranks),
         "--microbatches", str(MICROBATCHES), "--idle-power", "60W", "-o", "plan.yaml"),
        ("solve", "solve", "plan.yaml", "--slowdown", "5%", "-o", "schedule.json"),
        ("apply", "apply", "schedule.json", *sim, "-o", "run.json", "--", *torchrun,
         "--steps", "1"),
        ("check", "check", "schedule.json", "--measured", "run.json", "-o", "m.json"),
    ]  # fmt: skip
    outputs: dict[str, str] = {}
    for name, *argv in steps:
        code, out = _eopt(*argv, cwd=here)
        outputs[name] = out
        if code != 0:
            return [f"eopt {name}: exit status {code}: {out[-2000:]}"]
    problems = []
    lines = [json.loads(x) for x in (here / "lib.jsonl").read_text().splitlines() if x.strip()]
    cells = {(d["name"], d["op_point"].get("sm_clock_mhz")) for d in lines}
    wanted = {(f"stage{s}.{k}", float(c)) for s in range(ranks) for k in ("forward", "backward")
              for c in CLOCKS.split(",")}  # fmt: skip
    if not wanted <= cells:
        problems.append(f"the library lacks {sorted(wanted - cells)}")
    events = json.loads((here / "run.json").read_text()).get("events", [])
    if len(events) != ranks * 2 * MICROBATCHES:
        problems.append(
            f"run.json holds {len(events)} element calls, not {ranks * 2 * MICROBATCHES}"
        )
    losses = [float(x) for x in re.findall(r"^step \d+: loss ([0-9.]+)", outputs["profile"], re.M)]
    if len(losses) < 3 * len(CLOCKS.split(",")) or losses[2] >= losses[0]:
        problems.append(f"the loss did not fall over the profiled steps: {losses[:3]}")
    if json.loads((here / "m.json").read_text()).get("deviation") is not False:
        problems.append("eopt check --measured reported a deviation")
    return problems


def main() -> int:
    """Check each rank count; returns 1 when one fails, 2 without PyTorch."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_smoke_option(parser)
    args = parser.parse_args()
    ranks_to_check = SMOKE_RANKS if common.enter_smoke(args) else RANKS
    try:
        import torch  # noqa: F401
    except ImportError:
        print("PyTorch is not installed: pip install torch (the CPU build is enough)")
        return 2
    failed = 0
    with tempfile.TemporaryDirectory(prefix="eopt-guide-") as tmp:
        for ranks in ranks_to_check:
            problems = check(ranks, Path(tmp))
            failed += bool(problems)
            print(f"{ranks} ranks: {'PASS' if not problems else 'FAIL: ' + '; '.join(problems)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
