"""Options that read the same everywhere, and answers that -q still gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from eopt.cli import main

ROOT = Path(__file__).resolve().parents[2]
ATTENTION = str(ROOT / "examples" / "attention.jsonl")
DBSCAN = ROOT / "tests" / "data" / "kokkos_dbscan_h100"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(("given", "shown"), [("95%", "95 % interval"), ("0.9", "90 % interval")])
def test_compose_confidence_reads_percent_and_fraction_like_solve(capsys, given, shown):
    code, out, err = _run(
        ["compose", ATTENTION, "seq(prefix, compute)", "--confidence", given], capsys
    )
    assert code == 0, err
    assert shown in " ".join(out.split())


@pytest.mark.parametrize("given", ["95", "1.5", "0%", "100%"])
def test_a_confidence_outside_0_1_is_one_line(capsys, given):
    code, _, err = _run(["compose", ATTENTION, "prefix", "--confidence", given], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code in (1, 2) and len(lines) == 1 and lines[0].startswith("error: --confidence")


def test_compare_quiet_prints_the_answer_in_one_line(capsys):
    argv = ["compare", str(DBSCAN / "fdbscan"), str(DBSCAN / "fdbscan-dense"), "-q"]
    code, out, err = _run([*argv, "--region", "DBSCANCalculation"], capsys)
    assert code == 0, err
    (line,) = out.splitlines()
    assert line.startswith("fdbscan-dense vs fdbscan (DBSCANCalculation): median energy")
    assert "% CI of 1 − B/A" in line
    code, out, _ = _run(argv, capsys)
    assert code == 0 and len(out.splitlines()) == 1


def test_measure_help_names_only_commands_that_exist(capsys):
    code, out, _ = _run(["measure", "--help"], capsys)
    assert code == 0 and "report --trace" not in out and "report --measurement" in out


def test_a_frontier_without_variances_says_so(tmp_path, capsys):
    import json

    sig = {"schema": "eopt.signature/1", "name": "k", "impl": "a", "static_power": 100.0,
           "time": 0.01, "dynamic_energy": 1.0}  # fmt: skip
    lib = tmp_path / "lib.jsonl"
    lib.write_text(json.dumps(sig) + "\n" + json.dumps({**sig, "impl": "b", "var_energy": 0.01}))
    code, out, err = _run(["frontier", str(lib), "--dominance", "point"], capsys)
    assert code == 0, err
    rows = [line for line in out.splitlines() if "│" in line and "J" not in line]
    assert any("no variance measured" in r and "│ a " in r for r in rows), out
    assert any("…" in r and "│ b " in r for r in rows), out


def test_plan_pipeline_takes_a_plain_sweep_library_with_a_type_map(tmp_path, capsys):
    lib = tmp_path / "gemm.jsonl"
    code, _, err = _run(
        ["sweep", "sim:gemm", "--clocks", "1410,1005", "-q", "-o", str(lib)], capsys
    )
    assert code == 0, err
    plan = ["plan", "pipeline", "--library", str(lib), "-M", "4", "--idle-power", "60W"]
    code, _, err = _run([*plan, "-o", str(tmp_path / "p.yaml")], capsys)
    assert code == 1 and "holds gemm" in err and "--type forward=NAME" in err
    assert "lower --stages" not in err
    mapped = [*plan, "-S", "2", "--type", "forward=gemm", "--type", "backward=gemm"]
    code, _, err = _run([*mapped, "-o", str(tmp_path / "p.yaml")], capsys)
    assert code == 0, err
    text = (tmp_path / "p.yaml").read_text()
    assert text.count("type: gemm") == 16  # 2 stages × 4 microbatches × (F, B)
    code, _, err = _run([*mapped[:-1], "backward=nope", "-o", str(tmp_path / "q.yaml")], capsys)
    assert code == 1 and "no cells of nope" in err and "--type TYPE=NAME" in err
    code, _, err = _run([*plan, "--type", "sideways=gemm", "-o", str(tmp_path / "r.yaml")], capsys)
    assert code == 1 and "--type 'sideways=gemm'" in err


def test_a_region_typo_is_answered_with_the_right_name(capsys):
    argv = ["compare", str(DBSCAN / "fdbscan"), str(DBSCAN / "fdbscan-dense")]
    code, _, err = _run([*argv, "--region", "DBSCANCalculatoin"], capsys)
    assert code == 1 and "did you mean 'DBSCANCalculation'?" in err
    assert "(regions: DBSCANCalculation," in err  # listed first, never cut off
