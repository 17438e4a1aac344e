"""eopt's Kokkos Tools connector, for real: built here, loaded by a Kokkos program compiled
against Debian's Kokkos, and driven callback by callback through ctypes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from eopt.attribute.engine import attribute
from eopt.cli import kokkos as kokkos_cli
from eopt.cli import measure as measure_cli
from eopt.measure.kokkos import KokkosBuildError, build_connector, connector_env, find_compiler
from eopt.model.trace_io import read_events, read_trace, read_traces

_spec = importlib.util.spec_from_file_location(
    "_kokkos_programs", Path(__file__).with_name("test_kokkos_programs.py")
)
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)
connector = helpers.connector  # the fixture, built once per session
structure = helpers.structure


@pytest.fixture(scope="module")
def kokkos_app(app) -> Path:
    """The test program (tests/data/kokkos/app.cpp) built against Debian's Kokkos."""
    return app


app = helpers.app


def run_app(app: Path, connector: Path, trace_dir: Path, *args: str, **env: str) -> None:
    full = {**os.environ, **connector_env(connector, trace_dir), **env}
    subprocess.run([str(app), *args], check=True, env=full, timeout=120)


EXPECTED = {
    ("Kokkos::View::initialization [x]", "PARALLEL_FOR", None): 1,
    ("setup", "USER_REGION", None): 1,
    ("fill", "PARALLEL_FOR", "setup"): 1,
    ("solve", "USER_REGION", None): 1,
    ("iteration", "USER_REGION", "solve"): 3,
    ("dot", "PARALLEL_REDUCE", "iteration"): 3,
    ("prefix", "PARALLEL_SCAN", "iteration"): 3,
    ('phase "a", b', "USER_REGION", None): 1,
    ("touch", "PARALLEL_FOR", 'phase "a", b'): 1,
    ("Kokkos::View::initialization [x_mirror]", "PARALLEL_FOR", None): 1,
    ("x_mirror (Host) <- x (Host)", "DEEP_COPY", None): 1,
}


def test_a_real_kokkos_program_comes_back_exactly(kokkos_app, connector, tmp_path) -> None:
    run_app(kokkos_app, connector, tmp_path / "t")
    events = read_events(tmp_path / "t" / "events.csv")
    assert structure(events) == EXPECTED
    for e in events:  # children inside their parents, on the epoch clock
        assert e.end_ns >= e.start_ns > 1.6e18
    meta = json.loads((tmp_path / "t" / "metadata.json").read_text())
    assert meta["counts"]["events"] == sum(EXPECTED.values())
    assert meta["counts"]["unclosed"] == meta["counts"]["pop_without_push"] == 0
    assert meta["rank"] == -1


def test_each_mpi_rank_writes_its_own_folder(kokkos_app, connector, tmp_path) -> None:
    for rank, var in ((0, "OMPI_COMM_WORLD_RANK"), (1, "PMI_RANK")):
        run_app(kokkos_app, connector, tmp_path / "t", "1", **{var: str(rank)})
    for rank in (0, 1):
        events = read_events(tmp_path / "t" / f"rank_{rank}" / "events.csv")
        assert sum(e.name == "iteration" for e in events) == 1


