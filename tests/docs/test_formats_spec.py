"""docs/formats.md stays the true spec of every file format eopt owns.

Three kinds of checks:

* **Tags.** Every schema tag in the code (a string constant ``eopt.<kind>/<version>``
  anywhere under ``eopt/`` or ``solvers/``) has a section in the spec, and every section
  of the spec names a tag the code has.
* **Fields.** Each format's real writer is run on a small instance, and every key it
  writes (at the top level, and one level into objects and lists of objects) must have a
  row in that format's field table. A field added to a writer fails here until the spec
  lists it.
* **Examples.** The example of each format parses with the real reader, and carries its
  section's tag.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from eopt.cli import cli

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "formats.md"
EXAMPLES = ROOT / "examples"

#: A schema tag, as the code spells it.
TAG = re.compile(r"eopt\.[a-z][a-z0-9_-]*/\d+")
#: The heading of a tagged section: ## `eopt.<kind>/<version>` — <what it is>
TAGGED_HEADING = re.compile(r"`(?P<tag>[^`]+)` — \S.*")
UNTAGGED = "Untagged: "
#: An example: a caption line "Example, `FILE`:" (or "Example, `FILE` (…):"), then a fence.
EXAMPLE = re.compile(
    r"^Example, `(?P<file>[^`]+)`[^\n]*:\n\n```[a-z]*\n(?P<body>.*?)^```$", re.M | re.S
)


# The spec, parsed ---------------------------------------------------------------------------
def spec_text() -> str:
    return SPEC.read_text(encoding="utf-8")


def split_sections(text: str, level: str = "## ") -> list[tuple[str, str]]:
    """(heading without the ``## ``, the text up to the next heading of that level), in
    the order of the text."""
    parts = re.split(rf"^{re.escape(level)}", text, flags=re.M)
    out = []
    for part in parts[1:]:
        heading, _, body = part.partition("\n")
        out.append((heading.strip(), body))
    return out


def section(start: str, text: str | None = None) -> str:
    """The body of the one section whose heading starts with ``start``."""
    found = [b for h, b in split_sections(text or spec_text()) if h.startswith(start)]
    assert len(found) == 1, f"docs/formats.md: expected one section headed {start!r}…"
    return found[0]


def subsection(body: str, start: str) -> str:
    """The body of the one ``###`` subsection of ``body`` whose heading starts with ``start``."""
    found = [b for h, b in split_sections(body, "### ") if h.startswith(start)]
    assert len(found) == 1, f"docs/formats.md: expected one subsection headed {start!r}…"
    return found[0]


def documented(body: str) -> dict[str, str]:
    """Field path → its table row, for every row of the field tables in ``body``."""
    rows: dict[str, str] = {}
    for line in body.splitlines():
        match = re.match(r"^\| `([^`]+)` \|", line)
        if match:
            rows[match.group(1)] = line
    return rows


def examples(body: str) -> dict[str, str]:
    """Caption file name → example text, for every example of ``body``."""
    return {m.group("file"): m.group("body") for m in EXAMPLE.finditer(body)}


# Tags ---------------------------------------------------------------------------------------
def code_tags() -> dict[str, list[str]]:
    """Every schema tag in the code → where it is (``path:line``)."""
    found: dict[str, list[str]] = {}
    for package in ("eopt", "solvers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and TAG.fullmatch(node.value)
                ):
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.setdefault(node.value, []).append(where)
    return found


def tag_problems(code: Iterable[str], text: str) -> list[str]:
    """What is wrong between the code's tags and the spec's tagged sections (empty: none)."""
    problems = []
    spec: list[str] = []
    for heading, _ in split_sections(text):
        if not heading.startswith("`"):
            continue
        match = TAGGED_HEADING.fullmatch(heading)
        if match is None or not TAG.fullmatch(match.group("tag")):
            problems.append(
                f"heading {heading!r} does not read ## `eopt.<kind>/<version>` — <what it is>"
            )
            continue
        spec.append(match.group("tag"))
    twice = sorted({t for t in spec if spec.count(t) > 1})
    if twice:
        problems.append(f"tags with more than one section: {', '.join(twice)}")
    missing = sorted(set(code) - set(spec))
    if missing:
        problems.append(f"tags in the code without a section in docs/formats.md: {missing}")
    extra = sorted(set(spec) - set(code))
    if extra:
        problems.append(f"sections for tags the code does not have: {extra}")
    return problems


def test_the_tag_walk_finds_the_schema_constants_readers_compare_against():
    from eopt.attribute.engine import ATTRIBUTION_SCHEMA
    from eopt.calculus.interactions import SCHEMA as INTERACTIONS
    from eopt.check.result_file import CHECK_SCHEMA
    from eopt.devices.guard import STATE_SCHEMA
    from eopt.measure.regions import REGION_SCHEMA
    from eopt.model.fileformats import KINDS
    from eopt.model.planfile import SCHEMA as PLAN
    from eopt.model.schedule import SCHEMA as SCHEDULE
    from eopt.model.signature import SCHEMA as SIGNATURE
    from eopt.runs.compare import SCHEMA as COMPARISON
    from eopt.runs.runset import RUNSET_SCHEMA

    constants = {
        ATTRIBUTION_SCHEMA,
        INTERACTIONS,
        CHECK_SCHEMA,
        STATE_SCHEMA,
        REGION_SCHEMA,
        PLAN,
        SCHEDULE,
        SIGNATURE,
        COMPARISON,
        RUNSET_SCHEMA,
    }
    kinds = {k.schema for k in KINDS.values() if k.schema.startswith("eopt.")}
    found = code_tags()
    assert constants | kinds <= set(found), sorted((constants | kinds) - set(found))


def test_every_tag_in_the_code_has_a_section_and_every_section_a_tag():
    found = code_tags()
    problems = tag_problems(found, spec_text())
    where = {tag: places for tag, places in found.items() if any(tag in p for p in problems)}
    assert not problems, "; ".join(problems) + (f" (in the code at {where})" if where else "")


def test_the_tag_check_names_a_missing_section_an_extra_one_and_a_bad_heading():
    text = spec_text()
    code = set(code_tags())
    heading = next(h for h, _ in split_sections(text) if h.startswith("`eopt.schedule/1`"))
    without = text.replace(f"## {heading}\n", "## Removed section\n")
    with_extra = text + "\n## `eopt.bogus/1` — not a format (.x)\n\nNothing.\n"
    with_bad = text + "\n## `eopt.plan` — plans without a version\n"
    assert any(
        "eopt.schedule/1" in p and "without a section" in p for p in tag_problems(code, without)
    )
    assert any("eopt.bogus/1" in p and "does not have" in p for p in tag_problems(code, with_extra))
    assert any("eopt.plan" in p and "does not read" in p for p in tag_problems(code, with_bad))
    twice = text + text[text.index("## `eopt.plan/1`") :]  # every later section again
    assert any("eopt.plan/1" in p and "more than one" in p for p in tag_problems(code, twice))


def test_every_format_section_says_who_writes_and_reads_it_and_shows_an_example():
    for heading, body in split_sections(spec_text()):
        if not (heading.startswith("`") or heading.startswith(UNTAGGED)):
            continue
        assert "**Written by:**" in body, f"section {heading!r} lacks **Written by:**"
        assert "**Read by:**" in body, f"section {heading!r} lacks **Read by:**"
        assert examples(body), f"section {heading!r} has no example (Example, `FILE`:)"
        if heading.startswith("`"):
            assert "**Versions:**" in body, f"section {heading!r} lacks **Versions:**"


# Fields -------------------------------------------------------------------------------------
def written_paths(
    data: Mapping[str, Any], *, elsewhere: Iterable[str] = (), recursive: Iterable[str] = ()
) -> set[str]:
    """The field paths ``data`` holds: its keys, and one level into each object (``a.b``) and
    each list of objects (``a[].b``), except under ``elsewhere`` (objects documented in
    another place); the items under ``recursive`` repeat the top level's layout."""
    skip, again = set(elsewhere), set(recursive)
    out: set[str] = set()
    for key, value in data.items():
        out.add(key)
        if key in skip:
            continue
        items = value if isinstance(value, list) else [value]
        objects = [v for v in items if isinstance(v, Mapping)]
        if key in again:
            out |= {k for v in objects for k in v}
        elif isinstance(value, Mapping):
            out |= {f"{key}.{k}" for k in value}
        else:
            out |= {f"{key}[].{k}" for v in objects for k in v}
    return out


def assert_documented(
    written: Iterable[Mapping[str, Any]],
    body: str,
    where: str,
    *,
    elsewhere: Mapping[str, str] | None = None,
    free_form: Iterable[str] = (),
    recursive: Iterable[str] = (),
) -> None:
    """Every field path of every object in ``written`` has a row in ``body``'s tables.

    Args:
        written: What the real writer wrote (parsed).
        body: The format's section (or subsection) of the spec.
        where: The section's name, for the message.
        elsewhere: Objects not descended into → a phrase their row must contain (the
            place that documents them).
        free_form: Objects not descended into whose row must call them free-form.
        recursive: Lists (or objects) whose items repeat the top-level layout.
    """
    rows = documented(body)
    elsewhere = dict(elsewhere or {})
    skip = set(elsewhere) | set(free_form)
    paths: set[str] = set()
    for data in written:
        paths |= written_paths(data, elsewhere=skip, recursive=recursive)
    missing = sorted(paths - set(rows))
    assert not missing, (
        f"docs/formats.md, {where}: the writer writes {missing}, which the field tables do "
        "not list; add a row for each"
    )
    for path, phrase in elsewhere.items():
        assert phrase in rows.get(path, ""), (
            f"docs/formats.md, {where}: {path} should refer to {phrase}"
        )
    for path in free_form:
        assert "free-form" in rows.get(path, ""), f"docs/formats.md, {where}: {path} is free-form"


def run_cli(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def full_signature() -> Any:
    """A signature with every optional field set."""
    from eopt.model.context import Context, EntryContext, RuntimeContext
    from eopt.model.operating_point import OperatingPoint
    from eopt.model.signature import Signature

    return Signature(
        name="gemm",
        static_power=80.0,
        time=0.004,
        dynamic_energy=1.4,
        var_time=1e-12,
        var_energy=1e-6,
        devices=("gpu0",),
        workload={"m": 8192},
        impl="cublas",
        op_point=OperatingPoint(1395.0, 1593.0, 300.0, {"sm_count": 54}),
        meta={"n": 3},
        term="gemm ⊗ ι",
        context=Context(
            EntryContext(temperature_c=40.0, cache="warm", after="softmax", state={"x": 1}),
            RuntimeContext(("allreduce",), 0.001),
        ),
    )


def test_the_shared_operating_point_and_context_tables_list_every_field():
    sig = full_signature()
    body = section("Shared objects")
    assert_documented(
        [sig.op_point.to_dict()],
        subsection(body, "Operating point"),
        "operating point",
        free_form=["extras"],
    )
    assert_documented([sig.context.to_dict()], subsection(body, "Context"), "context")


def test_signature_lines_document_every_field_the_library_writer_writes(tmp_path: Path):
    from eopt.model.library import read_library, write_library

    path = tmp_path / "lib.jsonl"
    write_library(path, [full_signature()])
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert read_library(path)[0].context is not None  # what was written reads back
    assert_documented(
        lines,
        section("`eopt.signature/1`"),
        "eopt.signature/1",
        elsewhere={"op_point": "Operating point", "context": "Context"},
        free_form=["workload", "meta"],
    )


def test_plan_files_document_every_field_the_plan_writer_writes(tmp_path: Path):
    from eopt.model.planfile import Plan, PlanDevice, PlanElement, read_plan, write_plan

    plan = Plan(
        devices=(PlanDevice("gpu0", 60.0, 0, 1e-4, 0.02), PlanDevice("gpu1", 60.0, 1)),
        elements=(
            PlanElement("a", "gpu0", "gemm"),
            PlanElement("b", "gpu1", "gemm", ("a",)),
            PlanElement("c", "gpu1", "gemm", ("a",)),
        ),
        groups=(("b", "c"),),
        deadline=0.05,
        libraries=("gemm.jsonl",),
        name="two",
        meta={"generator": "test"},
    )
    written = []
    for name, load in (("plan.yaml", yaml.safe_load), ("plan.json", json.loads)):
        write_plan(tmp_path / name, plan)
        written.append(load((tmp_path / name).read_text(encoding="utf-8")))
        assert read_plan(tmp_path / name).groups == plan.groups
    assert written[0] == written[1]  # one layout in both syntaxes
    assert_documented(written, section("`eopt.plan/1`"), "eopt.plan/1", free_form=["meta"])


def test_schedule_files_document_every_field_the_solver_and_writer_write(tmp_path: Path):
    from eopt.model.planfile import read_plan
    from eopt.model.schedule import read_schedule, write_schedule
    from eopt.plan.solve import solve_plan

    plan = read_plan(EXAMPLES / "plans" / "dag_two_gpus.yaml")  # transitions and a group
    schedule = solve_plan(plan, slowdown=0.05, time_limit=20.0)
    every_device_pays = tuple(
        dataclasses.replace(d, transition_time_s=1e-4, transition_energy_j=0.01)
        for d in schedule.devices
    )
    written = []
    for k, sched in enumerate((schedule, dataclasses.replace(schedule, devices=every_device_pays))):
        path = tmp_path / f"s{k}.json"
        write_schedule(path, sched)
        assert read_schedule(path).makespan == pytest.approx(sched.makespan)
        written.append(json.loads(path.read_text(encoding="utf-8")))
    assert "transition_time_s" in written[1]["devices"][1]
    assert_documented(written, section("`eopt.schedule/1`"), "eopt.schedule/1", free_form=["meta"])


def _trace(rank: int | None = None) -> Any:
    """Two nested events under one GPU series, 1 s of samples every 100 ms."""
    from eopt.model.trace import Event, PowerSeries, Trace

    t0 = 1_700_000_000_000_000_000
    times = t0 + np.arange(11, dtype=np.int64) * 100_000_000
    events = (
        Event(1, 0, "solve", "USER_REGION", t0 + 100_000_000, t0 + 900_000_000),
        Event(2, 1, "axpy", "PARALLEL_FOR", t0 + 200_000_000, t0 + 400_000_000, device_id=0),
    )
    series = (PowerSeries("GPU", rank or 0, times, 100.0 + 10.0 * (np.arange(11) % 3)),)
    return Trace(events, series, {"recorded_by": "test"}, f"rank{rank}", rank)


def test_attribution_json_documents_every_field_the_engine_writes():
    from eopt.attribute.engine import attribute, sum_attributions

    one = attribute(_trace()).to_dict(calls=True)
    ranks = sum_attributions([attribute(_trace(0)), attribute(_trace(1))], "mpi").to_dict(
        calls=True
    )
    assert ranks["ranks"] and one["calls"]
    assert_documented(
        [one, ranks], section("`eopt.attribution/1`"), "eopt.attribution/1", recursive=["ranks"]
    )


def test_check_results_document_every_field_eopt_check_writes(tmp_path: Path):
    out = tmp_path / "check.json"
    run_cli(
        [
            "check",
            str(EXAMPLES / "check_schedule.yaml"),
            "--sim",
            "--kernels",
            str(EXAMPLES / "check_kernels.yaml"),
            "--runs",
            "5",
            "--max-rounds",
            "1",
            "-o",
            str(out),
            "-q",
        ]
    )
    data = json.loads(out.read_text(encoding="utf-8"))
    # The example schedule shows an interaction on the simulator, so every nested block
    # (findings, the refined prediction) is written and checked.
    assert data["found"] and data["refined"] is not None, data["log"]
    assert_documented(
        [data],
        section("`eopt.check/1`"),
        "eopt.check/1",
        elsewhere={"graph": "eopt.interactions/1"},
    )


def test_interaction_graphs_document_every_field_the_graph_writer_writes(tmp_path: Path):
    from eopt.calculus.interactions import (
        EntryEdge,
        InteractionGraph,
        RuntimeEdge,
        read_interactions,
        write_interactions,
    )
    from eopt.model.context import EntryContext

    graph = InteractionGraph(
        entry=(
            EntryEdge(
                "gemm",
                "softmax",
                ("thermal",),
                (EntryContext(after="gemm"),),
                "softmax.warm",
                {"n": 4096},
                {"energy_rel": 0.01},
            ),
        ),
        runtime=(
            RuntimeEdge(("compute", "allreduce"), ("memory bandwidth",), (0.0,), "pair"),
            RuntimeEdge(("a", "b"), (), (0.0, 0.001), "", {"a": "a@b", "b": "b@a"}),
        ),
        nodes=("lonely",),
    )
    path = tmp_path / "graph.json"
    write_interactions(path, graph)
    assert read_interactions(path) == graph
    assert_documented(
        [json.loads(path.read_text(encoding="utf-8"))],
        section("`eopt.interactions/1`"),
        "eopt.interactions/1",
    )


def test_compositions_document_every_field_eopt_compose_prints():
    by_expression = json.loads(
        run_cli(
            [
                "compose",
                str(EXAMPLES / "attention.jsonl"),
                "seq(prefix, par(compute, allreduce))",
                "--measured",
                "3.4J±0.01J",
                "--json",
            ]
        )
    )
    by_schedule = json.loads(
        run_cli(
            [
                "compose",
                str(EXAMPLES / "figure2_library.jsonl"),
                "--schedule",
                str(EXAMPLES / "figure2_schedule.yaml"),
                "--json",
            ]
        )
    )
    assert "deviation_test" in by_expression and "per_device" in by_schedule
    assert_documented(
        [by_expression, by_schedule],
        section("`eopt.composition/1`"),
        "eopt.composition/1",
        elsewhere={"signature": "eopt.signature/1"},
    )


def _record_set(folder: Path, n: int, slow: set[int], seed: int) -> None:
    """A run set of ``n`` synthetic runs through the real run-set writer; the runs in
    ``slow`` take 1.5× as long (another machine state)."""
    from eopt.model.trace import Event, PowerSeries, Trace
    from eopt.model.trace_io import write_dashboard
    from eopt.runs.runset import RunOutcome, record_runs

    rng = np.random.default_rng(seed)
    count = iter(range(1, n + 1))

    def record(trace_dir: Path) -> RunOutcome:
        i = next(count)
        t0 = 1_700_000_000_000_000_000 + i * 10_000_000_000
        length = int(1e9 * (1.5 if i in slow else 1.0) * (1 + 0.01 * rng.random()))
        times = t0 + np.linspace(0, length, 21).astype(np.int64)
        power = 200.0 + rng.random(21)
        region = Event(1, 0, "solve", "USER_REGION", int(times[2]), int(times[-3]), device_id=0)
        write_dashboard(Trace((region,), (PowerSeries("GPU", 0, times, power),)), trace_dir)
        return RunOutcome(0, int(t0), length * 1e-9, None)

    record_runs(record, folder, n, command=["./app"], period_s=0.1, sleep=lambda _: None)


def test_run_sets_comparisons_and_trace_folders_document_every_field_written(tmp_path: Path):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "cmp.json"
    _record_set(a, 24, slow=set(range(9, 17)), seed=1)
    _record_set(b, 24, slow=set(), seed=2)
    run_cli(["compare", str(a), str(b), "--region", "solve", "--json", "-o", str(out), "-q"])
    comparison = json.loads(out.read_text(encoding="utf-8"))
    assert comparison["state_blocks"] and comparison["without_blocks"]  # every block written
    assert_documented(
        [comparison],
        section("`eopt.comparison/1`"),
        "eopt.comparison/1",
        recursive=["without_blocks"],
    )
    index = json.loads((a / "index.json").read_text(encoding="utf-8"))
    assert_documented([index], section("`eopt.runset/1`"), "eopt.runset/1")
    dashboard = section(f"{UNTAGGED}trace folders")
    run = a / index["runs"][0]["trace"]
    for name in ("events.csv", "power_samples.csv"):
        header = (run / name).read_text(encoding="utf-8").splitlines()[0].split(",")
        assert_documented([dict.fromkeys(header)], subsection(dashboard, f"`{name}`"), name)


def _sim_measurement() -> Any:
    """``eopt measure``'s result for regions run on the simulated GPU."""
    from eopt.measure import regions
    from eopt.measure.command import CommandMeasurement, measure_regions
    from eopt.sim.gpu import SimulatedGPU

    gpu = SimulatedGPU(seed=2, energy_counter=False)
    with measure_regions(gpu) as session:
        gpu.idle(0.2)
        with regions.region("step"), regions.region("gemm"):
            for _ in range(20):
                gpu.launch("gemm", "cublas", {})
        gpu.idle(0.2)
    assert session.report is not None
    return CommandMeasurement(("python", "train.py"), 0, session.report, gpu.name, gpu.model)


def test_measurements_document_every_field_eopt_measure_writes(tmp_path: Path):
    from eopt.model.trace_io import write_dashboard

    result = _sim_measurement()
    data = result.to_dict()
    assert data["regions"] and data["events"]
    assert_documented(
        [data], section("`eopt.regions-report/1`"), "eopt.regions-report/1", free_form=["meter"]
    )
    # The same run as `eopt measure --trace-dir` writes it.
    write_dashboard(result.to_trace(), tmp_path / "trace")
    meta = json.loads((tmp_path / "trace" / "metadata.json").read_text(encoding="utf-8"))
    tables = subsection(section(f"{UNTAGGED}trace folders"), "`metadata.json`")
    assert_documented([meta], tables, "metadata.json", free_form=["meter"])


def test_region_lines_document_every_field_the_region_recorder_writes(tmp_path: Path):
    from eopt.measure.regions import RegionRecorder, read_region_windows

    sink = tmp_path / "regions.jsonl"
    recorder = RegionRecorder(sink=sink)
    with recorder.region("step"), recorder.region("forward"):
        pass
    recorder.close()
    lines = [json.loads(line) for line in sink.read_text(encoding="utf-8").splitlines()]
    assert [w.path for w in read_region_windows(sink)] == [("step", "forward"), ("step",)]
    assert_documented(lines, section("`eopt.region/1`"), "eopt.region/1")


def test_window_results_document_every_field_a_window_returns():
    from eopt.measure.windows import EnergyMonitor
    from eopt.sim.gpu import SimulatedGPU

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the note that the GPU is simulated
        monitor = EnergyMonitor(devices=[SimulatedGPU(seed=1)])
        with monitor.window("train") as win:
            monitor.devices[0].launch("gemm", "cublas", {})
    assert win.result is not None
    assert_documented([win.result.to_dict()], section("`eopt.window/1`"), "eopt.window/1")


def test_gpu_state_files_document_every_top_level_field_the_guard_writes(tmp_path: Path):
    from eopt.devices.guard import StateFile

    path = tmp_path / "gpu-state-1-a.json"
    entry = {"backend": "nvml", "index": 0, "uuid": None, "model": "m", "host": "h"}
    StateFile(path, 1, "h", "2025-01-01T00:00:00.000000Z", (), kept=True).write_devices([entry])
    data = json.loads(path.read_text(encoding="utf-8"))
    assert StateFile.read(path).kept is True
    # Top level only: a device entry comes from NVML (its keys are listed from the code).
    rows = documented(section("`eopt.gpu-state/1`"))
    missing = sorted(set(data) - set(rows))
    assert not missing, f"docs/formats.md, eopt.gpu-state/1: the writer writes {missing}"


def test_frontier_tables_document_every_column_both_commands_write(tmp_path: Path):
    plan_csv, element_csv = tmp_path / "plan.csv", tmp_path / "element.csv"
    plan = EXAMPLES / "plans" / "dag_two_gpus.yaml"
    run_cli(["solve", str(plan), "--frontier", "--points", "2", "-o", str(plan_csv), "-q"])
    library = EXAMPLES / "plans" / "dag_two_gpus.signatures.jsonl"
    run_cli(["frontier", str(library), "--csv", str(element_csv), "-q"])
    headers = [
        p.read_text(encoding="utf-8").splitlines()[0].split(",") for p in (plan_csv, element_csv)
    ]
    assert "makespan_s" in headers[0] and "element" in headers[1]
    assert_documented(
        [dict.fromkeys(h) for h in headers], section(f"{UNTAGGED}frontier tables"), "frontier"
    )


def test_the_field_check_names_a_field_the_spec_lacks():
    body = section("`eopt.window/1`")
    written = {"schema": "eopt.window/1", "name": "w", "devices": [{"index": 0, "new": 1}]}
    with pytest.raises(AssertionError, match=r"devices\[\]\.new"):
        assert_documented([written], body, "eopt.window/1")
    with pytest.raises(AssertionError, match="added_field"):
        assert_documented([{**written, "added_field": 1}], body, "eopt.window/1")


# Examples -----------------------------------------------------------------------------------
def _write_examples(body: str, folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, text in examples(body).items():
        out[name] = folder / name
        out[name].write_text(text, encoding="utf-8")
    return out


def test_every_json_example_carries_its_sections_tag():
    for heading, body in split_sections(spec_text()):
        match = TAGGED_HEADING.fullmatch(heading)
        if match is None:
            continue
        for name, text in examples(body).items():
            if not name.endswith((".json", ".jsonl")):
                continue
            docs = [text] if name.endswith(".json") else text.splitlines()
            for doc in docs:
                data = json.loads(doc)
                assert data.get("schema") == match.group("tag"), f"{heading}: example {name}"


def test_the_library_plan_schedule_and_placements_examples_read(tmp_path: Path):
    from eopt.calculus.schedule import read_placements
    from eopt.model.library import read_library
    from eopt.model.planfile import read_plan
    from eopt.model.schedule import read_schedule

    lib = _write_examples(section("`eopt.signature/1`"), tmp_path)["gemm.jsonl"]
    sigs = read_library(lib)
    assert [s.op_point.sm_clock_mhz for s in sigs] == [1395.0, 1005.0]
    plan = read_plan(_write_examples(section("`eopt.plan/1`"), tmp_path)["plan.yaml"])
    assert plan.groups == (("g2", "g3"),) and plan.device("gpu1").has_transition
    schedule = read_schedule(
        _write_examples(section("`eopt.schedule/1`"), tmp_path)["schedule.json"]
    )
    assert len(schedule.elements) == 2 and schedule.lower_bound is not None
    placed = read_placements(
        _write_examples(section(f"{UNTAGGED}placements"), tmp_path)["placements.yaml"], sigs
    )
    assert [p.signature.op_point.sm_clock_mhz for p in placed.placements] == [1395.0, 1005.0]
    assert placed.idle_power == 60.0


def test_the_graph_check_region_and_state_examples_read(tmp_path: Path):
    from eopt.calculus.interactions import read_interactions
    from eopt.check.result_file import read_check_result
    from eopt.devices.guard import StateFile
    from eopt.measure.regions import read_region_windows

    graph = read_interactions(
        _write_examples(section("`eopt.interactions/1`"), tmp_path)["interactions.json"]
    )
    assert len(graph.entry) == 1 and len(graph.runtime) == 1
    check = read_check_result(_write_examples(section("`eopt.check/1`"), tmp_path)["check.json"])
    assert check["deviation"] is False
    lines = _write_examples(section("`eopt.region/1`"), tmp_path)["regions.jsonl"]
    assert [w.key for w in read_region_windows(lines)] == ["step/forward", "step"]
    files = _write_examples(section("`eopt.gpu-state/1`"), tmp_path)
    state = StateFile.read(next(iter(files.values())))
    assert state.pid == 4242 and state.devices[0]["power_limit_w"] == 400.0
    for tag in ("`eopt.composition/1`", "`eopt.window/1`", "`eopt.comparison/1`"):
        for path in _write_examples(section(tag), tmp_path / tag.strip("`")).values():
            json.loads(path.read_text(encoding="utf-8"))


def test_the_frontier_measurement_and_attribution_examples_read(tmp_path: Path):
    from eopt.model.trace_io import read_traces
    from eopt.report.inputs import read_frontier_csv, read_measurement

    rows = read_frontier_csv(
        _write_examples(section(f"{UNTAGGED}frontier tables"), tmp_path)["frontier.csv"]
    )
    assert [r.label for r in rows] == ["optimal", "feasible"]
    assert rows[1].lower_bound_j == pytest.approx(245.6458343461549)
    run = _write_examples(section("`eopt.regions-report/1`"), tmp_path)["run.json"]
    measurement = read_measurement(run)
    assert [r.name for r in measurement.regions] == ["step"]
    (trace,) = read_traces(run)  # as eopt's JSON trace
    assert [e.name for e in trace.events] == ["step"] and trace.series[0].times_ns.size == 4
    att = _write_examples(section("`eopt.attribution/1`"), tmp_path)["attribution.json"]
    assert [r.name for r in read_measurement(att).regions] == ["solve", "axpy"]


def test_the_trace_folder_run_set_and_connector_examples_read(tmp_path: Path):
    from eopt.attribute.engine import attribute
    from eopt.model.trace_io import read_runs, read_traces

    folder = tmp_path / "runs" / "run_001"
    _write_examples(section(f"{UNTAGGED}trace folders"), folder)
    (trace,) = read_traces(folder)
    assert [(e.name, e.parent_id) for e in trace.events] == [("solve", 0), ("axpy", 1)]
    _write_examples(section("`eopt.runset/1`"), tmp_path / "runs")
    assert len(read_runs(tmp_path / "runs")) == 1
    raw = tmp_path / "raw"
    _write_examples(section(f"{UNTAGGED}Kokkos NVML connector"), raw)
    (run,) = read_traces(raw / "run1")
    by_name = {e.name: e for e in run.events}
    assert by_name["axpy"].parent_id == by_name["solve"].id  # nested by time containment
    # The folder and the raw run hold one recording: the same energy per region.
    assert attribute(run).region("axpy").inclusive_energy_j == pytest.approx(
        attribute(trace).region("axpy").inclusive_energy_j
    )
