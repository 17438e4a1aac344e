"""A plan whose signatures record no spread gets σ_E = 0 without composing it: the
same figure the composition gives (`eopt.plan.solve.schedule_energy_std`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from eopt.calculus.schedule import Placement, compose_schedule
from eopt.model.schedule import read_schedule
from eopt.model.signature import Signature
from tests.handoff.runner import run_eopt


@pytest.mark.parametrize("seed", range(4))
def test_no_spread_gives_the_compositions_sigma(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    monkeypatch.chdir(tmp_path)
    rng = random.Random(seed)
    sigs = [
        Signature(
            f"stage{s}.{kind}",
            static_power=rng.uniform(50.0, 150.0),
            time=rng.uniform(0.5, 3.0),
            dynamic_energy=rng.uniform(10.0, 90.0),
            meta={"n": 30},
        )
        for s in range(2)
        for kind in ("forward", "backward")
    ]
    (tmp_path / "lib.jsonl").write_text("".join(json.dumps(s.to_dict()) + "\n" for s in sigs))
    assert run_eopt(
        "plan", "pipeline", "--library", "lib.jsonl", "-S", "2", "-M", "2",
        "--idle-power", "60W", "-o", "p.yaml", "-q",
    ) == 0  # fmt: skip
    assert run_eopt("solve", "p.yaml", "-o", "s.json", "-q") == 0
    schedule = read_schedule(tmp_path / "s.json")
    by_name = {s.name: s for s in sigs}
    placements = [
        Placement(by_name[e.type].on(e.device), e.device, e.start) for e in schedule.elements
    ]
    assert schedule.energy_std == compose_schedule(placements, idle_power=60.0).std_energy
