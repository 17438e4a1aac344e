"""The hand-off matrix: for each file a command writes, each command that should read it
does. Everything runs through the `eopt` entry point in one scratch folder, on the
simulated GPU, at small sizes.

Rows are (the file, the command that reads it, what its output must show). The files
are made once per module by the commands that write them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from eopt.check.runner import Job, SimElement, SimRunner
from eopt.check.schedule_input import read_solved_for_check
from eopt.measure.regions import RegionEvent, RegionReport
from eopt.model.library import read_library
from tests.handoff.runner import run_eopt

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SWEEP = (
    "sweep", "sim:gemm", "--param", "m=1024", "--param", "n=1024", "--param", "k=1024",
    "--clocks", "1410,1005", "--impls", "cublas", "--warmup", "1", "--min-runs", "5",
    "--min-time", "0.05", "--min-window", "0.01", "-o", "sweep.jsonl", "-q",
)  # fmt: skip


def _recorded_run(folder: Path) -> None:
    """One run of the solved schedule on the simulated GPU, in `eopt measure -o`'s
    layout (one region per element call, named by the element): what a marked program
    run at its plan records."""
    lib = read_library(folder / "sweep.jsonl")
    solved = read_solved_for_check(folder / "s.json", lib)
    kernels = {}
    for name, sig in solved.signatures.items():
        workload = dict(sig.workload)
        kernel = str(workload.pop("kernel"))
        kernels[name] = SimElement(
            kernel, sig.impl, workload, sm_clock_mhz=sig.op_point.sm_clock_mhz
        )
    devices = list(solved.devices)
    runner = SimRunner(kernels, devices, mechanisms="none")
    jobs = [Job(p.signature.name, p.device, p.start, p.end) for p in solved.placements]
    records = runner.run(jobs, 2, seed=9).jobs[0]
    on_first = [i for i, p in enumerate(solved.placements) if p.device == devices[0]]
    events = tuple(
        RegionEvent(
            name=solved.element_names[i], path=solved.element_names[i], depth=0, pid=1,
            start_s=records[i].start_s, end_s=records[i].start_s + records[i].time_s,
            energy_j=records[i].energy_j, error_j=0.0, id=k + 1, parent_id=0,
        )
        for k, i in enumerate(on_first)
    )  # fmt: skip
    end = max(e.end_s for e in events)
    samples = ((0.0, 60.0), (end, 60.0))
    report = RegionReport(
        regions=(),
        total_energy_j=sum(e.energy_j for e in events),
        total_time_s=end,
        outside_energy_j=0.0,
        outside_time_s=0.0,
        meter={"method": "counter"},
        samples=samples,
        events=events,
    )
    (folder / "run.json").write_text(json.dumps(report.to_dict()))


#: How each file is made: the commands, in order (a callable for a recorded run).
MAKERS: dict[str, list[tuple[str, ...] | Callable[[Path], None]]] = {
    "sweep.jsonl": [SWEEP],
    "plan.yaml": [
        (
            "plan",
            "pipeline",
            "--library",
            "sweep.jsonl",
            "-S",
            "2",
            "-M",
            "2",
            "--type",
            "forward=gemm",
            "--type",
            "backward=gemm",
            "--idle-power",
            "50W",
            "-o",
            "plan.yaml",
            "-q",
        ),
    ],
    "s.json": [("solve", "plan.yaml", "--slowdown", "10%", "-o", "s.json", "-q")],
    "frontier.csv": [("frontier", "sweep.jsonl", "--csv", "frontier.csv", "-q")],
    "c.json": [
        (
            "check",
            "s.json",
            "--library",
            "sweep.jsonl",
            "--sim",
            "--mechanisms",
            "none",
            "--runs",
            "4",
            "--max-rounds",
            "0",
            "-o",
            "c.json",
            "-q",
        ),
    ],
    "g.json": [
        (
            "check",
            EXAMPLES / "check_schedule.yaml",
            "--sim",
            "--kernels",
            EXAMPLES / "check_kernels.yaml",
            "--write-graph",
            "g.json",
            "--write-library",
            "l.jsonl",
            "-q",
        ),
    ],
    "run.json": [_recorded_run],
    "m.json": [
        (
            "check",
            "s.json",
            "--measured",
            "run.json",
            "--library",
            "sweep.jsonl",
            "-o",
            "m.json",
            "-q",
        )
    ],
    "a.json": [("attribute", "run.json", "--calls", "-o", "a.json", "-q")],
}
#: What a file needs made first.
NEEDS = {
    "plan.yaml": ["sweep.jsonl"],
    "s.json": ["plan.yaml"],
    "frontier.csv": ["sweep.jsonl"],
    "c.json": ["s.json"],
    "run.json": ["s.json"],
    "m.json": ["run.json"],
    "a.json": ["run.json"],
    "l.jsonl": ["g.json"],
}


class World:
    """The scratch folder, making each file on first use."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.made: set[str] = set()

    def need(self, name: str) -> Path:
        for before in NEEDS.get(name, []):
            self.need(before)
        if name not in self.made:
            for step in MAKERS.get(name, []):
                if callable(step):
                    step(self.folder)
                else:
                    assert run_eopt(*step) == 0, f"making {name}: eopt {' '.join(map(str, step))}"
            self.made.add(name)
        path = self.folder / name
        assert path.exists(), f"{name} was not written"
        return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    folder = tmp_path_factory.mktemp("handoff")
    here = os.getcwd()
    os.chdir(folder)
    try:
        yield World(folder)
    finally:
        os.chdir(here)


