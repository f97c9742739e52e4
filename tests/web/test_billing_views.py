"""Finance pages and /metrics: who sees which tenant, closing and adjusting months."""

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.domain import month_start
from billing.models import Adjustment, Statement
from billing.services import refresh_months
from fleet.models import Allocation, Route
from tenants.models import AuditEvent
from tests.factories import LAST_MONTH, usage_hour

pytestmark = pytest.mark.django_db


def test_a_tenants_name_and_slug_are_escaped_in_the_overviews_cells(client, finance_user,
                                                                      pools):
    """The month cells are built in Python (billing.renderers), the name by the template:
    markup in either comes out as text."""
    from tenants.models import Tenant

    evil = Tenant.objects.create(slug='ev"><script>s()</script>',
                                 name="<script>alert(1)</script>")
    hour = dt.datetime.combine(LAST_MONTH, dt.time(5), tzinfo=dt.UTC)
    alloc = Allocation.objects.create(
        tenant=evil, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL, whole_devices=1,
        device_equivalents=Decimal(1), namespace="evil-r1", status="active", starts_at=hour)
    usage_hour(alloc, hour, Decimal(3600), Decimal(900), Decimal("2.5"))
    refresh_months({(alloc.pk, LAST_MONTH)})
    client.force_login(finance_user)
    body = client.get(reverse("billing:overview")).content.decode()
    assert "<script>alert(1)</script>" not in body and "<script>s()</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert (f'<td><a href="/billing/ev&quot;&gt;&lt;script&gt;s()&lt;/script&gt;/'
            f'{LAST_MONTH:%Y-%m}/">EUR\u00a02.50</a></td>') in body


@pytest.fixture
def users(lead, other_lead, member, admin_user, finance_user):
    return {"lead": lead, "other_lead": other_lead, "member": member, "admin": admin_user,
            "finance": finance_user}


@pytest.mark.parametrize(("who", "sees_acme", "sees_globex"), [
    ("finance", True, True), ("admin", True, True), ("lead", True, False),
    ("member", True, False), ("other_lead", False, True)])
def test_overview_is_scoped(client, users, billed, who, sees_acme, sees_globex):
    client.force_login(users[who])
    body = client.get(reverse("billing:overview")).content.decode()
    assert ("Acme" in body) is sees_acme and ("Globex" in body) is sees_globex


def test_overview_sorts_filters_and_exports_csv(client, finance_user, billed):
    client.force_login(finance_user)
    body = client.get(reverse("billing:overview"), {"sort": "name"}).content.decode()
    assert body.index("Acme") < body.index("Globex")
    body = client.get(reverse("billing:overview"), {"sort": "amount"}).content.decode()
    assert body.index("Acme") < body.index("Globex")  # 10.00 before 5.00
    # Close Acme's month with a EUR 6 credit: charged 4.00 < 5.00, so Globex sorts first,
    # as the figures the page shows say.
    from billing.services import statement_adjust, statement_close

    closed = statement_close(tenant=billed[0].tenant, month=LAST_MONTH, by=finance_user)
    statement_adjust(statement=closed, by=finance_user, amount_value=Decimal("-6.00"),
                     reason="credit", confirm="-6.00")  # over half the bill: confirmed
    body = client.get(reverse("billing:overview"), {"sort": "amount"}).content.decode()
    assert body.index("Globex") < body.index("Acme")
    rows = client.get(reverse("billing:overview"), {"q": "glob"}, HTTP_HX_REQUEST="true")
    assert b"Globex" in rows.content and b"Acme" not in rows.content
    assert b"<html" not in rows.content
    csv = client.get(reverse("billing:overview"), {"format": "csv"}).content.decode()
    assert csv.splitlines()[0] == ("tenant,month,allocated_device_hours,used_device_hours,"
                                   "idle_device_hours,amount,currency")
    assert f"acme,{LAST_MONTH:%Y-%m},4.0000,1.0000,3.0000,4.00,EUR" in csv  # credit in


@pytest.mark.parametrize(("who", "status"), [
    ("finance", 200), ("lead", 200), ("member", 200), ("other_lead", 404), ("admin", 200)])
