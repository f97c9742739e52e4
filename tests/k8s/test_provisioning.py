"""Provisioning per route against the real API server, as the portal's restricted identity."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from fleet.allocations.desired import allocation_manifests, allocation_spec
from fleet.allocations.manifests import OWNED_KINDS, render_manifests
from fleet.allocations.reconcile import allocation_reconcile
from fleet.allocations.services import allocation_retry
from fleet.kube import LABEL_ALLOCATION, KubeError, ObjectKey, set_backend
from fleet.models import Allocation, Pool, Route
from intake import services
from intake.models import CapacityRequest
from tenants.models import AuditEvent
from tests.factories import make_request
from tests.harness.procs import celery_worker

from .approvals import ROUTE_REQUESTS, approve
from .conftest import applied_state, eventually

pytestmark = pytest.mark.django_db


def live(kube, manifest):
    key = ObjectKey.of(manifest)
    return kube.get(key.api_version, key.kind, key.name, key.namespace)


@pytest.mark.parametrize("route", list(ROUTE_REQUESTS))
def test_approve_provisions_every_object_of_the_route(route, kube, fleet, tenant, lead,
                                                      admin_user,
                                                      django_capture_on_commit_callbacks):
    req, alloc = approve(tenant, lead, admin_user, route, django_capture_on_commit_callbacks)
    assert alloc.status == "active", alloc.status_message
    assert req.status == "active"  # the request follows its allocation
    assert (alloc.progress_done, alloc.progress_total) == (len(allocation_manifests(alloc)),) * 2
    manifests = allocation_manifests(alloc)
    for m in manifests:
        assert live(kube, m) is not None, ObjectKey.of(m)
    ns = kube.get("v1", "Namespace", alloc.namespace)
    assert ns["metadata"]["labels"]["aifactory.io/tenant"] == "acme"
    assert ns["metadata"]["labels"]["aifactory.io/route"] == route
    quota = kube.get("v1", "ResourceQuota", "gpu-quota", alloc.namespace)["spec"]["hard"]
    cq = kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", alloc.namespace)["spec"]
    rb = kube.get("rbac.authorization.k8s.io/v1", "RoleBinding", "tenant-leads", alloc.namespace)
    assert rb["subjects"][0]["name"] == "oidc:/tenants/acme/leads"
    if route == Route.SHARED_POOL:
        assert cq["cohortName"] == "shared-h100"
        res = {r["name"]: r for r in cq["resourceGroups"][0]["flavors"][0]["resources"]}
        gpu = res["nvidia.com/gpu"]
        assert (str(gpu["nominalQuota"]), str(gpu["borrowingLimit"])) == ("4", "8")
        assert {"cpu", "memory"} <= set(res)  # Kueue holds what its queue does not cover
        assert quota["requests.nvidia.com/gpu"] == "12"  # quota + borrowing limit
    elif route == Route.DEDICATED_BLOCK:
        assert "cohortName" not in cq
        node = kube.get("v1", "Node", alloc.nodes.get().name)
        assert node["metadata"]["labels"]["aifactory.io/dedicated-to"] == "acme"
        assert node["spec"]["taints"] == [{"key": "aifactory.io/dedicated", "value": "acme",
                                           "effect": "NoSchedule"}]
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    elif route == Route.CONFIDENTIAL_POOL:
        assert quota["requests.nvidia.com/gpu"] == "2"
        flavor = kube.get("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "pool-confidential")
        assert flavor["spec"]["nodeLabels"]["aifactory.io/bios-profile"] == "confidential"
    else:
        assert quota["mig-2g.20gb.aifactory.io.deviceclass.resource.k8s.io/devices"] == "3"
        assert quota["mig.nvidia.com.deviceclass.resource.k8s.io/devices"] == "0"
        rct = kube.get("resource.k8s.io/v1", "ResourceClaimTemplate", "mig-2g-20gb",
                       alloc.namespace)
        exactly = rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        assert exactly["deviceClassName"] == "mig-2g.20gb.aifactory.io"
        assert "selectors" not in exactly  # Kueue refuses CEL in claim templates
        device_class = kube.get("resource.k8s.io/v1", "DeviceClass", "mig-2g.20gb.aifactory.io")
        assert "2g.20gb" in device_class["spec"]["selectors"][0]["cel"]["expression"]
        cluster = kube.get("cluster.x-k8s.io/v1beta2", "Cluster", "vcluster", alloc.namespace)
        assert cluster["spec"]["controlPlaneRef"]["kind"] == "VCluster"

    # Provisioning again changes nothing.
    versions = [applied_state(live(kube, m)) for m in manifests]
    from fleet.allocations.provisioning import allocation_provision

    Allocation.objects.filter(pk=alloc.pk).update(status="pending")
    allocation_provision(alloc.pk)
    assert [applied_state(live(kube, m)) for m in manifests] == versions


def test_dedicated_taint_is_guarded_by_admission_policy(kube, fleet, tenant, lead, admin_user,
                                                       django_capture_on_commit_callbacks):
    approve(tenant, lead, admin_user, Route.DEDICATED_BLOCK, django_capture_on_commit_callbacks)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sneaky",
                                                          "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}],
                    "tolerations": [{"key": "aifactory.io/dedicated", "operator": "Equal",
                                     "value": "acme", "effect": "NoSchedule"}]}}

    def refused():
        # Not pytest.raises: its failure is no AssertionError, and `eventually` would give up
        # at once instead of waiting for the policy to load.
        try:
            fleet.apply(pod, dry_run=True)
        except KubeError as exc:
            return exc
        raise AssertionError("not refused yet")

    from .conftest import eventually

    err = eventually(refused, timeout=15)  # policies take a moment to load
    assert "Only the tenant a dedicated block belongs to may tolerate" in err.message


def test_reconcile_restores_deleted_and_edited_objects_and_reports_drift(
        kube, fleet, tenant, lead, admin_user, django_capture_on_commit_callbacks):
    _, alloc = approve(tenant, lead, admin_user, Route.SHARED_POOL,
                       django_capture_on_commit_callbacks)
    admin = fleet
    admin.delete("kueue.x-k8s.io/v1beta2", "LocalQueue", "gpu", alloc.namespace)
    client = admin._dynamic()
    client.patch(admin._resource("v1", "ResourceQuota"), name="gpu-quota",
                 namespace=alloc.namespace, content_type="application/merge-patch+json",
                 body={"spec": {"hard": {"requests.nvidia.com/gpu": "64"}}})
    found = allocation_reconcile(alloc.pk)
    assert any("LocalQueue" in f and "deleted" in f for f in found)
    assert any("ResourceQuota" in f and "requests.nvidia.com/gpu" in f for f in found)
    assert kube.get("kueue.x-k8s.io/v1beta2", "LocalQueue", "gpu", alloc.namespace)
    assert kube.get("v1", "ResourceQuota", "gpu-quota", alloc.namespace)["spec"]["hard"][
        "requests.nvidia.com/gpu"] == "12"  # quota 4 + borrowing limit 8, as rendered
    alloc.refresh_from_db()
    assert "LocalQueue" in alloc.drift_report
    assert AuditEvent.objects.filter(subject_type="allocation", subject_id=alloc.pk,
                                     action="allocation.drift").exists()
    assert allocation_reconcile(alloc.pk) == []  # repaired: nothing drifts now


def test_expiry_prunes_everything_and_releases_dedicated_nodes(
        kube, fleet, tenant, lead, admin_user, django_capture_on_commit_callbacks):
    from fleet.tasks import expire_allocations

    req, alloc = approve(tenant, lead, admin_user, Route.DEDICATED_BLOCK,
                         django_capture_on_commit_callbacks)
    node = alloc.nodes.get().name
    soon = timezone.now() + dt.timedelta(days=2)
    Allocation.objects.filter(pk=alloc.pk).update(ends_at=soon)
    with django_capture_on_commit_callbacks(execute=True):
        expire_allocations()
    alloc.refresh_from_db()
    req.refresh_from_db()
    assert alloc.status == "expiring" and req.status == "expiring"
    Allocation.objects.filter(pk=alloc.pk).update(ends_at=timezone.now() - dt.timedelta(minutes=1))
    with django_capture_on_commit_callbacks(execute=True):
        expire_allocations()
    alloc.refresh_from_db()
    req.refresh_from_db()
    assert alloc.status == "retired" and req.status == "retired"
    for api_version, kind in OWNED_KINDS:
        left = kube.list(api_version, kind, label_selector=f"{LABEL_ALLOCATION}={alloc.pk}")
        # Deletion was requested for everything (a namespace finishes a moment later).
        assert [o for o in left if not o["metadata"].get("deletionTimestamp")] == [], kind
    # kube-controller-manager's namespace controller finishes what retirement started.
    eventually(lambda: _absent(kube.get("v1", "Namespace", alloc.namespace)), timeout=90)
    labels = kube.get("v1", "Node", node)["metadata"]["labels"]
    assert "aifactory.io/dedicated-to" not in labels
    assert not kube.get("v1", "Node", node)["spec"].get("taints")
    assert "released 1 dedicated node(s)" in AuditEvent.objects.filter(
        subject_type="allocation", subject_id=alloc.pk, action="allocation.retired").get().reason
    assert node in AuditEvent.objects.filter(
        subject_type="allocation", subject_id=alloc.pk,
        action="allocation.nodes_released").get().reason


def test_invalid_object_fails_with_the_server_message_and_is_retriable(
        kube, fleet, tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    Pool.objects.filter(pk=pools[Route.SHARED_POOL].pk).update(device_class="not valid!")
    req, alloc = approve(tenant, lead, admin_user, Route.SHARED_POOL,
                         django_capture_on_commit_callbacks)
    assert alloc.status == "failed" and req.status == "failed"
    assert "ResourceQuota" in alloc.status_message
    assert "not valid!.deviceclass.resource.k8s.io/devices" in alloc.status_message
    # The admin fixes the pool and retries: the same allocation finishes.
    Pool.objects.filter(pk=pools[Route.SHARED_POOL].pk).update(device_class="gpu.nvidia.com")
    with django_capture_on_commit_callbacks(execute=True):
        allocation_retry(allocation=alloc, by=admin_user)
    alloc.refresh_from_db()
    assert alloc.status == "active" and alloc.attempts == 2


def test_forbidden_fails_with_the_server_message(control_plane, outsider_kube, tenant, lead,
                                                 admin_user, pools,
                                                 django_capture_on_commit_callbacks):
    set_backend(outsider_kube)
    try:
        _, alloc = approve(tenant, lead, admin_user, Route.SHARED_POOL,
                           django_capture_on_commit_callbacks)
    finally:
        set_backend(None)
    assert alloc.status == "failed"
    assert "forbidden" in alloc.status_message and "not-bound-to-anything" in alloc.status_message


def test_preview_dry_runs_before_approval(kube, fleet, tenant, lead, pools):
    from intake.preview import request_preview

    req = make_request(tenant, lead, submit=True, **ROUTE_REQUESTS[Route.MIG_VCLUSTER])
    rows = request_preview(req)
    assert rows and all(r.accepted for r in rows), [r.message for r in rows if not r.accepted]
    assert kube.get("v1", "Namespace", f"acme-r{req.pk}") is None  # nothing was created
    # A pool set up wrong shows up in the preview, object by object, before anything exists.
    # (MIG claim templates no longer carry CEL: the profile's DeviceClass does.)
    Pool.objects.filter(pk=pools[Route.MIG_VCLUSTER].pk).update(
        device_class="x' ||| broken")
    rows = request_preview(req)
    bad = [r for r in rows if not r.accepted]
    assert [r.key.kind for r in bad] == ["ResourceQuota"]
    assert "deviceclass.resource.k8s.io/devices" in bad[0].message


@pytest.mark.django_db(transaction=True)
def test_api_server_down_mid_provision_the_worker_retries_and_finishes(
        control_plane, kube, fleet, tenant, lead, admin_user, tmp_path):
    """A real Celery worker provisions while kube-apiserver is stopped, then restarted."""
    from portal.celery import app

    worker = celery_worker(tmp_path / "worker.log", PORTAL_KUBE_BACKEND="kubeconfig",
                           PORTAL_KUBECONFIG=str(control_plane.portal_kubeconfig),
                           PORTAL_PROVISION_RETRY_SECONDS="1", PORTAL_PROVISION_MAX_RETRIES="30")
    app.conf.task_always_eager = False
    try:
        req = make_request(tenant, lead, submit=True, **ROUTE_REQUESTS[Route.SHARED_POOL])
        control_plane.stop_apiserver()
        try:
            services.request_approve(request=req, by=admin_user, reason="during an outage")
            alloc = CapacityRequest.objects.get(pk=req.pk).allocation
            def retrying() -> bool:
                alloc.refresh_from_db()
                return "Retrying after a transient error" in alloc.status_message

            eventually(retrying, timeout=60)
            assert alloc.status == "provisioning"  # claimed before the apply failed
        finally:
            control_plane.start_apiserver()
        def active() -> None:
            worker.raise_if_dead()
            alloc.refresh_from_db()
            assert alloc.status == "active", alloc.status_message

        eventually(active, timeout=90)
    finally:
        app.conf.task_always_eager = True
        worker.stop()
    # No duplicates, no orphans: exactly the desired objects carry the allocation's label.
    desired = {ObjectKey.of(m) for m in render_manifests(
        allocation_spec(alloc))
        if m["kind"] != "Node" and LABEL_ALLOCATION in m["metadata"].get("labels", {})}
    found = set()
    for api_version, kind in OWNED_KINDS:
        for obj in kube.list(api_version, kind, label_selector=f"{LABEL_ALLOCATION}={alloc.pk}"):
            found.add(ObjectKey.of({**obj, "apiVersion": api_version, "kind": kind}))
    assert found == desired
    assert alloc.attempts >= 1


def test_reconcile_prunes_what_retired_allocations_left(kube, fleet, tenant, lead, admin_user,
                                                        django_capture_on_commit_callbacks):
    from fleet.tasks import reconcile_allocations

    _, keep = approve(tenant, lead, admin_user, Route.SHARED_POOL,
                      django_capture_on_commit_callbacks)
    _, gone = approve(tenant, lead, admin_user, Route.SHARED_POOL,
                      django_capture_on_commit_callbacks)
    # A retirement that stopped half-way: the row says retired, the objects are still there.
    Allocation.objects.filter(pk=gone.pk).update(status="retired")
    assert kube.list("kueue.x-k8s.io/v1beta2", "ClusterQueue",
                     label_selector=f"{LABEL_ALLOCATION}={gone.pk}")
    summary = reconcile_allocations()
    assert "leftover object(s) pruned" in summary
    for api_version, kind in OWNED_KINDS:
        left = kube.list(api_version, kind, label_selector=f"{LABEL_ALLOCATION}={gone.pk}")
        assert [o for o in left if not o["metadata"].get("deletionTimestamp")] == [], kind
    # The live allocation and the pool's shared flavor are untouched.
    assert kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", keep.namespace) is not None
    assert kube.get("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "pool-shared") is not None


def _absent(obj) -> None:
    assert obj is None, (obj or {}).get("metadata", {}).get("deletionTimestamp")
