"""How a sweep scales over GPUs on Ray: throughput against workers, and the cost per cell.

One grid (``sim:gemm``, its three implementations × ``--clocks`` SM clocks) is swept
serially and then by a local Ray runtime with 1, 2 and 4 simulated GPU workers, in two
kinds of kernel:

* **gpu-bound**: each invocation also takes ``--wall-scale`` wall seconds per simulated
  second (``SimKernel.wall_s_per_sim_s``), as a real GPU's kernels take time the CPU
  spends waiting: what a real node looks like;
* **cpu-bound**: the simulator alone, whose every simulated second is CPU work in the
  worker.

Rows give the sweep's wall time (the workers' start-up, in its own column, excluded),
the cells per second, the speed-up over one worker and the efficiency (speed-up over
workers). The overhead per cell is what a Ray worker adds to a cell over the serial
sweep (one worker's time per cell minus the serial time per cell), and the start-up is
what every Ray sweep pays once (workers importing eopt and opening their GPU).

Where scaling stops: a worker needs a CPU core for the simulator (and Python) while it
measures, so cpu-bound sweeps stop scaling at the machine's cores (2 on the reference
machine: 4 workers are no faster than 2); gpu-bound sweeps keep scaling while the cores
can keep up with the workers' CPU share (the simulator's bookkeeping between waits).
On a real node the limit is the GPU count: a worker waits on its GPU, not on a core.

    python3 benchmarks/sweep_scaling.py                 # ≈ 3 min on 2 cores
    python3 benchmarks/sweep_scaling.py --smoke         # one worker, a tiny grid

Needs Ray (``pip install 'eopt[ray]'``); without it only the serial rows run.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

from eopt.model.library import cell_key, read_library
from eopt.runs.gpus import GpuSpec
from eopt.runs.repeat import RepeatPolicy
from eopt.runs.sweep import Grid, SimKernel, parse_kernel, sweep

RESULTS = "sweep_scaling"
HEADERS = ("kernel", "run", "workers", "cells", "start s", "sweep s", "cells/s", "speed-up",
           "efficiency")  # fmt: skip
MODEL = "A100-SXM4-40GB"
SEED = 3
# Short windows: the benchmark is about elapsed time, not precision.
POLICY = RepeatPolicy(
    warmup=1, min_runs=3, min_time_s=0.0, min_window_s=0.2, settle_s=0.1, n_boot=100, seed=SEED
)


def _kernel(wall_scale: float) -> SimKernel:
    kernel = parse_kernel("sim:gemm")
    assert isinstance(kernel, SimKernel)
    return SimKernel(**{**kernel.__dict__, "wall_s_per_sim_s": wall_scale})


def _serial(kernel: SimKernel, grid: Grid, spec: GpuSpec, folder: Path) -> dict[str, Any]:
    path = folder / f"serial-{kernel.wall_s_per_sim_s:g}.jsonl"
    started = time.perf_counter()
    result = sweep(kernel, grid, spec, path, policy=POLICY)
    took = time.perf_counter() - started
    return {"run": "serial", "workers": 1, "cells": len(result.measured), "start_s": 0.0,
            "sweep_s": took, "path": str(path)}  # fmt: skip


def _on_ray(
    kernel: SimKernel, grid: Grid, spec: GpuSpec, workers: int, folder: Path
) -> dict[str, Any]:
    from eopt.runs.ray_sweep import ray_sweep

    path = folder / f"ray{workers}-{kernel.wall_s_per_sim_s:g}.jsonl"
    first: list[float] = []

    def progress(done: int, total: int, rates: Any) -> None:
        if not first:  # the first report comes once every worker has started
            first.append(time.perf_counter())

    started = time.perf_counter()
    result = ray_sweep(kernel, grid, spec.open(), spec, path, address=None, gpus=workers,
                       policy=POLICY, progress=progress)  # fmt: skip
    ended = time.perf_counter()
    ready = first[0] if first else started
    if result.failed:
        raise RuntimeError(f"{len(result.failed)} cells failed on Ray: {result.failed[0].error}")
    return {"run": "ray", "workers": workers, "cells": len(result.measured),
            "start_s": ready - started, "sweep_s": ended - ready, "path": str(path)}  # fmt: skip


def _same_cells(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether every run measured the serial run's cells with its numbers."""
    libraries = [{cell_key(s): (s.time, s.energy) for s in read_library(r["path"])} for r in rows]
    return all(lib == libraries[0] for lib in libraries[1:])