def test_statement_page(client, users, billed, who, status):
    client.force_login(users[who])
    url = reverse("billing:statement", args=["acme", f"{LAST_MONTH:%Y-%m}"])
    response = client.get(url)
    assert response.status_code == status
    if status == 200:
        assert b"acme-r1" in response.content and b"10.00" in response.content
        assert b"Used 25.0% of its allocated hours" in response.content  # right-sizing
        hours = client.get(reverse("billing:hours", args=["acme", f"{LAST_MONTH:%Y-%m}",
                                                          billed[0].pk]))
        assert hours.status_code == 200
        body = hours.content.decode()
        # device-hours and money, not raw device-seconds: 4 devices for an hour, 1 used
        assert "4.0000\u00a0h" in body.replace("&nbsp;", "\u00a0") and "14400" not in body
        assert "3.0000\u00a0h" in body.replace("&nbsp;", "\u00a0")  # idle
        assert "EUR\u00a010.00" in body.replace("&nbsp;", "\u00a0")  # the month's line


def test_finance_closes_a_month_and_corrects_it_with_an_adjustment(client, finance_user,
                                                                   lead, billed):
    month = f"{LAST_MONTH:%Y-%m}"
    client.force_login(lead)
    assert client.post(reverse("billing:close", args=["acme", month])).status_code == 403
    client.force_login(finance_user)
    client.post(reverse("billing:close", args=["acme", month]))
    statement = Statement.objects.get(tenant__slug="acme", month=LAST_MONTH)
    assert statement.closed and statement.lines.get().amount == Decimal("10.00")
    # Closed means frozen: new usage changes the live numbers, not the statement.
    usage_hour(billed[0], dt.datetime.combine(LAST_MONTH, dt.time(6), tzinfo=dt.UTC),
          Decimal(14400), Decimal(0), Decimal(10))
    refresh_months({(billed[0].pk, LAST_MONTH)})
    page = client.get(reverse("billing:statement", args=["acme", month])).content.decode()
    assert "10.00" in page and "20.00" not in page
    client.post(reverse("billing:adjust", args=["acme", month]),
                {"amount": "-2.50", "reason": ""})
    assert not Adjustment.objects.exists()  # a reason is required
    client.post(reverse("billing:adjust", args=["acme", month]),
                {"amount": "-2.50", "reason": "Credit for the 5 May outage"})
    adj = Adjustment.objects.get()
    assert adj.amount == Decimal("-2.50") and adj.by == finance_user
    assert AuditEvent.objects.filter(action="statement.adjusted").exists()
    page = client.get(reverse("billing:statement", args=["acme", month])).content.decode()
    assert "7.50" in page  # final after the adjustment
    response = client.post(reverse("billing:close", args=["acme", month]), follow=True)
    assert b"closed already" in response.content


def test_finance_cannot_change_anything_else(client, finance_user, tenant, lead, pools):
    from tests.factories import make_request

    req = make_request(tenant, lead, submit=True)
    client.force_login(finance_user)
    assert client.get(reverse("intake:new")).status_code == 403
    assert client.get(reverse("intake:review_queue")).status_code == 403
    assert client.get(reverse("fleet:fleet")).status_code == 403
    client.post(reverse("intake:review_detail", args=[req.pk]),
                {"action": "approve", "reason": "x"})
    req.refresh_from_db()
    assert req.status == "submitted"


