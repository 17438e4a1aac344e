"""What a sweep records about the GPU it ran on: read back, never assumed.

Sweeps here run through eopt's own NVML layer on the stateful fake ``pynvml`` of the device
tests (tests/devices/conftest.py): enforced limits below the requested one, clocks that do
not reach their lock, clocks-event reasons, unsupported memory-clock locks, GPUs without
power management, several GPUs with UUIDs and PCI bus ids. Each test names the defect of
the issue "Ready for real GPUs" it pins down; each failed on the code before the fix.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pynvml
import pytest
from click.testing import CliRunner

from eopt.cli import cli
from eopt.cli._common import UserError
from eopt.devices.nvml import NvmlGPU
from eopt.model.library import read_library
from eopt.runs.repeat import RepeatPolicy
from eopt.runs.sweep import (
    Grid,
    PythonKernel,
    SweepError,
    check_sweep,
    parse_kernel,
    resolve_sync,
    sweep,
)

# Windows of ten sensor periods on FakeTime (virtual, so cheap).
POLICY = RepeatPolicy(
    warmup=1, min_runs=3, min_time_s=0.0, min_window_s=1.0, static_idle_s=1.0, settle_s=0.1,
    n_boot=100,
)  # fmt: skip
# Wall-clock runs on the untimed fake: tiny windows keep them short.
TINY = RepeatPolicy(
    warmup=1, min_runs=3, min_time_s=0.0, min_window_s=0.01, static_idle_s=0.02, settle_s=0.0,
    n_boot=100, max_inner_repeats=200,
)  # fmt: skip
QUICK = ["--min-runs", "3", "--min-time", "0", "--warmup", "1", "--min-window", "10ms"]


def _fake_gpus(m: Any, gpus: list[dict[str, Any]], **defaults: Any) -> list[Any]:
    """GPU ``i`` gets the UUID ``GPU-i-fake`` and the PCI bus id ``00000000:<07+i>:00.0``."""
    return [
        m.FakeGpu(
            uuid=f"GPU-{i}-fake", pci_bus_id=f"00000000:{7 + i:02X}:00.0", **{**defaults, **g}
        )
        for i, g in enumerate(gpus)
    ]


@pytest.fixture
def timed_nvml(nvml_fake_module, monkeypatch):
    """Factory: fake NVML GPUs on a FakeTime, patched in. FakeTime stands in for the wall
    clock, so the sweep's refusal of real work on virtual time is lifted."""

    def make(gpus: list[dict[str, Any]]) -> Any:
        m = nvml_fake_module
        made = _fake_gpus(m, gpus, energy=None, power_mw=60_000)
        fake = m.FakePynvml(made, time=m.FakeTime())
        monkeypatch.setattr("eopt.devices.nvml.pynvml", fake)
        monkeypatch.setattr("eopt.runs.sweep.require_wall_clock", lambda device, what: None)
        return fake

    return make


@pytest.fixture
def untimed_nvml(nvml_fake_module, monkeypatch):
    """Factory: fake NVML GPUs without a time source (counters move per read), patched in,
    for sweeps on the wall clock through the CLI."""

    def make(gpus: list[dict[str, Any]]) -> Any:
        fake = nvml_fake_module.FakePynvml(_fake_gpus(nvml_fake_module, gpus))
        monkeypatch.setattr("eopt.devices.nvml.pynvml", fake)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
        return fake

    return make


def busy_kernel(fake: Any, watts: float = 250.0, seconds: float = 0.05) -> PythonKernel:
    """A callable that draws ``watts`` for ``seconds`` of FakeTime; it waits for its own
    work (``--sync none``)."""
    gpu = fake.gpus[0]

    def run() -> None:
        gpu.power_mw = int(watts * 1000)
        fake.time.advance(seconds)
        gpu.power_mw = 60_000

    return PythonKernel({"default": run}, "k", sync=lambda: None, sync_spec="none")


def codes(sig) -> dict[str, dict]:
    return {f["code"]: f for f in sig.meta["flags"]}


@pytest.fixture
def kernel_file(tmp_path):
    path = tmp_path / "kern.py"
    path.write_text("def run():\n    return None\n")
    return f"{path}:run"


