"""Shared by the measured-run tests: a null-world library, a schedule of it, and one run
of that schedule on the simulated GPU recorded as ``eopt measure -o`` writes it."""

from __future__ import annotations

import json
from pathlib import Path

from eopt.check.runner import Job, SimElement, SimRunner
from eopt.check.workflow import characterize_element
from eopt.measure.regions import RegionEvent, RegionReport
from eopt.model.planfile import PlanDevice
from eopt.model.schedule import Schedule, ScheduledElement, write_schedule

KERNELS = {
    "fwd": SimElement("gemm", workload={"m": 1024, "n": 1024, "k": 1024}),
    "bwd": SimElement("gemm", workload={"m": 1024, "n": 2048, "k": 1024}),
}
ORDER = ["fwd", "bwd", "fwd", "bwd", "fwd", "bwd"]


def library(runs: int = 12) -> dict:
    """Null-context signatures of the element types, measured on the simulator."""
    runner = SimRunner(KERNELS, ["gpu0"], mechanisms="none")
    return {
        name: characterize_element(runner, name, "gpu0", runs, seed=11 * (k + 1))
        for k, name in enumerate(KERNELS)
    }


def schedule(sigs: dict) -> Schedule:
    """The element types back to back on one device, as ``eopt solve`` writes them."""
    elements, t = [], 0.0
    for i, kind in enumerate(ORDER):
        sig = sigs[kind]
        elements.append(
            ScheduledElement(
                name=f"{kind}[{i}]",
                type=kind,
                device="gpu0",
                start=t,
                duration=sig.time,
                energy=sig.energy,
                op_point=sig.op_point,
                dynamic_energy=sig.dynamic_energy,
                var_energy=sig.var_energy,
            )
        )
        t += sig.time
    energy = sum(e.energy for e in elements)
    return Schedule(
        elements=tuple(elements),
        devices=(PlanDevice("gpu0", 40.0),),
        makespan=t,
        energy=energy,
        device_model="A100-SXM4-40GB",
    )


def recorded_run(sched: Schedule, seed: int, scale: dict | None = None) -> RegionReport:
    """One run of ``sched`` on a fresh simulated GPU, each element call a region;
    ``scale`` multiplies the named elements' recorded energies (a deviation to find)."""
    runner = SimRunner(KERNELS, ["gpu0"], mechanisms="none")
    jobs = [Job(e.type, e.device, e.start, e.end) for e in sched.elements]
    records = runner.run(jobs, 2, seed).jobs[0]
    events = []
    for k, (e, rec) in enumerate(zip(sched.elements, records, strict=True)):
        energy = rec.energy_j * (scale or {}).get(e.name, 1.0)
        events.append(
            RegionEvent(
                name=e.name,
                path=e.name,
                depth=0,
                pid=1,
                start_s=rec.start_s,
                end_s=rec.start_s + rec.time_s,
                energy_j=energy,
                error_j=0.0,
                id=k + 1,
                parent_id=0,
            )
        )
    end = max(ev.end_s for ev in events)
    total = sum(ev.energy_j for ev in events)
    return RegionReport(
        regions=(),
        total_energy_j=total,
        total_time_s=end,
        outside_energy_j=0.0,
        outside_time_s=0.0,
        meter={"method": "counter"},
        events=tuple(events),
    )


def write_case(folder: Path, seed: int = 5, scale: dict | None = None) -> tuple[Path, Path, Path]:
    """(schedule.json, lib.jsonl, run.json) of one case in ``folder``."""
    sigs = library()
    sched = schedule(sigs)
    s_path, l_path, r_path = folder / "s.json", folder / "lib.jsonl", folder / "run.json"
    write_schedule(s_path, sched)
    l_path.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in sigs.values()))
    r_path.write_text(json.dumps(recorded_run(sched, seed, scale).to_dict()))
    return s_path, l_path, r_path
