"""Fixtures for the report tests: a small two-stage schedule with known numbers."""

from __future__ import annotations

import pytest

from eopt.model.operating_point import OperatingPoint
from eopt.model.schedule import DeviceInfo, Schedule, ScheduledElement


def _element(
    name: str,
    etype: str,
    device: str,
    start: float,
    duration: float,
    clock: float,
    power_w: float,
    dyn_w: float,
) -> ScheduledElement:
    return ScheduledElement(
        name=name,
        type=etype,
        device=device,
        start=start,
        duration=duration,
        energy=power_w * duration,
        dynamic_energy=dyn_w * duration,
        impl="cublas",
        op_point=OperatingPoint(sm_clock_mhz=clock),
        var_energy=0.04,
    )


@pytest.fixture
def schedule() -> Schedule:
    """Two stages, four elements at two clocks, gaps on both devices.

    stage0: F[s0,m0] 0–0.10 @1410 (300 W), F[s0,m1] 0.10–0.22 @1200 (250 W), idle to 0.40.
    stage1: F[s1,m0] 0.10–0.20 @1410 (300 W), B[s1,m0] 0.25–0.40 @1005 (200 W).
    Idle power 60 W on both. Dynamic power = mean power − 100 W.
    """
    elements = (
        _element("F[s0,m0]", "stage0.forward", "stage0", 0.00, 0.10, 1410, 300, 200),
        _element("F[s0,m1]", "stage0.forward", "stage0", 0.10, 0.12, 1200, 250, 150),
        _element("F[s1,m0]", "stage1.forward", "stage1", 0.10, 0.10, 1410, 300, 200),
        _element("B[s1,m0]", "stage1.backward", "stage1", 0.25, 0.15, 1005, 200, 100),
    )
    devices = (DeviceInfo("stage0", 60.0, 0), DeviceInfo("stage1", 60.0, 1))
    energy = 30 + 30 + 30 + 30 + 60 * (0.40 - 0.22) + 60 * (0.40 - 0.25)  # 139.8 J
    return Schedule(
        elements=elements,
        devices=devices,
        makespan=0.40,
        energy=energy,
        energy_std=1.5,
        deadline=0.42,
        lower_bound=138.0,
        gap=(energy - 138.0) / energy,
        solver={"name": "CBC", "method": "milp", "status": "optimal", "wall_time_s": 0.2},
        baseline={"energy": 150.0, "makespan": 0.38, "label": "every element at its fastest cell"},
    )
