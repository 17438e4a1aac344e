"""With every mechanism off, composed predictions cover what the simulated GPU measures.

The null world is the context-independent world (paper §4.3): with ``--mechanisms none``
the simulated A100 realizes the algebra's assumptions, so a prediction composed from
null-context signatures must cover the measurement at its stated level, and ``eopt
check`` must raise false alarms at about its nominal rate, no more.

Each seed draws random placed schedules none of this was tuned on: 1–2 GPUs, 4–10
groups one after another per device, each group ⊗ (one element), ⊕ (two elements
co-starting on one GPU) or ⊕multi (one element on each GPU, co-starting), planned gaps
of 0–1 ms before each group (0 for a third of them), elements drawn from gemm, memcpy,
layernorm and allreduce at several sizes. Every element type is characterized alone
from the null context (30 runs, its own seeds); then ``check_schedule`` composes the
prediction and runs the schedule 30 times. Per schedule:

* covered: the measured mean lies in the prediction's 95 % interval for the mean of n
  runs, Ê ± c·√(SE² + σ̂²/n) (SE: the prediction's own error from characterization, σ̂:
  its single-run spread; ``eopt.calculus.uncertainty.mean_interval``), for energy and
  for time separately (target 92–98 %: a calibrated interval lands there about 95 % of
  the time over 200 schedules);
* false alarm: ``eopt check`` reports a deviation (first test and fresh runs; target
  ≤ 8 % at a nominal 5 %).

Worlds: the profile's default noise, and ``--jitter 2%`` (every kernel's duration with a
2 % relative spread, ``eopt check --jitter``). The table also gives the measured over the
predicted single-run spread (the variance model) and the mean z of the energy.

    python3 benchmarks/null_world.py                       # 200 schedules, seeds 1 and 2
    python3 benchmarks/null_world.py --schedules 60 --seeds 3,4 --jitter 2%
    python3 benchmarks/null_world.py --smoke               # 2 schedules, 5 runs
"""

from __future__ import annotations

import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

from eopt.calculus.schedule import Placement
from eopt.calculus.uncertainty import mean_interval
from eopt.check.runner import SimElement, SimRunner
from eopt.check.workflow import characterize_element, check_schedule
from eopt.model.signature import Signature

NAME = "null_world"
RUNS = 30
SMOKE = {"schedules": 2, "runs": 5, "seeds": "1", "jobs": 1}
MiB = 2.0**20

#: The element catalogue: (kernel, workload) at several sizes.
CATALOGUE: dict[str, SimElement] = {
    **{
        f"gemm{int(m)}": SimElement("gemm", workload={"m": m, "n": m, "k": m})
        for m in (1024.0, 2048.0, 3072.0, 4096.0)
    },
    **{
        f"memcpy{int(b)}M": SimElement("memcpy", workload={"bytes": b * MiB})
        for b in (64.0, 128.0, 256.0)
    },
    **{
        f"layernorm{int(r)}": SimElement("layernorm", workload={"rows": r})
        for r in (2048.0, 4096.0, 8192.0, 16384.0)
    },
    **{
        f"allreduce{int(b)}M": SimElement("allreduce", workload={"bytes": b * MiB})
        for b in (32.0, 64.0, 128.0)
    },
}


@dataclass(frozen=True)
class Layout:
    """One random schedule: groups of (element, device) with the gap before each."""

    devices: tuple[str, ...]
    groups: tuple[tuple[tuple[str, str], ...], ...]
    kinds: tuple[str, ...]
    gaps_s: tuple[float, ...]


def random_layout(rng: np.random.Generator) -> Layout:
    """A random placed schedule (see the module docstring)."""
    devices = ("gpu0", "gpu1") if rng.random() < 0.5 else ("gpu0",)
    names = list(CATALOGUE)
    pool = [str(n) for n in rng.choice(names, size=int(rng.integers(4, 7)), replace=False)]
    groups, kinds, gaps = [], [], []
    for _ in range(int(rng.integers(4, 11))):
        u = rng.random()
        if len(devices) == 2 and u < 0.3:
            kind = "⊕multi"
            group = ((str(rng.choice(pool)), "gpu0"), (str(rng.choice(pool)), "gpu1"))
        elif u < 0.6:
            kind = "⊕"
            d = str(rng.choice(devices))
            group = ((str(rng.choice(pool)), d), (str(rng.choice(pool)), d))
        else:
            kind = "⊗"
            group = ((str(rng.choice(pool)), str(rng.choice(devices))),)
        groups.append(group)
        kinds.append(kind)
        gaps.append(0.0 if rng.random() < 1 / 3 else float(rng.uniform(0.0, 1e-3)))
    return Layout(devices, tuple(groups), tuple(kinds), tuple(gaps))


