"""Budgets (set, shown, thresholds notified once) and e-mail notifications, delivered to a
real SMTP server (aiosmtpd on loopback)."""

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.budgets import check_budgets
from billing.domain import month_start
from billing.models import Budget, BudgetAlert, UsageMonth
from billing.totals import refresh_totals
from fleet.models import Allocation, Route
from intake import services as intake
from tenants.models import AuditEvent, Notification, NotificationKind
from tests.factories import make_request

pytestmark = [pytest.mark.django_db, pytest.mark.web]


@pytest.fixture
def spend(tenant, pools):
    """Set this month's charges of the tenant to an amount."""
    alloc = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
        whole_devices=2, device_equivalents=Decimal(2), namespace="acme-b1", status="active",
        starts_at=timezone.now() - dt.timedelta(days=3))

    def set_to(amount):
        UsageMonth.objects.update_or_create(
            allocation=alloc, month=month_start(timezone.now()), defaults={
                "tenant": tenant, "pool": alloc.pool, "allocated_s": 0, "used_s": 0,
                "credit_s": 0, "charged_s": 0, "amount": Decimal(amount), "hours": 1,
                "pending_hours": 0})
        # As the rollup does in the same transaction: the tenant-month totals the budgets
        # read (billing.totals) follow the usage months.
        refresh_totals({(tenant.pk, month_start(timezone.now()))})
    return set_to


@pytest.mark.parametrize("bad", ["ten", "-5", "0", "1e400", "NaN", "١٠٠", "9" * 20])
def test_a_bad_budget_is_refused_with_a_reason_and_nothing_saved(client, finance_user, tenant,
                                                                 bad):
    client.force_login(finance_user)
    response = client.post(reverse("billing:budgets"), {"tenant": tenant.slug, "amount": bad})
    assert response.status_code == 400
    assert "monthly budget" in response.content.decode().lower()
    assert not Budget.objects.exists()


def test_only_finance_and_admins_set_budgets(client, lead, member, tenant):
    for who in (lead, member):
        client.force_login(who)
        assert client.get(reverse("billing:budgets")).status_code == 403
        assert client.post(reverse("billing:budgets"),
                           {"tenant": tenant.slug, "amount": "100"}).status_code == 403
    assert not Budget.objects.exists()


def test_finance_sets_a_budget_the_lead_sees_it_with_a_forecast(client, finance_user, lead,
                                                                tenant, spend,
                                                                django_capture_on_commit_callbacks):
    spend("40")
    client.force_login(finance_user)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("billing:budgets"),
                               {"tenant": tenant.slug, "amount": "1000"})
    assert response.status_code == 302
    assert Budget.objects.get(tenant=tenant).monthly_amount == Decimal("1000.00")
    assert AuditEvent.objects.filter(action="budget.set", tenant=tenant).exists()
    client.force_login(lead)
    body = client.get(reverse("billing:overview")).content.decode()
    assert "Budget for" in body and "EUR\u00a01,000.00" in body and "4.0% spent" in body
    stmt = client.get(reverse("billing:statement", args=[
        tenant.slug, f"{month_start(timezone.now()):%Y-%m}"])).content.decode()
    assert "forecast for the month" in stmt
    # Removing it: an empty amount asks first, and nothing is removed until confirmed.
    from billing.budgets import status_for

    client.force_login(finance_user)
    asked = client.post(reverse("billing:budgets"), {"tenant": tenant.slug, "amount": ""})
    page = asked.content.decode()
    assert asked.status_code == 200
    assert f"Remove the monthly budget of EUR\u00a01,000.00 for {tenant.name}?" in page
    assert 'name="confirm_removal" value="yes"' in page
    assert status_for(tenant, timezone.now()).budget == Decimal("1000.00")
    assert not AuditEvent.objects.filter(action="budget.removed").exists()
    done = client.post(reverse("billing:budgets"), {"tenant": tenant.slug, "amount": "",
                                                    "confirm_removal": "yes"}, follow=True)
    assert f"{tenant.name} has no monthly budget now." in done.content.decode()
    assert "saved" not in done.content.decode()
    assert status_for(tenant, timezone.now()) is None  # no budget from this month on
    assert AuditEvent.objects.filter(action="budget.removed").exists()


