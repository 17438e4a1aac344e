"""How much phase-shifted repeats recover a short region's energy, on the simulated H100.

The simulated GPU's averaged power reading behaves as the field note
(``reference/kokkos-energy-note.txt``) describes NVML's: it refreshes every 100 ms and
averages only the last 25 ms of each interval (Yang, Adamek and Armour, SC24), so a kernel
shorter than the refresh period can fall entirely in the 75 ms the sensor never sees.

A region is one GEMM burst of 10, 30 or 60 ms between idle gaps of at least 0.4 s. Its
energy is estimated from the power readings polled every 20 ms (the note's connector) and
compared with the simulator's exact energy:

* **single run**, 20 runs at random sensor phases, each on its own:
  ``trapezoid``: the connector's rule, the trapezoid over the region's window with the
  power interpolated at its edges; ``+ lag − idle``: the trapezoid over the region plus
  the time the sensor takes to report it, minus the idle draw over that extra time.
* **20 shifted repeats** (run k starts (k · 5 ms) mod 100 ms later, as
  ``eopt measure --repeat 20 --shift 5``): the runs' readings, aligned on the region's
  start, pooled into one dense trace (equivalent-time sampling; readings taken at the
  same offset are averaged) and integrated as above; and the poster's rule, the highest
  reading seen for the region in any run times the region's duration.
* **20 unshifted repeats**, pooled ``+ lag − idle``: the control. The blind spot recurs
  at the same phase in every run, so repeating alone does not help.

A repeat experiment yields one estimate of the per-run region energy; it is repeated 20
times with the sensor at a random phase, and its error is against the mean exact energy
of its runs.

Assumptions:
    Runs start on a cadence that is a whole number of sensor periods (here 1 s), so the
    shift alone sets each run's phase; a real launcher's start times add their own
    spread. The region is isolated: the idle draw just before it is the baseline that
    ``+ lag − idle`` subtracts, and the sensor's report of the region (up to one refresh
    period plus the averaging window plus a poll after its end) does not overlap another
    region's.

Usage::

    python3 benchmarks/sensor_shift.py
    python3 benchmarks/sensor_shift.py --model A100-SXM4-80GB --json results.json
    python3 benchmarks/sensor_shift.py --smoke     # 10 ms only, 2 estimates per row
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

from eopt.runs.runset import phase_delay_s
from eopt.sim.gpu import SimulatedGPU

GEMM_SIDE = 16384  # m = n; k sets the burst's length
LEAD_S = 0.4  # idle before each region (the baseline is read here)
TAIL_S = 0.4  # idle after it (longer than the sensor's report of it)
CADENCE_S = 1.0  # repeats start this far apart: a whole number of sensor periods
BASELINE_S = 0.3  # idle readings up to this long before the region form the baseline
SMOKE = {"lengths_ms": "10", "phases": 2}


@dataclass(frozen=True)
class RegionRun:
    """The power readings polled around one region, and its exact energy.

    Attributes:
        times_s: Poll times relative to the region's start, in s.
        power_w: The readings, in W.
        duration_s: The region's length, in s.
        true_energy_j: The simulator's exact energy over the region, in J.
        delay_s: The phase delay the run started with, in s.
    """

    times_s: np.ndarray
    power_w: np.ndarray
    duration_s: float
    true_energy_j: float
    delay_s: float = 0.0


class PowerLog:
    """Polls a GPU's power reading on a fixed cadence of its clock (the connector's thread).

    Args:
        gpu: The simulated GPU.
        poll_s: Polling period, in s.
    """

    def __init__(self, gpu: SimulatedGPU, poll_s: float) -> None:
        self.gpu = gpu
        self.times_s: list[float] = []
        self.power_w: list[float] = []
        gpu.clock.every(poll_s, self._poll)

    def _poll(self, now_s: float) -> None:
        self.times_s.append(now_s)
        self.power_w.append(self.gpu.power().power_w)

    def around(
        self, start_s: float, before_s: float, after_s: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Polls in ``[start_s − before_s, start_s + after_s]``, times relative to
        ``start_s`` (s) and readings (W)."""
        t = np.asarray(self.times_s) - start_s
        keep = (t >= -before_s) & (t <= after_s)
        return t[keep], np.asarray(self.power_w)[keep]


