"""Does a fitted simulator choose the right clock? Held-out errors and the optimum, per GPU.

Each GPU's rows of ``shared/data/dvfs/unified_modes.csv`` (the Perseus A40 and A100
stage curves, and the models of ``benchmarks/sim_calibration.py --gpus``) are fitted with
:func:`eopt.sim.fit.fit_sim` without every third interior clock (every other on sweeps of
≤ 6 settings), from the same start as the calibration; a clock sweep whose power reaches
the board's default limit (the A40 and A100 curves) is fitted under that limit
(:func:`eopt.sim.fit.reaches_board_limit`). Columns: held-out time / power /
energy error (mean |relative|, on the clocks left out); the optimum: kernels whose fitted
energy-optimal setting, chosen among all the data's settings, lies within one setting of
the measured one or costs at most 1 % more measured energy
(:func:`eopt.sim.fit.optimum_checks`), and the median / largest extra energy of running at
the fit's choice; on power-limit sweeps, the share of kernels whose energy is U-shaped
over the limit (data / sim), among the kernels the limit throttles (their count in
brackets; :func:`eopt.sim.fit.limit_bound_kernels`: measured power within 85 % of the
limit at some setting; for the others the limit changes nothing and the data's minimum is
noise; the verdict line also gives the share over every kernel, and the share over every
kernel when the model's sweep is measured as the data were, once per setting with the
data's own noise, as a 95 % range over seeded draws: ``measured_u_shares``); and what the
fit cannot serve (kernels it never saw: the error on whole held-out kernels, each fitted
at four settings only).

Targets: the optimum for every Perseus curve on the A40 and the A100; the sim's U-shaped
share within 10 points of the data's on power-limit sweeps where the limit throttles, and
the data's share over every kernel inside the 95 % range of the model measured as the data
were.

    python3 benchmarks/sim_fit_optimum.py                 # A40, A100, V100, RTX 6000
    python3 benchmarks/sim_fit_optimum.py --all           # every fitted model
    python3 benchmarks/sim_fit_optimum.py --gpus A40 --no-save   # one model
    python3 benchmarks/sim_fit_optimum.py --smoke         # tests/data's RTX 8000 kernels
"""

from __future__ import annotations

import csv
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common
import sim_calibration as cal

from eopt.sim.fit import (
    MeasuredTable,
    _held_knob_values,
    fit_sim,
    holdout_error,
    limit_bound_kernels,
    optimum_checks,
    reaches_board_limit,
    u_shaped,
)
from eopt.sim.profiles import load_profile

NAME = "sim_fit_optimum"
# The A40's Perseus curves are among the calibration's models already; the A100's are
# its part 1, fitted here the same way as the others.
A100 = cal.GpuData("A100-SXM4-80GB", "perseus_sosp24_stage_profile", "a100_sxm", "Perseus stages")
DEFAULT_MODELS = ("A40", "A100-SXM4-80GB", "V100-PCIE-16GB", "Quadro-RTX-6000")
U_TOLERANCE = 0.10
# Noisy measurements of the whole power-limit sweep (`measured_u_shares`).
MEASURED_DRAWS = 2000
SMOKE_TABLE = Path("dvfs") / "nv_dvfs_benchmark" / "rtx8000-dvfs-real-profile.csv"


def _specs(everything: bool) -> list[cal.GpuData]:
    specs = [A100, *cal.GPUS]
    return specs if everything else [s for s in specs if s.model in DEFAULT_MODELS]


def fit_options(table: MeasuredTable, profile: Any) -> dict[str, Any]:
    """How a table is fitted: a clock sweep that ran into the board's power limit (the
    A40's and the A100's top clocks) throttles in the model too."""
    return {"board_limit": reaches_board_limit(table, profile)}


def flat_noise_cv(energy_j: list[np.ndarray]) -> float:
    """The data's run-to-run energy CV, from kernels the sweep does not change.

    Their energy over the knob is flat but for noise, so the spread of each kernel's
    energies about its own mean is that noise: the pooled relative standard deviation,
    the root of the mean relative variance (ddof 1; kernels with fewer than three
    settings are left out).

    Args:
        energy_j: Energies per kernel, J, one array per kernel.
    """
    var = [float(np.var(e, ddof=1) / np.mean(e) ** 2) for e in energy_j if len(e) >= 3]
    return math.sqrt(float(np.mean(var))) if var else 0.0


