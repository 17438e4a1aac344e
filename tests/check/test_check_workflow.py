"""``eopt check``: the §4.4 workflow on simulated GPUs with one mechanism at a time.

Each world switches on one interaction mechanism of the simulator (noise stays on), so
the truth — which pair interacts, and through what — is known by construction, and the
workflow must find it from measurements alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from eopt.calculus.interactions import read_interactions
from eopt.calculus.schedule import Placement
from eopt.check.runner import Job, SimElement, SimRunner
from eopt.check.workflow import characterize_element, check_schedule, predict
from eopt.cli import cli, main
from eopt.model.signature import Signature

RUNS = 20


def _library(runner: SimRunner, names: list[str], seed: int = 11) -> dict[str, Signature]:
    return {
        n: characterize_element(runner, n, runner.devices[0], RUNS, seed=seed + 1000 * k)
        for k, n in enumerate(names)
    }


def _chain(lib: dict[str, Signature], names: list[str], device: str = "gpu0") -> list[Placement]:
    out, t = [], 0.0
    for n in names:
        out.append(Placement(lib[n].on(device), device, t))
        t += lib[n].time
    return out


# ---------------------------------------------------------------------------- runner
def test_runs_are_reproducible_and_chains_run_back_to_back() -> None:
    els = {"mm": SimElement("gemm", workload={"m": 2048.0, "n": 2048.0, "k": 2048.0})}
    runner = SimRunner(els, ["gpu0"], mechanisms="none")
    jobs = [Job("mm", "gpu0", 0.0, 1e-4), Job("mm", "gpu0", 1e-4, 2e-4)]
    a, b = runner.run(jobs, 4, seed=3), runner.run(jobs, 4, seed=3)
    assert np.array_equal(a.energy_j, b.energy_j)
    # Each job starts when the one before it ends, whatever its planned start said.
    for run, span in zip(a.jobs, a.time_s, strict=True):
        assert run[1].start_s == pytest.approx(run[0].start_s + run[0].time_s, rel=1e-9)
        assert span == pytest.approx(run[0].time_s + run[1].time_s, rel=1e-9)
    c = runner.run(jobs, 4, seed=4)
    assert not np.array_equal(a.energy_j, c.energy_j)  # noise is on


def test_overlapping_jobs_co_run_and_idle_devices_are_not_counted() -> None:
    els = {"a": SimElement("layernorm"), "b": SimElement("layernorm")}
    runner = SimRunner(els, ["gpu0", "gpu1"], mechanisms="none")
    rs = runner.run([Job("a", "gpu0", 0.0, 1e-3), Job("b", "gpu0", 0.0, 1e-3)], 3)
    assert rs.jobs[0][0].co_runners == ("b",) and rs.jobs[0][1].co_runners == ("a",)
    alone = runner.run([Job("a", "gpu0", 0.0, 1e-3)], 3)
    # gpu1 idles beside: the piece's energy is gpu0's alone.
    assert np.allclose(alone.energy_j, alone.device_energy_j["gpu0"])
    assert np.all(alone.device_energy_j["gpu1"] > 0)


def test_prediction_counts_a_shared_characterization_error_once_per_type() -> None:
    sig = Signature("x", 50.0, 1.0, 10.0, var_time=1e-4, var_energy=1.0, meta={"n": 25})

    def chain(count: int):  # type: ignore[no-untyped-def]
        def placed(swap):  # type: ignore[no-untyped-def]
            s = swap(sig) if swap is not None else sig
            return [Placement(s, "gpu0", k * s.time) for k in range(count)], None

        return predict(placed, [sig], _empty_graph(), lambda s: 25)

    one, four = chain(1), chain(4)
    # One instance: the type's own standard errors, σ/√n.
    assert one.energy.sem == pytest.approx(1.0 / 5.0, rel=1e-6)
    assert one.time.sem == pytest.approx(1e-2 / 5.0, rel=1e-6)
    # Four instances of one type share one mean: its error scales 4×, not 2× (√4).
    assert four.energy.sem == pytest.approx(4 * one.energy.sem, rel=1e-6)
    assert four.time.sem == pytest.approx(4 * one.time.sem, rel=1e-6)


def _empty_graph():  # type: ignore[no-untyped-def]
    from eopt.calculus.interactions import InteractionGraph

    return InteractionGraph()


# ---------------------------------------------------------------------------- worlds
def test_without_interactions_the_prediction_holds() -> None:
    els = {
        "mm": SimElement("gemm", workload={"m": 3072.0, "n": 3072.0, "k": 3072.0}),
        "cp": SimElement("memcpy", workload={"bytes": 128.0 * 2**20}),
        "norm": SimElement("layernorm", workload={"rows": 4096.0}),
    }
    agree = 0
    for seed in range(4):
        runner = SimRunner(els, ["gpu0"], mechanisms="none")
        lib = _library(runner, list(els), seed=100 * seed + 1)
        res = check_schedule(
            _chain(lib, ["mm", "cp", "norm", "mm"]),
            list(lib.values()),
            runner,
            runs=RUNS,
            seed=seed,
        )
        agree += not res.deviation
        assert res.refined_covers is None or res.deviation
    assert agree >= 3  # a 95 % test: one false alarm in four is already unlikely


def test_contention_is_found_localized_named_and_refined() -> None:
    els = {
        "mm": SimElement("gemm", workload={"m": 2048.0, "n": 2048.0, "k": 2048.0}),
        "na": SimElement("layernorm", workload={"rows": 8192.0}),
        "nb": SimElement("layernorm", workload={"rows": 8192.0}),
    }
    runner = SimRunner(els, ["gpu0"], mechanisms="contention")
    covered = 0
    for seed in range(4):
        lib = _library(runner, list(els), seed=11 + 7777 * seed)
        t = lib["mm"].time
        placed = [
            Placement(lib["mm"].on("gpu0"), "gpu0", 0.0),
            Placement(lib["na"].on("gpu0"), "gpu0", t),
            Placement(lib["nb"].on("gpu0"), "gpu0", t),
        ]
        res = check_schedule(placed, list(lib.values()), runner, runs=RUNS, seed=5 + seed)
        assert res.deviation
        first = res.found[0]
        assert set(first.elements) == {"na", "nb"} and first.kind == "runtime"
        assert first.mechanism == "contention"
        edge = res.graph.runtime_edge("na", "nb")
        assert edge is not None and edge.mechanisms == ("contention",)
        assert any(s.name == "na+nb" for s in res.library)
        # The co-run stretches the pair by about 60 %: the first prediction is far off in
        # time, the refined one is not.
        assert res.refined is not None and res.refined.time is not None
        assert abs(res.refined.time.relative) < 0.01 < abs(res.initial.time.relative)
        covered += bool(res.refined_covers)
    assert covered >= 3


def test_cache_warmth_is_named_by_the_cold_buffer_protocol() -> None:
    els = {
        "mm": SimElement("gemm", workload={"m": 2048.0, "n": 2048.0, "k": 2048.0}),
        "produce": SimElement("layernorm", workload={"rows": 2048.0}, writes=("x",)),
        "consume": SimElement("layernorm", workload={"rows": 2048.0}, reads=("x",)),
    }
    order = ["mm", "produce", "consume"]
    runner = SimRunner(els, ["gpu0"], mechanisms="cache")
    off = SimRunner(els, ["gpu0"], mechanisms="none")
    covered = agree_off = 0
    for seed in range(4):
        lib = _library(runner, list(els), seed=11 + 7777 * seed)
        res = check_schedule(_chain(lib, order), list(lib.values()), runner, runs=RUNS, seed=seed)
        assert res.deviation
        first = res.found[0]
        assert first.elements == ("produce", "consume") and first.kind == "entry"
        assert first.mechanism == "cache"
        assert res.refined is not None and res.refined.energy is not None
        assert abs(res.refined.energy.relative) < abs(res.initial.energy.relative) / 5
        covered += bool(res.refined_covers)
        # The same schedule with the cache off agrees with its prediction.
        lib_off = _library(off, list(els), seed=11 + 7777 * seed)
        res_off = check_schedule(
            _chain(lib_off, order), list(lib_off.values()), off, runs=RUNS, seed=seed
        )
        agree_off += not res_off.deviation
    assert covered >= 3 and agree_off >= 3


def test_a_clock_change_is_named_by_the_idle_gap_protocol() -> None:
    els = {
        "fast": SimElement("memcpy", workload={"bytes": 256.0 * 2**20}, sm_clock_mhz=1410.0),
        "slow": SimElement(
            "gemm", workload={"m": 2048.0, "n": 2048.0, "k": 2048.0}, sm_clock_mhz=900.0
        ),
    }
    runner = SimRunner(els, ["gpu0"], mechanisms="clock_state")
    lib = _library(runner, list(els))
    res = check_schedule(_chain(lib, ["fast", "slow"]), list(lib.values()), runner, runs=RUNS)
    assert res.deviation
    assert res.found[0].elements == ("fast", "slow")
    assert res.found[0].mechanism == "clock_state"


def test_collectives_sharing_the_interconnect_across_devices() -> None:
    els = {
        "ar0": SimElement("allreduce", workload={"bytes": 256.0 * 2**20}),
        "ar1": SimElement("allreduce", workload={"bytes": 256.0 * 2**20}),
    }
    runner = SimRunner(els, ["gpu0", "gpu1"], mechanisms="interconnect")
    lib = _library(runner, list(els))
    placed = [
        Placement(lib["ar0"].on("gpu0"), "gpu0", 0.0),
        Placement(lib["ar1"].on("gpu1"), "gpu1", 0.0),
    ]
    res = check_schedule(placed, list(lib.values()), runner, runs=RUNS, seed=1)
    assert res.deviation and res.found[0].mechanism == "interconnect"
    assert set(res.found[0].devices) == {"gpu0", "gpu1"}
    assert res.refined_covers is True


# ---------------------------------------------------------------------------- CLI
SCHEDULE = """placements:
  - {element: mm, device: gpu0, start: 0ms}
  - {element: na, device: gpu0, start: 0.6ms}
  - {element: nb, device: gpu0, start: 0.6ms}
