"""A real OpenTelemetry Collector as the tests' trace receiver: OTLP over HTTP in, OTLP JSON
lines in a file out, read back by the test. Built from the Go module proxy (our own small
`main` in tests/collector with only the OTLP receiver and the file exporter linked in) and
cached by version, like the control plane. A full distribution (Jaeger all-in-one v1.76)
took 430 s to build cold here; this one 59–70 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from .controlplane import _go_env
from .procs import CACHE_ROOT, ManagedProcess, built_once, free_port, port_open, wait_until

# One collector release throughout: the core and contrib modules share a version, the
# confmap modules are the matching 1.x release.
COLLECTOR_VERSION = os.environ.get("PORTAL_TEST_COLLECTOR_VERSION", "v0.161.0")
CONFMAP_VERSION = os.environ.get("PORTAL_TEST_CONFMAP_VERSION", "v1.67.0")
SOURCE = Path(__file__).resolve().parent.parent / "collector" / "main.go"


def _root(version: str) -> Path:
    return CACHE_ROOT / "collector" / version


def go_mod(version: str = COLLECTOR_VERSION, confmap: str = CONFMAP_VERSION) -> str:
    core = "go.opentelemetry.io/collector"
    contrib = "github.com/open-telemetry/opentelemetry-collector-contrib"
    return "\n".join([
        "module aifactory-portal.test/collector", "", "go 1.26", "", "require (",
        f"\t{core}/otelcol {version}",
        f"\t{core}/receiver/otlpreceiver {version}",
        f"\t{core}/service {version}",
        f"\t{core}/confmap {confmap}",
        f"\t{core}/confmap/provider/fileprovider {confmap}",
        f"\t{contrib}/exporter/fileexporter {version}",
        ")", ""])


def ensure_collector(version: str = COLLECTOR_VERSION, log=print) -> Path:
    root = _root(version)
    binary = root / "bin" / "collector"
    return built_once(root, binary, lambda: _build_collector(version, root, binary, log))


def _build_collector(version: str, root: Path, binary: Path, log) -> None:
    if not shutil.which("go"):
        raise RuntimeError("Go toolchain not found: the k8s tier builds the collector with it")
    module = root / "module"
    module.mkdir(parents=True, exist_ok=True)
    (module / "go.mod").write_text(go_mod(version))
    shutil.copy(SOURCE, module / "main.go")
    env = _go_env() | {"GOFLAGS": "-mod=mod -buildvcs=false"}
    started = time.monotonic()
    log(f"collector: building OpenTelemetry Collector {version} (OTLP in, file out)")
    subprocess.run(["go", "mod", "tidy"], check=True, env=env, cwd=module, capture_output=True)
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_suffix(".tmp")
    subprocess.run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), "."],
                   check=True, env=env, cwd=module)
    tmp.rename(binary)  # only a whole binary counts as cached
    (root / "build-seconds.txt").write_text(f"{time.monotonic() - started:.0f}\n")
    log(f"collector: built in {time.monotonic() - started:.0f}s")


def _value(v: dict):
    """An OTLP JSON AnyValue as Python (the kinds the portal sends)."""
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in v:
            return v[kind]
    if "intValue" in v:
        return int(v["intValue"])  # int64 is a string in OTLP JSON
    return v


def _attributes(items: list[dict] | None) -> dict:
    return {a["key"]: _value(a.get("value") or {}) for a in items or []}


class CollectorServer:
    """One collector process: OTLP/HTTP on `otlp_url`; what it received in `spans()`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.output = workdir / "traces.jsonl"
        self.otlp_port = 0
        self.proc: ManagedProcess | None = None

    @property
    def otlp_url(self) -> str:
        return f"http://127.0.0.1:{self.otlp_port}"

    def start(self, log=print) -> CollectorServer:
        import yaml  # here, not at the top: prebuild runs before the venv

        binary = ensure_collector(log=log)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.otlp_port = free_port()
        config = {
            "receivers": {"otlp": {"protocols": {
                "http": {"endpoint": f"127.0.0.1:{self.otlp_port}"}}}},
            "exporters": {"file": {"path": str(self.output), "format": "json",
                                   "flush_interval": "100ms"}},
            "service": {
                "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file"]}},
                # No own metrics server: its default port would clash between test runs.
                "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
            },
        }
        path = self.workdir / "collector.yaml"
        path.write_text(yaml.safe_dump(config))
        self.proc = ManagedProcess("collector", [str(binary), f"--config={path}"],
                                   log_path=self.workdir / "collector.log").start()

        def ready() -> bool:
            self.proc.raise_if_dead()
            return port_open(self.otlp_port)

        wait_until(ready, timeout=60, what="OpenTelemetry Collector")
        return self

    def spans(self, trace_id: str) -> list[dict]:
        """Every span of the trace the collector wrote out, flattened: name, ids, times in
        nanoseconds since the epoch, attributes, events and the resource's attributes."""
        if not self.output.exists():
            return []
        found = []
        for line in self.output.read_text().splitlines():
            try:
                batch = json.loads(line)
            except ValueError:
                continue  # empty, or the line the exporter is writing now
            for rs in batch.get("resourceSpans") or []:
                resource = _attributes((rs.get("resource") or {}).get("attributes"))
                for ss in rs.get("scopeSpans") or []:
                    for s in ss.get("spans") or []:
                        if s.get("traceId") != trace_id:
                            continue
                        found.append({
                            "name": s["name"], "span_id": s["spanId"],
                            "parent_span_id": s.get("parentSpanId") or "",
                            "start_ns": int(s["startTimeUnixNano"]),
                            "end_ns": int(s["endTimeUnixNano"]),
                            "attributes": _attributes(s.get("attributes")),
                            "events": [{"name": e["name"], "time_ns": int(e["timeUnixNano"]),
                                        "attributes": _attributes(e.get("attributes"))}
                                       for e in s.get("events") or []],
                            "resource": resource,
                        })
        return found

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()
