"""`eopt apply`: dry-run output and checks, static locks, --until-exit, mapping errors."""

from __future__ import annotations

import sys

import pytest

import eopt.devices
from eopt.apply import ApplyError, nvml_calls, parse_gpu_map, plan_apply, resolve_gpu_map
from eopt.cli import main
from eopt.model.operating_point import OperatingPoint
from eopt.model.schedule import write_schedule


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def opened(monkeypatch, fake_gpu):
    """Replace device discovery with fake GPUs; records each call's arguments."""
    record: dict[str, object] = {"gpus": []}

    def fake_open(backend="auto", indices=None, sim_model="", seed=0, control=True):
        record.update(backend=backend, indices=list(indices or []), control=control)
        gpus = [fake_gpu(i) for i in indices or [0]]
        record["gpus"] = gpus
        return gpus

    monkeypatch.setattr(eopt.devices, "open_devices", fake_open)
    return record


@pytest.fixture
def mixed_schedule(build, tmp_path):
    """stage0 locked at 1200 MHz; stage1 at 250 W; stage2 switches between two clocks."""
    e = build.element
    sch = build.schedule(
        [
            e("F0", "stage0", 0.0, 0.01, sm=1200),
            e("B0", "stage0", 0.03, 0.02, sm=1200),
            e("F1", "stage1", 0.01, 0.01, limit=250),
            e("F2", "stage2", 0.02, 0.01, sm=1410),
            e("B2", "stage2", 0.05, 0.02, sm=1005),
        ],
        ["stage0", "stage1", "stage2"],
    )
    path = tmp_path / "schedule.json"
    write_schedule(path, sch)
    return path


def test_dry_run_prints_each_nvml_call_and_changes_nothing(mixed_schedule, opened, capsys):
    code, out, _ = _run(["apply", str(mixed_schedule), "--dry-run"], capsys)
    assert code == 0, out
    assert "nvmlDeviceSetGpuLockedClocks(gpu0, 1200, 1200)" in out
    assert "nvmlDeviceSetPowerManagementLimit(gpu1, 250000 mW)" in out
    # stage2 needs two settings: named as a runtime-controller case, calls listed.
    assert "stage2 → gpu2: 2 settings" in out and "runtime" in out
    assert "nvmlDeviceSetGpuLockedClocks(gpu2, 1005, 1005)" in out
    assert opened["control"] is False  # opened measure-only
    assert all(g.calls == [] for g in opened["gpus"])  # no setter, no restore


def test_dry_run_rejects_an_unsupported_clock_before_any_change(build, tmp_path, opened, capsys):
    sch = build.schedule([build.element("F[s0,m3]", "stage0", 0.0, 0.01, sm=1455)], ["stage0"])
    write_schedule(tmp_path / "s.json", sch)
    code, _, err = _run(["apply", str(tmp_path / "s.json"), "--dry-run"], capsys)
    assert code == 1
    message = " ".join(err.split())
    assert "F[s0,m3]" in message and "1455" in message
    assert "810–1410" in message or "810, 1005, 1200, 1410" in message
    assert "Traceback" not in err
    assert all(g.calls == [] for g in opened["gpus"])


def test_power_limit_outside_the_range_names_element_value_and_range(build, fake_gpu):
    sch = build.schedule([build.element("F7", "stage0", 0.0, 0.01, limit=450)], ["stage0"])
    with pytest.raises(ApplyError, match=r"F7 .*power limit 450 W .*100–400 W"):
        plan_apply(sch, {"stage0": fake_gpu(0)})


def test_apply_locks_static_devices_and_keeps_them(mixed_schedule, opened, capsys):
    code, out, _ = _run(["apply", str(mixed_schedule)], capsys)
    assert code == 0, out
    gpu0, gpu1, gpu2 = opened["gpus"]
    assert gpu0.setters() == [OperatingPoint(1200)]
    assert gpu1.setters() == [OperatingPoint(power_limit_w=250)]
    assert gpu2.calls == []  # needs the runtime controller: left alone
    assert gpu0.state.sm_clock_mhz == 1200  # kept after eopt exits (until eopt reset)
    assert "eopt reset" in out


