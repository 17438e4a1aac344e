#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh machine, then runs it.
#   - eopt with its test extras (pip, editable)
#   - Chromium for the report-rendering test (Debian/Ubuntu, when running as root)
set -euo pipefail
cd "$(dirname "$0")/.."
export MPLBACKEND=Agg
python3 -m pip install -q -e ".[test]"
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing Chromium for the HTML report test…"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
      >/tmp/eopt-chromium-install.log 2>&1 || echo "warning: could not install chromium (see /tmp/eopt-chromium-install.log)"
  else
    echo "warning: chromium not found; install it (apt-get install chromium) to run the report rendering test"
  fi
fi
exec python3 -m pytest -q "$@"
