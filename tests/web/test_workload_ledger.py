"""The workload ledger after admission (pods, claims, node, start) as the queue sync stores
it, and where people read it: the queue panel, the API, and /metrics as a histogram that a
real Prometheus parser accepts. The real cluster's side is tests/k8s/test_placement.py."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
from dataclasses import replace
from decimal import Decimal

import pytest
from django.utils import timezone

from fleet.models import Allocation, ClusterQueueState, QueueEvent, Route
from fleet.queues.placement import Placement
from fleet.queues.sync import record_workloads
from fleet.queues.truth import ADMITTED, FINISHED, WorkloadFacts

pytestmark = pytest.mark.django_db

T0 = timezone.now().replace(microsecond=0) - dt.timedelta(hours=1)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture
def alloc(tenant, pools):
    a = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
        whole_devices=2, device_equivalents=Decimal(2), namespace="acme-r7", status="active",
        starts_at=T0 - dt.timedelta(days=1))
    ClusterQueueState.objects.create(name="acme-r7", allocation=a, resource="nvidia.com/gpu",
                                     nominal=Decimal(2), observed_at=T0)
    return a


def facts(state=ADMITTED, **kw) -> WorkloadFacts:
    return WorkloadFacts(uid="wl-1", namespace="acme-r7", name="job-train-x", job="train",
                         local_queue="gpu", cluster_queue="acme-r7", priority=0,
                         submitted_at=at(0), devices=Decimal(1), state=state,
                         admitted_at=kw.pop("admitted_at", at(30)),
                         resource_version=kw.pop("rv", "1"), **kw)


def record(alloc, read: list[WorkloadFacts], now, placements=None, **reader) -> int:
    """The ledger's read → decide → write for these Workloads (a list, or with `gone` the
    watch's events); the number of events recorded."""
    return record_workloads(read, queues={}, positions={}, allocations={alloc.namespace: alloc},
                            now=now, placements=placements or {}, **reader)[1]


def sync(alloc, f: WorkloadFacts, placement: Placement | None, now) -> int:
    return record(alloc, [f], now, {f.uid: placement} if placement else None)


def test_each_step_is_recorded_once_in_time_order(alloc):
    sync(alloc, facts(), Placement(pods_at=at(31)), at(32))
    placed = Placement(pods_at=at(31), scheduled_at=at(31.5), node="shr-0",
                       running_at=at(33))
    assert sync(alloc, facts(rv="2"), placed, at(40)) == 2  # scheduled, running
    assert sync(alloc, facts(rv="2"), placed, at(50)) == 0  # read again: nothing new
    # Finished, its pods gone: the steps already recorded stay on the row and in the ledger.
    sync(alloc, facts(FINISHED, rv="3", finished_at=at(90)), None, at(95))
    kinds = list(QueueEvent.objects.filter(workload_uid="wl-1").values_list("kind", flat=True))
    assert kinds == ["submitted", "admitted", "pods", "scheduled", "running", "finished"]
    seams = dict(QueueEvent.objects.filter(seam_seconds__isnull=False).values_list(
        "kind", "seam_seconds"))
    assert seams == {"admitted": 30.0, "pods": 1.0, "scheduled": 0.5, "running": 3.0}
    row = alloc.workloads.get(uid="wl-1")
    assert row.node == "shr-0" and row.running_at == at(33)


def test_a_readmission_has_steps_of_its_own(alloc):
    sync(alloc, facts(), Placement(pods_at=at(31), running_at=at(33)), at(40))
    again = facts(rv="5", admitted_at=at(600))
    assert sync(alloc, again, Placement(pods_at=at(601), running_at=at(605)), at(610)) == 3
    runs = list(QueueEvent.objects.filter(kind="running").values_list("seam_seconds",
                                                                       flat=True))
    assert runs == [3.0, 5.0]


def _ledger(alloc):
    sync(alloc, facts(), Placement(pods_at=at(31), scheduled_at=at(32), node="shr-0",
                                   running_at=at(34)), at(40))


@pytest.mark.parametrize(("who", "status"), [("lead", 200), ("other_lead", 404),
                                             ("admin", 200)])
