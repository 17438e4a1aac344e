"""``compose_schedule`` against a Monte Carlo of the physical model it stands for.

The physical model (docs/uncertainty.md §1–§2), sampled here without any of the calculus:
every element draws its time and dynamic energy (jointly Gaussian, d correlated with T);
a group of co-starting elements on one device lasts the longest of its members; a
device's first group starts at its placement, each later group when the one before it
ends plus the planned gap; a device draws its elements' static power while busy, its
idle power in its gaps and after its last end until the makespan.

Four kinds of random schedules, each with its own seed: ``cross-device`` (one element
per device, 2–3 devices, the issue's A/B case among them), ``mixed static`` (chains whose
elements sit at different static powers, idle draw below them), ``chains`` (2 devices,
chains with gaps) and ``⊕ groups`` (co-running pairs inside chains, 1–2 devices). Per
kind: the worst relative error of the mean energy (target within 0.5 %), the range of
σ_E and σ_T over Monte Carlo's (target −5 % … +15 %), and, for comparison, the mean
error at the paper's max-of-means convention.

    python3 benchmarks/compose_monte_carlo.py                 # 40 schedules per kind, seeds 1, 2
    python3 benchmarks/compose_monte_carlo.py --seeds 3,4,5 --schedules 100
    python3 benchmarks/compose_monte_carlo.py --smoke         # 3 schedules per kind
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

from eopt.calculus.operators import COV_KEY
from eopt.calculus.schedule import compose_schedule
from eopt.model.signature import Signature

NAME = "compose_monte_carlo"
DRAWS = 200_000
SMOKE = {"schedules": 3, "seeds": "1", "draws": 20_000}

# (device, [(element, lead s)], planned gap s) per group, and each device's idle draw W.
Layout = tuple[list[tuple[str, list[tuple[Signature, float]], float]], dict[str, float]]


def _element(rng: np.random.Generator, name: str, s: float, cv_t: float) -> Signature:
    t = float(rng.uniform(1e-3, 5e-3))
    d = float(rng.uniform(0.1, 1.2)) * s * t
    sd_t, sd_d = cv_t * t, float(rng.uniform(0.003, 0.02)) * d
    cov_dt = float(rng.uniform(0.0, 0.9)) * sd_d * sd_t  # a longer run draws longer
    return Signature(
        name,
        static_power=s,
        time=t,
        dynamic_energy=d,
        var_time=sd_t**2,
        var_energy=s * s * sd_t**2 + sd_d**2 + 2 * s * cov_dt,
        meta={COV_KEY: s * sd_t**2 + cov_dt},
    )


def _cross_device(rng: np.random.Generator) -> Layout:
    devices = [f"gpu{k}" for k in range(int(rng.integers(2, 4)))]
    s = float(rng.uniform(50.0, 90.0))
    cv = float(rng.uniform(0.01, 0.05))
    groups = [(d, [(_element(rng, f"e{d}", s, cv), 0.0)], 0.0) for d in devices]
    if rng.random() < 0.5:  # equal means: where the max of the means is most off
        t = groups[0][1][0][0].time
        groups = [(d, [(m[0][0].with_(time=t), 0.0)], g) for d, m, g in groups]
    return groups, dict.fromkeys(devices, s if rng.random() < 0.5 else 0.6 * s)


def _chains(rng: np.random.Generator, mixed: bool, corun: bool) -> Layout:
    devices = ["gpu0", "gpu1"] if (not corun or rng.random() < 0.5) else ["gpu0"]
    groups = []
    for d in devices:
        base = float(rng.uniform(50.0, 90.0))
        for j in range(int(rng.integers(2, 6))):
            s = base * (float(rng.uniform(0.7, 1.4)) if mixed else 1.0)
            cv = float(rng.uniform(0.005, 0.03))
            members = [(_element(rng, f"{d}e{j}", s, cv), 0.0)]
            if corun and rng.random() < 0.5:
                lead = 0.0 if rng.random() < 0.5 else float(rng.uniform(0.0, 1e-3))
                members.append((_element(rng, f"{d}e{j}b", s, cv), lead))
            gap = 0.0 if j == 0 or rng.random() < 0.3 else float(rng.uniform(0.0, 1e-3))
            groups.append((d, members, gap))
    idle = {d: float(rng.uniform(0.4, 0.8)) * 60.0 for d in devices}
    return groups, idle


KINDS: dict[str, Callable[[np.random.Generator], Layout]] = {
    "cross-device": _cross_device,
    "mixed static": lambda rng: _chains(rng, mixed=True, corun=False),
    "chains": lambda rng: _chains(rng, mixed=False, corun=False),
    "⊕ groups": lambda rng: _chains(rng, mixed=False, corun=True),
}


def _placements(groups: list[Any]) -> list[tuple[Signature, str, float]]:
    free: dict[str, float] = {}
    out = []
    for d, members, gap in groups:
        start = free.get(d, 0.0) + gap
        out += [(sig.on(d), d, start + lead) for sig, lead in members]
        free[d] = start + max(lead + sig.time for sig, lead in members)
    return out


def _monte_carlo(rng: np.random.Generator, layout: Layout, n: int) -> tuple[np.ndarray, ...]:
    groups, idle = layout
    ends: dict[str, np.ndarray] = {}
    energy = np.zeros(n)
    for d, members, gap in groups:
        spans = []
        for sig, lead in members:
            s = sig.static_power
            cov_et = sig.meta[COV_KEY]
            cov_dt = cov_et - s * sig.var_time
            var_d = sig.var_energy - 2 * s * cov_et + s * s * sig.var_time
            cov = [[sig.var_time, cov_dt], [cov_dt, var_d]]
            t, dyn = rng.multivariate_normal([sig.time, sig.dynamic_energy], cov, n).T
            spans.append(lead + t)
            energy += dyn
        span = np.max(spans, axis=0)
        energy += members[0][0].static_power * span + idle[d] * gap
        ends[d] = ends.get(d, np.zeros(n)) + gap + span
    makespan = np.max(list(ends.values()), axis=0)
    for d, end in ends.items():
        energy += idle[d] * (makespan - end)
    return energy, makespan


def run_kind(kind: str, seed: int, schedules: int, draws: int) -> dict[str, Any]:
    """Errors of the composed moments over ``schedules`` random schedules of ``kind``."""
    rows = []
    for i in range(schedules):
        rng = np.random.default_rng([seed, list(KINDS).index(kind), i])
        layout = KINDS[kind](rng)
        placed = _placements(layout[0])
        model = compose_schedule(placed, layout[1], time_mean="expected_max")
        paper = compose_schedule(placed, layout[1], time_mean="max_of_means")
        energy, makespan = _monte_carlo(rng, layout, draws)
        mean = float(energy.mean())
        rows.append(
            {
                "mean": model.energy / mean - 1.0,
                "paper_mean": paper.energy / mean - 1.0,
                "sd_e": model.std_energy / float(energy.std()) - 1.0,
                "sd_t": model.std_time / float(makespan.std()) - 1.0,
                "mean_se": float(energy.std()) / math.sqrt(draws) / mean,
            }
        )
    worst = max(rows, key=lambda r: abs(r["mean"]))
    out = {
        "kind": kind,
        "seed": seed,
        "schedules": schedules,
        "worst_mean": worst["mean"],
        "worst_paper_mean": max((r["paper_mean"] for r in rows), key=abs),
        "sd_e": (min(r["sd_e"] for r in rows), max(r["sd_e"] for r in rows)),
        "sd_t": (min(r["sd_t"] for r in rows), max(r["sd_t"] for r in rows)),
        "mc_se": max(r["mean_se"] for r in rows),
    }
    out["ok"] = (
        abs(out["worst_mean"]) <= 0.005
        and out["sd_e"][0] >= -0.05
        and out["sd_e"][1] <= 0.15
        and out["sd_t"][0] >= -0.05
        and out["sd_t"][1] <= 0.15
    )
    return out


HEADER = (
    f"{'kind':<14}{'seed':>5}{'schedules':>10}{'worst mean':>12}{'paper mean':>12}"
    f"{'σ_E range':>20}{'σ_T range':>20}{'MC SE':>9}  verdict"
)


def _pct(x: float) -> str:
    return f"{100 * x:+.2f}%"


def main(argv: list[str] | None = None) -> int:
    parser = common.argument_parser(__doc__ or "", 3)
    parser.add_argument("--schedules", type=int, default=40, help="schedules per kind (40)")
    parser.add_argument("--seeds", default="1,2", help="comma list of seeds (1,2)")
    parser.add_argument("--draws", type=int, default=DRAWS, help="Monte Carlo draws")
    parser.add_argument("--strict", action="store_true", help="exit 1 on any FAIL")
    parser.add_argument("--no-save", action="store_true", help=f"do not write {NAME}.json")
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    if common.enter_smoke(args):
        vars(args).update(SMOKE)
    started = time.perf_counter()
    print(HEADER)
    print("-" * len(HEADER))
    verdicts = common.Verdicts()
    results = []
    for seed in (int(s) for s in str(args.seeds).split(",") if s.strip()):
        for kind in KINDS:
            r = run_kind(kind, seed, args.schedules, args.draws)
            results.append(r)
            ranges = [f"{_pct(a)} … {_pct(b)}" for a, b in (r["sd_e"], r["sd_t"])]
            print(
                f"{kind:<14}{seed:>5}{r['schedules']:>10}{_pct(r['worst_mean']):>12}"
                f"{_pct(r['worst_paper_mean']):>12}{ranges[0]:>20}{ranges[1]:>20}"
                f"{_pct(r['mc_se']):>9}  {'PASS' if r['ok'] else 'FAIL'}",
                flush=True,
            )
            verdicts.lines.append((r["ok"], f"{kind}, seed {seed}"))
    return common.finish(verdicts, args, NAME, {"draws": args.draws, "rows": results}, started)


if __name__ == "__main__":
    common.run_main(main)
