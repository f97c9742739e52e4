"""`python -m tests.harness [pytest args]`: start PostgreSQL and Redis, run pytest, stop them.

The Django settings read DATABASE_URL at import, before any pytest fixture could start a
server, so the servers start here and reach pytest through the environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from .services import PostgresServer, RedisServer, make_run_dir


def main(argv: list[str]) -> int:
    run_dir = make_run_dir()
    started = time.monotonic()
    pg = PostgresServer(run_dir / "postgres")
    redis = RedisServer(run_dir / "redis")
    try:
        pg.start()
        redis.start()
        print(f"harness: PostgreSQL on {pg.port}, Redis on {redis.port} "
              f"(up in {time.monotonic() - started:.1f}s; run dir {run_dir})", flush=True)
        env = dict(os.environ)
        env.update({
            "DATABASE_URL": pg.url,
            "CELERY_BROKER_URL": redis.url,
            # The cache every process shares, as in production (sessions, users, roles).
            "CACHE_URL": redis.url.rsplit("/", 1)[0] + "/1",
            # Tests run tasks inline unless they start a real worker (tests/worker).
            "CELERY_TASK_ALWAYS_EAGER": "true",
            "PORTAL_TEST_RUN_DIR": str(run_dir),
            "PORTAL_VAR_DIR": str(run_dir / "var"),
        })
        if os.environ.get("PORTAL_BENCH_FULL") == "1" or os.environ.get("PORTAL_BENCH_SIZES"):
            # Loading millions of benchmark rows takes statements longer than production's.
            env.setdefault("DB_STATEMENT_TIMEOUT_MS", "0")
        return subprocess.call([sys.executable, "-m", "pytest", *argv], env=env)
    finally:
        redis.stop()
        pg.stop()
        if os.environ.get("PORTAL_TEST_KEEP") != "1":
            shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