def gemm_depth(model: str, seconds: float) -> float:
    """The GEMM depth (its k) that runs about ``seconds`` at the top clock on ``model``."""
    probe = SimulatedGPU(model, noise=False)
    probe.idle(1.0)
    per_k = probe.launch("gemm", "cublas", {"m": GEMM_SIDE, "n": GEMM_SIDE, "k": GEMM_SIDE})
    return seconds * GEMM_SIDE / per_k


def run_region(gpu: SimulatedGPU, log: PowerLog, depth: float, delay_s: float = 0.0) -> RegionRun:
    """Run one region (a GEMM of depth ``depth``) now, then the idle tail; its readings.
    ``delay_s`` is the phase delay it started with (recorded only)."""
    e0, t0 = gpu.true_energy_j(), gpu.clock.now()
    gpu.launch("gemm", "cublas", {"m": GEMM_SIDE, "n": GEMM_SIDE, "k": depth})
    e1, t1 = gpu.true_energy_j(), gpu.clock.now()
    gpu.idle(TAIL_S)
    times, power = log.around(t0, LEAD_S, t1 - t0 + TAIL_S)
    return RegionRun(times, power, t1 - t0, e1 - e0, delay_s)


# ------------------------------------------------------------------------- estimators
def pooled(runs: Sequence[RegionRun]) -> tuple[np.ndarray, np.ndarray]:
    """The runs' readings aligned on the region start as one trace: sorted times (s) and
    readings (W), readings taken at the same offset averaged.

    Each distinct phase delay weighs the same, however many runs share it: with 64 runs
    shifted by 5 ms, 4 runs share the first four phases and 3 the other sixteen, and an
    unweighted mean would count those phases a third more.
    """
    times = np.round(np.concatenate([r.times_s for r in runs]), 9)  # float noise of the sums
    power = np.concatenate([r.power_w for r in runs])
    delays = [round(r.delay_s, 9) for r in runs]
    weight = np.concatenate(
        [np.full(r.times_s.size, 1.0 / delays.count(d)) for r, d in zip(runs, delays, strict=True)]
    )
    unique, where = np.unique(times, return_inverse=True)
    return unique, np.bincount(where, weight * power) / np.bincount(where, weight)


def trapezoid_j(times_s: np.ndarray, power_w: np.ndarray, start_s: float, end_s: float) -> float:
    """Trapezoid over ``[start_s, end_s]`` with the power interpolated at both edges, J."""
    edge = np.interp([start_s, end_s], times_s, power_w)
    inside = (times_s > start_s) & (times_s < end_s)
    t = np.concatenate([[start_s], times_s[inside], [end_s]])
    p = np.concatenate([[edge[0]], power_w[inside], [edge[1]]])
    return float(np.sum(0.5 * (p[1:] + p[:-1]) * np.diff(t)))


def over_region(runs: Sequence[RegionRun], lag_s: float) -> float:
    """Trapezoid over the region's own window (the connector's rule), J."""
    del lag_s  # the connector integrates the region's own window only
    times, power = pooled(runs)
    return trapezoid_j(times, power, 0.0, float(np.mean([r.duration_s for r in runs])))


def with_lag(runs: Sequence[RegionRun], lag_s: float) -> float:
    """Trapezoid over the region and the sensor's lag after it, minus the idle draw over
    the lag, J. A reading reports the draw of up to ``lag_s`` before it is polled, so the
    region's energy shows up in the trace only that much later."""
    times, power = pooled(runs)
    duration = float(np.mean([r.duration_s for r in runs]))
    baseline_w = float(np.mean(power[(times >= -BASELINE_S) & (times < 0.0)]))
    return trapezoid_j(times, power, 0.0, duration + lag_s) - baseline_w * lag_s


def highest_reading(runs: Sequence[RegionRun], lag_s: float) -> float:
    """The poster's rule: the highest reading polled from the region's start to ``lag_s``
    after its end, in any run, times the region's duration, J."""
    duration = float(np.mean([r.duration_s for r in runs]))
    peak = max(
        float(np.max(r.power_w[(r.times_s >= 0.0) & (r.times_s <= r.duration_s + lag_s)]))
        for r in runs
    )
    return peak * duration


