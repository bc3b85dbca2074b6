#!/usr/bin/env bash
# The dashboard's browser test (tests/integration/test_dashboard.py) drives Debian's headless
# chromium at /usr/bin/chromium with Python's playwright (no browser download). Installs it with
# apt-get when it is missing and this runs as root; otherwise says how, and exits 0: the test then
# skips with the same advice rather than failing the suite.
set -euo pipefail
CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the dashboard's browser test (apt-get install chromium)..." >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  if [ -x "$CHROMIUM" ]; then
    echo "chromium installed: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")" >&2
    exit 0
  fi
  echo "apt-get install chromium did not provide $CHROMIUM; the dashboard's browser test will be skipped." >&2
  exit 0
fi
echo "$CHROMIUM is missing: the dashboard's browser test will be skipped." >&2
echo "Install it with 'sudo apt-get install chromium' (Debian/Ubuntu), or run 'sudo scripts/check-chromium.sh'." >&2
exit 0