def test_metrics_endpoint(client, billed, settings):
    body = client.get("/metrics").content.decode()
    assert 'aifactory_allocated_device_hours{tenant="acme",pool="shared"} 4.0000' in body
    assert 'aifactory_used_device_hours{tenant="globex",pool="shared"} 0.5000' in body
    settings.PORTAL_METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_focus_export_has_the_specifications_columns_and_types(client, users, billed):
    """FinOps FOCUS (1.0's columns and 1.2's InvoiceId, ServiceSubcategory, SkuMeter): every
    column, in its data type; the cost adds up to the view."""
    import csv
    import io
    import json

    from billing.focus import FOCUS_COLUMNS

    client.force_login(users["finance"])
    response = client.get(reverse("billing:overview"), {"months": 3, "format": "focus"})
    assert response["Content-Disposition"] == 'attachment; filename="focus-charges.csv"'
    reader = csv.DictReader(io.StringIO(response.content.decode()))
    assert reader.fieldnames == [name for name, _ in FOCUS_COLUMNS]
    rows = list(reader)
    assert {r["SubAccountId"] for r in rows} == {"acme", "globex"}
    required = ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost",
                "BillingAccountId", "BillingCurrency", "BillingPeriodStart",
                "BillingPeriodEnd", "ChargeCategory", "ChargePeriodStart", "ChargePeriodEnd",
                "ConsumedQuantity", "ConsumedUnit", "PricingQuantity", "PricingUnit",
                "InvoiceIssuerName", "ProviderName", "PublisherName", "ServiceCategory",
                "ServiceName", "SkuId", "SkuPriceId", "ResourceId", "ChargeDescription",
                "InvoiceId", "ServiceSubcategory", "SkuMeter")
    for row in rows:
        for name, kind in FOCUS_COLUMNS:
            value = row[name]
            if name in required:
                assert value, f"{name} is required"
            if not value:
                continue
            if kind == "Decimal":
                assert Decimal(value).is_finite()
            elif kind == "DateTime":
                assert dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
            elif kind == "JSON":
                assert json.loads(value)["tenant"] == row["SubAccountId"]
        assert row["ChargeCategory"] == "Usage" and row["BillingCurrency"] == "EUR"
        assert row["ChargePeriodStart"] < row["ChargePeriodEnd"]
        assert row["BillingPeriodStart"] <= row["ChargePeriodStart"]
        assert row["ChargePeriodEnd"] <= row["BillingPeriodEnd"]
        # invoiced on the tenant's statement for the month
        assert row["InvoiceId"] == f'{row["SubAccountId"]}:{row["BillingPeriodStart"][:7]}'
    # The cluster the allocation ran in is FOCUS's region (the home cluster has no region
    # label, so its slug); the tags name it too.
    assert {(r["RegionId"], r["RegionName"]) for r in rows} == {("local", "Local cluster")}
    assert {json.loads(r["Tags"])["cluster"] for r in rows} == {"local"}
    acme = sum(Decimal(r["BilledCost"]) for r in rows if r["SubAccountId"] == "acme")
    assert acme == Decimal("10.00")  # the hour billed in the fixture: 4 devices × 2.50
    hours = sum(Decimal(r["PricingQuantity"]) for r in rows if r["SubAccountId"] == "acme")
    assert hours == 4  # GPU-hours charged


def test_a_lead_exports_only_the_own_tenant(client, users, billed):
    import csv
    import io

    client.force_login(users["lead"])
    response = client.get(reverse("billing:overview"), {"format": "focus"})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert rows and {r["SubAccountId"] for r in rows} == {"acme"}


def test_the_tenant_filter_applies_to_the_cards_and_the_chart(client, users, billed):
    client.force_login(users["finance"])
    everyone = client.get(reverse("billing:overview"), {"months": 3}).context["grand"]
    acme = client.get(reverse("billing:overview"), {"months": 3, "q": "acme"}).context["grand"]
    assert everyone["amount"] == Decimal("15.0") and acme["amount"] == Decimal("10.0")
    assert acme["allocated_h"] == 4


def test_the_filter_form_shows_the_filters_in_force(client, finance_user, billed):
    client.force_login(finance_user)
    body = client.get(reverse("billing:overview")).content.decode()
    assert '<option value="6" selected>6</option>' in body  # the default, not the first
    body = client.get(reverse("billing:overview"), {"months": "12", "sort": "name"}
                      ).content.decode()
    assert '<option value="12" selected>12</option>' in body
    assert '<option value="name" selected>Name</option>' in body
    bad = client.get(reverse("billing:overview"), {"months": "7"}).content.decode()
    assert "Ignored: Months" in bad and "6 months" in bad
    assert '<option value="6" selected>6</option>' in bad
    # An empty value is an unset one: the form shows the default the report uses (it once
    # showed no option chosen, so the browser showed 3 and the next change sent it).
    empty = client.get(reverse("billing:overview"), {"months": "", "sort": "", "route": ""}
                       ).content.decode()
    assert '<option value="6" selected>6</option>' in empty and "6 months" in empty
    assert '<option value="amount" selected>Charge</option>' in empty
    assert "Ignored" not in empty
    # A tenant typed in is shown isolated from the words around it (a right-to-left
    # override in it cannot turn the counts after it around).
    rtl = client.get(reverse("billing:overview"), {"q": "\u202eacme"}).content.decode()
    assert "tenant “<bdi>\u202eacme</bdi>”" in rtl


