"""A real kube-apiserver with etcd for the k8s tier, started once per test session."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from fleet.kube import KubeError, KubernetesBackend
from tests.harness.controlplane import ControlPlane, ensure_binaries
from tests.harness.crds import OWN_CRDS, crd_files

ROOT = Path(__file__).resolve().parents[2]


def load_all(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def wait_for_crds(admin: KubernetesBackend, names: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for name in list(pending):
            crd = admin.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
            conditions = (crd or {}).get("status", {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                pending.discard(name)
        time.sleep(0.2)
    assert not pending, f"CRDs not established: {pending}"


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    started = time.monotonic()
    binaries = ensure_binaries()
    built = time.monotonic() - started
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane")).start(binaries)
    print(f"\ncontrol plane: binaries ready in {built:.1f}s, "
          f"apiserver ready in {cp.startup_seconds:.1f}s")
    admin = KubernetesBackend.from_kubeconfig(str(cp.admin_kubeconfig), field_manager="test-admin")
    crds = [doc for f in crd_files() for doc in load_all(f)]
    for crd in crds:
        admin.apply(crd, force=True)
    wait_for_crds(admin, [c["metadata"]["name"] for c in crds])
    for path in (OWN_CRDS / "nvidia-deviceclasses.yaml", ROOT / "deploy" / "rbac.yaml"):
        for doc in load_all(path):
            admin.apply(doc, force=True)
    yield cp
    cp.stop()


@pytest.fixture(scope="session")
def admin_kube(control_plane) -> KubernetesBackend:
    return KubernetesBackend.from_kubeconfig(str(control_plane.admin_kubeconfig),
                                             field_manager="test-admin")


@pytest.fixture(scope="session")
def portal_kube(control_plane) -> KubernetesBackend:
    """The portal's own restricted identity, bound to deploy/rbac.yaml's ClusterRole."""
    return KubernetesBackend.from_kubeconfig(str(control_plane.portal_kubeconfig))


@pytest.fixture(scope="session")
def outsider_kube(control_plane) -> KubernetesBackend:
    return KubernetesBackend.from_kubeconfig(str(control_plane.outsider_kubeconfig))


def eventually(fn, timeout: float = 10):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (AssertionError, KubeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