def measured_u_shares(
    model_j: list[np.ndarray],
    knob: list[np.ndarray],
    cv: float,
    draws: int = MEASURED_DRAWS,
    seed: int = 0,
) -> np.ndarray:
    """U-shaped shares of a model's sweeps measured once per setting with noise.

    The data were measured once per setting ("not stochastic, and hence only measured
    once"), so a kernel the limit never throttles is U-shaped or not by where its noise put
    the minimum. Measuring the model the same way, each energy times 1 + cv·z (z standard
    normal, independent per setting), gives the share the data's measurement would see.

    Args:
        model_j: Model energies per kernel, J.
        knob: The knob values per kernel, in the same order.
        cv: Relative standard deviation of one measurement's energy.
        draws: Measurements of the whole sweep.
        seed: Seed of the noise.

    Returns:
        The U-shaped share over the kernels, one per draw.
    """
    rng = np.random.default_rng(seed)
    u = np.zeros((draws, len(model_j)), dtype=bool)
    for j, (e, k) in enumerate(zip(model_j, knob, strict=True)):
        e = np.asarray(e, dtype=float)[np.argsort(k, kind="stable")]
        noisy = e * (1.0 + cv * rng.standard_normal((draws, e.size)))
        low = np.argmin(noisy, axis=1)
        u[:, j] = (low > 0) & (low < e.size - 1)
    return u.mean(axis=1)


def _u_shares(table: MeasuredTable, fit: Any, seed: int = 0) -> dict[str, Any] | None:
    """U-shaped shares (data, sim) over the kernels the limit throttles, and over all,
    the model also measured as the data were (`measured_u_shares`)."""
    if table.knob != "power_limit_w":
        return None
    model = fit.predict(table)["energy_j"]
    knob = table.knob_values()
    names = np.array(table.kernel)
    e = table.time_s * table.power_w
    bound = set(limit_bound_kernels(table))
    data, sim, is_bound, per_model, per_knob, flat = [], [], [], [], [], []
    for k in table.kernels:
        rows = np.flatnonzero(names == k)
        data.append(u_shaped(e[rows], knob[rows]))
        sim.append(u_shaped(model[rows], knob[rows]))
        is_bound.append(k in bound)
        per_model.append(model[rows])
        per_knob.append(knob[rows])
        if k not in bound:
            flat.append(e[rows])
    d, s, b = np.array(data), np.array(sim), np.array(is_bound)
    cv = flat_noise_cv(flat)
    shares = measured_u_shares(per_model, per_knob, cv, seed=seed)
    lo, hi = np.quantile(shares, [0.025, 0.975])
    return {
        # Only where the limit throttles does the sweep give energy a shape: elsewhere
        # the data's minimum sits wherever the noise put it (see limit_bound_kernels).
        "bound": [float(np.mean(d[b])), float(np.mean(s[b]))],
        "bound_agree": float(np.mean(d[b] == s[b])),
        "bound_kernels": int(b.sum()),
        "all": [float(np.mean(d)), float(np.mean(s))],
        "all_kernels": len(d),
        "measured": {
            "noise_cv": cv,
            "draws": len(shares),
            "seed": seed,
            "mean": float(np.mean(shares)),
            "range95": [float(lo), float(hi)],
        },
    }


def judge(
    spec: cal.GpuData, table: MeasuredTable, kernels_holdout: bool, seed: int = 0
) -> dict[str, Any]:
    """Fit one GPU without its held-out clocks and judge errors, optimum and U shape
    (`seed`: of the measurement noise `measured_u_shares` draws)."""
    profile = load_profile(spec.model)
    start = replace(cal.a100_scaled(profile), p_core_w=profile.physics.p_core_w)
    used = cal.fit_table(table, spec)
    began = time.perf_counter()
    knob = used.knob_values()
    held = np.isin(knob, _held_knob_values(knob))
    options = fit_options(used, profile)
    fit = fit_sim(used.select(~held), profile, start=start, **options)
    errors = holdout_error(used, profile, "clocks", start=start, **options)
    checks = optimum_checks(used, fit)
    extra = [c.extra_energy for c in checks]
    row: dict[str, Any] = {
        "model": spec.model,
        "data": spec.label,
        "kernels": len(used.kernels),
        "settings": len(np.unique(knob)),
        "heldout": errors.to_dict(),
        "optimum_ok": sum(c.ok for c in checks),
        "optimum": [c.to_dict() for c in checks],
        "extra_median": float(np.median(extra)),
        "extra_max": float(np.max(extra)),
        "u_shape": _u_shares(used, fit, seed),
    }
    if kernels_holdout and len(used.kernels) >= 2:
        row["unseen_kernels"] = holdout_error(
            used, profile, "kernels", start=start, **options
        ).to_dict()
    row["seconds"] = time.perf_counter() - began
    return row


