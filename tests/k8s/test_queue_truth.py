"""Queue truth against the real Kueue: four tenants contend in one cohort, and the portal reads
back what happened and explains it to the tenant concerned, and to no one else.

The scenario the seeds ask for: admission within quota, borrowing while peers are idle,
reclaim preemption when a peer returns, and the MIG route admitting claims of its profile
and holding those past its slices. Every check reads the real Kueue's answer first, then
the portal's pages and API after a queue sync as the portal's own restricted identity.
"""

from __future__ import annotations

import json
import time
import uuid
from decimal import Decimal

import pytest
from django.test import Client

from fleet.allocations.desired import allocation_spec
from fleet.allocations.manifests import claim_template_name
from fleet.models import ClusterQueueState, QueueEvent, QueueUsageHour, Route
from fleet.queues.sync import queue_sync
from tests.factories import TenantFactory, make_lead

from .approvals import approve
from .cohorts import four_in_a_cohort
from .conftest import eventually
from .workloads import condition, job, wait_workload, workload_of

pytestmark = [pytest.mark.django_db]
KUEUE = "kueue.x-k8s.io/v1beta2"


def _tenant(slug: str):
    tenant = TenantFactory(slug=slug, name=slug.upper())
    return tenant, make_lead(tenant, f"lead-{slug}")


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _queue_api(user, alloc) -> tuple[int, dict, str]:
    response = _client(user).get(f"/api/allocations/{alloc.pk}/queue/")
    text = response.content.decode()
    return response.status_code, (json.loads(text) if response.status_code == 200 else {}), text


def _cq(admin, name: str) -> dict:
    return admin.get(KUEUE, "ClusterQueue", name)


def _borrowed(admin, name: str) -> int:
    for flavor in (_cq(admin, name).get("status") or {}).get("flavorsReservation") or []:
        for r in flavor.get("resources") or []:
            if r["name"] == "nvidia.com/gpu":
                return int(r.get("borrowed") or 0)
    return 0


@pytest.fixture
def cohort_of_four(fleet, kueue, pools, admin_user,
                   django_capture_on_commit_callbacks):
    """Four tenants, 2 devices each, in a cohort of their own; each may borrow up to 8."""
    return four_in_a_cohort(admin_user, django_capture_on_commit_callbacks, prefix="q")


def test_four_tenants_contend_in_one_cohort_and_each_is_told_only_its_own_story(
        cohort_of_four, fleet, kube, kueue, admin_user):
    (ta, lead_a, a), (tb, lead_b, b), (tc, lead_c, c), (_td, _lead_d, d) = (
        cohort_of_four[k] for k in "abcd")

    # 1. Within quota: admitted.
    a1 = job(a.namespace, devices=2, name="a-train")
    fleet.apply(a1)
    wait_workload(fleet, a.namespace, "a-train", want="Admitted", kueue=kueue)

    # 2. Peers idle: B borrows 4 devices beyond its quota of 2.
    fleet.apply(job(b.namespace, devices=6, name="b-sweep"))
    wait_workload(fleet, b.namespace, "b-sweep", want="Admitted", kueue=kueue)
    assert eventually(lambda: _borrowed_is(fleet, b.namespace, 4), timeout=20) is None
    report = queue_sync(kube)
    assert report.workloads >= 2 and not report.skipped

    status, view_b, _ = _queue_api(lead_b, b)
    assert status == 200
    assert [r["name"] for r in view_b["running"]] == ["b-sweep"]
    assert Decimal(view_b["queue"]["borrowed"]) == 4
    # priced at the pool's rate: 4 borrowed devices × 2.50 an hour
    assert Decimal(view_b["borrowed_price_per_hour"]) == Decimal("10.00")
    admitted = QueueEvent.objects.get(allocation=b, kind="admitted", workload="b-sweep")
    assert admitted.borrowed == 4 and "borrows 4" in admitted.reason

    # 3. C returns: the cohort reclaims what B borrowed; B's job is preempted and requeued.
    # A span, not a wait: B keeps borrowing a little over a second on purpose, so that the
    # queue-hours have a measurable borrowed share to count.
    time.sleep(1.1)
    fleet.apply(job(c.namespace, devices=2, name="c-eval"))
    wait_workload(fleet, c.namespace, "c-eval", want="Admitted", kueue=kueue, timeout=60)
    preempted = eventually(lambda: _preempted(fleet, b.namespace, "b-sweep"), timeout=30)
    assert condition(preempted, "Preempted")["reason"] == "InCohortReclamation"
    raw = condition(preempted, "Preempted")["message"]
    assert c.namespace in raw  # Kueue's own message names the other tenant's queue...
    # ... B now waits: 6 needed, its own 2 plus D's idle 2 are all the cohort can give.
    wait_workload(fleet, b.namespace, "b-sweep", want="pending", kueue=kueue, timeout=30)
    # Positions come from Kueue's visibility API, read as the portal's restricted identity.
    answer = eventually(lambda: _listed_pending(kube, b.namespace), timeout=20)
    assert answer["items"][0]["positionInClusterQueue"] == 0
    report = queue_sync(kube)
    assert report.positions == "visibility", report.summary()

    status, view_b, text_b = _queue_api(lead_b, b)
    assert status == 200 and view_b["running"] == []
    (pending,) = view_b["pending"]
    assert pending["name"] == "b-sweep" and pending["reason_code"] == "cohort"
    assert pending["reason"].startswith("Waiting for 2 more devices")
    assert "the cohort can lend 2 devices now" in pending["reason"]
    assert pending["position"] == 0 and pending["position_source"] == "visibility"
    # B's queue is new: no time limits declared, too few admissions for a history
    assert pending["estimate_basis"] == "none"
    (stop,) = view_b["preemptions"]
    assert stop["kind"] == "preempted" and "reclaimed" in stop["reason"]
    # ... and not a word of who: no other tenant's slug, namespace, queue or job.
    for other in (ta, tc):
        assert other.slug not in text_b
    for name in (a.namespace, c.namespace, d.namespace, "c-eval", "a-train"):
        assert name not in text_b
    # The page says the same.
    page = _client(lead_b).get(f"/allocations/{b.pk}/queue/").content.decode()
    assert "Waiting for 2 more devices" in page and "reclaimed" in page
    assert c.namespace not in page and tc.slug not in page
    # Kueue's message is kept, for platform admins only.
    event = QueueEvent.objects.get(allocation=b, kind="preempted")
    assert c.namespace in event.detail
    admin_page = _client(admin_user).get(f"/allocations/{b.pk}/queue/").content.decode()
    assert c.namespace in admin_page

    # A and C see their own running work and nothing of B's.
    _, view_a, text_a = _queue_api(lead_a, a)
    assert [r["name"] for r in view_a["running"]] == ["a-train"] and view_a["pending"] == []
    assert "b-sweep" not in text_a and b.namespace not in text_a
    _, view_c, _ = _queue_api(lead_c, c)
    assert [r["name"] for r in view_c["running"]] == ["c-eval"]
    # A tenant asking for another's queue is told it does not exist.
    assert _queue_api(lead_a, b)[0] == 404
    assert _client(lead_a).get(f"/allocations/{b.pk}/queue/").status_code == 404

    # Borrowing was measured from admissions: B's queue-hours hold borrowed device-seconds.
    hours = QueueUsageHour.objects.filter(allocation=b)
    assert sum(h.borrowed_s for h in hours) > 0
    # Admins see the cohort: B waits; D lends nothing in use, A and C use their quota.
    cohorts = _client(admin_user).get("/api/allocations/cohorts/").json()
    (group,) = [g for g in cohorts if g["name"] == b.pool.cohort]
    rows = {r["queue"]: r for r in group["queues"]}
    assert rows[b.namespace]["pending"] == 1 and rows[b.namespace]["tenant"] == tb.slug
    assert Decimal(rows[a.namespace]["in_use"]) == 2 and Decimal(rows[c.namespace]["in_use"]) == 2
    assert _client(lead_a).get("/api/allocations/cohorts/").status_code == 403
    assert ClusterQueueState.objects.get(name=b.namespace).pending == 1


