"""Fleet sync against the real API server with fake GPU nodes and ResourceSlices."""

from __future__ import annotations

import time

import pytest

from fleet.inventory.selectors import pool_capacity
from fleet.inventory.services import node_set_retiring
from fleet.inventory.sync import fleet_sync
from fleet.models import Allocation, GpuNode, Route
from intake import services
from intake.selectors import pool_facts
from tenants.models import AuditEvent
from tests.factories import make_request
from tests.harness.waiting import eventually

from .gpu_nodes import (
    create_gpu_node,
    gpu_node,
    node_status,
    patch_node,
    patch_node_status,
    resource_slice,
)

pytestmark = pytest.mark.django_db

VALID = {"aifactory.io/validated": "true", "aifactory.io/bios-profile": "performance"}


@pytest.fixture
def clean_nodes(admin_kube):
    """Each test starts with no GPU nodes in the cluster."""
    for node in admin_kube.list("v1", "Node"):
        admin_kube.delete("v1", "Node", node["metadata"]["name"])
    for s in admin_kube.list("resource.k8s.io/v1", "ResourceSlice"):
        admin_kube.delete("resource.k8s.io/v1", "ResourceSlice", s["metadata"]["name"])
    yield admin_kube


def label(admin, name: str, **labels):
    patch_node(admin, name, {"metadata": {"labels": labels}})


def test_labels_conditions_and_cordons_change_the_counts(clean_nodes, portal_kube, pools):
    admin = clean_nodes
    for i in range(3):
        create_gpu_node(admin, f"sh-{i}", labels={**VALID, "aifactory.io/pool": "shared"})
    report = fleet_sync(backend=portal_kube)
    assert (report.nodes, report.created) == (3, 3)
    shared = pools[Route.SHARED_POOL]
    assert pool_capacity(shared).capacity_devices == 24
    assert "validated fleet" in pool_capacity(shared).source

    # Burn-in withdraws validation on one node, NPD reports an ECC error on another.
    label(admin, "sh-0", **{"aifactory.io/validated": "false"})
    patch_node_status(admin, "sh-1", node_status(8, [
        {"type": "GpuEccError", "status": "True", "reason": "DBE",
         "message": "double-bit ECC error on GPU 2"}]))
    report = fleet_sync(backend=portal_kube)
    assert report.changed == 2
    assert pool_capacity(shared).capacity_devices == 8
    sh1 = GpuNode.objects.get(name="sh-1")
    assert sh1.state == "unhealthy" and "double-bit ECC error on GPU 2" in sh1.reason
    assert AuditEvent.objects.filter(subject_type="gpunode", subject_id=sh1.pk,
                                     action="node.changed").exists()

    # A cordon takes the last one out; uncordoning brings it back.
    patch_node(admin, "sh-2", {"spec": {"unschedulable": True}})
    fleet_sync(backend=portal_kube)
    assert pool_capacity(shared).capacity_devices == 0
    assert GpuNode.objects.get(name="sh-2").state == "cordoned"
    patch_node(admin, "sh-2", {"spec": {"unschedulable": None}})
    fleet_sync(backend=portal_kube)
    assert pool_capacity(shared).capacity_devices == 8

    # A deleted node is gone from the capacity and from the table's promisable state.
    admin.delete("v1", "Node", "sh-2")
    report = fleet_sync(backend=portal_kube)
    assert report.gone == 1 and GpuNode.objects.get(name="sh-2").state == "gone"
    assert pool_capacity(shared).capacity_devices == 0

    # The same node coming back, with the very facts it had, is read afresh (not skipped as
    # "unchanged"): present and schedulable again.
    create_gpu_node(admin, "sh-2", labels={**VALID, "aifactory.io/pool": "shared"})
    report = fleet_sync(backend=portal_kube)
    assert GpuNode.objects.get(name="sh-2").state == "schedulable"
    assert pool_capacity(shared).capacity_devices == 8


def test_sync_twice_changes_nothing(clean_nodes, portal_kube, pools):
    create_gpu_node(clean_nodes, "idem-0", labels={**VALID, "aifactory.io/pool": "shared"})
    fleet_sync(backend=portal_kube)
    events = AuditEvent.objects.count()
    report = fleet_sync(backend=portal_kube)
    assert (report.created, report.changed, report.gone) == (0, 0, 0)
    assert AuditEvent.objects.count() == events