def test_each_threshold_notifies_leads_and_finance_once_per_month(
        tenant, lead, member, finance_user, spend, smtp_server,
        django_capture_on_commit_callbacks):
    Budget.objects.create(tenant=tenant, monthly_amount=Decimal(200))
    spend("155")  # 77.5 %: 50 and 75 crossed
    with django_capture_on_commit_callbacks(execute=True):
        alerts = check_budgets(timezone.now())
    assert sorted(a.threshold for a in alerts) == [50, 75]  # both recorded...
    lead_mail = smtp_server.wait_for(lambda m: lead.email in m["to"])
    fin_mail = smtp_server.wait_for(lambda m: finance_user.email in m["to"])
    assert len(lead_mail) == 1 and len(fin_mail) == 1  # ...one notice, the true percentage
    assert "77.5% of the" in lead_mail[0]["subject"]
    assert "EUR 155.00 of its EUR 200.00" in lead_mail[0]["body"]
    assert not smtp_server.to(member.email)  # members are not told about money
    with django_capture_on_commit_callbacks(execute=True):
        assert check_budgets(timezone.now()) == []  # nothing twice
    spend("230")
    with django_capture_on_commit_callbacks(execute=True):
        assert sorted(a.threshold for a in check_budgets(timezone.now())) == [90, 100]
    assert len(smtp_server.wait_for(lambda m: lead.email in m["to"] and "115.0%" in m["subject"])
               ) == 1
    assert BudgetAlert.objects.count() == 4
    assert AuditEvent.objects.filter(action="budget.threshold").count() == 2  # one a notice


def test_a_turned_off_kind_is_not_sent(client, tenant, lead, finance_user, spend, smtp_server,
                                       django_capture_on_commit_callbacks):
    client.force_login(lead)
    page = client.get(reverse("tenants:notifications")).content.decode()
    assert "budget threshold" in page.lower()
    keep = [k for k in NotificationKind.values if k != NotificationKind.BUDGET_THRESHOLD]
    assert client.post(reverse("tenants:notifications"), {"kinds": keep}).status_code == 302
    Budget.objects.create(tenant=tenant, monthly_amount=Decimal(100))
    spend("60")
    with django_capture_on_commit_callbacks(execute=True):
        check_budgets(timezone.now())
    assert smtp_server.wait_for(lambda m: finance_user.email in m["to"])
    assert not smtp_server.to(lead.email)
    # An unknown kind changes nothing.
    client.post(reverse("tenants:notifications"), {"kinds": ["request_decided", "nope"]})
    assert NotificationKind.REQUEST_DECIDED in keep and Notification.objects.filter(
        user=lead).count() == 0


@pytest.mark.parametrize(("decide", "kind", "word"), [
    ("deny", NotificationKind.REQUEST_DECIDED, "rejected"),
    ("request_changes", NotificationKind.CHANGES_REQUESTED, "changes requested")])
def test_a_decision_reaches_the_lead_by_mail(tenant, lead, admin_user, pools, smtp_server,
                                             django_capture_on_commit_callbacks, decide, kind,
                                             word):
    request = make_request(tenant, lead, submit=True)
    fn = intake.request_deny if decide == "deny" else intake.request_request_changes
    with django_capture_on_commit_callbacks(execute=True):
        fn(request=request, by=admin_user, reason="Use the shared pool for this size.")
    mail = smtp_server.wait_for(lambda m: lead.email in m["to"])
    assert len(mail) == 1
    assert word in mail[0]["subject"] and "Use the shared pool" in mail[0]["body"]
    assert f"/requests/{request.pk}/" in mail[0]["body"]
    assert Notification.objects.get(user=lead, kind=kind).sent_at is not None


def test_approval_and_provisioning_mail_the_lead(tenant, lead, admin_user, pools, smtp_server,
                                                django_capture_on_commit_callbacks):
    request = make_request(tenant, lead, submit=True)
    with django_capture_on_commit_callbacks(execute=True):
        intake.request_approve(request=request, by=admin_user, reason="Fits now.")
    subjects = [m["subject"] for m in smtp_server.wait_for(
        lambda m: lead.email in m["to"] and "is ready" in m["subject"])]
    assert subjects, [m["subject"] for m in smtp_server.to(lead.email)]
    assert any("approved" in m["subject"] for m in smtp_server.to(lead.email))


def test_a_mail_outage_loses_nothing(settings, tenant, lead, admin_user, pools, smtp_server,
                                     django_capture_on_commit_callbacks):
    from tenants.tasks import resend_unsent, send_notifications

    settings.EMAIL_PORT = 1  # nothing listens: every send fails
    request = make_request(tenant, lead, submit=True)
    with django_capture_on_commit_callbacks(execute=True):
        intake.request_deny(request=request, by=admin_user, reason="Too big for now.")
    request.refresh_from_db()
    assert request.status == "denied"  # the decision stands although no mail left
    note = Notification.objects.get(user=lead)
    assert note.sent_at is None and note.attempts == 1 and note.last_error
    settings.EMAIL_PORT = smtp_server.port
    Notification.objects.filter(pk=note.pk).update(
        created_at=timezone.now() - dt.timedelta(minutes=10))
    assert resend_unsent() == 1
    assert smtp_server.wait_for(lambda m: lead.email in m["to"])
    note.refresh_from_db()
    assert note.sent_at is not None and note.attempts == 2
    assert send_notifications([note.pk]) == 0  # never sent twice