"""
KERNELS = """mm: {kernel: gemm, workload: {m: 2048, n: 2048, k: 2048}}
na: {kernel: layernorm, workload: {rows: 8192}}
nb: {kernel: layernorm, workload: {rows: 8192}}
"""


def _files(tmp_path: Path) -> tuple[Path, Path]:
    sched, kernels = tmp_path / "s.yaml", tmp_path / "k.yaml"
    sched.write_text(SCHEDULE)
    kernels.write_text(KERNELS)
    return sched, kernels


def test_cli_writes_check_json_graph_and_library(tmp_path: Path) -> None:
    sched, kernels = _files(tmp_path)
    out, graph, lib = tmp_path / "c.json", tmp_path / "g.json", tmp_path / "l.jsonl"
    args = [
        "check",
        str(sched),
        "--sim",
        "--kernels",
        str(kernels),
        "--mechanisms",
        "contention",
        "--runs",
        "12",
        "-o",
        str(out),
        "--write-graph",
        str(graph),
        "--write-library",
        str(lib),
    ]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["schema"] == "eopt.check/1"
    assert data["deviation"] is True and data["refined_covers"] is True
    assert data["found"][0]["kind"] == "runtime"
    assert data["found"][0]["mechanism"] == "contention"
    assert read_interactions(graph).runtime_edge("na", "nb") is not None
    assert len(lib.read_text().splitlines()) >= 4  # three null signatures + the composite
    assert "contention" in result.output


def test_cli_with_every_mechanism_off_reports_no_deviation(tmp_path: Path) -> None:
    sched, kernels = _files(tmp_path)
    args = [
        "check",
        str(sched),
        "--sim",
        "--kernels",
        str(kernels),
        "--mechanisms",
        "none",
        "--runs",
        "12",
        "--json",
        "-q",
    ]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    data = json.loads(result.output)
    assert data["deviation"] is False and data["found"] == []


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--sim", "--mechanisms", "heat"], "unknown simulator mechanism"),
        # Without --sim the elements are programs: a map of simulated kernels is not one.
        ([], "give {callable: file.py:fn} for this element"),
    ],
)
def test_cli_refuses_bad_requests_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    sched, kernels = _files(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["check", str(sched), "--kernels", str(kernels), *extra])
    assert info.value.code != 0
    err = " ".join(capsys.readouterr().err.split())
    assert needle in err and "Traceback" not in err


def test_cli_on_real_gpus_without_one_says_to_use_the_simulator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from eopt import devices

    def no_gpu(*args: object, **kwargs: object) -> list[object]:
        raise RuntimeError("NVML Shared Library Not Found")

    # As on a machine without the NVIDIA driver, whatever this one has.
    monkeypatch.setattr(devices, "resolve_gpu", no_gpu)
    monkeypatch.setattr(devices, "open_devices", no_gpu)
    sched, _ = _files(tmp_path)
    prog = tmp_path / "prog.py"
    prog.write_text("def run(n=1):\n    return n\n")
    kernels = tmp_path / "real.yaml"
    kernels.write_text("".join(f"{n}: {{callable: {prog}:run}}\n" for n in ("mm", "na", "nb")))
    with pytest.raises(SystemExit):
        main(["check", str(sched), "--kernels", str(kernels)])
    err = " ".join(capsys.readouterr().err.split())
    assert "NVML Shared Library Not Found" in err and "--sim" in err


def test_cli_names_the_file_and_element_of_a_bad_kernel_map(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sched, kernels = _files(tmp_path)
    kernels.write_text("mm: {kernel: gemm, colour: red}\n")
    with pytest.raises(SystemExit):
        main(["check", str(sched), "--sim", "--kernels", str(kernels)])
    err = " ".join(capsys.readouterr().err.split())
    assert str(kernels.name) in err and "mm" in err and "colour" in err


def test_the_tour_example_finds_its_cache_pair_and_its_co_run(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    out = tmp_path / "check.json"
    args = ["check", str(examples / "check_schedule.yaml"), "--sim", "--kernels",
            str(examples / "check_kernels.yaml"), "--runs", "20", "-o", str(out), "-q"]  # fmt: skip
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    found = {(tuple(f["elements"]), f["mechanism"]) for f in data["found"]}
    assert (("produce", "consume"), "cache") in found
    assert (("norm_a", "norm_b"), "contention") in found
    assert data["refined_covers"] is True


def test_report_renders_a_check_and_refuses_other_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sched, kernels = _files(tmp_path)
    out = tmp_path / "c.json"
    args = ["check", str(sched), "--sim", "--kernels", str(kernels), "--mechanisms",
            "contention", "--runs", "12", "-o", str(out), "-q"]  # fmt: skip
    assert CliRunner().invoke(cli, args, catch_exceptions=False).exit_code == 0
    html = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["report", "--check", str(out), "-o", str(html)])
    assert result.exit_code == 0, result.output
    page = html.read_text()
    assert "Prediction check" in page and "contention" in page and "na ↔ nb" in page
    with pytest.raises(SystemExit):
        main(["report", "--check", str(sched), "-o", str(tmp_path / "x.html")])
    err = " ".join(capsys.readouterr().err.split())
    assert str(sched) in err and "Traceback" not in err
