"""Run docs/pytorch.md's script as a user would: torchrun, gloo on the CPU, simulated GPUs.

For 2 and 4 ranks: an `eopt demo` schedule of that many stages, three training steps of
docs/pytorch_1f1b.py under `torch.distributed.run`, and checks that every rank switched
clocks, kept the plan's order, entered every element, and that the loss fell. Needs
PyTorch (`pip install torch`; the CPU build is enough). Prints PASS/FAIL per rank count.

    python3 benchmarks/pytorch_guide_check.py
    python3 benchmarks/pytorch_guide_check.py --smoke    # 2 ranks only
"""

from __future__ import annotations

import argparse
import contextlib
import io
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


def demo_schedule(out: Path, stages: int, microbatches: int) -> Path:
    from eopt.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(
            [
                "demo",
                "--out",
                str(out),
                "--stages",
                str(stages),
                "--microbatches",
                str(microbatches),
                "-q",
            ]
        )
    return out / "schedule.json"


def check(ranks: int, tmp: Path) -> list[str]:
    """The problems found with ``ranks`` ranks (empty: it works)."""
    schedule = demo_schedule(tmp / f"demo{ranks}", ranks, 4)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PYTHONWARNINGS": "always::UserWarning",
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={ranks}",
            str(SCRIPT),
            str(schedule),
            "--backend",
            "sim",
            "--steps",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp,
    )
    output = proc.stdout + proc.stderr
    problems = []
    if proc.returncode != 0:
        return [f"exit status {proc.returncode}: {output[-2000:]}"]
    for rank in range(ranks):
        line = re.search(rf"^rank {rank} \(stage{rank}\): (\d+) switch", proc.stdout, re.M)
        if not line or int(line.group(1)) <= 3:
            problems.append(f"rank {rank} did not switch clocks")
    for phrase in ("out of the schedule's order", "never entered"):
        if phrase in output:
            problems.append(f"drift: {phrase}")
    losses = [float(x) for x in re.findall(r"^step \d+: loss ([0-9.]+)", proc.stdout, re.M)]
    if len(losses) != 3 or losses[-1] >= losses[0]:
        problems.append(f"the loss did not fall: {losses}")
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
