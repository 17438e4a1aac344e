"""How long `eopt COMMAND --help` takes to start, against `python -c "import click, rich"`.

Each command's help runs in a fresh interpreter, as the console script runs it; the
reference is an interpreter that imports only click and rich, what any command line
built on them pays. The runs alternate (reference, then every command, N rounds), so
that a busy moment of the machine falls on all of them alike; each time is the median
of its N runs. Printed: the median per command, in ms, and its ratio to the reference.

Bytecode is cached as an installed eopt has it: every line runs once first, uncounted,
writing its compiled modules to a temporary folder (PYTHONPYCACHEPREFIX) that the
counted runs read, whatever PYTHONDONTWRITEBYTECODE says.

Examples:
    python3 benchmarks/startup.py              # 7 rounds, every command
    python3 benchmarks/startup.py --runs 15
    python3 benchmarks/startup.py --smoke      # 1 round, a few commands, no targets

Target: `eopt --help` within 2× the reference (median of at least 5 alternating runs).
The other commands are shown, not judged. Results go to benchmarks/results/startup.json
(not with --smoke or --no-save).
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

#: `eopt --help` may take at most this many times the reference.
TARGET_RATIO = 2.0
TARGET_COMMAND = "eopt --help"
MIN_RUNS = 5

REFERENCE = "python -c 'import click, rich'"
REFERENCE_ARGV = [sys.executable, "-c", "import click, rich"]
# What the `eopt` console script runs, without depending on which `eopt` is on PATH.
EOPT = [sys.executable, "-c", "import sys; from eopt.cli import main; sys.exit(main())"]

#: Every command's help, in the order `eopt --help` lists them.
COMMANDS = (
    (),
    ("demo",),
    ("sweep",),
    ("measure",),
    ("attribute",),
    ("kokkos",),
    ("compare",),
    ("frontier",),
    ("compose",),
    ("check",),
    ("plan",),
    ("plan", "pipeline"),
    ("solve",),
    ("apply",),
    ("reset",),
    ("report",),
    ("trace",),
    ("sim",),
    ("sim", "fit"),
)
SMOKE_COMMANDS = ((), ("attribute",), ("compare",))


def label(words: tuple[str, ...]) -> str:
    """``("plan", "pipeline")`` → ``eopt plan pipeline --help``."""
    return " ".join(("eopt", *words, "--help"))


def wall_s(argv: list[str], env: Mapping[str, str]) -> float:
    """Seconds from starting ``argv`` to its exit (output discarded).

    Raises:
        RuntimeError: when it exits with a non-zero status, with its last error line.
    """
    started = time.perf_counter()
    done = subprocess.run(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env),
        check=False,
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"`{' '.join(argv)}` exited with status {done.returncode}: {last}")
    return took


def measure(commands: tuple[tuple[str, ...], ...], runs: int) -> dict[str, list[float]]:
    """Wall times per command line (the reference first), ``runs`` alternating rounds."""
    times: dict[str, list[float]] = {REFERENCE: [], **{label(c): [] for c in commands}}
    lines = [(REFERENCE, REFERENCE_ARGV)] + [(label(c), [*EOPT, *c, "--help"]) for c in commands]
    with tempfile.TemporaryDirectory(prefix="eopt-startup-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        for _, argv in lines:  # compiles every module once, and reads them from disk
            wall_s(argv, env)
        for _ in range(runs):
            for name, argv in lines:
                times[name].append(wall_s(argv, env))
    return times


def main() -> int:
    parser = common.argument_parser(__doc__, 2)
    parser.add_argument(
        "--runs", type=int, default=7, help=f"alternating rounds (at least {MIN_RUNS})"
    )
    common.add_smoke_option(parser)
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target FAILs")
    parser.add_argument(
        "--no-save", action="store_true", help="do not write benchmarks/results/startup.json"
    )
    args = parser.parse_args()
    smoke = common.enter_smoke(args)  # one round of a few commands; nothing saved
    if not smoke and args.runs < MIN_RUNS:
        raise ValueError(f"--runs {args.runs}: the target needs at least {MIN_RUNS} runs")
    runs = 1 if smoke else args.runs
    commands = SMOKE_COMMANDS if smoke else COMMANDS
    print(f"{runs} alternating run(s) of {len(commands)} command(s) and the reference", flush=True)
    load = os.getloadavg()[0]
    times = measure(commands, runs)
    reference = statistics.median(times[REFERENCE])
    rows = []
    for name, samples in times.items():
        median = statistics.median(samples)
        target = f"≤ {TARGET_RATIO:g}×" if name == TARGET_COMMAND else ""
        rows.append((name, f"{1e3 * median:.1f}", f"{median / reference:.2f}", target))
    common.print_table(
        ("command", "median ms", "× reference", "target"),
        rows,
        title=f"Start-up, median of {runs} run(s) (reference: {REFERENCE})",
    )
    verdicts = common.Verdicts()
    ratio = statistics.median(times[TARGET_COMMAND]) / reference
    if smoke:
        print(f"\nsmoke run: {TARGET_COMMAND} at {ratio:.2f}× the reference (not judged)")
        return 0
    verdicts.check(
        ratio <= TARGET_RATIO,
        f"{TARGET_COMMAND}: {ratio:.2f}× `{REFERENCE}` (target ≤ {TARGET_RATIO:g}×)",
    )
    if not args.no_save:
        path = common.write_results(
            "startup",
            {
                "runs": runs,
                "reference": REFERENCE,
                "reference_median_s": reference,
                "commands": {
                    name: {"median_s": statistics.median(s), "runs_s": s}
                    for name, s in times.items()
                    if name != REFERENCE
                },
                "target": {
                    "command": TARGET_COMMAND,
                    "max_ratio": TARGET_RATIO,
                    "ratio": ratio,
                    "pass": ratio <= TARGET_RATIO,
                },
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                # Other work on the machine slows every line alike; the ratios stand.
                "load_average_1min": load,
            },
        )
        print(f"wrote {path}")
    return verdicts.exit_status(args.strict)


if __name__ == "__main__":
    common.run_main(main)