def _json(path: str) -> dict:
    return json.loads(Path(path).read_text())


def _html_has(*words: str) -> Callable[[Path], None]:
    def check(folder: Path) -> None:
        html = (folder / "r.html").read_text()
        for w in words:
            assert w in html, w

    return check


def _schema(file: str, schema: str) -> Callable[[Path], None]:
    def check(folder: Path) -> None:
        assert _json(str(folder / file))["schema"] == schema

    return check


def _trace_has(name: str) -> Callable[[Path], None]:
    def check(folder: Path) -> None:
        data = _json(str(folder / "t.json"))
        items = data["traceEvents"] if isinstance(data, dict) else data
        assert any(name in str(e.get("name", "")) for e in items), name

    return check


def _no_deviation(file: str) -> Callable[[Path], None]:
    def check(folder: Path) -> None:
        data = _json(str(folder / file))
        assert data["schema"] == "eopt.check/1" and data["deviation"] is False

    return check


def _measured(file: str, elements: int) -> Callable[[Path], None]:
    """A measured check of every recorded element (a sweep's windows average many
    back-to-back calls, so whether single calls agree is not this row's question)."""

    def check(folder: Path) -> None:
        data = _json(str(folder / file))
        assert data["schema"] == "eopt.check/1" and data["mode"] == "measured"
        assert len(data["elements"]) == elements and isinstance(data["deviation"], bool)

    return check


def _plan_types(*types: str) -> Callable[[Path], None]:
    def check(folder: Path) -> None:
        from eopt.model.planfile import read_plan

        assert set(read_plan(folder / "p2.yaml").types()) == set(types)

    return check


def _frontier_rows(folder: Path) -> None:
    lines = (folder / "frontier.csv").read_text().splitlines()
    assert len(lines) >= 2 and "gemm" in lines[1]