def test_kept_settings_are_recorded_for_eopt_reset(mixed_schedule, opened, capsys):
    from eopt.devices.guard import find_state_files

    code, _, _ = _run(["apply", str(mixed_schedule)], capsys)
    assert code == 0
    (state,) = find_state_files()
    assert sorted(d["index"] for d in state.devices) == [0, 1]  # the two locked GPUs
    assert state.devices[0]["power_limit_w"] == 300.0  # the original limit


def test_failure_part_way_restores_and_leaves_no_state_file(fake_gpu):
    from eopt.apply import apply_locked
    from eopt.devices.guard import find_state_files

    gpus = {"a": fake_gpu(0), "b": fake_gpu(1)}
    gpus["b"].fail_on = 1200
    from eopt.apply.settings import DevicePlan
    from eopt.apply.static import ApplyPlan

    plan = ApplyPlan(
        (
            DevicePlan("a", 0, (OperatingPoint(1410),), (("x",),)),
            DevicePlan("b", 1, (OperatingPoint(1200),), (("y",),)),
        )
    )
    with pytest.raises(Exception, match="injected failure"):
        apply_locked(plan, gpus)
    assert gpus["a"].state == gpus["a"].original  # the change already made is undone
    assert [c[0] for c in gpus["a"].calls] == ["set", "restore"]
    assert find_state_files() == []


def test_until_exit_runs_the_command_then_restores(mixed_schedule, opened, capsys, tmp_path):
    marker = tmp_path / "ran"
    script = f"import pathlib, sys; pathlib.Path({str(marker)!r}).write_text('x'); sys.exit(3)"
    code, _, _ = _run(
        ["apply", str(mixed_schedule), "--until-exit", "--", sys.executable, "-c", script],
        capsys,
    )
    assert code == 3  # the command's status
    assert marker.exists()
    gpu0 = opened["gpus"][0]
    assert [c[0] for c in gpu0.calls] == ["set", "restore"]
    assert gpu0.state == gpu0.original


def test_until_exit_restores_when_the_command_cannot_start(mixed_schedule, opened, capsys):
    code, _, err = _run(
        ["apply", str(mixed_schedule), "--until-exit", "--", "/nonexistent/trainer"], capsys
    )
    assert code == 1 and "command not found" in err
    gpu0 = opened["gpus"][0]
    assert gpu0.calls[-1][0] == "restore" and gpu0.state == gpu0.original


def test_command_without_until_exit_is_refused(mixed_schedule, opened, capsys):
    code, _, err = _run(["apply", str(mixed_schedule), "--", "python", "x.py"], capsys)
    assert code == 1 and "--until-exit" in err
    assert opened["gpus"] == []  # nothing was even opened


def test_gpu_mapping_precedence_and_errors(build, tmp_path, opened, capsys):
    e = build.element
    sch = build.schedule(
        [e("A", "s0", 0, 0.01, sm=1200), e("B", "s1", 0, 0.01, sm=1200)], ["s0", "s1"], [5, None]
    )
    assert resolve_gpu_map(sch) == {"s0": 5, "s1": 1}
    assert resolve_gpu_map(sch, {"s0": 2}) == {"s0": 2, "s1": 1}
    with pytest.raises(ApplyError, match="both map to GPU 1"):
        resolve_gpu_map(sch, {"s0": 1})
    with pytest.raises(ApplyError, match="unknown plan device"):
        resolve_gpu_map(sch, {"s9": 1})
    with pytest.raises(ApplyError, match="PLANDEV=GPU"):
        parse_gpu_map(["s0:1"])
    write_schedule(tmp_path / "s.json", sch)
    code, _, _ = _run(["apply", str(tmp_path / "s.json"), "--dry-run", "--gpu", "s1=7"], capsys)
    assert code == 0 and opened["indices"] == [5, 7]


