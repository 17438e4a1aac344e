"""Bad files of every kind eopt reads, fed to every command that reads them.

Each case writes one bad file (a good file with one fault) and runs a command through
the real entry point (``eopt.cli.main``). It must exit with status 1 and print exactly
one line that names the file and the place (the field's path or the line), with no
traceback and no "internal error". The faults come from the hardening issue: values no
file may carry (negative or zero times, negative energies, NaN/Infinity anywhere, a lower
bound above the energy, elements outside the run, regions larger than the run, a list
where an object belongs), crashes (deep nesting, wrong types, oversized CSV fields,
non-UTF-8 text), cut-off rows, and files of the wrong kind. The good files are read by
the same commands at the end, so the checks refuse faults, not files.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eopt.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PROFILE = "perseus_sosp24/stage_profile/gpt3-175b+a100_sxm_bf16.csv"

# Content of a bad file: raw text or bytes, or a change applied to a copy of the good
# document (JSON/YAML kinds) before it is written.
Content = str | bytes | Callable[[Any], Any]


@dataclass(frozen=True)
class Bad:
    """One faulty file.

    Attributes:
        name: The case's id.
        content: Raw text/bytes, or a function that changes (or replaces) the good
            document.
        expect: Text the error must contain besides the file's name (the place).
        commands: Keys of the commands that must refuse it (None: all of the kind's).
    """

    name: str
    content: Content
    expect: str
    commands: tuple[str, ...] | None = None


def _set(path: str, value: Any) -> Callable[[Any], Any]:
    """A change that sets ``doc[path]`` (dotted, with integer list indexes)."""

    def change(doc: Any) -> Any:
        keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
        target = doc
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
        return doc

    return change


def _token(path: str, token: str, indent: int | None = None) -> Callable[[Any], Any]:
    """A change that writes ``token`` verbatim (``NaN``, ``Infinity``, ``1e999``)."""
    change = _set(path, "@@TOKEN@@")
    return lambda doc: json.dumps(change(doc), indent=indent).replace('"@@TOKEN@@"', token)


DEEP_JSON = "[" * 100_000 + "]" * 100_000
NOT_UTF8 = b'{"schema": "\xff\xfe"}\n'


# Good files ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Good:
    """The good file of every kind (a folder per test gets copies)."""

    library: list[dict[str, Any]]
    plan: dict[str, Any]
    schedule: dict[str, Any]
    frontier: str
    measurement: dict[str, Any]
    profile: str
    placements: str
    figure2_library: str


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory, data_file: Callable[[str], Path]) -> Good:
    root = tmp_path_factory.mktemp("good")
    for name in ("dag_two_gpus.yaml", "dag_two_gpus.signatures.jsonl"):
        shutil.copy(EXAMPLES / "plans" / name, root / name)
    # 5 % slower than the fastest: one SM clock per GPU, so no setting changes, and
    # composing the schedule must give its predicted energy exactly.
    main(["solve", str(root / "dag_two_gpus.yaml"), "--slowdown", "5%", "-o", str(root / "s.json")])
    library = [
        json.loads(line)
        for line in (root / "dag_two_gpus.signatures.jsonl").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    import yaml

    plan = yaml.safe_load((root / "dag_two_gpus.yaml").read_text())
    plan["libraries"] = ["lib.jsonl"]
    frontier = (
        "makespan_s,energy_j,energy_std_j,lower_bound_j,gap,status\n"
        "0.039,23.72,0.1,23.72,0.0,optimal\n"
        "0.0492705,19.97,0.08,18.57,0.07,feasible\n"
    )
    measurement = {
        "total_energy_j": 100.0,
        "total_time_s": 2.0,
        "regions": [
            {"name": "forward", "energy_j": 40.0, "time_s": 0.5, "calls": 8},
            {"name": "backward", "energy_j": 50.0, "time_s": 1.0, "calls": 8, "depth": 0},
        ],
        "outside_energy_j": 10.0,
        "samples": {"time_s": [0.0, 1.0, 2.0], "power_w": [50.0, 51.0, 49.0]},
        "events": [{"name": "forward", "start_s": 0.1, "end_s": 0.2}],
    }
    profile = "\n".join(data_file(PROFILE).read_text().splitlines()[:9]) + "\n"
    return Good(
        library=library,
        plan=plan,
        schedule=json.loads((root / "s.json").read_text()),
        frontier=frontier,
        measurement=measurement,
        profile=profile,
        placements=(EXAMPLES / "figure2_schedule.yaml").read_text(),
        figure2_library=(EXAMPLES / "figure2_library.jsonl").read_text(),
    )


@dataclass(frozen=True)
class Files:
    """One folder with every good file, ready to have one replaced by a bad one."""

    root: Path

    def __getitem__(self, name: str) -> str:
        return str(self.root / name)


GOOD_NAMES = {
    "library": "lib.jsonl",
    "plan": "plan.yaml",
    "schedule": "s.json",
    "frontier": "f.csv",
    "measurement": "m.json",
    "profile": "profile.csv",
    "placements": "placements.yaml",
}


@pytest.fixture
def files(tmp_path: Path, good: Good) -> Files:
    lines = [json.dumps(sig) for sig in good.library]
    (tmp_path / "lib.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "plan.yaml").write_text(_yaml(good.plan), encoding="utf-8")
    (tmp_path / "s.json").write_text(json.dumps(good.schedule, indent=2), encoding="utf-8")
    (tmp_path / "f.csv").write_text(good.frontier, encoding="utf-8")
    (tmp_path / "m.json").write_text(json.dumps(good.measurement), encoding="utf-8")
    (tmp_path / "profile.csv").write_text(good.profile, encoding="utf-8")
    (tmp_path / "placements.yaml").write_text(good.placements, encoding="utf-8")
    (tmp_path / "fig2.jsonl").write_text(good.figure2_library, encoding="utf-8")
    return Files(tmp_path)


def _yaml(doc: Any) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False)


# The commands that read each kind (file → argv), keyed for the tables below.
COMMANDS: dict[str, dict[str, Callable[[Files], list[str]]]] = {
    "library": {
        "compose": lambda f: ["compose", f["lib.jsonl"], "embed[sm_clock_mhz=1410]"],
        "frontier": lambda f: ["frontier", f["lib.jsonl"]],
        "report": lambda f: ["report", "--library", f["lib.jsonl"], "-o", f["r.html"]],
        "solve": lambda f: ["solve", f["plan.yaml"], "--slowdown", "5%"],
    },
    "plan": {
        "solve": lambda f: ["solve", f["plan.yaml"], "--slowdown", "5%"],
    },
    "schedule": {
        "apply": lambda f: ["apply", f["s.json"], "--dry-run"],
        "report": lambda f: ["report", "--schedule", f["s.json"], "-o", f["r.html"]],
        "trace": lambda f: ["trace", f["s.json"], "-o", f["t.json"]],
        "compose": lambda f: ["compose", f["lib.jsonl"], "--schedule", f["s.json"]],
    },
    "frontier": {
        "report": lambda f: ["report", "--frontier", f["f.csv"], "-o", f["r.html"]],
    },
    "measurement": {
        "report": lambda f: ["report", "--measurement", f["m.json"], "-o", f["r.html"]],
        "trace": lambda f: ["trace", f["s.json"], "--measurement", f["m.json"], "-o", f["t.json"]],
    },
    "profile": {
        "plan": lambda f: [
            *("plan", "pipeline", "--profile", f["profile.csv"], "--stages", "1"),
            *("--microbatches", "2", "--idle-power", "80W", "-o", f["p.yaml"]),
        ]
    },
    "placements": {
        "compose": lambda f: ["compose", f["fig2.jsonl"], "--schedule", f["placements.yaml"]],
    },
}


# The bad files ------------------------------------------------------------------------------
def _sig(change: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A change to the library's second signature (so the error must say line 2)."""

    def apply(lines: list[dict[str, Any]]) -> str:
        out = [json.dumps(x) for x in lines]
        changed = change(copy.deepcopy(lines[1]))
        out[1] = changed if isinstance(changed, str) else json.dumps(changed)
        return "\n".join(out) + "\n"

    return apply


LIBRARY = [
    Bad("time negative", _sig(_set("time", -0.001)), ":2: time: expected a finite number"),
    Bad("time zero", _sig(_set("time", 0)), ":2: time: expected a finite number > 0"),
    Bad("time NaN", _sig(_token("time", "NaN")), ":2: numbers must be finite, got NaN"),
    Bad("time Infinity", _sig(_token("time", "Infinity")), ":2: numbers must be finite"),
    Bad("time -Infinity", _sig(_token("time", "-Infinity")), ":2: numbers must be finite"),
    Bad("time 1e999", _sig(_token("time", "1e999")), ":2: numbers must be finite, got 1e999"),
    Bad("time text", _sig(_set("time", "fast")), ":2: time: expected a number"),
    Bad("time true", _sig(_set("time", True)), ":2: time: expected a number"),
    Bad("time list", _sig(_set("time", [0.1])), ":2: time: expected a number (s), got a list"),
    Bad("static power negative", _sig(_set("static_power", -60)), ":2: static_power"),
    Bad("dynamic energy negative", _sig(_set("dynamic_energy", -400)), ":2: dynamic_energy"),
    Bad("var_energy negative", _sig(_set("var_energy", -1)), ":2: var_energy"),
    Bad("var_time NaN", _sig(_token("var_time", "NaN")), ":2: numbers must be finite"),
    Bad("name empty", _sig(_set("name", "")), ":2: name"),
    Bad("name number", _sig(_set("name", 5)), ":2: name"),
    Bad(
        "sm_clock_mhz Infinity",
        _sig(_token("op_point.sm_clock_mhz", "Infinity")),
        ":2: numbers must be finite, got Infinity",
    ),
    Bad("sm clock negative", _sig(_set("op_point.sm_clock_mhz", -1410)), "op_point.sm_clock_mhz"),
    Bad("sm clock zero", _sig(_set("op_point.sm_clock_mhz", 0)), "op_point.sm_clock_mhz"),
    Bad("sm clock text", _sig(_set("op_point.sm_clock_mhz", "max")), "op_point.sm_clock_mhz"),
    Bad("power limit 1e999", _sig(_token("op_point.power_limit_w", "1e999")), ":2: numbers"),
    Bad("op_point list", _sig(_set("op_point", [1410])), ":2: op_point must be an object"),
    Bad("extras list", _sig(_set("op_point.extras", [1])), ":2: op_point.extras"),
    Bad("workload list", _sig(_set("workload", [1, 2])), ":2: workload: expected an object"),
    Bad("meta list", _sig(_set("meta", ["x"])), ":2: meta: expected an object"),
    Bad("meta NaN", _sig(_token("meta.ci", "NaN")), ":2: numbers must be finite"),
    Bad("devices object", _sig(_set("devices", {"gpu0": 1})), ":2: devices: expected a list"),
    Bad("device list of lists", _sig(_set("devices", [["gpu0"]])), ":2: devices[0]"),
    Bad("unknown field", _sig(_set("tme", 1)), ":2: unknown field(s) ['tme']"),
    Bad(
        "missing time",
        _sig(lambda d: {k: v for k, v in d.items() if k != "time"}),
        ":2: field 'time' is missing",
    ),
    Bad("line is a list", _sig(lambda d: [d]), ":2: expected a JSON object, got a list"),
    Bad("line cut off", _sig(lambda d: json.dumps(d)[:40]), ":2: not valid JSON"),
    Bad("deep nesting", _sig(_token("meta.deep", DEEP_JSON)), ":2: not valid JSON for eopt"),
    Bad("wrong schema", _sig(_set("schema", "eopt.signature/9")), ":2: schema"),
    Bad("not UTF-8", lambda lines: (json.dumps(lines[0]) + "\n").encode() + b"\xff\n", ":2: not"),
]

SCHEDULE = [
    Bad("start negative", _set("elements.0.start", -0.002), "elements[0] (embed): starts at"),
    Bad(
        "no makespan",
        lambda d: {k: v for k, v in d.items() if k != "makespan"},
        "field 'makespan' is missing",
        ("compose",),  # one schedule reader: compose requires it as the others do
    ),
    Bad("duration zero", _set("elements.0.duration", 0), "elements[0] (embed).duration"),
    Bad("duration negative", _set("elements.1.duration", -0.1), "elements[1] (attn0).duration"),
    Bad(
        "end after makespan",
        lambda d: _set("elements.7.start", d["makespan"])(d),
        "(head): ends at",
    ),
    Bad("makespan zero", _set("makespan", 0), "makespan: expected a finite number > 0"),
    Bad("makespan negative", _set("makespan", -1), "makespan: expected a finite number > 0"),
    Bad("makespan text", _set("makespan", "40ms"), "makespan: expected a number"),
    Bad(
        "predicted energy negative",
        _set("energy.predicted", -400),
        "energy.predicted: expected a finite number ≥ 0",
        ("apply", "report", "trace"),
    ),
    Bad(
        "element energy negative",
        _set("elements.0.energy", -1),
        "elements[0] (embed).energy",
        ("apply", "report", "trace"),
    ),
    Bad(
        "lower bound above energy",
        _set("lower_bound", 400.0),
        "lower_bound: 400 J is above the predicted energy",
        ("apply", "report", "trace"),
    ),
    Bad("gap above 1", _set("gap", 1.5), "gap: expected", ("apply", "report", "trace")),
    Bad("gap negative", _set("gap", -0.5), "gap: expected", ("apply", "report", "trace")),
    Bad(
        "dynamic above energy",
        _set("elements.0.dynamic_energy", 100.0),
        "elements[0] (embed).dynamic_energy",
        ("apply", "report", "trace"),
    ),
    Bad("std negative", _set("energy.std", -1), "energy.std", ("apply", "report", "trace")),
    Bad("confidence 95", _set("energy.confidence", 95), "confidence", ("apply", "report", "trace")),
    Bad("deadline Infinity", _token("deadline", "Infinity", 2), ":4: numbers must be finite"),
    Bad(
        "sm_clock_mhz Infinity",
        _token("elements.0.op_point.sm_clock_mhz", "Infinity"),
        "numbers must be finite, got Infinity",
    ),
    Bad("deadline zero", _set("deadline", 0), "deadline", ("apply", "report", "trace")),
    Bad("meta NaN", _token("meta.x", "NaN"), "numbers must be finite, got NaN"),
    Bad("sm clock 1e999", _token("elements.0.op_point.sm_clock_mhz", "1e999"), "got 1e999"),
    Bad(
        "sm clock negative",
        _set("elements.0.op_point.sm_clock_mhz", -1),
        "elements[0] (embed): op_point.sm_clock_mhz",
    ),
    Bad("elements object", _set("elements", {"embed": 0}), "elements: expected a list"),
    Bad("element list", _set("elements.0", ["embed"]), "elements[0]: expected an object"),
    Bad("devices object", _set("devices", {"gpu0": 60}), "devices: expected a list"),
    Bad("device list", _set("devices.0", ["gpu0"]), "devices[0]: expected an object"),
    Bad("idle power negative", _set("devices.0.idle_power_w", -60), "devices[0].idle_power_w"),
    Bad("idle power text", _set("devices.0.idle_power_w", "60W"), "devices[0].idle_power_w"),
    Bad("gpu negative", _set("devices.0.gpu", -1), "devices[0].gpu", ("apply", "report", "trace")),
    Bad("gpu fraction", _set("devices.0.gpu", 0.5), "devices[0].gpu", ("apply", "report", "trace")),
    Bad(
        "transition negative",
        _set("devices.0.transition_time_s", -1),
        "devices[0].transition_time_s",
        ("apply", "report", "trace"),
    ),
    Bad(
        "device twice",
        _set("devices.1.name", "gpu0"),
        "device 'gpu0' is listed twice",
        ("apply", "report", "trace"),
    ),
    Bad("unknown device", _set("elements.0.device", "gpu9"), "'gpu9'"),
    Bad("element name list", _set("elements.0.name", ["embed"]), "elements[0].name"),
    Bad(
        "missing makespan",
        lambda d: {k: v for k, v in d.items() if k != "makespan"},
        "field 'makespan' is missing",
        ("apply", "report", "trace"),
    ),
    Bad(
        "energy list",
        _set("energy", [23.2]),
        "energy: expected an object",
        ("apply", "report", "trace"),
    ),
    Bad(
        "baseline energy negative",
        _set("baseline.energy", -5),
        "baseline.energy",
        ("apply", "report", "trace"),
    ),
    Bad(
        "baseline list",
        _set("baseline", [1]),
        "baseline: expected an object",
        ("apply", "report", "trace"),
    ),
    Bad("top-level list", "[1, 2]\n", "top level", ("apply", "report", "trace")),
    Bad("deep nesting", DEEP_JSON, "nested too deeply"),
    Bad("not UTF-8", NOT_UTF8, ":1: not UTF-8"),
    Bad("cut off", lambda d: json.dumps(d)[:200], "not valid JSON"),
]

PLAN = [
    Bad("idle power negative", _set("devices.0.idle_power_w", -60), "devices[0].idle_power_w"),
    Bad("idle power .inf", _set("devices.0.idle_power_w", math.inf), "devices[0].idle_power_w"),
    Bad("idle power text", _set("devices.0.idle_power_w", "lots"), "devices[0].idle_power_w"),
    Bad("deadline .nan", _set("deadline", math.nan), "deadline: numbers must be finite"),
    Bad("deadline zero", _set("deadline", 0), "deadline: expected a finite number > 0"),
    Bad("deadline negative", _set("deadline", -1.0), "deadline: expected a finite number > 0"),
    Bad("transition negative", _set("devices.0.transition.time_s", -1), "transition.time_s"),
    Bad("transition .inf", _set("devices.0.transition.energy_j", math.inf), "energy_j"),
    Bad("transition list", _set("devices.0.transition", [1]), "devices[0].transition"),
    Bad("gpu negative", _set("devices.0.gpu", -1), "devices[0].gpu"),
    Bad("gpu fraction", _set("devices.0.gpu", 0.5), "devices[0].gpu"),
    Bad("devices object", _set("devices", {"gpu0": 60}), "devices: expected a list"),
    Bad("elements text", _set("elements", "embed"), "elements: expected a list"),
    Bad("element list", _set("elements.0", ["embed"]), "elements[0]: expected a mapping"),
    Bad("after object", _set("elements.1.after", {"embed": 1}), "elements[1].after"),
    Bad("meta list", _set("meta", [1]), "meta: expected a mapping"),
    Bad("groups object", _set("groups", {"a": 1}), "groups: expected a list"),
    Bad("name list", _set("name", [1]), "name: expected a plan name"),
    Bad("libraries number", _set("libraries", 5), "libraries"),
    Bad("meta .nan deep inside", _set("meta", {"a": [{"b": math.nan}]}), "meta.a[0].b"),
    Bad("devices null", _set("devices", None), "devices: expected a list, got null"),
    Bad("top-level list", "- 1\n- 2\n", "expected a mapping at the top level"),
    Bad("deep nesting", "a: " + "[" * 1500 + "]" * 1500 + "\n", "nested too deeply"),
    Bad("not UTF-8", b"name: \xff\n", ":1: not UTF-8"),
    Bad("bad YAML", "devices: [\n", "not valid YAML"),
]

FRONTIER = [
    Bad("makespan negative", "makespan_s,energy_j\n-1,795.4\n", ":2: column 'makespan_s'"),
    Bad("makespan zero", "makespan_s,energy_j\n0,795.4\n", ":2: column 'makespan_s'"),
    Bad("makespan inf", "makespan_s,energy_j\ninf,795.4\n", ":2: column 'makespan_s'"),
    Bad("energy negative", "makespan_s,energy_j\n1,-400\n", ":2: column 'energy_j'"),
    Bad("energy nan", "makespan_s,energy_j\n1,nan\n", ":2: column 'energy_j'"),
    Bad("energy text", "makespan_s,energy_j\n1,lots\n", ":2: column 'energy_j' is 'lots'"),
    Bad("energy empty", "makespan_s,energy_j\n1,\n", ":2: column 'energy_j' is empty"),
    Bad(
        "bound above energy",
        "makespan_s,energy_j,lower_bound_j\n1,10,20\n",
        ":2: column 'lower_bound_j': the lower bound 20 J is above",
    ),
    Bad("bound negative", "makespan_s,energy_j,lower_bound_j\n1,10,-2\n", "'lower_bound_j'"),
    Bad("std negative", "makespan_s,energy_j,energy_std_j\n1,10,-2\n", ":2: column 'energy_std_j'"),
    Bad("std inf", "makespan_s,energy_j,energy_std_j\n1,10,inf\n", ":2: column 'energy_std_j'"),
    Bad(
        "outside own interval",
        "element,time_s,energy_j,energy_low_j,energy_high_j\na,1,5,6,7\n",
        ":2: the energy 5 J lies outside its own interval",
    ),
    Bad("short row", "makespan_s,energy_j,status\n1,2\n", ":2: expected 3 fields, found 2"),
    Bad("long row", "makespan_s,energy_j\n1,2,3\n", ":2: expected 2 fields, found 3"),
    Bad("cut off", "makespan_s,energy_j\n1,2\n1.5,33.", ":3: the last line is cut off"),
    Bad("cut off short", "makespan_s,energy_j,status\n1,2,ok\n1.5", ":3: the last line is cut"),
    Bad("no rows", "makespan_s,energy_j\n", "no rows after the header"),
    Bad("empty file", "", "empty file"),
    Bad("unknown header", "when,how_much\n1,2\n", ":1: header 'when,how_much' lacks"),
    Bad("oversized field", "makespan_s,energy_j\n1," + "9" * 200_000 + "\n", "longer than"),
    Bad("unclosed quote", 'makespan_s,energy_j\n1,"2\n', ":2: not a valid CSV row"),
    Bad("text after quote", 'makespan_s,energy_j\n1,"2"x\n', ":2: not a valid CSV row"),
    Bad("not UTF-8", b"makespan_s,energy_j\n1,\xff\n", ":2: not UTF-8"),
]

MEASUREMENT = [
    Bad("energy negative", _set("total_energy_j", -400), "total_energy_j: expected a finite"),
    Bad("time zero", _set("total_time_s", 0), "total_time_s: expected a finite number > 0"),
    Bad("time NaN", _token("total_time_s", "NaN"), ":1: numbers must be finite, got NaN"),
    Bad("region energy -400", _set("regions.0.energy_j", -400), "regions[0].energy_j"),
    Bad("region time negative", _set("regions.0.time_s", -1), "regions[0].time_s"),
    Bad("calls zero", _set("regions.1.calls", 0), "regions[1].calls"),
    Bad(
        "region larger than run",
        _set("regions.1", {"name": "all", "energy_j": 50, "time_s": 5.0, "calls": 1}),
        "regions[1]: region 'all' takes 5 s over 1 call(s), longer than the whole run",
    ),
    Bad(
        "region more energy than run",
        _set("regions.0", {"name": "hot", "energy_j": 500, "time_s": 0.5}),
        "regions[0]: region 'hot' spends 500 J",
    ),
    Bad("calls fraction", _set("regions.0.calls", 1.5), "regions[0].calls"),
    Bad("depth negative", _set("regions.0.depth", -1), "regions[0].depth"),
    Bad("region list", _set("regions.0", ["forward", 40]), "regions[0]: expected an object"),
    Bad("regions text", _set("regions", "forward"), "regions: expected a list of objects"),
    Bad("regions map of lists", _set("regions", {"fwd": [1]}), "regions.fwd: expected an object"),
    Bad("power negative", _set("samples.power_w", [50, -5, 49]), "samples[1].power_w"),
    Bad("sample text", _set("samples", ["0,50"]), "samples[0]: expected [time_s, power_w]"),
    Bad("samples unequal", _set("samples.time_s", [0.0]), "samples: samples need equal-length"),
    Bad("event starts before 0", _set("events.0.start_s", -1.0), "events[0]: starts at -1 s"),
    Bad("event ends after run", _set("events.0.end_s", 9.0), "events[0]: ends at 9 s"),
    Bad("event ends before start", _set("events.0.end_s", 0.0), "events[0].end_s"),
    Bad("outside negative", _set("outside_energy_j", -10), "outside_energy_j"),
    Bad("top-level list", "[1, 2]\n", "expected a JSON object at the top level"),
    Bad("deep nesting", DEEP_JSON, "nested too deeply"),
    Bad("not UTF-8", NOT_UTF8, ":1: not UTF-8"),
]

PROFILE_BAD = [
    Bad("time zero", "0,forward,1410,0,23.8\n", ":2: time (s) must be a finite number > 0"),
    Bad("time negative", "0,forward,1410,-0.05,23.8\n", ":2: time (s)"),
    Bad("frequency inf", "0,forward,inf,0.05,23.8\n", ":2: frequency (MHz)"),
    Bad("energy nan", "0,forward,1410,0.05,nan\n", ":2: energy (J)"),
    Bad("energy negative", "0,forward,1410,0.05,-400\n", ":2: energy (J)"),
    Bad("stage negative", "-1,forward,1410,0.05,23.8\n", ":2: stage"),
    Bad("instruction", "0,sideways,1410,0.05,23.8\n", ":2: instruction 'sideways'"),
    Bad("short row", "0,forward,1410,0.05\n", ":2: expected 5 fields, found 4"),
    Bad("cut mid-number", "0,forward,1410,0.05,23.8\n0,backward,1410,0.09,33.", ":3: the last"),
    Bad("cut short", "0,forward,1410,0.05,23.8\n0,backward,14", ":3: the last line is cut off"),
    Bad("oversized field", "0,forward,1410,0.05," + "9" * 200_000 + "\n", "longer than"),
    Bad("not UTF-8", b"0,forward,1410,0.05,\xff\n", ":2: not UTF-8"),
]

PLACEMENTS = [
    Bad("start negative", "- {element: F1, device: gpu0, start: -1ms}\n", "placement 1 (F1)"),
    Bad("start .inf", "- {element: F1, device: gpu0, start: .inf}\n", "[0].start: numbers must"),
    Bad("start text", "- {element: F1, device: gpu0, start: soon}\n", "placement 1 (F1): start"),
    Bad("element list", "- {element: [F1], device: gpu0, start: 0}\n", "placement 1: element"),
    Bad("device list", "- {element: F1, device: [gpu0], start: 0}\n", "(F1): device"),
    Bad("placement list", "- [F1, gpu0, 0]\n", "placement 1: expected a mapping"),
    Bad("placements object", "placements: {F1: 0}\n", "expected a non-empty list"),
    Bad("idle .nan", "idle_power: .nan\nplacements: []\n", "idle_power: numbers must be"),
    Bad("idle negative", "idle_power: -5W\nplacements:\n- {element: F1, start: 0}\n", "idle_power"),
    Bad("unknown key", "- {element: F1, device: gpu0, start: 0, end: 1}\n", "unknown key(s)"),
    Bad("deep nesting", "- " + "[" * 1500 + "]" * 1500 + "\n", "nested too deeply"),
    Bad("not UTF-8", b"- {element: \xff}\n", ":1: not UTF-8"),
]


def _document(kind: str, good: Good) -> Any:
    return copy.deepcopy(
        {
            "library": good.library,
            "plan": good.plan,
            "schedule": good.schedule,
            "measurement": good.measurement,
        }[kind]
    )


def _write_bad(kind: str, bad: Bad, files: Files, good: Good) -> Path:
    path = files.root / GOOD_NAMES[kind]
    content = bad.content
    if callable(content):
        content = content(_document(kind, good))
        if not isinstance(content, (str, bytes)):
            content = _yaml(content) if kind == "plan" else json.dumps(content, indent=2)
    elif kind == "profile" and isinstance(content, str):
        content = "stage,instruction,frequency,time,energy\n" + content
    elif kind == "profile":
        content = b"stage,instruction,frequency,time,energy\n" + content
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _cases() -> Iterator[Any]:
    tables = {
        "library": LIBRARY,
        "schedule": SCHEDULE,
        "plan": PLAN,
        "frontier": FRONTIER,
        "measurement": MEASUREMENT,
        "profile": PROFILE_BAD,
        "placements": PLACEMENTS,
    }
    for kind, table in tables.items():
        for bad in table:
            for command in bad.commands or tuple(COMMANDS[kind]):
                yield pytest.param(kind, bad, command, id=f"{kind}-{bad.name}-{command}")


CASES = list(_cases())


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``eopt`` through its real entry point; return its one-line error."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    err = out.err.strip()
    assert info.value.code == 1, (info.value.code, err, out.out[-2000:])
    assert "Traceback" not in err and "internal error" not in err, err
    assert err.startswith("error: ") and "\n" not in err, err
    return err


@pytest.mark.parametrize(("kind", "bad", "command"), CASES)
def test_bad_file_is_refused_in_one_line_naming_file_and_place(
    kind: str, bad: Bad, command: str, files: Files, good: Good, capsys: pytest.CaptureFixture
) -> None:
    path = _write_bad(kind, bad, files, good)
    err = _refused(COMMANDS[kind][command](files), capsys)
    assert str(path) in err, err
    assert bad.expect in err, err


def test_there_are_at_least_a_hundred_cases() -> None:
    assert len(CASES) + len(WRONG_KIND) >= 100


# Files of the wrong kind ----------------------------------------------------------------------
WRONG_KIND = [
    # (file given, argv, what the file must be called)
    ("plan.yaml", lambda f: ["apply", f["plan.yaml"], "--dry-run"], "a plan (eopt.plan/1)"),
    ("plan.yaml", lambda f: ["report", "--schedule", f["plan.yaml"]], "a plan (eopt.plan/1)"),
    ("plan.yaml", lambda f: ["trace", f["plan.yaml"]], "a plan (eopt.plan/1)"),
    ("plan.yaml", lambda f: ["compose", f["lib.jsonl"], "--schedule", f["plan.yaml"]], "a plan"),
    ("plan.yaml", lambda f: ["compose", f["plan.yaml"], "embed"], "a plan"),
    ("plan.yaml", lambda f: ["report", "--measurement", f["plan.yaml"]], "a plan"),
    (
        "plan.yaml",
        lambda f: [
            *("plan", "pipeline", "--profile", f["plan.yaml"], "--microbatches", "2"),
            *("--idle-power", "80W", "-o", f["p.yaml"]),
        ],
        "a plan",
    ),
    ("lib.jsonl", lambda f: ["report", "--frontier", f["lib.jsonl"]], "a signature library"),
    ("lib.jsonl", lambda f: ["apply", f["lib.jsonl"], "--dry-run"], "a signature library"),
    ("lib.jsonl", lambda f: ["solve", f["lib.jsonl"]], "a signature library"),
    ("lib.jsonl", lambda f: ["report", "--measurement", f["lib.jsonl"]], "a signature library"),
    (
        "lib.jsonl",
        lambda f: ["compose", f["fig2.jsonl"], "--schedule", f["lib.jsonl"]],
        "a signature library",
    ),
    ("s.json", lambda f: ["solve", f["s.json"]], "a schedule (eopt.schedule/1)"),
    ("s.json", lambda f: ["compose", f["s.json"], "embed"], "a schedule"),
    ("s.json", lambda f: ["frontier", f["s.json"]], "a schedule"),
    ("s.json", lambda f: ["report", "--library", f["s.json"]], "a schedule"),
    ("s.json", lambda f: ["report", "--frontier", f["s.json"]], "a schedule"),
    ("s.json", lambda f: ["report", "--measurement", f["s.json"]], "a schedule"),
    ("f.csv", lambda f: ["solve", f["f.csv"]], "a frontier table"),
    ("f.csv", lambda f: ["apply", f["f.csv"], "--dry-run"], "a frontier table"),
    ("f.csv", lambda f: ["compose", f["f.csv"], "embed"], "a frontier table"),
    ("f.csv", lambda f: ["report", "--library", f["f.csv"]], "a frontier table"),
    ("profile.csv", lambda f: ["report", "--frontier", f["profile.csv"]], "a stage profile"),
    ("profile.csv", lambda f: ["apply", f["profile.csv"], "--dry-run"], "a stage profile"),
    ("profile.csv", lambda f: ["solve", f["profile.csv"]], "a stage profile"),
    ("m.json", lambda f: ["apply", f["m.json"], "--dry-run"], "a measurement"),
    ("m.json", lambda f: ["solve", f["m.json"]], "a measurement"),
    ("m.json", lambda f: ["report", "--schedule", f["m.json"]], "a measurement"),
    ("m.json", lambda f: ["report", "--frontier", f["m.json"]], "a measurement"),
    (
        "placements.yaml",
        lambda f: ["apply", f["placements.yaml"], "--dry-run"],
        "a placements file",
    ),
    ("placements.yaml", lambda f: ["solve", f["placements.yaml"]], "a placements file"),
]


@pytest.mark.parametrize(
    ("name", "argv", "called"),
    WRONG_KIND,
    ids=[f"{n}-{' '.join(a(Files(Path('.')))[:2])}" for n, a, _ in WRONG_KIND],
)
def test_a_file_of_another_kind_is_named_for_what_it_is(
    name: str, argv: Callable[[Files], list[str]], called: str, files: Files, capsys
) -> None:
    args = argv(files)
    if "-o" not in args and args[0] in ("report", "trace"):
        args += ["-o", files["out.html" if args[0] == "report" else "out.json"]]
    err = _refused(args, capsys)
    assert f"{files[name]} is {called}" in err or f"is {called}" in err, err
    assert files[name] in err and " takes " in err, err


def test_the_issue_examples_word_for_word(files: Files, capsys) -> None:
    err = _refused(["apply", files["plan.yaml"], "--dry-run"], capsys)
    assert err == (
        f"error: {files['plan.yaml']} is a plan (eopt.plan/1); apply takes a schedule from "
        "`eopt solve`"
    )
    err = _refused(["report", "--frontier", files["lib.jsonl"]], capsys)
    assert "is a signature library (eopt.signature/1); report takes a frontier table" in err
    assert len(err) < 300  # not the file's first 2.8 KB as a CSV header


# Good files still read ------------------------------------------------------------------------
def _ok(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr().err
    return capsys.readouterr().out


def test_good_files_read_by_every_command(files: Files, capsys) -> None:
    for kind, commands in COMMANDS.items():
        for name, argv in commands.items():
            for output in ("r.html", "t.json", "p.yaml", "p.signatures.jsonl"):
                (files.root / output).unlink(missing_ok=True)  # commands refuse to overwrite
            out = _ok(argv(files), capsys)
            assert out, (kind, name)
            written = {"report": "r.html", "trace": "t.json", "plan": "p.yaml"}.get(name)
            assert written is None or (files.root / written).is_file(), (kind, name)


def test_compose_of_a_solved_schedule_gives_its_energy(files: Files, good: Good, capsys) -> None:
    assert good.schedule["energy"]["transitions"] == 0  # else compose leaves them out
    out = _ok(["compose", files["lib.jsonl"], "--schedule", files["s.json"], "--json"], capsys)
    energy = json.loads(out)["signature"]
    composed = energy["static_power"] * energy["time"] + energy["dynamic_energy"]
    assert composed == pytest.approx(good.schedule["energy"]["predicted"], rel=1e-9)


def test_a_utf8_bom_is_accepted_on_csv_and_json(files: Files, good: Good, capsys) -> None:
    bom = "\ufeff"
    Path(files["profile.csv"]).write_text(bom + good.profile, encoding="utf-8")
    Path(files["f.csv"]).write_text(bom + good.frontier, encoding="utf-8")
    Path(files["s.json"]).write_text(bom + json.dumps(good.schedule), encoding="utf-8")
    lib = Path(files["lib.jsonl"])
    lib.write_text(bom + lib.read_text(encoding="utf-8"), encoding="utf-8")
    assert "8 signatures" in " ".join(_ok(COMMANDS["profile"]["plan"](files), capsys).split())
    _ok(COMMANDS["frontier"]["report"](files), capsys)
    _ok(COMMANDS["schedule"]["trace"](files), capsys)
    _ok(COMMANDS["library"]["frontier"](files), capsys)
    from eopt.plan.perseus import read_perseus_profile

    assert read_perseus_profile(files["profile.csv"], 80.0)[0].name == "stage0.forward"


def test_a_last_line_without_newline_is_fine_when_complete(files: Files, good: Good) -> None:
    from eopt.plan.perseus import read_perseus_profile
    from eopt.report import read_frontier_csv

    Path(files["profile.csv"]).write_text(good.profile.rstrip("\n"), encoding="utf-8")
    assert len(read_perseus_profile(files["profile.csv"], 80.0)) == 8
    Path(files["f.csv"]).write_text(good.frontier.rstrip("\n"), encoding="utf-8")
    assert read_frontier_csv(files["f.csv"])[-1].energy_j == 19.97


# Values and writers ---------------------------------------------------------------------------
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 0.0, -1.0, "1410", True])
def test_operating_points_refuse_clocks_that_are_not_finite_positive_numbers(value: Any) -> None:
    from eopt.model.operating_point import OperatingPoint

    for name in ("sm_clock_mhz", "mem_clock_mhz", "power_limit_w"):
        with pytest.raises(ValueError, match=name):
            OperatingPoint(**{name: value})
        with pytest.raises(ValueError, match=f"op_point.{name}"):
            OperatingPoint.from_dict({name: value})


