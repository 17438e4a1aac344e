#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh machine, then runs it.
#   - eopt with its test and Ray extras (pip, editable), so the distributed sweeps are tested
#   - Chromium, g++ and Debian's Kokkos for the report and Kokkos-connector tests
#     (Debian/Ubuntu, when running as root)
set -euo pipefail
cd "$(dirname "$0")/.."
export MPLBACKEND=Agg
python3 -m pip install -q -e ".[test,ray]"
# System packages some tests need: Chromium (the report-rendering test), a C++ compiler and
# Debian's Kokkos (the Kokkos Tools connector, run under a real Kokkos program).
missing=()
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  missing+=(chromium)
fi
command -v g++ >/dev/null 2>&1 || missing+=(g++)
[ -f /usr/include/trilinos/Kokkos_Core.hpp ] || missing+=(libtrilinos-kokkos-dev)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing ${missing[*]} for the tests…"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") \
      >/tmp/eopt-test-packages.log 2>&1 || echo "warning: could not install ${missing[*]} (see /tmp/eopt-test-packages.log)"
  else
    echo "warning: ${missing[*]} not found; install them (apt-get install ${missing[*]}) to run every test"
  fi
fi
exec python3 -m pytest -q "$@"
