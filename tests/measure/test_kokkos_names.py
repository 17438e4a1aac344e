"""Names as programs give them: bytes that are not UTF-8, names of any length, and the
mangled type names Kokkos gives unnamed kernels."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.cli import attribute as attribute_cli
from eopt.model.trace_io import read_events

_spec = importlib.util.spec_from_file_location(
    "_kokkos_programs", Path(__file__).with_name("test_kokkos_programs.py")
)
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)
connector, cases = helpers.connector, helpers.cases  # the fixtures, built once per session

#: Regions named from a JSON list of hex strings, then a deep copy named from argv[3].
DRIVER = textwrap.dedent(
    """
    import ctypes, json, sys

    lib = ctypes.CDLL(sys.argv[1])
    class Handle(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char * 64)]
    lib.kokkosp_init_library(0, ctypes.c_uint64(20210225), 0, None)
    for name in json.load(open(sys.argv[2])):
        lib.kokkosp_push_profile_region(bytes.fromhex(name))
        lib.kokkosp_pop_profile_region()
    lib.kokkosp_begin_deep_copy(Handle(b"Host"), sys.argv[3].encode(), None, Handle(b"Host"),
                                b"src", None, ctypes.c_uint64(8))
    lib.kokkosp_end_deep_copy()
    lib.kokkosp_finalize_library()
    """
)


def drive(connector: Path, folder: Path, names: list[bytes], copy_name: str = "dst") -> None:
    listing = folder.with_suffix(".json")
    listing.write_text(json.dumps([n.hex() for n in names]))
    env = {**os.environ, "EOPT_KOKKOS_TRACE_DIR": str(folder)}
    subprocess.run(
        [sys.executable, "-c", DRIVER, str(connector), str(listing), copy_name],
        env=env,
        check=True,
        timeout=120,
    )


def broken_names() -> list[bytes]:
    """Every kind of byte sequence that is not UTF-8, valid ones, and random mixtures."""
    fixed = [
        b"caf\xe9",  # Latin-1
        b"\xff\xfe",
        b"\x80 lone continuation",
        b"half \xe2\x82",  # cut short at the end
        b"half \xe2\x82 then more",
        b"\xf0\x9f\x98 cut four",
        b"\xc0\xaf overlong",
        b"\xe0\x80\x80 overlong three",
        b"\xed\xa0\x80 surrogate",
        b"\xf4\x90\x80\x80 above U+10FFFF",
        "valid € 😀 日本".encode(),
        b'needs "quotes", and \xe9\nnewline',
    ]
    rng = random.Random(20240501)
    pieces = [bytes([b]) for b in range(1, 256)] + [c.encode() for c in 'aé€😀,"\n']
    mixed = [b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 24))) for _ in range(300)]
    # names that end in spaces would be trimmed by CSV readers that strip cells
    return fixed + [m for m in mixed if m.strip() == m and m]


def test_names_are_written_as_valid_utf8_replacing_bad_bytes_as_python_does(
    connector, tmp_path
) -> None:
    names = broken_names()
    folder = tmp_path / "t"
    drive(connector, folder, names)
    rows = helpers.csv_rows(folder / "events.csv")  # strict UTF-8, or this raises
    written = [r[2] for r in rows[1:] if r[3] == "USER_REGION"]
    assert written == [n.decode("utf-8", "replace") for n in names]
    assert sum("\ufffd" in w for w in written) > 200


def test_a_program_with_latin1_names_gives_a_trace_eopt_reads(cases, connector, tmp_path) -> None:
    """The repro of the issue: a region named in Latin-1 made eopt refuse its own trace."""
    folder = tmp_path / "t"
    proc = helpers.run_program(cases, connector, folder, "names")
    assert proc.returncode == 0, proc.stderr
    events = read_events(folder / "events.csv")
    assert [e.name for e in events] == [
        "caf\ufffd",
        "\ufffd\ufffd start",
        "half \ufffd",
        "f",  # a name a person gives is never read as a mangled type ("float")
        "i",
        "ok €",
        "kern\ufffdl",
        "i",
    ]
    t0, t1 = min(e.start_ns for e in events), max(e.end_ns for e in events)
    power = tmp_path / "power.csv"
    power.write_text(f"time_ns,power_w\n{t0 - 10**9},100\n{t1 + 10**9},100\n")
    out = CliRunner().invoke(
        attribute_cli.command, [str(power), "--events", str(folder / "events.csv"), "--json"]
    )
    assert out.exit_code == 0, out.output
    regions = {r["name"] for r in json.loads(out.stdout)["regions"]}
    assert {"caf\ufffd", "ok €", "kern\ufffdl"} <= regions


def test_long_names_are_kept_whole(cases, connector, tmp_path) -> None:
    proc = helpers.run_program(cases, connector, tmp_path / "t", "longname", "200000")
    assert proc.returncode == 0, proc.stderr
    (event,) = read_events(tmp_path / "t" / "events.csv")
    assert event.name == "x" * 200000
    # and a deep copy's name, which the 1.0 connector cut at 512 bytes
    drive(connector, tmp_path / "copy", [], copy_name="d" * 10000)
    (copy,) = read_events(tmp_path / "copy" / "events.csv")
    assert copy.name == "d" * 10000 + " (Host) <- src (Host)"


def test_a_name_beyond_what_a_reader_takes_is_cut_visibly_at_a_character(
    connector, tmp_path
) -> None:
    """eopt's reader takes fields up to 1 MiB: a 600 kB name is cut to 512 KiB, at a
    character boundary, ends in an ellipsis, and is counted."""
    long_ascii, long_accents = b"x" * 600_000, ("a" + "é" * 300_000).encode()
    drive(connector, tmp_path / "t", [long_ascii, long_accents])
    rows = helpers.csv_rows(tmp_path / "t" / "events.csv")
    assert rows[1][2] == "x" * 524_288 + "…"
    assert rows[2][2] == "a" + "é" * 262_143 + "…"  # 524 287 bytes: the next é would split
    meta = json.loads((tmp_path / "t" / "metadata.json").read_text())
    assert meta["counts"]["names_cut"] == 2


def test_unnamed_kernels_get_their_demangled_type_names(cases, connector, tmp_path) -> None:
    """Kokkos names an unnamed kernel by its functor's typeid (and its tag's, after a
    slash). The program prints those; c++filt says what they demangle to."""
    cxxfilt = shutil.which("c++filt")
    if cxxfilt is None:
        pytest.fail("c++filt (binutils) is needed: apt-get install -y binutils", pytrace=False)
    proc = helpers.run_program(cases, connector, tmp_path / "t", "unnamed")
    assert proc.returncode == 0, proc.stderr
    mangled = [
        line.split(" ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("typeid ")
    ]
    assert len(mangled) == 3 and all(m.startswith(("Z", "N")) for m in mangled)

    def demangle(name: str) -> str:
        parts = name.split("/")
        out = subprocess.run([cxxfilt, "-t", *parts], capture_output=True, text=True, check=True)
        return "/".join(out.stdout.split("\n")[: len(parts)])

    expected = [demangle(m) for m in mangled]
    assert [e.name for e in read_events(tmp_path / "t" / "events.csv")] == expected
    assert "{lambda(int)#1}" in expected[0] and expected[2].count("/") == 1