def main() -> int:
    parser = common.argument_parser(__doc__, 4)
    parser.add_argument(
        "--clocks",
        default="1410,1305,1200,1095,1005,900,810,705",
        help="SM clocks of the grid, MHz (default: 8 clocks, 24 cells)",
    )
    parser.add_argument("--workers", default="1,2,4", help="worker counts (default 1,2,4)")
    parser.add_argument(
        "--wall-scale",
        type=float,
        default=1.0,
        help="gpu-bound kernels: wall s per simulated s (default 1)",
    )
    parser.add_argument(
        "--no-save", action="store_true", help=f"do not write benchmarks/results/{RESULTS}.json"
    )
    common.add_smoke_option(parser)  # fmt: skip
    args = parser.parse_args()
    if common.enter_smoke(args):
        args.clocks, args.workers, args.wall_scale = "1410,900", "1", 0.2
    workers = [int(w) for w in args.workers.split(",") if w.strip()]
    if not workers or min(workers) < 1:
        raise ValueError(f"--workers {args.workers}: give counts ≥ 1, e.g. 1,2,4")
    spec = GpuSpec("sim", 0, MODEL, SEED)
    try:
        import ray  # noqa: F401  (only to know whether the Ray rows can run)

        have_ray = True
    except ImportError:
        have_ray = False
    rows: list[dict[str, Any]] = []
    checks: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="eopt-sweep-scaling-") as tmp:
        folder = Path(tmp)
        runtime = None
        if have_ray:
            from eopt.runs.ray_runtime import start_local_runtime

            runtime = start_local_runtime([str(i) for i in range(max(workers))])
        try:
            for mode, scale in (("gpu-bound", args.wall_scale), ("cpu-bound", 0.0)):
                kernel = _kernel(scale)
                grid = Grid.build(kernel, spec.open(), clocks=args.clocks)
                these = [_serial(kernel, grid, spec, folder)]
                if have_ray:
                    these += [_on_ray(kernel, grid, spec, w, folder) for w in workers]
                checks.append(_same_cells(these))
                for row in these:
                    row["kernel"] = mode
                rows += these
        finally:
            if runtime is not None:
                runtime.shutdown()
    table = []
    for row in rows:
        one = next(
            (r for r in rows if r["kernel"] == row["kernel"] and r["run"] == "ray"
             and r["workers"] == 1), None,
        )  # fmt: skip
        base = one["sweep_s"] if one else None
        speed = base / row["sweep_s"] if base and row["run"] == "ray" else None
        row["cells_per_s"] = row["cells"] / row["sweep_s"]
        row["speed_up"] = speed
        row["efficiency"] = speed / row["workers"] if speed else None
        table.append((row["kernel"], row["run"], row["workers"], row["cells"], row["start_s"],
                      row["sweep_s"], row["cells_per_s"], speed, row["efficiency"]))  # fmt: skip
    common.print_table(HEADERS, table, title=f"sweep of sim:gemm over {os.cpu_count()} cores")
    overhead = {}
    for mode in ("gpu-bound", "cpu-bound"):
        serial = next(r for r in rows if r["kernel"] == mode and r["run"] == "serial")
        one = next((r for r in rows if r["kernel"] == mode and r.get("workers") == 1
                    and r["run"] == "ray"), None)  # fmt: skip
        if one is None:
            continue
        per_cell = (one["sweep_s"] - serial["sweep_s"]) / serial["cells"]
        overhead[mode] = per_cell
        print(f"{mode}: a Ray worker adds {per_cell * 1e3:+.1f} ms per cell over the serial "
              f"sweep, and {one['start_s']:.1f} s to start")  # fmt: skip
    if not have_ray:
        print("Ray is not installed (pip install 'eopt[ray]'): serial rows only")
    print(f"every run measured the serial run's cells with its numbers: {all(checks)}")
    if not args.no_save:
        written = common.write_results(
            RESULTS,
            {"rows": [{k: v for k, v in r.items() if k != "path"} for r in rows],
             "overhead_per_cell_s": overhead, "cores": os.cpu_count(),
             "clocks": args.clocks, "wall_scale": args.wall_scale},
        )  # fmt: skip
        print(f"wrote {written}")
    return 0 if all(checks) else 1


if __name__ == "__main__":
    common.run_main(main)
