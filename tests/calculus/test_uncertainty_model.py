"""The one uncertainty model (docs/uncertainty.md) against Monte Carlo of its physics.

The physical model, simulated sample by sample here without any of the calculus: each
element draws (T, d) jointly Gaussian with its own covariance; on a device, a group of
co-starting elements lasts max(lead + T); the first group starts at its placement, each
later one when the one before it ends plus its planned gap; the device draws each
element's static power while busy, the gap power in its gaps and its idle power from its
last end to the makespan, the latest end of any device. Random schedules, each with its
seed: the composed mean, σ_E and σ_T must match.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from eopt.calculus import Signature, par, par_multi
from eopt.calculus.operators import COV_KEY, energy_time_cov, max_moments, max_probabilities
from eopt.calculus.schedule import compose_schedule
from eopt.calculus.sensitivity import prediction_error, signature_key
from eopt.calculus.uncertainty import mean_interval

N = 200_000


def _element(rng: np.random.Generator, name: str, s: float) -> Signature:
    t = float(rng.uniform(0.5, 2.0))
    sd_t = t * float(rng.uniform(0.005, 0.05))
    d = float(rng.uniform(5.0, 60.0))
    sd_d = d * float(rng.uniform(0.005, 0.03))
    # d and T correlated (a longer run draws longer): Cov(d, T) = ρ·σ_d·σ_T.
    rho = float(rng.uniform(-0.3, 0.9))
    cov_dt = rho * sd_d * sd_t
    var_e = s * s * sd_t**2 + sd_d**2 + 2 * s * cov_dt
    return Signature(
        name, static_power=s, time=t, dynamic_energy=d, var_time=sd_t**2, var_energy=var_e,
        meta={COV_KEY: s * sd_t**2 + cov_dt},
    )  # fmt: skip


def _draw(rng: np.random.Generator, sig: Signature, n: int = N) -> tuple[np.ndarray, np.ndarray]:
    """(T, d) samples with the signature's moments and covariance."""
    s = sig.static_power
    cov_dt = energy_time_cov(sig) - s * sig.var_time
    var_d = sig.var_energy - 2 * s * energy_time_cov(sig) + s * s * sig.var_time
    cov = [[sig.var_time, cov_dt], [cov_dt, var_d]]
    t, d = rng.multivariate_normal([sig.time, sig.dynamic_energy], cov, n).T
    return t, d


def _schedule(rng: np.random.Generator, devices: int):  # type: ignore[no-untyped-def]
    """Random groups per device: (device, [(sig, lead)], gap before), with idle draws."""
    layout = []
    statics = {f"g{k}": float(rng.uniform(40.0, 90.0)) for k in range(devices)}
    for k in range(devices):
        dev = f"g{k}"
        for j in range(int(rng.integers(2, 5))):
            s = statics[dev] * (1.0 if rng.random() < 0.5 else float(rng.uniform(0.8, 1.3)))
            members = [(_element(rng, f"{dev}e{j}m0", s), 0.0)]
            if rng.random() < 0.35:  # a ⊕ group: a second member, maybe a little later
                lead = 0.0 if rng.random() < 0.5 else float(rng.uniform(0.0, 0.2))
                members.append((_element(rng, f"{dev}e{j}m1", s), lead))
            gap = 0.0 if rng.random() < 0.3 or (k, j) == (0, 0) else float(rng.uniform(0.0, 0.5))
            layout.append((dev, members, gap))
    idle = {dev: float(rng.uniform(20.0, 60.0)) for dev in statics}
    return layout, idle


def _placements(layout, idle):  # type: ignore[no-untyped-def]
    free: dict[str, float] = {}
    out = []
    for dev, members, gap in layout:
        start = free.get(dev, 0.0) + gap
        for sig, lead in members:
            out.append((sig.on(dev), dev, start + lead))
        free[dev] = start + max(lead + sig.time for sig, lead in members)
    return out


def _monte_carlo(rng: np.random.Generator, layout, idle):  # type: ignore[no-untyped-def]
    ends: dict[str, np.ndarray] = {}
    energy = np.zeros(N)
    for dev, members, gap in layout:
        end = ends.get(dev, np.zeros(N))
        energy += idle[dev] * gap
        spans = []
        for sig, lead in members:
            t, d = _draw(rng, sig)
            spans.append(lead + t)
            energy += d
        span = np.max(spans, axis=0)
        energy += members[0][0].static_power * span
        ends[dev] = end + gap + span
    makespan = np.max(list(ends.values()), axis=0)
    for dev, end in ends.items():
        energy += idle[dev] * (makespan - end)
    return energy, makespan