# (file, reading command, check of what it wrote)
MATRIX = [
    ("sweep.jsonl", ("frontier", "sweep.jsonl", "--csv", "frontier.csv", "-q"), _frontier_rows),
    ("sweep.jsonl", ("report", "--library", "sweep.jsonl", "-o", "r.html", "--force"),
     _html_has("gemm")),
    ("sweep.jsonl", ("plan", "pipeline", "--library", "sweep.jsonl", "-S", "1", "-M", "1",
                     "--type", "forward=gemm", "--type", "backward=gemm", "--idle-power", "50W",
                     "-o", "p2.yaml", "--force", "-q"), _plan_types("gemm")),
    ("plan.yaml", ("solve", "plan.yaml", "-o", "s2.json", "--force", "-q"),
     _schema("s2.json", "eopt.schedule/1")),
    ("s.json", ("check", "s.json", "--library", "sweep.jsonl", "--sim", "--mechanisms", "none",
                "--runs", "4", "--max-rounds", "0", "-o", "c2.json", "--force", "-q"),
     _schema("c2.json", "eopt.check/1")),
    ("s.json", ("report", "--schedule", "s.json", "-o", "r.html", "--force"),
     _html_has("F[s0,m0]")),
    ("s.json", ("trace", "s.json", "-o", "t.json", "--force"), _trace_has("F[s0,m0]")),
    ("s.json", ("compose", "sweep.jsonl", "--schedule", "s.json", "--json"), None),
    ("s.json", ("apply", "s.json", "--dry-run"), None),
    ("frontier.csv", ("report", "--frontier", "frontier.csv", "-o", "r.html", "--force"),
     _html_has("frontier")),
    ("c.json", ("report", "--check", "c.json", "-o", "r.html", "--force"),
     _html_has("Prediction check")),
    ("g.json", ("check", EXAMPLES / "check_schedule.yaml", "--sim", "--kernels",
                EXAMPLES / "check_kernels.yaml", "--graph", "g.json", "--library", "l.jsonl",
                "--seed", "3", "-o", "c3.json", "--force", "-q"), _no_deviation("c3.json")),
    ("g.json", ("solve", "plan.yaml", "--graph", "g.json", "-o", "s3.json", "--force", "-q"),
     _schema("s3.json", "eopt.schedule/1")),
    ("l.jsonl", ("report", "--library", "l.jsonl", "-o", "r.html", "--force"),
     _html_has("matmul")),
    ("l.jsonl", ("plan", "pipeline", "--library", "l.jsonl", "-S", "1", "-M", "2",
                 "--type", "forward=produce", "--type", "backward=consume",
                 "--idle-power", "40W", "-o", "p2.yaml", "--force", "-q"),
     _plan_types("produce", "consume")),
    ("run.json", ("check", "s.json", "--measured", "run.json", "--library", "sweep.jsonl",
                  "-o", "m2.json", "--force", "-q"), _measured("m2.json", 4)),
    ("run.json", ("report", "--measurement", "run.json", "-o", "r.html", "--force"),
     _html_has("F[s0,m0]")),
    ("run.json", ("trace", "--measurement", "run.json", "-o", "t.json", "--force"),
     _trace_has("F[s0,m0]")),
    ("run.json", ("attribute", "run.json", "-o", "a2.json", "--force", "-q"),
     _schema("a2.json", "eopt.attribution/1")),
    ("a.json", ("report", "--measurement", "a.json", "-o", "r.html", "--force"),
     _html_has("F[s0,m0]")),
    ("a.json", ("trace", "--measurement", "a.json", "-o", "t.json", "--force"),
     _trace_has("F[s0,m0]")),
    ("m.json", ("report", "--check", "m.json", "-o", "r.html", "--force"),
     _html_has("Recorded run against the prediction", "F[s0,m0]")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("file", "command", "then"),
    MATRIX,
    ids=[
        f"{f}->{' '.join(map(str, c[:2])).replace(str(EXAMPLES) + '/', '')}" for f, c, _ in MATRIX
    ],
)
def test_handoff(world: World, file: str, command: tuple, then: Callable | None) -> None:
    world.need(file)
    assert run_eopt(*command) == 0, f"eopt {' '.join(map(str, command))} refused {file}"
    if then is not None:
        then(world.folder)
