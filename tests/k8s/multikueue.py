"""MultiKueue workers for the k8s tier: each a control plane of its own (kube-apiserver, etcd,
controller manager), its own Kueue, kube-scheduler and kwok GPU nodes, all from the session's
cached builds. The session's home cluster, whose Kueue runs with MultiKueue settings, is the
manager."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from fleet.kube import KubernetesBackend
from tests.harness.controlplane import ControlPlane, ensure_binaries, ensure_controller_manager
from tests.harness.kueue import KueueController
from tests.harness.placement import Placement

from .conftest import install_platform, join_kueue


@dataclass
class Worker:
    name: str
    cp: ControlPlane
    admin: KubernetesBackend
    kueue: KueueController
    placement: Placement

    def stop(self) -> None:
        # Together: each may take its full grace period to stop.
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(lambda part: part.stop(), (self.placement, self.kueue, self.cp)))


def start_all(names: tuple[str, ...], workdir_of) -> list[Worker]:
    """Every worker at once (each mostly waits for its API server and Kueue)."""
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        return list(pool.map(lambda name: start_worker(name, workdir_of(name)), names))


def stop_all(workers: list[Worker]) -> None:
    with ThreadPoolExecutor(max_workers=max(1, len(workers))) as pool:
        list(pool.map(Worker.stop, workers))


def start_worker(name: str, workdir: Path) -> Worker:
    started = time.monotonic()
    for sub in ("cp", "kueue", "placement"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    binaries = replace(ensure_binaries(), kube_controller_manager=ensure_controller_manager())
    cp = ControlPlane(workdir / "cp").start(binaries)
    admin = install_platform(cp)
    kueue = join_kueue(cp, admin, workdir / "kueue")
    placement = Placement(workdir / "placement").start(cp.admin_kubeconfig)
    print(f"\nworker {name}: control plane, Kueue, scheduler and kwok ready in "
          f"{time.monotonic() - started:.1f}s")
    return Worker(name, cp, admin, kueue, placement)
