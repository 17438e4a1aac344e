"""Acceptance of ``eopt check`` on the simulator: detection, localization, naming, refinement.

For each interaction mechanism of the simulated GPU, alone, random schedules are built in
which one pair (or, for heat, a long prefix) interacts through it, embedded in unrelated
filler elements at random gaps. Every element type is characterized from the null
context first (30 runs each, independent seeds), then ``check_schedule`` runs the
workflow. A trial counts when the effect is at least 3 σ of the composite (σ: the
single-run spread of the measured schedule); the table gives, per mechanism:

* detected: the whole-schedule test deviates (target ≥ 95 %);
* localized: the first finding names the right pair (or a prefix, for heat; ≥ 90 %);
* named: its mechanism is the one switched on (≥ 90 %);
* covered: after refinement the prediction covers the measurement (≥ 95 %).

With every mechanism off, 100 random schedules (co-runs included) must agree with their
prediction in ≥ 95 % (the test's nominal level). Finally Property 5.1: two orders of the
same elements cost different energy, beyond their intervals, when the cache (or heat)
mechanism is on, and the same when it is off.

    python3 benchmarks/check_acceptance.py                 # 20 trials per mechanism
    python3 benchmarks/check_acceptance.py --trials 40 --null 100
    python3 benchmarks/check_acceptance.py --smoke    # 1 schedule per world, 10 runs
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

from eopt.calculus.schedule import Placement
from eopt.check.runner import Job, SimElement, SimRunner
from eopt.check.workflow import CheckResult, characterize_element, check_schedule
from eopt.model.signature import Signature

RESULTS = Path(__file__).resolve().parent / "results"
RUNS = 30
# --smoke: one schedule per world (every mechanism still runs), fewer runs per measurement.
SMOKE = {"null": 1, "trials": 1, "runs": 10}


@dataclass
class Scenario:
    """One random schedule with one interaction (or none)."""

    elements: dict[str, SimElement]
    devices: list[str]
    # (element, device, group): elements of one group co-start on their device(s);
    # groups run one after the other per device, separated by the gaps.
    layout: list[list[tuple[str, str]]]
    gaps_s: list[float]
    mechanism: str  # the one switched on ("none": all off)
    expected: tuple[str, ...]  # the interacting element types
    kind: str  # "entry" | "runtime" | ""
    scope: str = "pair"
    runner: dict = field(default_factory=dict)


def _fillers(rng: np.random.Generator, n: int, clock: float | None = None) -> dict[str, SimElement]:
    out = {}
    for i in range(n):
        if rng.random() < 0.5:
            m = float(rng.choice([2048, 3072, 4096]))
            out[f"fill{i}"] = SimElement(
                "gemm", workload={"m": m, "n": m, "k": m}, sm_clock_mhz=clock
            )
        else:
            b = float(rng.choice([64, 128, 256])) * 2**20
            out[f"fill{i}"] = SimElement("memcpy", workload={"bytes": b}, sm_clock_mhz=clock)
    return out


def _embed(
    rng: np.random.Generator,
    core: list[list[tuple[str, str]]],
    fill: dict[str, SimElement],
    devices: list[str],
) -> tuple[list[list[tuple[str, str]]], list[float]]:
    """Fillers before and after the interacting core, each on a random device."""
    names = list(fill)
    k = int(rng.integers(0, len(names) + 1))
    before = [[(n, str(rng.choice(devices)))] for n in names[:k]]
    after = [[(n, str(rng.choice(devices)))] for n in names[k:]]
    layout = before + core + after
    gaps = [float(rng.choice([0.0, 0.0, 1e-4, 5e-4])) for _ in layout]
    return layout, gaps


def scenario(mechanism: str, rng: np.random.Generator) -> Scenario:
    """A random schedule in which ``mechanism`` (alone) acts on one pair."""
    dev1, dev2 = ["gpu0"], ["gpu0", "gpu1"]
    if mechanism == "contention":
        rows = [float(rng.choice([4096, 8192, 16384])) for _ in range(2)]
        el = {
            "norm_a": SimElement("layernorm", workload={"rows": rows[0]}),
            "norm_b": SimElement("layernorm", workload={"rows": rows[1]}),
        }
        fill = _fillers(rng, int(rng.integers(1, 4)))
        layout, gaps = _embed(rng, [[("norm_a", "gpu0"), ("norm_b", "gpu0")]], fill, dev1)
        return Scenario(
            {**el, **fill}, dev1, layout, gaps, mechanism, ("norm_a", "norm_b"), "runtime"
        )
    if mechanism == "power_cap":
        m = [float(rng.choice([4096, 6144, 8192])) for _ in range(2)]
        el = {
            "mm_a": SimElement(
                "gemm", workload={"m": m[0], "n": m[0], "k": m[0]}, sm_clock_mhz=1200.0
            ),
            "mm_b": SimElement(
                "gemm", workload={"m": m[1], "n": m[1], "k": m[1]}, sm_clock_mhz=1200.0
            ),
        }
        fill = _fillers(rng, int(rng.integers(1, 4)), clock=1200.0)
        layout, gaps = _embed(rng, [[("mm_a", "gpu0"), ("mm_b", "gpu0")]], fill, dev1)
        return Scenario({**el, **fill}, dev1, layout, gaps, mechanism, ("mm_a", "mm_b"), "runtime")
    if mechanism == "cache":
        rows = float(rng.choice([1024, 2048]))
        el = {
            "produce": SimElement("layernorm", workload={"rows": rows}, writes=("x",)),
            "consume": SimElement("layernorm", workload={"rows": rows}, reads=("x",)),
        }
        core = [[("produce", "gpu0")], [("consume", "gpu0")]]
        fill = _fillers(rng, int(rng.integers(1, 3)))
        layout, gaps = _embed(rng, core, fill, dev1)
        gaps[layout.index(core[1])] = 0.0  # the consumer right after its producer
        return Scenario(
            {**el, **fill}, dev1, layout, gaps, mechanism, ("produce", "consume"), "entry"
        )
    if mechanism == "clock_state":
        f1, f2 = 1410.0, float(rng.choice([900.0, 1005.0, 1110.0]))
        el = {
            "fast": SimElement("memcpy", workload={"bytes": 256 * 2**20}, sm_clock_mhz=f1),
            "slow": SimElement(
                "gemm", workload={"m": 2048.0, "n": 2048.0, "k": 2048.0}, sm_clock_mhz=f2
            ),
        }
        core = [[("fast", "gpu0")], [("slow", "gpu0")]]
        fill = _fillers(rng, int(rng.integers(1, 3)), clock=f1)
        names = list(fill)
        layout = [[(n, "gpu0")] for n in names] + core
        gaps = [0.0 for _ in layout]
        return Scenario({**el, **fill}, dev1, layout, gaps, mechanism, ("fast", "slow"), "entry")
    if mechanism == "interconnect":
        b = [float(rng.choice([128, 256, 512])) * 2**20 for _ in range(2)]
        el = {
            "ar0": SimElement("allreduce", workload={"bytes": b[0]}),
            "ar1": SimElement("allreduce", workload={"bytes": b[1]}),
        }
        fill = _fillers(rng, int(rng.integers(1, 4)))
        layout, gaps = _embed(rng, [[("ar0", "gpu0"), ("ar1", "gpu1")]], fill, dev2)
        return Scenario({**el, **fill}, dev2, layout, gaps, mechanism, ("ar0", "ar1"), "runtime")
    if mechanism == "node_power":
        m = [float(rng.choice([4096, 6144, 8192])) for _ in range(2)]
        el = {
            "mm0": SimElement(
                "gemm", workload={"m": m[0], "n": m[0], "k": m[0]}, sm_clock_mhz=1200.0
            ),
            "mm1": SimElement(
                "gemm", workload={"m": m[1], "n": m[1], "k": m[1]}, sm_clock_mhz=1200.0
            ),
        }
        fill = _fillers(rng, int(rng.integers(1, 3)), clock=1200.0)
        layout, gaps = _embed(rng, [[("mm0", "gpu0"), ("mm1", "gpu1")]], fill, ["gpu0"])
        return Scenario(
            {**el, **fill},
            dev2,
            layout,
            gaps,
            mechanism,
            ("mm0", "mm1"),
            "runtime",
            runner={"power_budget_w": 450.0},
        )
    if mechanism == "thermal":
        # Tens of seconds of large GEMMs at a locked clock heat the die by 15-25 °C
        # (τ = R·C ≈ 20 s), and leakage rises with it. Few long heaters keep the shared
        # characterization error of one element type (counted once per instance) small.
        n_heat = int(rng.integers(14, 21))
        el = {
            "heat": SimElement(
                "gemm", workload={"m": 65536.0, "n": 65536.0, "k": 65536.0}, sm_clock_mhz=1200.0
            ),
            "probe": SimElement("layernorm", workload={"rows": 16384.0}, sm_clock_mhz=1200.0),
        }
        layout = [[("heat", "gpu0")] for _ in range(n_heat)] + [[("probe", "gpu0")]] * 3
        gaps = [0.0] * len(layout)
        return Scenario(
            el, dev1, layout, gaps, mechanism, ("heat", "probe"), "entry", scope="prefix"
        )
    if mechanism == "none":
        pool = {**_fillers(rng, 4)}
        pool["norm_a"] = SimElement("layernorm", workload={"rows": 8192.0})
        pool["norm_b"] = SimElement("layernorm", workload={"rows": 4096.0})
        devices = dev2 if rng.random() < 0.5 else dev1
        layout: list[list[tuple[str, str]]] = []
        for _ in range(int(rng.integers(3, 8))):
            if rng.random() < 0.25:  # a co-run on one device
                d = str(rng.choice(devices))
                layout.append([("norm_a", d), ("norm_b", d)])
            else:
                layout.append([(str(rng.choice(list(pool))), str(rng.choice(devices)))])
        gaps = [float(rng.choice([0.0, 1e-4, 5e-4])) for _ in layout]
        return Scenario(pool, devices, layout, gaps, "none", (), "")
    raise ValueError(mechanism)


def placements(sc: Scenario, lib: dict[str, Signature]) -> list[Placement]:
    """Groups one after another per device; a group's members co-start."""
    free = dict.fromkeys(sc.devices, 0.0)
    out = []
    for group, gap in zip(sc.layout, sc.gaps_s, strict=True):
        devs = {d for _, d in group}
        start = max(free[d] for d in devs) + gap
        for name, d in group:
            out.append(Placement(lib[name].on(d), d, start))
            free[d] = max(free[d], start + lib[name].time)
    return out