def placements(layout: Layout, lib: dict[str, Signature]) -> list[Placement]:
    """Groups one after another per device at their planned gaps; a group co-starts."""
    free = dict.fromkeys(layout.devices, 0.0)
    out = []
    for group, gap in zip(layout.groups, layout.gaps_s, strict=True):
        start = max(free[d] for _, d in group) + gap
        for name, d in group:
            out.append(Placement(lib[name].on(d), d, start))
            free[d] = max(free[d], start + lib[name].time)
    return out


@dataclass
class Outcome:
    """One schedule's verdicts and numbers."""

    seed: int
    index: int
    gpus: int
    groups: int
    same_device_coruns: int
    energy_covered: bool
    time_covered: bool
    first_alarm: bool
    false_alarm: bool
    z_energy: float
    z_time: float
    sd_energy_ratio: float
    sd_time_ratio: float
    energy_rel: float


def run_schedule(task: tuple[int, int, float | None, int]) -> Outcome:
    """Characterize, predict, measure and check one random schedule."""
    seed, index, jitter, runs = task
    rng = np.random.default_rng([seed, index])
    layout = random_layout(rng)
    used = list(dict.fromkeys(n for g in layout.groups for n, _ in g))
    runner = SimRunner(
        {n: CATALOGUE[n] for n in used}, list(layout.devices), mechanisms="none", jitter=jitter
    )
    base = 1_000_003 * (seed * 1000 + index)
    lib = {
        n: characterize_element(runner, n, "gpu0", runs, seed=base + 10_007 * (k + 1))
        for k, n in enumerate(used)
    }
    res = check_schedule(
        placements(layout, lib), list(lib.values()), runner, runs=runs, seed=base + 500_009
    )
    pred, first = res.predicted, res.initial
    assert first.time is not None
    sig = pred.signature
    e_iv = mean_interval(pred.energy.mean, pred.energy.sem, sig.std_energy, runs, 0.95, runs)
    t_iv = mean_interval(pred.time.mean, pred.time.sem, sig.std_time, runs, 0.95, runs)
    m_e, m_t = first.energy.measured, first.time.measured
    return Outcome(
        seed=seed,
        index=index,
        gpus=len(layout.devices),
        groups=len(layout.groups),
        same_device_coruns=layout.kinds.count("⊕"),
        energy_covered=e_iv.contains(m_e.mean),
        time_covered=t_iv.contains(m_t.mean),
        first_alarm=not first.passed,
        false_alarm=res.deviation,
        z_energy=(m_e.mean - e_iv.center) / _scale(pred.energy.sem, sig.std_energy, runs),
        z_time=(m_t.mean - t_iv.center) / _scale(pred.time.sem, sig.std_time, runs),
        sd_energy_ratio=m_e.std / sig.std_energy if sig.std_energy > 0 else math.nan,
        sd_time_ratio=m_t.std / sig.std_time if sig.std_time > 0 else math.nan,
        energy_rel=first.energy.relative,
    )


def _scale(se: float, sd: float, runs: int) -> float:
    """The standard deviation of measured minus predicted mean under the model."""
    return max(math.sqrt(se * se + sd * sd / runs), 1e-300)


HEADER = (
    f"{'world':<14}{'seed':>5}{'schedules':>10}{'E covered':>11}{'T covered':>11}"
    f"{'check alarms':>13}{'first test':>11}{'σE m/p':>8}{'σT m/p':>8}{'mean zE':>9}"
    f"{'mean zT':>9}  verdict"
)


