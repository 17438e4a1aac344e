"""Traces in, per-region energy out: hand-computed energies, the sharing rule, conservation.

The small traces here are built so that every number can be checked by hand: constant
power makes an interval's energy its length times the power, and a ramp makes it the
area of a trapezoid.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from eopt.attribute.engine import attribute, sum_attributions, window_energy
from eopt.cli import attribute as attribute_cli
from eopt.model.trace import Event, PowerSeries, Trace
from eopt.model.trace_io import read_trace, read_traces, write_dashboard

S = 1_000_000_000  # ns per s
T0 = 1_754_510_259_000_000_000  # an epoch-scale origin: precision must survive it


def series(domain: str, device: int, times_s, power_w) -> PowerSeries:
    times = np.array([T0 + round(t * S) for t in times_s], dtype=np.int64)
    return PowerSeries(domain, device, times, np.array(power_w, dtype=float))


def event(i: int, parent: int, name: str, a: float, b: float, cat: str = "USER_REGION") -> Event:
    return Event(i, parent, name, cat, T0 + round(a * S), T0 + round(b * S))


def nested_trace() -> Trace:
    """GPU 0 at 100 W and CPU_PKG 0 at 50 W over 0–10 s (a sample a second).

    A [1, 7] holds B [2, 4] and C [3, 6], which overlap in [3, 4] without nesting; D [8, 9]
    is a second top-level region.
    """
    ticks = np.arange(11.0)
    return Trace(
        events=(
            event(1, 0, "A", 1, 7),
            event(2, 1, "B", 2, 4, "PARALLEL_FOR"),
            event(3, 1, "C", 3, 6, "PARALLEL_REDUCE"),
            event(4, 0, "D", 8, 9),
        ),
        series=(series("GPU", 0, ticks, [100.0] * 11), series("CPU_PKG", 0, ticks, [50.0] * 11)),
        source="nested",
    )


def test_nested_regions_inclusive_exclusive_and_shared_overlap_by_hand() -> None:
    att = attribute(nested_trace())
    r = {x.name: x for x in att.regions}
    # GPU: A alone in [1,2] and [6,7] (200 J); B alone [2,3] (100 J) and half of [3,4]
    # (50 J); C half of [3,4] and alone [4,6] (250 J); D [8,9]. CPU: half of each.
    assert r["A"].exclusive_energy_j == pytest.approx(200 * 1.5)
    assert r["B"].exclusive_energy_j == pytest.approx(150 * 1.5)
    assert r["C"].exclusive_energy_j == pytest.approx(250 * 1.5)
    assert r["A"].inclusive_energy_j == pytest.approx(600 * 1.5)
    assert r["B"].inclusive_energy_j == pytest.approx(150 * 1.5)
    assert r["D"].inclusive_energy_j == pytest.approx(100 * 1.5)
    assert r["A"].by_series == pytest.approx({"GPU 0": 600.0, "CPU_PKG 0": 300.0})
    assert r["B"].time_s == pytest.approx(2.0)
    assert r["A"].mean_power_w == pytest.approx(150.0)
    assert [x.name for x in att.regions] == ["A", "B", "C", "D"]
    assert [x.depth for x in att.regions] == [0, 1, 1, 0]
    # Each series integrated on its own.
    energies = {(s.domain, s.device_id): s.energy_j for s in att.series}
    assert energies == pytest.approx({("GPU", 0): 1000.0, ("CPU_PKG", 0): 500.0})
    assert att.total_energy_j == pytest.approx(1500.0)
    assert att.outside_energy_j == pytest.approx(300 * 1.5)  # [0,1], [7,8], [9,10]
    assert att.region("A").share == pytest.approx(900 / 1500)


def test_domain_filter_integrates_only_that_domain() -> None:
    att = attribute(nested_trace(), domain="CPU_PKG")
    assert att.total_energy_j == pytest.approx(500.0)
    assert att.region("A").inclusive_energy_j == pytest.approx(300.0)


def test_power_is_interpolated_at_region_edges() -> None:
    """A ramp 0 → 100 W over 10 s, sampled only at its ends: [2, 4] holds ∫10t dt = 60 J."""
    ramp = series("GPU", 0, [0.0, 10.0], [0.0, 100.0])
    trace = Trace((event(1, 0, "r", 2, 4),), (ramp,), source="ramp")
    assert attribute(trace).region("r").inclusive_energy_j == pytest.approx(60.0)
    start, end = T0 + 2 * S, T0 + 4 * S
    assert window_energy(ramp, start, end) == pytest.approx(60.0)
    # The note's convention drops the partial intervals: no sample lies inside.
    assert window_energy(ramp, start, end, "inside") == 0.0
    assert window_energy(ramp, T0 - S, end) is None  # before the first sample: unknown


@pytest.mark.parametrize("seed", range(5))
def test_conservation_on_random_traces(seed: int) -> None:
    """Exclusive energies plus the outside energy make the total, whatever the overlaps."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.uniform(0.005, 0.03, 400))
    power = rng.uniform(60, 400, times.size)
    items = []
    for i in range(1, 40):
        a = rng.uniform(times[0], times[-1] - 0.5)
        b = a + rng.uniform(0, 0.5)
        items.append(Event(i, 0, f"r{i % 7}", "USER_REGION", round(a * S), round(b * S)))
    # Some nested children, clipped inside their parents.
    for i in range(40, 60):
        parent = items[rng.integers(len(items))]
        span = parent.end_ns - parent.start_ns
        a = parent.start_ns + int(rng.uniform(0, 0.5) * span)
        b = a + int(rng.uniform(0, 0.5) * span)
        items.append(Event(i, parent.id, f"k{i % 5}", "PARALLEL_FOR", a, b))
    gpu = PowerSeries("GPU", 0, np.round(times * S).astype(np.int64), power)
    att = attribute(Trace(tuple(items), (gpu,), source="random"))
    excl = sum(r.exclusive_energy_j for r in att.regions)
    assert excl + att.outside_energy_j == pytest.approx(att.total_energy_j, rel=1e-9)
    # Plain trapezoid over every sample (independent of the engine).
    assert att.total_energy_j == pytest.approx(float(np.trapezoid(power, times)), rel=1e-9)
    for c in att.calls:  # a call's inclusive energy never exceeds its window's energy
        window = window_energy(gpu, c.event.start_ns, c.event.end_ns)
        assert c.inclusive_energy_j <= window + 1e-9


