"""What eopt's Kokkos Tools connector costs the application, per callback.

A small C driver (compiled here) loads the connector with dlopen, as Kokkos does, and
times N rounds of each callback pair (push/pop region, begin/end parallel_for, begin/end
deep_copy) on the calling thread, with the connector's writer thread flushing to a real
file meanwhile. Prints ns per callback (a pair is two callbacks) and PASS/FAIL against the
target: under 1 µs per callback on this machine.

    python3 benchmarks/kokkos_connector_overhead.py [--rounds 1000000]
    python3 benchmarks/kokkos_connector_overhead.py --smoke   # a fresh build, 1000 rounds
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common

from eopt.measure.kokkos import build_connector, find_compiler

TARGET_NS = 1000.0
SMOKE_ROUNDS = 1000

DRIVER = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
struct handle { char name[64]; };
typedef void (*push_t)(const char*);
typedef void (*pop_t)(void);
typedef void (*begin_t)(const char*, uint32_t, uint64_t*);
typedef void (*end_t)(uint64_t);
typedef void (*bdc_t)(struct handle, const char*, const void*, struct handle, const char*,
                      const void*, uint64_t);
typedef void (*edc_t)(void);
typedef void (*init_t)(int, uint64_t, uint32_t, void*);
typedef void (*fin_t)(void);
static double now(void) {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9;
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
  bdc_t bdc = (bdc_t)dlsym(lib, "kokkosp_begin_deep_copy");
  edc_t edc = (edc_t)dlsym(lib, "kokkosp_end_deep_copy");
  init(0, 20210225, 0, NULL);
  struct handle h = {"Host"};
  uint64_t k;
  double t0 = now();
  for (long i = 0; i < rounds; ++i) { push("region"); pop(); }
  double t1 = now();
  for (long i = 0; i < rounds; ++i) { bpf("kernel", 0, &k); epf(k); }
  double t2 = now();
  for (long i = 0; i < rounds; ++i) { bdc(h, "dst", 0, h, "src", 0, 64); edc(); }
  double t3 = now();
  fin();
  double t4 = now();
  printf("%.1f %.1f %.1f %.3f\n", (t1 - t0) / rounds / 2 * 1e9, (t2 - t1) / rounds / 2 * 1e9,
         (t3 - t2) / rounds / 2 * 1e9, t4 - t3);
  return 0;
}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1_000_000)
    common.add_smoke_option(parser)
    args = parser.parse_args()
    smoke = common.enter_smoke(args)
    if smoke:
        args.rounds = SMOKE_ROUNDS
    with tempfile.TemporaryDirectory(prefix="eopt-bench-") as tmp:
        # A smoke run compiles the connector afresh (a cached build would hide a broken one).
        library = build_connector(cache_dir=Path(tmp) / "build") if smoke else build_connector()
        driver = Path(tmp) / "driver"
        src = Path(tmp) / "driver.c"
        src.write_text(DRIVER)
        subprocess.run([find_compiler(), "-O2", "-o", str(driver), str(src), "-ldl"], check=True)
        env = {**os.environ, "EOPT_KOKKOS_TRACE_DIR": str(Path(tmp) / "trace")}
        out = subprocess.run(
            [str(driver), str(library), str(args.rounds)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        size = (Path(tmp) / "trace" / "events.csv").stat().st_size
    region, kernel, copy, flush = (float(x) for x in out)
    print(f"connector: {library}")
    print(
        f"{args.rounds:,} rounds of each pair; {3 * args.rounds:,} events, "
        f"{size / 1e6:.0f} MB of events.csv; finalize (last flush) {flush:.2f} s\n"
    )
    print(f"{'callback pair':<30}{'ns per callback':>16}  target < {TARGET_NS:.0f} ns")
    failed = 0
    for name, ns in (
        ("push/pop region", region),
        ("begin/end parallel_for", kernel),
        ("begin/end deep_copy", copy),
    ):
        ok = ns < TARGET_NS
        failed += not ok
        print(f"{name:<30}{ns:>16.1f}  {'PASS' if ok else 'FAIL'}")
    if smoke:
        print(common.SMOKE_VERDICTS)
        return 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
