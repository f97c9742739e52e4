"""A preemption as the tenant reads it while it happens: being preempted (its pods stopping,
never "running"), requeued, admitted again, running again — on the queue panel and in the
API, with the times, the count and the run time it lost. Rows as the queue sync writes them
(read → decide → write); the real Kueue's side is tests/k8s/test_kueue_preemption.py."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from decimal import Decimal

import pytest
from django.utils import timezone

from fleet.models import Allocation, ClusterQueueState, QueueWorkload, Route
from fleet.queues.placement import Placement
from fleet.queues.sync import record_workloads
from fleet.queues.truth import ADMITTED, PENDING, STOPPING, Stop, WorkloadFacts

pytestmark = pytest.mark.django_db

T0 = timezone.now().replace(microsecond=0) - dt.timedelta(hours=1)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture
def alloc(tenant, pools):
    a = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.DEDICATED_BLOCK], route=Route.DEDICATED_BLOCK,
        whole_devices=8, device_equivalents=Decimal(8), namespace="acme-p1", status="active",
        starts_at=T0 - dt.timedelta(days=1))
    ClusterQueueState.objects.create(name="acme-p1", allocation=a, resource="nvidia.com/gpu",
                                     nominal=Decimal(8), usage=Decimal(8), observed_at=T0)
    return a


BATCH = WorkloadFacts(uid="wl-batch", namespace="acme-p1", name="job-batch-x", job="batch",
                      local_queue="gpu", cluster_queue="acme-p1", priority=10,
                      submitted_at=at(0), devices=Decimal(8), state=ADMITTED,
                      admitted_at=at(5), resource_version="1")
STOP = Stop(at(125), "Preempted", "InClusterQueue", "preempted by acme-p1/urgent")


def record(alloc, f, now, placement=None):
    record_workloads([f], queues={}, positions={}, allocations={alloc.namespace: alloc},
                     now=now, placements={f.uid: placement} if placement else {})


def panel(client, alloc) -> str:
    return client.get(f"/allocations/{alloc.pk}/queue/").content.decode()


def section(page: str, title: str) -> str:
    return page.split(f"<h3>{title}</h3>", 1)[1].split("<h3>", 1)[0]


def test_a_preemption_is_told_as_it_happens_and_counted(client, lead, alloc):
    client.force_login(lead)
    record(alloc, BATCH, at(10), Placement(pods_at=at(6), running_at=at(25)))
    assert "batch" in section(panel(client, alloc), "Running")

    # Kueue preempts it; its pods are stopping and the quota is still reserved.
    stopping = replace(BATCH, state=STOPPING, stop=STOP, resource_version="2")
    record(alloc, stopping, at(126))
    api = client.get(f"/api/allocations/{alloc.pk}/queue/").json()
    assert api["running"] == []
    (s,) = api["stopping"]
    assert (s["name"], s["kind"], s["reason_code"]) == ("batch", "preempted", "InClusterQueue")
    assert s["reason"].startswith("Being preempted: a higher-priority job of yours")
    assert "acme-p1/urgent" not in str(api)  # Kueue's message is for platform admins
    page = panel(client, alloc)
    assert "batch" not in section(page, "Running")
    assert "Being preempted: a higher-priority job of yours" in section(
        page, "Being preempted / stopping")
    (job,) = api["jobs"]
    assert job["state"] == "stopping" and job["preemptions"] == 1
    assert job["lost_run_seconds"] == 100.0  # ran from 25 s to the preemption at 125 s

    # Its pods stopped: requeued; then admitted again and running again.
    waiting = replace(BATCH, state=PENDING, admitted_at=None, stop=STOP,
                      requeued_at=at(127), resource_version="3")
    record(alloc, waiting, at(128))
    api = client.get(f"/api/allocations/{alloc.pk}/queue/").json()
    assert api["stopping"] == [] and [p["name"] for p in api["pending"]] == ["batch"]
    again = replace(BATCH, admitted_at=at(200), requeued_at=at(127), resource_version="4")
    record(alloc, again, at(201), Placement(pods_at=at(201), running_at=at(204)))
    api = client.get(f"/api/allocations/{alloc.pk}/queue/").json()
    assert [r["name"] for r in api["running"]] == ["batch"]
    (job,) = api["jobs"]
    assert [(st["kind"], st["at"]) for st in job["steps"]] == [
        (k, t.isoformat().replace("+00:00", "Z")) for k, t in (
            ("submitted", at(0)), ("admitted", at(5)), ("pods", at(6)), ("running", at(25)),
            ("preempted", at(125)), ("requeued", at(127)), ("admitted", at(200)),
            ("pods", at(201)), ("running", at(204)))]
    assert job["state"] == "admitted" and job["preemptions"] == 1 and job["stops"] == 1
    assert job["lost_run_seconds"] == 100.0
    readmitted = [st for st in job["steps"] if st["kind"] == "admitted"][1]
    assert readmitted["seam_seconds"] == 73.0  # waited from its requeue
    assert readmitted["reason"].startswith("Admitted again")
    page = panel(client, alloc)
    assert "preempted 1×, 2 min of run time lost" in section(page, "Jobs, step by step")
    assert QueueWorkload.objects.get(uid="wl-batch").state == ADMITTED
