"""`eopt check SCHEDULE --measured RUN.json`: a recorded run against its prediction.

The runs are real runs of the schedule on the simulated GPU (a fresh GPU per run, every
mechanism off), recorded in the layout `eopt measure -o` writes; the library is
measured on the same simulator, so an honest run must agree and a run whose element
drew more must not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eopt.check.measured import check_measured, read_recorded_calls
from eopt.model.library import read_library
from eopt.model.schedule import read_schedule
from tests.check.measured_helpers import write_case
from tests.handoff.runner import run_eopt


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


def _check(folder: Path, *extra: str) -> dict:
    s, lib, run = folder / "s.json", folder / "lib.jsonl", folder / "run.json"
    out = folder / "m.json"
    assert run_eopt("check", s, "--measured", run, "--library", lib, "-o", out, *extra) == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("seed", [3, 17])
def test_honest_run_agrees(here: Path, seed: int) -> None:
    write_case(here, seed=seed)
    data = _check(here)
    assert data["schema"] == "eopt.check/1" and data["mode"] == "measured"
    assert data["deviation"] is False
    assert len(data["elements"]) == 6 and not data["unrecorded"]
    # The stated level: energy and time of six elements and of the total, together.
    assert data["tests"] == 14 and data["confidence"] == pytest.approx(0.95)
    assert data["each_confidence"] == pytest.approx(1 - 0.05 / 14)
    for key in ("energy", "time"):
        assert data["test"][key]["spread"] == "single-run spreads"
        assert data["test"][key]["min_detectable"] > 0
    low, high = data["predicted"]["interval_energy_j"]
    assert low < data["measured"]["energy_j"] < high


def test_element_that_drew_more_is_named(here: Path) -> None:
    write_case(here, seed=3, scale={"bwd[3]": 1.2})
    data = _check(here)
    assert data["deviation"] is True
    bad = [e["name"] for e in data["elements"] if not e["passed"]]
    assert bad == ["bwd[3]"]
    row = next(e for e in data["elements"] if e["name"] == "bwd[3]")
    assert row["measured_energy_j"] > row["interval_energy_j"][1]


def test_small_shift_of_every_element_shows_in_the_total(here: Path) -> None:
    """Each element 3 % high: not outside every element's interval, but the total's
    spread is smaller relative to its mean, so the total finds it."""
    sched = write_case(here, seed=3)[0]
    names = [e.name for e in read_schedule(sched).elements]
    shifted = here / "shift"
    shifted.mkdir()
    write_case(shifted, seed=3, scale=dict.fromkeys(names, 1.03))
    data = _check(shifted)
    honest = _check(here)
    assert honest["deviation"] is False
    assert data["deviation"] is True
    assert data["test"]["passed"] is False
    assert sum(not e["passed"] for e in data["elements"]) < len(names)


def test_without_a_library_energy_is_tested_alone(here: Path) -> None:
    s, _, run = write_case(here, seed=3)
    assert run_eopt("check", s, "--measured", run, "-o", "m.json") == 0
    data = json.loads((here / "m.json").read_text())
    assert "time" not in data["test"] and data["tests"] == 7
    assert any("time is not tested" in n for n in data["predicted"]["notes"])


def test_api_matches_the_file(here: Path) -> None:
    s, lib, run = write_case(here, seed=3)
    result = check_measured(read_schedule(s), read_recorded_calls(run), read_library(lib))
    data = _check(here)
    assert result.measured_energy_j == pytest.approx(data["measured"]["energy_j"])
    assert result.predicted_energy_j == pytest.approx(read_schedule(s).energy)


def test_a_run_of_other_regions_is_one_line(here: Path, capsys) -> None:
    s, _, run = write_case(here, seed=3)
    data = json.loads(run.read_text())
    for e in data["events"]:
        e["name"] = "step"
    run.write_text(json.dumps(data))
    capsys.readouterr()
    assert run_eopt("check", s, "--measured", run) != 0
    err = capsys.readouterr().err
    assert "run.json" in err and "eopt.element" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_schedule_is_not_a_run(here: Path, capsys) -> None:
    s, _, _ = write_case(here, seed=3)
    capsys.readouterr()
    assert run_eopt("check", s, "--measured", s) != 0
    err = capsys.readouterr().err
    assert "eopt.regions-report/1" in err and "eopt measure -o" in err


def test_measured_refuses_running_options(here: Path, capsys) -> None:
    s, _, run = write_case(here, seed=3)
    capsys.readouterr()
    assert run_eopt("check", s, "--measured", run, "--sim") != 0
    assert "drop --sim" in capsys.readouterr().err


def test_report_shows_the_interval_against_the_measurement(here: Path) -> None:
    write_case(here, seed=3, scale={"bwd[3]": 1.2})
    data = _check(here)
    assert run_eopt("report", "--check", "m.json", "-o", "r.html") == 0
    html = (here / "r.html").read_text()
    assert "Recorded run against the prediction" in html
    low, high = data["predicted"]["interval_energy_j"]
    from eopt.report.svg import fmt_num

    assert f"{fmt_num(low)} – {fmt_num(high)} J" in html
    assert fmt_num(data["measured"]["energy_j"]) in html
    # The deviating element comes first, marked.
    rows = html.split("<tr>")
    first = next(r for r in rows if "bwd[" in r or "fwd[" in r)
    assert "bwd[3]" in first and "deviates" in first and "outside" in first
