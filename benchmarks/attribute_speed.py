"""`eopt attribute` against energy-dashboard-for-kokkos on one dashboard-v1 trace, and the readers.

Each size's trace (3 levels of nesting: steps > phases > kernels; 20 ms GPU samples) is
written once; then eopt and the peer run on it in alternation (eopt, peer, eopt, peer …),
each in a fresh process, so a busy moment of the machine falls on both alike. Printed per
size: the median whole-process CPU time (user + system) and peak RSS of each, their
ratios, the largest difference between the two tools' per-region energies, and the
largest relative difference from the numbers of the committed code (git HEAD, unpacked
and run once per size up to ``--head-max`` events). A trace folder's ``events.csv`` above
4 MiB is streamed (read a block at a time), so ``--events 1e7`` shows memory that does
not grow with the number of events.

The peer is the dashboard's own binary where one is found (`../shared/peers/kokkos-energy`,
or `--dashboard PATH`), or built with cargo from `--dashboard-src DIR` against Debian's
crates (`/usr/share/cargo/registry`); otherwise an in-repository vectorized numpy version
of the same rule (np.loadtxt, a cumulative trapezoid, edge interpolation, exclusive
energy by bincount), and the table says which.

Also measured, in this process: an nvidia-smi CSV of 360 000 rows read by eopt's power-CSV
reader; a library of 10 080 signatures read by `read_library`, with the standard
library's `json.loads` against `orjson.loads` on its lines (where orjson is installed);
and `eopt attribute` on the DBSCAN run of tests/data against its own work (reading,
attributing and printing, with the imports these need, timed inside one process).

Examples:
    python3 benchmarks/attribute_speed.py                   # 1e4, 1e5, 1e6 events, 3 rounds
    python3 benchmarks/attribute_speed.py --events 1e6,1e7 --rounds 1 --no-save
    python3 benchmarks/attribute_speed.py --smoke           # 1e4 events, 1 round, no targets

Targets: at 1e6 events eopt's CPU ≤ the peer's and its peak RSS ≤ 2× the peer's, with
per-region energies equal to the peer's within its printed precision (1e-6 J) and to git
HEAD's to 1e-9 relative; at 5e6 events or more (with 1e6 in the same run) a peak RSS ≤
1.5× the 1e6 one; the nvidia-smi CSV in ≤ 1 s; the library in ≤ 1 s; the DBSCAN run in
≤ 1.5× its own work.
Results go to benchmarks/results/attribute_speed.json (not with --smoke or --no-save).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

PEER_NAME = "kokkos-energy"
PEER_PLACES = (
    common.REPO_DIR.parent / "shared" / "peers" / PEER_NAME,
    common.REPO_DIR / "shared" / "peers" / PEER_NAME,
)
EOPT = [sys.executable, "-c", "import sys; from eopt.cli import main; sys.exit(main())"]
DBSCAN_RUN = common.TEST_DATA_DIR / "kokkos_dbscan_h100" / "fdbscan" / "illyad-2495425"
#: The dashboard prints energies with 6 decimals.
PEER_PRECISION_J = 1e-6
TARGET_EVENTS = 1_000_000
KERNELS_PER_PHASE = 8
PHASES = ("forward", "backward", "optimizer", "allreduce")


def write_trace(folder: Path, n_events: int, seed: int = 0) -> int:
    """A dashboard-v1 trace of about ``n_events`` events; returns how many it holds.

    Steps (top level) hold four phases, each holding eight kernels; 20 µs between
    events; GPU power sampled every 20 ms.
    """
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    t0, gap = 1_700_000_000_000_000_000, 20_000
    per_step = 1 + len(PHASES) * (1 + KERNELS_PER_PHASE)
    steps = max(1, n_events // per_step)
    kernel_ns = rng.integers(50_000, 400_000, size=(steps, len(PHASES), KERNELS_PER_PHASE))
    phase_ns = kernel_ns.sum(axis=2) + gap * (KERNELS_PER_PHASE + 1)
    step_ns = phase_ns.sum(axis=1) + gap * (len(PHASES) + 1)
    step_start = t0 + gap + np.concatenate([[0], np.cumsum(step_ns + gap)[:-1]])
    lines = ["id,parent_id,name,category,start_ns,end_ns"]
    k = 1
    for s in range(steps):
        sid, a = k, int(step_start[s])
        lines.append(f"{sid},0,step_{s % 4},USER_REGION,{a},{a + int(step_ns[s])}")
        k += 1
        a += gap
        for p, phase in enumerate(PHASES):
            pid, b = k, a + int(phase_ns[s, p])
            lines.append(f"{pid},{sid},{phase},USER_REGION,{a},{b}")
            k += 1
            c = a + gap
            for j in range(KERNELS_PER_PHASE):
                d = c + int(kernel_ns[s, p, j])
                name = f"Kokkos::kernel_{(p * KERNELS_PER_PHASE + j) % 16}"
                lines.append(f"{k},{pid},{name},PARALLEL_FOR,{c},{d}")
                k += 1
                c = d + gap
            a = b + gap
    (folder / "events.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    end = int(step_start[-1] + step_ns[-1]) + 2 * gap
    times = np.arange(t0, end + 20_000_000, 20_000_000)
    power = 200 + 100 * np.sin(np.arange(times.size) / 7.0) + rng.normal(0, 5, times.size)
    rows = "".join(
        f"{t},GPU,0,{w:.6f}\n" for t, w in zip(times.tolist(), power.tolist(), strict=True)
    )
    (folder / "power_samples.csv").write_text(
        "timestamp_ns,domain,device_id,power_watts\n" + rows, encoding="utf-8"
    )
    meta = {"format": "energy-dashboard-for-kokkos", "version": 1, "spec_version": "1"}
    (folder / "metadata.json").write_text(json.dumps(meta), encoding="utf-8")
    return k - 1


def reference_attribute(folder: Path) -> dict[str, tuple[float, float]]:
    """The rule for traces that nest without overlap, vectorized: per region name,
    (inclusive, exclusive) J. The peer when no dashboard binary can be had."""
    ev = np.loadtxt(
        folder / "events.csv",
        delimiter=",",
        skiprows=1,
        usecols=(0, 1, 4, 5),
        dtype=np.int64,
        comments=None,
        ndmin=2,
    )
    names = np.loadtxt(
        folder / "events.csv",
        delimiter=",",
        skiprows=1,
        usecols=2,
        dtype=str,
        comments=None,
        ndmin=1,
    )
    pw = np.loadtxt(
        folder / "power_samples.csv",
        delimiter=",",
        skiprows=1,
        usecols=(0, 3),
        dtype=np.float64,
        comments=None,
        ndmin=2,
    )
    t_ns = np.loadtxt(
        folder / "power_samples.csv",
        delimiter=",",
        skiprows=1,
        usecols=0,
        dtype=np.int64,
        comments=None,
        ndmin=1,
    )
    origin = min(int(t_ns[0]), int(ev[:, 2].min()))
    t = (t_ns - origin) * 1e-9
    cum = np.concatenate([[0.0], np.cumsum(0.5 * (pw[1:, 1] + pw[:-1, 1]) * np.diff(t))])

    def energy_at(x: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(t, x, side="right") - 1, 0, t.size - 2)
        p = pw[i, 1] + (pw[i + 1, 1] - pw[i, 1]) * (x - t[i]) / (t[i + 1] - t[i])
        return cum[i] + 0.5 * (x - t[i]) * (pw[i, 1] + p)

    incl = energy_at((ev[:, 3] - origin) * 1e-9) - energy_at((ev[:, 2] - origin) * 1e-9)
    row = {int(i): k for k, i in enumerate(ev[:, 0].tolist())}
    parent = np.array([row.get(int(p), -1) for p in ev[:, 1].tolist()])
    has = parent >= 0
    excl = incl - np.bincount(parent[has], weights=incl[has], minlength=incl.size)
    uniq, inverse = np.unique(names, return_inverse=True)
    by_incl = np.bincount(inverse, weights=incl)
    by_excl = np.bincount(inverse, weights=excl)
    return {str(n): (float(a), float(b)) for n, a, b in zip(uniq, by_incl, by_excl, strict=True)}


def _reference_main(folder: str) -> None:
    result = reference_attribute(Path(folder))
    for name, (a, b) in result.items():
        print(f"│ {name} │ - │ - │ - │ {a:.6f} │ {b:.6f} │")


def find_peer(args: Any) -> tuple[list[str], str]:
    """(command prefix taking a trace folder, what it is)."""
    if args.dashboard:
        return [args.dashboard, "analyze"], f"energy-dashboard-for-kokkos ({args.dashboard})"
    for place in PEER_PLACES:
        if place.is_file() and os.access(place, os.X_OK):
            return [str(place), "analyze"], f"energy-dashboard-for-kokkos ({place})"
    built = build_peer(args.dashboard_src) if args.dashboard_src else None
    if built:
        return [built, "analyze"], f"energy-dashboard-for-kokkos (built from {args.dashboard_src})"
    script = Path(__file__).resolve()
    return (
        [sys.executable, str(script), "--reference-of"],
        "the in-repository numpy reference of the rule (no dashboard binary or cargo build)",
    )


def build_peer(src: str) -> str | None:
    """The dashboard built with cargo against Debian's crates; None when it cannot be."""
    registry = Path("/usr/share/cargo/registry")
    if shutil.which("cargo") is None or not registry.is_dir() or not Path(src).is_dir():
        return None
    home = Path(tempfile.mkdtemp(prefix="eopt-cargo-"))
    (home / "config.toml").write_text(
        "[source.crates-io]\nreplace-with = 'debian'\n[source.debian]\n"
        f"directory = '{registry}'\n[net]\noffline = true\n",
        encoding="utf-8",
    )
    env = {**os.environ, "CARGO_HOME": str(home)}
    done = subprocess.run(
        ["cargo", "build", "--release", "--offline"], cwd=src, env=env, capture_output=True
    )
    binary = Path(src) / "target" / "release" / PEER_NAME
    return str(binary) if done.returncode == 0 and binary.is_file() else None