def test_region_outside_the_power_trace_has_unknown_energy_not_zero() -> None:
    gpu = series("GPU", 0, np.arange(5.0), [100.0] * 5)
    trace = Trace((event(1, 0, "late", 3, 6), event(2, 0, "ok", 1, 2)), (gpu,), source="t")
    att = attribute(trace)
    late = att.region("late")
    assert late.inclusive_energy_j is None and late.exclusive_energy_j is None
    assert late.share is None and late.mean_power_w is None
    assert any("outside the power trace" in f for f in late.flags)
    assert att.region("ok").inclusive_energy_j == pytest.approx(100.0)
    json.dumps(att.to_dict(calls=True), allow_nan=False)  # unknown is null, not NaN


def test_a_sampling_gap_flags_the_regions_it_touches() -> None:
    times = [*np.arange(0, 2, 0.02), *np.arange(3, 5, 0.02)]  # 1 s without samples
    gpu = series("GPU", 0, times, [100.0] * len(times))
    trace = Trace((event(1, 0, "hit", 1.5, 3.5), event(2, 0, "clear", 3.6, 4.5)), (gpu,))
    att = attribute(trace)
    assert any("sampling gap" in f for f in att.region("hit").flags)
    assert att.region("clear").flags == ()
    assert len(att.series[0].gaps) == 1


def test_dashboard_round_trip(tmp_path) -> None:
    original = nested_trace()
    write_dashboard(original, tmp_path / "t", {"command": ["./app"]})
    back = read_trace(tmp_path / "t")
    assert back.events == original.events
    for s0, s1 in zip(original.series, back.series, strict=True):
        assert s0.key == s1.key
        assert np.array_equal(s0.times_ns, s1.times_ns)
        assert np.allclose(s0.power_w, s1.power_w)
    assert back.metadata["version"] == 1 and back.metadata["command"] == ["./app"]
    a0, a1 = attribute(original), attribute(back)
    assert a1.to_dict()["regions"] == a0.to_dict()["regions"]


def write_files(folder, events: str, power: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "events.csv").write_text(events)
    (folder / "power_samples.csv").write_text(power)