def test_nvml_calls_convert_watts_to_milliwatts_at_the_boundary():
    calls = nvml_calls(3, OperatingPoint(1410, 1593, 312.5))
    assert calls == [
        "nvmlDeviceSetGpuLockedClocks(gpu3, 1410, 1410)",
        "nvmlDeviceSetMemoryLockedClocks(gpu3, 1593, 1593)",
        "nvmlDeviceSetPowerManagementLimit(gpu3, 312500 mW)",
    ]
    assert nvml_calls(0, OperatingPoint()) == []


def test_dry_run_on_the_simulated_gpu_is_announced(build, tmp_path, capsys):
    sch = build.schedule([build.element("F", "stage0", 0.0, 0.01, sm=1200)], ["stage0"])
    write_schedule(tmp_path / "s.json", sch)
    code, out, err = _run(
        ["apply", str(tmp_path / "s.json"), "--dry-run", "--backend", "sim"], capsys
    )
    assert code == 0
    assert "simulated" in out + err
    assert "nvmlDeviceSetGpuLockedClocks(gpu0, 1200, 1200)" in out


# Real GPU identities (through the fake NVML) -------------------------------------------
@pytest.fixture
def two_stage(build, tmp_path):
    e = build.element
    sch = build.schedule(
        [e("F0", "stage0", 0.0, 0.01, sm=1200), e("F1", "stage1", 0.01, 0.01, sm=1200)],
        ["stage0", "stage1"],
    )
    path = tmp_path / "two.json"
    write_schedule(path, sch)
    return path


def test_gpu_option_accepts_uuids_and_pci_bus_ids(two_stage, make_fake_nvml, capsys):
    make_fake_nvml([{}, {}, {}])  # UUIDs GPU-0-fake …, PCI 00000000:07:00.0 …
    argv = ["apply", str(two_stage), "--dry-run", "--backend", "nvml"]
    code, out, err = _run([*argv, "--gpu", "stage0=GPU-2-fake", "--gpu", "stage1=08:00.0"], capsys)
    assert code == 0, err
    assert "stage0 → gpu2" in out and "stage1 → gpu1" in out
    code, _, err = _run([*argv, "--gpu", "stage0=GPU-nope"], capsys)
    assert code == 1 and "GPU-0-fake" in err  # names the GPUs that are there


def test_gpu_option_translates_cuda_visible_devices(two_stage, make_fake_nvml, monkeypatch, capsys):
    """`--gpu stage0=0` inside a job step that sees physical GPUs 2 and 1 is GPU 2,
    not NVML's GPU 0 (another job's)."""
    make_fake_nvml([{}, {}, {}])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,1")
    argv = ["apply", str(two_stage), "--dry-run", "--backend", "nvml"]
    code, out, err = _run([*argv, "--gpu", "stage0=0", "--gpu", "stage1=cuda:1"], capsys)
    assert code == 0, err
    assert "stage0 → gpu2" in out and "stage1 → gpu1" in out


def test_kept_settings_without_persistence_mode_say_they_may_vanish(
    build, tmp_path, make_fake_nvml, capsys
):
    import pynvml

    fake = make_fake_nvml(
        [
            {"persistence": pynvml.NVML_FEATURE_DISABLED},
            {"persistence": pynvml.NVML_FEATURE_ENABLED},
        ]
    )
    e = build.element
    sch = build.schedule(
        [e("F0", "stage0", 0.0, 0.01, limit=250), e("F1", "stage1", 0.01, 0.01, limit=250)],
        ["stage0", "stage1"],
    )
    write_schedule(tmp_path / "s.json", sch)
    code, out, err = _run(["apply", str(tmp_path / "s.json"), "--backend", "nvml"], capsys)
    assert code == 0, err
    assert fake.gpus[0].limit_mw == 250_000  # applied all the same
    message = " ".join(err.split())
    assert "gpu0: persistence mode is off" in message and "--until-exit" in message
    assert "gpu1: persistence mode" not in message  # on: nothing to warn about
    assert "Kept on gpu1 until you run eopt reset" in " ".join(out.split())
    # The dry run says the same before anything changes.
    code, out, _ = _run(
        ["apply", str(tmp_path / "s.json"), "--backend", "nvml", "--dry-run"], capsys
    )
    assert "note: gpu0: persistence mode is off" in " ".join(out.split())