@pytest.mark.parametrize("sort", ["amount", "allocated", "used", "utilisation", "name"])
def test_the_page_sorts_and_pages_in_sql_as_the_exports_do(sort, pools):
    """overview_page (SQL: GROUP BY, ORDER BY, LIMIT) orders tenants exactly as the export
    path (Python sort over every tenant) does, page after page."""
    from billing.selectors import overview, overview_page
    from billing.views import SORTS
    from tests.factories import TenantFactory

    hour = dt.datetime.combine(LAST_MONTH, dt.time(5), tzinfo=dt.UTC)
    touched = set()
    for i in range(7):
        names = ["delta", "Alpha", "golf", "Charlie", "echo", "Bravo", "foxtrot"]
        t = TenantFactory(slug=f"s{i}", name=names[i])
        alloc = Allocation.objects.create(
            tenant=t, pool=pools[Route.SHARED_POOL], route=Route.SHARED_POOL, whole_devices=1,
            device_equivalents=Decimal(1), namespace=f"s{i}-r", status="active",
            starts_at=hour)
        usage_hour(alloc, hour, Decimal(3600 * (i % 3)), Decimal(600 * i), Decimal(10 + i * 3 % 7))
        touched.add((alloc.pk, LAST_MONTH))
    refresh_months(touched)
    expected, _ = overview(None, [LAST_MONTH])
    expected.sort(key=SORTS[sort])
    got = []
    for number in (1, 2, 3):
        page, rows = overview_page(None, [LAST_MONTH], sort=sort, page=number, per_page=3)
        assert page.number == number and len(page) == len(rows) == (3 if number < 3 else 1)
        got += [r.slug for r in rows]
    assert page.paginator.count == 7 and page.paginator.num_pages == 3
    assert got == [r.slug for r in expected]
    assert [r.amount for r in overview_page(None, [LAST_MONTH], sort="amount")[1]] == sorted(
        (r.amount for r in expected), reverse=True)
    # Past the last page or not a number: the last page and the first, as Paginator's get_page.
    assert [r.slug for r in overview_page(None, [LAST_MONTH], sort=sort, page=9,
                                          per_page=3)[1]] == got[6:]
    assert [r.slug for r in overview_page(None, [LAST_MONTH], sort=sort, page="x",
                                          per_page=3)[1]] == got[:3]
    assert [r.slug for r in overview_page(None, [LAST_MONTH], sort=sort, page="9" * 30,
                                          per_page=3)[1]] == got[6:]


def test_a_leads_budget_shows_only_beside_the_whole_of_its_spend(client, lead, tenant, billed):
    from billing.models import Budget

    Budget.objects.create(tenant=tenant, monthly_amount=Decimal(100))
    client.force_login(lead)
    assert "Budget for" in client.get(reverse("billing:overview")).content.decode()
    for query in ({"q": "globex"}, {"route": "shared_pool"}):
        body = client.get(reverse("billing:overview"), query).content.decode()
        assert "Budget for" not in body, query  # not beside nothing, nor beside a route's part
    body = client.get(reverse("billing:overview"), {"route": "shared_pool"}).content.decode()
    assert "route Shared pool" in body