def test_mpi_ranks_one_result_each_and_their_sum(tmp_path) -> None:
    for rank, watts in ((0, 100), (1, 300)):
        write_files(
            tmp_path / "run" / f"rank_{rank}",
            "id,parent_id,name,category,start_ns,end_ns\n1,0,solve,USER_REGION,1000000000,3000000000\n",
            "timestamp_ns,domain,device_id,power_watts,energy_joules\n"
            + "".join(f"{t * S},GPU,{rank},{watts},0\n" for t in range(5)),
        )
    traces = read_traces(tmp_path / "run")
    assert [t.rank for t in traces] == [0, 1]
    total = sum_attributions([attribute(t) for t in traces], "run")
    assert [r.region("solve").inclusive_energy_j for r in total.ranks] == pytest.approx(
        [200.0, 600.0]
    )
    assert total.region("solve").inclusive_energy_j == pytest.approx(800.0)
    assert total.region("solve").calls == 2
    assert total.total_energy_j == pytest.approx(1600.0)
    result = CliRunner().invoke(attribute_cli.command, [str(tmp_path / "run"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["schema"] == "eopt.attribution/1"
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    assert data["regions"][0]["inclusive_energy_j"] == pytest.approx(800.0)


def test_attribute_cli_json_schema_and_table(tmp_path) -> None:
    write_dashboard(nested_trace(), tmp_path / "t")
    out = tmp_path / "att.json"
    result = CliRunner().invoke(
        attribute_cli.command, [str(tmp_path / "t"), "--json", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data == json.loads(result.output)
    assert data["schema"] == "eopt.attribution/1"
    for key in ("regions", "series", "outside_energy_j", "total_energy_j"):
        assert key in data
    for r in data["regions"]:
        for key in ("name", "calls", "time_s", "inclusive_energy_j", "exclusive_energy_j"):
            assert key in r
        assert "mean_power_w" in r
    assert {(s["domain"], s["device_id"]) for s in data["series"]} == {("GPU", 0), ("CPU_PKG", 0)}
    table = CliRunner().invoke(attribute_cli.command, [str(tmp_path / "t")])
    assert table.exit_code == 0
    assert "outside" in table.output and "CPU_PKG" in table.output and "900" in table.output


def test_power_csv_of_nvidia_smi_with_events(tmp_path) -> None:
    """nvidia-smi's CSV (local date-times, "W" in the values) plus an events.csv."""
    lines = ["timestamp, power.draw [W]"]
    for k in range(11):
        lines.append(f"2026/12/01 10:00:{k:02d}.000, {100 + 10 * (k >= 5):.2f} W")
    csv_path = tmp_path / "smi.csv"
    csv_path.write_text("\n".join(lines) + "\n")
    start = int(np.datetime64("2026-12-01T10:00:02", "ns").astype(np.int64))
    (tmp_path / "events.csv").write_text(
        "id,parent_id,name,category,start_ns,end_ns\n"
        f"1,0,step,USER_REGION,{start},{start + 2 * S}\n"
    )
    result = CliRunner().invoke(
        attribute_cli.command,
        [str(csv_path), "--events", str(tmp_path / "events.csv"), "--json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # the zone it assumed is a note on stderr
    assert data["regions"][0]["inclusive_energy_j"] == pytest.approx(200.0)  # 2 s at 100 W
    assert data["total_energy_j"] == pytest.approx(100 * 4 + 105 * 1 + 110 * 5)


def test_power_csv_with_named_columns_and_milliwatts(tmp_path) -> None:
    path = tmp_path / "dcgm.csv"
    path.write_text(
        "ts_ms,gpu,DCGM_FI_DEV_POWER_USAGE [mW]\n"
        + "".join(f"{t * 100},{g},{150000 + g * 50000}\n" for t in range(11) for g in (0, 1))
    )
    result = CliRunner().invoke(
        attribute_cli.command,
        [
            str(path),
            "--time-column",
            "ts_ms",
            "--power-column",
            "DCGM_FI_DEV_POWER_USAGE [mW]",
            "--time-unit",
            "ms",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    energies = {s["device_id"]: s["energy_j"] for s in json.loads(result.output)["series"]}
    assert energies == pytest.approx({0: 150.0, 1: 200.0})  # 1 s at 150 W and at 200 W


def test_outputs_follow_the_overwrite_rule_and_quiet_prints_nothing(tmp_path) -> None:
    write_dashboard(nested_trace(), tmp_path / "t")
    out = tmp_path / "att.json"
    out.write_text("keep me")
    refused = CliRunner().invoke(attribute_cli.command, [str(tmp_path / "t"), "-o", str(out)])
    assert refused.exit_code == 1 and "--force" in refused.output
    assert out.read_text() == "keep me"
    forced = CliRunner().invoke(
        attribute_cli.command, [str(tmp_path / "t"), "-o", str(out), "--force", "-q"]
    )
    assert forced.exit_code == 0 and forced.output == ""
    assert json.loads(out.read_text())["schema"] == "eopt.attribution/1"
