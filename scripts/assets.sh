#!/usr/bin/env bash
# Front-end libraries from the npm registry, pinned by package-lock.json, served from the
# portal's own static files (the portal runs on networks without internet: never a CDN).
# Usage: scripts/assets.sh [test]   (test also installs the dev packages, e.g. axe-core)
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"
if ! command -v npm >/dev/null; then
  echo "assets: installing Node.js and npm (Debian packages)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
stamp="node_modules/.installed${mode:+-$mode}"
want="$(cat package.json package-lock.json | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  flags=(--no-audit --no-fund --ignore-scripts --loglevel=error)
  [ "$mode" = test ] || flags+=(--omit=dev)
  npm ci "${flags[@]}"
  echo "$want" > "$stamp"
fi
# Only what pages load is copied next to the static files (build/ is not committed).
mkdir -p build/vendor/vendor
cp node_modules/chart.js/dist/chart.umd.min.js node_modules/chart.js/dist/chart.umd.min.js.map \
   build/vendor/vendor/
cp node_modules/chart.js/LICENSE.md build/vendor/vendor/chart.js.LICENSE.md