def test_the_panel_and_the_api_show_the_jobs_steps_and_seams(client, lead, other_lead,
                                                             admin_user, alloc, who, status):
    _ledger(alloc)
    client.force_login({"lead": lead, "other_lead": other_lead, "admin": admin_user}[who])
    api = client.get(f"/api/allocations/{alloc.pk}/queue/")
    assert api.status_code == status
    if status != 200:
        return
    (job,) = api.json()["jobs"]
    assert job["name"] == "train"
    assert [s["kind"] for s in job["steps"]] == ["submitted", "admitted", "pods", "scheduled",
                                                 "running"]
    seams = {s["code"]: s for s in api.json()["seams"]}
    assert seams["running"]["p50_seconds"] == 4.0 and seams["running"]["count"] == 1
    assert seams["claimed"]["count"] == 0 and seams["claimed"]["p50_seconds"] is None
    page = client.get(f"/allocations/{alloc.pk}/queue/").content.decode()
    assert "Jobs, step by step" in page and "Placed on node shr-0" in page
    assert "Pod start" in page and "4.0 s" in page


def test_preemption_recovery_is_stop_to_running_again(client, lead, alloc):
    _ledger(alloc)
    QueueEvent.objects.create(allocation=alloc, workload_uid="wl-1", workload="train",
                              kind="preempted", at=at(100), reason="the cohort reclaimed")
    QueueEvent.objects.create(allocation=alloc, workload_uid="wl-1", workload="train",
                              kind="running", at=at(400), seam_seconds=20, reason="again")
    client.force_login(lead)
    seams = {s["code"]: s for s in client.get(f"/api/allocations/{alloc.pk}/queue/").json()[
        "seams"]}
    assert seams["recovery"]["count"] == 1 and seams["recovery"]["p50_seconds"] == 300.0


def test_metrics_expose_the_seams_as_a_histogram_prometheus_parses(client, alloc, tenant):
    _ledger(alloc)
    body = client.get("/metrics").content.decode()
    cluster = alloc.pool.cluster.slug
    labels = f'tenant="{tenant.slug}",queue="acme-r7/gpu",cluster="{cluster}",seam="running"'
    buckets = [(float(le), int(n)) for le, n in re.findall(
        rf'aifactory_workload_seam_seconds_bucket{{{re.escape(labels)},le="([^"]+)"}} (\d+)',
        body) if le != "+Inf"]
    assert buckets and [n for _, n in buckets] == sorted(n for _, n in buckets)  # cumulative
    assert all(n == (1 if le >= 4 else 0) for le, n in buckets)  # one pod start of 4 s
    assert f"aifactory_workload_seam_seconds_count{{{labels}}} 1" in body
    assert f"aifactory_workload_seam_seconds_sum{{{labels}}} 4.000" in body
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian's prometheus package) is installed by make test"
    checked = subprocess.run([promtool, "check", "metrics"], input=body.encode(),
                             capture_output=True)
    # Clean: no lint hint either (3 would be style hints, 1 a format the parser refuses).
    assert checked.returncode == 0, (checked.returncode, checked.stderr.decode())
    assert b"error while linting" not in checked.stderr


def test_each_seam_per_day_for_the_tenant_and_for_admins(client, lead, admin_user, alloc):
    """p95 per day: a day with measurements has its value, a day without is a gap (null),
    on the tenant's panel (its own), the admins' cohorts page (all) and in the API."""
    now = timezone.now()
    for days_ago, seconds in ((3, [2.0, 4.0]), (0, [10.0])):
        for i, s in enumerate(seconds):
            QueueEvent.objects.create(allocation=alloc, workload_uid=f"d{days_ago}-{i}",
                                      workload="train", kind="running", seam_seconds=s,
                                      at=now - dt.timedelta(days=days_ago, minutes=1),
                                      reason="ran")
    client.force_login(lead)
    seams = {s["code"]: s for s in client.get(f"/api/allocations/{alloc.pk}/queue/").json()[
        "seams"]}
    running = seams["running"]
    days = [dt.date.fromisoformat(d) for d in running["days"]]
    by_day = dict(zip(days, running["p95_by_day"], strict=True))
    assert len(days) == 14 and days[-1] == timezone.localdate(now)
    three_ago = timezone.localdate(now - dt.timedelta(days=3, minutes=1))
    assert 3.8 <= by_day[three_ago] <= 4.0 and by_day[days[-1]] == 10.0
    assert sum(v is not None for v in by_day.values()) == 2  # the other days are gaps
    assert all(v is None for v in seams["claimed"]["p95_by_day"])
    panel = client.get(f"/allocations/{alloc.pk}/queue/").content.decode()
    assert 'data-chart="seams"' in panel and "p95 per day, seam by seam" in panel
    client.force_login(admin_user)
    ClusterQueueState.objects.get_or_create(name=alloc.namespace,
                                            defaults={"allocation": alloc})
    page = client.get("/fleet/cohorts/").content.decode()
    assert 'data-chart="seams"' in page and "Pod start" in page


