"""What eopt's Kokkos Tools connector costs, per callback, against kokkos-tools' kernel timer.

A small C driver (compiled here) loads a connector with dlopen, as Kokkos does, and makes
N rounds of {push region, begin/end parallel_for, begin/end parallel_reduce, pop region}
(6 callbacks a round, 1.2 M callbacks at the default N = 200 000) on one thread, then
calls finalize. Three connectors run it, in alternating runs:

- an empty connector (every callback a no-op; compiled here): the floor;
- kokkos-tools' simple kernel timer: built from its source when ``KOKKOS_TOOLS_SRC``
  names a kokkos-tools checkout, else the build in ``../shared/peers/`` (see its
  README), else left out (the script says which);
- eopt's connector, built by eopt.

Two costs per callback over the empty connector, each the median of the runs with the
spread of all of them: the whole process's CPU time (user + system, from the kernel's
accounting: the callbacks, eopt's flusher thread and the conversion to events.csv at
finalize), and the application thread's CPU time over the callbacks alone. Targets:
whole process at most 1.5 × the kernel timer's, application thread at most the kernel
timer's. The machine may be shared: read the spread, and the ratios of one run.

    python3 benchmarks/kokkos_connector_overhead.py [--rounds 200000] [--runs 9]
    python3 benchmarks/kokkos_connector_overhead.py --smoke   # a fresh build, 2000 rounds
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

from eopt.measure.kokkos import build_connector, find_compiler

WHOLE_TARGET = 1.5  # × the kernel timer's whole-process cost per callback
THREAD_TARGET = 1.0  # × the kernel timer's application-thread cost per callback
SMOKE_ROUNDS, SMOKE_RUNS = 2000, 1
CALLBACKS_PER_ROUND = 6
PEERS = Path(__file__).resolve().parents[2] / "shared" / "peers"

DRIVER = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef void (*push_t)(const char*);
typedef void (*pop_t)(void);
typedef void (*begin_t)(const char*, uint32_t, uint64_t*);
typedef void (*end_t)(uint64_t);
typedef void (*init_t)(int, uint64_t, uint32_t, void*);
typedef void (*fin_t)(void);
static long long thread_ns(void) {
  struct timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
int main(int argc, char** argv) {
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  long rounds = atol(argv[2]);
  init_t init = (init_t)dlsym(lib, "kokkosp_init_library");
  fin_t fin = (fin_t)dlsym(lib, "kokkosp_finalize_library");
  push_t push = (push_t)dlsym(lib, "kokkosp_push_profile_region");
  pop_t pop = (pop_t)dlsym(lib, "kokkosp_pop_profile_region");
  begin_t bpf = (begin_t)dlsym(lib, "kokkosp_begin_parallel_for");
  end_t epf = (end_t)dlsym(lib, "kokkosp_end_parallel_for");
  begin_t bpr = (begin_t)dlsym(lib, "kokkosp_begin_parallel_reduce");
  end_t epr = (end_t)dlsym(lib, "kokkosp_end_parallel_reduce");
  init(0, 20210225, 0, NULL);
  uint64_t k;
  long long t0 = thread_ns();
  for (long i = 0; i < rounds; ++i) {
    push("iteration"); bpf("touch", 0, &k); epf(k); bpr("sum", 0, &k); epr(k); pop();
  }
  long long t1 = thread_ns();
  fin();
  fprintf(stderr, "thread_ns %lld\n", t1 - t0);
  return 0;
}
"""

EMPTY = r"""
#include <stdint.h>
struct Kokkos_Profiling_SpaceHandle { char name[64]; };
static uint64_t next;
void kokkosp_init_library(const int a, const uint64_t b, const uint32_t c, void *d) {}
void kokkosp_finalize_library(void) {}
void kokkosp_push_profile_region(const char *n) {}
void kokkosp_pop_profile_region(void) {}
void kokkosp_begin_parallel_for(const char *n, const uint32_t d, uint64_t *k) { *k = next++; }
void kokkosp_end_parallel_for(const uint64_t k) {}
void kokkosp_begin_parallel_reduce(const char *n, const uint32_t d, uint64_t *k) { *k = next++; }
void kokkosp_end_parallel_reduce(const uint64_t k) {}
"""


def compile_c(source: str, out: Path, *flags: str) -> Path:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run([find_compiler(), "-O2", *flags, str(src), "-o", str(out)], check=True)
    return out


