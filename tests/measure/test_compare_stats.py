"""Statistics of ``eopt compare``: checked against known truth and the real DBSCAN traces."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from eopt.report.compare_table import render_comparison
from eopt.runs.compare import RunValues, compare_runs, format_runs

DBSCAN = Path(__file__).resolve().parents[1] / "data" / "kokkos_dbscan_h100"


def _runs(
    tag: str,
    time_s: np.ndarray,
    power_w: np.ndarray,
    start_ns: np.ndarray | None = None,
    outside: np.ndarray | None = None,
) -> list[RunValues]:
    starts = np.arange(time_s.size) * 10**10 if start_ns is None else start_ns
    return [
        RunValues(
            f"{tag}{i + 1}",
            int(starts[i]),
            float(time_s[i]),
            float(time_s[i] * power_w[i]),
            None if outside is None else float(outside[i]),
        )
        for i in range(time_s.size)
    ]


def _lognormal(rng: np.random.Generator, n: int, time_s: float, power_w: float, sigma: float):
    """Per-run time and power, log-normal with medians ``time_s`` and ``power_w``."""
    return time_s * np.exp(rng.normal(0, sigma, n)), power_w * np.exp(rng.normal(0, sigma, n))


# (1) coverage and brute force -----------------------------------------------------------
def test_reduction_cis_cover_the_truth_at_about_the_nominal_rate() -> None:
    # Truth: B's median (and mean) time is 0.8× A's, its power 0.9×, so its energy 0.72×.
    # With equal log-normal spreads the ratio of means equals the ratio of medians.
    truth = {"time": 0.2, "energy": 1 - 0.8 * 0.9, "power": 0.1}
    reps, n = 300, 20
    rng = np.random.default_rng(12345)
    hits = {(stat, k): 0 for stat in ("median", "mean") for k in truth}
    for rep in range(reps):
        a = _runs("a", *_lognormal(rng, n, 2.0, 300.0, 0.1))
        b = _runs("b", *_lognormal(rng, n, 1.6, 270.0, 0.1))
        cmp = compare_runs(a, b, seed=rep, detect_states=False)
        for stat, red in (("median", cmp.reduction), ("mean", cmp.reduction_mean)):
            for k, true in truth.items():
                lo, hi = getattr(red, k).ci
                hits[stat, k] += lo <= true <= hi
    coverage = {key: h / reps for key, h in hits.items()}
    # Binomial sd of a 95 % rate over 300 replicates ≈ 1.3 points; percentile intervals
    # of medians run slightly conservative (the resampled median is discrete).
    for key, cov in coverage.items():
        assert 0.90 <= cov <= 0.995, (key, coverage)


def test_point_values_and_intervals_match_a_plain_loop() -> None:
    rng = np.random.default_rng(7)
    ta, pa = _lognormal(rng, 9, 2.0, 300.0, 0.1)
    tb, pb = _lognormal(rng, 12, 1.7, 280.0, 0.1)
    a, b = _runs("a", ta, pa), _runs("b", tb, pb)
    cmp = compare_runs(a, b, seed=3, detect_states=False)

    ea, eb = ta * pa, tb * pb
    assert cmp.a.median.time_s == pytest.approx(np.median(ta))
    assert cmp.b.mean.energy_j == pytest.approx(eb.mean())
    assert cmp.b.median.power_w == pytest.approx(np.median(pb))
    assert cmp.reduction.energy.value == pytest.approx(1 - np.median(eb) / np.median(ea))
    assert cmp.reduction_mean.time.value == pytest.approx(1 - tb.mean() / ta.mean())

    # The same resamples, one at a time: A's index rows are drawn first, then B's.
    gen = np.random.default_rng(3)
    ia = gen.integers(0, 9, (2000, 9))
    ib = gen.integers(0, 12, (2000, 12))
    red_e = [1 - np.median(eb[ib[r]]) / np.median(ea[ia[r]]) for r in range(2000)]
    med_tb = [np.median(tb[ib[r]]) for r in range(2000)]
    mean_pa = [pa[ia[r]].mean() for r in range(2000)]
    assert cmp.reduction.energy.ci == pytest.approx(tuple(np.quantile(red_e, [0.025, 0.975])))
    assert cmp.b.ci_median.time_s == pytest.approx(tuple(np.quantile(med_tb, [0.025, 0.975])))
    assert cmp.a.ci_mean.power_w == pytest.approx(tuple(np.quantile(mean_pa, [0.025, 0.975])))
    # Small n is said plainly.
    assert any("only 9 runs" in w for w in cmp.warnings)


# (2) planted blocks ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("variant", "first", "last"),
    [("b", 6, 13), ("a", 1, 10), ("b", 27, 30), ("a", 12, 15)],
)
def test_a_planted_block_is_found_with_its_run_indices(variant: str, first: int, last: int) -> None:
    rng = np.random.default_rng(first * 31 + last)
    n = 30
    series = {"a": _lognormal(rng, n, 2.0, 300.0, 0.02), "b": _lognormal(rng, n, 1.6, 270.0, 0.02)}
    t, p = series[variant]
    t[first - 1 : last] *= 1.5  # slower …
    p[first - 1 : last] *= 0.8  # … and drawing less power: another machine state
    # Input order is shuffled; run order comes from the start times only.
    starts = 1_700_000_000 * 10**9 + np.arange(n) * 7 * 10**9
    order = rng.permutation(n)
    runs = {v: [_runs(v, *series[v], start_ns=starts)[i] for i in order] for v in ("a", "b")}
    cmp = compare_runs(runs["a"], runs["b"], region="solve", seed=5)

    assert len(cmp.state_blocks) == 1
    blk = cmp.state_blocks[0]
    assert blk.variant == variant
    assert blk.runs == tuple(range(first, last + 1))
    assert blk.labels == tuple(f"{variant}{i}" for i in range(first, last + 1))
    assert blk.time_ratio == pytest.approx(1.5, rel=0.05)
    assert blk.power_ratio == pytest.approx(0.8, rel=0.05)
    assert blk.median_time_s == pytest.approx(np.median(t[first - 1 : last]))
    assert blk.mean_power_w == pytest.approx(p[first - 1 : last].mean())
    assert set(blk.found_in) == {"time_s", "power_w"}

    # The blocks stay in the main result …
    assert cmp.a.n == cmp.b.n == n
    # … and the comparison without them is exactly the one over the other runs.
    kept = {v: [r for r in runs[v] if r.label not in blk.labels] for v in ("a", "b")}
    direct = compare_runs(kept["a"], kept["b"], region="solve", seed=5, detect_states=False)
    assert cmp.without_blocks is not None
    assert cmp.without_blocks.to_dict() == direct.to_dict()
    assert not compare_runs(kept["a"], kept["b"], region="solve", seed=5).state_blocks

    text = " ".join(cmp.warnings)
    assert f"runs {first}–{last} ({last - first + 1} of {n})" in text
    assert "without the blocks" in text
    large = (last - first + 1) / n >= 0.25
    assert ("medians sit on the blocks' edge" in text) == large


def test_an_excursion_and_return_leaves_one_main_state() -> None:
    # Runs before and after the excursion are two pieces of the same state: one block.
    rng = np.random.default_rng(11)
    t, p = _lognormal(rng, 36, 2.0, 300.0, 0.02)
    t[14:22] *= 1.3
    b = _runs("b", *_lognormal(rng, 36, 1.6, 270.0, 0.02))
    cmp = compare_runs(_runs("a", t, p), b)
    assert [(blk.variant, blk.runs) for blk in cmp.state_blocks] == [("a", tuple(range(15, 23)))]
    assert cmp.state_blocks[0].found_in == ("time_s",)  # power did not change


# (3) no block where there is none ---------------------------------------------------------
def test_no_block_on_iid_runs() -> None:
    flagged = 0
    datasets = 30
    for k in range(datasets):
        rng = np.random.default_rng(2000 + k)
        a = _runs("a", *_lognormal(rng, 24, 2.0, 300.0, 0.05))
        b = _runs("b", *_lognormal(rng, 24, 1.6, 270.0, 0.05))
        cmp = compare_runs(a, b, seed=k)
        flagged += bool(cmp.state_blocks)
        if not cmp.state_blocks:
            assert cmp.without_blocks is None
            assert not any("machine state" in w for w in cmp.warnings)
    # state_alpha = 0.01 per variant: about 2 % of comparisons flag a block by chance;
    # more than 3 of 30 would have probability < 0.5 %.
    assert flagged <= 3


# (4) seeded --------------------------------------------------------------------------------
def test_the_same_seed_gives_the_same_result_and_another_seed_other_intervals() -> None:
    rng = np.random.default_rng(4)
    t, p = _lognormal(rng, 20, 2.0, 300.0, 0.05)
    t[:6] *= 1.4
    a = _runs("a", t, p)
    b = _runs("b", *_lognormal(rng, 20, 1.6, 270.0, 0.05))
    first = compare_runs(a, b, seed=9).to_dict()
    assert first["state_blocks"]
    assert compare_runs(a, b, seed=9).to_dict() == first
    other = compare_runs(a, b, seed=10).to_dict()
    assert other["reduction"]["time"]["ci"] != first["reduction"]["time"]["ci"]
    assert other["reduction"]["time"]["value"] == first["reduction"]["time"]["value"]


# (5) JSON ------------------------------------------------------------------------------------
def test_json_has_the_schema_keys_and_no_nan() -> None:
    rng = np.random.default_rng(5)
    t, p = _lognormal(rng, 20, 2.0, 300.0, 0.02)
    t[14:] *= 1.5
    share_a = rng.uniform(0.1, 0.2, 20)
    a = _runs("a", t, p, outside=share_a)
    b = _runs("b", *_lognormal(rng, 20, 1.6, 270.0, 0.02))
    d = compare_runs(a, b, region="DBSCANCalculation", seed=1).to_dict()
    json.dumps(d, allow_nan=False)

    assert d["schema"] == "eopt.comparison/1"
    assert d["region"] == "DBSCANCalculation"
    assert (d["confidence"], d["resamples"], d["seed"]) == (0.95, 2000, 1)
    assert "percentile" in d["ci_method"]
    for v in ("a", "b"):
        assert d[v]["n"] == 20
        for stat in ("median", "mean", "ci_median", "ci_mean"):
            assert set(d[v][stat]) == {"time_s", "energy_j", "power_w"}
        lo, hi = d[v]["ci_median"]["energy_j"]
        assert lo <= d[v]["median"]["energy_j"] <= hi
    for k in ("time", "energy", "power"):
        assert set(d["reduction"][k]) == {"value", "ci"}
        assert set(d["reduction_mean"][k]) == {"value", "ci"}
    assert d["outside_share"]["a"]["median"] == pytest.approx(np.median(share_a))
    assert d["outside_share"]["b"] is None  # unknown, not 0
    (blk,) = d["state_blocks"]
    assert (blk["variant"], blk["runs"]) == ("a", list(range(15, 21)))
    assert {"median_time_s", "mean_power_w"} <= set(blk)
    wb = d["without_blocks"]
    assert wb["schema"] == "eopt.comparison/1" and wb["a"]["n"] == 14
    assert wb["without_blocks"] is None and wb["state_blocks"] == []


def test_json_is_safe_when_a_reduction_is_undefined() -> None:
    # A's energy is 0 in every run: 1 − E_B/E_A has no value, and JSON says null.
    a = [RunValues(f"a{i}", i, 1.0 + 0.01 * i, 0.0) for i in range(12)]
    b = [RunValues(f"b{i}", i, 1.0 + 0.01 * i, 5.0 + i) for i in range(12)]
    d = compare_runs(a, b).to_dict()
    text = json.dumps(d, allow_nan=False)
    assert d["reduction"]["energy"] == {"value": None, "ci": [None, None]}
    assert d["reduction"]["time"]["value"] == pytest.approx(0.0)
    assert "NaN" not in text and "Infinity" not in text
    assert any("energy reduction is undefined" in w for w in d["warnings"])


def test_outside_shares_known_for_some_runs_only_are_said() -> None:
    a = [RunValues(f"a{i}", i, 1.0 + 0.01 * i, 10.0, 0.2 if i < 8 else None) for i in range(12)]
    b = [RunValues(f"b{i}", i, 1.0 + 0.01 * i, 9.0, 0.3) for i in range(12)]
    cmp = compare_runs(a, b)
    assert cmp.a.outside_share is not None and cmp.a.outside_share.n == 8
    assert cmp.b.outside_share is not None and cmp.b.outside_share.median == pytest.approx(0.3)
    assert any("known for 8 of 12 runs" in w for w in cmp.warnings)


# (6) errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"time_s": math.nan}, "time_s must be a finite number"),
        ({"time_s": math.inf}, "time_s must be a finite number"),
        ({"time_s": 0.0}, "time_s must be > 0"),
        ({"time_s": -1.0}, "time_s must be > 0"),
        ({"energy_j": -0.5}, "energy_j must be >= 0"),
        ({"energy_j": math.nan}, "energy_j must be a finite number"),
        ({"outside_share": 1.5}, "outside_share must be in [0, 1]"),
        ({"outside_share": math.nan}, "outside_share must be in [0, 1]"),
        ({"start_ns": 1.5}, "start_ns must be an integer"),
    ],
)
def test_bad_run_values_are_refused_naming_the_run(kwargs: dict, message: str) -> None:
    fields = {"label": "illyad-42", "start_ns": 0, "time_s": 1.0, "energy_j": 2.0}
    fields.update(kwargs)
    with pytest.raises(ValueError, match="illyad-42") as err:
        RunValues(**fields)
    assert message in str(err.value)


def test_power_is_energy_over_time() -> None:
    assert RunValues("r", 0, 2.5, 700.0).power_w == pytest.approx(280.0)


def test_compare_refuses_what_it_cannot_compare() -> None:
    two = [RunValues(f"x{i}", i, 1.0 + i, 2.0) for i in range(2)]
    one = [RunValues("y", 0, 1.0, 2.0)]
    with pytest.raises(ValueError, match="variant B: need at least 2 runs"):
        compare_runs(two, one)
    with pytest.raises(ValueError, match="variant A: need at least 2 runs"):
        compare_runs([], two)
    with pytest.raises(ValueError, match="'x0' appears twice"):
        compare_runs([*two, two[0]], two)
    with pytest.raises(ValueError, match="resamples must be at least 2000"):
        compare_runs(two, two, resamples=500)
    with pytest.raises(ValueError, match="confidence"):
        compare_runs(two, two, confidence=1.0)
    with pytest.raises(TypeError, match="expected RunValues"):
        compare_runs(two, [(1.0, 2.0), (1.0, 2.0)])  # type: ignore[list-item]


def test_few_runs_are_compared_with_plain_warnings() -> None:
    a = [RunValues(f"a{i}", i, 2.0 + 0.1 * i, 600.0) for i in range(3)]
    b = [RunValues(f"b{i}", i, 1.6 + 0.1 * i, 500.0) for i in range(5)]
    cmp = compare_runs(a, b)
    assert cmp.a.n == 3 and cmp.b.n == 5
    text = " ".join(cmp.warnings)
    assert "A: only 3 runs" in text and "B: only 5 runs" in text
    assert "3 runs are too few to look for blocks" in text
    assert not cmp.state_blocks


def test_format_runs() -> None:
    assert format_runs([3, 1, 2, 7, 9, 10]) == "1–3, 7, 9–10"
    assert format_runs([5]) == "5"


# (7) the terminal table ---------------------------------------------------------------------
def test_renderer_prints_blocks_indices_and_warnings() -> None:
    rng = np.random.default_rng(8)
    t, p = _lognormal(rng, 30, 1.6, 270.0, 0.02)
    t[:12] *= 1.5
    p[:12] *= 0.85
    a = _runs("a", *_lognormal(rng, 30, 2.0, 300.0, 0.02), outside=np.full(30, 0.165))
    cmp = compare_runs(a, _runs("b", t, p), region="solve", names=("old", "new"))
    console = Console(record=True, width=200)
    render_comparison(cmp, console)
    text = console.export_text()
    assert "region solve" in text and "old (n=30)" in text and "new (n=30)" in text
    assert f"{100 * cmp.reduction.energy.value:.1f} % less" in text
    assert "1–12" in text  # the block's runs
    assert "without the blocks (30 runs of old, 18 of new)" in text
    assert "16.5%" in text  # outside share of A
    assert "warning:" in text and "medians sit on the blocks' edge" in text

    plain = compare_runs(a, _runs("b", *_lognormal(rng, 30, 1.6, 270.0, 0.02)))
    console = Console(record=True, width=200)
    render_comparison(plain, console)
    text = console.export_text()
    assert "no block of runs in another machine state was found" in text
    assert "warning:" not in text


# The real traces --------------------------------------------------------------------------
def _dbscan_runs(variant: str, region: str = "DBSCANCalculation") -> list[RunValues]:
    """One RunValues per recorded run: the region's time and energy from the raw CSVs.

    Energy: trapezoid over the power samples inside the region, with the power
    interpolated linearly at both edges. Run start: the first power sample.
    """
    runs = []
    for power_file in sorted((DBSCAN / variant).glob("*-nvml-power.csv")):
        with power_file.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        t_ns = np.array([int(r["time_epoch_ns"]) for r in rows], dtype=np.int64)
        watts = np.array([float(r["power_w"]) for r in rows])
        regions_file = power_file.with_name(power_file.name.replace("-power", "-regions"))
        with regions_file.open(newline="") as fh:
            (reg,) = [r for r in csv.DictReader(fh) if r["name"] == region]
        t = (t_ns - t_ns[0]) / 1e9  # relative seconds keep float precision
        lo = (int(reg["start_time_epoch_ns"]) - t_ns[0]) / 1e9
        hi = (int(reg["end_time_epoch_ns"]) - t_ns[0]) / 1e9
        inside = (t > lo) & (t < hi)
        ts = np.concatenate([[lo], t[inside], [hi]])
        ps = np.concatenate([[np.interp(lo, t, watts)], watts[inside], [np.interp(hi, t, watts)]])
        energy = float(np.sum(np.diff(ts) * (ps[1:] + ps[:-1]) / 2))
        label = power_file.name.removesuffix("-nvml-power.csv")
        runs.append(RunValues(label, int(t_ns[0]), hi - lo, energy))
    return runs


def test_dbscan_fdbscan_against_fdbscan_dense() -> None:
    a, b = _dbscan_runs("fdbscan"), _dbscan_runs("fdbscan-dense")
    cmp = compare_runs(a, b, region="DBSCANCalculation", names=("fdbscan", "fdbscan-dense"))
    assert (cmp.a.n, cmp.b.n) == (34, 34)
    # The note's medians; energy + 2.5 J per run for interpolating at the region edges.
    assert cmp.a.median.time_s == pytest.approx(2.686, rel=0.005)
    assert cmp.a.median.energy_j == pytest.approx(777.4 + 2.5, rel=0.005)
    assert cmp.a.median.power_w == pytest.approx(289, rel=0.005)
    assert cmp.b.median.time_s == pytest.approx(2.299, rel=0.005)
    assert cmp.b.median.energy_j == pytest.approx(601.5 + 2.5, rel=0.005)
    assert cmp.b.median.power_w == pytest.approx(258, rel=0.005)
    assert cmp.reduction.time.value == pytest.approx(0.14, abs=0.01)
    assert cmp.reduction.energy.value == pytest.approx(0.23, abs=0.01)
    assert cmp.reduction.power.value == pytest.approx(0.11, abs=0.01)
    # The block is almost half of B's runs: the medians sit on its edge, and the
    # interval of the time reduction spans roughly −30 % to +18 %.
    lo, hi = cmp.reduction.time.ci
    assert lo is not None and hi is not None
    assert -0.36 < lo < -0.24 and 0.15 < hi < 0.21

    (blk,) = cmp.state_blocks
    assert (blk.variant, blk.runs) == ("b", tuple(range(1, 17)))
    assert 1.4 < blk.time_ratio < 1.8  # "about 1.5× slower" (3.4 to 3.9 s against 2.2 s)
    assert blk.mean_power_w == pytest.approx(222, abs=3)
    assert any("medians sit on the blocks' edge" in w for w in cmp.warnings)

    # Without the block, the note's 64-run figures: 19 % less time, 25–26 % less energy,
    # with intervals near 17.6–19.3 % and 24.9–26.0 %.
    wb = cmp.without_blocks
    assert wb is not None and (wb.a.n, wb.b.n) == (34, 18)
    assert wb.reduction.time.value == pytest.approx(0.19, abs=0.01)
    assert wb.reduction.energy.value == pytest.approx(0.255, abs=0.01)
    t_lo, t_hi = wb.reduction.time.ci
    e_lo, e_hi = wb.reduction.energy.ci
    assert t_lo is not None and t_hi is not None and e_lo is not None and e_hi is not None
    assert 0.17 < t_lo < wb.reduction.time.value < t_hi < 0.20
    assert 0.24 < e_lo < wb.reduction.energy.value < e_hi < 0.275
    json.dumps(cmp.to_dict(), allow_nan=False)