Estimator = Callable[[Sequence[RegionRun], float], float]


@dataclass(frozen=True)
class Method:
    """One way to measure a region: how its runs are taken and which estimator reads them.

    Attributes:
        label: Shown in the table.
        runs: Runs per estimate (1: single runs).
        shift_s: Phase shift per repeat, in s (0: none).
        estimator: Turns the runs into an energy per run, in J.
    """

    label: str
    runs: int
    shift_s: float
    estimator: Estimator


def methods(n_runs: int, shift_s: float) -> list[Method]:
    """The rows of the table, per kernel length."""
    shifted = f"{n_runs} shifted repeats"
    return [
        Method("single run, trapezoid", 1, 0.0, over_region),
        Method("single run, + lag − idle", 1, 0.0, with_lag),
        Method(f"{shifted}, pooled trapezoid", n_runs, shift_s, over_region),
        Method(f"{shifted}, pooled + lag − idle", n_runs, shift_s, with_lag),
        Method(f"{shifted}, highest reading", n_runs, shift_s, highest_reading),
        Method(f"{n_runs} unshifted repeats, pooled + lag − idle", n_runs, 0.0, with_lag),
    ]


# ------------------------------------------------------------------------- experiments
def experiment(
    model: str, seed: int, depth: float, n_runs: int, shift_s: float, poll_s: float
) -> tuple[list[RegionRun], float]:
    """``n_runs`` regions (GEMMs of depth ``depth``) on one GPU, one per slot of
    ``CADENCE_S``, run i starting (i · shift) mod P later into its slot.

    The GPU's seed sets its sensor's phase; a single run (``n_runs`` 1) also starts at a
    random point of the period. Returns the runs and the sensor lag to integrate over, s.
    """
    gpu = SimulatedGPU(model, seed=seed, energy_counter=False, power_field="average")
    period = gpu.power_update_period_s
    log = PowerLog(gpu, poll_s)
    jitter = float(np.random.default_rng(seed).uniform(0.0, period)) if n_runs == 1 else 0.0
    runs = []
    for i in range(n_runs):
        delay = phase_delay_s(i, shift_s * 1e3, period)  # the rule of `eopt measure --shift`
        gpu.idle(i * CADENCE_S + LEAD_S + jitter + delay - gpu.clock.now())
        runs.append(run_region(gpu, log, depth, delay))
    # A reading reports the window before its refresh: the draw at t is reported by a
    # refresh within one window after t, held one period, and seen by the next poll
    # (one more poll of slack).
    lag = period + gpu.power_average_window_s + 2 * poll_s
    return runs, lag


@dataclass(frozen=True)
class Row:
    """One line of the table.

    Attributes:
        length_ms: The kernel burst's nominal length, in ms.
        method: How the region was measured.
        errors_pct: Signed relative errors of each estimate, in %.
        true_energy_j: Mean exact region energy, in J.
    """

    length_ms: float
    method: Method
    errors_pct: tuple[float, ...]
    true_energy_j: float

    @property
    def mean_abs_pct(self) -> float:
        """Mean |error|, in %."""
        return float(np.mean(np.abs(self.errors_pct)))

    @property
    def worst_pct(self) -> float:
        """The error of largest magnitude, signed, in %."""
        return max(self.errors_pct, key=abs)