def test_months_close_in_order_and_a_wrong_close_is_reopened_with_a_reason(
        client, finance_user, billed):
    """November cannot be closed over an open October; the latest closed month reopens with
    a reason (audited) until an adjustment is made; a refused adjustment keeps its text."""
    from billing.models import Statement, UsageMonth
    from billing.services import BillingError, statement_close, statement_reopen
    from tenants.models import AuditEvent

    acme = billed[0].tenant
    earlier = month_start(LAST_MONTH - dt.timedelta(days=1))
    UsageMonth.objects.create(allocation=billed[0], tenant=acme, pool=billed[0].pool,
                              month=earlier, allocated_s=3600, used_s=0, credit_s=0,
                              borrowed_s=0, charged_s=3600, amount=Decimal("2.50"), hours=1)
    with pytest.raises(BillingError, match=f"Close {earlier:%B %Y} first"):
        statement_close(tenant=acme, month=LAST_MONTH, by=finance_user)
    statement_close(tenant=acme, month=earlier, by=finance_user)
    closed = statement_close(tenant=acme, month=LAST_MONTH, by=finance_user)
    with pytest.raises(BillingError, match="reason"):
        statement_reopen(statement=closed, by=finance_user, reason=" ")
    first = Statement.objects.get(tenant=acme, month=earlier)
    with pytest.raises(BillingError, match="reopen that first"):
        statement_reopen(statement=first, by=finance_user, reason="wrong")
    client.force_login(finance_user)
    month = f"{LAST_MONTH:%Y-%m}"
    refused = client.post(reverse("billing:adjust", args=["acme", month]),
                          {"amount": "1.234", "reason": "Credit for the outage on the 5th"})
    assert refused.status_code == 400
    body = refused.content.decode()
    assert "at most 2 decimal places" in body and "Credit for the outage on the 5th" in body
    assert client.post(reverse("billing:reopen", args=["acme", month]),
                       {"reason": "Closed before the late DCGM data arrived"}).status_code == 302
    closed.refresh_from_db()
    assert not closed.closed and not closed.lines.exists()
    event = AuditEvent.objects.get(action="statement.reopened")
    assert event.reason == "Closed before the late DCGM data arrived"
    assert event.data["closed_total"] == "10.00"


def test_a_statement_downloads_as_csv_with_the_statements_own_numbers(client, finance_user,
                                                                     lead, other_lead, billed):
    import csv as csvlib
    import io

    from billing.services import statement_adjust, statement_close

    closed = statement_close(tenant=billed[0].tenant, month=LAST_MONTH, by=finance_user)
    statement_adjust(statement=closed, by=finance_user, amount_value="-1.50",
                     reason="Goodwill, ticket 42")
    url = reverse("billing:statement", args=["acme", f"{LAST_MONTH:%Y-%m}"]) + "?format=csv"
    client.force_login(other_lead)
    assert client.get(url).status_code == 404
    client.force_login(lead)
    response = client.get(url)
    assert response.status_code == 200
    assert response["Content-Disposition"].endswith(f'statement-acme-{LAST_MONTH:%Y-%m}.csv"')
    rows = list(csvlib.DictReader(io.StringIO(response.content.decode())))
    kinds = [r["kind"] for r in rows]
    assert kinds == ["line", "total", "adjustment", "final"]
    final = client.get(reverse("billing:statement", args=["acme", f"{LAST_MONTH:%Y-%m}"]))
    assert Decimal(rows[-1]["amount"]) == final.context["final"] == Decimal("8.50")
    assert rows[2]["description"] == "Goodwill, ticket 42" and rows[0]["currency"] == "EUR"


def test_a_statement_downloads_as_pdf_and_from_the_api_with_the_same_numbers(
        client, finance_user, lead, other_lead, billed):
    """The PDF read back: tenant, month, status, each line's description, the total, the
    adjustment with its reason, and the final amount in the portal's currency, the same as
    the CSV the API serves (one document, billing.exports). Another tenant's lead: 404."""
    import csv as csvlib
    import io

    from pypdf import PdfReader

    from billing.services import statement_adjust, statement_close

    billed[0].tenant.name = "Acme Øresund"  # beyond ASCII: the statement keeps it
    billed[0].tenant.save(update_fields=["name"])
    closed = statement_close(tenant=billed[0].tenant, month=LAST_MONTH, by=finance_user)
    statement_adjust(statement=closed, by=finance_user, amount_value="-1.50",
                     reason="Goodwill, ticket 42")
    month = f"{LAST_MONTH:%Y-%m}"
    page = reverse("billing:statement", args=["acme", month])
    client.force_login(other_lead)
    assert client.get(page + "?format=pdf").status_code == 404
    assert client.get(f"/api/billing/acme:{month}/pdf/").status_code == 404
    client.force_login(lead)
    response = client.get(page + "?format=pdf")
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert response["Content-Disposition"].endswith(f'statement-acme-{month}.pdf"')
    assert client.get(f"/api/billing/acme:{month}/pdf/").content[:5] == b"%PDF-"
    text = " ".join(p.extract_text() for p in PdfReader(io.BytesIO(response.content)).pages)
    text = " ".join(text.split())
    rows = list(csvlib.DictReader(io.StringIO(
        client.get(f"/api/billing/acme:{month}/csv/").content.decode())))
    assert [r["kind"] for r in rows] == ["line", "total", "adjustment", "final"]
    assert "Acme Øresund" in text and LAST_MONTH.strftime("%B %Y") in text and "closed" in text
    assert rows[0]["description"] in text and "Goodwill, ticket 42" in text
    total, final = Decimal(rows[1]["amount"]), Decimal(rows[-1]["amount"])
    assert f"{total:,.2f}" in text and f"Final: EUR {final:,.2f}" in text
    assert final == total - Decimal("1.50")


