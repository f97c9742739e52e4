"""PostgreSQL and Redis as the test run's own processes on free loopback ports."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .procs import ManagedProcess, free_port, port_open, wait_until

PG_BIN = Path(os.environ.get("PORTAL_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _as_postgres() -> str | None:
    """initdb and postgres refuse to run as root: run them as the postgres user then."""
    return "postgres" if os.geteuid() == 0 else None


class PostgresServer:
    def __init__(self, root: Path, *, durable: bool = False) -> None:
        """`durable`: fsync and synchronous commit on, as in production (the test run's own
        server trades them for speed; a restart test must not)."""
        self.root = root
        self.durable = durable
        self.port = 0
        self.proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/portal"

    def start(self) -> PostgresServer:
        user = _as_postgres()
        data, sock = self.root / "pgdata", self.root / "pgsock"
        for d in (self.root, sock):
            d.mkdir(parents=True, exist_ok=True)
        if user:
            shutil.chown(self.root, user)
            shutil.chown(sock, user)
        runas = ["runuser", "-u", user, "--"] if user else []
        subprocess.run([*runas, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust",
                        "-U", "postgres", "-E", "UTF8", "--no-sync"],
                       check=True, capture_output=True)
        self.port = free_port()
        self.proc = ManagedProcess(
            "postgres",
            [str(PG_BIN / "postgres"), "-D", str(data), "-p", str(self.port),
             "-k", str(sock), "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200",
             *([] if self.durable else ["-c", "fsync=off", "-c", "synchronous_commit=off",
                                        "-c", "full_page_writes=off"])],
            log_path=self.root / "postgres.log", user=user,
        ).start()

        self._wait_ready()
        subprocess.run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                        "-U", "postgres", "portal"], check=True)
        return self

    def _wait_ready(self) -> None:
        def ready() -> bool:
            self.proc.raise_if_dead()
            return subprocess.run(
                [str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True).returncode == 0

        wait_until(ready, timeout=60, what="PostgreSQL")

    def start_again(self) -> PostgresServer:
        """After a stop: the same data, the same port (a restart, as in an outage)."""
        self.proc.start()
        self._wait_ready()
        return self

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()


class RedisServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = 0
        self.proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, port: int | None = None) -> RedisServer:
        """Start on a free port, or on `port` (the same one again, after a stop)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.proc = ManagedProcess(
            "redis",
            [shutil.which("redis-server") or "redis-server", "--port", str(self.port),
             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.root)],
            log_path=self.root / "redis.log",
        ).start()

        def ready() -> bool:
            self.proc.raise_if_dead()
            return port_open(self.port)

        wait_until(ready, timeout=30, what="Redis")
        return self

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()


def make_run_dir() -> Path:
    base = Path(os.environ.get("PORTAL_TEST_TMP", tempfile.gettempdir()))
    path = Path(tempfile.mkdtemp(prefix="aifactory-test-", dir=base))
    path.chmod(0o755)  # the postgres user must reach its data directory inside
    return path
