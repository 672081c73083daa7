#!/usr/bin/env bash
# The real Mermaid, for the gantt tests (tests/preview/test_gantt_rendered.py): Debian's chromium
# (installed when missing; root is needed, as apt-get does) and @mermaid-js/mermaid-cli
# from the npm registry at the versions package-lock.json pins, installed once into
# ~/.cache/omegitops/mermaid/<hash of package.json and the lock>. Puppeteer's own browser
# download is skipped: mmdc runs Debian's chromium. Prints the path of mmdc.
# Exit 3: this machine cannot have them (no root for apt-get, no npm).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v chromium >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
    || { echo "mermaid: chromium is missing and cannot be installed here (root, apt-get)" >&2; exit 3; }
  # One apt-get at a time on a machine.
  exec 8>/var/lock/omegitops-node-apt.lock
  flock 8
  if ! command -v chromium >/dev/null 2>&1; then
    echo "mermaid: installing chromium from Debian" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
  fi
  exec 8>&-
fi
command -v npm >/dev/null 2>&1 || { echo "mermaid: npm is missing" >&2; exit 3; }
hash=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/omegitops/mermaid"
dir="$cache/$hash"
mkdir -p "$cache"
exec 9>"$dir.lock"
flock 9
if [ ! -x "$dir/node_modules/.bin/mmdc" ]; then
  echo "mermaid: installing @mermaid-js/mermaid-cli from the npm registry" >&2
  work=$(mktemp -d "$dir.XXXXXX")
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  (cd "$work" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund \
    --loglevel=error >&2)
  rm -rf "$dir"
  mv "$work" "$dir"
fi
echo "$dir/node_modules/.bin/mmdc"
