"""`eopt measure --backend nvml,rapl`: GPU and CPU energy per region side by side, from a
fake powercap tree whose counters advance at a constant power while the command runs."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import threading
import time

import pytest
from click.testing import CliRunner

from eopt.cli import measure as measure_cli
from eopt.model.trace_io import read_trace

CHILD = textwrap.dedent(
    """
    import time
    from eopt.measure import regions

    with regions.region("compute"):
        time.sleep(0.3)
    """
)


def measure_child(tmp_path, *options: str) -> tuple[dict, dict]:
    """Run CHILD under `eopt measure OPTIONS --trace-dir t --json`: (JSON, its compute)."""
    args = [*options, "--trace-dir", str(tmp_path / "t"), "--json", "--"]
    result = CliRunner().invoke(measure_cli.command, [*args, sys.executable, "-c", CHILD])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (compute,) = [r for r in data["regions"] if r["name"] == "compute"]
    return data, compute


class LivePowercap:
    """One package (60 W) with a dram zone (6 W), counters driven by the wall clock."""

    def __init__(self, root) -> None:
        self.root = root
        self.pkg = root / "intel-rapl:0"
        self.dram = self.pkg / "intel-rapl:0:0"
        self.dram.mkdir(parents=True)
        for folder, name in ((self.pkg, "package-0"), (self.dram, "dram")):
            (folder / "name").write_text(name + "\n")
            (folder / "max_energy_range_uj").write_text("262143328850\n")
            (folder / "energy_uj").write_text("1000\n")
        self.t0 = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            dt = time.time() - self.t0
            for folder, watts in ((self.pkg, 60.0), (self.dram, 6.0)):
                # Replaced whole, as sysfs reads never see a half-written value.
                tmp = folder / "energy_uj.new"
                tmp.write_text(f"{1000 + round(watts * dt * 1e6)}\n")
                os.replace(tmp, folder / "energy_uj")

    def __enter__(self) -> LivePowercap:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_gpu_and_cpu_energy_per_region_side_by_side(tmp_path, monkeypatch, wall_gpu) -> None:
    monkeypatch.setenv("EOPT_POWERCAP_ROOT", str(tmp_path / "powercap"))
    monkeypatch.setattr(
        measure_cli, "open_measure_gpus", lambda selection, backend: [wall_gpu(150.0)]
    )
    with LivePowercap(tmp_path / "powercap"):
        data, compute = measure_child(tmp_path, "--backend", "nvml,rapl")
    t = compute["time_s"]
    assert t >= 0.3
    # The counters are written every 2 ms and sampled every 20 ms: a few % at the edges.
    assert compute["by_series"]["GPU 0"] == pytest.approx(150.0 * t, rel=1e-3)
    assert compute["by_series"]["CPU_PKG 0"] == pytest.approx(60.0 * t, rel=0.1)
    assert compute["by_series"]["CPU_DRAM 0"] == pytest.approx(6.0 * t, rel=0.1)
    domains = {(s["domain"], s["device_id"]) for s in data["series"]}
    assert domains == {("GPU", 0), ("CPU_PKG", 0), ("CPU_DRAM", 0)}
    trace = read_trace(tmp_path / "t")
    assert [s.label for s in trace.series] == ["GPU 0", "CPU_PKG 0", "CPU_DRAM 0"]
    assert data["power_sources"][0]["source"] == "gpu" and len(data["power_sources"]) == 2


def test_rapl_asked_for_but_absent_says_what_to_do(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EOPT_POWERCAP_ROOT", str(tmp_path / "nowhere"))
    result = CliRunner().invoke(measure_cli.command, ["--backend", "rapl", "--", "true"])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "no RAPL zones" in text and "--backend nvml" in text and "Traceback" not in text


def _inventory(n: int = 3) -> list:
    from eopt.devices.gpu_select import GpuInfo

    return [
        GpuInfo(i, f"GPU-{i}-fake", f"00000000:{7 + i:02X}:00.0", "NVIDIA A100") for i in range(n)
    ]


def test_gpus_selection_is_checked() -> None:
    gpus = _inventory()
    assert measure_cli.parse_gpus("all", gpus, env={}) == [0, 1, 2]
    assert measure_cli.parse_gpus(None, gpus, env={}) == [0, 1, 2]
    assert measure_cli.parse_gpus("2,0", gpus, env={}) == [2, 0]
    for bad, message in (
        ("0,0", "listed already"),
        ("0,GPU-0-fake", "listed already"),  # one GPU under two names
        ("-1", "give a CUDA ordinal"),
        ("3", "sees 3"),
        ("a", "give a CUDA ordinal"),
        ("0,", "an empty entry"),
    ):
        with pytest.raises(measure_cli.UserError, match=message):
            measure_cli.parse_gpus(bad, gpus, env={})


def test_gpus_are_named_as_cuda_and_every_tool_names_them() -> None:
    """--gpus took NVML indices only; a plain integer now means what CUDA in this process
    means by it, and UUIDs (or unique prefixes), PCI bus ids and nvml:N name one GPU."""
    gpus = _inventory()
    masked = {"CUDA_VISIBLE_DEVICES": "2,0"}
    assert measure_cli.parse_gpus("0,1", gpus, env=masked) == [2, 0]
    assert measure_cli.parse_gpus("GPU-1-fake,0000:09:00.0,nvml:0", gpus, env={}) == [1, 2, 0]
    assert measure_cli.parse_gpus("GPU-1", gpus, env={}) == [1]
    # all: the GPUs CUDA gives this process, not every GPU of the node (another job's).
    assert measure_cli.parse_gpus("all", gpus, env=masked) == [2, 0]
    assert measure_cli.parse_gpus(None, gpus, env={"CUDA_VISIBLE_DEVICES": ""}) == []
    with pytest.raises(measure_cli.UserError, match="gives this process no GPU"):
        measure_cli.parse_gpus("all", gpus, env={"CUDA_VISIBLE_DEVICES": ""})
    with pytest.raises(measure_cli.UserError, match="sees 2"):
        measure_cli.parse_gpus("2", gpus, env=masked)


def test_measure_gpu_opens_the_gpu_this_process_calls_cuda_0(monkeypatch, nvml_fake_module):
    """`eopt measure --gpu 0` under CUDA_VISIBLE_DEVICES=2,1 watched NVML GPU 0, another
    job's GPU; now it watches GPU 2, and --gpu takes UUIDs, PCI bus ids and nvml:N."""
    m = nvml_fake_module
    gpus = [
        m.FakeGpu(uuid=f"GPU-{i}-fake", pci_bus_id=f"00000000:{7 + i:02X}:00.0") for i in range(3)
    ]
    monkeypatch.setattr("eopt.devices.nvml.pynvml", m.FakePynvml(gpus))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,1")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)

    def index(spec: str) -> int:
        return measure_cli.open_measure_device("auto", spec).index

    assert index("0") == 2 and index("cuda:1") == 1
    assert index("GPU-2-fake") == 2 and index("00000000:08:00.0") == 1 and index("nvml:2") == 2
    with pytest.raises(measure_cli.UserError, match="--gpu: GPU cuda:2"):
        index("2")
    # NVML's GPU 0 is another job's: named by UUID, PCI id or NVML index, it is refused.
    for withheld in ("GPU-0-fake", "00000000:07:00.0", "nvml:0"):
        with pytest.raises(measure_cli.UserError, match="CUDA_VISIBLE_DEVICES='2,1'"):
            index(withheld)
    watched = measure_cli.open_measure_gpus("all", "nvml")
    assert [g.index for g in watched] == [2, 1]
    assert [g.index for g in measure_cli.open_measure_gpus("GPU-2-fake,1", "nvml")] == [2, 1]