def test_mig_devices_from_resource_slices_drive_the_mig_fit(clean_nodes, portal_kube, tenant,
                                                           lead, admin_user, pools):
    admin = clean_nodes
    create_gpu_node(admin, "mig-0", product="NVIDIA-A100-SXM4-80GB",
                    labels={**VALID, "aifactory.io/pool": "mig"})
    admin.apply(resource_slice("mig-0", gpus=2, mig={0: ["1g.10gb"] * 7,
                                                    1: ["3g.40gb", "3g.40gb"]}), force=True)
    fleet_sync(backend=portal_kube)
    facts = pool_facts(pools[Route.MIG_VCLUSTER])
    assert facts.free_mig_slices == {"1g.10gb": 7, "3g.40gb": 2}
    ok = make_request(tenant, lead, submit=True, device_fill="small", replicas=5,
                      mig_profile="1g.10gb", whole_devices=0)
    services.request_approve(request=ok, by=admin_user, reason="fits")
    too_many = make_request(tenant, lead, submit=True, device_fill="small", replicas=3,
                            mig_profile="1g.10gb", whole_devices=0)
    with pytest.raises(services.IntakeError, match="2 free 1g.10gb slice"):
        services.request_approve(request=too_many, by=admin_user, reason="no room")


def test_node_losing_validation_flags_its_dedicated_allocation(clean_nodes, portal_kube,
                                                               tenant, lead, admin_user, pools):
    admin = clean_nodes
    for i in range(2):
        create_gpu_node(admin, f"ded-{i}", labels={
            **VALID, "aifactory.io/pool": "dedicated"},
            annotations={"aifactory.io/burn-in-date": f"2026-11-0{i + 1}"})
    fleet_sync(backend=portal_kube)
    req = make_request(tenant, lead, submit=True, whole_devices=8,
                       isolation_origin="regulatory", isolation_reference="HIPAA PHI")
    req = services.request_approve(request=req, by=admin_user, reason="ok")
    alloc = req.allocation
    assert [n.name for n in alloc.nodes.all()] == ["ded-1"]  # freshest burn-in first

    label(admin, "ded-1", **{"aifactory.io/validated": "false"})
    patch_node(admin, "ded-1", {"metadata": {"annotations": {
        "aifactory.io/validation-failure": "HBM stress test: 3 uncorrectable errors"}}})
    report = fleet_sync(backend=portal_kube)
    assert report.flagged_allocations == [alloc.pk]
    alloc.refresh_from_db()
    assert "ded-1" in alloc.flagged_reason and "HBM stress test" in alloc.flagged_reason
    assert AuditEvent.objects.filter(subject_type="allocation", subject_id=alloc.pk,
                                     action="allocation.flagged").exists()


def test_retiring_a_node_leaves_capacity_at_once(clean_nodes, portal_kube, tenant, lead,
                                                 admin_user, pools):
    create_gpu_node(clean_nodes, "ret-0", labels={**VALID, "aifactory.io/pool": "shared"})
    fleet_sync(backend=portal_kube)
    node = GpuNode.objects.get(name="ret-0")
    node_set_retiring(node=node, by=admin_user, retiring=True, reason="Warranty ends")
    assert pool_capacity(pools[Route.SHARED_POOL]).capacity_devices == 0
    fleet_sync(backend=portal_kube)  # a sync keeps the portal's retirement mark
    node.refresh_from_db()
    assert node.retiring and node.state == "retiring"


def test_fit_check_and_approval_agree(clean_nodes, portal_kube, tenant, lead, admin_user,
                                      pools):
    for i in range(2):
        create_gpu_node(clean_nodes, f"agree-{i}", labels={**VALID, "aifactory.io/pool": "shared"})
    fleet_sync(backend=portal_kube)
    big = make_request(tenant, lead, submit=True, whole_devices=12)
    services.request_approve(request=big, by=admin_user, reason="ok")
    from intake.selectors import plan_for_request

    later = make_request(tenant, lead, submit=True, whole_devices=6)
    _, plan = plan_for_request(later)
    assert plan.fit.value == "fits_later"
    with pytest.raises(services.IntakeError) as err:
        services.request_approve(request=later, by=admin_user, reason="try")
    assert plan.fit_reason in err.value.message


