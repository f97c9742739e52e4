"""Run a script in the embedded run's own process: SQLite in a fresh var directory, migrated by
the real `manage.py migrate` (its SQL, triggers included), eager tasks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_on_embedded_sqlite(var_dir: Path, script: str) -> str:
    """Migrate a fresh SQLite database in `var_dir`, run `script` in `manage.py shell`; its
    output (a failing migrate or script fails the caller's assertion with its stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    env.update({"PORTAL_VAR_DIR": str(var_dir), "CELERY_TASK_ALWAYS_EAGER": "true"})

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", *argv], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)

    migrated = run("migrate", "--noinput", "-v0")
    assert migrated.returncode == 0, migrated.stderr
    out = run("shell", "-c", script)
    assert out.returncode == 0, out.stderr
    return out.stdout