def test_a_uuid_without_a_gpu_is_refused_in_one_line(monkeypatch) -> None:
    monkeypatch.setattr("eopt.devices.nvml.device_count", lambda raise_errors=False: 0)
    with pytest.raises(measure_cli.UserError, match="NVML sees no NVIDIA GPU here"):
        measure_cli.open_measure_device("auto", "GPU-0-fake")
    assert measure_cli.open_measure_device("auto", "cuda:1").index == 1  # the simulator


class WallCounter:
    """An NVML energy counter (mJ) that grows at ``watts`` on the wall clock."""

    def __init__(self, watts: float) -> None:
        self.watts, self.t0 = watts, time.perf_counter()

    def __iter__(self) -> WallCounter:
        return self

    def __next__(self) -> int:
        return 1_000_000 + int(self.watts * (time.perf_counter() - self.t0) * 1e3)


def test_every_gpu_behind_a_patched_nvml(tmp_path, monkeypatch, nvml_fake_module) -> None:
    """Three fake NVML GPUs at 100, 200 and 300 W; --gpus 0,2 watches two of them, through
    eopt's own NVML layer (no seam replaced), and never calls a setter."""
    from unittest import mock

    m = nvml_fake_module
    gpus = [
        m.FakeGpu(uuid=f"GPU-{i}-fake", energy=WallCounter(w), power_mw=int(w * 1000))
        for i, w in enumerate((100.0, 200.0, 300.0))
    ]
    fake = m.FakePynvml(gpus)
    monkeypatch.setenv("EOPT_POWERCAP_ROOT", str(tmp_path / "no-rapl"))
    with mock.patch("eopt.devices.nvml.pynvml", fake):
        data, compute = measure_child(tmp_path, "--gpus", "0,2")
    t = compute["time_s"]
    assert compute["by_series"]["GPU 0"] == pytest.approx(100.0 * t, rel=0.02)
    assert compute["by_series"]["GPU 2"] == pytest.approx(300.0 * t, rel=0.02)
    assert compute["inclusive_energy_j"] == pytest.approx(
        compute["by_series"]["GPU 0"] + compute["by_series"]["GPU 2"]
    )
    assert {s["device_id"] for s in data["series"]} == {0, 2}
    assert fake.setter_calls() == []


def test_no_sensor_records_python_regions_and_says_so(tmp_path, monkeypatch) -> None:
    """No NVIDIA GPU and no RAPL: one line says so, and the regions are still recorded."""
    monkeypatch.setattr("eopt.devices.nvml.device_count", lambda raise_errors=False: 0)
    monkeypatch.setenv("EOPT_POWERCAP_ROOT", str(tmp_path / "no-rapl"))
    folder = tmp_path / "t"
    result = CliRunner().invoke(
        measure_cli.command, ["--trace-dir", str(folder), "--", sys.executable, "-c", CHILD]
    )
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if "no power sensor" in line]
    assert len(notes) == 1
    events = read_trace_events(folder)
    assert [e.name for e in events] == ["compute"]
    assert events[0].end_ns - events[0].start_ns >= 300_000_000
    without = CliRunner().invoke(measure_cli.command, ["--", "true"])
    assert without.exit_code == 1 and "--trace-dir" in without.output


def read_trace_events(folder):
    from eopt.model.trace_io import read_events

    return read_events(folder / "events.csv")
