"""``eopt library merge``: shards joined, exact duplicates dropped, conflicting cells named
(or pooled per GPU model on request)."""

from __future__ import annotations

import numpy as np
import pytest

from eopt.model.library import (
    LibraryConflictError,
    LibraryError,
    cell_key,
    library_lock,
    merge_libraries,
    pool_signatures,
    read_library,
    write_library,
)
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature
from eopt.runs.gpus import GpuSpec
from eopt.runs.sweep import Grid, sweep


@pytest.fixture(scope="module")
def two_sweeps(tmp_path_factory, gemm, fast):
    """One small grid swept twice with different seeds: the same cells, other numbers."""
    kernel = gemm(impls=("cublas", "cutlass"))
    out = []
    for seed in (3, 4):
        spec = GpuSpec("sim", seed - 3, "A100-SXM4-40GB", seed)
        path = tmp_path_factory.mktemp(f"seed{seed}") / "lib.jsonl"
        sweep(kernel, Grid.build(kernel, spec.open(), clocks="1410,1005"), spec, path,
              policy=fast)  # fmt: skip
        out.append(path)
    return out


def test_exact_duplicates_are_dropped(tmp_path, two_sweeps, by_cell):
    a, _ = two_sweeps
    result = merge_libraries([a, a], tmp_path / "out.jsonl")
    assert result.read == 8 and result.duplicates == 4
    assert by_cell(read_library(tmp_path / "out.jsonl")) == by_cell(read_library(a))


def test_conflicting_cells_are_named_by_file_and_line(tmp_path, two_sweeps):
    a, b = two_sweeps
    out = tmp_path / "out.jsonl"
    with pytest.raises(LibraryConflictError) as info:
        merge_libraries([a, b], out)
    message = str(info.value)
    assert f"{a}:1" in message and f"{b}:1" in message and "(and 1 more cell)" in message
    assert "/sim0" in message and "/sim1" in message and "--pool" in message
    assert "\n" not in message
    assert not out.exists()


def test_pooling_on_request_keeps_one_cell_per_model(tmp_path, two_sweeps):
    a, b = two_sweeps
    result = merge_libraries([a, b], tmp_path / "out.jsonl", pool=True)
    assert len(result.pooled) == 4 and result.duplicates == 0
    pooled = read_library(tmp_path / "out.jsonl")
    assert sorted(map(cell_key, pooled)) == sorted(map(cell_key, read_library(a)))
    for sig in pooled:
        places = [p["measured_on"]["gpu"] for p in sig.meta["pooled_from"]]
        assert places == ["sim0", "sim1"] and "measured_on" not in sig.meta


def test_a_library_can_be_merged_into_itself(tmp_path, two_sweeps, by_cell):
    a, _ = two_sweeps
    own = tmp_path / "own.jsonl"
    own.write_bytes(a.read_bytes())
    merge_libraries([own, a], own)
    assert by_cell(read_library(own)) == by_cell(read_library(a))


def test_a_library_being_written_is_not_merged_into(tmp_path, two_sweeps):
    a, _ = two_sweeps
    out = tmp_path / "busy.jsonl"
    with library_lock(out), pytest.raises(LibraryError, match="another eopt process"):
        merge_libraries([a], out)


def test_a_bad_line_is_named(tmp_path, two_sweeps):
    a, _ = two_sweeps
    bad = tmp_path / "bad.jsonl"
    bad.write_text(a.read_text() + '{"name": "x"}\n')
    with pytest.raises(LibraryError, match=rf"{bad}:5"):
        merge_libraries([bad], tmp_path / "out.jsonl")


def _measured(samples_t, samples_e, static_w, gpu):
    """A signature from per-window samples: means, and single-run variances as the
    population variance (ddof 0) of the windows."""
    t, e = np.asarray(samples_t), np.asarray(samples_e)
    return Signature(
        "gemm", static_w, float(t.mean()), float(e.mean() - static_w * t.mean()),
        var_time=float(t.var()), var_energy=float(e.var()), impl="cublas",
        op_point=OperatingPoint(1410.0), workload={"m": 8192},
        meta={"n": len(t), "device_model": "A100", "measured_on": {"host": "h", "gpu": gpu},
              "method": "counter"},
    )  # fmt: skip


def test_pooled_numbers_are_those_of_all_windows_together():
    rng = np.random.default_rng(7)
    parts = [
        (rng.normal(0.010, 0.001, n), rng.normal(3.0, 0.2, n), s, g)
        for n, s, g in ((12, 80.0, "gpu0"), (5, 82.0, "gpu1"), (30, 79.0, "gpu2"))
    ]
    pooled = pool_signatures([_measured(*p) for p in parts])
    all_t = np.concatenate([p[0] for p in parts])
    all_e = np.concatenate([p[1] for p in parts])
    n = np.array([len(p[0]) for p in parts])
    assert pooled.meta["n"] == 47 and pooled.meta["method"] == "counter"
    assert pooled.time == pytest.approx(all_t.mean(), rel=1e-12)
    assert pooled.energy == pytest.approx(all_e.mean(), rel=1e-12)
    assert pooled.var_time == pytest.approx(all_t.var(), rel=1e-9)
    assert pooled.var_energy == pytest.approx(all_e.var(), rel=1e-9)
    assert pooled.static_power == pytest.approx(np.average([80.0, 82.0, 79.0], weights=n))
    assert [p["measured_on"]["gpu"] for p in pooled.meta["pooled_from"]] == [
        "gpu0", "gpu1", "gpu2"
    ]  # fmt: skip


def test_only_measurements_of_one_cell_are_pooled():
    one = _measured([0.01, 0.011], [3.0, 3.1], 80.0, "gpu0")
    other = one.with_(impl="cutlass")
    with pytest.raises(ValueError, match="not all of the signatures"):
        pool_signatures([one, other])
    with pytest.raises(ValueError, match="no signatures"):
        pool_signatures([])


def test_merge_writes_what_it_returns(tmp_path, two_sweeps):
    a, b = two_sweeps
    result = merge_libraries([a, b], None, pool=True)
    assert result.path is None and len(result.signatures) == 4
    write_library(tmp_path / "x.jsonl", result.signatures)
    assert [cell_key(s) for s in read_library(tmp_path / "x.jsonl")] == [
        cell_key(s) for s in result.signatures
    ]
