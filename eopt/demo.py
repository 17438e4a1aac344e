"""``eopt demo``: the whole product on the simulated GPU, in under a minute.

1. **Characterize**: sweep simulated pipeline-stage kernels (transformer forward and
   backward, two implementations each) and a gradient all-reduce over a grid of SM
   clocks with ``eopt.runs.sweep`` (static power, repeats, statistics) → a signature
   library. Stages 0…S−2 run the same layers, so one representative stage is measured for
   them (as in the Perseus profiles); the last stage, with the LM head, is measured on
   its own.
2. **Plan**: a 1F1B pipeline iteration of S stages × M microbatches, each stage ending
   with a data-parallel gradient all-reduce.
3. **Solve**: minimum energy with the makespan at most 5 % above the fastest one; also the
   plan's time–energy frontier.
4. **Report**: the schedule, the HTML report and a Perfetto trace.
5. **Act**: ``eopt apply --dry-run`` of the schedule against simulated GPUs, and the
   runtime controller driven through one iteration on them (switch counts and latency).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eopt.model.library import write_library
from eopt.model.signature import Signature
from eopt.plan.solve import Savings, savings

__all__ = ["DemoResult", "demo_clocks", "run_demo"]

Progress = Callable[[str, int, int], None]

# Stage kernels: `layers` transformer layers of a 4096-wide model, 2048 tokens per
# microbatch; the last stage carries the LM head (about one layer's worth more work).
BODY_WORKLOAD = {"batch": 1.0, "seq": 2048.0, "hidden": 4096.0, "layers": 4.0}
LAST_WORKLOAD = {**BODY_WORKLOAD, "layers": 5.0}
# fp16 gradients of a ~1B-parameter stage, reduced across 8 data-parallel replicas.
ALLREDUCE_WORKLOAD = {"bytes": 2.0 * 2**30, "world_size": 8.0}
STAGE_IMPLS = ("megatron", "eager")
ALLREDUCE_IMPLS = ("nccl_ring", "nccl_tree")


@dataclass(frozen=True)
class DemoResult:
    """What the demo produced and its headline numbers.

    Attributes:
        out_dir: Where the files are.
        files: Name → path of each file written (sweep: the measured cells; library:
            the cells named after the plan's element types; plan, schedule, frontier,
            report, trace).
        cells: Number of (κ, ω) cells measured.
        fastest_makespan_s: The fastest achievable iteration time, in s.
        deadline_s: The deadline solved for, in s.
        makespan_s: The schedule's iteration time, in s.
        energy_j: The schedule's predicted energy, in J.
        baseline_energy_j: The all-fastest plan's energy, in J.
        baseline_makespan_s: The all-fastest plan's iteration time, in s.
        gap: The certified optimality gap.
        solver: Solver name, method and status.
        dry_run: The lines `eopt apply --dry-run` prints.
        switches: Runtime-controller switch statistics (``SwitchStats.to_dict()``).
        wall_s: Wall time of the whole demo, in s.
        savings: The headline: saved at no slowdown, and what more the slowdown buys
            (``eopt.plan.solve.Savings``; None only for a schedule without it).
        apply_summary: The one line `eopt apply` says about the schedule.
    """

    out_dir: Path
    files: dict[str, Path]
    cells: int
    fastest_makespan_s: float
    deadline_s: float
    makespan_s: float
    energy_j: float
    baseline_energy_j: float
    baseline_makespan_s: float
    gap: float | None
    solver: dict[str, Any]
    dry_run: list[str]
    switches: dict[str, Any]
    wall_s: float
    savings: Savings | None = None
    apply_summary: str = ""

    @property
    def saved_j(self) -> float:
        """Energy saved against the all-fastest plan, in J."""
        return self.baseline_energy_j - self.energy_j

    @property
    def saved_fraction(self) -> float:
        """Saved energy as a fraction of the baseline."""
        return self.saved_j / self.baseline_energy_j

    @property
    def time_added_s(self) -> float:
        """Iteration time added against the all-fastest plan, in s."""
        return self.makespan_s - self.baseline_makespan_s

    @property
    def time_added_fraction(self) -> float:
        """Time added as a fraction of the baseline iteration time."""
        return self.time_added_s / self.baseline_makespan_s


def demo_clocks(
    supported_mhz: Sequence[float], count: int, low_fraction: float = 0.6
) -> list[float]:
    """``count`` supported SM clocks spread evenly from the highest down to
    ``low_fraction`` of it (lower clocks only cost energy on these kernels)."""
    table = sorted(set(supported_mhz), reverse=True)
    top = table[0]
    floor = top * low_fraction
    usable = [c for c in table if c >= floor]
    if count >= len(usable):
        return usable
    step = (len(usable) - 1) / (count - 1) if count > 1 else 0
    return sorted({usable[round(i * step)] for i in range(count)}, reverse=True)


def run_demo(
    out_dir: str | Path = "eopt-demo",
    *,
    stages: int = 4,
    microbatches: int = 8,
    slowdown: float = 0.05,
    clocks: int = 7,
    sim_model: str = "A100-SXM4-40GB",
    seed: int = 0,
    frontier_points: int = 12,
    progress: Progress | None = None,
) -> DemoResult:
    """Run the demo and write its files into ``out_dir``.

    The demo owns the files it writes in ``out_dir`` (names in :class:`DemoResult`):
    each run replaces them, and leaves every other file there alone.

    Args:
        out_dir: Output directory (created).
        stages: S, pipeline stages (one simulated GPU each).
        microbatches: M, microbatches per iteration.
        slowdown: Deadline above the fastest makespan (0.05 = 5 %).
        clocks: Number of SM clocks in the sweep.
        sim_model: Simulated GPU model.
        seed: Seed of the simulator's noise and the statistics.
        frontier_points: Deadlines swept for the plan frontier.
        progress: Called as ``progress(step, done, total)``.

    Returns:
        The files and headline numbers.
    """
    from eopt.devices import open_devices

    if stages < 2:
        raise ValueError(f"the demo pipeline needs at least 2 stages, got {stages}")
    if microbatches < 1:
        raise ValueError(f"microbatches must be ≥ 1, got {microbatches}")
    started = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = progress or (lambda step, done, total: None)
    files = {
        "sweep": out / "sweep.jsonl",
        "library": out / "signatures.jsonl",
        "plan": out / "plan.yaml",
        "schedule": out / "schedule.json",
        "frontier": out / "frontier.csv",
        "report": out / "report.html",
        "trace": out / "trace.json",
    }

    for path in files.values():  # a fresh run: the sweep would otherwise resume old cells
        path.unlink(missing_ok=True)

    # 1. Characterize on one simulated GPU ---------------------------------------------
    (gpu,) = open_devices(backend="sim", indices=[0], sim_model=sim_model, seed=seed)
    grid = demo_clocks(gpu.supported_sm_clocks_mhz(), clocks)
    signatures, idle_power_w = _characterize(
        gpu, sim_model, grid, stages, seed, files["sweep"], report
    )
    write_library(files["library"], signatures)

    # 2. Plan --------------------------------------------------------------------------
    plan = _pipeline_with_allreduce(stages, microbatches, idle_power_w, files["library"])
    from eopt.model.planfile import write_plan

    write_plan(files["plan"], plan)

    # 3. Solve -------------------------------------------------------------------------
    from eopt.model.library import Library
    from eopt.model.schedule import write_schedule
    from eopt.plan.problem import build_problem
    from eopt.plan.solve import plan_frontier, resolve_deadline, solve_plan

    library = Library(signatures)
    report("solve", 0, 2)
    pp = build_problem(plan, library)
    from solvers import fastest_makespan

    fastest = float(fastest_makespan(pp.problem))
    deadline = resolve_deadline(pp, slowdown=slowdown)
    assert deadline is not None
    schedule = solve_plan(plan, deadline=deadline, method="auto", gap=1e-3, library=library)
    write_schedule(files["schedule"], schedule)
    if schedule.solver.get("status") == "interrupted":
        # Ctrl-C during the solve: the best plan found is written; stop here rather than
        # spend the frontier, report and controller on it.
        raise KeyboardInterrupt
    report("solve", 1, 2)
    points, _ = plan_frontier(plan, num_points=frontier_points, method="relax", library=library)
    _write_frontier(files["frontier"], points)
    report("solve", 2, 2)

    # 4. Report ------------------------------------------------------------------------
    from eopt.report import read_frontier_csv, write_report, write_trace

    write_report(
        files["report"],
        schedule=schedule,
        library=signatures,
        frontier=read_frontier_csv(files["frontier"]),
        title=f"eopt demo: 1F1B pipeline, {stages} stages × {microbatches} microbatches "
        f"(simulated {gpu.model})",
        sources=[p.name for p in (files["library"], files["plan"], files["schedule"])],
    )
    write_trace(files["trace"], schedule)

    # 5. Act: dry run, then the runtime controller through one iteration ----------------
    dry_run, summary, switches = _act(schedule, sim_model, seed)

    base = schedule.baseline or {}
    return DemoResult(
        out_dir=out,
        files=files,
        cells=len(signatures),
        fastest_makespan_s=fastest,
        deadline_s=deadline,
        makespan_s=schedule.makespan,
        energy_j=schedule.energy,
        baseline_energy_j=float(base.get("energy", schedule.energy)),
        baseline_makespan_s=float(base.get("makespan", schedule.makespan)),
        gap=schedule.gap,
        solver=dict(schedule.solver),
        dry_run=dry_run,
        switches=switches,
        wall_s=time.perf_counter() - started,
        savings=savings(schedule),
        apply_summary=summary,
    )


def _characterize(
    gpu: Any,
    sim_model: str,
    grid: Sequence[float],
    stages: int,
    seed: int,
    sweep_path: Path,
    report: Progress,
) -> tuple[list[Signature], float]:
    """Sweep every (kernel, κ, ω) cell with ``eopt.runs.sweep``; returns the library (named
    after the plan's element types) and the idle power s̄ (W).

    Each cell is measured on a fresh simulated GPU seeded for that cell, as `eopt sweep`
    does: a cell's numbers do not depend on how warm the cells before it left the chip.
    """
    from eopt.measure.meter import Meter
    from eopt.runs.gpus import GpuSpec
    from eopt.runs.repeat import RepeatPolicy, measure_static_power
    from eopt.runs.sweep import Grid, parse_kernel, sweep

    # Short windows keep the demo fast: the simulated GPU has an energy counter (mJ), so
    # a window need not span ten power-sensor periods. Statistics still use ≥ 5 windows.
    # Eight warm-up windows (0.8 s busy) bring the chip out of the idle settle's
    # warm-up deficit first, as a schedule running back to back finds it.
    policy = RepeatPolicy(
        warmup=8,
        min_runs=5,
        min_time_s=0.5,
        min_window_s=0.1,
        settle_s=0.2,
        n_boot=200,
        seed=seed,
    )
    kernels = [
        parse_kernel(f"sim:{kernel}", params=workload, impls=impls, name=name)
        for name, kernel, impls, workload in [
            ("body.forward", "transformer_fwd", STAGE_IMPLS, BODY_WORKLOAD),
            ("body.backward", "transformer_bwd", STAGE_IMPLS, BODY_WORKLOAD),
            ("last.forward", "transformer_fwd", STAGE_IMPLS, LAST_WORKLOAD),
            ("last.backward", "transformer_bwd", STAGE_IMPLS, LAST_WORKLOAD),
            ("allreduce", "allreduce", ALLREDUCE_IMPLS, ALLREDUCE_WORKLOAD),
        ]
    ]
    total = len(grid) * sum(len(k.implementations()) for k in kernels)
    done_before = 0
    report("sweep", 0, total)
    measured: list[Signature] = []
    for kernel in kernels:
        cells = Grid(tuple(kernel.implementations()), tuple(grid))

        def progress(
            done: int, _total: int, _cell: object, _sig: object, base: int = done_before
        ) -> None:
            report("sweep", base + done, total)

        spec = GpuSpec("sim", gpu.index, sim_model, seed)
        result = sweep(kernel, cells, spec, sweep_path, policy=policy, progress=progress)
        measured.extend(result.signatures)
        done_before += len(cells)
    # s̄: the ready GPU's draw at its default setting (the sweep restored it) while a
    # stage waits for its neighbours.
    with Meter(gpu) as meter:
        idle_power_w = measure_static_power(gpu, meter, settle_s=policy.settle_s).power_w
    return _per_stage(measured, stages), idle_power_w


def _per_stage(measured: Sequence[Signature], stages: int) -> list[Signature]:
    """Name the measured cells after the plan's element types (``stage{s}.forward`` …)."""
    out: list[Signature] = []
    for sig in measured:
        role, _, kind = sig.name.partition(".")
        if role == "allreduce":
            out.append(sig)
            continue
        targets = [stages - 1] if role == "last" else list(range(stages - 1))
        for s in targets:
            meta = {**sig.meta, "profiled_as": sig.name}
            out.append(dataclasses.replace(sig, name=f"stage{s}.{kind}", term="", meta=meta))
    return out


def _pipeline_with_allreduce(
    stages: int, microbatches: int, idle_power_w: float, library_path: Path
) -> Any:
    """The 1F1B plan, each stage ending with a gradient all-reduce after its last backward."""
    from eopt.model.planfile import PlanElement
    from eopt.plan.pipeline import pipeline_plan

    plan = pipeline_plan(
        stages,
        microbatches,
        idle_power_w,
        schedule="1f1b",
        libraries=[library_path.name],
        name=f"demo-1f1b-s{stages}-m{microbatches}",
    )
    last_on: dict[str, str] = {}
    for element in plan.elements:
        last_on[element.device] = element.name
    extra = tuple(
        PlanElement(f"AR[s{s}]", f"stage{s}", "allreduce", (last_on[f"stage{s}"],))
        for s in range(stages)
    )
    return dataclasses.replace(plan, elements=plan.elements + extra)


def _write_frontier(path: Path, points: Sequence[Any]) -> None:
    from eopt.model.frontier_table import write_frontier_csv

    write_frontier_csv(path, [p.to_row() for p in points])  # `eopt solve --frontier`'s layout


def _act(schedule: Any, sim_model: str, seed: int) -> tuple[list[str], str, dict[str, Any]]:
    """The dry run on measure-only simulated GPUs, then the runtime controller through
    one iteration in start order on simulated GPUs (restored at the end)."""
    from eopt.apply import RuntimeController, plan_apply
    from eopt.apply.settings import resolve_gpu_map
    from eopt.devices import open_devices

    mapping = resolve_gpu_map(schedule)
    names = [d.name for d in schedule.devices]
    indices = [mapping[n] for n in names]
    watch = open_devices(backend="sim", indices=indices, sim_model=sim_model, control=False)
    plan = plan_apply(schedule, dict(zip(names, watch, strict=True)), mapping)
    lines = plan.lines()
    summary = plan.summary(done=False)

    gpus = open_devices(backend="sim", indices=indices, sim_model=sim_model, seed=seed)
    with RuntimeController(schedule, dict(zip(names, gpus, strict=True))) as ctl:
        for element in sorted(schedule.elements, key=lambda e: (e.start, e.device)):
            ctl.enter(element.name)
            ctl.wait_idle(10.0)  # one element at a time: every change is a real switch
        stats = ctl.stats()
    return lines, summary, stats.to_dict()
