"""A real Prometheus (Debian's) loaded with backfilled DCGM history for the metrics tier."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .procs import ManagedProcess, free_port, port_open, wait_until

Labels = tuple[tuple[str, str], ...]


def write_openmetrics(path: Path, series: dict[Labels, list[tuple[int, float]]],
                      metric: str = "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                      more: dict[str, dict] | None = None) -> None:
    """series: labels → [(unix seconds, value)], ascending. One family, series after series;
    `more` (metric → series) adds families to the same file, so one backfill makes one set
    of blocks for all. Written as it goes (the rollup benchmark writes millions of samples)."""
    with path.open("w") as out:
        for name, family in {metric: series, **(more or {})}.items():
            out.write(f"# TYPE {name} gauge\n")
            for labels, samples in family.items():
                label_text = ",".join(f'{k}="{v}"' for k, v in labels)
                out.writelines(f"{name}{{{label_text}}} {value} {ts}\n"
                               for ts, value in samples)
        out.write("# EOF\n")


class PrometheusServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = 0
        self.proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def backfill(self, openmetrics: Path) -> None:
        data = self.workdir / "tsdb"
        data.mkdir(parents=True, exist_ok=True)
        subprocess.run([shutil.which("promtool") or "promtool", "tsdb",
                        "create-blocks-from", "openmetrics", str(openmetrics), str(data)],
                       check=True, capture_output=True)

    def start(self) -> PrometheusServer:
        self.port = free_port()
        self.proc = ManagedProcess(
            "prometheus",
            [shutil.which("prometheus") or "prometheus", "--config.file=/dev/null",
             f"--storage.tsdb.path={self.workdir / 'tsdb'}",
             "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{self.port}"],
            log_path=self.workdir / "prometheus.log").start()

        def ready() -> bool:
            self.proc.raise_if_dead()
            if not port_open(self.port):
                return False
            import requests

            try:
                return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_until(ready, timeout=60, what="Prometheus")
        return self

    def blocks(self) -> int:
        """Persisted TSDB blocks (promtool writes one per two hours of backfill; Prometheus
        compacts them into longer ones about a minute after it starts, and on)."""
        data = self.workdir / "tsdb"
        return sum(1 for d in data.iterdir() if d.is_dir() and (d / "meta.json").exists())

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()
