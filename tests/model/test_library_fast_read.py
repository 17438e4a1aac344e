"""The fast read of a library (plain ``json.loads`` behind a test for non-finite number
shapes, and :meth:`Signature._read` for the usual line) gives the objects the full
validating path gives, and every line it does not take — a fault included — reads, or
fails with the message, exactly as through the full path."""

from __future__ import annotations

import gc
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from eopt.model import fileformats
from eopt.model.fileformats import FileFormatError, Where, parse_json
from eopt.model.library import LibraryError, read_library, read_library_lines
from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature, SignatureError

SEEDS = [0, 1, 2, 3]


@pytest.fixture
def full_path(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A switch to the reading of before: every number through the checking hooks, and
    every signature and operating point through ``from_dict``'s field-by-field checks."""

    def switch() -> None:
        monkeypatch.setattr(fileformats, "_may_be_non_finite", lambda text: True)
        monkeypatch.setattr(Signature, "_read", classmethod(lambda cls, data: None))
        monkeypatch.setattr(OperatingPoint, "_read", classmethod(lambda cls, data: None))

    return switch


def _number(rng: random.Random, low: float, high: float) -> float | int:
    value = rng.uniform(low, high)
    return int(value) if rng.random() < 0.2 else value


def random_point(rng: random.Random) -> dict[str, Any] | None:
    """An operating point as files hold it: any device fields, ints or floats, nulls,
    sometimes extras."""
    if rng.random() < 0.1:
        return None
    point: dict[str, Any] = {}
    for key in ("sm_clock_mhz", "mem_clock_mhz", "power_limit_w"):
        roll = rng.random()
        if roll < 0.5:
            point[key] = _number(rng, 1, 3000)
        elif roll < 0.6:
            point[key] = None
    if rng.random() < 0.3:
        point["extras"] = rng.choice([None, {}, {"sms": rng.randint(1, 132), "mode": "x"}])
    return point


def random_signature(rng: random.Random, i: int) -> dict[str, Any]:
    """A well-formed library line, with the optional fields present or not."""
    sig: dict[str, Any] = {
        "name": f"k{i % 7}",
        "static_power": _number(rng, 0, 500),
        "time": rng.choice([rng.uniform(1e-6, 10), rng.randint(1, 10), 1e-300]),  # > 0
        "dynamic_energy": rng.choice([_number(rng, 0, 1e4), 0, 0.0, -0.0]),
    }
    optional: dict[str, Any] = {
        "schema": "eopt.signature/1",
        "var_time": rng.choice([_number(rng, 0, 1e-3), 0]),
        "var_energy": _number(rng, 0, 10),
        "devices": rng.choice([[], ["gpu0"], ["gpu0", "gpu1", "gpu0"], ["sim0"]]),
        "workload": {"n": rng.randint(1, 4096), "dtype": "bf16", "shape": [1, 2]},
        "impl": rng.choice(["default", "cublas", "1"]),
        "op_point": random_point(rng),
        "meta": {
            "runs": [{"power_w": [rng.uniform(50, 400) for _ in range(5)]}],
            "n": rng.randint(1, 9),
            "unknown": None,
        },
        "term": rng.choice([f"k{i % 7}", "(a ⊗ b)"]),
        "context": None,
    }
    for key, value in optional.items():
        if rng.random() < 0.7:
            sig[key] = value
    keys = list(sig)
    rng.shuffle(keys)
    return {k: sig[k] for k in keys}


def _fields(sig: Signature) -> list[tuple[str, type, Any]]:
    """Every field with its type: ``==`` alone takes 1 for 1.0."""
    out = []
    for key, value in sorted(vars(sig).items()):
        out.append((key, type(value), value))
        if key == "op_point":
            out.extend((f"op.{k}", type(v), v) for k, v in sorted(vars(value).items()))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_the_fast_path_builds_what_the_full_path_builds(seed: int, full_path: Any) -> None:
    rng = random.Random(seed)
    lines = [random_signature(rng, i) for i in range(300)]
    fast = [Signature.from_dict(json.loads(json.dumps(d))) for d in lines]
    # Each of these well-formed lines is read by the fast path itself, not handed on.
    assert all(Signature._read(json.loads(json.dumps(d))) is not None for d in lines)
    full_path()
    full = [Signature.from_dict(json.loads(json.dumps(d))) for d in lines]
    assert fast == full
    assert [_fields(s) for s in fast] == [_fields(s) for s in full]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_library_reads_the_same_through_both_paths(
    seed: int, tmp_path: Path, full_path: Any
) -> None:
    rng = random.Random(seed)
    text = "\n".join(json.dumps(random_signature(rng, i)) for i in range(200))
    lib = tmp_path / "lib.jsonl"
    lib.write_text("# a comment\n\n" + text + "\n", encoding="utf-8")
    fast = read_library_lines(lib)
    full_path()
    full = read_library_lines(lib)
    assert fast == full
    assert [_fields(s) for _, s in fast] == [_fields(s) for _, s in full]


#: Faults put into one line: (field path, replacement JSON text or None to delete it).
FAULTS: list[tuple[tuple[str, ...], str | None]] = [
    (("time",), "NaN"),
    (("time",), "-Infinity"),
    (("static_power",), "1e999"),
    (("static_power",), "1" + "0" * 400 + ".5"),
    (("dynamic_energy",), "-1"),
    (("dynamic_energy",), "true"),
    (("dynamic_energy",), '"3"'),
    (("time",), "0"),
    (("time",), "2e9"),
    (("var_energy",), "1e40"),
    (("var_time",), "null"),
    (("time",), None),
    (("name",), '""'),
    (("name",), "7"),
    (("schema",), '"eopt.plan/1"'),
    (("devices",), '[""]'),
    (("devices",), "[3]"),
    (("devices",), '"gpu0"'),
    (("devices",), "{}"),
    (("devices",), '""'),
    (("device",), '"gpu0"'),
    (("workload",), "[]"),
    (("meta",), "3"),
    (("meta", "x"), "Infinity"),
    (("meta", "x"), '"NaN is text here"'),
    (("meta", "x"), "1.5e-400"),
    (("meta", "x"), "1e+0300"),
    (("impl",), "0"),
    (("impl",), '""'),
    (("term",), '""'),
    (("term",), "null"),
    (("op_point",), "[]"),
    (("op_point", "sm_clock_mhz"), "0"),
    (("op_point", "power_limit_w"), "0.0"),
    (("op_point", "sm_clock_mhz"), "-5"),
    (("op_point", "sm_clock_mhz"), "false"),
    (("op_point", "sm_clock_mhz"), "1e400"),
    (("op_point", "sm_clock_mhz"), "1" + "0" * 400),
    (("op_point", "mem_clock_mhz"), '"fast"'),
    (("op_point", "extras"), "[]"),
    (("op_point", "boost"), "1"),
    (("context",), "{}"),
    (("context",), '{"entry": {"temperature_c": 40}}'),
    (("context",), '{"entry": {"temperature_c": "hot"}}'),
    (("bogus",), "1"),
]

_MARK = "__FAULT__"


def _corrupt(sig: dict[str, Any], path: tuple[str, ...], value: str | None) -> str:
    """The line with ``value`` (JSON text) at ``path``, or ``path`` deleted."""
    target = sig
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    if value is None:
        target.pop(path[-1], None)
        return json.dumps(sig)
    target[path[-1]] = _MARK
    return json.dumps(sig).replace(json.dumps(_MARK), value)


def _outcome(path: Path) -> Any:
    try:
        return ("read", [_fields(s) for _, s in read_library_lines(path)])
    except LibraryError as exc:
        return ("error", type(exc), str(exc))


@pytest.mark.parametrize("seed", SEEDS)
def test_a_corrupted_line_fails_as_it_did(seed: int, tmp_path: Path, full_path: Any) -> None:
    rng = random.Random(seed)
    files = []
    for k, (where, value) in enumerate(FAULTS):
        lines = [json.dumps(random_signature(rng, i)) for i in range(3)]
        bad = rng.randrange(3)
        lines[bad] = _corrupt(json.loads(lines[bad]), where, value)
        if rng.random() < 0.3:  # and sometimes a syntax error after it
            lines[bad] = lines[bad][:-1] + ', "x": }'
        path = tmp_path / f"lib{k}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        files.append(path)
    fast = [_outcome(p) for p in files]
    full_path()
    full = [_outcome(p) for p in files]
    assert fast == full
    # Most of the faults are refused (what an acceptable one reads as is checked above).
    assert sum(o[0] == "error" for o in fast) >= len(FAULTS) - 8


def test_a_fault_is_named_with_its_file_line_and_field(tmp_path: Path) -> None:
    good = json.dumps({"name": "a", "static_power": 1, "time": 1, "dynamic_energy": 1})
    lib = tmp_path / "lib.jsonl"
    lib.write_text(good + "\n" + good.replace('"time": 1', '"time": NaN') + "\n")
    with pytest.raises(LibraryError, match=r"lib\.jsonl:2: numbers must be finite, got NaN"):
        read_library(lib)
    lib.write_text(good + "\n" + good.replace('"time": 1', '"time": -2') + "\n")
    with pytest.raises(LibraryError, match=r"lib\.jsonl:2: time: expected a finite number ≥ 0"):
        read_library(lib)


def _literal(rng: random.Random) -> str:
    """A JSON number literal of any size: up to 400 integer digits, any exponent."""
    digits = str(rng.randint(1, 9)) + "".join(
        rng.choice("0123456789") for _ in range(rng.choice([0, 3, 20, 150, 210, 320, 400]))
    )
    text = rng.choice(["", "-"]) + digits
    if rng.random() < 0.5:
        text += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 30)))
    if rng.random() < 0.7:
        exponent = str(rng.choice([0, 5, 99, 100, 290, 308, 309, 400, 5000]))
        exponent = "0" * rng.choice([0, 0, 1, 2]) + exponent
        text += rng.choice("eE") + rng.choice(["", "+", "-"]) + exponent
    return text


