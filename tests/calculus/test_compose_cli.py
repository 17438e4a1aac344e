"""``eopt compose`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.cli import cli, main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ATTENTION = str(EXAMPLES / "attention.jsonl")


def _run(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _fail(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run through the real entry point; return the error it prints, whitespace-joined."""
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err
    return " ".join(err.split())


def test_compose_expression_prints_energy_split_time_and_term() -> None:
    out = " ".join(_run(["compose", ATTENTION, "seq(prefix, par(compute, allreduce))"]).split())
    assert "prefix ⊗ (compute ⊕ allreduce)" in out
    assert "energy 3.32 J (σ 0.024 J; 95 % interval 3.2734 J – 3.3666 J)" in out
    assert "0.5184 J (15.6 %; 120 W over 0.00432 s)" in out  # times always in s
    assert "dynamic 2.8016 J" in out
    assert "time 0.00432 s (σ 1.4e-05 s)" in out


def test_compose_json() -> None:
    data = json.loads(_run(["compose", ATTENTION, "prefix >> (compute | allreduce)", "--json"]))
    assert data["schema"] == "eopt.composition/1"
    assert data["energy_j"] == pytest.approx(3.32)
    assert data["static_energy_j"] == pytest.approx(0.5184)
    assert data["time_s"] == pytest.approx(4.32e-3)
    low, high = data["interval_j"]["low"], data["interval_j"]["high"]
    assert high - data["energy_j"] == pytest.approx(1.959964 * data["std_energy_j"], rel=1e-6)
    assert low < data["energy_j"] < high
    assert data["term"] == "prefix ⊗ (compute ⊕ allreduce)"
    assert data["signature"]["schema"] == "eopt.signature/1"
    assert data["reduction_bias_j"] > 0


def test_compose_schedule_file() -> None:
    library, schedule = EXAMPLES / "figure2_library.jsonl", EXAMPLES / "figure2_schedule.yaml"
    data = json.loads(_run(["compose", str(library), "--schedule", str(schedule), "--json"]))
    assert data["term"].startswith("((F1 ⊗ F2 ⊗ ι ⊗ B1 ⊗ ι ⊗ (B2 ⊕ (ι ⊗ AR))) ⊕multi")
    assert data["time_s"] == pytest.approx(9.5e-3)
    assert data["static_energy_j"] == pytest.approx(2 * 60.0 * 9.5e-3)
    # gpu0 waits 2 ms for B1 and 1 ms for B2; gpu1 1 ms for F1 and 2 ms at the end.
    per = {row["device"]: row for row in data["per_device"]}
    assert per["gpu0"]["idle_s"] == pytest.approx(3e-3)
    assert per["gpu1"]["idle_s"] == pytest.approx(3e-3)
    assert per["gpu0"]["idle_energy_j"] == pytest.approx(60.0 * 3e-3)
    assert sum(row["energy_j"] for row in per.values()) == pytest.approx(data["energy_j"])


def test_compose_idle_power_option_overrides_the_file() -> None:
    args = ["compose", str(EXAMPLES / "figure2_library.jsonl"), "--schedule",
            str(EXAMPLES / "figure2_schedule.yaml"), "--json"]  # fmt: skip
    base = json.loads(_run(args))
    low = json.loads(_run([*args, "--idle-power", "gpu0=30W,gpu1=30"]))
    # Idle time: gpu0 2 + 1 ms, gpu1 1 + 2 ms, now at 30 W instead of 60 W.
    assert base["energy_j"] - low["energy_j"] == pytest.approx(30.0 * 6e-3)


def test_compose_measured_runs_the_deviation_test() -> None:
    expr = "seq(prefix, par(compute, allreduce))"
    agree = json.loads(_run(["compose", ATTENTION, expr, "--measured", "3.33±0.02", "--json"]))
    assert agree["deviation_test"]["passed"] is True
    far = json.loads(_run(["compose", ATTENTION, expr, "--measured", "3.6 +- 0.02", "--json"]))
    assert far["deviation_test"]["passed"] is False
    assert far["deviation_test"]["deviation_j"] == pytest.approx(0.28)
    text = " ".join(_run(["compose", ATTENTION, expr, "--measured", "3.6"]).split())
    assert "deviates" in text


def test_compose_help_has_examples() -> None:
    out = _run(["compose", "--help"])
    assert 'eopt compose examples/attention.jsonl "seq(prefix, par(compute, allreduce))"' in out
    assert "--schedule" in out and "--json" in out


def test_bad_library_line_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lib = tmp_path / "lib.jsonl"
    lines = Path(ATTENTION).read_text(encoding="utf-8").splitlines()
    lines.insert(3, '{"name": "oops", "static_power": 60, "time": 1}')
    lib.write_text("\n".join(lines) + "\n", encoding="utf-8")
    err = _fail(["compose", str(lib), "prefix"], capsys)
    assert f"error: {lib}:4: field 'dynamic_energy' is missing" in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["seq(prefix, par(compute, alreduce))"], "no element named 'alreduce'"),
        (["prefix ⊗ compute ⊕ allreduce"], "ambiguous; add parentheses"),
        (["prefix[impl=nccl]"], "no signature of 'prefix' matches the selector"),
        ([], "give at least one library and an expression"),
        ([ATTENTION], "looks like a library, not an expression"),
        (["prefix", "--measured", "lots"], "cannot read 'lots' as a quantity in J"),
        (["prefix", "--measured", "-5"], "--measured: must be a finite number ≥ 0 J, got '-5'"),
        (["prefix", "--measured", "3.4±nan"], "--measured σ: must be a finite number"),
        (["prefix", "--measured", "3.4MW"], "'MW' is not a unit of energy"),
        (["prefix", "--idle-power", "gpu0"], "cannot read 'gpu0'"),
    ],
)
def test_user_errors_are_clear(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _fail(["compose", ATTENTION, *args], capsys)
    assert expected in err


def test_expression_error_shows_caret_and_keeps_brackets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = _fail(["compose", ATTENTION, "prefix[impl=nccl]"], capsys)
    # Rich markup must not swallow the selector's brackets.
    assert "prefix[impl=nccl]" in err and "^^^^" in err


def test_missing_library_and_schedule_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _fail(["compose", str(tmp_path / "none.jsonl"), "a"], capsys)
    assert "none.jsonl: no such signature library" in err
    sched = tmp_path / "s.yaml"
    sched.write_text("- {element: prefix, device: gpu0, start: 0}\n- {element: nope}\n")
    err = _fail(["compose", ATTENTION, "--schedule", str(sched)], capsys)
    assert f"{sched}:2: placement 2 (nope): missing key(s) ['start']" in err
