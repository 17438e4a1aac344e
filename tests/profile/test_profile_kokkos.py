"""eopt profile --kokkos: an unmodified Kokkos program's regions are the elements, over
three clocks, through the fake NVML (each clock locked for its run, restored after)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from eopt.model.operating_point import OperatingPoint
from eopt.runs.profile import ProfilePlan, profile_on_device, signatures_from_calls

_spec = importlib.util.spec_from_file_location(
    "_kokkos_programs_profile",
    Path(__file__).resolve().parents[1] / "measure" / "test_kokkos_programs.py",
)
assert _spec is not None and _spec.loader is not None
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)


def test_kokkos_regions_are_profiled_at_three_clocks(make_fake_nvml, tmp_path_factory, data_file):
    from eopt.devices import open_devices

    app = helpers.build_program(tmp_path_factory, data_file("kokkos/app.cpp"))
    connector = helpers.build_connector_once(tmp_path_factory)
    fake = make_fake_nvml([{}])
    device = open_devices("nvml", [0], control=True)[0]
    clocks = (1410.0, 1200.0, 1005.0)
    plan = ProfilePlan(
        (str(app), "4"),
        tuple(OperatingPoint(sm_clock_mhz=c) for c in clocks),
        static_idle_s=0.2,
    )
    run = profile_on_device(plan, device, settle_s=0.0, kokkos_library=str(connector))
    assert fake.gpus[0].locked_sm is None  # restored after the last run
    sigs = signatures_from_calls(run)
    got = {(s.name, s.op_point.sm_clock_mhz): s.meta["n"] for s in sigs}
    names = ("setup", "solve", "iteration", 'phase "a", b')
    assert got == {(n, c): (4 if n == "iteration" else 1) for n in names for c in clocks}
    for s in sigs:
        assert s.time > 0 and s.static_power > 0
        assert s.meta["device_model"] == device.model
