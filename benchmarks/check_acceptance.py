"""Acceptance of ``eopt check`` on the simulator: detection, localization, naming, refinement.

For each interaction mechanism of the simulated GPU, alone, random schedules are built in
which one pair (or, for heat, a long prefix) interacts through it. By default
(``--schedules random``) each is 4–10 groups over 1–2 GPUs, every group a ⊗ element, a ⊕
co-run on one device or a ⊕multi co-start across two, gaps 0–1 ms, fillers from gemm /
memcpy / layernorm at several sizes and clocks, with the trigger at a random place
(:func:`random_scenario`); ``--schedules tuned`` gives the fixed layouts the check was
first built on. The simulator runs at its default, realistic noise. Every element type is
characterized from the null context first (30 runs each, independent seeds), then
``check_schedule`` runs the workflow. A trial counts when the effect is at least 3 σ of
the composite (σ: the single-run spread of the measured schedule); the table gives, per
mechanism:

* detected: the whole-schedule test deviates (target ≥ 95 %);
* localized: the first finding names the right pair (or a prefix, for heat; ≥ 90 %);
* named: its mechanism is the one switched on (≥ 90 %);
* covered: after refinement the prediction covers the measurement (≥ 95 %).

With every mechanism off, 100 random schedules (co-runs included) must agree with their
prediction in ≥ 95 % (the test's nominal level). Finally Property 5.1: two orders of the
same elements cost different energy, beyond their intervals, when the cache (or heat)
mechanism is on, and the same when it is off.

    python3 benchmarks/check_acceptance.py                 # 20 trials per mechanism
    python3 benchmarks/check_acceptance.py --seed 2        # another draw of every schedule
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


# ------------------------------------------------------------------ random schedules
# Filler element kinds: (kernel, workload); none of them triggers a mechanism on its own
# (no shared buffers, no collectives), and their clocks follow the trial's clock policy.
_FILL_GEMM = (1024.0, 2048.0, 3072.0, 4096.0)
_FILL_MEMCPY = (16.0, 64.0, 128.0, 256.0)  # MiB
_FILL_NORM = (1024.0, 4096.0, 8192.0)  # rows
# Group kinds of the random generator: one element (⊗ with what precedes it), two
# co-starting on one device (⊕), or two co-starting on two devices (⊕multi).
_SEQ, _PAR, _MULTI = "seq", "par", "multi"
# A node budget only two busy GPUs at the top clock exceed (2 × ≈ 390 W), while one of
# them beside any filler (≤ 230 W at 1005 MHz) stays ≈ 12 % below it.
_NODE_BUDGET_W = 700.0


def _filler_kind(rng: np.random.Generator, compute: bool = True) -> tuple[str, dict[str, float]]:
    """A random filler: gemm (when ``compute``), memcpy or layernorm at a random size."""
    kinds = ("gemm", "memcpy", "layernorm") if compute else ("memcpy", "layernorm")
    kernel = str(rng.choice(kinds))
    if kernel == "gemm":
        m = float(rng.choice(_FILL_GEMM))
        return kernel, {"m": m, "n": m, "k": m}
    if kernel == "memcpy":
        return kernel, {"bytes": float(rng.choice(_FILL_MEMCPY)) * 2**20}
    return kernel, {"rows": float(rng.choice(_FILL_NORM))}


def _clock_name(clock: float | None) -> str:
    return "dflt" if clock is None else f"{clock:.0f}"


def random_scenario(mechanism: str, rng: np.random.Generator) -> Scenario:
    """A random placed schedule in which ``mechanism`` (alone) acts once, at a random place.

    4–10 groups over 1–2 GPUs (2 where the mechanism needs two), each a ⊗ element, a ⊕
    co-run on one device or a ⊕multi co-start across two, gaps 0–1 ms; filler elements
    from gemm / memcpy / layernorm at several sizes and clocks. The trigger (a co-run
    pair, a producer–consumer pair, a clock change or a heating prefix) is inserted at a
    random position. Fillers are drawn so that they do not trigger the mechanism
    themselves (no same-device co-run of compute kernels under contention or a power
    cap, one clock per device before and after a clock change, a node budget that only
    the trigger pair exceeds), so the trigger is the one interaction to find.
    """
    two = mechanism in ("interconnect", "node_power") or rng.random() < 0.5
    devices = ["gpu0", "gpu1"] if two else ["gpu0"]
    runner: dict = {}
    kinds = [_SEQ, _PAR] + ([_MULTI] if two else [])
    compute_par = True  # may a same-device filler co-run hold a gemm?
    base = rng.choice([None, 1410.0, 1200.0])
    clock_before = dict.fromkeys(devices, None if base is None else float(base))
    gemm_clock: float | None = None  # a filler gemm's own clock (None: the device's)
    core_dev = str(rng.choice(devices))
    el: dict[str, SimElement] = {}
    core: list[list[tuple[str, str]]]
    scope = "pair"
    if mechanism == "contention":
        rows = [float(rng.choice([4096, 8192, 16384])) for _ in range(2)]
        el = {
            f"norm_{x}": SimElement("layernorm", workload={"rows": r}, sm_clock_mhz=None)
            for x, r in zip("ab", rows, strict=True)
        }
        core = [[("norm_a", core_dev), ("norm_b", core_dev)]]
        expected, kind = ("norm_a", "norm_b"), "runtime"
        kinds = [k for k in kinds if k != _PAR]
    elif mechanism == "power_cap":
        m = [float(rng.choice([4096, 6144, 8192])) for _ in range(2)]
        el = {
            f"mm_{x}": SimElement("gemm", workload={"m": v, "n": v, "k": v})
            for x, v in zip("ab", m, strict=True)
        }
        core = [[("mm_a", core_dev), ("mm_b", core_dev)]]
        expected, kind = ("mm_a", "mm_b"), "runtime"
        compute_par = False
    elif mechanism == "cache":
        rows = float(rng.choice([1024, 2048]))
        el = {
            "produce": SimElement("layernorm", workload={"rows": rows}, writes=("x",)),
            "consume": SimElement("layernorm", workload={"rows": rows}, reads=("x",)),
        }
        core = [[("produce", core_dev)], [("consume", core_dev)]]
        expected, kind = ("produce", "consume"), "entry"
    elif mechanism == "clock_state":
        f1 = float(rng.choice([1410.0, 1200.0]))
        f2 = float(rng.choice([900.0, 1005.0, 1110.0]))
        clock_before = {d: float(rng.choice([1410.0, 1200.0, 1005.0])) for d in devices}
        clock_before[core_dev] = f1
        kernel, work = _filler_kind(rng)
        el = {
            "fast": SimElement(kernel, workload=work, sm_clock_mhz=f1),
            "slow": SimElement(
                "gemm", workload={"m": 2048.0, "n": 2048.0, "k": 2048.0}, sm_clock_mhz=f2
            ),
        }
        core = [[("fast", core_dev)], [("slow", core_dev)]]
        expected, kind = ("fast", "slow"), "entry"
    elif mechanism == "interconnect":
        b = [float(rng.choice([128, 256, 512])) * 2**20 for _ in range(2)]
        el = {
            f"ar{i}": SimElement("allreduce", workload={"bytes": v}, sm_clock_mhz=None)
            for i, v in enumerate(b)
        }
        core = [[("ar0", "gpu0"), ("ar1", "gpu1")]]
        expected, kind = ("ar0", "ar1"), "runtime"
    elif mechanism == "node_power":
        m = [float(rng.choice([4096, 6144, 8192])) for _ in range(2)]
        clock_before = dict.fromkeys(devices, 1410.0)
        gemm_clock = 1005.0
        el = {
            f"mm{i}": SimElement("gemm", workload={"m": v, "n": v, "k": v}, sm_clock_mhz=1410.0)
            for i, v in enumerate(m)
        }
        core = [[("mm0", "gpu0"), ("mm1", "gpu1")]]
        expected, kind = ("mm0", "mm1"), "runtime"
        compute_par = False
        runner = {"power_budget_w": _NODE_BUDGET_W}
    elif mechanism == "thermal":
        # Tens of seconds of large GEMMs at a locked clock heat the die by 15-25 °C
        # (τ = R·C ≈ 20 s); leakage rises with it, and the elements after them pay.
        clock_before = dict.fromkeys(devices, 1200.0)
        el = {
            "heat": SimElement(
                "gemm", workload={"m": 65536.0, "n": 65536.0, "k": 65536.0}, sm_clock_mhz=1200.0
            ),
            "probe": SimElement("layernorm", workload={"rows": 16384.0}, sm_clock_mhz=1200.0),
        }
        n_heat = int(rng.integers(14, 21))
        core = [[("heat", core_dev)]] * n_heat + [[("probe", core_dev)]] * int(rng.integers(1, 4))
        expected, kind, scope = ("heat", "probe"), "entry", "prefix"
    else:
        raise ValueError(mechanism)
    for name, spec in el.items():
        if mechanism not in ("clock_state", "node_power", "thermal") and spec.sm_clock_mhz is None:
            el[name] = SimElement(
                spec.kernel,
                workload=spec.workload,
                reads=spec.reads,
                writes=spec.writes,
                sm_clock_mhz=clock_before[core_dev],
            )
    n_fill = int(rng.integers(4, 11)) - 1
    at = int(rng.integers(0, n_fill + 1))  # the trigger's position among the groups
    clock_after = dict(clock_before)
    if mechanism == "clock_state":
        clock_after[core_dev] = el["slow"].sm_clock_mhz
    layout: list[list[tuple[str, str]]] = []

    def filler(device: str, after: bool, compute: bool = True) -> str:
        kernel, work = _filler_kind(rng, compute)
        clock = (clock_after if after else clock_before)[device]
        if kernel == "gemm" and gemm_clock is not None:
            clock = gemm_clock
        size = next(iter(work.values()))
        name = f"{kernel}{size / 2**20 if kernel == 'memcpy' else size:.0f}@{_clock_name(clock)}"
        el.setdefault(name, SimElement(kernel, workload=work, sm_clock_mhz=clock))
        return name

    for g in range(n_fill + 1):
        if g == at:
            layout += core
            continue
        after = g > at
        group_kind = str(rng.choice(kinds))
        if group_kind == _SEQ:
            d = str(rng.choice(devices))
            layout.append([(filler(d, after), d)])
        elif group_kind == _PAR:
            d = str(rng.choice(devices))
            layout.append([(filler(d, after, compute_par), d), (filler(d, after, compute_par), d)])
        else:
            layout.append([(filler(d, after), d) for d in devices])
    gaps = [float(rng.choice([0.0, 0.0, 1e-4, 5e-4, 1e-3])) for _ in layout]
    if mechanism in ("cache", "clock_state", "thermal"):
        # The consumer right after its producer (a gap would let L2 warmth or a
        # clock change fade); the heaters back to back.
        first = layout.index(core[0])
        for k in range(first + 1, first + len(core)):
            gaps[k] = 0.0
    return Scenario(el, devices, layout, gaps, mechanism, expected, kind, scope, runner)


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
        # Heat left by the heaters: the prefix, or an entry pair after a heater.
        localized = first.scope == "prefix" or (
            first.kind == "entry" and sc.expected[0] in first.elements
        )
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
    ap.add_argument(
        "--schedules",
        choices=("random", "tuned"),
        default="random",
        help="random: each mechanism's trigger at a random place in random ⊗/⊕/⊕multi "
        "schedules over 1–2 GPUs (default); tuned: the fixed layouts the check was built on",
    )
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument(
        "--results",
        type=Path,
        default=RESULTS / "check_acceptance.json",
        help="where to write the JSON results (default: results/check_acceptance.json)",
    )
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
    null_rate = agree / args.null if args.null else None
    if null_rate is None:
        print("all mechanisms off: not run (--null 0)")
    else:
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
            sc = random_scenario(mech, rng) if args.schedules == "random" else scenario(mech, rng)
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
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(
            json.dumps(
                {
                    "seed": args.seed,
                    "schedules": args.schedules,
                    "runs": args.runs,
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