def test_writers_never_write_nan_or_infinity(tmp_path: Path) -> None:
    from eopt.cli._common import write_json
    from eopt.model.fileformats import dumps_json
    from eopt.model.signature import Signature
    from eopt.report import write_trace
    from eopt.report.inputs import Measurement

    write_json(tmp_path / "out.json", {"power_w": math.nan, "ratio": [math.inf, 1.0]})
    assert json.loads((tmp_path / "out.json").read_text()) == {"power_w": None, "ratio": [None, 1]}
    with pytest.raises(ValueError, match=r"cannot write x\.json: a\[1\]\.b: numbers must be"):
        dumps_json({"a": [0, {"b": math.nan}]}, "x.json")
    with pytest.raises(ValueError, match=r"t\.json: traceEvents\[\d+\]\.args\.W: numbers"):
        # A measurement built in code with a NaN sample: no "Infinity"/"NaN" in a trace.
        write_trace(
            tmp_path / "t.json", measurement=Measurement(1.0, 1.0, samples=((0, math.nan),))
        )
    assert not (tmp_path / "t.json").exists()
    # Free-form meta keeps "unknown" as null, so a library line stays valid JSON.
    sig = Signature("a", 1.0, 1.0, 1.0, meta={"ci_low": math.nan})
    assert sig.to_dict()["meta"] == {"ci_low": None}


