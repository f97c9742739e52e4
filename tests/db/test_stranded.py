"""Stranded findings on PostgreSQL: recorded once per allocation and kind, refreshed,
resolved, answered by the tenant's lead (a release through the fleet's lifecycle), audited
and notified."""

import datetime as dt
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.test import TestCase
from django.utils import timezone

from billing.models import StrandedFinding
from billing.stranded import Hold, Sample, idle_hold, oversized, summarise
from billing.stranded_services import (
    StrandedError,
    finding_accept,
    finding_decline,
    findings_record,
)
from billing.stranded_thresholds import Thresholds
from fleet.domain import Route
from intake import services
from tenants.audit import audit_for
from tenants.models import Notification
from tests.factories import make_request

pytestmark = pytest.mark.django_db
TH = Thresholds()


@pytest.fixture
def allocation(tenant, lead, admin_user, pools):
    req = make_request(tenant, lead, submit=True, title="Stranded")
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.request_approve(request=req, by=admin_user, reason="ok")
    req.refresh_from_db()
    alloc = req.allocation
    assert alloc.status == "active"
    return alloc


def hold_of(alloc) -> Hold:
    return Hold(allocation_id=alloc.pk, tenant=alloc.tenant.slug, pool=alloc.pool.slug,
                route=Route(alloc.route), held_devices=alloc.device_equivalents,
                held_since=alloc.starts_at - dt.timedelta(days=2),
                rate_per_device_hour=Decimal("2.50"), whole_devices=alloc.whole_devices)


def idle_finding(alloc, now):
    summary = summarise([], now - TH.window, now)
    return idle_hold(hold_of(alloc), summary, TH)


def busy_finding(alloc, now):
    s = [Sample(now - dt.timedelta(hours=1), Decimal("0.5"), 0.5, 10.0, 1)]
    return oversized(hold_of(alloc), summarise(s, now - TH.window, now), TH)


def open_findings(alloc):
    return StrandedFinding.objects.filter(allocation=alloc, status="open")


def test_a_pass_opens_one_finding_audits_it_and_tells_the_leads(allocation, lead):
    now = timezone.now()
    with TestCase.captureOnCommitCallbacks(execute=False):
        report = findings_record(findings=[idle_finding(allocation, now)],
                                 judged={allocation.pk}, now=now)
    assert (report.found, report.refreshed) == (1, 0)
    row = open_findings(allocation).get()
    assert row.kind == "idle_hold" and row.action == "release" and row.tenant == allocation.tenant
    assert row.cost_per_day == Decimal(allocation.device_equivalents) * 24 * Decimal("2.50")
    assert row.stranded_since == now - TH.window
    assert [e.action for e in audit_for(row)] == ["stranded.found"]
    note = Notification.objects.get(user=lead, kind="stranded_capacity")
    assert f"/stranded/{row.pk}/" in note.body


def test_a_second_pass_refreshes_instead_of_repeating(allocation):
    now = timezone.now()
    findings_record(findings=[idle_finding(allocation, now)], judged={allocation.pk}, now=now)
    later = now + dt.timedelta(hours=1)
    report = findings_record(findings=[idle_finding(allocation, later)],
                             judged={allocation.pk}, now=later)
    assert (report.found, report.refreshed) == (0, 1)
    row = open_findings(allocation).get()
    assert row.last_seen_at == later and row.found_at == now
    assert [e.action for e in audit_for(row)] == ["stranded.found"]


def test_one_open_finding_per_allocation_and_kind_is_the_databases_rule(allocation):
    now = timezone.now()
    findings_record(findings=[idle_finding(allocation, now)], judged={allocation.pk}, now=now)
    row = open_findings(allocation).get()
    with pytest.raises(IntegrityError), transaction.atomic():
        StrandedFinding.objects.create(
            allocation=allocation, tenant=allocation.tenant, pool=allocation.pool,
            kind=row.kind, stranded_devices=1, cost_per_day=1, action="release", proposal="x",
            reason="x", stranded_since=now, found_at=now, last_seen_at=now)


def test_a_finding_not_found_again_is_resolved(allocation):
    now = timezone.now()
    findings_record(findings=[idle_finding(allocation, now)], judged={allocation.pk}, now=now)
    busy = busy_finding(allocation, now)
    report = findings_record(findings=[busy] if busy else [], judged={allocation.pk}, now=now)
    assert report.resolved == 1
    row = StrandedFinding.objects.get(allocation=allocation, kind="idle_hold")
    assert row.status == "resolved" and row.closed_at == now
    assert [e.action for e in audit_for(row)] == ["stranded.found", "stranded.resolved"]


def test_an_allocation_not_judged_keeps_its_open_findings(allocation):
    now = timezone.now()
    findings_record(findings=[idle_finding(allocation, now)], judged={allocation.pk}, now=now)
    findings_record(findings=[], judged=set(), now=now)
    assert open_findings(allocation).count() == 1


def test_accepting_a_release_releases_through_the_lifecycle(allocation, lead, admin_user):
    now = timezone.now()
    findings_record(findings=[idle_finding(allocation, now)], judged={allocation.pk}, now=now)
    row = open_findings(allocation).get()
    with TestCase.captureOnCommitCallbacks(execute=True):
        row = finding_accept(finding=row, by=lead, reason="not needed any more")
    assert row.status == "accepted" and row.decided_by == lead
    assert row.given_back_devices == allocation.device_equivalents
    allocation.refresh_from_db()
    assert allocation.status == "retired"
    assert "allocation.released" in [e.action for e in audit_for(allocation)]
    assert [e.action for e in audit_for(row)] == ["stranded.found", "stranded.accepted"]
    assert Notification.objects.filter(user=admin_user, kind="stranded_capacity").exists()