def _pct(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{100 * value:.{digits}f} %"


def print_rows(rows: list[dict[str, Any]]) -> None:
    """The held-out table, one line per fitted GPU."""
    headers = [
        "GPU",
        "data",
        "kern×set",
        "held-out T",
        "P",
        "E",
        "optimum ok",
        "extra E med",
        "max",
        "U-shaped data/sim",
        "unseen kernels E",
    ]
    body = []
    for r in rows:
        u = r["u_shape"]
        unseen = r.get("unseen_kernels")
        body.append(
            [
                r["model"],
                r["data"],
                f"{r['kernels']}×{r['settings']}",
                _pct(r["heldout"]["time_err"]),
                _pct(r["heldout"]["power_err"]),
                _pct(r["heldout"]["energy_err"]),
                f"{r['optimum_ok']}/{r['kernels']}",
                _pct(r["extra_median"]),
                _pct(r["extra_max"]),
                "—"
                if u is None
                else f"{100 * u['bound'][0]:.0f} / {100 * u['bound'][1]:.0f} % "
                f"({u['bound_kernels']})",
                "—" if unseen is None else _pct(unseen["energy_err"]),
            ]
        )
    common.print_table(headers, body, title="Fitted simulators on held-out clocks")


def _smoke_table() -> MeasuredTable:
    path = common.data_dir() / SMOKE_TABLE
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    names = list(dict.fromkeys(r["benchmark"] for r in rows))[:4]
    return MeasuredTable.from_rows(
        (
            {
                "kernel": r["benchmark"],
                "sm_clock_mhz": float(r["core_frequency"]),
                "time_s": float(r["time"]) * 1e-3,  # the file's time is per launch, in ms
                "power_w": float(r["average_power"]),
            }
            for r in rows
            if r["benchmark"] in names
        ),
        source=str(path),
    )


def main(argv: list[str] | None = None) -> int:
    parser = common.argument_parser(__doc__ or "", 3)
    parser.add_argument("--all", action="store_true", help="every fitted GPU model")
    parser.add_argument(
        "--gpus",
        metavar="MODEL[,MODEL]",
        help=f"only these models (default: {', '.join(DEFAULT_MODELS)}; with --all: all)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 on any FAIL")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the measurement noise drawn over the model's power-limit sweeps",
    )
    parser.add_argument("--no-save", action="store_true", help=f"do not write {NAME}.json")
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    verdicts = common.Verdicts()
    rows = []
    if common.enter_smoke(args):
        spec = cal.GpuData("Quadro-RTX-8000", "nv_dvfs_benchmark", "quadro_rtx8000", "NV-DVFS")
        rows.append(judge(spec, _smoke_table(), kernels_holdout=False))
    else:
        specs = _specs(args.all or bool(args.gpus))
        if args.gpus:
            wanted = args.gpus.split(",")
            unknown = sorted(set(wanted) - {s.model for s in specs})
            if unknown:
                parser.error(
                    f"--gpus: unknown model(s) {unknown}; choose from "
                    f"{', '.join(s.model for s in specs)}"
                )
            specs = [s for s in specs if s.model in wanted]
        for spec in specs:
            table = cal.load_gpu_table(spec)
            rows.append(judge(spec, table, spec.source == "nv_dvfs_benchmark", seed=args.seed))
            print(f"  fitted {spec.model} ({rows[-1]['seconds']:.0f} s)", file=sys.stderr)
    print_rows(rows)
    for r in rows:
        if r["data"] == "Perseus stages":
            ok = r["optimum_ok"] == r["kernels"]
            verdicts.check(ok, f"{r['model']}: optimum {r['optimum_ok']}/{r['kernels']}")
        if r["u_shape"] is not None:
            u = r["u_shape"]
            data, sim = u["bound"]
            ok = abs(sim - data) <= U_TOLERANCE
            verdicts.check(
                ok,
                f"{r['model']}: U-shaped {sim:.0%} sim vs {data:.0%} on the "
                f"{u['bound_kernels']} kernels the limit throttles (same call on "
                f"{u['bound_agree']:.0%}); all {u['all_kernels']}: {u['all'][1]:.0%} vs "
                f"{u['all'][0]:.0%}",
            )
            m = u["measured"]
            lo, hi = m["range95"]
            verdicts.check(
                lo <= u["all"][0] <= hi,
                f"{r['model']}: measured once per setting as the data were (energy noise "
                f"{m['noise_cv']:.1%}, the data's own on the kernels the limit leaves "
                f"alone; {m['draws']} draws, seed {m['seed']}), the sim is U-shaped on "
                f"{m['mean']:.0%} of all {u['all_kernels']} kernels (95 %: {lo:.0%}–"
                f"{hi:.0%}); data {u['all'][0]:.0%}",
            )
    for r in rows:
        missed = [c for c in r["optimum"] if not c["ok"]]
        for c in missed:
            print(
                f"  {r['model']} {c['kernel']}: fit {c['fit_setting']:g}, data "
                f"{c['data_setting']:g} ({c['steps']:+d} settings, "
                f"+{100 * c['extra_energy']:.1f} %)"
            )
    print(f"\n{time.perf_counter() - started:.0f} s")
    verdicts.summary()
    if not args.no_save:
        print(f"wrote {common.write_results(NAME, {'gpus': rows})}")
    return verdicts.exit_status(args.strict)


if __name__ == "__main__":
    common.run_main(main)