def run_trial(sc: Scenario, seed: int, runs: int = RUNS) -> tuple[CheckResult, float]:
    """Characterize the schedule's element types and check it, ``runs`` runs per
    measurement; returns the result and the effect in units of the measured spread."""
    mech = "none" if sc.mechanism == "none" else sc.mechanism
    runner = SimRunner(sc.elements, sc.devices, mechanisms=mech, **sc.runner)
    used = list(dict.fromkeys(n for g in sc.layout for n, _ in g))
    lib = {
        n: characterize_element(runner, n, sc.devices[0], runs, seed=seed * 7919 + 1000 * (k + 1))
        for k, n in enumerate(used)
    }
    pl = placements(sc, lib)
    res = check_schedule(pl, list(lib.values()), runner, runs=runs, seed=seed * 7919 + 500_000)
    sigma = float(res.measured.energy_j.std(ddof=1))
    effect = abs(float(res.measured.energy_j.mean()) - res.predicted.energy.mean) / sigma
    t_sigma = float(res.measured.time_s.std(ddof=1))
    t_effect = abs(float(res.measured.time_s.mean()) - res.predicted.time.mean) / max(
        t_sigma, 1e-300
    )
    return res, max(effect, t_effect)


def judge(sc: Scenario, res: CheckResult) -> dict[str, bool]:
    first = res.found[0] if res.found else None
    if first is None:
        return {
            "detected": res.deviation,
            "localized": False,
            "named": False,
            "covered": bool(res.refined_covers),
        }
    if sc.scope == "prefix":
        localized = first.scope == "prefix" or sc.expected[-1] in first.elements
    else:
        localized = set(first.elements) == set(sc.expected) and first.kind == sc.kind
    return {
        "detected": res.deviation,
        "localized": localized,
        "named": first.mechanism == sc.mechanism,
        "covered": bool(res.refined_covers),
    }