def test_an_expires_soon_mail_is_dropped_once_the_allocation_has_ended(
        settings, client, tenant, lead, admin_user, pools, smtp_server,
        django_capture_on_commit_callbacks):
    from fleet.allocations.retirement import allocation_mark_expiring
    from tenants.tasks import deliver, resend_unsent

    request = make_request(tenant, lead, submit=True)
    with django_capture_on_commit_callbacks(execute=True):
        intake.request_approve(request=request, by=admin_user, reason="Fits now.")
    alloc = Allocation.objects.get(tenant=tenant)
    Allocation.objects.filter(pk=alloc.pk).update(ends_at=timezone.now() + dt.timedelta(days=2))
    alloc.refresh_from_db()
    settings.EMAIL_PORT = 1  # the mail server is away when the notice is written
    with django_capture_on_commit_callbacks(execute=True):
        allocation_mark_expiring(alloc.pk)
    note = Notification.objects.get(user=lead, kind=NotificationKind.ALLOCATION_EXPIRING)
    assert note.sent_at is None and note.moot_at == alloc.ends_at  # moot when it has ended
    # The outage outlasts the allocation: an "expires soon" after the end is not sent.
    settings.EMAIL_PORT = smtp_server.port
    Notification.objects.filter(pk=note.pk).update(
        created_at=timezone.now() - dt.timedelta(days=3),
        moot_at=timezone.now() - dt.timedelta(hours=1))
    assert resend_unsent() == 0
    assert deliver(note.pk) is None
    note.refresh_from_db()
    assert note.sent_at is None and note.last_error.startswith("Not sent: moot since")
    assert not [m for m in smtp_server.to(lead.email) if "expires soon" in m["subject"]]
    client.force_login(lead)
    page = client.get(reverse("tenants:notifications")).content.decode()
    assert "not sent: no longer true by the time it could go" in page


def test_a_notice_is_moot_at_the_allocations_end_or_after_the_longest_delay(
        settings, tenant, lead):
    from tenants.notifications import notify

    settings.PORTAL_NOTIFICATION_MAX_DELAY_SECONDS = 3600
    soon = timezone.now() + dt.timedelta(minutes=5)
    late = timezone.now() + dt.timedelta(days=9)
    [a] = notify([lead], NotificationKind.ALLOCATION_EXPIRING, "a expires soon", "…", moot_at=soon)
    [b] = notify([lead], NotificationKind.ALLOCATION_EXPIRING, "b expires soon", "…", moot_at=late)
    [c] = notify([lead], NotificationKind.REQUEST_DECIDED, "c decided", "…")
    assert a.moot_at == soon
    hour = timezone.now() + dt.timedelta(hours=1)
    for n in (b, c):
        assert abs((n.moot_at - hour).total_seconds()) < 60


def test_a_budget_applies_from_its_month_on_and_history_is_kept(tenant, finance_user):
    """Set in December, a budget is not October's: October's statement shows none (before,
    "9047.5 % spent … over budget"); changing it later keeps the earlier month's."""
    import datetime as dt

    from billing import budgets
    from billing.models import Budget

    now = timezone.now()
    this = month_start(now)
    earlier = month_start(this - dt.timedelta(days=40))
    budgets.budget_set(tenant=tenant, amount_value="100", by=finance_user)
    assert budgets.status_for(tenant, now, earlier) is None
    assert budgets.status_for(tenant, now).budget == Decimal("100.00")
    # A budget that was set two months ago, then changed this month: both months keep theirs.
    Budget.objects.filter(tenant=tenant).update(from_month=earlier)
    budgets.budget_set(tenant=tenant, amount_value="250", by=finance_user)
    assert budgets.status_for(tenant, now, earlier).budget == Decimal("100.00")
    assert budgets.status_for(tenant, now).budget == Decimal("250.00")
    assert Budget.objects.filter(tenant=tenant).count() == 2  # history kept
    budgets.budget_set(tenant=tenant, amount_value="", by=finance_user,
                        confirm_removal=True)  # removed from now on
    assert budgets.status_for(tenant, now) is None
    assert budgets.status_for(tenant, now, earlier).budget == Decimal("100.00")


