"""One order for a queue, against the real Kueue: three jobs wait behind a full quota, and the
portal's position, row order and "ahead of it" are Kueue's own visibility answer — and the
rule the portal falls back on without that API (fleet/queues/order.py) gives the same order."""

from __future__ import annotations

import re
import uuid

import pytest
from django.test import Client

from fleet.models import Pool, QueueWorkload, Route
from fleet.queues.order import kueue_order
from fleet.queues.reading import row_facts
from fleet.queues.sync import queue_sync

from .approvals import provisioned
from .conftest import eventually
from .workloads import job, wait_workload

pytestmark = [pytest.mark.django_db]
KUEUE = "kueue.x-k8s.io/v1beta2"


def _pending(portal_kube, cluster_queue: str, n: int) -> list[dict]:
    answer = portal_kube.get_path(
        f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{cluster_queue}/"
        "pendingworkloads")
    items = (answer or {}).get("items") or []
    assert len(items) == n, answer
    return sorted(items, key=lambda i: i["positionInClusterQueue"])


def test_three_waiting_jobs_are_shown_in_kueues_one_order(
        kueue, fleet, kube, tenant, lead, admin_user, pools,
        django_capture_on_commit_callbacks):
    # A cohort of its own: nothing to borrow, so the three wait behind the full quota.
    Pool.objects.filter(pk=pools[Route.SHARED_POOL].pk).update(
        cohort=f"order-{uuid.uuid4().hex[:6]}")
    alloc = provisioned(tenant, lead, admin_user, Route.SHARED_POOL,
                        django_capture_on_commit_callbacks)
    fleet.apply({"apiVersion": KUEUE, "kind": "WorkloadPriorityClass",
                 "metadata": {"name": "order-urgent"}, "value": 500,
                 "description": "test priority 500"}, force=True)
    # The filler runs at the urgent priority too: the ClusterQueue preempts lower priorities
    # within itself, and an "urgent" allowed to evict it would be admitted, not waiting.
    filler = job(alloc.namespace, devices=alloc.whole_devices, name="fill")
    filler["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "order-urgent"
    fleet.apply(filler)
    wait_workload(fleet, alloc.namespace, "fill", want="Admitted", kueue=kueue)
    devices = {"first": 3, "second": 1, "urgent": 2}
    for name in ("first", "second", "urgent"):
        body = job(alloc.namespace, devices=devices[name], name=name)
        if name == "urgent":
            body["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "order-urgent"
        fleet.apply(body)
        wait_workload(fleet, alloc.namespace, name, want="pending", kueue=kueue)

    items = eventually(lambda: _pending(kube, alloc.namespace, 3), timeout=30)
    kueue_rows = [next(o["name"] for o in i["metadata"]["ownerReferences"]) for i in items]
    assert kueue_rows[0] == "urgent"  # higher priority first, though submitted last
    report = queue_sync(kube)
    assert report.positions == "visibility", report.summary()

    # The rule the portal falls back on orders them as Kueue does.
    waiting = [row_facts(r) for r in QueueWorkload.objects.filter(
        allocation=alloc, state=QueueWorkload.State.PENDING)]
    assert [w.job for w in sorted(waiting, key=kueue_order)] == kueue_rows

    user = Client()
    user.force_login(lead)
    api = user.get(f"/api/allocations/{alloc.pk}/queue/").json()["pending"]
    assert [p["name"] for p in api] == kueue_rows
    assert [p["position"] for p in api] == [i["positionInClusterQueue"] for i in items] \
        == [0, 1, 2]
    assert {p["position_source"] for p in api} == {"visibility"}
    page = user.get(f"/allocations/{alloc.pk}/queue/").content.decode()
    table = page.split("<h3>Waiting</h3>", 1)[1].split("<h3>", 1)[0]
    shown = re.findall(r"<td>(\d+)</td>\s*<td><code>([^<]+)</code>", table)
    assert shown == [(str(i + 1), name) for i, name in enumerate(kueue_rows)]
    # "Ahead of it" is exactly the rows above, with their devices.
    for i, p in enumerate(api):
        above = kueue_rows[:i]
        if not above:
            assert "ahead of it" not in p["reason"], p
            continue
        n = sum(devices[a] for a in above)
        assert f"({len(above)} of your workload(s) ahead of it need {n} device" \
            in p["reason"], p