def test_the_mig_route_admits_its_slices_and_holds_what_is_past_them(
        fleet, kube, kueue, pools, admin_user,
        django_capture_on_commit_callbacks):
    tenant, lead = _tenant(f"m{uuid.uuid4().hex[:5]}")
    _req, alloc = approve(tenant, lead, admin_user, Route.MIG_VCLUSTER,
                          django_capture_on_commit_callbacks)
    alloc.refresh_from_db()
    assert alloc.status == "active", alloc.status_message
    spec = allocation_spec(alloc)
    template = claim_template_name(spec.mig_profile)
    assert alloc.mig_count == 3
    fleet.apply(job(alloc.namespace, claim_template=template, pods=2, name="m-two"))
    wait_workload(fleet, alloc.namespace, "m-two", want="Admitted", kueue=kueue)
    fleet.apply(job(alloc.namespace, claim_template=template, pods=2, name="m-more"))
    wait_workload(fleet, alloc.namespace, "m-more", want="pending", kueue=kueue)
    fleet.apply(job(alloc.namespace, claim_template=template, pods=4, name="m-huge"))
    wait_workload(fleet, alloc.namespace, "m-huge", want="pending", kueue=kueue)
    queue_sync(kube)

    status, view, _ = _queue_api(lead, alloc)
    assert status == 200
    assert view["queue"]["resource"] == f"mig.aifactory.io/{spec.mig_profile}"
    assert [(r["name"], Decimal(r["devices"])) for r in view["running"]] == [("m-two", 2)]
    by_name = {p["name"]: p for p in view["pending"]}
    assert by_name["m-more"]["reason"].startswith(
        f"Waiting for 1 more {spec.mig_profile} slice")
    assert by_name["m-huge"]["reason_code"] == "never"
    assert "more than this allocation can ever hold" in by_name["m-huge"]["reason"]


def _listed_pending(portal_kube, cluster_queue: str) -> dict:
    answer = portal_kube.get_path(
        f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{cluster_queue}/"
        "pendingworkloads")
    assert answer and answer.get("items"), answer
    return answer


def _borrowed_is(admin, name: str, n: int) -> None:
    assert _borrowed(admin, name) == n, _cq(admin, name).get("status")


def _preempted(admin, namespace: str, job_name: str) -> dict:
    wl = workload_of(admin, namespace, job_name)
    assert condition(wl, "Preempted").get("status") == "True", wl and wl.get("status")
    return wl
