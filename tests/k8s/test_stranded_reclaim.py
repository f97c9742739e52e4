"""Stranded capacity given back, end to end against the real Kueue: DCGM series in a real
Prometheus show one tenant's hold oversized → a finding → its lead accepts → the portal's
resize lowers the ClusterQueue's quota in the real Kueue → the freed devices are free
capacity of the pool → another tenant's queue is grown from them, and its waiting Job is
admitted by Kueue. Prints the time from the lead's yes to Kueue holding the lower quota."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from billing.domain import floor_hour
from billing.models import StrandedFinding
from billing.stranded_reading import detect
from billing.stranded_services import finding_accept, findings_record
from fleet.allocations.resize import allocation_resize
from fleet.inventory.selectors import pool_capacity
from fleet.models import Allocation, Pool, QueueWorkload, Route
from fleet.queues.sync import queue_sync
from tests.harness.prometheus import PrometheusServer, write_openmetrics

from .approvals import provisioned
from .conftest import eventually
from .workloads import job, quota_known, wait_workload

pytestmark = [pytest.mark.django_db]
KUEUE = "kueue.x-k8s.io/v1beta2"
STEP, WINDOW_HOURS = 60, 3
END = floor_hour(timezone.now()) - dt.timedelta(hours=4)  # behind Prometheus' head block
BASE = END - dt.timedelta(hours=WINDOW_HOURS)


def _gpu_quota(admin, name: str) -> int:
    cq = admin.get(KUEUE, "ClusterQueue", name)
    return int(next(r["nominalQuota"] for g in cq["spec"]["resourceGroups"]
                    for f in g["flavors"] for r in f["resources"]
                    if r["name"] == "nvidia.com/gpu"))


def _series(namespace: str) -> dict:
    """Two of the hold's devices busy (0.8 each, 30 GB), the rest idle, every minute."""
    def gpu(i):
        return (("gpu", str(i)), ("UUID", f"GPU-{namespace}-{i}"), ("namespace", namespace),
                ("pod", "serve-0"))
    return {gpu(i): (0.8 if i < 2 else 0.0, 30000 if i < 2 else 0) for i in range(8)}


def test_an_accepted_shrink_frees_quota_kueue_gives_to_another_tenant(
        kueue, fleet, tenant, lead, other_tenant, other_lead, admin_user, pools, settings,
        tmp_path, django_capture_on_commit_callbacks):
    settings.PORTAL_STRANDED_WINDOW_HOURS = WINDOW_HOURS
    shared = pools[Route.SHARED_POOL]
    # No cohort: the other tenant cannot borrow the idle quota; only a smaller hold frees it.
    Pool.objects.filter(pk=shared.pk).update(cohort="", borrowing_limit_devices=0)
    capacity = pool_capacity(Pool.objects.get(pk=shared.pk)).capacity_devices
    big = provisioned(tenant, lead, admin_user, Route.SHARED_POOL,
                      django_capture_on_commit_callbacks, whole_devices=int(capacity) - 4)
    small = provisioned(other_tenant, other_lead, admin_user, Route.SHARED_POOL,
                        django_capture_on_commit_callbacks, whole_devices=4)
    Allocation.objects.filter(pk=big.pk).update(starts_at=BASE - dt.timedelta(days=1))
    assert pool_capacity(Pool.objects.get(pk=shared.pk)).free_devices == 0

    # The big hold's own work: a 2-device job, admitted (what a shrink must leave it).
    fleet.apply(job(big.namespace, devices=2, name="serve"))
    wait_workload(fleet, big.namespace, "serve", want="Admitted", kueue=kueue)
    # The other tenant's job needs 8 devices: more than its 4, so it waits.
    eventually(lambda: quota_known(fleet, small.namespace), timeout=30)
    fleet.apply(job(small.namespace, devices=8, name="train"))
    wait_workload(fleet, small.namespace, "train", want="pending", kueue=kueue)
    queue_sync(fleet)
    assert QueueWorkload.objects.get(allocation=big, job="serve").state == "admitted"

    server = PrometheusServer(tmp_path)
    for i, metric in enumerate(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED")):
        path = tmp_path / f"{metric}.om"
        stamps = range(int(BASE.timestamp()), int(END.timestamp()) + 1, STEP)
        write_openmetrics(path, {labels: [(t, values[i]) for t in stamps]
                                 for labels, values in _series(big.namespace).items()},
                          metric=metric)
        server.backfill(path)
    server.start()
    try:
        findings, judged = detect(END, base_url=server.url)
    finally:
        server.stop()
    findings_record(findings=findings, judged=judged, now=END)
    finding = StrandedFinding.objects.get(allocation=big, kind="oversized", status="open")
    assert finding.action == "shrink" and finding.proposal_data["whole_devices_after"] == 2
    assert _gpu_quota(fleet, big.namespace) == capacity - 4

    started = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        answered = finding_accept(finding=finding, by=lead, reason="serving needs two")
    eventually(lambda: _gpu_quota(fleet, big.namespace) == 2 or None, timeout=30)
    given_back = time.monotonic() - started
    assert answered.status == "accepted" and answered.given_back_devices == capacity - 6
    free = pool_capacity(Pool.objects.get(pk=shared.pk)).free_devices
    assert free == capacity - 6  # given back to the pool, promisable again
    # The running job kept its devices through the shrink.
    assert wait_workload(fleet, big.namespace, "serve", want="Admitted", kueue=kueue)

    # The platform grows the other tenant's queue from what was given back; Kueue admits.
    t0 = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        grown = allocation_resize(allocation=small, size=8, by=admin_user,
                                  reason="capacity given back by a stranded finding")
    assert grown.whole_devices == 8 and _gpu_quota(fleet, small.namespace) == 8
    wait_workload(fleet, small.namespace, "train", want="Admitted", kueue=kueue, timeout=60)
    admitted = time.monotonic() - t0
    print(f"\nBENCHMARK stranded reclaim (real Kueue, {int(capacity)}-device shared pool): "
          f"the lead's yes → Kueue holds the lower quota {given_back * 1000:.0f} ms; the grow "
          f"→ the other tenant's waiting Job admitted {admitted:.2f}s")
