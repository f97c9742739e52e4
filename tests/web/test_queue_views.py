"""The queue of an allocation and the cohort board: who may see them, what they say, and that
a tenant never learns another tenant's names from them. Rows as the queue sync writes them
(the demo's queue state); the real Kueue's side is in tests/k8s/test_queue_truth.py."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from fleet.inventory.pricing import pool_rate
from fleet.kube import DryRunBackend
from fleet.models import Allocation, ClusterQueueState, QueueEvent, QueueWorkload, Route
from fleet.queues.sync import queue_sync
from portal.demo_queues import seed_demo_queues

pytestmark = pytest.mark.django_db


def _allocation(tenant, pool, namespace):
    return Allocation.objects.create(
        tenant=tenant, pool=pool, route=Route.SHARED_POOL, whole_devices=4,
        device_equivalents=Decimal(4), namespace=namespace, status="active",
        starts_at=timezone.now() - dt.timedelta(days=20))


@pytest.fixture
def queues(tenant, other_tenant, pools):
    pool = pools[Route.SHARED_POOL]
    pool.cohort, pool.borrowing_limit_devices = "shared-h100", 8
    pool.save()
    acme = _allocation(tenant, pool, "acme-r1")
    globex = _allocation(other_tenant, pool, "globex-r2")
    seed_demo_queues(timezone.now())
    return acme, globex


@pytest.fixture
def users(lead, other_lead, member, admin_user, finance_user):
    return {"lead": lead, "other_lead": other_lead, "member": member, "admin": admin_user,
            "finance": finance_user}


@pytest.mark.parametrize(("who", "status"), [
    ("lead", 200), ("member", 200), ("other_lead", 404), ("admin", 200), ("finance", 200)])
def test_an_allocations_queue_is_its_tenants_and_the_platforms(client, users, queues, who,
                                                               status):
    acme, _ = queues
    client.force_login(users[who])
    assert client.get(f"/allocations/{acme.pk}/queue/").status_code == status
    assert client.get(f"/api/allocations/{acme.pk}/queue/").status_code == status


@pytest.mark.parametrize(("who", "status"), [
    ("lead", 403), ("member", 403), ("other_lead", 403), ("finance", 403), ("admin", 200)])
def test_the_cohort_board_is_for_platform_admins(client, users, queues, who, status):
    client.force_login(users[who])
    assert client.get("/fleet/cohorts/").status_code == status
    assert client.get("/api/allocations/cohorts/").status_code == status


def test_the_waiting_tenant_is_told_why_without_a_word_of_its_peer(client, lead, queues):
    acme, globex = queues
    client.force_login(lead)
    view = client.get(f"/api/allocations/{acme.pk}/queue/").json()
    (waiting,) = view["pending"]
    assert waiting["name"] == "eval-3" and waiting["reason_code"] == "cohort"
    since = acme.workloads.get(job="train-7").admitted_at
    # A time of today reads as its clock time; of an earlier day, with its date (this test
    # runs past midnight too).
    since = f"{since:%H:%M}" if since.date() == timezone.now().date() else \
        f"{since:%Y-%m-%d %H:%M}"
    assert waiting["reason"] == (
        "Waiting for 2 more devices: your quota of 4 devices has 2 devices unused (lent to the "
        f"cohort meanwhile), the rest is in use by train-7 (2 devices) since {since}; the "
        "cohort has none to lend now: its other queues use all of their own quota and borrow "
        "yours, and that borrowed work is reclaimed (preempted) for this one once it fits in "
        "your quota.")
    assert waiting["estimate_basis"] == "limits" and waiting["estimated_start"]
    assert view["estimates_track_record"]["count"] > 0
    assert len(view["history"]) == 14 and any(d["preemptions"] for d in view["history"])
    page = client.get(f"/allocations/{acme.pk}/queue/").content.decode()
    for text in (view, page):
        text = str(text)
        assert "globex" not in text and "batch-score" not in text and "Globex" not in text


def test_the_borrowing_tenant_sees_what_it_borrows_and_its_price(client, other_lead, queues):
    _, globex = queues
    client.force_login(other_lead)
    view = client.get(f"/api/allocations/{globex.pk}/queue/").json()
    assert Decimal(view["queue"]["borrowed"]) == 2
    assert Decimal(view["borrowed_price_per_hour"]) == Decimal("5.00")  # 2 × 2.50
    assert "acme" not in str(view) and "eval-3" not in str(view)


def test_admins_see_who_is_blocked_by_whom(client, admin_user, queues):
    acme, globex = queues
    client.force_login(admin_user)
    (group,) = [g for g in client.get("/api/allocations/cohorts/").json()
                if g["name"] == "shared-h100"]
    rows = {r["queue"]: r for r in group["queues"]}
    assert rows["acme-r1"]["blocked_by"] == ["globex-r2"] and rows["acme-r1"]["pending"] == 1
    assert Decimal(rows["globex-r2"]["borrowed"]) == 2
    assert Decimal(rows["acme-r1"]["lent"]) == 2
    page = client.get("/fleet/cohorts/").content.decode()
    assert "globex (globex-r2)" in page


def test_queries_do_not_grow_with_the_queue(client, lead, queues, django_assert_max_num_queries):
    acme, _ = queues
    client.force_login(lead)
    client.get(f"/api/allocations/{acme.pk}/queue/")
    now = timezone.now()
    QueueWorkload.objects.bulk_create([QueueWorkload(
        allocation=acme, uid=f"more-{i}", namespace=acme.namespace, name=f"job-x{i}",
        job=f"x{i}", local_queue="gpu", cluster_queue=acme.namespace, devices=1,
        state="pending", submitted_at=now, observed_at=now) for i in range(60)])
    with django_assert_max_num_queries(20):
        response = client.get(f"/api/allocations/{acme.pk}/queue/")
    assert len(response.json()["pending"]) == 61


def test_the_dry_run_backend_reads_nothing_and_erases_nothing(queues):
    before = QueueWorkload.objects.count()
    report = queue_sync(DryRunBackend())
    assert report.skipped and QueueWorkload.objects.count() == before


def test_queue_history_is_append_only(queues):
    event = QueueEvent.objects.first()
    with pytest.raises(TypeError):
        event.save()
    with pytest.raises(TypeError):
        QueueEvent.objects.filter(pk=event.pk).update(reason="rewritten")
    with pytest.raises(TypeError):
        QueueEvent.objects.all().delete()


def test_the_database_refuses_to_rewrite_queue_history(queues):
    from django.db import DatabaseError, connection, transaction

    event = QueueEvent.objects.first()
    for sql in ("UPDATE fleet_queueevent SET reason = 'x' WHERE id = %s",
                "DELETE FROM fleet_queueevent WHERE id = %s"):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), \
                connection.cursor() as cursor:
            cursor.execute(sql, [event.pk])
    assert QueueEvent.objects.get(pk=event.pk).reason == event.reason


def test_history_narrows_to_a_queue_and_priority_and_refuses_nonsense(client, lead, queues):
    acme, _ = queues
    client.force_login(lead)
    url = f"/api/allocations/{acme.pk}/queue/"
    everything = client.get(url).json()
    (group,) = everything["history_groups"]
    assert group == {"local_queue": "gpu", "priority": 0, "admitted": group["admitted"]}
    narrowed = client.get(url, {"local_queue": "gpu", "priority": 0}).json()
    assert [d["admitted"] for d in narrowed["history"]] == \
        [d["admitted"] for d in everything["history"]]
    assert all(d["borrowed_device_hours"] == "0.00" for d in narrowed["history"])
    other = client.get(url, {"priority": 100}).json()
    assert sum(d["admitted"] for d in other["history"]) == 0
    for bad in ("x", "1e9", "99999999999", "٣"):
        response = client.get(url, {"priority": bad})
        assert response.status_code == 400, bad
        assert "priority" in response.json()["extra"]["fields"]


def test_admins_see_the_history_of_every_queue(client, admin_user, queues):
    client.force_login(admin_user)
    page = client.get("/fleet/cohorts/").content.decode()
    assert "Every queue, last 14 days" in page and "Borrowed device-h" in page


def test_the_open_panel_is_told_nothing_new_until_the_queue_changes(client, lead, queues):
    """The panel polls every second with the stamp it was drawn at: 204 (htmx keeps what
    it shows) until a workload or the queue is recorded again, then the new panel."""
    import re

    from fleet.models import QueueWorkload

    acme, _globex = queues
    client.force_login(lead)
    page = client.get(f"/allocations/{acme.pk}/queue/?priority=0")
    assert page.status_code == 200
    poll = re.search(r'hx-get="([^"]+)" hx-trigger="every 1s"', page.content.decode())[1]
    poll = poll.replace("&amp;", "&")
    assert "since=" in poll and "priority=0" in poll  # the narrowing is kept
    assert client.get(poll).status_code == 204
    assert client.get(poll).content == b""
    row = acme.workloads.get(job="eval-3")
    QueueWorkload.objects.filter(pk=row.pk).update(
        position=5, observed_at=timezone.now() + dt.timedelta(seconds=1))
    fresh = client.get(poll)
    assert fresh.status_code == 200 and "eval-3" in fresh.content.decode()
    # Another tenant's stamp is no way in: the allocation is scoped before the stamp.
    client.force_login(lead)
    assert client.get(f"/allocations/{_globex.pk}/queue/?since=x").status_code == 404


def test_a_new_gpu_measurement_redraws_the_open_panel(client, lead, queues):
    import re

    from fleet.models import QueueWorkload

    acme, _globex = queues
    client.force_login(lead)
    page = client.get(f"/allocations/{acme.pk}/queue/").content.decode()
    poll = re.search(r'hx-get="([^"]+)" hx-trigger="every 1s"', page)[1].replace("&amp;", "&")
    assert client.get(poll).status_code == 204
    QueueWorkload.objects.filter(allocation=acme).update(
        gpu_busy=0.5, utilisation_at=timezone.now())
    assert client.get(poll).status_code == 200


def test_the_demos_queue_page_agrees_with_itself(client, lead, queues):
    """The demo's history made by the queue sync's own recorder: one window and one count
    on the page; a job shown running is one of the running ones; today's admission is
    counted today; borrowed hours come with their price (issue #46, item 6)."""
    acme, _ = queues
    client.force_login(lead)
    view = client.get(f"/api/allocations/{acme.pk}/queue/").json()
    running = {w["name"] for w in view["running"]}
    assert running == {"train-7"}
    # every job the ledger shows as running is running now; the others finished
    assert {j["name"] for j in view["jobs"] if j["state"] == "admitted"} <= running
    assert all(j["steps"][-1]["kind"] in ("finished", "submitted", "running")
               for j in view["jobs"])
    assert any(j["steps"][-1]["kind"] == "finished" for j in view["jobs"])
    # one count of admissions over the one window: the history, the queue-wait seam and
    # what the estimates are out of
    admitted = sum(d["admitted"] for d in view["history"])
    (wait,) = [s for s in view["seams"] if s["code"] == "admitted"]
    assert admitted == wait["count"] == view["estimates_track_record"]["of_admissions"] > 0
    assert view["estimates_track_record"]["count"] <= admitted
    # train-7 was admitted 2 h 48 min ago: counted on that day (yesterday, just after
    # midnight), the only admission of today when that day is today
    today = timezone.now().date().isoformat()
    that_day = (timezone.now() - dt.timedelta(hours=2, minutes=48)).date().isoformat()
    counted = [d["admitted"] for d in view["history"] if d["day"] == that_day]
    assert counted == [1] if that_day == today else (counted and counted[0] >= 1), counted
    # borrowed hours at the rate billing charges them
    rate = pool_rate(acme.pool_id)  # no rate change in this world
    priced = [d for d in view["history"] if Decimal(d["borrowed_device_hours"])]
    assert priced and rate > 0
    assert all(Decimal(d["borrowed_cost"]) == (Decimal(d["borrowed_device_hours"]) * rate
                                               ).quantize(Decimal("0.01")) for d in priced)
    page = client.get(f"/allocations/{acme.pk}/queue/").content.decode()
    assert f"of the {admitted} admissions in the last 14 days" in page
    assert "Borrowing billed" in page


def test_work_running_on_a_worker_is_shown_by_the_name_admins_gave_that_cluster(
        client, lead, queues):
    from tests.factories import ClusterFactory

    acme, _ = queues
    ClusterFactory(slug="eu-w1", name="Frankfurt H100", role="worker")
    acme.workloads.filter(job="train-7").update(ran_on="eu-w1")
    client.force_login(lead)
    html = client.get(f"/allocations/{acme.pk}/queue/").content.decode()
    assert "on Frankfurt H100" in html and 'title="MultiKueue worker eu-w1"' in html
    # A worker the portal has no record of is still named, by MultiKueue's name for it.
    acme.workloads.filter(job="train-7").update(ran_on="gone-w9")
    html = client.get(f"/allocations/{acme.pk}/queue/").content.decode()
    assert "on gone-w9" in html


def test_a_resize_kueue_has_not_reported_yet_is_said_not_hidden(client, lead, queues):
    acme, _ = queues
    client.force_login(lead)
    body = client.get(f"/api/allocations/{acme.pk}/queue/").json()
    assert body["queue"]["resize_pending"] == ""  # the quota as read is its size
    Allocation.objects.filter(pk=acme.pk).update(whole_devices=2, device_equivalents=2)
    body = client.get(f"/api/allocations/{acme.pk}/queue/").json()
    assert body["queue"]["resize_pending"].startswith("It holds 2 devices now; Kueue's "
                                                      "quota as last read is still 4 devices")


def test_a_queue_kueue_reports_inactive_says_kueues_reason_on_the_page_and_api(client, lead,
                                                                            queues):
    acme, _ = queues
    state = ClusterQueueState.objects.get(allocation=acme)
    state.active, state.inactive_reason = False, "FlavorNotFound"
    state.save()
    client.force_login(lead)
    view = client.get(f"/api/allocations/{acme.pk}/queue/").json()
    words = view["queue"]["inactive_reason"]
    assert "(Kueue: FlavorNotFound)" in words and view["queue"]["active"] is False
    (waiting,) = view["pending"]
    assert waiting["reason_code"] == "queue-stopped" and waiting["reason"] == words
    page = client.get(f"/allocations/{acme.pk}/queue/").content.decode()
    assert "resource flavor yet" in page and "has been told" not in page
    state.active, state.inactive_reason = True, ""
    state.save()
    assert client.get(f"/api/allocations/{acme.pk}/queue/").json()["queue"][
        "inactive_reason"] == ""


def test_a_queue_no_work_has_reached_says_how_a_first_job_appears(client, lead, queues):
    acme, _ = queues
    client.force_login(lead)
    assert client.get(f"/api/allocations/{acme.pk}/queue/").json()["first_work"] == ""
    QueueWorkload.objects.filter(allocation=acme).delete()  # its history still says work came
    assert client.get(f"/api/allocations/{acme.pk}/queue/").json()["first_work"] == ""
    fresh = _allocation(acme.tenant, acme.pool, "acme-r9")  # as before its first Job
    state = ClusterQueueState.objects.get(allocation=acme)
    state.pk, state.allocation, state.name = None, fresh, "acme-r9"
    state.save()
    acme = fresh
    body = client.get(f"/api/allocations/{acme.pk}/queue/").json()
    assert body["first_work"].startswith("No work has reached this queue yet.")
    assert "records no reason" in body["first_work"] and body["pending"] == []
    page = client.get(f"/allocations/{acme.pk}/queue/").content.decode()
    assert "No work has reached this queue yet." in page and "Nothing is waiting." not in page