# --- settings that never took effect ------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "fields", "power_field", "counter_period"),
    [
        ("counter", None, "energy_counter", 0.1),
        ("sampler", None, "instant", None),
        # No power fields on this GPU: NVML's power usage, a 1 s average on Hopper.
        ("sampler", {pynvml.NVML_FI_DEV_POWER_INSTANT: False,
                     pynvml.NVML_FI_DEV_POWER_AVERAGE: False}, "usage_average_1s", None),
    ],
)  # fmt: skip
def test_a_limit_the_gpu_does_not_enforce_is_flagged_with_the_meters_source(
    timed_nvml, tmp_path, method, fields, power_field, counter_period
):
    """Another limit caps the GPU at 250 W while it reports 400 W requested. The cell (at
    the current setting) records 400 W and, before the fix, nothing else: its "readback"
    was the request. Now the enforced limit is read per window and the cell flagged; the
    meter's method, power source and periods are in the meta."""
    extra = {"fields": fields} if fields else {}
    fake = timed_nvml([{"enforced_cap_mw": 250_000, "compute_capability": (9, 0), **extra}])
    gpu = NvmlGPU(0, control=False, clock=fake.time)
    kernel = busy_kernel(fake)
    result = sweep(kernel, Grid.build(kernel, gpu), gpu, tmp_path / "lib.jsonl",
                   policy=POLICY, control=False, method=method)  # fmt: skip
    (sig,) = read_library(tmp_path / "lib.jsonl")
    assert sig == result.signatures[0]
    assert sig.op_point.power_limit_w == 400.0
    assert sig.meta["runs"]["enforced_power_limit_w"] == [250.0] * 3
    assert sig.meta["runs"]["clocks_event_reasons"] == [[]] * 3
    flag = codes(sig)["power_limit_not_enforced"]
    assert flag["requested_w"] == 400.0 and flag["enforced_w"] == [250.0]
    meta = sig.meta
    assert (meta["method"], meta["power_field"]) == (method, power_field)
    assert meta["counter_period_s"] == counter_period and meta["sensor_period_s"] == 0.1
    assert meta["device_uuid"] == "GPU-0-fake" and meta["sync"] == "none"
    assert meta["op_point_set"] is False and "op_point_readback" not in meta
    assert sig.energy == pytest.approx(250.0 * 0.05, rel=0.05)


def test_a_clock_that_does_not_reach_its_lock_is_flagged_with_the_reasons(timed_nvml, tmp_path):
    """The power cap holds the load at 1300 MHz: a lock at 1410 MHz cannot be reached,
    one at 1200 MHz holds. Before the fix both cells claimed their lock."""
    fake = timed_nvml([{"current_sm_mhz": 1300, "event_reasons": 0x4}])  # sw_power_cap
    gpu = NvmlGPU(0, clock=fake.time)
    kernel = busy_kernel(fake)
    grid = Grid.build(kernel, gpu, clocks="1410,1200")
    high, low = sweep(kernel, grid, gpu, tmp_path / "lib.jsonl", policy=POLICY).signatures
    assert high.meta["runs"]["sm_clock_mhz"] == [1300.0] * 3
    flag = codes(high)["sm_clock_off_request"]
    assert flag["requested_mhz"] == 1410.0 and flag["reasons"] == ["sw_power_cap"]
    assert low.meta["runs"]["sm_clock_mhz"] == [1200.0] * 3
    assert "sm_clock_off_request" not in codes(low)
    assert low.meta["device_state"]["clocks_event_reasons"] == [
        "applications_clocks_setting", "sw_power_cap"
    ]  # fmt: skip
    assert low.meta["runs"]["mem_clock_mhz"] == [1215.0] * 3
    assert high.meta["op_point_set"] is True
    assert fake.gpus[0].locked_sm is None  # restored


def test_what_the_device_noted_setting_a_point_is_said_and_kept(timed_nvml, tmp_path):
    """Overriding a suspected administrator's lock leaves a note on the device. Before the
    fix nobody read it."""
    fake = timed_nvml([{"event_reasons": 0x2}])  # clocks held by a setting: a lock?
    gpu = NvmlGPU(0, clock=fake.time, override_admin_locks=True)
    kernel = busy_kernel(fake)
    said: list[str] = []
    (sig,) = sweep(kernel, Grid.build(kernel, gpu, clocks="1410"), gpu, tmp_path / "l.jsonl",
                   policy=POLICY, warn=said.append).signatures  # fmt: skip
    assert len(sig.meta["device_notes"]) == 1
    assert "override_admin_locks" in sig.meta["device_notes"][0]
    assert sig.meta["device_notes"][0] in said