def measure(
    model: str, lengths_ms: Sequence[float], n_runs: int, shift_ms: float, poll_ms: float,
    phases: int, seed: int,
) -> list[Row]:  # fmt: skip
    """Every method at every kernel length, ``phases`` estimates each.

    Methods that take their runs the same way read the same runs (paired comparisons).
    """
    rows = []
    for length_ms in lengths_ms:
        depth = gemm_depth(model, length_ms * 1e-3)
        taken: dict[tuple[int, float, int], tuple[list[RegionRun], float]] = {}
        for method in methods(n_runs, shift_ms * 1e-3):
            errors, truths = [], []
            for p in range(phases):
                key = (method.runs, method.shift_s, p)
                if key not in taken:
                    run_seed = seed * 1_000_003 + p  # the sensor's phase, p-th estimate
                    taken[key] = experiment(
                        model, run_seed, depth, method.runs, method.shift_s, poll_ms * 1e-3
                    )
                runs, lag = taken[key]
                truth = float(np.mean([r.true_energy_j for r in runs]))
                errors.append(100.0 * (method.estimator(runs, lag) - truth) / truth)
                truths.append(truth)
            rows.append(Row(length_ms, method, tuple(errors), float(np.mean(truths))))
    return rows


def conclusion(rows: Sequence[Row], n_runs: int, shift_ms: float) -> str:
    """One line that says what the table shows."""
    single = [r for r in rows if r.method.runs == 1 and r.method.estimator is over_region]
    pooled_rows = [
        r
        for r in rows
        if r.method.runs > 1 and r.method.shift_s > 0 and r.method.estimator is with_lag
    ]
    peak = [r for r in rows if r.method.estimator is highest_reading]
    worst_single = max((abs(r.worst_pct) for r in single), default=0.0)
    worst_pooled = max((abs(r.worst_pct) for r in pooled_rows), default=0.0)
    shortest = min(peak, key=lambda r: r.length_ms) if peak else None
    text = (
        f"{n_runs} repeats shifted by {shift_ms:g} ms and pooled recover the region's "
        f"energy within {worst_pooled:.1f} % at every length, where single runs miss up to "
        f"{worst_single:.0f} %"
    )
    if shortest is not None:
        text += (
            f"; the highest-reading rule needs a kernel longer than the averaging window "
            f"({shortest.length_ms:g} ms: {shortest.worst_pct:+.0f} %)"
        )
    return text + "."


def print_table(rows: Sequence[Row], phases: int) -> None:
    """Markdown table of the rows."""
    print(f"| kernel | method | mean abs error % | worst error % | (n = {phases}) true J |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r.length_ms:g} ms | {r.method.label} | {r.mean_abs_pct:.1f} | "
            f"{r.worst_pct:+.1f} | {r.true_energy_j:.2f} |"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its table; returns the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="H100-SXM5-80GB", help="simulated GPU profile")
    parser.add_argument("--lengths-ms", default="10,30,60", help="kernel burst lengths, ms")
    parser.add_argument("--runs", type=int, default=20, help="repeats per estimate (N)")
    parser.add_argument("--shift-ms", type=float, default=5.0, help="phase shift per repeat")
    parser.add_argument("--poll-ms", type=float, default=20.0, help="polling period, ms")
    parser.add_argument("--phases", type=int, default=20, help="estimates per method")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    if common.enter_smoke(args):
        vars(args).update(SMOKE)
    lengths = [float(x) for x in args.lengths_ms.split(",") if x.strip()]
    started = time.perf_counter()
    rows = measure(
        args.model, lengths, args.runs, args.shift_ms, args.poll_ms, args.phases, args.seed
    )
    probe = SimulatedGPU(args.model)
    print(
        f"{args.model}: reading refreshed every {1e3 * probe.power_update_period_s:g} ms, "
        f"averaging the last {1e3 * probe.power_average_window_s:g} ms; polled every "
        f"{args.poll_ms:g} ms; {args.phases} estimates per row; seed {args.seed}\n"
    )
    print_table(rows, args.phases)
    print()
    print(conclusion(rows, args.runs, args.shift_ms))
    print(f"({time.perf_counter() - started:.1f} s)")
    if args.json is not None:
        payload = {
            "model": args.model,
            "runs": args.runs,
            "shift_ms": args.shift_ms,
            "poll_ms": args.poll_ms,
            "seed": args.seed,
            "rows": [
                {
                    "length_ms": r.length_ms,
                    "method": r.method.label,
                    "mean_abs_error_pct": r.mean_abs_pct,
                    "worst_error_pct": r.worst_pct,
                    "errors_pct": list(r.errors_pct),
                    "true_energy_j": r.true_energy_j,
                }
                for r in rows
            ],
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
