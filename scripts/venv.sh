#!/usr/bin/env bash
# Create .venv and install the pinned dependencies; reinstall only when the pins change.
# Usage: scripts/venv.sh [test|focus]
#   focus: the FOCUS validator's own Python 3.12 environment (requirements-focus.lock), cached
#   under ~/.cache/aifactory-portal/ and printed on the last line.
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"

find_python() {  # find_python 3.12: an interpreter of that version, on PATH or under pyenv
  local want="$1" candidate
  for candidate in "python$want" python3 \
      $(ls -d "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/"$want"*/bin/python 2>/dev/null); do
    if command -v "$candidate" >/dev/null \
        && "$candidate" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$want'.split('.'))))" 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

if [ "$extra" = focus ]; then
  py="$(find_python 3.12)" || { echo "Python 3.12 is required for the FOCUS validator" >&2; exit 1; }
  want="$(sha256sum requirements-focus.lock | cut -c1-16)"
  dir="${PORTAL_FOCUS_VENV:-${PORTAL_CACHE_DIR:-$HOME/.cache/aifactory-portal}/focus-validator}"
  if [ ! -f "$dir/.installed" ] || [ "$(cat "$dir/.installed")" != "$want" ]; then
    echo "venv: FOCUS validator environment in $dir (Python 3.12)" >&2
    rm -rf "$dir"
    "$py" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r requirements-focus.lock >&2
    echo "$want" > "$dir/.installed"
  fi
  echo "$dir"
  exit 0
fi

py="$(find_python 3.11)" || { echo "Python 3.11 is required (Django 5.2 LTS)" >&2; exit 1; }
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