def test_an_unsupported_memory_clock_lock_fails_the_sweep_in_one_line(
    untimed_nvml, tmp_path, kernel_file
):
    """Before, an unsupported memory lock only reached the device's notes; now the device
    refuses it, and the sweep says so in one line before measuring anything there."""
    fake = untimed_nvml([{"mem_lock_supported": False}])
    out = tmp_path / "lib.jsonl"
    result = CliRunner().invoke(
        cli,
        ["sweep", kernel_file, "--backend", "nvml", "--sync", "none", "--clocks", "current",
         "--mem-clocks", "1215", *QUICK, "-o", str(out)],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "memory-clock locking is not supported" in text and "Traceback" not in text
    assert not out.exists()
    assert fake.gpus[0].locked_mem is None


def test_power_limits_on_a_gpu_without_power_management_are_refused(untimed_nvml, tmp_path,
                                                                     kernel_file):  # fmt: skip
    untimed_nvml([{"power_management": False}])
    out = tmp_path / "lib.jsonl"
    result = CliRunner().invoke(
        cli,
        ["sweep", kernel_file, "--backend", "nvml", "--sync", "none", "--power-limits", "300",
         *QUICK, "-o", str(out)],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 1
    assert "has no settable power limit" in " ".join(result.output.split())
    assert not out.exists()


# --- synchronize is a no-op on NVML devices ---------------------------------------------
@pytest.fixture
def no_frameworks(monkeypatch):
    for name in ("torch", "cupy"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_a_callable_on_an_nvml_gpu_needs_a_sync(untimed_nvml, no_frameworks):
    """NvmlGPU.synchronize waits for nothing; a callable measured with it measures its
    launches. Before the fix the sweep ran anyway."""
    untimed_nvml([{}])
    gpu = NvmlGPU(0, control=False)
    kernel = parse_kernel("time:perf_counter")
    grid = Grid.build(kernel, gpu)
    with pytest.raises(SweepError, match="--sync torch, --sync cupy") as err:
        check_sweep(kernel, grid, gpu, control=False)
    assert "neither torch nor cupy" in str(err.value)
    check_sweep(parse_kernel("time:perf_counter", sync="none"), grid, gpu, control=False)


def test_the_cli_refuses_a_callable_on_an_nvml_gpu_without_sync(
    untimed_nvml, no_frameworks, tmp_path, kernel_file
):
    untimed_nvml([{}])
    out = tmp_path / "lib.jsonl"
    result = CliRunner().invoke(
        cli, ["sweep", kernel_file, "--backend", "nvml", "--no-control", *QUICK, "-o", str(out)],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 1
    assert "--sync none" in " ".join(result.output.split())
    assert not out.exists()


def test_the_framework_the_kernel_imported_is_synchronized_and_named(
    untimed_nvml, no_frameworks, monkeypatch, tmp_path
):
    untimed_nvml([{}])
    waits: list[int] = []
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(synchronize=lambda: waits.append(1))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    gpu = NvmlGPU(0, control=False)
    kernel = PythonKernel({"default": lambda: None}, "k")
    said: list[str] = []
    (sig,) = sweep(kernel, Grid.build(kernel, gpu), gpu, tmp_path / "l.jsonl", policy=TINY,
                   control=False, warn=said.append).signatures  # fmt: skip
    assert any("torch.cuda.synchronize" in s for s in said)
    assert sig.meta["sync"].startswith("torch.cuda:synchronize")
    assert len(waits) >= 2 * sig.meta["n"]  # before and after every window at least
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    with pytest.raises(SweepError, match="both torch and cupy"):
        resolve_sync(kernel, gpu)


def test_devices_whose_synchronize_waits_need_no_sync(wall_gpu, no_frameworks):
    kernel = PythonKernel({"default": lambda: None}, "k")
    assert resolve_sync(kernel, wall_gpu) == (kernel, None)


# --- the wrong physical GPU ---------------------------------------------------------------
def test_sweep_gpu_is_the_physical_gpu_cuda_means(untimed_nvml, monkeypatch):
    """``--gpu`` was an NVML index given to open_devices as is; under
    CUDA_VISIBLE_DEVICES=2,0 ``cuda:0`` is physical GPU 2, and UUIDs and PCI ids name one
    GPU for every tool."""
    from eopt.cli.sweep import open_sweep_device

    untimed_nvml([{}, {}, {"mig_devices": ("MIG-aaaa-bbbb",)}])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")

    def index(spec: str, backend: str = "nvml") -> int:
        return open_sweep_device(backend, spec, "A100-SXM4-40GB", 0, control=False).index

    assert index("0") == 2 and index("cuda:1") == 0
    assert index("GPU-0-fake") == 0 and index("GPU-2") == 2  # a unique prefix
    assert index("0000:09:00.0") == 2 and index("nvml:0") == 0
    assert index("MIG-aaaa-bbbb") == 2
    for withheld in ("GPU-1-fake", "0000:08:00.0", "nvml:1"):  # not this process's GPU
        with pytest.raises(UserError, match="CUDA_VISIBLE_DEVICES='2,0' gives it nvml:2, nvml:0"):
            index(withheld)
    assert index("0", "auto") == 2
    with pytest.raises(UserError, match="sees 2"):
        index("cuda:2")
    assert index("cuda:1", "sim") == 1
    with pytest.raises(UserError, match="simulated GPU takes an index"):
        index("GPU-1-fake", "sim")


def test_a_sweep_by_uuid_measures_that_gpu_and_records_it(untimed_nvml, tmp_path, kernel_file):
    untimed_nvml([{}, {}])
    out = tmp_path / "lib.jsonl"
    result = CliRunner().invoke(
        cli,
        ["sweep", kernel_file, "--backend", "nvml", "--gpu", "GPU-1-fake", "--no-control",
         "--sync", "none", *QUICK, "--json", "-q", "-o", str(out)],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (sig,) = read_library(out)
    assert sig.devices == ("gpu1",) and sig.meta["device_uuid"] == "GPU-1-fake"
    assert '"uuid": "GPU-1-fake"' in result.output


def test_help_says_which_numbering_a_plain_integer_means():
    for name in ("sweep", "measure"):
        text = " ".join(CliRunner().invoke(cli, [name, "--help"]).output.split())
        assert "CUDA ordinal" in text and "nvml:N" in text and "CUDA_VISIBLE_DEVICES" in text
    text = " ".join(CliRunner().invoke(cli, ["sweep", "--help"]).output.split())
    assert "--sync" in text and "none" in text
