#!/usr/bin/env bash
# Run the portal on its embedded default: SQLite, eager tasks, demo data, dry-run Kubernetes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh
bash scripts/assets.sh
# Demo data all the way: synthetic GPU use instead of Prometheus, and the periodic tasks
# (rollup, expiry, budget notices) run inside the server.
export PORTAL_USAGE_SOURCE="${PORTAL_USAGE_SOURCE-portal.demo_usage.used_device_seconds}"
export PORTAL_EMBEDDED_BEAT="${PORTAL_EMBEDDED_BEAT-true}"
export PORTAL_UTILISATION_SECONDS="${PORTAL_UTILISATION_SECONDS-0}"  # no Prometheus here
export PORTAL_STRANDED_SECONDS="${PORTAL_STRANDED_SECONDS-0}"  # nor DCGM series
export PORTAL_BASE_URL="${PORTAL_BASE_URL-http://127.0.0.1:${PORT:-8000}}"  # links in e-mails
.venv/bin/python manage.py migrate --noinput
.venv/bin/python manage.py seed_demo
echo "AI Factory Portal on http://127.0.0.1:${PORT:-8000} (demo password: demo)"
exec .venv/bin/python manage.py runserver "127.0.0.1:${PORT:-8000}"
