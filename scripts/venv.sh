#!/usr/bin/env bash
# Create .venv and install the pinned dependencies; reinstall only when the pins change.
# Usage: scripts/venv.sh [test]
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
py=""
for candidate in python3.11 python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    py="$candidate"; break
  fi
done
[ -n "$py" ] || { echo "Python 3.11 is required (Django 5.2 LTS)" >&2; exit 1; }
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
stamp=".venv/.installed${extra:+-$extra}"
want="$(cat pyproject.toml requirements.lock | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c requirements.lock -e ".${extra:+[$extra]}"
  echo "$want" > "$stamp"
fi