@pytest.mark.parametrize("seed", SEEDS)
def test_every_number_that_overflows_takes_the_checking_path(seed: int) -> None:
    rng = random.Random(seed)
    where = Where("f.json", error=FileFormatError)
    overflowed = 0
    for _ in range(2000):
        literal = _literal(rng)
        text = f'{{"a": [1, {literal}], "b": "text"}}'
        is_float = any(c in literal for c in ".eE")  # else JSON reads an integer
        if not is_float or math.isfinite(float(literal)):
            checked = json.loads(
                text,
                parse_constant=fileformats._reject_constant,
                parse_float=fileformats._finite_float,
            )
            assert parse_json(text, where) == checked
            continue
        overflowed += 1
        assert fileformats._may_be_non_finite(text)
        with pytest.raises(FileFormatError) as caught:
            parse_json(text, where)
        assert str(caught.value).startswith(f"f.json:1: numbers must be finite, got {literal} ")
    assert overflowed > 100  # the random literals did reach beyond a float


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_json_constants_take_the_checking_path(token: str) -> None:
    text = '{"a": {"b": [1.5, TOKEN]}}'.replace("TOKEN", token)
    assert fileformats._may_be_non_finite(text)
    with pytest.raises(FileFormatError, match=f"numbers must be finite, got {token}"):
        parse_json(text, Where("f.json"))