def test_a_budget_set_below_the_spend_sends_one_notice_and_is_rearmed_by_a_change(
        tenant, lead, finance_user, spend, smtp_server, django_capture_on_commit_callbacks):
    from billing import budgets

    spend("127")
    with django_capture_on_commit_callbacks(execute=True):
        budgets.budget_set(tenant=tenant, amount_value="100", by=finance_user)  # 127 %
    mail = smtp_server.wait_for(lambda m: lead.email in m["to"])
    assert len(mail) == 1 and "127.0% of the" in mail[0]["subject"]  # not four, not "50 %"
    # A corrected budget is a new amount: its crossings are told anew (re-armed).
    with django_capture_on_commit_callbacks(execute=True):
        budgets.budget_set(tenant=tenant, amount_value="200", by=finance_user)  # 63.5 %
    assert len(smtp_server.wait_for(lambda m: lead.email in m["to"] and "63.5%" in
                                    m["subject"])) == 1


def test_the_forecast_holds_still_between_rollups_and_over_budget_is_flagged(
        client, finance_user, lead, tenant, pools):
    """Issue #46: the run-rate forecast fell by the minute with the spend unchanged, and a
    tenant forecast at 108.6 % of its budget read "none over · 0 at 90 % or more". Ten days
    rolled up at EUR 362 of a 1,000 budget: EUR 1,086.00 (108.6 %) whenever it is read
    before the next rollup, flagged on the overview, the budgets page and the lead's page."""
    from billing.services import refresh_months
    from portal.demo_clock import clock_at
    from tests.factories import usage_hour

    month = dt.date(2026, 11, 1)
    covered = dt.datetime(2026, 11, 11, tzinfo=dt.UTC)
    alloc = Allocation.objects.create(
        tenant=tenant, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL,
        whole_devices=2, device_equivalents=Decimal(2), namespace="acme-f1", status="active",
        starts_at=dt.datetime(2026, 11, 1, tzinfo=dt.UTC))
    usage_hour(alloc, covered - dt.timedelta(hours=1), Decimal(7200), Decimal(7200),
               Decimal("362.00"))
    refresh_months({(alloc.pk, month)})
    Budget.objects.create(tenant=tenant, monthly_amount=Decimal(1000), from_month=month)
    for late in (dt.timedelta(minutes=5), dt.timedelta(minutes=55), dt.timedelta(hours=2)):
        with clock_at(covered + late):
            client.force_login(finance_user)
            response = client.get(reverse("billing:overview"))
            this = response.context["this_month"]
            assert this["spent"] == Decimal("362.00")
            assert this["forecast"] == Decimal("1086.00")
            assert (this["over"], this["near"], this["forecast_over"]) == (0, 0, 1)
            assert "1 forecast over budget" in response.content.decode()
            budgets = client.get(reverse("billing:budgets")).content.decode()
            assert "forecast 108.6% of budget" in budgets
            client.force_login(lead)
            own = client.get(reverse("billing:overview")).content.decode()
            assert "forecast 108.6%: over budget" in own and "EUR\u00a01,086.00" in own


def test_the_budgets_page_shows_what_was_written_since_the_last_view(client, finance_user,
                                                                     tenant, spend):
    """The budgets page's tenants and their spend are kept across views until a write: a
    tenant added, a tenant renamed, a budget set and new spend show on the next view, in
    name order, and its count pages them."""
    from tenants.models import Tenant

    client.force_login(finance_user)
    url = reverse("billing:budgets")
    first = client.get(url).content.decode()
    assert tenant.name in first and "Aardvark Labs" not in first
    Tenant.objects.create(slug="aardvark", name="Aardvark Labs")
    tenant.name = "Zebra Acme"
    tenant.save(update_fields=["name"])
    Budget.objects.create(tenant=tenant, from_month=month_start(timezone.now()),
                          monthly_amount=Decimal("100.00"), set_by=finance_user)
    spend("40")
    then = client.get(url).content.decode()
    assert then.index("Aardvark Labs") < then.index("Zebra Acme")
    assert 'id="budget-acme" name="amount" inputmode="decimal" size="10" value="100.00"' in then
    assert "EUR\u00a040.00" in then
    Tenant.objects.bulk_create([Tenant(slug=f"bulk-{i}", name=f"Bulk {i:02}")
                                for i in range(60)])
    paged = client.get(url).content.decode()
    assert f"Tenants 1–50 of {Tenant.objects.count()} " in paged and "Zebra Acme" not in paged
    assert "Zebra Acme" in client.get(url, {"page": 2}).content.decode()
