"""A real kube-apiserver with etcd for the k8s tier, started once per test session."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from fleet.allocations.admission import (
    CHECK_ENTRY_RULES,
    GUARDS_LABEL,
    LEGACY_CHECK_PARAMS,
    PARAMS_API,
    PARAMS_KIND,
)
from fleet.kube import KubeError, KubernetesBackend
from tests.harness.controlplane import ControlPlane, ensure_binaries, ensure_controller_manager
from tests.harness.crds import OWN_CRDS, crd_files
from tests.harness.placement import Placement
from tests.harness.waiting import eventually as _eventually

ROOT = Path(__file__).resolve().parents[2]


def load_all(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def wait_for_crds(admin: KubernetesBackend, names: list[str], timeout: float = 60) -> None:
    pending = set(names)

    def established() -> None:
        for name in list(pending):
            crd = admin.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
            conditions = (crd or {}).get("status", {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                pending.discard(name)
        assert not pending, f"CRDs not established: {pending}"

    _eventually(established, timeout=timeout)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    started = time.monotonic()
    binaries = replace(ensure_binaries(), kube_controller_manager=ensure_controller_manager())
    built = time.monotonic() - started
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane")).start(binaries)
    print(f"\ncontrol plane: binaries ready in {built:.1f}s, "
          f"apiserver ready in {cp.startup_seconds:.1f}s")
    install_platform(cp)
    yield cp
    cp.stop()


def install_platform(cp: ControlPlane) -> KubernetesBackend:
    """What every test cluster holds before a test: the CRDs of the APIs the portal writes,
    NVIDIA's DeviceClasses and the portal's own RBAC (deploy/rbac.yaml). Returns its admin."""
    admin = KubernetesBackend.from_kubeconfig(str(cp.admin_kubeconfig), field_manager="test-admin")
    crds = [doc for f in crd_files() for doc in load_all(f)]
    for crd in crds:
        admin.apply(crd, force=True)
    wait_for_crds(admin, [c["metadata"]["name"] for c in crds])
    for path in (OWN_CRDS / "nvidia-deviceclasses.yaml", ROOT / "deploy" / "rbac.yaml"):
        for doc in load_all(path):
            admin.apply(doc, force=True)
    return admin


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


@pytest.fixture
def kube(portal_kube):
    """The portal's restricted identity as the process-wide backend for one test."""
    from fleet.kube import set_backend

    set_backend(portal_kube)
    yield portal_kube
    set_backend(None)