def test_an_older_reader_cannot_undo_what_a_newer_one_recorded(alloc):
    """The watch and the beat's list may both record: a list begun before the watch's last
    event must not take a workload back, bring a deleted one back, or call one gone that
    the watch saw created after the list began."""
    from fleet.models import QueueWorkload

    pending = facts(state="pending", admitted_at=None, rv="10")
    sync(alloc, pending, None, at(40))
    assert sync(alloc, facts(rv="12"), None, at(41)) == 1  # the watch: admitted
    # The beat's list, read at version 11, still says pending: ignored, no event.
    assert sync(alloc, facts(state="pending", admitted_at=None, rv="11"), None, at(42)) == 0
    row = QueueWorkload.objects.get(uid="wl-1")
    assert row.state == ADMITTED and row.resource_version == "12"
    # The watch sees it deleted; an old list that still holds it does not bring it back.
    record(alloc, [], at(43), gone={"wl-1"})
    row.refresh_from_db()
    assert row.state == "gone"
    record(alloc, [facts(rv="12")], at(44), listed_at=at(41))
    row.refresh_from_db()
    assert row.state == "gone"
    assert list(QueueEvent.objects.filter(workload_uid="wl-1").values_list(
        "kind", flat=True).order_by("at", "pk")) == ["submitted", "admitted", "gone"]

    # A workload the watch recorded after a list began is not gone for that list.
    new = replace(facts(rv="20"), uid="wl-2", name="job-eval-y", job="eval")
    record(alloc, [new], at(50), gone=set())
    record(alloc, [], at(51), listed_at=at(49))
    assert QueueWorkload.objects.get(uid="wl-2").state == ADMITTED
    # ...but a list begun after it was last seen, without it, is right to call it gone.
    record(alloc, [], at(52), listed_at=at(51))
    assert QueueWorkload.objects.get(uid="wl-2").state == "gone"


def test_steps_the_watch_timed_are_shown_to_the_millisecond_with_their_clock(
        client, lead, alloc, tenant):
    """Through the writer (record_workloads) with what a watch saw: the page shows the
    milliseconds and names each time's clock, the API carries the stamp, the source and the
    bound, and /metrics counts a 42 ms seam in the 50 ms bucket, not the 25 ms one."""
    from fleet.queues.timing import Clue

    ms = dt.timedelta(milliseconds=1)
    record(alloc, [facts()], at(40), {"wl-1": Placement(
        pods_at=at(31), scheduled_at=at(31), node="shr-0", running_at=at(32))},
        clues={"wl-1": {"admitted": Clue(at(30) + 200 * ms),
                        "pods": Clue(at(31) + 10 * ms),
                        "scheduled": Clue(at(31) + 90 * ms, (at(31) + 52 * ms,))}},
        lag=0.006)
    steps = {e.kind: e for e in QueueEvent.objects.filter(workload_uid="wl-1")}
    assert (steps["scheduled"].at, steps["scheduled"].at_source) == (at(31) + 52 * ms, "event")
    assert steps["scheduled"].seam_seconds == pytest.approx(0.042)
    assert steps["pods"].seam_seconds == pytest.approx(0.81)  # 30.200 → 31.010
    assert (steps["running"].at_source, steps["running"].at_bound_seconds) == ("object", 1.0)
    client.force_login(lead)
    (job,) = client.get(f"/api/allocations/{alloc.pk}/queue/").json()["jobs"]
    by = {s["kind"]: s for s in job["steps"]}
    assert by["pods"]["at_source"] == "watch" and by["pods"]["at_bound_seconds"] == 0.006
    assert by["pods"]["kube_at"].startswith(at(31).strftime("%Y-%m-%dT%H:%M:%S"))
    page = client.get(f"/allocations/{alloc.pk}/queue/").content.decode()
    local = timezone.localtime(at(31) + 52 * ms)
    assert f'{local:%H:%M:%S}.052</time>' in page
    assert "When the portal&#x27;s watch saw it, within 6 ms" in page
    assert "+42 ms" in page and "Pods created, 810 ms after admission." in page
    body = client.get("/metrics").content.decode()
    labels = f'tenant="{tenant.slug}",queue="acme-r7/gpu",cluster="{alloc.pool.cluster.slug}",' \
             'seam="scheduled"'
    assert f'aifactory_workload_seam_seconds_bucket{{{labels},le="0.025"}} 0' in body
    assert f'aifactory_workload_seam_seconds_bucket{{{labels},le="0.05"}} 1' in body