@pytest.mark.django_db(transaction=True)
def test_two_approvals_racing_for_the_last_validated_devices(clean_nodes, portal_kube, tenant,
                                                             lead, pools):
    from tenants.models import PlatformRole
    from tests.factories import make_platform_user
    from tests.harness.concurrency import race

    create_gpu_node(clean_nodes, "race-0", labels={**VALID, "aifactory.io/pool": "shared"})
    fleet_sync(backend=portal_kube)
    a1 = make_platform_user("race-admin-1", PlatformRole.Role.PLATFORM_ADMIN)
    a2 = make_platform_user("race-admin-2", PlatformRole.Role.PLATFORM_ADMIN)
    r1 = make_request(tenant, lead, submit=True, whole_devices=6)
    r2 = make_request(tenant, lead, submit=True, whole_devices=6)
    results, errors = race([
        lambda: services.request_approve(request=r1, by=a1, reason="a"),
        lambda: services.request_approve(request=r2, by=a2, reason="b"),
    ])
    assert len(results) == 1 and len(errors) == 1
    assert "Does not fit now" in errors[0].message
    assert Allocation.objects.count() == 1


def test_benchmark_fleet_sync(clean_nodes, portal_kube, pools):
    """Not a timed assertion: prints how long syncing the fleet takes — first sync, an
    unchanged re-sync, and a re-sync after one node changed. 1,000 nodes by default,
    10,000 with PORTAL_BENCH_FULL=1."""
    import os

    n = 10_000 if os.environ.get("PORTAL_BENCH_FULL") == "1" else 1_000
    admin = clean_nodes
    started = time.monotonic()
    for i in range(n):
        admin.apply(gpu_node(f"bench-{i:05d}", labels={**VALID, "aifactory.io/pool": "shared"}),
                    force=True)
    created = time.monotonic() - started
    first = fleet_sync(backend=portal_kube)
    second = fleet_sync(backend=portal_kube)
    patch_node(admin, "bench-00007", {"spec": {"unschedulable": True}})
    third = fleet_sync(backend=portal_kube)
    print(f"\nBENCHMARK fleet sync of {n} nodes: created in {created:.1f}s; first sync "
          f"{first.seconds:.2f}s ({first.created} new), unchanged re-sync "
          f"{second.seconds:.2f}s ({second.changed} changed), one node cordoned "
          f"{third.seconds:.2f}s ({third.changed} changed)")
    assert first.created == n and second.changed == 0 and third.changed == 1
    assert GpuNode.objects.get(name="bench-00007").cordoned is True
    assert GpuNode.objects.filter(name__startswith="bench-").count() == n


@pytest.mark.django_db(transaction=True)
def test_the_watch_shows_a_change_within_a_second(clean_nodes, portal_kube, pools):
    """`manage.py watch_fleet`'s loop, as the portal's identity against the real API server:
    a cordon, a new node and a deleted one reach the table from the watch, not the beat."""
    import threading

    from django.db import connections

    from fleet.inventory.watch import watch_fleet

    admin = clean_nodes
    create_gpu_node(admin, "w-0", labels={**VALID, "aifactory.io/pool": "shared"})
    stop, events = threading.Event(), []

    def run():
        try:
            watch_fleet(portal_kube, stop=stop, timeout_seconds=3,
                        on_change=lambda *a: events.append(a))
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def until(check, what: str) -> float:
        """Seconds until `check` held (the figure printed below)."""
        started = time.monotonic()
        eventually(lambda: bool(check()), timeout=20, interval=0.02, retry_on=(),
                   what=f"{what} shown")
        return time.monotonic() - started

    try:
        until(lambda: GpuNode.objects.filter(name="w-0").exists(), "the first read")
        # The watch is open once it has reported a change made after that read: an
        # annotation nobody reads. Only then are the figures below the watch's own lag.
        patch_node(admin, "w-0", {"metadata": {"annotations": {"test.aifactory.io/probe": "1"}}})
        until(lambda: any(e[:2] == ("MODIFIED", "w-0") for e in events), "the probe")
        events.clear()  # what the assertion below counts is the watch's report of the changes
        patch_node(admin, "w-0", {"spec": {"unschedulable": True}})
        cordon = until(lambda: GpuNode.objects.get(name="w-0").cordoned, "a cordon")
        create_gpu_node(admin, "w-1", labels={**VALID, "aifactory.io/pool": "shared"})
        added = until(lambda: GpuNode.objects.filter(name="w-1", present=True).exists(),
                      "a new node")
        admin.delete("v1", "Node", "w-1")
        deleted = until(lambda: GpuNode.objects.get(name="w-1").state == "gone", "a deletion")
    finally:
        stop.set()
        thread.join(timeout=15)
    assert {kind for kind, *_ in events} >= {"MODIFIED", "ADDED", "DELETED"}
    assert AuditEvent.objects.filter(action="node.gone").exists()
    print(f"\nBENCHMARK fleet watch: a cordon showed after {cordon * 1000:.0f} ms, a new "
          f"node after {added * 1000:.0f} ms, a deleted one after {deleted * 1000:.0f} ms")
