#!/usr/bin/env bash
# Run the portal on its embedded default: SQLite, eager tasks, demo data, dry-run Kubernetes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh
bash scripts/assets.sh
.venv/bin/python manage.py migrate --noinput
.venv/bin/python manage.py seed_demo
echo "AI Factory Portal on http://127.0.0.1:${PORT:-8000} (demo password: demo)"
exec .venv/bin/python manage.py runserver "127.0.0.1:${PORT:-8000}"
