"""The runtime controller: switch only on change, off the caller's thread, restore always."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from eopt.apply import ApplyError, RuntimeController
from eopt.devices.base import DeviceError
from eopt.model.operating_point import OperatingPoint

# These tests enter partial orders on purpose; drift has its own tests (test_drift.py).
pytestmark = pytest.mark.filterwarnings("ignore::eopt.apply.drift.PlanDriftWarning")


def _wait_until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


def _two_clock_schedule(build):
    e = build.element
    return build.schedule(
        [
            e("A", "stage0", 0.0, 0.01, sm=1410),
            e("B", "stage0", 0.01, 0.01, sm=1410),
            e("C", "stage0", 0.02, 0.01, sm=1200),
            e("D", "stage0", 0.03, 0.01, sm=1200),
            e("E", "stage0", 0.04, 0.01, sm=1410),
            e("X", "stage1", 0.0, 0.05, sm=1005),
        ],
        ["stage0", "stage1"],
    )


def test_switches_only_when_the_setting_changes(build, fake_gpu):
    gpu0, gpu1 = fake_gpu(0), fake_gpu(1)
    ctl = RuntimeController(_two_clock_schedule(build), {"stage0": gpu0, "stage1": gpu1})
    with ctl:
        requested = []
        for name in ["A", "B", "C", "D", "E", "E", "X", "X"]:
            requested.append(ctl.enter(name))
            assert ctl.wait_idle(5.0)  # so that no request is merged into a later one
        assert requested == [True, False, True, False, True, False, True, False]
        assert [p.sm_clock_mhz for p in gpu0.setters()] == [1410, 1200, 1410]
        assert [p.sm_clock_mhz for p in gpu1.setters()] == [1005]
        stats = ctl.stats()
        assert stats.count == 4 and stats.skipped == 4
        assert ctl.stats("stage1").count == 1
    # Restored once each, after the last switch.
    for gpu in (gpu0, gpu1):
        assert gpu.calls[-1][0] == "restore"
        assert gpu.state == gpu.original


def test_switch_runs_off_the_callers_thread(build, fake_gpu):
    gpu = fake_gpu(0)
    gpu.gate = threading.Event()  # every NVML-like call blocks until released
    sch = _two_clock_schedule(build)
    with RuntimeController(sch, {"stage0": gpu}) as ctl:
        ctl.enter("A")  # the device call blocks on the gate, yet enter returns
        _wait_until(lambda: gpu.calls)
        assert gpu.calls and gpu.calls[0][2] != threading.current_thread().name
        assert gpu.calls[0][2].startswith("eopt-switch-")
        # Had enter waited for the call, the gate's 5 s timeout would have expired and
        # the switch would be done by now; it is still in flight.
        assert not ctl.wait_idle(0.05)
        gpu.gate.set()
        assert ctl.wait_idle(5.0)


def test_latency_statistics_cover_the_blocking_call(build, fake_gpu):
    gpu = fake_gpu(0)
    gpu.set_delay_s = 0.02
    with RuntimeController(_two_clock_schedule(build), {"stage0": gpu}) as ctl:
        for name in ["A", "C", "E"]:
            ctl.enter(name)
            assert ctl.wait_idle(5.0)
        stats = ctl.stats()
    assert stats.count == 3
    assert stats.p50_s >= 0.02 and stats.mean_s >= 0.02 and stats.p99_s >= stats.p50_s
    assert stats.max_s >= stats.p99_s
    assert "3 switches" in stats.summary()


def test_newer_request_supersedes_a_waiting_one(build, fake_gpu):
    gpu = fake_gpu(0)
    gpu.gate = threading.Event()
    with RuntimeController(_two_clock_schedule(build), {"stage0": gpu}) as ctl:
        ctl.enter("A")  # 1410: in flight, blocked
        _wait_until(lambda: gpu.calls)
        ctl.enter("C")  # 1200: waits
        ctl.enter("E")  # 1410 again: replaces the waiting 1200
        gpu.gate.set()
        assert ctl.wait_idle(5.0)
        # 1410 is on the GPU when the worker reaches E's request: not applied again.
        assert [p.sm_clock_mhz for p in gpu.setters()] == [1410]
        assert ctl.stats().coalesced == 1 and ctl.stats().skipped == 1


def test_restores_when_the_training_loop_raises(build, fake_gpu):
    gpu = fake_gpu(0)
    ctl = RuntimeController(_two_clock_schedule(build), {"stage0": gpu})
    with pytest.raises(RuntimeError, match="loss is NaN"), ctl, ctl.element("C"):
        ctl.wait_idle(5.0)
        raise RuntimeError("loss is NaN")
    assert gpu.state == gpu.original
    assert gpu.calls[-1][0] == "restore"


def test_a_failed_switch_reaches_the_caller_and_still_restores(build, fake_gpu):
    gpu = fake_gpu(0)
    gpu.fail_on = 1200
    ctl = RuntimeController(_two_clock_schedule(build), {"stage0": gpu})
    with pytest.raises(DeviceError, match="injected failure"), ctl:
        ctl.enter("A")
        ctl.enter("C")
        ctl.wait_idle(5.0)
    assert gpu.calls[-1][0] == "restore"


def test_rejects_unknown_elements_devices_and_unsupported_settings(build, fake_gpu):
    sch = _two_clock_schedule(build)
    with RuntimeController(sch, {"stage0": fake_gpu(0)}, warn_drift=False) as ctl:
        with pytest.raises(KeyError, match="not in the schedule"):
            ctl.enter("Z")
        with pytest.raises(ApplyError, match="does not control"):
            ctl.enter("X")  # stage1 belongs to another rank
    with pytest.raises(ApplyError, match="not running"):
        RuntimeController(sch, {"stage0": fake_gpu(0)}).enter("A")
    with pytest.raises(ApplyError, match=r"SM clock 1005 MHz is not supported.*nearest: 1200"):
        RuntimeController(sch, {"stage1": fake_gpu(1, sm_clocks=(1410, 1200))})
    with pytest.raises(ApplyError, match="not in the schedule"):
        RuntimeController(sch, {"stage7": fake_gpu(0)})


def test_fake_1f1b_training_loop_switches_at_every_clock_change(build, fake_gpu):
    """How a PyTorch pipeline rank drives the controller (docs/pytorch.md), minus torch:
    every rank runs its stage's 1F1B order and wraps each microbatch's forward/backward."""
    stages, micro = 4, 8

    def clock(kind: str, stage: int, m: int) -> float:
        # Backwards slower on early stages, forwards alternate: many changes per rank.
        if kind == "B":
            return 1200.0 if stage < 2 else 1410.0
        return 1410.0 if m % 2 == 0 else 1005.0

    sch = build.pipeline(stages, micro, clock)
    gpus = {f"stage{s}": fake_gpu(s) for s in range(stages)}
    work_done: list[str] = []
    with RuntimeController(sch, gpus) as ctl:

        def rank(stage: int) -> None:
            for e in sch.elements_on(f"stage{stage}"):
                with ctl.element(e.name):  # around forward or backward of one microbatch
                    work_done.append(e.name)  # the model's forward/backward would run here

        threads = [threading.Thread(target=rank, args=(s,)) for s in range(stages)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert ctl.wait_idle(5.0)
        total = ctl.stats()
    assert len(work_done) == 2 * stages * micro
    expected_switches = 0
    for s in range(stages):
        clocks = [e.op_point.sm_clock_mhz for e in sch.elements_on(f"stage{s}")]
        changes = [c for i, c in enumerate(clocks) if i == 0 or c != clocks[i - 1]]
        # One request per change point; the worker may merge requests that queue up
        # behind a running switch, so the switches carried out are a subsequence of
        # the change points that ends with the last one.
        applied = [p.sm_clock_mhz for p in gpus[f"stage{s}"].setters()]
        assert applied[-1] == changes[-1]
        it = iter(changes)
        assert all(c in it for c in applied)
        expected_switches += len(changes)
        assert gpus[f"stage{s}"].state == gpus[f"stage{s}"].original  # restored
    assert total.count + total.coalesced == expected_switches
    assert total.skipped == 2 * stages * micro - expected_switches


def test_unchanged_request_after_restart_is_rejected(build, fake_gpu):
    ctl = RuntimeController(_two_clock_schedule(build), {"stage0": fake_gpu(0)}, warn_drift=False)
    with ctl:
        ctl.enter("A")
    with pytest.raises(ApplyError, match="closed"):
        ctl.start()


def test_device_wide_part_only_is_compared(build, fake_gpu):
    """Elements that differ only in per-element extras share one device setting."""
    e = build.element
    a = e("A", "stage0", 0.0, 0.01, sm=1410)
    b = e("B", "stage0", 0.01, 0.01, sm=1410)
    b = type(b)(**{**b.__dict__, "op_point": OperatingPoint(1410, extras={"sms": 54})})
    gpu = fake_gpu(0)
    with RuntimeController(build.schedule([a, b], ["stage0"]), {"stage0": gpu}) as ctl:
        assert ctl.enter("A") is True
        assert ctl.enter("B") is False
        assert ctl.wait_idle(5.0)
    assert gpu.setters() == [OperatingPoint(1410)]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_loop_restores_and_stops_the_workers(build, fake_gpu, signum):
    gpu = fake_gpu(0)
    ctl = RuntimeController(_two_clock_schedule(build), {"stage0": gpu})
    expected = KeyboardInterrupt if signum == signal.SIGINT else SystemExit
    with pytest.raises(expected), ctl:
        ctl.enter("C")
        assert ctl.wait_idle(5.0)
        os.kill(os.getpid(), signum)
        time.sleep(5)  # interrupted by the handler long before this ends
    assert gpu.state == gpu.original
    assert not any(t.name.startswith("eopt-switch-") for t in threading.enumerate())
    # The process's own handlers are back in place.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