@pytest.mark.parametrize("seed", SEEDS)
def test_operating_points_read_as_from_dict_reads_them(seed: int) -> None:
    rng = random.Random(seed)
    odd = [0, 0.0, -0.0, -1, -2.5, math.nan, math.inf, True, "1410", 10**400, [], {"a": 1}]
    for _ in range(500):
        point = random_point(rng)
        if point is not None and rng.random() < 0.3:
            point[rng.choice(["sm_clock_mhz", "power_limit_w", "extras", "boost"])] = rng.choice(
                odd
            )
        fast = OperatingPoint._read(point)
        try:
            full = OperatingPoint.from_dict(point)
        except ValueError:
            assert fast is None
            continue
        if fast is not None:
            assert fast == full
            assert [type(v) for v in vars(fast).values()] == [type(v) for v in vars(full).values()]
            assert fast.extras is not (point or {}).get("extras")  # its own copy


def test_fast_signatures_own_their_mappings() -> None:
    data = {
        "name": "a",
        "static_power": 1.0,
        "time": 1.0,
        "dynamic_energy": 1.0,
        "workload": {"n": 1},
        "meta": {"m": 1},
    }
    sig = Signature._read(data)
    assert sig is not None
    assert sig.workload == data["workload"] and sig.workload is not data["workload"]
    assert sig.meta is not data["meta"]
    with pytest.raises(AttributeError):
        sig.time = 2.0  # type: ignore[misc]  # still frozen


def test_from_dict_without_a_place_still_names_the_field() -> None:
    with pytest.raises(SignatureError, match="<signature>: time: expected a finite number"):
        Signature.from_dict({"name": "a", "static_power": 1, "time": -1, "dynamic_energy": 0})


@pytest.mark.parametrize("enabled", [True, False])
def test_reading_leaves_the_garbage_collector_as_it_was(enabled: bool, tmp_path: Path) -> None:
    lib = tmp_path / "lib.jsonl"
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        lib.write_text(json.dumps(random_signature(random.Random(0), 0)) + "\n")
        assert len(read_library(lib)) == 1
        assert gc.isenabled() is enabled
        lib.write_text("{not json\n")
        with pytest.raises(LibraryError):
            read_library(lib)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
