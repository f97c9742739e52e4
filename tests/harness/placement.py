"""A cluster that places and runs: kube-scheduler (from the API server's consumer module)
and kwok (simulated nodes), both built from the Go module proxy and cached by version.

kwok marks pods on its nodes Running, and Job pods Succeeded, with the lifecycle stages the
kwok module ships (read from the downloaded module at test time, never copied here).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from .controlplane import (
    KUBERNETES_VERSION,
    _go_env,
    build_beside_control_plane,
    build_kubernetes_command,
)
from .procs import CACHE_ROOT, ManagedProcess

KWOK_VERSION = os.environ.get("PORTAL_TEST_KWOK_VERSION", "v0.8.0")
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat/node-heartbeat.yaml",
          "pod/general/pod-create.yaml", "pod/general/pod-init-container-running.yaml",
          "pod/general/pod-init-container-completed.yaml", "pod/general/pod-ready.yaml",
          "pod/general/pod-complete.yaml", "pod/general/pod-delete.yaml")


def start_delays(*, start_ms: int = 0, run_ms: int = 500) -> dict[str, str]:
    """Pod annotations for kwok's stages: created and started after `start_ms`, finished
    `run_ms` after that (jitter bound equal to the delay: no randomness, so timings in tests
    are the test's; a jitter bound below the delay shortened it)."""
    out = {}
    for stage, ms in (("pod-create", start_ms), ("pod-ready", 0), ("pod-complete", run_ms)):
        out[f"{stage}.stage.kwok.x-k8s.io/delay"] = f"{ms}ms"
        out[f"{stage}.stage.kwok.x-k8s.io/jitter-delay"] = f"{ms}ms"
    return out


def ensure_scheduler(k8s_version: str = KUBERNETES_VERSION, log=print) -> Path:
    """kube-scheduler, built with the API server's build cache (warm after the API server)."""
    return build_kubernetes_command("kube-scheduler", k8s_version, log)


def _kwok_dir(version: str) -> Path:
    return CACHE_ROOT / "kwok" / version


def ensure_kwok(version: str = KWOK_VERSION, log=print) -> Path:
    """kwok, beside the API server's Kubernetes libraries (much faster cold than with its own
    release of them)."""
    return build_beside_control_plane("sigs.k8s.io/kwok/cmd/kwok", version, "kwok",
                                      cache="kwok", log=log)


def kwok_stages(version: str = KWOK_VERSION) -> list[dict]:
    """The lifecycle stages kwok ships, from the module the proxy serves."""
    import yaml  # here, not at the top: prebuild runs before the venv

    info = json.loads(subprocess.run(
        ["go", "mod", "download", "-json", f"sigs.k8s.io/kwok@{version}"], check=True,
        capture_output=True, text=True, env=_go_env(), cwd=_kwok_dir(version)).stdout)
    stage_dir = Path(info["Dir"]) / "kustomize" / "stage"
    return [doc for name in STAGES for doc in yaml.safe_load_all((stage_dir / name).read_text())
            if doc]


class Placement:
    """kube-scheduler and kwok joined to a running control plane."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[ManagedProcess] = []
        self.startup_seconds = 0.0

    def start(self, admin_kubeconfig: Path, log=print) -> Placement:
        import yaml  # here, not at the top: prebuild runs before the venv

        scheduler, kwok = ensure_scheduler(log=log), ensure_kwok(log=log)
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        sched_config = self.workdir / "scheduler.yaml"
        sched_config.write_text(yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "clientConnection": {"kubeconfig": str(admin_kubeconfig), "qps": 200,
                                 "burst": 400}}))
        self.procs.append(ManagedProcess(
            "kube-scheduler", [str(scheduler), f"--config={sched_config}", "--secure-port=0",
                               "--v=1"],
            log_path=self.workdir / "kube-scheduler.log").start())
        kwok_config = self.workdir / "kwok.yaml"
        config = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
                  "options": {"cidr": "10.244.0.0/16", "nodeIP": "10.0.0.1",
                              "manageNodesWithAnnotationSelector": f"{KWOK_ANNOTATION}=fake",
                              "podPlayStageParallelism": 8, "nodePlayStageParallelism": 4,
                              "nodeLeaseParallelism": 4, "podsOnNodeSyncParallelism": 4}}
        kwok_config.write_text(yaml.safe_dump_all([config, *kwok_stages()]))
        self.procs.append(ManagedProcess(
            "kwok", [str(kwok), f"--kubeconfig={admin_kubeconfig}", f"--config={kwok_config}",
                     f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                     "--cidr=10.244.0.0/16", "--node-ip=10.0.0.1", "--v=WARN"],
            log_path=self.workdir / "kwok.log").start())
        self.startup_seconds = time.monotonic() - started
        return self

    def raise_if_dead(self) -> None:
        for p in self.procs:
            p.raise_if_dead()

    def log_tail(self, n: int = 3000) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log_path.read_text()[-n:]}" for p in self.procs
                         if p.log_path.exists())

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()
