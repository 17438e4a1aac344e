"""Signature validation and signature libraries (.jsonl): round trip and bad lines."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from eopt.calculus import (
    Library,
    LibraryError,
    Signature,
    SignatureError,
    append_signature,
    read_library,
    write_library,
)
from eopt.model.operating_point import OperatingPoint


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("time", -1.0, "time must be ≥ 0, got -1.0"),
        ("dynamic_energy", -0.5, "dynamic_energy must be ≥ 0"),
        ("static_power", math.nan, "static_power must be finite, got nan"),
        ("time", math.inf, "time must be finite"),
        ("var_energy", -1e-9, "var_energy must be ≥ 0"),
        ("time", "1.0", "time must be a number, got '1.0'"),
        ("dynamic_energy", True, "must be a number"),
    ],
)
def test_signature_rejects_bad_values(field: str, value: object, message: str) -> None:
    values = {"static_power": 60.0, "time": 1.0, "dynamic_energy": 2.0, field: value}
    with pytest.raises(SignatureError) as info:
        Signature("gemm", **values)  # type: ignore[arg-type]
    assert message in str(info.value) and "'gemm'" in str(info.value)


def test_signature_rejects_empty_name() -> None:
    with pytest.raises(SignatureError, match="non-empty string"):
        Signature("", 1.0, 1.0, 1.0)


def test_signature_derived_quantities() -> None:
    sig = Signature("x", static_power=50.0, time=2.0, dynamic_energy=20.0, var_time=0.01,
                    var_energy=30.0)  # fmt: skip
    assert sig.energy == 120.0 and sig.static_energy == 100.0
    assert sig.var_dynamic == pytest.approx(30.0 - 2500.0 * 0.01)  # Eq. (5)
    assert sig.std_energy == pytest.approx(math.sqrt(30.0))
    assert sig.mean_power == 60.0
    # σ_d² is clamped at 0 when the given σ_E² is smaller than s²σ_T².
    assert sig.with_(var_energy=1.0).var_dynamic == 0.0


def _sample() -> list[Signature]:
    return [
        Signature("gemm", 60.0, 1e-3, 0.2, var_time=1e-10, var_energy=1e-5, devices=("gpu0",),
                  workload={"m": 4096, "n": 4096}, impl="cutlass",
                  op_point=OperatingPoint(1410.0, 1215.0, 300.0, {"sms": 108}),
                  meta={"method": "counter", "runs": 30}),
        Signature("allreduce", 60.0, 2e-3, 0.05, devices=("gpu0", "gpu1"), term="x ⊗ y"),
        Signature("ünïcode.name-1", 0.0, 1e-6, 0.0),  # a file's signatures take time
    ]  # fmt: skip


def test_library_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "lib.jsonl"
    write_library(path, _sample())
    assert read_library(path) == _sample()
    extra = Signature("late", 1.0, 1.0, 1.0)
    append_signature(path, extra)
    assert read_library(path) == [*_sample(), extra]
    for line in path.read_text(encoding="utf-8").splitlines():
        assert json.loads(line)["schema"] == "eopt.signature/1"


def test_library_skips_blank_and_comment_lines(tmp_path: Path) -> None:
    path = tmp_path / "lib.jsonl"
    good = json.dumps(_sample()[0].to_dict())
    path.write_text(f"# header\n\n{good}\n   \n", encoding="utf-8")
    assert read_library(path) == [_sample()[0]]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object, got a list"),
        ('{"name": "a", "static_power": 1, "time": 1}', "field 'dynamic_energy' is missing"),
        ('{"name": "a", "static_power": 1, "time": -2, "dynamic_energy": 0}',
         "time: expected a finite number ≥ 0 (s), got -2"),
        ('{"name": "a", "static_power": NaN, "time": 1, "dynamic_energy": 0}', "must be finite"),
        ('{"name": "a", "static_power": 1, "time": 1, "dynamic_energy": 0, "tme": 1}',
         "unknown field(s) ['tme']"),
        ('{"schema": "eopt.signature/9", "name": "a", "static_power": 1, "time": 1, '
         '"dynamic_energy": 0}', "expected 'eopt.signature/1'"),
        ('{"name": "a", "static_power": 1, "time": 1, "dynamic_energy": 0, '
         '"op_point": {"sm_clock": 1}}', "op_point has unknown key"),
    ],
)  # fmt: skip
def test_bad_library_line_names_file_and_line(tmp_path: Path, line: str, reason: str) -> None:
    path = tmp_path / "lib.jsonl"
    good = json.dumps(_sample()[0].to_dict())
    path.write_text(f"# comment\n{good}\n{line}\n{good}\n", encoding="utf-8")
    with pytest.raises(LibraryError) as info:
        read_library(path)
    assert str(info.value).startswith(f"{path}:3: ")
    assert reason in str(info.value)


def test_unreadable_libraries(tmp_path: Path) -> None:
    with pytest.raises(LibraryError, match="no such signature library"):
        read_library(tmp_path / "missing.jsonl")
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b'{"a": 1}\n\xff\xfe\x00\n')
    with pytest.raises(LibraryError, match=r"bin\.jsonl:1: "):
        read_library(binary)  # line 1 is valid JSON but not a signature
    binary.write_bytes(b"\xff\xfe\x00\n")
    with pytest.raises(LibraryError, match=r"bin\.jsonl:1: not UTF-8"):
        read_library(binary)
    with pytest.raises(LibraryError, match="cannot read"):
        read_library(tmp_path)


def test_library_lookup(tmp_path: Path) -> None:
    lib = Library(_sample())
    assert lib.names() == ["gemm", "allreduce", "ünïcode.name-1"]
    assert lib.by_name("gemm")[0].impl == "cutlass"
    with pytest.raises(KeyError, match=r"no signature named 'gem'.*known: gemm"):
        lib.by_name("gem")
    path = tmp_path / "a.jsonl"
    write_library(path, _sample()[:1])
    assert len(Library.load(path, path)) == 2