def property_5_1(seed: int) -> list[dict]:
    """Two orders of the same elements, with the cache mechanism on and off."""
    out = []
    el = {
        "produce": SimElement("layernorm", workload={"rows": 2048.0}, writes=("x",)),
        "consume": SimElement("layernorm", workload={"rows": 2048.0}, reads=("x",)),
        "other": SimElement("memcpy", workload={"bytes": 128.0 * 2**20}),
    }
    for mech in ("cache", "none"):
        runner = SimRunner(el, ["gpu0"], mechanisms=mech)
        t = {n: characterize_element(runner, n, "gpu0", 5, seed=1).time for n in el}
        orders = {
            "produce, consume, other": ["produce", "consume", "other"],
            "produce, other, consume": ["produce", "other", "consume"],
        }
        means = {}
        for label, order in orders.items():
            jobs, s = [], 0.0
            for n in order:
                jobs.append(Job(n, "gpu0", s, s + t[n]))
                s += t[n]
            rs = runner.run(jobs, 40, seed=seed)
            e = rs.energy_j
            means[label] = (float(e.mean()), float(e.std(ddof=1) / math.sqrt(e.size)))
        (a, sa), (b, sb) = means.values()
        z = abs(a - b) / math.hypot(sa, sb)
        out.append({"mechanisms": mech, "orders": means, "z": z, "differ": z > 1.96})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--trials", type=int, default=20, help="trials per mechanism")
    ap.add_argument("--null", type=int, default=100, help="schedules with every mechanism off")
    ap.add_argument(
        "--mechanisms",
        default="thermal,contention,power_cap,cache,clock_state,interconnect,node_power",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--strict", action="store_true", help="exit 1 on any FAIL")
    ap.add_argument("--runs", type=int, default=RUNS, help=f"runs per measurement (default {RUNS})")
    common.add_smoke_option(ap)
    args = ap.parse_args(argv)
    if common.enter_smoke(args):
        vars(args).update(SMOKE)
    rng = np.random.default_rng(args.seed)
    rows, fails = [], 0
    t0 = time.perf_counter()
    # Null world.
    agree = 0
    for i in range(args.null):
        sc = scenario("none", rng)
        res, _ = run_trial(sc, args.seed * 100_000 + i, args.runs)
        agree += not res.deviation
    null_rate = agree / max(args.null, 1)
    ok = null_rate >= 0.95
    fails += not ok
    print(
        f"all mechanisms off: {agree}/{args.null} schedules within the 95 % interval "
        f"({null_rate:.0%}; target ≥ 95 %) {'PASS' if ok else 'FAIL'}"
    )
    print()
    header = (
        f"{'mechanism':<13}{'trials':>7}{'≥3σ':>6}{'min effect σ':>13}{'detected':>10}"
        f"{'localized':>10}{'named':>8}{'covered':>9}  verdict"
    )
    print(header)
    print("-" * len(header))
    for m_index, mech in enumerate(args.mechanisms.split(",")):
        counts = {"detected": 0, "localized": 0, "named": 0, "covered": 0}
        kept, effects, misses = 0, [], []
        for i in range(args.trials):
            sc = scenario(mech, rng)
            res, effect = run_trial(
                sc, args.seed * 100_000 + 50_000 + 1000 * m_index + i, args.runs
            )
            if effect < 3.0:
                continue
            kept += 1
            effects.append(effect)
            verdict = judge(sc, res)
            for k, v in verdict.items():
                counts[k] += v
            if not all(verdict.values()):
                misses.append({"trial": i, **verdict, "found": [f.to_dict() for f in res.found]})
        rate = {k: v / kept if kept else math.nan for k, v in counts.items()}
        ok = (
            kept > 0
            and rate["detected"] >= 0.95
            and rate["localized"] >= 0.90
            and (rate["named"] >= 0.90)
            and rate["covered"] >= 0.95
        )
        fails += not ok
        print(
            f"{mech:<13}{args.trials:>7}{kept:>6}{min(effects, default=math.nan):>13.1f}"
            f"{rate['detected']:>10.0%}{rate['localized']:>10.0%}{rate['named']:>8.0%}"
            f"{rate['covered']:>9.0%}  {'PASS' if ok else 'FAIL'}"
        )
        rows.append(
            {
                "mechanism": mech,
                "trials": args.trials,
                "kept": kept,
                "rates": rate,
                "min_effect_sigma": min(effects, default=None),
                "misses": misses[:5],
            }
        )
    print()
    prop = property_5_1(args.seed)
    for p in prop:
        (la, (a, sa)), (lb, (b, sb)) = p["orders"].items()
        print(
            f"Property 5.1, {p['mechanisms']:<5}: [{la}] {a:.5g} J ± {sa:.2g} "
            f"vs [{lb}] {b:.5g} J ± {sb:.2g}"
            f": z = {p['z']:.1f} → {'differ' if p['differ'] else 'same'}"
        )
    prop_ok = prop[0]["differ"] and not prop[1]["differ"]
    fails += not prop_ok
    print(f"Property 5.1 (differ with cache on, same with it off): {'PASS' if prop_ok else 'FAIL'}")
    print(f"\n{time.perf_counter() - t0:.0f} s")
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "check_acceptance.json").write_text(
            json.dumps(
                {
                    "null_rate": null_rate,
                    "null": args.null,
                    "mechanisms": rows,
                    "property_5_1": prop,
                },
                indent=1,
                default=float,
            )
            + "\n"
        )
    return 1 if (fails and args.strict) else 0  # a smoke run is never strict


if __name__ == "__main__":
    sys.exit(main())
