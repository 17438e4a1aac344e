"""Plan files: round trips and located validation errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eopt.model.planfile import Plan, PlanError, read_plan, write_plan
from eopt.plan.pipeline import pipeline_plan

GOOD = """\
schema: eopt.plan/1
name: tiny
libraries: [lib.jsonl]
deadline: 2.5
devices:
  - {name: g0, idle_power_w: 60, gpu: 0}
  - {name: g1, idle_power_w: 55.5, transition: {time_s: 0.001, energy_j: 0.2}}
elements:
  - {name: A, device: g0, type: gemm}
  - {name: B, device: g1, type: gemm, after: [A]}
  - {name: C, device: g1, type: comm, after: [A]}
groups:
  - [B, C]
"""


def _write(tmp_path: Path, text: str, name: str = "plan.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_read_good_plan(tmp_path: Path) -> None:
    plan = read_plan(_write(tmp_path, GOOD))
    assert [d.name for d in plan.devices] == ["g0", "g1"]
    assert plan.device("g1").transition_time_s == 0.001
    assert plan.deadline == 2.5
    assert plan.edges() == [("A", "B"), ("A", "C")]
    assert plan.groups == (("B", "C"),)
    # Libraries resolve relative to the plan file, not the working directory.
    assert plan.library_paths() == [tmp_path / "lib.jsonl"]


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip(tmp_path: Path, suffix: str) -> None:
    plan = read_plan(_write(tmp_path, GOOD))
    out = tmp_path / f"copy{suffix}"
    write_plan(out, plan)
    again = read_plan(out)
    assert again.to_dict() == plan.to_dict()


def test_pipeline_plan_round_trips(tmp_path: Path) -> None:
    plan = pipeline_plan(3, 4, 70.0, libraries=["x.jsonl"])
    write_plan(tmp_path / "p.yaml", plan)
    again = read_plan(tmp_path / "p.yaml")
    assert again.edges() == plan.edges()
    assert [e.type for e in again.elements] == [e.type for e in plan.elements]


def test_yaml_text_is_pyyamls_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C dumper (libyaml) writes the text PyYAML's pure-Python dumper writes, on names
    that need quoting, and the plan reads back."""
    import yaml

    from eopt.model import planfile

    odd = ["a: b", "#x", "ü-ß", "'q'", 'd"q', "yes", "1e3", "-", "[x]", "null", " lead"]
    text = GOOD.replace(
        "elements:\n",
        "elements:\n"
        + "".join(
            f"  - {{name: {json.dumps(n)}, device: g0, type: {json.dumps(n)}}}\n" for n in odd
        ),
    )
    plan = read_plan(_write(tmp_path, text))
    assert planfile.SAFE_DUMPER is getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    write_plan(tmp_path / "c.yaml", plan)
    monkeypatch.setattr(planfile, "SAFE_DUMPER", yaml.SafeDumper)
    write_plan(tmp_path / "py.yaml", plan)
    assert (tmp_path / "c.yaml").read_text() == (tmp_path / "py.yaml").read_text()
    assert read_plan(tmp_path / "c.yaml").to_dict() == plan.to_dict()


A_AFTER_C = "{name: A, device: g0, type: gemm, after: [C]}"
BAD_CASES = [
    (
        GOOD.replace("after: [A]}\n  - {name: C", "after: [F9]}\n  - {name: C"),
        r"plan.yaml: elements\[1\].after: unknown element 'F9'",
    ),
    (
        GOOD.replace("device: g1, type: comm", "device: g7, type: comm"),
        r"plan.yaml: elements\[2\].device: unknown device 'g7'",
    ),
    (
        GOOD.replace("{name: A, device: g0, type: gemm}", A_AFTER_C),
        r"plan.yaml: the elements' dependencies form a cycle",
    ),
    (
        GOOD.replace("idle_power_w: 60, ", ""),
        r"plan.yaml: devices\[0\]: field 'idle_power_w' is missing",
    ),
    (
        GOOD.replace("idle_power_w: 60", "idle_power_w: -3"),
        r"devices\[0\].idle_power_w: expected a finite number ≥ 0",
    ),
    (
        GOOD.replace("{name: C, device: g1", "{name: B, device: g1"),
        r"elements\[2\].name: element 'B' is already defined at elements\[1\]",
    ),
    (GOOD.replace("  - [B, C]", "  - [A, C]"), r"groups\[0\]: elements on different devices"),
    (GOOD.replace("deadline: 2.5", "deadline: soon"), r"plan.yaml: deadline: expected a number"),
    (GOOD.replace("name: tiny", "nmae: tiny"), r"unknown field\(s\) \['nmae'\]"),
    (GOOD.replace("type: comm, ", "kind: comm, "), r"elements\[2\]: unknown field\(s\) \['kind'\]"),
    ("devices: [\n  {name: g0\n", r"plan.yaml:\d+: not valid YAML"),
    ("- 1\n- 2\n", r"expected a mapping at the top level"),
]


