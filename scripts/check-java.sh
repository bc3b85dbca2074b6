#!/usr/bin/env bash
# Stop at once, saying what to install, if Java 17+ (needed by Spark) is missing.
set -euo pipefail
java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "sparkwave needs Java 17 or newer (for Spark) and found none." >&2
  echo "Install it, e.g. 'sudo apt-get install openjdk-17-jre-headless' (Debian/Ubuntu) or 'brew install openjdk@17'." >&2
  exit 1
fi
version=$("$java_bin" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
major=${version%%.*}
[ "$major" = "1" ] && major=$(echo "$version" | cut -d. -f2)
if [ -z "$major" ] || [ "$major" -lt 17 ]; then
  echo "sparkwave needs Java 17 or newer (for Spark); found Java '$version' at $(command -v "$java_bin")." >&2
  echo "Install e.g. 'sudo apt-get install openjdk-17-jre-headless' and point JAVA_HOME at it." >&2
  exit 1
fi
