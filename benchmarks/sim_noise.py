"""The simulated A100's run-to-run spread against the Kareus A100 repeats.

Data: ``shared/data/dvfs/kareus_attention_overlap/tp2-bs4-seq4096_{1200,default}_energy_
results.csv``: an attention/communication overlap kernel on two A100s, three repeats per
configuration measured back to back, at a locked 1200 MHz (236 configurations) and at the
default clock (640). Each repeat gives the time per iteration and the energy per
iteration; the table's figures are computed from them with
:func:`eopt.sim.repeats.repeat_figures`.

Sim: :func:`eopt.sim.repeats.simulate_repeats` runs the same protocol (three one-second
repeats after an idle configuration switch) on the simulated A100 with its default
noise (:class:`eopt.sim.mechanisms.NoiseModel`), once per seed. Columns: the median
energy CV and time CV of the repeats, the share of configurations whose repeat 0 is the
slowest, and repeat 0's energy against the later repeats (the first-repeat drift).

Target: the simulator's energy CV within ×0.5–×2 of the Kareus figure at both clocks,
for every seed.

    python3 benchmarks/sim_noise.py                     # seeds 1,2,3
    python3 benchmarks/sim_noise.py --seeds 4,5 --rounds 5
    python3 benchmarks/sim_noise.py --write-summary     # refresh eopt/sim/data's figures
    python3 benchmarks/sim_noise.py --smoke             # the kept figures, one short seed
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

from eopt.sim.repeats import RepeatFigures, reference_figures, repeat_figures, simulate_repeats

NAME = "sim_noise"
KAREUS = Path("dvfs") / "kareus_attention_overlap"  # under common.data_dir()
SUMMARY = common.REPO_DIR / "eopt" / "sim" / "data" / "kareus-a100-repeats.yaml"
SETTINGS: dict[str, float | None] = {"1200": 1200.0, "default": None}
LOW, HIGH = 0.5, 2.0


def read_kareus(path: Path) -> RepeatFigures:
    """Figures of one Kareus log (``<i>:time (s)``, ``<i>:total energy (J)`` columns)."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    repeats = sorted({int(k.split(":")[0]) for k in rows[0] if k.split(":")[0].isdigit()})
    energy = [[float(r[f"{i}:total energy (J)"]) for i in repeats] for r in rows]
    times = [[float(r[f"{i}:time (s)"]) for i in repeats] for r in rows]
    return repeat_figures(energy, times)


def real_figures() -> tuple[dict[str, RepeatFigures], str]:
    """The Kareus figures: from the logs, or (smoke run) the package's kept summary."""
    if common.is_smoke():
        return reference_figures(), f"kept summary {SUMMARY.relative_to(common.REPO_DIR)}"
    folder = common.data_dir() / KAREUS
    out = {
        key: read_kareus(folder / f"tp2-bs4-seq4096_{key}_energy_results.csv") for key in SETTINGS
    }
    return out, str(folder)


def write_summary(figures: dict[str, RepeatFigures]) -> None:
    """Write the figures the tests compare the simulator with."""
    header = (
        "# Kareus A100 repeats: median figures over configurations, computed by\n"
        "# benchmarks/sim_noise.py --write-summary (eopt.sim.repeats.repeat_figures) from\n"
        "# ml-energy/kareus @ 9b64d9e92c66c8c9e0982fe75d85cec0df23b6fe,\n"
        "# tests/fuser/attention/logs/tp2-bs4-seq4096/{1200,default}/energy_results.csv\n"
        "# (three back-to-back repeats per configuration; 1200 = SM clock locked at 1200 MHz).\n"
    )
    body = {"settings": {k: v.as_dict() for k, v in figures.items()}}
    SUMMARY.write_text(header + yaml.safe_dump(body, sort_keys=True), encoding="utf-8")
    print(f"wrote {SUMMARY}")


def _pct(value: float, digits: int = 2) -> str:
    return f"{100 * value:.{digits}f} %"


def main(argv: list[str] | None = None) -> int:
    parser = common.argument_parser(__doc__ or "", 4)
    parser.add_argument("--seeds", default="1,2,3", help="comma list of seeds (1,2,3)")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the configurations")
    parser.add_argument("--write-summary", action="store_true", help=f"write {SUMMARY.name}")
    parser.add_argument("--strict", action="store_true", help="exit 1 on any FAIL")
    parser.add_argument("--no-save", action="store_true", help=f"do not write {NAME}.json")
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    if common.enter_smoke(args):
        args.seeds, args.rounds, args.write_summary = "1", 1, False
    seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    started = time.perf_counter()
    real, source = real_figures()
    print(f"real: {source}")
    if args.write_summary:
        write_summary(real)
    headers = [
        "setting",
        "seed",
        "energy CV real",
        "sim",
        "sim/real",
        "time CV real",
        "sim",
        "rep 0 slowest real",
        "sim",
        "rep 0 energy real",
        "sim",
        "verdict",
    ]
    rows: list[list[Any]] = []
    verdicts = common.Verdicts()
    results: dict[str, Any] = {"rounds": args.rounds, "settings": {}}
    for key, clock in SETTINGS.items():
        ref = real[key]
        for seed in seeds:
            energy, times = simulate_repeats(clock, seed, rounds=args.rounds)
            sim = repeat_figures(energy, times)
            ratio = sim.energy_cv / ref.energy_cv
            ok = LOW <= ratio <= HIGH
            verdicts.lines.append((ok, f"{key}, seed {seed}: energy CV ×{ratio:.2f}"))
            rows.append(
                [
                    key,
                    seed,
                    _pct(ref.energy_cv),
                    _pct(sim.energy_cv),
                    f"×{ratio:.2f}",
                    _pct(ref.time_cv, 3),
                    _pct(sim.time_cv, 3),
                    _pct(ref.first_slowest, 0),
                    _pct(sim.first_slowest, 0),
                    _pct(ref.first_energy_offset),
                    _pct(sim.first_energy_offset),
                    "PASS" if ok else "FAIL",
                ]
            )
            results["settings"].setdefault(key, {"real": ref.as_dict(), "sim": {}})
            results["settings"][key]["sim"][str(seed)] = sim.as_dict()
    common.print_table(
        headers, rows, title=f"Repeat spread, target energy CV ×{LOW:g}–×{HIGH:g} of the data"
    )
    spread = [r for r in rows if r[0] == "default"]
    if spread:
        print(f"default clock, sim energy CV over seeds: {', '.join(r[3] for r in spread)}")
    return common.finish(verdicts, args, NAME, results, started)


if __name__ == "__main__":
    common.run_main(main)