def test_eopt_measure_kokkos_attributes_per_region_and_kernel(
    kokkos_app, tmp_path, monkeypatch, wall_gpu
) -> None:
    """Two GPUs at a constant 150 W and 250 W: every event's energy is its duration times
    that power, per GPU, and the sum."""
    gpus = [wall_gpu(150.0), wall_gpu(250.0)]
    gpus[1].index, gpus[1].name = 1, "wall1"
    monkeypatch.setattr(measure_cli, "open_measure_gpus", lambda selection, backend: gpus)
    monkeypatch.setattr(measure_cli, "open_rapl_source", lambda backend: None)
    folder = tmp_path / "run"
    result = CliRunner().invoke(
        measure_cli.command,
        ["--kokkos", "--gpus", "all", "--trace-dir", str(folder), "--json", "--", str(kokkos_app)],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schema"] == "eopt.attribution/1"
    trace = read_trace(folder)
    assert structure(trace.events) == EXPECTED
    assert {s.label for s in trace.series} == {"GPU 0", "GPU 1"}
    regions = {r["name"]: r for r in data["regions"]}
    solve = regions["solve"]
    assert solve["calls"] == 1 and regions["iteration"]["calls"] == 3
    assert solve["by_series"]["GPU 0"] == pytest.approx(150.0 * solve["time_s"], rel=1e-3)
    assert solve["by_series"]["GPU 1"] == pytest.approx(250.0 * solve["time_s"], rel=1e-3)
    assert solve["inclusive_energy_j"] == pytest.approx(400.0 * solve["time_s"], rel=1e-3)
    assert regions["dot"]["category"] == "PARALLEL_REDUCE"
    excl = sum(r["exclusive_energy_j"] for r in data["regions"])
    assert excl + data["outside_energy_j"] == pytest.approx(data["total_energy_j"], rel=1e-9)
    assert trace.metadata["connector"]["counts"]["events"] == sum(EXPECTED.values())


def test_mpi_ranks_share_the_nodes_power(kokkos_app, tmp_path, monkeypatch, wall_gpu) -> None:
    """Two ranks (run one after the other here) write rank_0/ and rank_1/; the node's power
    is written once and the ranks' events are merged onto it."""
    monkeypatch.setattr(
        measure_cli, "open_measure_gpus", lambda selection, backend: [wall_gpu(100.0)]
    )
    monkeypatch.setattr(measure_cli, "open_rapl_source", lambda backend: None)
    script = f"PMI_RANK=0 {kokkos_app} 1 && PMI_RANK=1 {kokkos_app} 2"
    folder = tmp_path / "mpi"
    result = CliRunner().invoke(
        measure_cli.command,
        ["--kokkos", "--trace-dir", str(folder), "--json", "--", "sh", "-c", script],
    )
    assert result.exit_code == 0, result.output
    assert (folder / "rank_0" / "events.csv").exists() and (folder / "power_samples.csv").exists()
    (merged,) = read_traces(folder)
    assert merged.metadata["ranks"] == [0, 1]
    att = attribute(merged)
    assert att.region("iteration").calls == 3  # 1 + 2
    assert att.region("solve").calls == 2
    data = json.loads(result.stdout)
    assert data["total_energy_j"] == pytest.approx(att.total_energy_j)


def test_no_sensor_still_records_the_events(kokkos_app, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(measure_cli, "open_measure_gpus", lambda selection, backend: [])
    monkeypatch.setattr(measure_cli, "open_rapl_source", lambda backend: None)
    folder = tmp_path / "events-only"
    result = CliRunner().invoke(
        measure_cli.command, ["--kokkos", "--trace-dir", str(folder), "--", str(kokkos_app)]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "no power sensor here" in text and "eopt attribute power.csv --events" in text
    assert structure(read_events(folder / "events.csv")) == EXPECTED
    # Power recorded elsewhere is attributed afterwards.
    events = read_events(folder / "events.csv")
    t0, t1 = min(e.start_ns for e in events), max(e.end_ns for e in events)
    power = tmp_path / "power.csv"
    power.write_text(f"time_ns,power_w\n{t0 - 10**9},200\n{t1 + 10**9},200\n")
    from eopt.cli import attribute as attribute_cli

    out = CliRunner().invoke(
        attribute_cli.command, [str(power), "--events", str(folder / "events.csv"), "--json"]
    )
    assert out.exit_code == 0, out.output
    regions = {r["name"]: r for r in json.loads(out.output)["regions"]}
    assert regions["solve"]["inclusive_energy_j"] == pytest.approx(
        200.0 * regions["solve"]["time_s"], rel=1e-6
    )


DRIVER = textwrap.dedent(
    """
    import ctypes, sys

    lib = ctypes.CDLL(sys.argv[1])
    class Handle(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char * 64)]
    class DeviceInfo(ctypes.Structure):
        _fields_ = [("deviceID", ctypes.c_size_t)]
    u64 = ctypes.c_uint64
    kid = u64()
    devices = (DeviceInfo * 2)(DeviceInfo(0), DeviceInfo(7))
    lib.kokkosp_init_library(0, u64(20210225), 2, devices)
    # bad orders first: none of them may crash or record anything
    lib.kokkosp_pop_profile_region()
    lib.kokkosp_end_parallel_for(u64(999))
    lib.kokkosp_end_deep_copy()
    lib.kokkosp_end_fence(u64(12345))
    lib.kokkosp_push_profile_region(b"outer")
    lib.kokkosp_begin_parallel_for(b"pf", 3, ctypes.byref(kid)); lib.kokkosp_end_parallel_for(kid)
    lib.kokkosp_begin_parallel_reduce(b"pr", 1, ctypes.byref(kid))
    lib.kokkosp_end_parallel_reduce(kid)
    lib.kokkosp_begin_parallel_scan(b"ps", 1, ctypes.byref(kid)); lib.kokkosp_end_parallel_scan(kid)
    lib.kokkosp_begin_fence(b"fence", 1, ctypes.byref(kid)); lib.kokkosp_end_fence(kid)
    lib.kokkosp_begin_deep_copy(Handle(b"Cuda"), b"dst", None, Handle(b"Host"), b"src", None,
                                u64(64))
    lib.kokkosp_end_deep_copy()
    lib.kokkosp_pop_profile_region()
    lib.kokkosp_pop_profile_region()        # one pop too many
    lib.kokkosp_push_profile_region(b"never closed")
    lib.kokkosp_finalize_library()
    lib.kokkosp_push_profile_region(b"after finalize")  # must not crash either
    lib.kokkosp_pop_profile_region()
    lib.kokkosp_finalize_library()          # twice
    print("survived")
    """
)


def test_every_callback_through_ctypes_including_bad_orders(connector, tmp_path) -> None:
    folder = tmp_path / "ctypes"
    env = {**os.environ, "EOPT_KOKKOS_TRACE_DIR": str(folder)}
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(connector)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "survived"
    events = read_events(folder / "events.csv")
    assert structure(events) == {
        ("outer", "USER_REGION", None): 1,
        ("pf", "PARALLEL_FOR", "outer"): 1,
        ("pr", "PARALLEL_REDUCE", "outer"): 1,
        ("ps", "PARALLEL_SCAN", "outer"): 1,
        ("fence", "FENCE", "outer"): 1,
        ("dst (Cuda) <- src (Host)", "DEEP_COPY", "outer"): 1,
        ("never closed", "USER_REGION", None): 1,
    }
    assert {e.name: e.device_id for e in events}["pf"] == 3
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["counts"] == {
        "events": 7,
        "unclosed": 1,
        "pop_without_push": 2,
        "end_without_begin": 3,
        "too_deep": 0,
        "lost": 0,  # the metadata is written at finalize; later callbacks are dropped
        "names_cut": 0,
    }
    assert meta["ended"] == "finalize"
    assert meta["message"] == "the program finalized Kokkos; 7 events kept"
    assert meta["kokkos_devices"] == [0, 7]


def test_fences_can_be_left_out(connector, tmp_path) -> None:
    folder = tmp_path / "nofence"
    env = {**os.environ, "EOPT_KOKKOS_TRACE_DIR": str(folder), "EOPT_KOKKOS_FENCES": "0"}
    subprocess.run(
        [sys.executable, "-c", DRIVER, str(connector)],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert "FENCE" not in {e.category for e in read_events(folder / "events.csv")}


def test_build_is_cached_and_says_what_to_install_without_a_compiler(
    connector, tmp_path, monkeypatch
) -> None:
    again = build_connector(cache_dir=connector.parents[1])
    assert again == connector
    result = CliRunner().invoke(kokkos_cli.command, ["build"])
    assert result.exit_code == 0 and result.output.strip().endswith("libeopt_kokkos.so")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(KokkosBuildError, match="apt-get install gcc"):
        find_compiler()
    result = CliRunner().invoke(kokkos_cli.command, ["build"])
    assert result.exit_code == 1 and "apt-get install gcc" in result.output


def test_repeated_kokkos_runs_of_two_variants_compare(
    kokkos_app, tmp_path, monkeypatch, wall_gpu
) -> None:
    """`--repeat --kokkos` records a run set per variant; `eopt compare` reads them: the
    variant with 3× the solver iterations spends more time and energy in `solve`."""
    from eopt.cli import compare as compare_cli

    monkeypatch.setattr(
        measure_cli, "open_measure_gpus", lambda selection, backend: [wall_gpu(200.0)]
    )
    monkeypatch.setattr(measure_cli, "open_rapl_source", lambda backend: None)
    for name, iterations in (("short", "2"), ("long", "6")):
        result = CliRunner().invoke(
            measure_cli.command,
            [
                "--kokkos",
                "--repeat",
                "3",
                "--shift",
                "5",
                "-o",
                str(tmp_path / name),
                "--",
                str(kokkos_app),
                iterations,
            ],
        )
        assert result.exit_code == 0, result.output
        index = json.loads((tmp_path / name / "index.json").read_text())
        assert [r["trace"] for r in index["runs"]] == ["run_001", "run_002", "run_003"]
        assert [r["delay_s"] for r in index["runs"]] == pytest.approx([0.0, 0.005, 0.01])
        trace = read_trace(tmp_path / name / "run_002")
        assert sum(e.name == "iteration" for e in trace.events) == int(iterations)
    result = CliRunner().invoke(
        compare_cli.command,
        [str(tmp_path / "long"), str(tmp_path / "short"), "--region", "solve", "--json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["a"]["n"] == data["b"]["n"] == 3
    # Fewer iterations: less time and energy, the same power (a constant 200 W GPU).
    assert data["reduction"]["time"]["value"] > 0.3
    assert data["reduction"]["energy"]["value"] > 0.3
    assert data["a"]["median"]["power_w"] == pytest.approx(200.0, rel=1e-3)


THREADS_DRIVER = textwrap.dedent(
    """
    import ctypes, sys, threading

    lib = ctypes.CDLL(sys.argv[1])
    lib.kokkosp_init_library(0, ctypes.c_uint64(20210225), 0, None)

    def work(k):
        kid = ctypes.c_uint64()
        for _ in range(3000):
            lib.kokkosp_push_profile_region(f"t{k}".encode())
            lib.kokkosp_begin_parallel_for(f"k{k}".encode(), k, ctypes.byref(kid))
            lib.kokkosp_end_parallel_for(kid)
            lib.kokkosp_pop_profile_region()
        if k == 0:
            lib.kokkosp_push_profile_region(b"left open")  # the thread ends inside it

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lib.kokkosp_finalize_library()
    """
)


def test_threads_record_side_by_side(connector, tmp_path) -> None:
    """Four threads at once, each with its own stack and ring: every event comes back
    once, nested on its own thread; a region open when its thread ends ends with it."""
    folder = tmp_path / "threads"
    env = {**os.environ, "EOPT_KOKKOS_TRACE_DIR": str(folder)}
    subprocess.run(
        [sys.executable, "-c", THREADS_DRIVER, str(connector)], env=env, check=True, timeout=120
    )
    events = read_events(folder / "events.csv")
    expected = {("left open", "USER_REGION", None): 1}
    for k in range(4):
        expected[(f"t{k}", "USER_REGION", None)] = 3000
        expected[(f"k{k}", "PARALLEL_FOR", f"t{k}")] = 3000
    assert structure(events) == expected
    assert len({e.id for e in events}) == len(events)
    assert {e.device_id for e in events if e.name == "k3"} == {3}
    counts = json.loads((folder / "metadata.json").read_text())["counts"]
    assert counts["unclosed"] == 1 and counts["lost"] == 0


# Python's join returns before the joined thread's key destructors run, so the application
# may finalize while a thread is still closing its open events: with 20 000 of them the two
# overlap every time.
ENDING_DRIVER = textwrap.dedent(
    """
    import ctypes, sys, threading

    lib = ctypes.CDLL(sys.argv[1])
    lib.kokkosp_init_library(0, ctypes.c_uint64(20210225), 0, None)

    def work():
        lib.kokkosp_push_profile_region(b"done")
        lib.kokkosp_pop_profile_region()
        for _ in range(20000):
            lib.kokkosp_push_profile_region(b"left open")

    t = threading.Thread(target=work)
    t.start()
    t.join()
    lib.kokkosp_finalize_library()
    """
)


def test_a_thread_still_ending_at_finalize_keeps_every_open_region(connector, tmp_path) -> None:
    """The finalize waits for a thread in the middle of ending: each of its open regions
    is written exactly once and counted once as unclosed."""
    folder = tmp_path / "ending"
    env = {**os.environ, "EOPT_KOKKOS_TRACE_DIR": str(folder)}
    subprocess.run(
        [sys.executable, "-c", ENDING_DRIVER, str(connector)], env=env, check=True, timeout=120
    )
    events = read_events(folder / "events.csv")
    assert sum(e.name == "left open" for e in events) == 20000
    assert sum(e.name == "done" for e in events) == 1
    assert len({e.id for e in events}) == len(events)
    counts = json.loads((folder / "metadata.json").read_text())["counts"]
    assert counts["unclosed"] == 20000 and counts["lost"] == 0
