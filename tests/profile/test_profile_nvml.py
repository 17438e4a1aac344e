"""eopt profile on an NVML GPU (the fake NVML of tests/devices): the clock is locked for
each run and restored after, and each element call is charged from the energy counter."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from eopt.model.operating_point import OperatingPoint
from eopt.runs.profile import ProfilePlan, profile_on_device, signatures_from_calls

PROGRAM = """\
import time
import eopt
for _ in range(3):
    with eopt.element('F[s0,m0]', kind='fwd'):
        time.sleep(0.05)
    eopt.step()
"""


def test_profile_locks_each_point_and_restores_it(make_fake_nvml, tmp_path, monkeypatch):
    from eopt.devices import open_devices

    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    fake = make_fake_nvml([{}])
    gpu = fake.gpus[0]
    device = open_devices("nvml", [0], control=True)[0]
    seen: list[object] = []
    original = device.set_operating_point

    def record(point):
        original(point)
        seen.append(gpu.locked_sm)

    monkeypatch.setattr(device, "set_operating_point", record)
    plan = ProfilePlan(
        (sys.executable, "-c", PROGRAM),
        (OperatingPoint(sm_clock_mhz=1410.0), OperatingPoint(sm_clock_mhz=1005.0)),
        static_idle_s=0.2,
    )
    run = profile_on_device(plan, device, settle_s=0.0)
    assert seen == [(1410, 1410), (1005, 1005)]
    assert gpu.locked_sm is None  # restored
    sigs = signatures_from_calls(run)
    assert [(s.name, s.op_point.sm_clock_mhz, s.meta["n"]) for s in sigs] == [
        ("fwd", 1410.0, 3),
        ("fwd", 1005.0, 3),
    ]
    for s in sigs:
        assert s.meta["meter_method"] == "counter"
        assert 0.045 < s.time < 0.5
        assert s.static_power > 0
        # The A100's counter steps every 0.1 s: a 50 ms element is below ten of its
        # steps, so its energy comes from the power trace, and it is flagged.
        assert s.meta["method"] == "power trace over each element"
        assert [f["code"] for f in s.meta["flags"]] == ["short_element"]


def test_a_counter_that_refreshes_fast_gives_the_elements_deltas(
    make_fake_nvml, tmp_path, monkeypatch
):
    from eopt.devices import open_devices

    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    make_fake_nvml([{"energy_period_s": 0.001}])
    device = open_devices("nvml", [0], control=True)[0]
    monkeypatch.setattr(type(device), "energy_counter_period_s", property(lambda self: 0.001))
    plan = ProfilePlan(
        (sys.executable, "-c", PROGRAM), (OperatingPoint(sm_clock_mhz=1200.0),), static_idle_s=0.2
    )
    (sig,) = signatures_from_calls(profile_on_device(plan, device, settle_s=0.0))
    assert sig.meta["method"] == "counter deltas at element edges"
    assert sig.meta["flags"] == []
    assert sig.meta["n"] == 3 and sig.var_time > 0


IN_RUN_PROGRAM = """\
import time
import eopt
for _ in range(4):
    with eopt.element('F[s0,m0]', kind='fwd'):
        time.sleep(0.02)
    eopt.step()
"""


def test_in_run_switches_every_k_steps_and_charges_each_call_its_point(
    make_fake_nvml, tmp_path, monkeypatch
):
    import json

    from eopt.devices import open_devices

    here = Path(__file__).resolve().parent
    root = str(here.parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(here), root]))
    log = tmp_path / "child-gpu.jsonl"
    monkeypatch.setenv("EOPT_TEST_CHILD_GPU_LOG", str(log))
    fake = make_fake_nvml([{}])
    device = open_devices("nvml", [0], control=True)[0]
    points = (OperatingPoint(sm_clock_mhz=1410.0), OperatingPoint(sm_clock_mhz=1005.0))
    plan = ProfilePlan((sys.executable, "-c", IN_RUN_PROGRAM), points, 2, static_idle_s=0.1)
    run = profile_on_device(plan, device, settle_s=0.0, opener="child_gpu:open_devices")
    # The program's process switched once, after its second step; the parent restored.
    assert [json.loads(x) for x in log.read_text().splitlines()] == [{"sm_clock_mhz": 1005.0}]
    assert fake.gpus[0].locked_sm is None
    sigs = signatures_from_calls(run)
    assert [(s.op_point.sm_clock_mhz, s.meta["n"]) for s in sigs] == [(1410.0, 2), (1005.0, 2)]
    assert all(s.meta["profile"]["mode"] == "in-run" for s in sigs)
    assert sigs[0].static_power > 0 and sigs[1].static_power > 0