def test_atomic_writes_never_follow_a_planted_temporary_file(tmp_path: Path) -> None:
    from eopt.devices.guard import _write_json_atomic
    from eopt.model.library import write_library
    from eopt.model.signature import Signature

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    for target in (tmp_path / "lib.jsonl", tmp_path / "gpu-state-1.json"):
        # The old code opened <target>.tmp (and <stem>.tmp) and followed a symlink there.
        for planted in (target.with_name(target.name + ".tmp"), target.with_suffix(".tmp")):
            planted.symlink_to(victim)
    write_library(tmp_path / "lib.jsonl", [Signature("a", 1.0, 1.0, 1.0)])
    _write_json_atomic(tmp_path / "gpu-state-1.json", {"schema": "x"})
    assert victim.read_text() == "keep me"
    assert json.loads((tmp_path / "gpu-state-1.json").read_text()) == {"schema": "x"}
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # the temporary files were renamed into place


def test_atomic_write_keeps_the_old_file_mode(tmp_path: Path) -> None:
    from eopt.model.fileformats import atomic_write_text

    target = tmp_path / "plan.yaml"
    target.write_text("old")
    os.chmod(target, 0o640)
    atomic_write_text(target, "new")
    assert target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o640


def test_reports_never_print_nan_or_negative_shares() -> None:
    from eopt.model.operating_point import OperatingPoint
    from eopt.model.schedule import DeviceInfo, Schedule, ScheduledElement
    from eopt.report import render_report
    from eopt.report.inputs import Measurement, Region

    zero = Schedule(
        elements=(ScheduledElement("a", "a", "g", 0.0, 1.0, 0.0, op_point=OperatingPoint(1410)),),
        devices=(DeviceInfo("g", 0.0),),
        makespan=1.0,
        energy=0.0,
        gap=None,
    )
    unknown = Measurement(0.0, 1.0, regions=(Region("r", math.nan, 0.5),))
    page = render_report(schedule=zero, measurement=unknown)
    assert not re.search(r"\b(nan|inf|infinity)\b", page.lower())
    assert "unknown" in page


