"""``eopt sweep --shard`` / ``--ray`` and ``eopt library merge`` through the command line:
the acceptance sweeps of the issue, with the CLI's own defaults."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from eopt.cli import cli
from eopt.model.library import read_library

SWEEP = ["sweep", "sim:gemm", "--clocks", "1410,1305,1200,1095,1005,900", "--seed", "3", "-q"]


def _run(args: list[str]):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """``eopt sweep sim:gemm --clocks … --seed 3``, on one GPU."""
    out = tmp_path_factory.mktemp("serial") / "serial.jsonl"
    result = _run([*SWEEP, "-o", out])
    assert result.exit_code == 0, result.output
    assert len(read_library(out)) == 18
    return out


def test_shards_merged_equal_the_serial_sweep(tmp_path, serial, by_cell):
    parts = [tmp_path / f"part{k}.jsonl" for k in (1, 2, 3)]
    for k, part in enumerate(parts, start=1):
        result = _run([*SWEEP, "--shard", f"{k}/3", "-o", part])
        assert result.exit_code == 0, result.output
    assert sum(len(read_library(p)) for p in parts) == 18 and all(p.exists() for p in parts)
    merged = tmp_path / "lib.jsonl"
    result = _run(["library", "merge", *parts, "-o", merged, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["cells"] == 18 and report["duplicates_dropped"] == 0 and report["read"] == 18
    assert by_cell(read_library(merged)) == by_cell(read_library(serial))
    # Merging a part in twice drops its lines as exact duplicates.
    again = _run(["library", "merge", merged, parts[0], "-o", merged])
    assert again.exit_code == 0 and "6 exact duplicates dropped" in again.output
    assert by_cell(read_library(merged)) == by_cell(read_library(serial))


def test_ray_local_over_four_gpus_equals_the_serial_sweep(tmp_path, serial, by_cell):
    out = tmp_path / "lib.jsonl"
    result = _run([*SWEEP, "--ray", "local", "--gpus", "0,1,2,3", "-o", out])
    assert result.exit_code == 0, result.output
    cells = read_library(out)
    assert by_cell(cells) == by_cell(read_library(serial))
    assert len({s.meta["measured_on"]["gpu"] for s in cells}) > 1


def test_conflicting_cells_are_named_in_one_line(tmp_path, serial):
    # The same cells with another seed (and short windows: the cells are what conflict).
    other = tmp_path / "seed4.jsonl"
    quick = ["--min-runs", "3", "--min-time", "0", "--warmup", "1"]
    assert _run([*SWEEP[:-3], "--seed", "4", *quick, "-q", "-o", other]).exit_code == 0
    line = _one_line_error(_run(["library", "merge", serial, other, "-o", tmp_path / "m.jsonl"]))
    assert f"{serial}:1" in line and f"{other}:1" in line and "--pool" in line
    pooled = _run(["library", "merge", serial, other, "--pool", "-o", tmp_path / "m.jsonl"])
    assert pooled.exit_code == 0 and "18 pooled" in pooled.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard", "4/3"], "K must be 1"),
        (["--shard", "two"], "expected K/N"),
        (["--gpus", "0,1"], "--gpus goes with --ray"),
        (["--ray", "local", "--shard", "1/2"], "use one of them"),
        (["--ray", "local", "--no-control", "--clocks", "current"], "nothing to spread"),
        (["--ray", "local"], "name them, e.g. --gpus 0,1,2,3"),
        (["--ray", "local", "--gpus", "0,0"], "listed twice"),
        (["--ray", "10.0.0.1:6379", "--gpus", "0,1"], "how many GPUs"),
    ],
)
def test_bad_many_gpu_options_give_one_line_errors(tmp_path, args, message):
    line = _one_line_error(_run([*SWEEP, *args, "-o", tmp_path / "x.jsonl"]))
    assert message in line
    assert not (tmp_path / "x.jsonl").exists()


def test_ray_without_ray_installed_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an environment without Ray sees
    line = _one_line_error(
        _run([*SWEEP, "--ray", "local", "--gpus", "0,1", "-o", tmp_path / "x.jsonl"])
    )
    assert "pip install 'eopt[ray]'" in line


def test_merge_names_a_missing_library(tmp_path):
    line = _one_line_error(_run(["library", "merge", tmp_path / "no.jsonl", "-o", tmp_path / "o"]))
    assert "no.jsonl" in line and "no such signature library" in line
