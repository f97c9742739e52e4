"""The queue policy of every route against the real Kueue (docs/queue-policy.md): within a
tenant's own queue a higher-priority job preempts a lower-priority one, cohort or not; and a
workload Kueue deactivates (here: past the time limit it declared) is explained as what it
is, never as waiting."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from django.test import Client

from fleet.allocations.desired import allocation_spec
from fleet.models import Route
from fleet.queues.sync import queue_sync

from .approvals import provisioned
from .conftest import eventually
from .workloads import condition, job, wait_workload, workload_of

pytestmark = [pytest.mark.django_db]
KUEUE = "kueue.x-k8s.io/v1beta2"
FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures"


@pytest.fixture
def priorities(fleet):
    for name, value in (("batch-low", 10), ("urgent-high", 1000)):
        fleet.apply({"apiVersion": KUEUE, "kind": "WorkloadPriorityClass",
                     "metadata": {"name": name}, "value": value,
                     "description": f"test priority {value}"}, force=True)
    return {"low": "batch-low", "high": "urgent-high"}


def _route_job(fleet, alloc, *, units: int, priority: str, name: str) -> dict:
    """A job that fills `units` devices (or slices) of the allocation's queue."""
    spec = allocation_spec(alloc)
    if alloc.route == Route.MIG_VCLUSTER:
        body = job(alloc.namespace, claim_template=f"mig-{spec.mig_profile.replace('.', '-')}",
                   pods=units, name=name)
    elif alloc.route == Route.CONFIDENTIAL_POOL:
        fleet.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                     "metadata": {"name": spec.confidential_runtime_class},
                     "handler": spec.confidential_runtime_class}, force=True)
        body = job(alloc.namespace, devices=units, name=name,
                   runtime_class=spec.confidential_runtime_class)
    else:
        body = job(alloc.namespace, devices=units, name=name)
    body["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority
    return body


def _quota_units(alloc) -> int:
    return alloc.mig_count if alloc.route == Route.MIG_VCLUSTER else alloc.whole_devices


@pytest.mark.parametrize("route", [Route.SHARED_POOL, Route.DEDICATED_BLOCK,
                                   Route.CONFIDENTIAL_POOL, Route.MIG_VCLUSTER])
def test_priority_preempts_within_the_tenants_own_queue_on_every_route(
        route, kueue, fleet, tenant, lead, admin_user, priorities, pools,
        django_capture_on_commit_callbacks):
    from fleet.models import Pool

    if route in (Route.SHARED_POOL, Route.MIG_VCLUSTER):
        # A cohort of its own: with idle peers Kueue would borrow for the urgent job rather
        # than preempt (its documented preference); here there is nothing to borrow.
        Pool.objects.filter(pk=pools[route].pk).update(cohort=f"prio-{uuid.uuid4().hex[:6]}")
    alloc = provisioned(tenant, lead, admin_user, route, django_capture_on_commit_callbacks)
    cq = fleet.get(KUEUE, "ClusterQueue", alloc.namespace)
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
    units = _quota_units(alloc)
    low = _route_job(fleet, alloc, units=units, priority=priorities["low"], name="batch")
    fleet.apply(low)
    wait_workload(fleet, alloc.namespace, "batch", want="Admitted", kueue=kueue)
    high = _route_job(fleet, alloc, units=units, priority=priorities["high"], name="urgent")
    fleet.apply(high)
    # The urgent job takes the queue; the batch job is preempted by its own tenant's work.
    wait_workload(fleet, alloc.namespace, "urgent", want="Admitted", kueue=kueue, timeout=60)

    def preempted():
        wl = workload_of(fleet, alloc.namespace, "batch")
        assert condition(wl, "Preempted").get("reason") == "InClusterQueue", wl["status"]
        return wl

    eventually(preempted, timeout=30)
    queue_sync()
    user = Client()
    user.force_login(lead)
    answer = user.get(f"/api/allocations/{alloc.pk}/queue/").json()
    assert "higher-priority job of yours" in answer["queue"]["policy"]
    said = [p["reason"] for p in answer["preemptions"] if p["name"] == "batch"]
    assert said and "a higher-priority job of yours" in said[0], answer


def test_a_job_past_its_time_limit_is_deactivated_not_waiting(
        kueue, fleet, tenant, lead, admin_user, django_capture_on_commit_callbacks):
    alloc = provisioned(tenant, lead, admin_user, Route.SHARED_POOL,
                        django_capture_on_commit_callbacks)
    body = job(alloc.namespace, devices=1, name=f"short-{uuid.uuid4().hex[:4]}")
    body["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = "1"
    fleet.apply(body)
    name = body["metadata"]["name"]
    wait_workload(fleet, alloc.namespace, name, want="Admitted", kueue=kueue)

    def deactivated():
        wl = workload_of(fleet, alloc.namespace, name)
        assert wl["spec"].get("active") is False, wl.get("status")
        assert condition(wl, "Evicted").get("status") == "True", wl.get("status")
        return wl

    wl = eventually(deactivated, timeout=60)
    reason = condition(wl, "Evicted")["reason"]
    assert reason.startswith("DeactivatedDueTo"), reason  # what Kueue really writes
    if not (FIXTURES / "kueue_workload_deactivated.json").exists():
        FIXTURES.mkdir(exist_ok=True)  # the unit tests' fixture, captured from this Kueue
        (FIXTURES / "kueue_workload_deactivated.json").write_text(json.dumps(wl, indent=1))
    queue_sync()
    user = Client()
    user.force_login(lead)
    answer = user.get(f"/api/allocations/{alloc.pk}/queue/").json()
    assert [p for p in answer["pending"] if p["name"] == name] == []  # not waiting
    stopped = [d for d in answer["deactivated"] if d["name"] == name]
    assert stopped and "time limit" in stopped[0]["reason"], answer
    panel = user.get(f"/allocations/{alloc.pk}/queue/").content.decode()
    waiting = panel.split("<h3>Waiting</h3>", 1)[1].split("<h3>", 1)[0]
    assert name not in waiting  # the page does not list it as waiting either
    assert "time limit" in panel.split("<h3>Deactivated</h3>", 1)[1]