@pytest.mark.parametrize(("text", "message"), BAD_CASES)
def test_bad_plans_name_file_and_place(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        read_plan(_write(tmp_path, text))


def test_cycle_names_its_elements(tmp_path: Path) -> None:
    text = GOOD.replace(
        "{name: A, device: g0, type: gemm}", "{name: A, device: g0, type: gemm, after: [B]}"
    )
    with pytest.raises(PlanError) as info:
        read_plan(_write(tmp_path, text))
    assert "A → B → A" in str(info.value) or "B → A → B" in str(info.value)


def test_bad_json_names_line(tmp_path: Path) -> None:
    path = _write(tmp_path, '{\n  "devices": [\n  oops\n]}', "plan.json")
    with pytest.raises(PlanError, match=r"plan.json:3: not valid JSON"):
        read_plan(path)


def test_missing_file() -> None:
    with pytest.raises(PlanError, match="no such plan file"):
        read_plan("/nonexistent/plan.yaml")


def test_plan_built_in_code_is_validated() -> None:
    data = json.loads(json.dumps(read_plan_text(GOOD)))
    data["elements"][0]["after"] = ["A"]
    with pytest.raises(PlanError, match="depends on itself"):
        Plan.from_dict(data)


def read_plan_text(text: str) -> dict:  # type: ignore[type-arg]
    import yaml

    return yaml.safe_load(text)


GROUPED = """\
schema: eopt.plan/1
devices:
  - {name: g0, idle_power_w: 60}
  - {name: g1, idle_power_w: 60}
elements:
  - {name: A, device: g0, type: gemm}
  - {name: B, device: g0, type: comm, after: [A]}
  - {name: C, device: g1, type: gemm, after: [A]}
  - {name: D, device: g0, type: gemm, after: [C]}
  - {name: E, device: g1, type: comm, after: [C]}
  - {name: F, device: g1, type: gemm}
groups:
  - [B, D]
"""
GROUP_ORDER_CASES = [
    (
        GROUPED.replace("type: gemm, after: [C]}", "type: gemm, after: [C, B]}"),
        r"plan.yaml: elements\[3\].after: 'D' depends on 'B', but both are in groups\[0\]",
    ),
    (
        GROUPED.replace("{name: C, device: g1, type: gemm, after: [A]}",
                        "{name: C, device: g1, type: gemm, after: [B]}"),
        r"plan.yaml: a group waits for itself: groups\[0\] \[B, D\] → C → groups\[0\] \[B, D\]",
    ),
    (
        GROUPED.replace("type: gemm, after: [C]}", "type: gemm, after: [E]}")
        .replace("type: gemm}\ngroups", "type: gemm, after: [B]}\ngroups")
        + "  - [E, F]\n",
        r"a group waits for itself: .*groups\[1\] \[E, F\]",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), GROUP_ORDER_CASES)
def test_groups_that_wait_for_themselves_are_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    """A group co-starts: no member may wait for another, directly, through another
    element (B → C → D) or through another group (F waits for B, D for E)."""
    with pytest.raises(PlanError, match=message):
        read_plan(_write(tmp_path, text))


def test_device_order_is_topological_with_file_order_ties(tmp_path: Path) -> None:
    plan = read_plan(_write(tmp_path, GROUPED))
    assert plan.units() == [("A",), ("B", "D"), ("C",), ("E",), ("F",)]
    # g1: C and F are both free of g1-ordering; F is free from the start but comes later
    # in the file, and C becomes ready (after A) before F is picked.
    assert plan.device_order() == {"g0": [("A",), ("B", "D")], "g1": [("C",), ("E",), ("F",)]}
    # A file order that is not topological: X waits for Y, so Y runs first on g0 although
    # X comes first in the file; Z, free, keeps its file place after X.
    text = """\
devices: [{name: g0, idle_power_w: 1}, {name: g1, idle_power_w: 1}]
elements:
  - {name: X, device: g0, type: t, after: [W]}
  - {name: Z, device: g0, type: t}
  - {name: W, device: g1, type: t, after: [Y]}
  - {name: Y, device: g0, type: t}
"""
    plan = read_plan(_write(tmp_path, text, "order.yaml"))
    assert plan.device_order() == {"g0": [("Z",), ("Y",), ("X",)], "g1": [("W",)]}
