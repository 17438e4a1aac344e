"""Every benchmark script runs in its smoke mode, so none can rot unnoticed.

Each runnable script in ``benchmarks/`` is run as ``python benchmarks/X.py --smoke`` in a
fresh process from the repository root. It must exit 0, print a line its real run prints
too (so a smoke run that silently does nothing fails), and keep the smoke rules, which a
guard in the child process enforces (an audit hook installed through ``sitecustomize``):
no reading of the shared data (``../shared``, ``shared/`` or ``$EOPT_DATA_DIR``, which
points at a decoy here), no writing inside the repository (``benchmarks/results/``,
lowtime's venv), and no network connection (nothing is downloaded).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"

#: Modules in benchmarks/ that are no scripts of their own.
HELPERS = ("lowtime_runner.py",)  # runs inside lowtime's venv, driven by _common.py

#: Runnable scripts left out of the smoke suite, each with its reason.
EXCLUDED = {
    "pytorch_guide_check.py": (
        "needs PyTorch (torchrun), a multi-GB dependency the test suite does not install; "
        "tests/docs/test_pytorch_doc.py checks the script it runs"
    ),
}

#: Per script, patterns (regular expressions) of lines its real run prints too; a smoke
#: run's output must match every one.
REAL_RUN_LINES = {
    "attribute_speed.py": (
        r"^events\s+eopt CPU s\s+peer CPU s\s+CPU ratio\s+eopt RSS MiB",
        r"^\d+ PASS, \d+ FAIL$",
    ),
    "check_acceptance.py": (r"^mechanism\s+trials\s+≥3σ\s+min effect σ", r"^Property 5\.1 \("),
    "compose_monte_carlo.py": (
        r"^kind\s+seed\s+schedules\s+worst mean\s+paper mean",
        r"^\d+ PASS, \d+ FAIL$",
    ),
    "confidence_deadline.py": (
        r"^\s*q\s+achieved \(MC\)\s+Clark",
        r"^point estimates at or above the requested probability: \d+ of \d+",
    ),
    "fault_tally.py": (
        r"^suite\s+cases\s+good\s+crash\s+hang\s+silent\s+lost",
        r"^\d+ PASS, \d+ FAIL$",
    ),
    "gpu_readonly_probe.py": (r"^  power fields: .*; energy counter: True", r"^  setter calls: 0;"),
    "kokkos_connector_overhead.py": (
        r"^ns per callback over empty\s+whole process\s+application thread",
        r"^eopt\s+\d+\.\d \[",
    ),
    "kokkos_dbscan_compare.py": (
        r"^figure\s+reference\s+eopt inside\s+eopt interp\.",
        r"^reductions of the medians, 95 % bootstrap CIs",
    ),
    "lp_scale.py": (
        r"^hull LP at 1\.10 × the fastest makespan",
        r"^fitted exponent \d+…\d+ tasks: network",
    ),
    "lowtime_perseus.py": (
        r"^eopt frontier: \d+ points in",
        r"\(\* Perseus's frontier: model values from its fit, not re-evaluated\)$",
    ),
    "lowtime_synthetic.py": (
        r": eopt single-deadline solves \(true numbers from the profile\)$",
        r": eopt vs lowtime \(energy at each deadline\)$",
    ),
    "null_world.py": (
        r"^world\s+seed\s+schedules\s+E covered\s+T covered",
        r"^\d+ PASS, \d+ FAIL$",
    ),
    "perseus_reference.py": (
        r"^ T ≤ s method\s+energy J\s+vs exact",
        r"worst excess over the exact",
    ),
    "sampler_overhead.py": (r"^setting\s+method\s+period\s+polls\s+core share", r"^target: < 1%"),
    "sensor_shift.py": (
        r"^\| kernel \| method \| mean abs error % \| worst error %",
        r"^\d+ repeats shifted by",
    ),
    "sim_calibration.py": (r"^kernel\s+stage\s+max\|dT\|\s+max\|dE\|", r"^fitted physics: "),
    "sim_fit_optimum.py": (
        r"^Fitted simulators on held-out clocks",
        r"^\s*GPU\s+data\s+kern×set\s+held-out T\s+P\s+E\s+optimum ok",
    ),
    "sim_noise.py": (
        r"^Repeat spread, target energy CV ×0\.5–×2 of the data",
        r"^\s*setting\s+seed\s+energy CV real\s+sim\s+sim/real",
    ),
    "solve_scale_large.py": (
        r"^\s*case\s+measured\s+target",
        r"^\s*GPT-3 \d+ × \d+ \(\d+ tasks\), default solve\s+plan [\d.]+ s \+ solve [\d.]+ s CPU",
        r"^\s*\d+ × \d+ at 1\.05 ×, clock 50 × fast\s+identical plan",
    ),
    "solve_time_limit.py": (
        r"^\s*limit\s+wall\s+charged\s+status",
        r"^Fixed costs before any solver can stop \(in-process\):",
    ),
    "solver_gap_study.py": (r"× D=[\d.]+ s: LP bound [\d.]+ J, auto", r"^  MILP \d+ s: incumbent"),
    "solver_scale.py": (r": single-deadline solves \(true numbers from the profile\)$",),
    "startup.py": (r"^Start-up, median of \d+ run", r"^\s+eopt --help\s+[\d.]+"),
    "steady_state_study.py": (r"^LP bound [\d.]+ J; LP period", r"^Cyclic steady state"),
    "sweep_scaling.py": (
        r"^\s*kernel\s+run\s+workers\s+cells\s+start s",
        r"^every run measured the serial run's cells with its numbers:",
    ),
}

TIMEOUT_S = 240  # per script; each takes seconds
GUARD_EXIT = 86  # the status the guard ends a child with


def benchmark_scripts() -> list[str]:
    """Every ``benchmarks/*.py`` that is a script: not ``_``-prefixed, not a helper."""
    return sorted(
        p.name for p in BENCH.glob("*.py") if not p.name.startswith("_") and p.name not in HELPERS
    )


_GUARD = r'''
"""Smoke-suite guard: ends this process on a read of the shared data, a write inside the
repository, or a network connection (installed by tests/benchmarks/test_smoke.py)."""
import ipaddress
import os
import socket
import sys

_REPO = {repo!r}
_NO_READ = tuple(os.path.realpath(p) for p in {no_read!r})


# Events that change the file system, with the index of their directory-descriptor argument.
_CHANGES = {{"os.mkdir": 2, "os.rmdir": 1, "os.remove": 1, "os.rename": 2, "shutil.rmtree": 1}}


def _inside(path, root):
    return path == root or path.startswith(root + os.sep)


def _stop(what, path):
    os.write(2, f"smoke guard: {{what}} {{path}}\n".encode())
    os._exit({status})


def _remote(host):
    try:
        return ipaddress.ip_address(host).is_global
    except ValueError:
        return host != "localhost"  # a name: it would be looked up, and may be anywhere


def _where(path):
    if isinstance(path, int) or path is None:
        return None  # a file descriptor: its opening was checked
    return os.path.realpath(os.fsdecode(path))


def _hook(event, args):
    if event == "open":
        path = _where(args[0])
        if path is None:
            return
        mode, flags = args[1], args[2]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        )
        if any(_inside(path, root) for root in _NO_READ):
            _stop("read of the shared data:", path)
        if writes and _inside(path, _REPO):
            _stop("write inside the repository:", path)
    elif event in ("os.listdir", "os.scandir", "glob.glob"):
        path = _where(args[0] if args else None)
        if path is not None and any(_inside(path, root) for root in _NO_READ):
            _stop("listing of the shared data:", path)
    elif event in _CHANGES:
        # A path relative to a directory descriptor (shutil.rmtree's inner steps) lies
        # under a folder whose own event was checked.
        if args[_CHANGES[event]] not in (None, -1):
            return
        for path in map(_where, args[: 2 if event == "os.rename" else 1]):
            if path is not None and _inside(path, _REPO):
                _stop(f"{{event}} inside the repository:", path)
    elif event == "socket.connect":
        # This machine and its local network (a Ray cluster's nodes) are no download.
        if args[0].family in (socket.AF_INET, socket.AF_INET6) and _remote(args[1][0]):
            _stop("network connection to", args[1])


sys.addaudithook(_hook)
'''


@pytest.fixture(scope="session")
def smoke_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a smoke run: the guard on, ``$EOPT_DATA_DIR`` a tempting decoy."""
    root = tmp_path_factory.mktemp("bench-smoke")
    decoy = root / "decoy-data"
    for folder in ("lowtime_bench", "perseus_sosp24", "kokkos_dbscan_h100"):
        (decoy / folder).mkdir(parents=True)
    guard = root / "guard"
    guard.mkdir()
    no_read = [str(REPO.parent / "shared"), str(REPO / "shared"), str(decoy)]
    (guard / "sitecustomize.py").write_text(
        _GUARD.format(repo=os.path.realpath(REPO), no_read=no_read, status=GUARD_EXIT),
        encoding="utf-8",
    )
    env = dict(os.environ)
    env.update(
        EOPT_DATA_DIR=str(decoy),
        PYTHONPATH=os.pathsep.join(filter(None, [str(guard), env.get("PYTHONPATH")])),
        PYTHONDONTWRITEBYTECODE="1",  # no __pycache__ writes inside the repository
        MPLBACKEND="Agg",
    )
    return env


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def test_every_script_is_in_the_smoke_suite_or_says_why_not():
    scripts = set(benchmark_scripts())
    unlisted = sorted(scripts - set(REAL_RUN_LINES) - set(EXCLUDED))
    assert not unlisted, (
        f"benchmarks {unlisted} are neither smoke-tested nor excluded: give each a --smoke "
        "mode (benchmarks/_common.py: add_smoke_option, enter_smoke) and its real-run lines "
        "in REAL_RUN_LINES, or name it in EXCLUDED with the reason"
    )
    stale = sorted(set(EXCLUDED) - scripts)
    assert not stale, f"EXCLUDED names scripts that are gone: {stale}"
    both = sorted(set(EXCLUDED) & set(REAL_RUN_LINES))
    assert not both, f"{both}: both excluded and smoke-tested"
    assert all(reason.strip() for reason in EXCLUDED.values())


@pytest.mark.parametrize("script", sorted(set(benchmark_scripts()) - set(EXCLUDED)))
def test_smoke_run(script: str, smoke_env: dict[str, str]):
    assert script in REAL_RUN_LINES, f"{script}: add the lines its real run prints too"
    started = time.perf_counter()
    done = _run([sys.executable, f"benchmarks/{script}", "--smoke"], smoke_env)
    took = time.perf_counter() - started
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{script} --smoke: exit {done.returncode}\n{output[-4000:]}"
    assert "Traceback (most recent call last)" not in output, output[-4000:]
    assert "smoke run" in output, f"{script}: the run does not say it is a smoke run"
    for pattern in REAL_RUN_LINES[script]:
        assert re.search(pattern, done.stdout, re.M), (
            f"{script} --smoke printed no line like {pattern!r}:\n{done.stdout[-4000:]}"
        )
    print(f"{script} --smoke: {took:.1f} s")


@pytest.mark.parametrize("script", sorted(EXCLUDED))
def test_excluded_scripts_still_offer_a_smoke_mode(script: str, smoke_env: dict[str, str]):
    done = _run([sys.executable, f"benchmarks/{script}", "--help"], smoke_env)
    assert done.returncode == 0, done.stderr
    assert "--smoke" in done.stdout


def test_the_guard_stops_shared_reads_repository_writes_and_downloads(smoke_env):
    """The guard fires (else the smoke runs above would prove nothing about the rules)."""
    decoy = Path(smoke_env["EOPT_DATA_DIR"]) / "lowtime_bench" / "summary.json"
    decoy.write_text("{}", encoding="utf-8")
    target = BENCH / "results" / "_smoke_guard_check.json"
    attempts = {
        "read of the shared data": f"open({str(decoy)!r}).read()",
        "write inside the repository": f"open({str(target)!r}, 'w')",
        "network connection": (
            "import socket; socket.create_connection(('1.1.1.1', 80), timeout=0.01)"
        ),
    }
    for what, code in attempts.items():
        done = _run([sys.executable, "-c", code], smoke_env)
        assert done.returncode == GUARD_EXIT, (what, done.returncode, done.stderr)
        assert f"smoke guard: {what}" in done.stderr
    assert not target.exists()
    allowed = _run(
        [sys.executable, "-c", "print(open('benchmarks/README.md').read()[:8])"], smoke_env
    )
    assert allowed.returncode == 0 and allowed.stdout.startswith("# ")