@pytest.fixture
def fleet(admin_kube, kube, pools):
    """Validated nodes for every pool (two for the dedicated pool, so a block can reserve
    one, and each other pool's ceiling); no guard
    policy left by an earlier test (the database is rolled back between tests and its ids
    restart after a flush, so a leftover policy could bind a namespace name used again)."""
    from fleet.inventory.sync import fleet_sync
    from fleet.models import Pool, Route

    from .gpu_nodes import create_gpu_node

    Pool.objects.filter(pk=pools[Route.SHARED_POOL].pk).update(
        cohort="shared-h100", borrowing_limit_devices=8,
        node_selector={"aifactory.io/pool": "shared"})
    Pool.objects.filter(pk=pools[Route.MIG_VCLUSTER].pk).update(
        cohort="mig-a100")
    for node in admin_kube.list("v1", "Node"):
        admin_kube.delete("v1", "Node", node["metadata"]["name"])
    group = "admissionregistration.k8s.io/v1"
    for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
        for obj in admin_kube.list(group, kind,
                                   label_selector="app.kubernetes.io/managed-by=aifactory-portal"):
            admin_kube.delete(group, kind, obj["metadata"]["name"])
    delete_check_params(admin_kube)  # ...nor their check entries, naming earlier tests' nodes
    for i in range(2):
        create_gpu_node(admin_kube, f"blk-{i}", labels={"aifactory.io/validated": "true",
                                                    "aifactory.io/pool": "dedicated"})
    # Every other pool's validated nodes too, as many as its ceiling: a pool promises only
    # what its synced nodes hold (the cluster's Node objects, read by the real sync).
    for route, prefix, extra in [
            (Route.SHARED_POOL, "shr", {}),
            (Route.CONFIDENTIAL_POOL, "cc", {"aifactory.io/bios-profile": "confidential"}),
            (Route.MIG_VCLUSTER, "mig", {})]:
        pool = Pool.objects.get(pk=pools[route].pk)
        for i in range(-(-pool.capacity_devices // 8)):
            create_gpu_node(admin_kube, f"{prefix}-{i}", product=pool.gpu_model, labels={
                "aifactory.io/validated": "true", "aifactory.io/pool": pool.slug, **extra})
    fleet_sync(backend=kube)
    return admin_kube


def delete_check_params(admin) -> None:
    """Every allocation's check params deleted (only the check reads them, and only for its
    probes: nothing else is refused while they are gone)."""
    for obj in admin.list(PARAMS_API, PARAMS_KIND,
                          label_selector=f"{GUARDS_LABEL}={CHECK_ENTRY_RULES}"):
        admin.delete(PARAMS_API, PARAMS_KIND, obj["metadata"]["name"])


def empty_guard_params(admin, name: str = LEGACY_CHECK_PARAMS) -> None:
    """The guards' params emptied in one write (replaced, never deleted: a binding the API
    server still enforces refuses what it checks while its params are missing)."""
    live = admin.get(PARAMS_API, PARAMS_KIND, name)
    if live is None:
        return
    body = {"apiVersion": PARAMS_API, "kind": PARAMS_KIND,
            "metadata": {"name": name,
                         "resourceVersion": live["metadata"]["resourceVersion"]}}
    path = f"/apis/{PARAMS_API}/guardparams/{name}"
    admin.api_client.call_api(path, "PUT", body=body,
                              header_params={"Content-Type": "application/json"},
                              auth_settings=["BearerToken"], _preload_content=False)


@pytest.fixture(scope="module")
def placement(control_plane, kueue, tmp_path_factory):
    """kube-scheduler and kwok on the control plane, per module that asks for them."""
    started = time.monotonic()
    p = Placement(tmp_path_factory.mktemp("placement")).start(control_plane.admin_kubeconfig)
    print(f"\nplacement: kube-scheduler and kwok ready in {time.monotonic() - started:.1f}s "
          "(builds included)")
    yield p
    p.stop()


@pytest.fixture
def simulated_fleet(fleet, placement, pools):
    """The fixture fleet's dedicated nodes handed to kwok, plus a shared, a confidential and
    a MIG node (its DRA driver publishing 2g.20gb slices)."""
    from fleet.inventory.sync import fleet_sync
    from fleet.models import Pool, Route

    from .gpu_nodes import patch_node, resource_slice
    from .kwok_nodes import FAKE, kwok_node, untaint

    admin = fleet
    _no_leftover_work(admin)
    for name in ("blk-0", "blk-1"):
        patch_node(admin, name, {"metadata": {"annotations": FAKE}})  # a merge: labels stay
        untaint(admin, name)
    kwok_node(admin, "shr-0", {"aifactory.io/pool": "shared"})
    kwok_node(admin, "conf-0", {"aifactory.io/pool": "confidential",
                                 "aifactory.io/bios-profile": "confidential"})
    Pool.objects.filter(pk=pools[Route.CONFIDENTIAL_POOL].pk).update(
        node_selector={"aifactory.io/pool": "confidential"})
    kwok_node(admin, "mig-0", {"aifactory.io/pool": "mig"},
               product="NVIDIA-A100-SXM4-80GB", mig_config="all-2g.20gb")
    admin.apply(resource_slice("mig-0", product="NVIDIA A100-SXM4-80GB", gpus=2,
                               mig={0: ["2g.20gb"] * 3, 1: ["2g.20gb"] * 3}), force=True)
    fleet_sync()
    yield admin
    for name in ("shr-0", "conf-0", "mig-0"):
        admin.delete("v1", "Node", name)
    admin.delete("resource.k8s.io/v1", "ResourceSlice", "mig-0-gpu.nvidia.com")


def _no_leftover_work(admin) -> None:
    """A simulated fleet starts with no earlier module's work: a Job admitted while no
    scheduler ran (tests/k8s/test_kueue_queue_order.py's filler, the admission tests' jobs)
    keeps its pods pending, and the scheduler started here would place them on these nodes,
    taking devices a scenario counts on (seen: b-sweep's pods left unschedulable)."""
    for j in admin.list("batch/v1", "Job"):
        meta = j["metadata"]
        if not meta["namespace"].startswith("kube-"):
            admin.delete("batch/v1", "Job", meta["name"], meta["namespace"])

    def gone() -> None:
        left = [f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                for p in admin.list("v1", "Pod")
                if not p["metadata"]["namespace"].startswith("kube-")]
        for name in left:
            namespace, pod = name.split("/", 1)
            force_delete_pod(admin, pod, namespace)
        assert not left, left

    eventually(gone, timeout=60, interval=0.5)


def force_delete_pod(admin, name: str, namespace: str) -> None:
    """Gone from the API at once: a pod bound to a node no kubelet (or kwok) runs would
    otherwise wait for one forever (seen: the guard tests' intruder probes)."""
    from kubernetes.dynamic.exceptions import NotFoundError

    try:
        admin._dynamic().delete(admin._resource("v1", "Pod"), name=name, namespace=namespace,
                                grace_period_seconds=0)
    except NotFoundError:
        pass


def eventually(fn, timeout: float = 10, **options):
    """The one waiting helper, retrying while the cluster has not caught up yet (options as
    tests.harness.waiting.eventually: interval, what, between, detail)."""
    options.setdefault("retry_on", (AssertionError, KubeError))  # a test may narrow it
    return _eventually(fn, timeout=timeout, **options)


def _webhook_cert(pki: Path, out: Path, address: str) -> None:
    """A serving certificate for Kueue's webhooks on loopback and its visibility server (as
    the API server names it: its Service's DNS name), signed by the test CA."""
    import subprocess

    from tests.harness.kueue import VISIBILITY_SERVICE

    out.mkdir(parents=True, exist_ok=True)
    (out / "san.ext").write_text(
        f"subjectAltName=IP:127.0.0.1,DNS:localhost,IP:{address},"
        f"DNS:{VISIBILITY_SERVICE}.kueue-system.svc\n")
    for argv in (
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kueue-webhook",
         "-keyout", str(out / "tls.key"), "-out", str(out / "tls.csr")],
        ["x509", "-req", "-in", str(out / "tls.csr"), "-CA", str(pki / "ca.crt"),
         "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "2",
         "-extfile", str(out / "san.ext"), "-out", str(out / "tls.crt")],
    ):
        subprocess.run(["openssl", *argv], check=True, capture_output=True)


# The MIG profiles the test pools offer (tests/factories.make_pools): Kueue must map each
# profile's DeviceClass to a logical resource, or MIG claims are not counted at all.
TEST_MIG_PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")


# The home cluster's Kueue is also the MultiKueue manager of the tier (tests/k8s/multikueue.py
# starts its workers): a worker that stops answering is given up, its workloads dispatched
# again, after 20 s rather than Kueue's default 15 minutes; what it left on a worker is
# collected every 30 s. Without a MultiKueue admission check on a queue these change nothing.
MANAGER_SETTINGS = {"gcInterval": "30s", "origin": "aifactory-portal-test",
                    "workerLostTimeout": "20s"}


@pytest.fixture(scope="session")
def kueue(control_plane, admin_kube, tmp_path_factory):
    """The real Kueue controller (v0.17.0 from the module proxy) joined to the test cluster:
    its CRDs converting through its own webhook, its admission webhooks on loopback, the DRA
    gate on and the MIG device classes mapped. Up for the rest of the session."""
    controller = join_kueue(control_plane, admin_kube, tmp_path_factory.mktemp("kueue"),
                            multikueue=MANAGER_SETTINGS)
    yield controller
    controller.stop()


def join_kueue(cp: ControlPlane, admin: KubernetesBackend, workdir: Path, *,
               multikueue: dict | None = None):
    """Start a Kueue for one control plane (each cluster of the tier its own, from the same
    build), with `multikueue` its manager's settings when it dispatches to workers."""
    from fleet.allocations.manifests import kueue_device_class_mappings
    from tests.harness.kueue import (
        KueueController,
        ensure_kueue,
        kueue_crds,
        kueue_webhooks,
        visibility_registration,
    )

    started = time.monotonic()
    binary = ensure_kueue()
    built = time.monotonic() - started
    pki = cp.workdir / "pki"
    certs = workdir / "certs"
    controller = KueueController(workdir)
    _webhook_cert(pki, certs, controller.visibility_address)
    ca = (pki / "ca.crt").read_bytes()
    admin.apply({"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "kueue-system"}}, force=True)
    crds = kueue_crds(ca, controller.webhook_port)
    for crd in crds:
        admin.apply(crd, force=True)
    wait_for_crds(admin, [c["metadata"]["name"] for c in crds])
    controller.start(binary, admin_kubeconfig=cp.admin_kubeconfig, cert_dir=certs,
                     device_class_mappings=kueue_device_class_mappings(TEST_MIG_PROFILES),
                     multikueue=multikueue)
    for hook in kueue_webhooks(ca, controller.webhook_port):
        admin.apply(hook, force=True)
    for obj in visibility_registration(ca, controller.visibility_address,
                                       controller.visibility_port):
        admin.apply(obj, force=True)
    eventually(lambda: _api_service_available(admin), timeout=60)
    print(f"\nkueue: binary ready in {built:.1f}s, controller ready in "
          f"{controller.startup_seconds:.1f}s")
    return controller


def _api_service_available(admin) -> None:
    svc = admin.get("apiregistration.k8s.io/v1", "APIService",
                    "v1beta2.visibility.kueue.x-k8s.io")
    conditions = {c["type"]: c for c in (svc.get("status") or {}).get("conditions") or []}
    available = conditions.get("Available") or {}
    assert available.get("status") == "True", f"visibility API not available: {available}"


def applied_state(obj: dict, manager: str = "aifactory-portal") -> tuple:
    """What a repeated apply by `manager` would change: the fields that manager owns. The
    resourceVersion, generation and apply time are no measure once Kueue runs: it writes
    status, finalizers and defaults of its own, and its conversion webhook re-encodes
    quantities (seen: a second apply then re-stamps the time with the same fields)."""
    return tuple(sorted(str(m.get("fieldsV1"))
                        for m in obj["metadata"].get("managedFields") or []
                        if m["manager"] == manager and m["operation"] == "Apply"))