def test_json_output_reports_persistence(build, tmp_path, make_fake_nvml, capsys):
    import json

    make_fake_nvml([{}])
    sch = build.schedule([build.element("F0", "stage0", 0.0, 0.01, sm=1200)], ["stage0"])
    write_schedule(tmp_path / "s.json", sch)
    code, out, _ = _run(
        ["apply", str(tmp_path / "s.json"), "--backend", "nvml", "--dry-run", "--json"], capsys
    )
    assert code == 0
    data = json.loads(out)
    assert data["persistence"] == [
        {"device": "stage0", "gpu": 0, "enabled": True, "note": data["persistence"][0]["note"]}
    ]


def test_collisions_are_checked_only_among_the_devices_controlled(build):
    e = build.element
    sch = build.schedule(
        [e("A", "stage0", 0, 0.01, sm=1200), e("B", "stage1", 0, 0.01, sm=1200)],
        ["stage0", "stage1"],
    )
    # Rank 1 sees one GPU, CUDA ordinal 0; stage0's default (GPU 0) is another rank's.
    assert resolve_gpu_map(sch, {"stage1": 0}, among=["stage1"])["stage1"] == 0
    with pytest.raises(ApplyError, match=r"gpu_map=\{'stage1'") as info:
        resolve_gpu_map(sch, {"stage1": 0}, python_api=True)
    assert "--gpu" not in str(info.value)


def _one_gpu_schedule(build, tmp_path, gpu):
    e = build.element
    sch = build.schedule([e("F0", "stage0", 0.0, 0.01, sm=1200)], ["stage0"], [gpu])
    path = tmp_path / "one.json"
    write_schedule(path, sch)
    return path


def test_a_schedules_gpu_is_a_cuda_ordinal_under_the_mask(
    build, tmp_path, make_fake_nvml, monkeypatch, capsys
):
    """`gpu: 0` with CUDA_VISIBLE_DEVICES=1 is physical GPU 1 (NVML's GPU 0 is another
    job's), and the lock lands there and nowhere else."""
    fake = make_fake_nvml([{}, {}])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    path = _one_gpu_schedule(build, tmp_path, 0)
    code, out, err = _run(["apply", str(path), "--dry-run", "--backend", "nvml"], capsys)
    assert code == 0, err
    assert "stage0 → gpu1" in out
    code, _, err = _run(["apply", str(path), "--backend", "nvml"], capsys)
    assert code == 0, err
    assert fake.gpus[1].locked_sm == (1200, 1200)
    assert fake.gpus[0].locked_sm is None  # the GPU this process was not given


def test_a_gpu_the_mask_withholds_is_refused_naming_the_mask(
    build, tmp_path, make_fake_nvml, monkeypatch, capsys
):
    make_fake_nvml([{}, {}, {}])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    for gpu in ("GPU-0-fake", "nvml:0", "00000000:07:00.0"):
        path = _one_gpu_schedule(build, tmp_path, gpu)
        code, _, err = _run(["apply", str(path), "--dry-run", "--backend", "nvml"], capsys)
        assert code == 1, err
        assert "CUDA_VISIBLE_DEVICES='1'" in err and "not given" in err, err
    path = _one_gpu_schedule(build, tmp_path, "GPU-1-fake")
    code, out, err = _run(["apply", str(path), "--dry-run", "--backend", "nvml"], capsys)
    assert code == 0 and "stage0 → gpu1" in out, err
    path = _one_gpu_schedule(build, tmp_path, 1)  # cuda:1 does not exist under the mask
    code, _, err = _run(["apply", str(path), "--dry-run", "--backend", "nvml"], capsys)
    assert code == 1 and "sees 1" in err, err
