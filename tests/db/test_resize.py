"""A resize in place on PostgreSQL: the new size with its history and audit rows, what it
refuses and why, the pool's lock against racing grows, and a stranded shrink carried out."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.domain import month_start
from billing.models import StrandedFinding
from billing.services import live_lines, refresh_months
from billing.stranded_services import StrandedError, finding_accept
from fleet.allocations.resize import allocation_resize
from fleet.domain import FleetError
from fleet.inventory.sync import record_node_events
from fleet.kube import DryRunBackend
from fleet.models import Allocation, AllocationResize, Cluster, QueueWorkload, Route
from intake import services
from portal.demo_fleet import demo_node
from tenants.audit import audit_for
from tenants.models import Notification, PlatformRole
from tests.factories import ClusterFactory, make_platform_user, make_request, usage_hour
from tests.harness.concurrency import race

pytestmark = pytest.mark.django_db


def _active(tenant, lead, admin_user, capture, devices=8, **kw) -> Allocation:
    req = make_request(tenant, lead, submit=True, whole_devices=devices, **kw)
    with capture(execute=True):
        req = services.request_approve(request=req, by=admin_user, reason="ok")
    alloc = Allocation.objects.get(pk=req.allocation_id)
    assert alloc.status == "active", alloc.status_message
    return alloc


def _running(alloc, devices, name="train-a"):
    return QueueWorkload.objects.create(allocation=alloc, uid=f"uid-{name}",
                                        namespace=alloc.namespace, name=f"job-{name}",
                                        job=name, devices=devices, state="admitted",
                                        observed_at=timezone.now())


def test_a_lead_shrinks_and_the_history_billing_and_tenant_hear_of_it(
        tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    alloc = _active(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    _running(alloc, 3)
    before = timezone.now().replace(microsecond=0)
    with django_capture_on_commit_callbacks(execute=True):
        done = allocation_resize(allocation=alloc, size=4, by=lead, reason="data loader fixed")
    assert (done.whole_devices, done.device_equivalents, done.status) == (4, 4, "active")
    row = AllocationResize.objects.get(allocation=alloc)
    assert (row.devices_before, row.devices_after) == (8, 4) and row.at >= before
    assert row.at.microsecond == 0  # billing splits hours in whole seconds
    event = [e for e in audit_for(alloc) if e.action == "allocation.resized"][-1]
    assert event.actor == lead and "8 devices → 4 devices" in event.reason
    assert "data loader fixed" in event.reason and event.data["before"] == "8.0000"
    assert event.data["device_equivalents"] == "4.0000"
    assert Notification.objects.filter(user=lead, subject__contains="resized to 4").exists()
    with pytest.raises(TypeError):  # append-only, and the database says so too
        row.save()


def test_a_shrink_below_what_runs_is_refused_and_nothing_changes(
        tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    alloc = _active(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    _running(alloc, 6)
    with pytest.raises(FleetError, match="6 devices are admitted now") as refused:
        allocation_resize(allocation=alloc, size=4, by=admin_user)
    assert "train-a" in refused.value.message and "at least 6 devices" in refused.value.message
    alloc.refresh_from_db()
    assert alloc.whole_devices == 8 and not AllocationResize.objects.exists()
    assert "allocation.resized" not in [e.action for e in audit_for(alloc)]


def test_a_lead_may_not_grow_an_admin_may_within_the_pools_free_devices(
        tenant, lead, other_lead, admin_user, pools, django_capture_on_commit_callbacks):
    alloc = _active(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    with pytest.raises(FleetError, match="only a platform admin can"):
        allocation_resize(allocation=alloc, size=12, by=lead)
    with pytest.raises(FleetError, match="team lead of this tenant"):
        allocation_resize(allocation=alloc, size=4, by=other_lead)
    free = pools[Route.SHARED_POOL].capacity_devices - 8
    with pytest.raises(FleetError, match=f"the pool has {free} free"):
        allocation_resize(allocation=alloc, size=8 + free + 1, by=admin_user)
    grown = allocation_resize(allocation=alloc, size=8 + free, by=admin_user)
    assert grown.whole_devices == 8 + free


@pytest.mark.django_db(transaction=True)
def test_of_two_grows_for_the_last_free_devices_exactly_one_is_promised(
        tenant, lead, admin_user, pools):
    other_admin = make_platform_user("admin-three", PlatformRole.Role.PLATFORM_ADMIN)
    capacity = pools[Route.SHARED_POOL].capacity_devices
    made = [services.request_approve(request=make_request(
        tenant, lead, submit=True, whole_devices=d), by=admin_user, reason="fill").allocation
        for d in (capacity - 12, 4, 4)]  # 4 devices left free
    Allocation.objects.filter(pk__in=[m.pk for m in made]).update(status="active")
    a, b = (Allocation.objects.get(pk=m.pk) for m in made[1:])
    results, errors = race([
        lambda: allocation_resize(allocation=a, size=8, by=admin_user),
        lambda: allocation_resize(allocation=b, size=8, by=other_admin),
    ])
    assert len(results) == 1 and len(errors) == 1, (results, errors)
    assert isinstance(errors[0], FleetError) and "0 free" in errors[0].message
    assert sum(x.device_equivalents for x in Allocation.objects.all()) == capacity
    assert AllocationResize.objects.count() == 1


def test_an_accepted_shrink_is_carried_out_and_given_back(
        tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    alloc = _active(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    now = timezone.now()
    finding = StrandedFinding.objects.create(
        allocation=alloc, tenant=tenant, pool=alloc.pool, kind="oversized",
        stranded_devices=Decimal(6), cost_per_day=Decimal("480.00"), action="shrink",
        proposal="8 → 2 device(s) in shared", proposal_data={"whole_devices_after": 2},
        reason="Its peak fits 2.", stranded_since=now - dt.timedelta(days=1), found_at=now,
        last_seen_at=now)
    _running(alloc, 3)
    with pytest.raises(StrandedError, match="3 devices are admitted now"):
        finding_accept(finding=finding, by=lead)
    finding.refresh_from_db()
    assert finding.status == "open"  # a refused shrink records no yes
    QueueWorkload.objects.filter(allocation=alloc).update(state="finished")
    with django_capture_on_commit_callbacks(execute=True):
        done = finding_accept(finding=finding, by=lead, reason="yes")
    assert done.status == "accepted" and done.given_back_devices == 6
    assert "Shrunk in place" in done.outcome
    alloc.refresh_from_db()
    assert alloc.whole_devices == 2 and alloc.device_equivalents == 2
    assert "Stranded finding" in AllocationResize.objects.get(allocation=alloc).reason


def test_an_accepted_release_never_ends_running_work(tenant, lead, admin_user, pools,
                                                     django_capture_on_commit_callbacks):
    alloc = _active(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    now = timezone.now()
    finding = StrandedFinding.objects.create(
        allocation=alloc, tenant=tenant, pool=alloc.pool, kind="idle_hold",
        stranded_devices=Decimal(8), cost_per_day=Decimal("480.00"), action="release",
        proposal="Release it", reason="No device was busy.",
        stranded_since=now - dt.timedelta(days=1), found_at=now, last_seen_at=now)
    _running(alloc, 2)
    with pytest.raises(StrandedError, match="held by running work \\(train-a\\)"):
        finding_accept(finding=finding, by=lead)
    finding.refresh_from_db()
    alloc.refresh_from_db()
    assert finding.status == "open" and alloc.status == "active"


def test_a_shrink_of_a_hold_whose_every_device_runs_says_so(
        tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    alloc = _active(tenant, lead, admin_user, django_capture_on_commit_callbacks, devices=4)
    _running(alloc, 6)  # 2 borrowed from the cohort
    with pytest.raises(FleetError, match="2 devices of them borrowed") as refused:
        allocation_resize(allocation=alloc, size=3, by=lead)
    assert "Every device it holds is in use" in refused.value.message
    assert "at least" not in refused.value.message


def test_a_grown_block_names_no_node_to_its_tenant(tenant, lead, admin_user, pools,
                                                   django_capture_on_commit_callbacks):
    alloc = _active(tenant, lead, admin_user, django_capture_on_commit_callbacks,
                    isolation_origin="contractual", isolation_reference="MSA-1")
    assert alloc.route == Route.DEDICATED_BLOCK
    grown = allocation_resize(allocation=alloc, size=16, by=admin_user)
    assert grown.nodes.count() == 2
    said = AllocationResize.objects.get(allocation=alloc).reason
    assert "1 more whole validated node(s) reserved" in said
    assert not any(n.name in said for n in grown.nodes.all())


def test_the_months_statement_line_says_both_sizes(tenant, lead, admin_user, pools,
                                                   django_capture_on_commit_callbacks):
    alloc = _active(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    month = month_start(timezone.now())
    usage_hour(alloc, dt.datetime.combine(month, dt.time(), tzinfo=dt.UTC), 3600 * 8, 0,
               Decimal("20"))
    refresh_months({(alloc.pk, month)})
    allocation_resize(allocation=alloc, size=3, by=lead)
    line, = live_lines(tenant, month)
    assert line.description.endswith("· 8 → 3 device(s)"), line.description


def test_a_dispatched_allocation_is_split_again_over_its_workers(
        tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    """A shared pool dispatched by MultiKueue: the workers' quota is the new size's split,
    so the manager's ClusterQueue (their sum) and billing's parts follow the resize."""
    alloc = _active(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    shared = pools[Route.SHARED_POOL]
    Cluster.objects.filter(pk=shared.cluster_id).update(role=Cluster.Role.MANAGER)
    for slug, count in (("w1", 1), ("w2", 3)):  # the pool's devices: 8 on w1, 24 on w2
        worker = ClusterFactory(slug=slug, role=Cluster.Role.WORKER)
        record_node_events([demo_node(f"{slug}-n{i}", shared.slug, shared.gpu_model)
                            for i in range(count)], backend=DryRunBackend(), cluster=worker)
    Allocation.objects.filter(pk=alloc.pk).update(cluster_shares={"w1": 2, "w2": 6})
    alloc.refresh_from_db()
    assert alloc.pool.dispatched
    done = allocation_resize(allocation=alloc, size=4, by=lead)
    assert done.cluster_shares == {"w1": 1, "w2": 3}  # 4 in proportion 8 : 24
    assert "Split across MultiKueue workers: w1 1, w2 3" in \
        AllocationResize.objects.get(allocation=alloc).reason


def test_a_resized_allocation_is_renewed_at_its_new_size(
        tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    alloc = _active(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    Allocation.objects.filter(pk=alloc.pk).update(
        ends_at=timezone.now() + dt.timedelta(days=3))
    allocation_resize(allocation=alloc, size=3, by=lead)
    request = alloc.request
    renewal = services.request_create_renewal(request=request, by=lead)
    assert renewal.whole_devices == 3
    services.request_submit(request=renewal, by=lead)
    done = services.request_approve(request=renewal, by=admin_user, reason="keep it")
    assert done.status == "approved"
    alloc.refresh_from_db()
    assert alloc.whole_devices == 3 and alloc.ends_at > timezone.now() + dt.timedelta(days=30)


def _finding(alloc, stranded, after):
    now = timezone.now()
    return StrandedFinding.objects.create(
        allocation=alloc, tenant=alloc.tenant, pool=alloc.pool, kind="oversized",
        stranded_devices=Decimal(stranded), cost_per_day=Decimal("1.00"), action="shrink",
        proposal=f"→ {after} device(s)", proposal_data={"whole_devices_after": after},
        reason="Its peak fits less.", stranded_since=now - dt.timedelta(days=1),
        found_at=now, last_seen_at=now)


def test_a_finding_no_longer_open_changes_nothing_when_accepted(
        tenant, lead, admin_user, pools, django_capture_on_commit_callbacks):
    alloc = _active(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    finding = _finding(alloc, 6, 2)
    StrandedFinding.objects.filter(pk=finding.pk).update(status="resolved")
    with pytest.raises(StrandedError, match="is resolved .* already"):
        finding_accept(finding=finding, by=lead)
    alloc.refresh_from_db()
    assert alloc.whole_devices == 8 and not AllocationResize.objects.exists()


def test_what_is_given_back_is_what_the_shrink_gave(tenant, lead, admin_user, pools,
                                                    django_capture_on_commit_callbacks):
    alloc = _active(tenant, lead, admin_user, django_capture_on_commit_callbacks)
    finding = _finding(alloc, 6, 2)
    allocation_resize(allocation=alloc, size=5, by=lead)  # by hand, after the finding
    done = finding_accept(finding=finding, by=lead)
    assert done.given_back_devices == 3 and "3 device(s) given back" in done.outcome