def _row(world: str, seed: str, rows: list[Outcome], verdict: str) -> str:
    n = len(rows)

    def share(key: str) -> str:
        return f"{np.mean([getattr(r, key) for r in rows]):.1%}" if n else "—"

    def med(key: str) -> float:
        vals = [getattr(r, key) for r in rows if math.isfinite(getattr(r, key))]
        return float(np.median(vals)) if vals else math.nan

    def mean(key: str) -> float:
        return float(np.mean([getattr(r, key) for r in rows])) if n else math.nan

    return (
        f"{world:<14}{seed:>5}{n:>10}{share('energy_covered'):>11}{share('time_covered'):>11}"
        f"{share('false_alarm'):>13}{share('first_alarm'):>11}{med('sd_energy_ratio'):>8.2f}"
        f"{med('sd_time_ratio'):>8.2f}{mean('z_energy'):>+9.2f}{mean('z_time'):>+9.2f}  {verdict}"
    )


def _judge(rows: list[Outcome]) -> tuple[bool, str]:
    e = float(np.mean([r.energy_covered for r in rows]))
    t = float(np.mean([r.time_covered for r in rows]))
    fa = float(np.mean([r.false_alarm for r in rows]))
    ok = 0.92 <= e <= 0.98 and 0.92 <= t <= 0.98 and fa <= 0.08
    return ok, "PASS" if ok else "FAIL"


def _parse_jitter(text: str) -> list[float | None]:
    out: list[float | None] = []
    for item in text.split(","):
        item = item.strip().lower()
        if item in ("default", "none", ""):
            out.append(None)
            continue
        value = float(item.rstrip("%")) / (100.0 if item.endswith("%") else 1.0)
        if not 0.0 <= value < 0.2:
            raise ValueError(f"--jitter {item!r}: give a relative spread such as 2% or 0.02")
        out.append(value)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = common.argument_parser(__doc__ or "", 4)
    parser.add_argument("--schedules", type=int, default=200, help="schedules per seed (200)")
    parser.add_argument("--seeds", default="1,2", help="comma list of seeds (1,2)")
    parser.add_argument(
        "--jitter", default="default,2%", help="worlds: default noise and/or launch jitter"
    )
    parser.add_argument("--runs", type=int, default=RUNS, help="runs per measurement (30)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    parser.add_argument("--strict", action="store_true", help="exit 1 on any FAIL")
    parser.add_argument("--no-save", action="store_true", help=f"do not write {NAME}.json")
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    if common.enter_smoke(args):
        vars(args).update(SMOKE)
    seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    worlds = _parse_jitter(args.jitter)
    started = time.perf_counter()
    print(HEADER)
    print("-" * len(HEADER))
    verdicts = common.Verdicts()
    results: dict[str, Any] = {"runs": args.runs, "schedules": args.schedules, "worlds": []}
    for jitter in worlds:
        label = "default noise" if jitter is None else f"jitter {jitter:.0%}"
        everyone: list[Outcome] = []
        for seed in seeds:
            tasks = [(seed, i, jitter, args.runs) for i in range(args.schedules)]
            if args.jobs > 1:
                with ProcessPoolExecutor(args.jobs) as pool:
                    rows = list(pool.map(run_schedule, tasks, chunksize=1))
            else:
                rows = [run_schedule(t) for t in tasks]
            everyone += rows
            ok, verdict = _judge(rows)
            print(_row(label, str(seed), rows, verdict), flush=True)
            verdicts.lines.append((ok, f"{label}, seed {seed}"))
            results["worlds"].append(
                {"jitter": jitter, "seed": seed, "outcomes": [asdict(r) for r in rows]}
            )
        if len(seeds) > 1:
            print(_row(label, "all", everyone, ""))
        for what, keep in (
            ("  1 GPU", lambda r: r.gpus == 1),
            ("  2 GPUs", lambda r: r.gpus == 2),
            ("  with ⊕", lambda r: r.same_device_coruns > 0),
            ("  without ⊕", lambda r: r.same_device_coruns == 0),
        ):
            part = [r for r in everyone if keep(r)]
            if part:
                print(_row(what, "all", part, ""))
    return common.finish(verdicts, args, NAME, results, started)


if __name__ == "__main__":
    common.run_main(main)
