"""Both definitions of "outside every region", each named in the comparison."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from rich.console import Console

from eopt.report.compare_table import render_comparison
from eopt.runs.compare import OUTSIDE_DEFINITIONS, RunValues, compare_runs, outside_shares


def _call(depth: int, region: bool, energy: float | None) -> SimpleNamespace:
    event = SimpleNamespace(is_region=region)
    return SimpleNamespace(depth=depth, event=event, inclusive_energy_j=energy)


def test_the_note_counts_kernels_outside_every_region_as_outside():
    # 100 J in all: a 60 J region holding a 40 J kernel, a 15 J kernel at top level,
    # and 25 J outside every event.
    calls = (_call(0, True, 60.0), _call(1, False, 40.0), _call(0, False, 15.0))
    att = SimpleNamespace(total_energy_j=100.0, outside_energy_j=25.0, calls=calls)
    shares = outside_shares(att)
    assert shares == {"regions": pytest.approx(0.40), "events": pytest.approx(0.25)}
    assert set(shares) == set(OUTSIDE_DEFINITIONS)


def test_without_calls_only_the_events_share_is_known():
    att = SimpleNamespace(total_energy_j=50.0, outside_energy_j=5.0, calls=())
    assert outside_shares(att) == {"regions": None, "events": pytest.approx(0.1)}


def _runs(prefix: str, seed: int, events: float, regions: float | None) -> list[RunValues]:
    rng = np.random.default_rng(seed)
    return [
        RunValues(
            f"{prefix}{i}",
            i,
            float(2.0 + 0.01 * rng.standard_normal()),
            float(500.0 + rng.standard_normal()),
            events,
            regions,
        )
        for i in range(12)
    ]


@pytest.mark.parametrize("seed", [1, 2])
def test_the_comparison_headlines_the_note_and_names_both(seed):
    a, b = _runs("a", seed, 0.406, 0.433), _runs("b", seed + 10, 0.484, 0.510)
    cmp = compare_runs(a, b, detect_states=False)
    assert cmp.a.outside_definition == "regions"
    assert cmp.a.outside_share.median == pytest.approx(0.433)
    assert cmp.b.outside_other.median == pytest.approx(0.484)
    data = cmp.to_dict()["outside_share"]
    assert data["definition"] == "regions" and data["other"]["definition"] == "events"
    chosen = compare_runs(a, b, detect_states=False, outside="events")
    assert chosen.a.outside_share.median == pytest.approx(0.406)
    console = Console(record=True, width=160)
    render_comparison(cmp, console)
    text = console.export_text()
    assert "outside every region, note's" in text and "43.3%" in text
    assert "outside every event" in text and "40.6%" in text


def test_runs_that_give_only_the_events_share_are_labelled_so():
    a, b = _runs("a", 3, 0.2, None), _runs("b", 4, 0.3, None)
    cmp = compare_runs(a, b, detect_states=False)
    assert cmp.a.outside_definition == "events" and cmp.a.outside_other is None
    with pytest.raises(ValueError, match="outside must be one of regions, events"):
        compare_runs(a, b, outside="kernels")


def test_the_dbscan_runs_give_the_independently_measured_shares():
    """An independent recomputation on these H100 runs by the note's definition gave
    43.3 % (fdbscan) and 51.0 % (fdbscan-dense) outside every region, 40.6 % and 48.4 %
    outside every event."""
    from pathlib import Path

    from eopt.runs.variants import load_variant

    data = Path(__file__).resolve().parents[1] / "data" / "kokkos_dbscan_h100"
    expected = {"fdbscan": (0.433, 0.406), "fdbscan-dense": (0.510, 0.484)}
    for variant, (regions, events) in expected.items():
        runs = load_variant(data / variant)
        assert all(r.outside_share_regions is not None for r in runs)  # known for every run
        assert np.median([r.outside_share_regions for r in runs]) == pytest.approx(
            regions, abs=5e-4
        )
        assert np.median([r.outside_share for r in runs]) == pytest.approx(events, abs=5e-4)