#: GNU time measures a process's peak RSS from outside: a process forked from this one
#: would report at least this one's (Linux keeps the larger of the two at exec).
GNU_TIME = Path("/usr/bin/time")


def run_measured(argv: list[str], stdout: Any = subprocess.DEVNULL) -> tuple[float, float, int]:
    """(CPU s, wall s, peak RSS MiB) of one process, which must exit 0."""
    with tempfile.NamedTemporaryFile(mode="r", suffix=".rss") as rss_file:
        timed = GNU_TIME.is_file()
        full = [str(GNU_TIME), "-f", "%M", "-o", rss_file.name, *argv] if timed else argv
        started = time.perf_counter()
        proc = subprocess.Popen(full, stdout=stdout, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise RuntimeError(f"{' '.join(argv[:4])} …: exit {code}: {err[-500:]}")
        rss_kib = int(rss_file.read().split()[-1]) if timed else usage.ru_maxrss
    # CPU of the process and of what it waited for (GNU time's own is about 1 ms).
    return usage.ru_utime + usage.ru_stime, wall, rss_kib // 1024


#: Traces up to this many events are also attributed by the committed code (git HEAD),
#: whose numbers eopt's must equal; larger ones need its memory (about 3 GiB at 1e7).
HEAD_MAX_EVENTS = 2_000_000
#: eopt's numbers against the committed code's: equal to this relative difference.
HEAD_RTOL = 1e-9


def head_tree(tmp: Path) -> Path | None:
    """The committed code (git HEAD's eopt and solvers) unpacked in ``tmp``; None when
    there is no git checkout."""
    out = tmp / "head"
    out.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(common.REPO_DIR), "archive", "HEAD", "eopt", "solvers"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        return None
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def head_difference(ours: dict[str, Any], theirs: dict[str, Any]) -> float:
    """The largest relative difference between two ``eopt.attribution/1`` results' numbers
    (total, outside, per region and per series); inf when their regions differ."""
    if [r["name"] for r in ours["regions"]] != [r["name"] for r in theirs["regions"]]:
        return float("inf")
    pairs = [
        (ours["total_energy_j"], theirs["total_energy_j"]),
        (ours["outside_energy_j"], theirs["outside_energy_j"]),
        (ours["total_time_s"], theirs["total_time_s"]),
    ]
    for a, b in zip(ours["regions"], theirs["regions"], strict=True):
        if (a["calls"], a["depth"], a["flags"]) != (b["calls"], b["depth"], b["flags"]):
            return float("inf")
        pairs += [(a[k], b[k]) for k in ("inclusive_energy_j", "exclusive_energy_j", "time_s")]
        pairs += [(a["by_series"][k], b["by_series"].get(k)) for k in a["by_series"]]
    for a, b in zip(ours["series"], theirs["series"], strict=True):
        pairs.append((a["energy_j"], b["energy_j"]))
    worst = 0.0
    for x, y in pairs:
        if x is None or y is None:
            if x is not y:
                return float("inf")
            continue
        scale = max(abs(x), abs(y))
        worst = max(worst, abs(x - y) / scale if scale else 0.0)
    return worst


def peer_energies(text: str) -> dict[str, tuple[float, float]]:
    """(inclusive, exclusive) J per region of the peer's table."""
    out = {}
    for line in text.splitlines():
        m = re.match(
            r"^│\s*(\S.*?)\s*│\s*\S+\s*│\s*\S+\s*│\s*\S+\s*│\s*([\d.]+)\s*│\s*([\d.]+)", line
        )
        if m and m.group(1) != "Block / Kernel":
            out[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return out


def compare_sizes(args: Any, peer: list[str], verdicts: common.Verdicts) -> list[dict[str, Any]]:
    rows, results = [], []
    with tempfile.TemporaryDirectory(prefix="eopt-attr-") as tmp:
        head = head_tree(Path(tmp))
        for n in args.events:
            folder = Path(tmp) / f"trace_{n}"
            # Written by a child process: this one stays small, and so do the processes it
            # starts (a forked child begins with its parent's resident memory).
            done = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--write-trace",
                    str(folder),
                    str(n),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            held = int(done.stdout.strip())
            out_json = Path(tmp) / f"eopt_{n}.json"
            eopt_argv = [*EOPT, "attribute", str(folder), "--json", "-o", str(out_json), "--force"]
            eopt_runs, peer_runs = [], []
            peer_text = ""
            for _ in range(args.rounds):
                eopt_runs.append(run_measured(eopt_argv))
                with tempfile.TemporaryFile() as fh:
                    peer_runs.append(run_measured([*peer, str(folder)], stdout=fh))
                    fh.seek(0)
                    peer_text = fh.read().decode(errors="replace")
            ours = json.loads(out_json.read_text(encoding="utf-8"))
            head_diff = None
            if head is not None and held <= args.head_max:
                head_json = Path(tmp) / f"head_{n}.json"
                subprocess.run(
                    [*eopt_argv[:-3], "-o", str(head_json), "--force"],
                    env={**os.environ, "PYTHONPATH": str(head)},
                    stdout=subprocess.DEVNULL,
                    check=True,
                )
                head_diff = head_difference(ours, json.loads(head_json.read_text("utf-8")))
                head_json.unlink()
            theirs = peer_energies(peer_text)
            # The dashboard's own rows for the energy outside every event and the total.
            mine = {
                r["name"]: (r["inclusive_energy_j"], r["exclusive_energy_j"])
                for r in ours["regions"]
            }
            if "Idle (outside events)" in theirs:
                mine["Idle (outside events)"] = (ours["outside_energy_j"],) * 2
            if "Total Trace" in theirs:
                mine["Total Trace"] = (ours["total_energy_j"], theirs["Total Trace"][1])
            matched = set(k for k in mine if k in theirs) == set(
                k for k in theirs if not k.startswith(("Idle", "Total"))
            ) | {k for k in ("Idle (outside events)", "Total Trace") if k in theirs}
            worst = max(
                (
                    abs(x - y)
                    for k, v in mine.items()
                    if k in theirs
                    for x, y in zip(v, theirs[k], strict=True)
                ),
                default=float("inf"),
            )
            e_cpu = statistics.median(c for c, _, _ in eopt_runs)
            p_cpu = statistics.median(c for c, _, _ in peer_runs)
            e_rss = max(m for _, _, m in eopt_runs)
            p_rss = max(m for _, _, m in peer_runs)
            rows.append(
                (
                    f"{held:.0e}",
                    f"{e_cpu:.2f}",
                    f"{p_cpu:.2f}",
                    f"{e_cpu / p_cpu:.2f}",
                    e_rss,
                    p_rss,
                    f"{e_rss / p_rss:.2f}",
                    f"{worst:.1e}",
                    "-" if head_diff is None else f"{head_diff:.1e}",
                )
            )
            results.append(
                {
                    "events": held,
                    "eopt_cpu_s": e_cpu,
                    "peer_cpu_s": p_cpu,
                    "eopt_rss_mib": e_rss,
                    "peer_rss_mib": p_rss,
                    "max_region_diff_j": worst,
                    "regions_matched": matched,
                    "head_max_rel_diff": head_diff,
                    "rounds": args.rounds,
                }
            )
            if head_diff is not None and not common.is_smoke():
                verdicts.check(
                    head_diff <= HEAD_RTOL,
                    f"{held:.0e} events: numbers equal to git HEAD's "
                    f"(max relative diff {head_diff:.1e} ≤ {HEAD_RTOL:.0e})",
                )
            if not common.is_smoke() and 0.9 * TARGET_EVENTS <= held < 2 * TARGET_EVENTS:
                verdicts.check(
                    e_cpu <= p_cpu, f"{held:.0e} events: CPU {e_cpu / p_cpu:.2f}× peer ≤ 1"
                )
                verdicts.check(
                    e_rss <= 2 * p_rss, f"{held:.0e} events: RSS {e_rss / p_rss:.2f}× ≤ 2"
                )
            if not common.is_smoke():
                verdicts.check(
                    matched and worst <= PEER_PRECISION_J,
                    f"{held:.0e} events: regions equal to the peer's (max diff {worst:.1e} J)",
                )
    common.print_table(
        [
            "events",
            "eopt CPU s",
            "peer CPU s",
            "CPU ratio",
            "eopt RSS MiB",
            "peer RSS MiB",
            "RSS ratio",
            "max diff J",
            "vs HEAD rel",
        ],
        rows,
        "eopt attribute vs the peer (median CPU of alternating runs; peak RSS)",
    )
    return results


def write_smi_csv(path: Path, rows: int) -> None:
    """An nvidia-smi ``--query-gpu=timestamp,power.draw --format=csv -lms 20`` log."""
    rng = np.random.default_rng(1)
    start = dt.datetime(2024, 5, 1, 12, 0, 0)
    ms = np.arange(rows) * 20 + rng.integers(0, 4, rows)
    watts = rng.uniform(60, 400, rows)
    lines = ["timestamp, power.draw [W]"]
    for m, w in zip(ms.tolist(), watts.tolist(), strict=True):
        stamp = (start + dt.timedelta(milliseconds=m)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        lines.append(f"{stamp}, {w:.2f} W")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_library(path: Path, n: int) -> None:
    """``n`` signatures like a sweep's, each with five runs of 20 power readings."""
    rng = np.random.default_rng(2)
    lines = []
    for i in range(n):
        runs = [
            {
                "energy_j": float(rng.uniform(1, 100)),
                "time_s": float(rng.uniform(0.01, 1)),
                "power_w": rng.uniform(50, 400, 20).round(3).tolist(),
            }
            for _ in range(5)
        ]
        sig = {
            "schema": "eopt.signature/1",
            "name": f"kernel_{i // 12}",
            "impl": "default",
            "devices": [],
            "workload": {"n": 1024 * (1 + i % 7)},
            "op_point": {"sm_clock_mhz": float(900 + 60 * (i % 12))},
            "time": float(rng.uniform(0.001, 0.1)),
            "dynamic_energy": float(rng.uniform(0.1, 9)),
            "static_power": float(rng.uniform(50, 90)),
            "var_time": 1e-9,
            "var_energy": 1e-5,
            "meta": {"runs": runs},
        }
        lines.append(json.dumps(sig, sort_keys=True))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def cpu_of(fn: Any) -> tuple[Any, float]:
    started = time.process_time()
    result = fn()
    return result, time.process_time() - started


def readers(args: Any, verdicts: common.Verdicts) -> dict[str, Any]:
    from eopt.model.library import read_library
    from eopt.model.trace_io import read_traces

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="eopt-readers-") as tmp:
        smi = Path(tmp) / "smi.csv"
        write_smi_csv(smi, args.smi_rows)
        traces, smi_s = cpu_of(lambda: read_traces(smi))
        samples = int(traces[0].series[0].times_ns.size)
        lib = Path(tmp) / "library.jsonl"
        write_library(lib, args.signatures)
        sigs, lib_s = cpu_of(lambda: read_library(lib))
        texts = lib.read_text(encoding="utf-8").splitlines()
        _, json_s = cpu_of(lambda: [json.loads(t) for t in texts])
        try:
            import orjson
        except ImportError:
            orjson_s = None
        else:
            _, orjson_s = cpu_of(lambda: [orjson.loads(t) for t in texts])
    common.print_table(
        ["what", "size", "CPU s", "note"],
        [
            ("nvidia-smi CSV", f"{samples} rows", f"{smi_s:.3f}", "read_traces"),
            ("signature library", f"{len(sigs)} signatures", f"{lib_s:.3f}", "read_library"),
            ("  its lines, json.loads", f"{len(texts)} lines", f"{json_s:.3f}", "standard library"),
            (
                "  its lines, orjson.loads",
                f"{len(texts)} lines",
                "-" if orjson_s is None else f"{orjson_s:.3f}",
                "not installed" if orjson_s is None else "orjson",
            ),
        ],
        "readers (CPU in this process)",
    )
    out.update(
        smi_rows=samples,
        smi_cpu_s=smi_s,
        signatures=len(sigs),
        library_cpu_s=lib_s,
        json_loads_cpu_s=json_s,
        orjson_loads_cpu_s=orjson_s,
    )
    if not common.is_smoke():
        verdicts.check(smi_s <= 1.0, f"nvidia-smi CSV of {samples} rows in {smi_s:.2f} s ≤ 1 s")
        verdicts.check(lib_s <= 1.0, f"library of {len(sigs)} signatures in {lib_s:.2f} s ≤ 1 s")
    return out


_WORK = """
import sys, time
t = time.process_time()
from eopt.model.trace_io import read_traces
from eopt.attribute.engine import attribute_all
from eopt.report.attribution_table import render_attribution
from rich.console import Console
traces = read_traces(sys.argv[1])
result = attribute_all(traces, source=sys.argv[1], calls=False)
render_attribution(result, Console(file=open("/dev/null", "w")), kernels=True)
print(time.process_time() - t)
"""


def startup(args: Any, verdicts: common.Verdicts) -> dict[str, Any]:
    whole, work = [], []
    for _ in range(args.rounds):
        whole.append(run_measured([*EOPT, "attribute", str(DBSCAN_RUN)])[0])
        done = subprocess.run(
            [sys.executable, "-c", _WORK, str(DBSCAN_RUN)],
            capture_output=True,
            text=True,
            check=True,
        )
        work.append(float(done.stdout.strip().splitlines()[-1]))
    w, k = statistics.median(whole), statistics.median(work)
    common.print_table(
        ["command", "whole process CPU s", "its work CPU s", "ratio"],
        [("eopt attribute DBSCAN run", f"{w:.3f}", f"{k:.3f}", f"{w / k:.2f}")],
        "start-up (work: reading, attributing, printing, with the imports they need)",
    )
    if not common.is_smoke():
        verdicts.check(
            w <= 1.5 * k, f"eopt attribute on the DBSCAN run: {w / k:.2f}× its work ≤ 1.5"
        )
    return {"dbscan_whole_cpu_s": w, "dbscan_work_cpu_s": k}


def main() -> int:
    parser = common.argument_parser(__doc__, 5)
    parser.add_argument("--events", default="1e4,1e5,1e6", help="trace sizes (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs per size")
    parser.add_argument("--smi-rows", type=int, default=360_000)
    parser.add_argument("--signatures", type=int, default=10_080)
    parser.add_argument("--dashboard", help="the dashboard's kokkos-energy binary")
    parser.add_argument("--dashboard-src", help="the dashboard's source, to build with cargo")
    parser.add_argument(
        "--head-max",
        type=float,
        default=HEAD_MAX_EVENTS,
        help="compare with git HEAD's numbers up to this many events (default %(default).0e)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when any line FAILs")
    parser.add_argument("--no-save", action="store_true", help="do not write the results")
    common.add_smoke_option(parser)
    args = parser.parse_args()
    if common.enter_smoke(args):
        args.events, args.rounds, args.smi_rows, args.signatures = "1e4", 1, 5000, 200
    args.events = [int(float(x)) for x in args.events.split(",")]
    verdicts = common.Verdicts()
    peer, what = find_peer(args)
    print(f"peer: {what}", flush=True)
    results: dict[str, Any] = {"peer": what, "sizes": compare_sizes(args, peer, verdicts)}
    results.update(readers(args, verdicts))
    results.update(startup(args, verdicts))
    sizes = results["sizes"]
    if len(sizes) >= 2:
        print(
            "\nmemory (peak RSS, MiB): "
            + ", ".join(f"{r['eopt_rss_mib']} at {r['events']:.0e} events" for r in sizes)
            + " (a trace folder is streamed above 4 MiB of events.csv)"
        )
        # Streaming: ten times the events in about the same memory.
        base = [r for r in sizes if 0.9 * TARGET_EVENTS <= r["events"] < 2 * TARGET_EVENTS]
        large = [r for r in sizes if r["events"] >= 5 * TARGET_EVENTS]
        if base and large and not common.is_smoke():
            a, b = base[-1], large[-1]
            verdicts.check(
                b["eopt_rss_mib"] <= 1.5 * a["eopt_rss_mib"],
                f"{b['events']:.0e} events streamed in {b['eopt_rss_mib']} MiB ≤ 1.5× the "
                f"{a['events']:.0e}-event {a['eopt_rss_mib']} MiB",
            )
    verdicts.summary()
    if not args.no_save:
        print(f"wrote {common.write_results('attribute_speed', results)}")
    return verdicts.exit_status(args.strict)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--reference-of":
        _reference_main(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "--write-trace":
        print(write_trace(Path(sys.argv[2]), int(sys.argv[3])))
    else:
        common.run_main(main)
