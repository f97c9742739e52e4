"""Small helpers to run real servers as the test run's own child processes."""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

CACHE_ROOT = Path(
    os.environ.get("PORTAL_CACHE_DIR", Path.home() / ".cache" / "aifactory-portal")
)


@contextlib.contextmanager
def build_lock(root: Path) -> Iterator[None]:
    """One build of a cached artifact at a time across processes: `make test` builds the test
    infrastructure in the background from its start (tests/harness/prebuild.py) while the
    fixtures that need a binary wait here for it instead of building it a second time. The
    lock goes with the process, so a killed build frees it; callers check for the finished
    binary again once they hold it."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def built_once(root: Path, binary: Path, build: Callable[[], object]) -> Path:
    """`binary`, made by `build` unless a finished one is there: one build at a time under
    root's build lock, and the check repeated once the lock is held."""
    if not binary.exists():
        with build_lock(root):
            if not binary.exists():
                build()
    return binary


# Below the kernel's ephemeral range (32768-60999 here): a port the kernel hands out for
# bind(0) is also what any process's next outgoing connection may take between our release
# and the server's bind, which once made kube-apiserver fail with "address already in use".
_PORT_RANGE = (20000, 32768)
_handed_out: set[int] = set()


def free_port() -> int:
    """A free TCP port on loopback, outside the ephemeral range, not handed out before by
    this process (released just before use; a server that still loses it is restarted on
    another port by its harness)."""
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(*_PORT_RANGE)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {_PORT_RANGE}")


def wait_until(check: Callable[[], bool], *, timeout: float, what: str,
               interval: float = 0.2) -> None:
    """A process or port being ready: tests.harness.waiting.eventually on a boolean."""
    from .waiting import eventually

    eventually(lambda: bool(check()), timeout=timeout, interval=interval, retry_on=(),
               what=f"{what} ready")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class ManagedProcess:
    """A child process with its output in a log file, stopped with its process group."""

    def __init__(self, name: str, argv: list[str], *, log_path: Path,
                 env: dict[str, str] | None = None, user: str | None = None,
                 cwd: Path | None = None) -> None:
        self.name = name
        self.argv = (["runuser", "-u", user, "--"] + argv) if user else argv
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
            start_new_session=True,
        )
        return self

    def raise_if_dead(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.proc.returncode}; last log lines:\n"
                + self.tail()
            )

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 15) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        except ProcessLookupError:
            pass


def wait_http_ok(proc: ManagedProcess, url: str, *, timeout: float, what: str,
                 interval: float = 0.2) -> None:
    """Until `url` answers 200; fails at once (with the log's tail) if the process died."""
    import requests  # the harness runs inside the project's venv

    def ready() -> bool:
        proc.raise_if_dead()
        try:
            return requests.get(url, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    wait_until(ready, timeout=timeout, what=what, interval=interval)


def celery_worker(log_path: Path, *, pool: tuple[str, ...] = ("--pool=solo", "--concurrency=1"),
                  loglevel: str = "INFO", **env: str) -> ManagedProcess:
    """A real Celery worker on the test database (pytest-django's test_ name) and the run's
    Redis, started; `env` adds or overrides settings (CELERY_BROKER_URL, PORTAL_KUBE_BACKEND…)."""
    import os
    import sys

    from django.conf import settings

    db = settings.DATABASES["default"]
    environment = {**os.environ, "CELERY_TASK_ALWAYS_EAGER": "false",
                   "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/"
                                   f"{db['NAME']}", **env}
    return ManagedProcess(
        "celery-worker", [sys.executable, "-m", "celery", "-A", "portal", "worker", *pool,
                          "--without-gossip", "--without-mingle", f"--loglevel={loglevel}"],
        log_path=log_path, env=environment, cwd=Path(__file__).resolve().parents[2]).start()


def go_install_cached(package: str, version: str, binary: str, *, cache: str,
                      log=print) -> Path:
    """A Go command built once from the Go module proxy into CACHE_ROOT/<cache>/<version>/
    (GOBIN in a temporary directory, moved into place only when the build succeeded)."""
    root = CACHE_ROOT / cache / version
    target = root / binary
    return built_once(root, target, lambda: _go_install(package, version, binary, root, target,
                                                        cache, log))


def _go_install(package: str, version: str, binary: str, root: Path, target: Path,
                cache: str, log) -> Path:
    import time

    env = {**os.environ, "GOBIN": str(root / "bin.tmp"), "CGO_ENABLED": "0"}
    env.setdefault("GOFLAGS", "-buildvcs=false")
    started = time.monotonic()
    log(f"{cache}: building {package}@{version} from the Go module proxy")
    subprocess.run(["go", "install", "-trimpath", f"{package}@{version}"], check=True,
                   env=env, cwd=root)
    os.replace(root / "bin.tmp" / binary, target)
    log(f"{cache}: built in {time.monotonic() - started:.0f}s")
    return target
