"""A stand-in for torchrun: `python ranks.py N SCRIPT ARGS…` runs SCRIPT once per rank,
with RANK, LOCAL_RANK and WORLD_SIZE set, and exits with the first failure's status."""

import os
import subprocess
import sys

n, script, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
procs = [
    subprocess.Popen(
        [sys.executable, script, *args],
        env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n)},
    )
    for r in range(n)
]
codes = [p.wait() for p in procs]
sys.exit(next((c for c in codes if c), 0))