def kernel_timer(build_dir: Path) -> tuple[Path | None, str]:
    """kokkos-tools' simple kernel timer, and where it came from."""
    source = os.environ.get("KOKKOS_TOOLS_SRC")
    cxx = shutil.which("g++") or shutil.which("c++")
    if source and cxx:
        folder = Path(source) / "profiling" / "simple-kernel-timer"
        out = build_dir / "kp_kernel_timer.so"
        # the include folders of kokkos-tools' own Makefile for this tool
        parts = ("profiling/simple-kernel-timer", "common/makefile-only", "profiling/all", "common")
        includes = [f"-I{Path(source) / d}" for d in parts]
        cmd = [cxx, "-O3", "-std=c++17", "-shared", "-fPIC", *includes]
        cmd += [str(folder / "kp_kernel_timer.cpp"), str(folder / "kp_shared.cpp"), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            return out, f"built here from {source}"
        print(f"building the kernel timer from {source} failed: {proc.stderr.strip()[-300:]}")
    prebuilt = PEERS / "kp_kernel_timer.so"
    if prebuilt.is_file():
        return prebuilt, f"the build in {PEERS} (see its README)"
    return None, "not found: set KOKKOS_TOOLS_SRC to a kokkos-tools checkout"


def run_once(driver: Path, library: Path, rounds: int, folder: Path) -> tuple[float, float]:
    """(whole-process CPU s, application-thread CPU s over the callbacks) of one run."""
    env = {**os.environ, "EOPT_KOKKOS_TRACE_DIR": str(folder / "trace")}
    proc = subprocess.Popen(
        [str(driver), str(library), str(rounds)],
        env=env,
        cwd=folder,  # the kernel timer writes its report where it runs
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    err = proc.stderr.read() if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{library.name}: the driver failed ({status}): {err.strip()[-300:]}")
    thread = next(int(line.split()[1]) for line in err.splitlines() if line.startswith("thread_ns"))
    return usage.ru_utime + usage.ru_stime, thread * 1e-9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=9, help="alternating runs of each")
    common.add_smoke_option(parser)
    args = parser.parse_args()
    smoke = common.enter_smoke(args)
    if smoke:
        args.rounds, args.runs = SMOKE_ROUNDS, SMOKE_RUNS
    with tempfile.TemporaryDirectory(prefix="eopt-bench-") as tmp:
        work = Path(tmp)
        # A smoke run compiles the connector afresh (a cached build would hide a broken one).
        eopt_lib = build_connector(cache_dir=work / "build") if smoke else build_connector()
        driver = compile_c(DRIVER, work / "driver", "-ldl")
        libraries = {"empty": compile_c(EMPTY, work / "libempty.so", "-fPIC", "-shared")}
        timer, timer_from = kernel_timer(work)
        if timer is not None:
            libraries["kernel timer"] = timer
        libraries["eopt"] = eopt_lib
        print(f"eopt connector: {eopt_lib}\nkernel timer: {timer_from}")
        calls = args.rounds * CALLBACKS_PER_ROUND
        print(f"{args.rounds:,} rounds = {calls:,} callbacks; {args.runs} alternating runs each\n")
        whole: dict[str, list[float]] = {name: [] for name in libraries}
        thread: dict[str, list[float]] = {name: [] for name in libraries}
        for run in range(args.runs):
            for name, library in libraries.items():
                folder = work / f"{name.replace(' ', '_')}-{run}"
                folder.mkdir()
                w, t = run_once(driver, library, args.rounds, folder)
                whole[name].append(w)
                thread[name].append(t)
                shutil.rmtree(folder)

    def over_empty(values: dict[str, list[float]], name: str) -> list[float]:
        floor = statistics.median(values["empty"])
        return [(v - floor) / calls * 1e9 for v in values[name]]

    print(f"{'ns per callback over empty':<28}{'whole process':>26}{'application thread':>26}")
    cost = {}
    for name in libraries:
        if name == "empty":
            continue
        w, t = over_empty(whole, name), over_empty(thread, name)
        cost[name] = (statistics.median(w), statistics.median(t))
        print(
            f"{name:<28}{cost[name][0]:>10.1f} [{min(w):6.1f} – {max(w):6.1f}]"
            f"{cost[name][1]:>10.1f} [{min(t):6.1f} – {max(t):6.1f}]"
        )
    if "kernel timer" not in cost:
        print("\nno kernel timer to compare with: no verdict")
        return 0
    ratio_whole = cost["eopt"][0] / max(cost["kernel timer"][0], 1e-9)
    ratio_thread = cost["eopt"][1] / max(cost["kernel timer"][1], 1e-9)
    verdicts = [
        ("whole process", ratio_whole, WHOLE_TARGET),
        ("application thread", ratio_thread, THREAD_TARGET),
    ]
    print()
    failed = 0
    for what, ratio, target in verdicts:
        ok = ratio <= target
        failed += not ok
        verdict = "PASS" if ok else "FAIL"
        print(f"eopt / kernel timer, {what}: {ratio:.2f}×  target ≤ {target:g}×  {verdict}")
    if common.is_smoke():
        print(common.SMOKE_VERDICTS)
        return 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