@pytest.mark.parametrize("seed", range(8))
def test_composed_schedule_matches_monte_carlo_of_its_physics(seed: int) -> None:
    rng = np.random.default_rng(seed)
    layout, idle = _schedule(rng, devices=1 + seed % 3)
    composed = compose_schedule(_placements(layout, idle), idle, time_mean="expected_max")
    energy, makespan = _monte_carlo(rng, layout, idle)
    se = energy.std() / math.sqrt(N)
    assert abs(composed.energy - energy.mean()) <= max(5 * se, 1e-3 * energy.mean())
    assert composed.time == pytest.approx(makespan.mean(), rel=1e-3)
    # The acceptance band, −5 % … +15 %, is wider than what the model achieves.
    assert composed.std_energy / energy.std() == pytest.approx(1.0, abs=0.05)
    assert composed.std_time / makespan.std() == pytest.approx(1.0, abs=0.05)


def test_an_idle_tail_inherits_the_variance_of_the_makespan() -> None:
    # A = 1 ± 0.1 s on gpu0, B = 2 ± 0.1 s on gpu1, 60 W everywhere: gpu0's idle tail is
    # set by B's time, so σ_T = σ_B and σ_E = 120 W · σ_B (+ σ_d), not Clark's shrunk max
    # of two equal means (the tail is no element of its own).
    a = Signature("A", 60.0, 1.0, 5.0, var_time=0.01, var_energy=36.0 + 0.25)
    b = Signature("B", 60.0, 2.0, 5.0, var_time=0.01, var_energy=36.0 + 0.25)
    c = compose_schedule([(a, "gpu0", 0.0), (b, "gpu1", 0.0)], 60.0, time_mean="expected_max")
    assert c.std_time == pytest.approx(0.1, rel=1e-6)
    assert c.std_energy == pytest.approx(math.sqrt(120.0**2 * 0.01 + 0.5), rel=1e-6)
    assert c.energy == pytest.approx(2 * 60.0 * 2.0 + 10.0, rel=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_par_multi_at_idle_draws_below_static_matches_monte_carlo(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    sigs = [_element(rng, f"e{k}", float(rng.uniform(50, 90))).on(f"g{k}") for k in range(3)]
    idle = {f"g{k}": float(rng.uniform(20, 45)) for k in range(3)}
    draws = [_draw(rng, s) for s in sigs]
    times = np.array([t for t, _ in draws])
    makespan = times.max(axis=0)
    energy = sum(
        s.static_power * t + d + idle[s.devices[0]] * (makespan - t)
        for s, (t, d) in zip(sigs, draws, strict=True)
    )
    c = par_multi(sigs, idle_power=idle, time_mean="expected_max")
    assert c.energy == pytest.approx(float(energy.mean()), rel=1e-3)
    assert c.std_energy / energy.std() == pytest.approx(1.0, abs=0.03)
    assert c.std_time / makespan.std() == pytest.approx(1.0, abs=0.03)


def test_par_with_dynamic_energy_correlated_with_time_matches_monte_carlo() -> None:
    rng = np.random.default_rng(7)
    a, b = _element(rng, "a", 70.0), _element(rng, "b", 70.0)
    b = b.with_(time=a.time * 1.01)  # close means: both can set the makespan
    (ta, da), (tb, db) = _draw(rng, a), _draw(rng, b)
    tmax = np.maximum(ta, tb)
    energy = 70.0 * tmax + da + db
    c = par(a, b, time_mean="expected_max")
    assert c.energy == pytest.approx(float(energy.mean()), rel=1e-3)
    assert c.std_energy / energy.std() == pytest.approx(1.0, abs=0.02)
    # The composite carries Cov(E, T) for the next composition.
    assert energy_time_cov(c) == pytest.approx(float(np.cov(energy, tmax)[0, 1]), rel=0.05)


def test_without_a_carried_covariance_times_are_independent_of_dynamic_energy() -> None:
    sig = Signature("x", 50.0, 1.0, 10.0, var_time=0.01, var_energy=30.0)
    assert energy_time_cov(sig) == pytest.approx(50.0 * 0.01)  # s·σ_T², Property 5.6
    # So the operators are the paper's: Eq. 21 and 22, σ_d² = σ_E² − s²σ_T².
    b = Signature("y", 50.0, 1.2, 4.0, var_time=0.04, var_energy=120.0)
    paper = (30.0 - 2500 * 0.01) + (120.0 - 2500 * 0.04)
    var_max = max_moments([1.0, 1.2], [0.01, 0.04])[1]
    assert par(sig, b).var_energy == pytest.approx(paper + 2500 * var_max, rel=1e-12)
    multi = par_multi(sig.on("g0"), b.on("g1"))
    assert multi.var_energy == pytest.approx(paper + 100.0**2 * var_max, rel=1e-12)
    # A carried covariance is held to Cauchy–Schwarz, |Cov| ≤ σ_E·σ_T.
    wild = sig.with_(meta={COV_KEY: 99.0})
    assert energy_time_cov(wild) == pytest.approx(math.sqrt(30.0 * 0.01))


@pytest.mark.parametrize("seed", range(5))
def test_max_probabilities_match_monte_carlo(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 6))
    mu = rng.normal(1.0, 0.05, n)
    sd = rng.uniform(0.01, 0.1, n)
    if seed == 4:
        sd[0] = 0.0  # a fixed operand: a step
    p = max_probabilities(list(mu), list(sd**2))
    x = rng.normal(mu[:, None], sd[:, None], (n, N))
    empirical = np.bincount(x.argmax(axis=0), minlength=n) / N
    assert sum(p) == pytest.approx(1.0, abs=1e-9)
    assert np.allclose(p, empirical, atol=4 * math.sqrt(0.25 / N) + 1e-4)
    # Stein's lemma: ∂E[max]/∂μ_i is the same probability.
    h = 1e-6
    for i in range(n):
        up, down = mu.copy(), mu.copy()
        up[i] += h
        down[i] -= h
        slope = max_moments(list(up), list(sd**2))[0] - max_moments(list(down), list(sd**2))[0]
        assert slope / (2 * h) == pytest.approx(p[i], abs=1e-4)


@pytest.mark.parametrize("seed", range(3))
def test_prediction_error_matches_repeated_characterization(seed: int) -> None:
    """The SE a prediction inherits, against the spread of predictions built from many
    independent characterizations (each type: n runs drawn from its distribution)."""
    rng = np.random.default_rng(seed)
    true = {k: _element(rng, f"t{k}", 60.0) for k in range(3)}
    order = [int(k) for k in rng.integers(0, 3, 6)]  # instances share their type's error
    devices = ["g0", "g1"]
    idle = {"g0": 30.0, "g1": 45.0}
    n = 20

    def compose(lib):  # type: ignore[no-untyped-def]
        def moments(swap):  # type: ignore[no-untyped-def]
            free = dict.fromkeys(devices, 0.0)
            placed = []
            for j, k in enumerate(order):
                sig = swap(lib[k])
                dev = devices[j % 2]
                placed.append((sig.on(dev), dev, free[dev]))
                free[dev] += sig.time
            c = compose_schedule(placed, idle, time_mean="expected_max")
            return c.energy, c.time

        return moments

    predictions = []
    claimed = []
    for _ in range(300):
        lib = {}
        for k, sig in true.items():
            t, d = _draw(rng, sig, n)
            e = sig.static_power * t + d
            lib[k] = Signature(
                sig.name, 60.0, float(t.mean()), float(d.mean()),
                var_time=float(t.var(ddof=1)), var_energy=float(e.var(ddof=1)),
                meta={COV_KEY: float(np.cov(e, t)[0, 1]), "n": n},
            )  # fmt: skip
        moments = compose(lib)
        predictions.append(moments(lambda s: s))
        err = prediction_error(moments, {signature_key(s): s for s in lib.values()}, lambda s: n)
        claimed.append((err.energy_j, err.time_s))
    spread = np.std(np.array(predictions), axis=0, ddof=1)
    mean_claim = np.sqrt(np.mean(np.array(claimed) ** 2, axis=0))
    # 300 repetitions estimate a spread to about ±4 %.
    assert spread[0] / mean_claim[0] == pytest.approx(1.0, abs=0.15)
    assert spread[1] / mean_claim[1] == pytest.approx(1.0, abs=0.15)


def test_mean_interval_adds_the_prediction_error_to_the_mean_of_n_runs() -> None:
    iv = mean_interval(10.0, 0.3, 2.0, 100)
    assert iv.half_width == pytest.approx(1.959964 * math.sqrt(0.09 + 0.04), rel=1e-6)
    # With the spreads estimated from 10 runs each, Student's t at Welch's df widens it.
    from scipy import stats

    wide = mean_interval(10.0, 0.3, 2.0, 100, characterization_runs=10)
    df = (0.09 + 0.04) ** 2 / ((0.09**2 + 0.04**2) / 9)
    assert wide.half_width == pytest.approx(
        float(stats.t.ppf(0.975, df)) * math.sqrt(0.13), rel=1e-9
    )
    assert wide.half_width > iv.half_width
    with pytest.raises(ValueError, match="n_runs"):
        mean_interval(10.0, 0.3, 2.0, 0)