def test_accepting_a_shrink_carries_it_out_in_place(allocation, lead):
    now = timezone.now()
    f = busy_finding(allocation, now)
    if f is None:
        pytest.skip("the world's allocation is one device: nothing smaller")
    findings_record(findings=[f], judged={allocation.pk}, now=now)
    row = finding_accept(finding=open_findings(allocation).get(), by=lead)
    assert row.status == "accepted" and "Shrunk in place" in row.outcome
    assert row.given_back_devices == f.stranded_devices
    allocation.refresh_from_db()
    assert allocation.status == "active"
    assert allocation.whole_devices == f.proposal.whole_devices_after
    assert audit_for(allocation).filter(action="allocation.resized").exists()


def test_declining_keeps_it_with_a_reason_and_quiets_the_kind(allocation, lead):
    now = timezone.now()
    findings_record(findings=[idle_finding(allocation, now)], judged={allocation.pk}, now=now)
    row = open_findings(allocation).get()
    with pytest.raises(StrandedError, match="reason"):
        finding_decline(finding=row, by=lead, reason=" ")
    row = finding_decline(finding=row, by=lead, reason="month-end training starts Monday")
    assert row.status == "declined" and row.decision_reason.startswith("month-end")
    assert audit_for(row).filter(action="stranded.declined",
                                 reason__contains="month-end").exists()
    report = findings_record(findings=[idle_finding(allocation, now)], judged={allocation.pk},
                             now=now + dt.timedelta(hours=1))
    assert (report.found, report.quiet) == (0, 1)
    assert not open_findings(allocation).exists()


def test_only_a_lead_of_the_tenant_answers_and_only_once(allocation, lead, other_lead, member,
                                                        admin_user):
    now = timezone.now()
    findings_record(findings=[idle_finding(allocation, now)], judged={allocation.pk}, now=now)
    row = open_findings(allocation).get()
    for user in (other_lead, member, admin_user):
        with pytest.raises(StrandedError, match="team lead"):
            finding_decline(finding=row, by=user, reason="no")
    finding_decline(finding=row, by=lead, reason="kept")
    with pytest.raises(StrandedError, match="declined"):
        finding_accept(finding=row, by=lead)


def _aged(alloc, days):
    now = timezone.now()
    findings_record(findings=[idle_finding(alloc, now)], judged={alloc.pk},
                    now=now - dt.timedelta(days=days))
    return open_findings(alloc).get()


def test_a_release_policy_releases_an_unanswered_idle_hold_after_its_grace(allocation, lead):
    from billing.stranded_services import grace_apply, policy_set

    policy_set(tenant=allocation.tenant, by=lead, when_unanswered="release", grace_days=3)
    young = _aged(allocation, 2)
    assert grace_apply(now=timezone.now()) == 0 and open_findings(allocation).exists()
    StrandedFinding.objects.filter(pk=young.pk).update(
        found_at=timezone.now() - dt.timedelta(days=4))
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert grace_apply(now=timezone.now()) == 1
    row = StrandedFinding.objects.get(pk=young.pk)
    assert row.status == "accepted" and row.decided_by is None and row.grace_ended_at
    allocation.refresh_from_db()
    assert allocation.status == "retired"
    released = audit_for(allocation).get(action="allocation.released")
    assert released.actor is None and released.data == {"policy": "release after 3 day(s)"}


def test_a_binding_hold_is_only_reminded_whatever_the_policy(tenant, lead, allocation):
    from billing.stranded_services import grace_apply, policy_set

    policy_set(tenant=tenant, by=lead, when_unanswered="release", grace_days=1)
    row = _aged(allocation, 2)
    StrandedFinding.objects.filter(pk=row.pk).update(needs_yes=True)
    assert grace_apply(now=timezone.now()) == 1
    assert grace_apply(now=timezone.now()) == 0  # reminded once
    row.refresh_from_db()
    assert row.status == "open" and row.grace_ended_at is not None
    assert audit_for(row).filter(action="stranded.grace_ended",
                                 reason__contains="lead's yes").exists()
    assert Notification.objects.filter(user=lead, subject__startswith="Reminder").count() == 1
    allocation.refresh_from_db()
    assert allocation.status == "active"


def test_without_a_policy_the_leads_are_reminded_after_a_week(allocation, lead):
    from billing.stranded_services import grace_apply

    row = _aged(allocation, 6)
    assert grace_apply(now=timezone.now()) == 0
    StrandedFinding.objects.filter(pk=row.pk).update(
        found_at=timezone.now() - dt.timedelta(days=8))
    assert grace_apply(now=timezone.now()) == 1
    row.refresh_from_db()
    assert row.status == "open"


def test_only_the_tenants_lead_sets_a_valid_policy(tenant, lead, other_lead, admin_user):
    from billing.stranded_services import policy_set

    for user in (other_lead, admin_user):
        with pytest.raises(StrandedError, match="team lead"):
            policy_set(tenant=tenant, by=user, when_unanswered="notify", grace_days=7)
    with pytest.raises(StrandedError) as refused:
        policy_set(tenant=tenant, by=lead, when_unanswered="delete", grace_days="٧")
    assert set(refused.value.fields) == {"when_unanswered", "grace_days"}
    policy = policy_set(tenant=tenant, by=lead, when_unanswered="shrink", grace_days=14)
    assert audit_for(policy).get().action == "stranded.policy_set"