def test_finance_sees_the_month_so_far_in_money(client, finance_user, lead, billed):
    """Spend this month (the statements' number), forecast, budgets near or over, and the top
    tenants — for finance; a lead's cost page does not show other tenants' money."""
    from billing.figures import month_figures
    from billing.models import Budget
    from billing.services import refresh_months

    this = month_start(timezone.now())
    hour = dt.datetime.combine(this, dt.time(0), tzinfo=dt.UTC)
    for alloc, amount in zip(billed, (Decimal("30.00"), Decimal("12.50")), strict=True):
        usage_hour(alloc, hour, Decimal(3600), Decimal(1800), amount)
    refresh_months({(a.pk, this) for a in billed})
    Budget.objects.create(tenant=billed[0].tenant, monthly_amount=Decimal("25"), from_month=this)
    client.force_login(finance_user)
    ctx = client.get(reverse("billing:overview")).context["this_month"]
    finals = {f.tenant: f.final for f in month_figures(months=[this])}
    assert ctx["spent"] == sum(finals.values()) == Decimal("42.50")
    assert [t["name"] for t in ctx["top"]] == ["Acme", "Globex"]
    assert ctx["over"] == 1 and ctx["budgets"] == 1
    client.force_login(lead)
    assert client.get(reverse("billing:overview")).context["this_month"] is None


def test_the_statement_shows_what_was_written_to_its_month_since_the_last_view(
        client, finance_user, lead, billed):
    """The page, the API and the CSV read one kept view of the month: each write behind a
    view (new usage, the close, an adjustment, its withdrawal) shows on the next, the same
    on all three."""
    import csv as csvlib
    import io

    from billing.services import adjustment_withdraw, statement_adjust, statement_close

    month = f"{LAST_MONTH:%Y-%m}"
    page = reverse("billing:statement", args=["acme", month])
    client.force_login(lead)

    def seen():
        shown = client.get(page)
        api = client.get(f"/api/billing/acme:{month}/").json()
        rows = list(csvlib.DictReader(io.StringIO(client.get(page + "?format=csv")
                                                  .content.decode())))
        assert Decimal(api["figures"]["final"]) == shown.context["final"] \
            == Decimal(rows[-1]["amount"])
        return shown, api, [r["kind"] for r in rows]

    shown, api, kinds = seen()
    assert shown.context["final"] == Decimal("10.00") and not shown.context["statement"]
    assert kinds == ["line", "total", "final"] and api["adjustments"] == []

    usage_hour(billed[0], dt.datetime.combine(LAST_MONTH, dt.time(6), tzinfo=dt.UTC),
               Decimal(14400), Decimal(0), Decimal(10))
    refresh_months({(billed[0].pk, LAST_MONTH)})
    shown, _api, _kinds = seen()
    assert shown.context["final"] == Decimal("20.00")

    closed = statement_close(tenant=billed[0].tenant, month=LAST_MONTH, by=finance_user)
    shown, _api, _kinds = seen()
    assert shown.context["statement"].closed
    assert f"by {finance_user.username}; lines are frozen" in shown.content.decode()

    credit = statement_adjust(statement=closed, by=finance_user, amount_value="-2.50",
                              reason="Goodwill, ticket 42")
    shown, api, kinds = seen()
    assert shown.context["final"] == Decimal("17.50")
    assert kinds == ["line", "total", "adjustment", "final"]
    assert [a["reason"] for a in api["adjustments"]] == ["Goodwill, ticket 42"]
    assert "Goodwill, ticket 42" in shown.content.decode()

    adjustment_withdraw(adjustment=credit, by=finance_user, reason="Credited twice")
    shown, api, kinds = seen()
    assert shown.context["final"] == Decimal("20.00")
    assert kinds == ["line", "total", "adjustment", "withdrawal", "final"]
    assert api["adjustments"][0]["withdrawn_by"] == api["adjustments"][1]["id"]
