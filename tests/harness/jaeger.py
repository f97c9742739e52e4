"""Jaeger (v2, built on the OpenTelemetry Collector) as a real trace collector: OTLP over
HTTP in, traces kept in memory, read back through its query API. Built from the Go module
proxy and cached by version, like the control plane.

Jaeger's go.mod carries a replace directive, so `go install …@version` refuses it: it is
built inside a small module of ours that requires it and repeats that directive (read from
Jaeger's own go.mod at build time).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from .controlplane import _go_env
from .procs import CACHE_ROOT, ManagedProcess, free_port, wait_until

JAEGER_VERSION = os.environ.get("PORTAL_TEST_JAEGER_VERSION", "v1.76.0")
MODULE = "github.com/jaegertracing/jaeger"


def _root(version: str) -> Path:
    return CACHE_ROOT / "jaeger" / version


def ensure_jaeger(version: str = JAEGER_VERSION, log=print) -> Path:
    root = _root(version)
    binary = root / "bin" / "jaeger"
    if binary.exists():
        return binary
    root.mkdir(parents=True, exist_ok=True)
    env = _go_env() | {"GOFLAGS": "-mod=mod -buildvcs=false"}
    started = time.monotonic()
    log(f"jaeger: building {MODULE}/cmd/jaeger {version} (minutes on a cold cache)")
    info = json.loads(subprocess.run(["go", "mod", "download", "-json", f"{MODULE}@{version}"],
                                     check=True, capture_output=True, text=True, env=env,
                                     cwd=root).stdout)
    upstream = Path(info["GoMod"]).read_text()
    replaces = [line for line in upstream.splitlines() if re.match(r"^replace\s+\S+", line)]
    (root / "go.mod").write_text("\n".join([
        "module aifactory-portal.test/jaeger", "", "go 1.26", "",
        f"require {MODULE} {version}", "", *replaces, ""]))
    subprocess.run(["go", "get", f"{MODULE}/cmd/jaeger@{version}"], check=True, env=env,
                   cwd=root, capture_output=True)
    tmp = binary.with_suffix(".tmp")
    subprocess.run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp),
                    f"{MODULE}/cmd/jaeger"], check=True, env=env, cwd=root)
    tmp.rename(binary)  # only a whole binary counts as cached
    log(f"jaeger: built in {time.monotonic() - started:.0f}s")
    return binary


class JaegerServer:
    """One Jaeger process: OTLP/HTTP on `otlp_url`, the query API on `query_url`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.otlp_port = self.query_port = 0
        self.proc: ManagedProcess | None = None

    @property
    def otlp_url(self) -> str:
        return f"http://127.0.0.1:{self.otlp_port}"

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.query_port}"

    def start(self, log=print) -> JaegerServer:
        binary = ensure_jaeger(log=log)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.otlp_port, self.query_port, grpc_port = free_port(), free_port(), free_port()
        config = {
            "service": {
                "extensions": ["jaeger_storage", "jaeger_query"],
                "pipelines": {"traces": {"receivers": ["otlp"], "processors": ["batch"],
                                         "exporters": ["jaeger_storage_exporter"]}},
                # No own metrics server: its default port would clash between test runs.
                "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
            },
            "extensions": {
                "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 10000}}}},
                "jaeger_query": {"storage": {"traces": "memstore"},
                                 "http": {"endpoint": f"127.0.0.1:{self.query_port}"},
                                 "grpc": {"endpoint": f"127.0.0.1:{grpc_port}"}},
            },
            "receivers": {"otlp": {"protocols": {
                "http": {"endpoint": f"127.0.0.1:{self.otlp_port}"}}}},
            "processors": {"batch": {"timeout": "200ms"}},
            "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
        }
        path = self.workdir / "jaeger.yaml"
        path.write_text(yaml.safe_dump(config))
        self.proc = ManagedProcess("jaeger", [str(binary), f"--config={path}"],
                                   log_path=self.workdir / "jaeger.log").start()

        def ready() -> bool:
            self.proc.raise_if_dead()
            try:
                self.services()
                return True
            except OSError:
                return False

        wait_until(ready, timeout=60, what="jaeger")
        return self

    def _get(self, path: str) -> dict:
        with urllib.request.urlopen(self.query_url + path, timeout=5) as resp:
            return json.load(resp)

    def services(self) -> list[str]:
        return self._get("/api/services").get("data") or []

    def trace(self, trace_id: str) -> dict | None:
        """The trace as Jaeger's query API returns it (spans with parent references, times
        in microseconds), or None while Jaeger does not have it."""
        try:
            data = self._get(f"/api/traces/{trace_id}").get("data") or []
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        return data[0] if data else None

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()