def test_detect_kind_names_every_kind(files: Files, good: Good, tmp_path: Path) -> None:
    from eopt.model.fileformats import detect_kind

    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "events.csv").write_text("id,parent_id,name,category,start_ns,end_ns\n")
    (tmp_path / "att.json").write_text('{"schema": "eopt.attribution/1"}')
    (tmp_path / "cmp.json").write_text('{"schema": "eopt.comparison/1"}')
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "index.json").write_text('{"schema": "eopt.runset/1"}')
    (tmp_path / "plan.json").write_text(json.dumps(good.plan))
    expected = {
        files["lib.jsonl"]: "library",
        files["plan.yaml"]: "plan",
        str(tmp_path / "plan.json"): "plan",
        files["s.json"]: "schedule",
        files["f.csv"]: "frontier",
        files["m.json"]: "measurement",
        files["profile.csv"]: "profile",
        files["placements.yaml"]: "placements",
        str(tmp_path / "trace"): "trace",
        str(tmp_path / "att.json"): "attribution",
        str(tmp_path / "cmp.json"): "comparison",
        str(tmp_path / "runs"): "runset",
    }
    found = {path: getattr(detect_kind(path), "key", None) for path in expected}
    assert found == expected
    (tmp_path / "notes.txt").write_text("just some notes\n")
    assert detect_kind(tmp_path / "notes.txt") is None
    assert detect_kind(tmp_path / "missing.json") is None
