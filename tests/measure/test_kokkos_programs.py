"""The Kokkos programs and connectors the connector's tests run, built once per session,
and the check that the files users get stay what the 1.0 connector wrote.

The other ``test_kokkos_*`` modules load this one for its builders and fixtures: programs
are compiled against Debian's Kokkos into the session's temporary folder, keyed by their
source, so each is built once however many modules use it.
"""

from __future__ import annotations

import collections
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from eopt.measure.kokkos import build_connector, find_compiler
from eopt.model.trace_io import read_events

KOKKOS_HEADER = Path("/usr/include/trilinos/Kokkos_Core.hpp")
EVENTS_COLUMNS = "id,parent_id,name,category,start_ns,end_ns,device_id"


def _cached(tmp_path_factory: pytest.TempPathFactory, source: Path, name: str) -> Path:
    key = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    return tmp_path_factory.getbasetemp() / "kokkos-builds" / key / name


def build_program(tmp_path_factory: pytest.TempPathFactory, source: Path) -> Path:
    """A C++ Kokkos program built against Debian's Kokkos, once per session."""
    out = _cached(tmp_path_factory, source, source.stem)
    if out.exists():
        return out
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None or not KOKKOS_HEADER.exists():
        pytest.fail(
            "Debian's Kokkos is needed: apt-get install -y g++ libtrilinos-kokkos-dev "
            "(scripts/test.sh does this when run as root)",
            pytrace=False,
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    cmd = [cxx, "-O1", "-std=c++17", f"-I{KOKKOS_HEADER.parent}", str(source), "-o", str(partial)]
    compile_or_fail([*cmd, "-ltrilinos_kokkoscore", "-ldl"])
    partial.replace(out)
    return out


def compile_or_fail(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-2000:]}", pytrace=False)


def build_connector_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """eopt's connector, built by eopt once per session."""
    return build_connector(cache_dir=tmp_path_factory.getbasetemp() / "kokkos-connector")


def build_reference_connector(tmp_path_factory: pytest.TempPathFactory, source: Path) -> Path:
    """The frozen 1.0 connector (tests/data/kokkos/reference_connector_1_0.c)."""
    out = _cached(tmp_path_factory, source, "libreference.so")
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [find_compiler(), "-O2", "-fPIC", "-shared", "-pthread", str(source)]
        compile_or_fail([*cmd, "-o", str(out)])
    return out


def run_program(
    program: Path, connector: Path, trace_dir: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """Runs ``program args`` with the connector attached; does not check its status."""
    full = {
        **os.environ,
        "KOKKOS_TOOLS_LIBS": str(connector),
        "KOKKOS_PROFILE_LIBRARY": str(connector),
        "EOPT_KOKKOS_TRACE_DIR": str(trace_dir),
        **env,
    }
    return subprocess.run(
        [str(program), *args], env=full, capture_output=True, text=True, timeout=120
    )


def structure(events) -> collections.Counter:
    """(name, category, parent's name) of every event, counted."""
    by_id = {e.id: e for e in events}
    return collections.Counter(
        (e.name, e.category, by_id[e.parent_id].name if e.parent_id else None) for e in events
    )


def csv_rows(path: Path) -> list[list[str]]:
    """The rows of a CSV, read strictly as UTF-8 by the standard library."""
    return list(csv.reader(io.StringIO(path.read_bytes().decode("utf-8"), newline="")))


# The files users get ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def connector(tmp_path_factory) -> Path:
    return build_connector_once(tmp_path_factory)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_file) -> Path:
    return build_reference_connector(
        tmp_path_factory, data_file("kokkos/reference_connector_1_0.c")
    )


@pytest.fixture(scope="module")
def app(tmp_path_factory, data_file) -> Path:
    return build_program(tmp_path_factory, data_file("kokkos/app.cpp"))


@pytest.fixture(scope="module")
def cases(tmp_path_factory, data_file) -> Path:
    return build_program(tmp_path_factory, data_file("kokkos/cases.cpp"))


TIME = re.compile(r"^[1-9][0-9]{18}$")  # ns since the epoch, 2001 to 2286
TIMES = re.compile(rb",[1-9][0-9]{18}(?=,)")


@pytest.mark.parametrize(
    ("program", "args"),
    [("app", ()), ("app", ("7",)), ("cases", ("heavy", "500")), ("cases", ("nest", "40"))],
)
def test_events_csv_is_what_the_1_0_connector_wrote(
    program, args, request, connector, reference, tmp_path
) -> None:
    """The same program under both connectors: the same rows in the same order, field by
    field; only the times differ, and they are epoch nanoseconds either way."""
    binary = request.getfixturevalue(program)
    rows = {}
    for label, library in (("old", reference), ("new", connector)):
        proc = run_program(binary, library, tmp_path / label, *args)
        assert proc.returncode == 0, proc.stderr
        rows[label] = csv_rows(tmp_path / label / "events.csv")
    old, new = rows["old"], rows["new"]
    assert ",".join(new[0]) == ",".join(old[0]) == EVENTS_COLUMNS
    assert len(new) == len(old) > 3
    for a, b in zip(old[1:], new[1:], strict=True):
        assert (b[0], b[1], b[2], b[3], b[6]) == (a[0], a[1], a[2], a[3], a[6])
        assert TIME.match(b[4]) and TIME.match(b[5]) and int(b[5]) >= int(b[4])
    # and byte for byte, once the times are masked
    masked = [TIMES.sub(b",T", (tmp_path / label / "events.csv").read_bytes()) for label in rows]
    assert masked[0] == masked[1]
    meta_old = json.loads((tmp_path / "old" / "metadata.json").read_text())
    meta_new = json.loads((tmp_path / "new" / "metadata.json").read_text())
    assert set(meta_old) <= set(meta_new)
    assert {k: meta_new["counts"][k] for k in meta_old["counts"]} == meta_old["counts"]
    assert meta_new["ended"] == "finalize"


def test_the_callback_heavy_program_loses_nothing(cases, connector, tmp_path) -> None:
    """20 000 iterations: more records than a thread's ring holds, so the flusher and the
    final conversion both contribute; every event comes back once."""
    proc = run_program(cases, connector, tmp_path / "t", "heavy", "20000")
    assert proc.returncode == 0, proc.stderr
    events = read_events(tmp_path / "t" / "events.csv")
    assert structure(events) == {
        ("Kokkos::View::initialization [x]", "PARALLEL_FOR", None): 1,
        ("iteration", "USER_REGION", None): 20000,
        ("touch", "PARALLEL_FOR", "iteration"): 20000,
        ("sum", "PARALLEL_REDUCE", "iteration"): 20000,
    }
    assert sorted(e.id for e in events) == list(range(1, 60002))
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["events.csv", "metadata.json"]
